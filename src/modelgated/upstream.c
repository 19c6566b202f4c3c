/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Upstream connections. Lifecycle: CONNECTING → SENDING → RECEIVING, then
 * either IDLE in the pool (the host keeps it alive) or freed.
 * Callbacks into the owner run from inside llhttp_execute(); the owner never
 * frees the Upstream there, it returns < 0 and this module cancels after the
 * parser has returned. */

#include <fcntl.h>
#include <llhttp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "modelgated/upstream.h"
#include "shared/log.h"

#define UPSTREAM_READ_SIZE (64 * 1024)
#define UPSTREAM_CONNECT_TIMEOUT_USEC (10 * USEC_PER_SEC)
/* below llama.cpp's (cpp-httplib's) 5 s keep-alive, so that we rarely send into a closing socket */
#define UPSTREAM_IDLE_TIMEOUT_USEC (4 * USEC_PER_SEC)
#define UPSTREAM_IDLE_MAX 64

typedef enum UpstreamState {
        UPSTREAM_CONNECTING,
        UPSTREAM_HANDSHAKE, /* https: TLS after the TCP connect */
        UPSTREAM_SENDING,
        UPSTREAM_RECEIVING,
        UPSTREAM_IDLE,
} UpstreamState;

struct UpstreamPool {
        sd_event *event;
        SSL_CTX *tls_ctx; /* for https:// hosts and fallbacks, made when first needed */
        Upstream *idle;
        size_t n_idle;
        bool stopping; /* nothing goes back into the pool */
};

struct Upstream {
        UpstreamPool *pool;
        UpstreamState state;
        int fd;
        sd_event_source *io, *timer;
        struct sockaddr_storage address;
        socklen_t address_len;
        char *authority;
        SSL *ssl;            /* https */
        char *tls_host;      /* https: the name (or address) the certificate must be for; NULL: http */
        uint32_t tls_events; /* what the handshake waits for */

        Buffer request;
        size_t request_sent;
        bool head_request;
        bool idempotent; /* not POST or PATCH: may be sent again after a failure */
        bool reused;
        bool retried;
        bool got_bytes;
        bool headers_done;
        bool complete;
        bool reading;
        bool in_parser;
        int cancel_error; /* set by a callback's refusal or an error while in the parser */

        llhttp_t parser;
        UpstreamResponse resp;
        bool in_value;

        const UpstreamCallbacks *cb;
        void *userdata;
        usec_t deadline;
        usec_t idle_timeout;  /* the host may send nothing this long (USEC_INFINITY: no bound) */
        usec_t last_activity; /* when it last sent something (the loop's time: no clock read per read) */

        LIST_FIELDS(Upstream, idle);
};

static int upstream_io_cb(sd_event_source *s, int fd, uint32_t revents, void *userdata);
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
        case EMFILE:
        case ENFILE:
                return "out of file descriptors";
        default:
                return strerror(error < 0 ? -error : error);
        }
}

Span upstream_response_header_name(const UpstreamResponse *r, size_t i) {
        return (Span){buffer_peek(&r->head) + r->headers[i].name, r->headers[i].name_len};
}

Span upstream_response_header_value(const UpstreamResponse *r, size_t i) {
        return (Span){buffer_peek(&r->head) + r->headers[i].value, r->headers[i].value_len};
}

Span upstream_response_header(const UpstreamResponse *r, const char *name) {
        size_t l = strlen(name);
        for (size_t i = 0; i < r->n_headers; i++) {
                Span n = upstream_response_header_name(r, i);
                if (n.n == l && strncasecmp(n.p, name, l) == 0)
                        return upstream_response_header_value(r, i);
        }
        return (Span){};
}

static void response_reset(UpstreamResponse *r) {
        buffer_clear(&r->head);
        r->n_headers = 0;
        r->status = 0;
        r->chunked = r->has_content_length = r->keep_alive = false;
        r->content_length = 0;
}

static Upstream *upstream_free(Upstream *u) {
        if (!u)
                return NULL;
        if (u->state == UPSTREAM_IDLE) {
                LIST_REMOVE(idle, u->pool->idle, u);
                u->pool->n_idle--;
        }
        sd_event_source_disable_unref(u->io);
        sd_event_source_disable_unref(u->timer);
        SSL_free(u->ssl);
        free(u->tls_host);
        safe_close(u->fd);
        buffer_done(&u->request);
        buffer_done(&u->resp.head);
        free(u->resp.headers);
        free(u->authority);
        free(u);
        return NULL;
}

