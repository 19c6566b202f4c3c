/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* One exchange on an upstream connection: connect, send the request, read the response, retry once on
 * a fresh connection when a pooled one was stale, and the timers that bound it all. Lifecycle:
 * CONNECTING → (HANDSHAKE, upstream-tls.c) → SENDING → RECEIVING, then either IDLE in the pool
 * (upstream-pool.c: the host keeps it alive) or freed. Callbacks into the owner run from inside
 * upstream_parse() (upstream-response.c); the owner never frees the Upstream there, it returns < 0 and
 * this module cancels after the parser has returned. This is the top of the upstream files: it drives
 * the handshake by what upstream_handshake() returns. The Upstream's own primitives (freeing it,
 * re-arming its socket's edges, its one timer, the loop's time) are here too, and the pool uses them. */

#include <assert.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "modelgated/upstream/upstream-internal.h"
#include "shared/log.h"

static void upstream_io_cb(SocketWatch *w, int fd, uint32_t revents, void *userdata);
static int upstream_timer_cb(sd_event_source *s, uint64_t usec, void *userdata);
static void touch(Upstream *u);

const char *upstream_strerror(int error) {
        switch (error < 0 ? -error : error) {
        case ECONNREFUSED:
                return "connection refused";
        case ECONNRESET:
                return "connection reset";
        case EHOSTUNREACH:
                return "no route to host";
        case ENETUNREACH:
                return "network unreachable";
        case ETIMEDOUT:
                return "no answer in time";
        case ETIME:
                return "it sent nothing for UpstreamIdleTimeoutSec=";
        case EPIPE:
                return "connection closed";
        case EPROTO:
                return "malformed response (or a failed TLS handshake)";
        case EKEYREJECTED:
                return "its TLS certificate is not trusted (SSL_CERT_FILE= names other trusted CAs)";
        case ECONNABORTED:
                return "connection closed before the response ended";
        case EHOSTDOWN:
                return "its probe found it down";
        case EMFILE:
        case ENFILE:
                return "out of file descriptors";
        default:
                return strerror(error < 0 ? -error : error);
        }
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
        upstream_parser_done(u);
        free(u->authority);
        free(u);
        return NULL;
}

int upstream_rearm(Upstream *u) {
        assert(u);
        return socket_watch_rearm(u->io);
}

int upstream_arm_timer(Upstream *u, usec_t deadline) {
        assert(u);
        if (deadline == USEC_INFINITY)
                return u->timer.source ? lazy_timer_set(&u->timer, USEC_INFINITY) : 0;
        /* upstream_connect() made it, and nothing arms it before that */
        assert(u->timer.source);
        return lazy_timer_set(&u->timer, deadline);
}

usec_t upstream_now(const Upstream *u) {
        assert(u);
        usec_t now;

        /* the time sd-event compares its timers with, as touch() in upstream-connection.c uses; it cannot
         * fail for CLOCK_MONOTONIC, and before the loop first runs it is the time now */
        now = socket_watch_loop_now(u->pool->event);
        return now;
}

static Upstream *upstream_detach(Upstream *u) {
        u->cb = NULL;
        u->userdata = NULL;
        return u;
}

/* Ends the exchange with an error towards the owner, and frees the connection. */
static void upstream_fail(Upstream *u, int error) {
        const UpstreamCallbacks *cb = u->cb;
        void *userdata = u->userdata;
        bool started = u->headers_done;

        upstream_detach(u);
        upstream_free(u);
        if (cb && cb->on_error)
                cb->on_error(NULL, error, started, userdata);
}

void upstream_set_idempotent(Upstream *u) {
        assert(u);
        u->idempotent = true;
}

void upstream_set_owner(Upstream *u, const UpstreamCallbacks *cb, void *userdata) {
        assert(u);
        u->cb = cb;
        u->userdata = userdata;
}

