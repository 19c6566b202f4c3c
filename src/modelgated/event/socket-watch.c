/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* One epoll set for the proxy's sockets, dispatched in batches: see socket-watch.h. */

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "modelgated/event/socket-watch.h"
#include "shared/log.h"
#include "shared/macro.h"
#include "shared/time-util.h"

/* nginx reads 512 events at once; 1000 streams under way bring about that many per tick */
#define SOCKET_WATCH_BATCH 256

struct SocketWatch {
        SocketWatchSet *set;
        int fd;
        uint32_t events;
        uint32_t pending; /* read by the running batch, not dispatched yet */
        socket_watch_handler_t handler;
        void *userdata;
};

struct SocketWatchSet {
        sd_event_source *source;
        int epoll_fd;
        /* the running batch: entries from next on are still to dispatch; a freed watch's entry is NULL */
        struct epoll_event batch[SOCKET_WATCH_BATCH];
        size_t n_batch, next;
};

/* The running batch's loop and its time (0: not asked yet), for socket_watch_loop_now() */
static sd_event *batch_event;
static uint64_t batch_now;

uint64_t socket_watch_loop_now(sd_event *event) {
        uint64_t t;

        if (event == batch_event && batch_now > 0)
                return batch_now;
        /* before the loop first runs it is the time now; without a loop (NULL), too */
        if (sd_event_now(event, CLOCK_MONOTONIC, &t) < 0)
                t = now_usec(CLOCK_MONOTONIC);
        if (event == batch_event)
                batch_now = t;
        return t;
}

static int batch_cb(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        SocketWatchSet *set = userdata;

        int n = epoll_wait(set->epoll_fd, set->batch, SOCKET_WATCH_BATCH, 0);
        if (n < 0) {
                /* an error here would switch the source off, and every connection with it */
                if (errno != EINTR)
                        log_warning_errno(errno, "Reading the sockets' events failed: %m");
                return 0;
        }
        /* marked first, so that a watch freed by an earlier handler in the batch is found and skipped */
        for (int i = 0; i < n; i++) {
                SocketWatch *w = set->batch[i].data.ptr;
                w->pending = set->batch[i].events;
        }
        set->n_batch = (size_t)n;
        /* the lines the batch logs (a request's access line) are written at its end, in this turn */
        log_batch_begin();
        batch_event = sd_event_source_get_event(s);
        batch_now = 0;
        for (set->next = 0; set->next < set->n_batch;) {
                SocketWatch *w = set->batch[set->next++].data.ptr;
                if (!w)
                        continue;
                uint32_t ev = w->pending;
                w->pending = 0;
                w->handler(w, w->fd, ev, w->userdata);
        }
        batch_event = NULL;
        log_batch_end();
        set->n_batch = set->next = 0;
        return 0;
}

int socket_watch_set_new(sd_event *event, SocketWatchSet **ret) {
        SocketWatchSet *set = calloc(1, sizeof(SocketWatchSet));
        int r;

        if (!set)
                return -ENOMEM;
        set->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
        r = set->epoll_fd < 0 ? -errno
                              : sd_event_add_io(event, &set->source, set->epoll_fd, EPOLLIN, batch_cb, set);
        if (r < 0) {
                socket_watch_set_free(set);
                return r;
        }
        (void)sd_event_source_set_description(set->source, "sockets");
        *ret = set;
        return 0;
}

SocketWatchSet *socket_watch_set_free(SocketWatchSet *set) {
        if (!set)
                return NULL;
        sd_event_source_disable_unref(set->source);
        safe_close(set->epoll_fd);
        return mfree(set);
}

int socket_watch_add(SocketWatchSet *set, int fd, uint32_t events, socket_watch_handler_t handler,
                     void *userdata, SocketWatch **ret) {
        assert(set);
        SocketWatch *w = malloc(sizeof(SocketWatch));

        if (!w)
                return -ENOMEM;
        *w = (SocketWatch){.set = set, .fd = fd, .events = events, .handler = handler, .userdata = userdata};
        struct epoll_event ev = {.events = events, .data.ptr = w};
        if (epoll_ctl(set->epoll_fd, EPOLL_CTL_ADD, fd, &ev) < 0) {
                int r = -errno;
                free(w);
                return r;
        }
        *ret = w;
        return 0;
}

SocketWatch *socket_watch_free(SocketWatch *w) {
        if (!w)
                return NULL;
        SocketWatchSet *set = w->set;
        if (w->pending)
                for (size_t i = set->next; i < set->n_batch; i++)
                        if (set->batch[i].data.ptr == w)
                                set->batch[i].data.ptr = NULL;
        (void)epoll_ctl(set->epoll_fd, EPOLL_CTL_DEL, w->fd, NULL);
        return mfree(w);
}

int socket_watch_rearm(SocketWatch *w) {
        assert(w);
        struct epoll_event ev = {.events = w->events, .data.ptr = w};
        return epoll_ctl(w->set->epoll_fd, EPOLL_CTL_MOD, w->fd, &ev) < 0 ? -errno : 0;
}

uint32_t socket_watch_pending(const SocketWatch *w) {
        assert(w);
        return w->pending;
}

bool socket_watch_in_batch(const SocketWatch *w) {
        assert(w);
        return w->set->n_batch > 0;
}