int upstream_pool_new(sd_event *event, UpstreamPool **ret) {
        UpstreamPool *p = calloc(1, sizeof(UpstreamPool));
        if (!p)
                return -ENOMEM;
        p->event = sd_event_ref(event);
        *ret = p;
        return 0;
}

UpstreamPool *upstream_pool_free(UpstreamPool *p) {
        if (!p)
                return NULL;
        upstream_pool_stop(p);
        SSL_CTX_free(p->tls_ctx);
        sd_event_unref(p->event);
        return mfree(p);
}

void upstream_pool_stop(UpstreamPool *p) {
        p->stopping = true;
        while (p->idle)
                upstream_free(p->idle);
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

static int update_io(Upstream *u) {
        uint32_t events = 0;

        switch (u->state) {
        case UPSTREAM_CONNECTING:
                events = EPOLLOUT;
                break;
        case UPSTREAM_HANDSHAKE:
                events = u->tls_events;
                break;
        case UPSTREAM_SENDING:
                events = EPOLLOUT | EPOLLIN; /* a host may answer (an error) before it read everything */
                break;
        case UPSTREAM_RECEIVING:
                events = u->reading ? EPOLLIN : 0;
                break;
        case UPSTREAM_IDLE:
                events = EPOLLIN; /* the host closing its end, or garbage */
                break;
        }
        if (events == 0)
                return sd_event_source_set_enabled(u->io, SD_EVENT_OFF);
        /* edge-triggered, like the client side (see client_update_events()) */
        int r = sd_event_source_set_io_events(u->io, events | EPOLLET);
        if (r < 0)
                return r;
        return sd_event_source_set_enabled(u->io, SD_EVENT_ON);
}

static int arm_timer(Upstream *u, usec_t deadline) {
        if (deadline == USEC_INFINITY)
                return u->timer ? sd_event_source_set_enabled(u->timer, SD_EVENT_OFF) : 0;
        if (!u->timer)
                return sd_event_add_time(u->pool->event, &u->timer, CLOCK_MONOTONIC, deadline, 0,
                                         upstream_timer_cb, u);
        int r = sd_event_source_set_time(u->timer, deadline);
        if (r < 0)
                return r;
        return sd_event_source_set_enabled(u->timer, SD_EVENT_ONESHOT);
}

int upstream_set_deadline(Upstream *u, usec_t usec) {
        u->deadline = usec == USEC_INFINITY ? USEC_INFINITY : now_usec(CLOCK_MONOTONIC) + usec;
        if (u->state != UPSTREAM_CONNECTING)
                return arm_timer(u, u->deadline);
        return 0;
}

void upstream_set_reading(Upstream *u, bool on) {
        if (!u || u->reading == on)
                return;
        u->reading = on;
        (void)update_io(u);
}

/* llhttp callbacks for the response */

static Upstream *upstream_of(llhttp_t *l) {
        return l->data;
}

static int on_message_begin(llhttp_t *l) {
        Upstream *u = upstream_of(l);
        response_reset(&u->resp);
        u->in_value = false;
        return 0;
}

static int on_header_field(llhttp_t *l, const char *at, size_t n) {
        Upstream *u = upstream_of(l);
        UpstreamResponse *r = &u->resp;

        if (buffer_size(&r->head) + n > 256 * 1024)
                return -1;
        if (r->n_headers == 0 || u->in_value) {
                if (r->n_headers == r->n_headers_alloc) {
                        size_t a = r->n_headers_alloc ? r->n_headers_alloc * 2 : 16;
                        if (a > 1024)
                                return -1;
                        __typeof__(r->headers) h = realloc(r->headers, a * sizeof(*r->headers));
                        if (!h)
                                return -1;
                        r->headers = h;
                        r->n_headers_alloc = a;
                }
                r->headers[r->n_headers].name = buffer_size(&r->head);
                r->headers[r->n_headers].name_len = 0;
                r->headers[r->n_headers].value = 0;
                r->headers[r->n_headers].value_len = 0;
                r->n_headers++;
                u->in_value = false;
        }
        if (buffer_append(&r->head, at, n) < 0)
                return -1;
        r->headers[r->n_headers - 1].name_len += n;
        return 0;
}

static int on_header_field_complete(llhttp_t *l) {
        Upstream *u = upstream_of(l);
        u->resp.headers[u->resp.n_headers - 1].value = buffer_size(&u->resp.head);
        u->in_value = true;
        return 0;
}

static int on_header_value(llhttp_t *l, const char *at, size_t n) {
        Upstream *u = upstream_of(l);
        UpstreamResponse *r = &u->resp;

        if (buffer_size(&r->head) + n > 256 * 1024)
                return -1;
        if (buffer_append(&r->head, at, n) < 0)
                return -1;
        r->headers[r->n_headers - 1].value_len += n;
        return 0;
}

static int on_headers_complete(llhttp_t *l) {
        Upstream *u = upstream_of(l);
        UpstreamResponse *r = &u->resp;

        r->status = l->status_code;
        /* 1xx interim responses are not forwarded: we never send "Expect:" upstream */
        if (r->status >= 100 && r->status < 200)
                return 0;
        r->chunked = (l->flags & F_CHUNKED) != 0;
        r->has_content_length = (l->flags & F_CONTENT_LENGTH) != 0;
        r->content_length = l->content_length;
        r->keep_alive = llhttp_should_keep_alive(l);
        u->headers_done = true;

        if (u->cb && u->cb->on_headers && u->cb->on_headers(u, r, u->userdata) < 0) {
                u->cancel_error = -ECANCELED;
                return -1;
        }
        if (u->cancel_error)
                return -1;
        /* RFC 9110 §9.3.2, §15.3.5, §15.4.5: no body, whatever the headers say */
        if (u->head_request || r->status == 204 || r->status == 304)
                return 1;
        return 0;
}

static int on_body(llhttp_t *l, const char *at, size_t n) {
        Upstream *u = upstream_of(l);

        if (u->cb && u->cb->on_body && u->cb->on_body(u, at, n, u->userdata) < 0) {
                u->cancel_error = -ECANCELED;
                return -1;
        }
        return u->cancel_error ? -1 : 0;
}

static int on_message_complete(llhttp_t *l) {
        Upstream *u = upstream_of(l);

        if (u->resp.status >= 100 && u->resp.status < 200) {
                u->headers_done = false;
                return 0;
        }
        u->complete = true;
        u->resp.keep_alive = llhttp_should_keep_alive(l);
        return HPE_PAUSED;
}

static const llhttp_settings_t response_settings = {
        .on_message_begin = on_message_begin,
        .on_header_field = on_header_field,
        .on_header_field_complete = on_header_field_complete,
        .on_header_value = on_header_value,
        .on_headers_complete = on_headers_complete,
        .on_body = on_body,
        .on_message_complete = on_message_complete,
};

static void upstream_finish_ok(Upstream *u, size_t leftover) {
        const UpstreamCallbacks *cb = u->cb;
        void *userdata = u->userdata;
        UpstreamPool *p = u->pool;
        /* only a connection whose request went out whole and whose answer was read whole: a host that
         * answered early (413 before reading a big body) would take the next request's bytes for the
         * rest of this body */
        bool reuse = u->resp.keep_alive && leftover == 0 && u->request_sent == buffer_size(&u->request) &&
                     !p->stopping && p->n_idle < UPSTREAM_IDLE_MAX;

        upstream_detach(u);
        if (reuse) {
                u->state = UPSTREAM_IDLE;
                u->reused = u->retried = u->got_bytes = u->headers_done = u->complete = false;
                u->head_request = false;
                buffer_done(&u->request);
                u->request_sent = 0;
                u->reading = true;
                llhttp_init(&u->parser, HTTP_RESPONSE, &response_settings);
                u->parser.data = u;
                LIST_PREPEND(idle, p->idle, u);
                p->n_idle++;
                if (update_io(u) < 0 ||
                    arm_timer(u, now_usec(CLOCK_MONOTONIC) + UPSTREAM_IDLE_TIMEOUT_USEC) < 0)
                        upstream_free(u);
        } else
                upstream_free(u);

        if (cb && cb->on_complete)
                cb->on_complete(NULL, userdata);
}

static int upstream_connect(Upstream *u);

/* A failure before the host said anything, on a connection from the pool: try a fresh one once, when
 * nothing of the request can have been acted on (as nginx does): nothing of it was written, or the
 * method is idempotent. A POST whose bytes went out may have been read, and is not sent twice. */
static bool upstream_maybe_retry(Upstream *u) {
        if (!u->reused || u->retried || u->got_bytes || (u->request_sent > 0 && !u->idempotent))
                return false;
        log_debug("Pooled connection to %s failed before an answer, retrying on a new one", u->authority);
        sd_event_source_disable_unref(u->io);
        u->io = NULL;
        SSL_free(u->ssl);
        u->ssl = NULL;
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
                return upstream_fail(u, -ECONNRESET);
        }
        /* A response without length ends here (older llama.cpp builds end streams like this) */
        u->in_parser = true;
        llhttp_errno_t e = llhttp_finish(&u->parser);
        u->in_parser = false;
        if (u->complete && !u->cancel_error)
                return upstream_finish_ok(u, 1); /* never reuse a closed connection */
        if (u->cancel_error)
                return upstream_fail(u, u->cancel_error);
        (void)e;
        upstream_fail(u, -ECONNABORTED);
}