Upstream *upstream_cancel(Upstream *u) {
        if (!u)
                return NULL;
        upstream_detach(u);
        if (u->in_parser) {
                /* we are inside one of our own callbacks; finish there */
                u->cancel_error = -ECANCELED;
                return NULL;
        }
        return upstream_free(u);
}

bool upstream_answer_started(const Upstream *u) {
        assert(u);
        return u->headers_done;
}

void upstream_set_read_budget(Upstream *u, size_t bytes) {
        assert(u);
        u->read_budget = bytes;
}

int upstream_set_deadline(Upstream *u, usec_t usec) {
        assert(u);
        u->deadline = usec == USEC_INFINITY ? USEC_INFINITY : upstream_now(u) + usec;
        if (u->state != UPSTREAM_CONNECTING)
                return upstream_arm_timer(u, u->deadline);
        return 0;
}

void upstream_set_reading(Upstream *u, bool on) {
        if (!u || u->reading == on)
                return;
        u->reading = on;
        /* input left while paused has no edge to come: a re-armed one brings it through the loop, not
         * read from here, where the owner is in the middle of a flush */
        if (on && u->read_pending)
                (void)upstream_rearm(u);
}

static void upstream_finish_ok(Upstream *u, size_t leftover) {
        const UpstreamCallbacks *cb = u->cb;
        void *userdata = u->userdata;
        /* only a connection whose request went out whole and whose answer was read whole: a host that
         * answered early (413 before reading a big body) would take the next request's bytes for the
         * rest of this body */
        bool reuse = u->resp.keep_alive && leftover == 0 && u->request_sent == buffer_size(&u->request) &&
                     !u->peer_shut; /* a FIN already read raises no edge in the pool */

        upstream_detach(u);
        if (reuse)
                upstream_pool_put(u);
        else
                upstream_free(u);

        if (cb && cb->on_complete)
                cb->on_complete(NULL, userdata);
}

static int upstream_connect(Upstream *u);

/* A failure before the host said anything, on a connection from the pool (rule:retry-idempotent): try a
 * fresh one once, when nothing of the request can have been acted on (as nginx does): nothing of it was
 * written, or the method is idempotent. A POST whose bytes went out may have been read, and is not sent
 * twice. */
static bool upstream_maybe_retry(Upstream *u) {
        if (!u->reused || u->retried || u->got_bytes || (u->request_sent > 0 && !u->idempotent))
                return false;
        log_debug("Pooled connection to %s failed before an answer, retrying on a new one", u->authority);
        u->io = socket_watch_free(u->io);
        upstream_tls_close(u);
        u->fd = safe_close(u->fd);
        u->reused = false;
        u->retried = true;
        u->request_sent = 0;
        if (upstream_connect(u) < 0)
                return false;
        return true;
}

static void upstream_handle_eof(Upstream *u) {
        if (!u->got_bytes) {
                if (upstream_maybe_retry(u))
                        return;
                upstream_fail(u, u->write_error ?: -ECONNRESET);
                return;
        }
        /* A response without length ends here (older llama.cpp builds end streams like this) */
        if (upstream_parse_eof(u) > 0) {
                upstream_finish_ok(u, 1); /* never reuse a closed connection */
                return;
        }
        upstream_fail(u, -ECONNABORTED);
}

/* The owner's cancel, or a callback's refusal, after the parser has returned */
static void upstream_end_cancelled(Upstream *u) {
        if (!u->cb) { /* the owner cancelled: nobody to tell */
                upstream_free(u);
                return;
        }
        upstream_fail(u, u->cancel_error);
}

/* What one read brought: parsed, and handed to the owner. false: the exchange ended (u is gone, or
 * pooled) */
