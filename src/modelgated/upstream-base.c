/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The Upstream's own primitives, which both the exchange (upstream-connection.c) and the pool
 * (upstream-pool.c) use: freeing it, re-arming its socket's edges, its one timer, and the loop's
 * time. They sit below both so that the pool, which holds connections between exchanges, does not
 * call back into the exchange. Unlinking from the pool's idle list is here too, because
 * freeing an idle connection must do it. The timer's source is made by upstream-connection.c, which
 * owns what expiry means; here it is only set and stopped. */

#include <assert.h>
#include <unistd.h>

#include "modelgated/upstream-internal.h"

void upstream_pool_remove(Upstream *u) {
        LIST_REMOVE(idle, u->pool->idle, u);
        u->pool->n_idle--;
}

Upstream *upstream_free(Upstream *u) {
        if (!u)
                return NULL;
        if (u->state == UPSTREAM_IDLE)
                upstream_pool_remove(u);
        socket_watch_free(u->io);
        lazy_timer_done(&u->timer);
        upstream_tls_close(u);
        free(u->tls_host);
        safe_close(u->fd);
        buffer_done(&u->request);
        buffer_done(&u->resp.head);
        free(u->resp.headers);
        free(u->authority);
        free(u);
        return NULL;
}

int upstream_rearm(Upstream *u) {
        return socket_watch_rearm(u->io);
}

int upstream_arm_timer(Upstream *u, usec_t deadline) {
        if (deadline == USEC_INFINITY)
                return u->timer.source ? lazy_timer_set(&u->timer, USEC_INFINITY) : 0;
        /* upstream_connect() made it, and nothing arms it before that */
        assert(u->timer.source);
        return lazy_timer_set(&u->timer, deadline);
}

usec_t upstream_now(const Upstream *u) {
        usec_t now;

        /* the time sd-event compares its timers with, as touch() in upstream-connection.c uses; it cannot
         * fail for CLOCK_MONOTONIC, and before the loop first runs it is the time now */
        (void)sd_event_now(u->pool->event, CLOCK_MONOTONIC, &now);
        return now;
}