/* read(2) and send(2), through TLS for https: the same results (bytes, 0 at the end, -1 with errno, EAGAIN
 * when it must wait), so that one state machine serves both */
static ssize_t tls_result(Upstream *u, int k, bool reading) {
        if (k > 0)
                return k;
        switch (SSL_get_error(u->ssl, k)) {
        case SSL_ERROR_ZERO_RETURN:
                if (reading)
                        return 0;
                errno = EPIPE;
                return -1;
        case SSL_ERROR_WANT_READ:
        case SSL_ERROR_WANT_WRITE:
                errno = EAGAIN;
                return -1;
        case SSL_ERROR_SYSCALL:
                if (errno == 0) {
                        /* closed without close_notify: what plain HTTP would see */
                        if (reading)
                                return 0;
                        errno = EPIPE;
                }
                return -1;
        default:
                errno = EPROTO;
                return -1;
        }
}

static ssize_t io_read(Upstream *u, void *buf, size_t n) {
        if (!u->ssl)
                return read(u->fd, buf, n);
        ERR_clear_error();
        return tls_result(u, SSL_read(u->ssl, buf, (int)MIN(n, (size_t)INT_MAX)), true);
}

static ssize_t io_write(Upstream *u, const void *buf, size_t n) {
        if (!u->ssl)
                return send(u->fd, buf, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        ERR_clear_error();
        return tls_result(u, SSL_write(u->ssl, buf, (int)MIN(n, (size_t)INT_MAX)), false);
}

static void upstream_read(Upstream *u) {
        char buf[UPSTREAM_READ_SIZE];

        /* edge-triggered: read until the socket is empty, or the owner cannot take more (then the
         * source is disabled, and enabling it again re-arms the edge); each read goes on at once */
        while (u->reading) {
                ssize_t k = io_read(u, buf, sizeof(buf));
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN)
                                return;
                        if (!u->got_bytes && upstream_maybe_retry(u))
                                return;
                        return upstream_fail(u, -errno);
                }
                if (k == 0)
                        return upstream_handle_eof(u);
                touch(u);

                if (u->state == UPSTREAM_SENDING) {
                        /* the host answers before reading the whole request; stop sending */
                        u->state = UPSTREAM_RECEIVING;
                        if (update_io(u) < 0)
                                return upstream_fail(u, -ENOMEM);
                }
                u->got_bytes = true;
                u->in_parser = true;
                llhttp_errno_t e = llhttp_execute(&u->parser, buf, (size_t)k);
                u->in_parser = false;

                if (u->cancel_error) {
                        if (!u->cb) /* the owner cancelled: nobody to tell */
                                return (void)upstream_free(u);
                        return upstream_fail(u, u->cancel_error);
                }
                if (e == HPE_PAUSED && u->complete) {
                        size_t used = (size_t)(llhttp_get_error_pos(&u->parser) - buf);
                        return upstream_finish_ok(u, (size_t)k - used);
                }
                if (e != HPE_OK) {
                        log_debug("Malformed response from %s: %s", u->authority,
                                  llhttp_get_error_reason(&u->parser));
                        return upstream_fail(u, -EPROTO);
                }
                /* what this read gave the owner goes on now, in one write (head and body alike) */
                if (u->cb && u->cb->on_read_end) {
                        u->in_parser = true;
                        u->cb->on_read_end(u, u->userdata);
                        u->in_parser = false;
                        if (u->cancel_error) {
                                if (!u->cb)
                                        return (void)upstream_free(u);
                                return upstream_fail(u, u->cancel_error);
                        }
                }
                if (u->state != UPSTREAM_RECEIVING)
                        return;
        }
}