static bool upstream_take(Upstream *u, const char *buf, size_t k) {
        touch(u);
        if (u->state == UPSTREAM_SENDING)
                u->state = UPSTREAM_RECEIVING; /* the host answers before reading the whole request */
        u->got_bytes = true;
        size_t used = 0;
        u->in_parser = true;
        int r = upstream_parse(u, buf, k, &used);
        u->in_parser = false;

        if (u->cancel_error)
                return upstream_end_cancelled(u), false;
        if (r > 0)
                return upstream_finish_ok(u, k - used), false;
        if (r < 0) {
                if (r == -EPROTO)
                        log_debug("Malformed response from %s: %s", u->authority, u->parse.reason);
                return upstream_fail(u, -EPROTO), false;
        }
        /* what this read gave the owner goes on now, in one write (head and body alike) */
        if (u->cb && u->cb->on_read_end) {
                u->in_parser = true;
                u->cb->on_read_end(u, u->userdata);
                u->in_parser = false;
                if (u->cancel_error)
                        return upstream_end_cancelled(u), false;
        }
        return true;
}

/* Edge-triggered: read until a plain read comes back short (the socket was empty then; what comes later
 * raises an edge of its own), or up to EAGAIN through TLS (a record at a time: short says nothing), or
 * until the owner cannot take more (read_pending: input may be left, and resuming re-arms the edge), or
 * until this dispatch has read its budget: the rest waits for the next turn of the loop, behind every
 * other socket that is ready (nginx and haproxy bound a connection's share of a turn the same way), and
 * the re-armed edge brings it. Without that, a host that sends as fast as we read (a feed's flood) would
 * keep the loop here for as long as it likes. After the host's FIN the socket is read to its end: that
 * edge is spent. false: the exchange ended, or moved on to a new connection. */
static bool upstream_read(Upstream *u) {
        char buf[UPSTREAM_READ_SIZE];
        size_t budget = u->read_budget ?: UPSTREAM_READ_BUDGET;

        u->read_pending = false;
        for (;;) {
                if (!u->reading) {
                        u->read_pending = true;
                        return true;
                }
                if (budget == 0) {
                        u->read_pending = true;
                        (void)upstream_rearm(u);
                        return true;
                }
                size_t want = MIN(sizeof(buf), budget);
                ssize_t k = upstream_io_read(u, buf, want);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN)
                                return true;
                        int error = -errno;
                        if (!u->got_bytes && upstream_maybe_retry(u))
                                return false;
                        if (!u->got_bytes && u->write_error)
                                error = u->write_error;
                        return upstream_fail(u, error), false;
                }
                if (k == 0)
                        return upstream_handle_eof(u), false;
                budget -= (size_t)k;
                if (!upstream_take(u, buf, (size_t)k) || u->state != UPSTREAM_RECEIVING)
                        return false;
                if (!u->ssl && (size_t)k < want && !u->peer_shut)
                        return true;
        }
}

static void upstream_write(Upstream *u) {
        while (u->request_sent < buffer_size(&u->request)) {
                ssize_t k = upstream_io_write(u, buffer_peek(&u->request) + u->request_sent,
                                              buffer_size(&u->request) - u->request_sent);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN) /* the socket is full: its EPOLLOUT edge goes on */
                                return;
                        int error = -errno;
                        if (upstream_maybe_retry(u))
                                return;
                        /* RFC 9112 §9.5: a host may answer before it has read the whole request (cpp-httplib
                         * sends 400 for a head it refuses and closes with the body unread), and the reset
                         * that follows fails our send. The answer is in the socket before the reset: it is
                         * the request's answer, read as any other (never reused: the request did not go out
                         * whole); only with nothing to read is the failed send the outcome. */
                        if (error == -EPIPE || error == -ECONNRESET) {
                                u->state = UPSTREAM_RECEIVING;
                                u->peer_shut = true;
                                u->write_error = error;
                                (void)upstream_read(u);
                                return;
                        }
                        upstream_fail(u, error);
                        return;
                }
                u->request_sent += (size_t)k;
        }
        u->state = UPSTREAM_RECEIVING;
}

/* Connected (and, for https, the handshake done): the request goes, bounded by the owner's deadline
 * from now on instead of the connect timeout. */
static void upstream_connected(Upstream *u) {
        u->state = UPSTREAM_SENDING;
        if (upstream_arm_timer(u, u->deadline) < 0) {
                upstream_fail(u, -ENOMEM);
                return;
        }
        upstream_write(u);
}

