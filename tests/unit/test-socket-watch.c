/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The sockets' epoll set (socket-watch.h) on a real sd-event loop and socketpairs: every ready socket is
 * dispatched in one turn; a watch freed by an earlier handler of the same batch is skipped, and its
 * pending events were visible until then; input left unread comes back only when re-armed; a batch
 * larger than one epoll_wait() loses nothing. */

#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "modelgated/event/socket-watch.h"
#include "tests.h"

#define N_MANY 300 /* more than one batch */

typedef struct Peer {
        int fds[2]; /* [0] watched, [1] the other end */
        SocketWatch *watch;
        unsigned dispatched;
        uint32_t revents;
        struct Peer *victim; /* freed by this one's handler */
        uint32_t victim_pending;
} Peer;

static void handler(SocketWatch *w, int fd, uint32_t revents, void *userdata) {
        Peer *p = userdata;
        ASSERT_TRUE(w == p->watch);
        ASSERT_EQ(fd, p->fds[0]);
        ASSERT_TRUE(socket_watch_in_batch(w));
        p->dispatched++;
        p->revents = revents;
        if (p->victim && p->victim->watch) {
                p->victim_pending = socket_watch_pending(p->victim->watch);
                p->victim->watch = socket_watch_free(p->victim->watch);
        }
}

static void peer_open(SocketWatchSet *set, Peer *p) {
        *p = (Peer){};
        ASSERT_OK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, p->fds));
        ASSERT_OK(socket_watch_add(set, p->fds[0], EPOLLIN | EPOLLRDHUP | EPOLLET, handler, p, &p->watch));
}

static void peer_send(Peer *p) {
        ASSERT_EQ(write(p->fds[1], "x", 1), 1);
}

static void peer_close(Peer *p) {
        p->watch = socket_watch_free(p->watch);
        close(p->fds[0]);
        close(p->fds[1]);
}

static unsigned turns_until_quiet(sd_event *e) {
        unsigned turns = 0;
        /* sd_event_run(e, 0): one turn that does not wait; 0 when nothing was dispatched */
        while (sd_event_run(e, 0) > 0)
                turns++;
        return turns;
}

TEST(every_ready_socket_is_dispatched_in_one_turn) {
        sd_event *e;
        SocketWatchSet *set;
        Peer p[8];
        ASSERT_OK(sd_event_new(&e));
        ASSERT_OK(socket_watch_set_new(e, &set));
        for (size_t i = 0; i < 8; i++)
                peer_open(set, &p[i]);
        for (size_t i = 0; i < 8; i++)
                peer_send(&p[i]);

        ASSERT_EQ(sd_event_run(e, 0), 1);
        for (size_t i = 0; i < 8; i++) {
                ASSERT_EQ(p[i].dispatched, 1u);
                ASSERT_EQ(p[i].revents, EPOLLIN);
        }
        ASSERT_EQ(turns_until_quiet(e), 0u);
        for (size_t i = 0; i < 8; i++)
                peer_close(&p[i]);
        socket_watch_set_free(set);
        sd_event_unref(e);
}

TEST(a_watch_freed_by_an_earlier_handler_of_its_batch_is_skipped) {
        sd_event *e;
        SocketWatchSet *set;
        Peer a, b;
        ASSERT_OK(sd_event_new(&e));
        ASSERT_OK(socket_watch_set_new(e, &set));
        peer_open(set, &a);
        peer_open(set, &b);
        /* whichever the batch has first frees the other */
        a.victim = &b;
        b.victim = &a;
        peer_send(&a);
        peer_send(&b);

        ASSERT_EQ(sd_event_run(e, 0), 1);
        ASSERT_EQ(a.dispatched + b.dispatched, 1u);
        Peer *first = a.dispatched ? &a : &b, *second = a.dispatched ? &b : &a;
        ASSERT_EQ(first->victim_pending, EPOLLIN);
        ASSERT_TRUE(second->watch == NULL);
        ASSERT_EQ(turns_until_quiet(e), 0u);
        ASSERT_EQ(second->dispatched, 0u);
        peer_close(&a);
        peer_close(&b);
        socket_watch_set_free(set);
        sd_event_unref(e);
}

TEST(input_left_unread_comes_back_only_when_rearmed) {
        sd_event *e;
        SocketWatchSet *set;
        Peer p;
        ASSERT_OK(sd_event_new(&e));
        ASSERT_OK(socket_watch_set_new(e, &set));
        peer_open(set, &p);
        peer_send(&p);

        ASSERT_EQ(turns_until_quiet(e), 1u);
        ASSERT_EQ(p.dispatched, 1u);
        /* the byte is still there, and no new edge says so */
        ASSERT_EQ(turns_until_quiet(e), 0u);
        ASSERT_EQ(socket_watch_pending(p.watch), 0u);
        ASSERT_TRUE(!socket_watch_in_batch(p.watch));
        ASSERT_OK(socket_watch_rearm(p.watch));
        ASSERT_EQ(turns_until_quiet(e), 1u);
        ASSERT_EQ(p.dispatched, 2u);
        peer_close(&p);
        socket_watch_set_free(set);
        sd_event_unref(e);
}

TEST(more_ready_sockets_than_a_batch_are_all_dispatched) {
        sd_event *e;
        SocketWatchSet *set;
        static Peer p[N_MANY];
        ASSERT_OK(sd_event_new(&e));
        ASSERT_OK(socket_watch_set_new(e, &set));
        for (size_t i = 0; i < N_MANY; i++)
                peer_open(set, &p[i]);
        for (size_t i = 0; i < N_MANY; i++)
                peer_send(&p[i]);

        ASSERT_EQ(turns_until_quiet(e), 2u);
        for (size_t i = 0; i < N_MANY; i++)
                ASSERT_EQ(p[i].dispatched, 1u);
        for (size_t i = 0; i < N_MANY; i++)
                peer_close(&p[i]);
        socket_watch_set_free(set);
        sd_event_unref(e);
}

TESTS_MAIN