static void upstream_handshake(Upstream *u);

static void upstream_write(Upstream *u) {
        while (u->request_sent < buffer_size(&u->request)) {
                ssize_t k = io_write(u, buffer_peek(&u->request) + u->request_sent,
                                     buffer_size(&u->request) - u->request_sent);
                if (k < 0) {
                        if (errno == EAGAIN || errno == EINTR)
                                return;
                        if (upstream_maybe_retry(u))
                                return;
                        return upstream_fail(u, -errno);
                }
                u->request_sent += (size_t)k;
        }
        u->state = UPSTREAM_RECEIVING;
        if (update_io(u) < 0)
                upstream_fail(u, -ENOMEM);
}

static void upstream_handshake(Upstream *u) {
        ERR_clear_error();
        int k = SSL_do_handshake(u->ssl);

        if (k == 1) {
                u->state = UPSTREAM_SENDING;
                if (update_io(u) < 0 || arm_timer(u, u->deadline) < 0)
                        return upstream_fail(u, -ENOMEM);
                return upstream_write(u);
        }
        switch (SSL_get_error(u->ssl, k)) {
        case SSL_ERROR_WANT_READ:
                u->tls_events = EPOLLIN;
                break;
        case SSL_ERROR_WANT_WRITE:
                u->tls_events = EPOLLOUT;
                break;
        default: {
                long v = SSL_get_verify_result(u->ssl);
                if (v != X509_V_OK) {
                        log_debug("TLS to %s: %s", u->authority, X509_verify_cert_error_string(v));
                        return upstream_fail(u, -EKEYREJECTED);
                }
                log_debug("TLS to %s failed: %s", u->authority,
                          ERR_reason_error_string(ERR_peek_last_error()) ?: "?");
                return upstream_fail(u, -EPROTO);
        }
        }
        if (update_io(u) < 0)
                upstream_fail(u, -ENOMEM);
}