static void upstream_handshake_step(Upstream *u) {
        int r = upstream_handshake(u);

        if (r < 0)
                upstream_fail(u, r);
        else if (r > 0)
                upstream_connected(u);
        /* else it waits for the socket's next edge */
}

static void upstream_io_cb(SocketWatch *w, int fd, uint32_t revents, void *userdata) {
        Upstream *u = userdata;
        /* the socket is registered for EPOLLOUT always: an event may say only that it is writable */
        bool input = revents & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR);

        if (revents & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))
                u->peer_shut = true;
        switch (u->state) {
        case UPSTREAM_IDLE:
                /* the host closed (or sent something unasked): this connection is done */
                if (input)
                        upstream_free(u);
                return;

        case UPSTREAM_CONNECTING: {
                if (!(revents & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
                        return;
                int error = 0;
                socklen_t l = sizeof(error);
                if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &l) < 0)
                        error = errno;
                if (error != 0) {
                        upstream_fail(u, -error);
                        return;
                }
                if (u->ssl) {
                        /* the connect timer keeps running: a TLS handshake that stalls is no answer either
                         */
                        u->state = UPSTREAM_HANDSHAKE;
                        upstream_handshake_step(u);
                        return;
                }
                upstream_connected(u);
                return;
        }

        case UPSTREAM_HANDSHAKE:
                upstream_handshake_step(u);
                return;

        case UPSTREAM_SENDING:
                /* an answer first: a host that answers early stops the sending (TLS may read nothing) */
                if (((revents & EPOLLIN) || u->read_pending) &&
                    (!upstream_read(u) || u->state != UPSTREAM_SENDING))
                        return;
                if (revents & (EPOLLOUT | EPOLLERR | EPOLLHUP))
                        upstream_write(u);
                return;

        case UPSTREAM_RECEIVING:
                /* read_pending: the re-armed edge of input left for this turn, which may say only that
                 * the socket is writable (through TLS the rest may wait in the library, not the socket) */
                if (input || u->read_pending)
                        (void)upstream_read(u);
                return;
        }
}

static int upstream_timer_cb(sd_event_source *s, uint64_t usec, void *userdata) {
        Upstream *u = userdata;

        if (u->state == UPSTREAM_IDLE)
                upstream_free(u);
        else if (u->state != UPSTREAM_CONNECTING && u->idle_timeout != USEC_INFINITY) {
                /* the bound moves with each read lazily: the timer is only pushed back when it fires */
                usec_t due = u->last_activity + u->idle_timeout;
                if (due > usec) {
                        u->deadline = due;
                        (void)upstream_arm_timer(u, due);
                        return 0;
                }
                /* silence after connecting: a host that is stuck (or a prompt longer than the bound)
                 * (rule:upstream-idle) */
                upstream_fail(u, -ETIME);
        } else
                /* a connect that never completes is a host that is not there */
                upstream_fail(u, -ETIMEDOUT);
        return 0;
}

/* Each sign of life from the host pushes the idle bound back. */
static void touch(Upstream *u) {
        if (u->idle_timeout != USEC_INFINITY)
                u->last_activity = socket_watch_loop_now(u->pool->event);
}

int upstream_set_idle_timeout(Upstream *u, usec_t usec) {
        assert(u);
        u->idle_timeout = usec == 0 ? USEC_INFINITY : usec;
        if (u->idle_timeout == USEC_INFINITY)
                return 0;
        touch(u);
        u->deadline = u->last_activity + u->idle_timeout;
        return u->state == UPSTREAM_CONNECTING ? 0 : upstream_arm_timer(u, u->deadline);
}

