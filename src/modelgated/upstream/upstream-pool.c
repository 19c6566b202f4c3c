/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The idle connections hosts keep alive, so that the next request to the same address (and, for https,
 * the same name) skips the connect and the handshake. A connection goes idle only after an exchange
 * that ended cleanly; it stays for a few seconds at most, is closed when the host closes it, and is
 * checked once more when taken, since the host may have closed it a moment ago (a look at its socket
 * only after it has been idle for a while, see UPSTREAM_POOL_TRUST_USEC). The pool also owns
 * the process's TLS context (upstream-tls.c makes it). */

#include <assert.h>
#include <string.h>
#include <sys/socket.h>

#include "modelgated/upstream/upstream-internal.h"
#include "shared/errno-util.h"

/* Unlinking from the idle list is the pool's, and freeing an idle connection does it too. */
void upstream_pool_remove(Upstream *u) {
        assert(u);
        LIST_REMOVE(idle, u->pool->idle, u);
        u->pool->n_idle--;
}

int upstream_pool_new(sd_event *event, SocketWatchSet *sockets, UpstreamPool **ret) {
        UpstreamPool *p = calloc(1, sizeof(UpstreamPool));
        if (!p)
                return -ENOMEM;
        p->event = sd_event_ref(event);
        p->sockets = sockets;
        *ret = p;
        return 0;
}

UpstreamPool *upstream_pool_free(UpstreamPool *p) {
        if (!p)
                return NULL;
        upstream_pool_stop(p);
        p->tls_ctx = upstream_tls_context_free(p->tls_ctx);
        sd_event_unref(p->event);
        return mfree(p);
}

void upstream_pool_stop(UpstreamPool *p) {
        assert(p);
        p->stopping = true;
        while (p->idle)
                upstream_free(p->idle);
}

static Upstream *pool_find(UpstreamPool *p, const HttpUrl *url) {
        LIST_FOREACH (idle, u, p->idle)
                if (u->address_len == url->address_len &&
                    memcmp(&u->address, &url->address, url->address_len) == 0 && !!u->tls_host == url->tls &&
                    (!url->tls || streq(u->tls_host, url->host)))
                        return u;
        return NULL;
}

/* Whether a pooled connection looks open: its socket is peeked only after UPSTREAM_POOL_TRUST_USEC, or when
 * taken outside the sockets' batch (a probe's or a refresh's timer), where a close the host sent may not
 * have been read from the kernel yet */
static bool pool_alive(Upstream *u) {
        char b;

        /* an event the loop has read but not dispatched yet: the host closed, or sent something unasked
         * (an EPOLLOUT alone is room freed in its socket) */
        if (socket_watch_pending(u->io) & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
                return false;
        if (socket_watch_in_batch(u->io) && upstream_now(u) < u->idle_since + UPSTREAM_POOL_TRUST_USEC)
                return true;
        ssize_t k = recv(u->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
        /* through TLS, bytes may be a session ticket */
        return (k < 0 && ERRNO_IS_TRANSIENT(errno)) || (k > 0 && u->ssl);
}

Upstream *upstream_pool_take(UpstreamPool *p, const HttpUrl *url) {
        Upstream *u;

        /* a pooled connection the host has closed meanwhile (its FIN not yet seen by the loop) is
         * dropped before anything is written on it */
        while ((u = pool_find(p, url))) {
                if (pool_alive(u)) {
                        upstream_pool_remove(u);
                        break;
                }
                /* still idle: freeing it takes it out of the pool, and out of the count, once */
                upstream_free(u);
        }
        return u;
}

void upstream_pool_put(Upstream *u) {
        assert(u);
        UpstreamPool *p = u->pool;

        if (p->stopping || p->n_idle >= UPSTREAM_IDLE_MAX) {
                upstream_free(u);
                return;
        }
        u->state = UPSTREAM_IDLE;
        u->reused = u->retried = u->got_bytes = u->headers_done = u->complete = false;
        u->head_request = false;
        buffer_done(&u->request);
        u->request_sent = 0;
        u->reading = true;
        u->read_pending = false;
        upstream_parser_init(u);
        LIST_PREPEND(idle, p->idle, u);
        p->n_idle++;
        /* its socket stays registered as it was: an edge while idle is the host closing it */
        u->idle_since = upstream_now(u);
        if (upstream_arm_timer(u, u->idle_since + UPSTREAM_IDLE_TIMEOUT_USEC) < 0)
                upstream_free(u);
}