static int upstream_io_cb(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        Upstream *u = userdata;

        switch (u->state) {
        case UPSTREAM_IDLE:
                /* the host closed (or sent something unasked): this connection is done */
                upstream_free(u);
                return 0;

        case UPSTREAM_CONNECTING: {
                int error = 0;
                socklen_t l = sizeof(error);
                if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &l) < 0)
                        error = errno;
                if (error != 0) {
                        upstream_fail(u, -error);
                        return 0;
                }
                if (u->ssl) {
                        /* the connect timer keeps running: a TLS handshake that stalls is no answer either
                         */
                        u->state = UPSTREAM_HANDSHAKE;
                        upstream_handshake(u);
                        return 0;
                }
                u->state = UPSTREAM_SENDING;
                if (update_io(u) < 0 || arm_timer(u, u->deadline) < 0) {
                        upstream_fail(u, -ENOMEM);
                        return 0;
                }
                upstream_write(u);
                return 0;
        }

        case UPSTREAM_HANDSHAKE:
                upstream_handshake(u);
                return 0;

        case UPSTREAM_SENDING:
                if (revents & EPOLLIN) {
                        upstream_read(u);
                        return 0;
                }
                if (revents & (EPOLLOUT | EPOLLERR | EPOLLHUP))
                        upstream_write(u);
                return 0;

        case UPSTREAM_RECEIVING:
                upstream_read(u);
                return 0;
        }
        return 0;
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
                        (void)arm_timer(u, due);
                        return 0;
                }
                /* silence after connecting: a host that is stuck (or a prompt longer than the bound) */
                upstream_fail(u, -ETIME);
        } else
                /* a connect that never completes is a host that is not there */
                upstream_fail(u, -ETIMEDOUT);
        return 0;
}

/* Each sign of life from the host pushes the idle bound back. */
static void touch(Upstream *u) {
        if (u->idle_timeout != USEC_INFINITY)
                (void)sd_event_now(u->pool->event, CLOCK_MONOTONIC, &u->last_activity);
}

int upstream_set_idle_timeout(Upstream *u, usec_t usec) {
        u->idle_timeout = usec == 0 ? USEC_INFINITY : usec;
        if (u->idle_timeout == USEC_INFINITY)
                return 0;
        touch(u);
        u->deadline = u->last_activity + u->idle_timeout;
        return u->state == UPSTREAM_CONNECTING ? 0 : arm_timer(u, u->deadline);
}

/* One TLS context for the process: the system's trusted CAs ($SSL_CERT_FILE/$SSL_CERT_DIR when set),
 * certificates verified, TLS 1.2 at least. */
static SSL_CTX *tls_context(UpstreamPool *p) {
        if (p->tls_ctx)
                return p->tls_ctx;
        SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
        if (!ctx)
                return NULL;
        if (SSL_CTX_set_default_verify_paths(ctx) != 1 ||
            SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1) {
                SSL_CTX_free(ctx);
                return NULL;
        }
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
        SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
        p->tls_ctx = ctx;
        return ctx;
}