static int upstream_connect(Upstream *u) {
        _cleanup_close_ int fd = -1;
        int r, one = 1;

        fd = socket(u->address.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        if (u->address.ss_family != AF_UNIX)
                (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        r = connect(fd, (struct sockaddr *)&u->address, u->address_len);
        if (r < 0 && errno != EINPROGRESS)
                return -errno;

        if (u->tls_host) {
                r = upstream_tls_new(u, fd);
                if (r < 0)
                        return r;
        }
        /* the one registration of the socket: the edge of the connect's end is an EPOLLOUT */
        r = socket_watch_add(u->pool->sockets, fd, UPSTREAM_EVENTS, upstream_io_cb, u, &u->io);
        if (r < 0)
                return r;
        u->fd = TAKE_FD(fd);
        u->state = UPSTREAM_CONNECTING;
        u->got_bytes = u->headers_done = u->complete = false;
        u->read_pending = u->peer_shut = false;
        u->n_interim = 0;
        u->write_error = 0;
        upstream_parser_init(u);
        /* the timer is made here, where what its expiry means is known; a retry re-arms the one it has */
        usec_t deadline = upstream_now(u) + UPSTREAM_CONNECT_TIMEOUT_USEC;
        if (!u->timer.source) {
                r = lazy_timer_init(&u->timer, u->pool->event, upstream_timer_cb, u);
                if (r < 0)
                        return r;
        }
        return upstream_arm_timer(u, deadline);
}

static Upstream *upstream_new(UpstreamPool *p, const HttpUrl *url) {
        Upstream *u = calloc(1, sizeof(Upstream));

        if (!u)
                return NULL;
        u->pool = p;
        u->fd = -1;
        memcpy(&u->address, &url->address, url->address_len);
        u->address_len = url->address_len;
        u->authority = strdup(url->authority);
        u->tls_host = url->tls ? strdup(url->host) : NULL;
        if (!u->authority || (url->tls && !u->tls_host)) {
                free(u->authority);
                free(u->tls_host);
                free(u);
                return NULL;
        }
        return u;
}

/* A pooled socket is writable: the request goes now, in one send() as a rule. Anything but a full send
 * is left to the loop, so that a failure reaches the owner after it has stored the pointer we return
 * (and a stale connection is retried there): after EAGAIN the socket's EPOLLOUT edge comes, after an
 * error a re-armed edge brings it. */
static int upstream_send_reused(Upstream *u) {
        ssize_t k = upstream_io_write(u, buffer_peek(&u->request), buffer_size(&u->request));

        if (k > 0)
                u->request_sent = (size_t)k;
        if (u->request_sent == buffer_size(&u->request))
                u->state = UPSTREAM_RECEIVING;
        else if (k < 0 && errno != EAGAIN) {
                int r = upstream_rearm(u);
                if (r < 0)
                        return r;
        }
        return upstream_arm_timer(u, u->deadline);
}

int upstream_start(UpstreamPool *p, const HttpUrl *url, Buffer *request, bool head_request,
                   const UpstreamCallbacks *cb, void *userdata, Upstream **ret) {
        Upstream *u;
        int r;

        u = upstream_pool_take(p, url);
        if (u) {
                u->reused = true;
                u->state = UPSTREAM_SENDING;
        } else {
                u = upstream_new(p, url);
                if (!u)
                        return -ENOMEM;
        }
        u->request = *request;
        *request = (Buffer){};
        u->request_sent = 0;
        u->retried = false;
        u->n_interim = 0;
        u->write_error = 0;
        u->idempotent =
                !(buffer_size(&u->request) >= 5 && memcmp(buffer_peek(&u->request), "POST ", 5) == 0) &&
                !(buffer_size(&u->request) >= 6 && memcmp(buffer_peek(&u->request), "PATCH ", 6) == 0);
        u->head_request = head_request;
        u->cb = cb;
        u->userdata = userdata;
        u->reading = true;
        u->read_budget = 0;
        u->deadline = USEC_INFINITY;
        u->idle_timeout = USEC_INFINITY;
        u->cancel_error = 0;

        r = u->reused ? upstream_send_reused(u) : upstream_connect(u);
        if (r < 0) {
                upstream_detach(u);
                upstream_free(u);
                return r;
        }
        *ret = u;
        return 0;
}
