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

/* Dispatches the first n entries of set->batch, as epoll_wait() filled them */
static void batch_dispatch(SocketWatchSet *set, sd_event *event, size_t n) {
        /* marked first, so that a watch freed by an earlier handler in the batch is found and skipped */
        for (size_t i = 0; i < n; i++) {
                SocketWatch *w = set->batch[i].data.ptr;
                if (w)
                        w->pending = set->batch[i].events;
        }
        set->n_batch = n;
        /* the lines the batch logs (a request's access line) are written at its end, in this turn */
        log_batch_begin();
        batch_event = event;
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
        batch_dispatch(set, sd_event_source_get_event(s), (size_t)n);
        return 0;
}

/* What stands in the set for the loop's own epoll fd (socket_watch_loop()) */
static char loop_marker;

/* One turn of socket_watch_loop() after sd_event_prepare() said nothing is pending: waits on the sockets
 * and the loop's fd at once, lets sd-event read its own (for its time of the turn, which the handlers ask
 * for, and its sources), then dispatches the sockets. Returns sd_event_wait()'s answer. */
static int loop_turn(SocketWatchSet *set, sd_event *event) {
        int n = epoll_wait(set->epoll_fd, set->batch, SOCKET_WATCH_BATCH, -1);
        if (n < 0 && errno != EINTR)
                log_warning_errno(errno, "Reading the sockets' events failed: %m");
        int r = sd_event_wait(event, 0);
        if (r < 0 || n <= 0)
                return r;
        for (int i = 0; i < n; i++)
                if (set->batch[i].data.ptr == &loop_marker)
                        set->batch[i].data.ptr = NULL;
        batch_dispatch(set, event, (size_t)n);
        return r;
}

int socket_watch_loop(SocketWatchSet *set) {
        assert(set);
        sd_event *event = sd_event_source_get_event(set->source);
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &loop_marker};
        int r, code = 0;

        /* the set leaves the loop's epoll set before the loop's fd joins the set's: no circle */
        r = sd_event_source_set_enabled(set->source, SD_EVENT_OFF);
        if (r >= 0 && epoll_ctl(set->epoll_fd, EPOLL_CTL_ADD, sd_event_get_fd(event), &ev) < 0)
                r = -errno;
        while (r >= 0) {
                r = sd_event_prepare(event);
                if (r == 0)
                        r = loop_turn(set, event);
                /* the loop ends in a dispatch: sd_event_exit()'s */
                if (r > 0 && (r = sd_event_dispatch(event)) >= 0 &&
                    sd_event_get_state(event) == SD_EVENT_FINISHED)
                        break;
        }
        (void)epoll_ctl(set->epoll_fd, EPOLL_CTL_DEL, sd_event_get_fd(event), NULL);
        (void)sd_event_source_set_enabled(set->source, SD_EVENT_ON);
        if (r < 0)
                return r;
        (void)sd_event_get_exit_code(event, &code);
        return code;
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