static int upstream_tls_new(Upstream *u, int fd) {
        SSL_CTX *ctx = tls_context(u->pool);
        struct in6_addr a;
        bool ip = inet_pton(AF_INET, u->tls_host, &a) == 1 || inet_pton(AF_INET6, u->tls_host, &a) == 1;

        if (!ctx)
                return -ENOMEM;
        SSL_free(u->ssl);
        u->ssl = SSL_new(ctx);
        if (!u->ssl || SSL_set_fd(u->ssl, fd) != 1)
                return -ENOMEM;
        if (ip) {
                if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(u->ssl), u->tls_host) != 1)
                        return -EINVAL;
        } else if (SSL_set_tlsext_host_name(u->ssl, u->tls_host) != 1 ||
                   SSL_set1_host(u->ssl, u->tls_host) != 1)
                return -ENOMEM;
        SSL_set_connect_state(u->ssl);
        u->tls_events = EPOLLOUT;
        return 0;
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
        r = sd_event_add_io(u->pool->event, &u->io, fd, EPOLLOUT | EPOLLET, upstream_io_cb, u);
        if (r < 0)
                return r;
        u->fd = TAKE_FD(fd);
        u->state = UPSTREAM_CONNECTING;
        u->got_bytes = u->headers_done = u->complete = false;
        llhttp_init(&u->parser, HTTP_RESPONSE, &response_settings);
        u->parser.data = u;
        r = update_io(u);
        if (r < 0)
                return r;
        return arm_timer(u, now_usec(CLOCK_MONOTONIC) + UPSTREAM_CONNECT_TIMEOUT_USEC);
}

static Upstream *pool_take(UpstreamPool *p, const HttpUrl *url) {
        LIST_FOREACH (idle, u, p->idle)
                if (u->address_len == url->address_len &&
                    memcmp(&u->address, &url->address, url->address_len) == 0 && !!u->tls_host == url->tls &&
                    (!url->tls || streq(u->tls_host, url->host))) {
                        LIST_REMOVE(idle, p->idle, u);
                        p->n_idle--;
                        return u;
                }
        return NULL;
}

int upstream_start(UpstreamPool *p, const HttpUrl *url, Buffer *request, bool head_request,
                   const UpstreamCallbacks *cb, void *userdata, Upstream **ret) {
        Upstream *u;
        int r;

        /* a pooled connection the host has closed meanwhile (its FIN not yet seen by the loop) is
         * dropped before anything is written on it */
        while ((u = pool_take(p, url))) {
                char b;
                ssize_t k = recv(u->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
                if ((k < 0 && (errno == EAGAIN || errno == EINTR)) || (k > 0 && u->ssl))
                        break; /* alive (through TLS, bytes may be a session ticket) */
                upstream_free(u);
        }
        if (u) {
                u->reused = true;
                u->state = UPSTREAM_SENDING;
        } else {
                u = calloc(1, sizeof(Upstream));
                if (!u)
                        return -ENOMEM;
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
                        return -ENOMEM;
                }
        }
        u->request = *request;
        *request = (Buffer){};
        u->request_sent = 0;
        u->retried = false;
        u->idempotent =
                !(buffer_size(&u->request) >= 5 && memcmp(buffer_peek(&u->request), "POST ", 5) == 0) &&
                !(buffer_size(&u->request) >= 6 && memcmp(buffer_peek(&u->request), "PATCH ", 6) == 0);
        u->head_request = head_request;
        u->cb = cb;
        u->userdata = userdata;
        u->reading = true;
        u->deadline = USEC_INFINITY;
        u->idle_timeout = USEC_INFINITY;
        u->cancel_error = 0;

        if (u->reused) {
                /* A pooled socket is writable: the request goes now, in one send() as a rule, and no
                 * epoll change is needed to wait for the answer. Anything but a full send is left to
                 * the loop, so that a failure reaches the owner after it has stored the pointer we
                 * return (and a stale connection is retried there). */
                ssize_t k = io_write(u, buffer_peek(&u->request), buffer_size(&u->request));
                if (k > 0)
                        u->request_sent = (size_t)k;
                if (u->request_sent == buffer_size(&u->request))
                        u->state = UPSTREAM_RECEIVING;
                r = update_io(u);
                if (r >= 0)
                        r = arm_timer(u, u->deadline);
        } else
                r = upstream_connect(u);
        if (r < 0) {
                upstream_detach(u);
                upstream_free(u);
                return r;
        }
        *ret = u;
        return 0;
}
