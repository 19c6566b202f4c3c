/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* What the upstream files share and nothing else may see: the Upstream and its pool, and the calls by
 * which the parts hand over to each other: upstream-tls.c what https adds (the context, the handshake,
 * reads and writes through SSL), upstream-response.c the parser that builds the UpstreamResponse (and
 * upstream-head.c the lines of its head),
 * upstream-pool.c the idle connections kept for reuse, and upstream-connection.c one exchange on a
 * connection (connect, send, read, retry, what the timers mean, the owner's callbacks) with the Upstream's
 * own primitives (freeing it, its event sources, the loop's time). */

#include <openssl/types.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "modelgated/event/lazy-timer.h"
#include "modelgated/event/socket-watch.h"
#include "modelgated/upstream/upstream.h"
#include "shared/list.h"
#include "shared/time-util.h"

#define UPSTREAM_READ_SIZE (64 * 1024)
/* what one connection reads in one turn of the loop unless its owner says otherwise: one full read, as
 * nginx reads one buffer an event; what else is ready waits that long at most (some 50 µs here) */
#define UPSTREAM_READ_BUDGET (64 * 1024)
#define UPSTREAM_CONNECT_TIMEOUT_USEC (10 * USEC_PER_SEC)
/* below llama.cpp's (cpp-httplib's) 5 s keep-alive, so that we rarely send into a closing socket */
#define UPSTREAM_IDLE_TIMEOUT_USEC (4 * USEC_PER_SEC)
#define UPSTREAM_IDLE_MAX 64
/* 1xx interim responses taken before the final one; more is a malformed answer */
#define UPSTREAM_INTERIM_MAX 16
/* what the socket is registered for, once, for its whole life */
#define UPSTREAM_EVENTS (EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET)
/* A pooled connection idle for less than this is taken without a look at its socket (a MSG_PEEK, one
 * system call on every reuse). Hosts close idle connections only after seconds (llama-server's
 * cpp-httplib after 5 s, nginx after 60 s), and a close the loop has seen freed the connection or is
 * pending in the batch being dispatched, which is checked too; a close the loop has not seen yet is a race
 * with the host's keep-alive timer, which is only near after a while. Taken outside the sockets' batch (from
 * a timer), where nothing has been read from the kernel since the last batch, the socket is always looked
 * at: that is not the request path. */
#define UPSTREAM_POOL_TRUST_USEC (1 * USEC_PER_SEC)

typedef enum UpstreamState {
        UPSTREAM_CONNECTING,
        UPSTREAM_HANDSHAKE, /* https: TLS after the TCP connect */
        UPSTREAM_SENDING,
        UPSTREAM_RECEIVING,
        UPSTREAM_IDLE,
} UpstreamState;

/* Where the response parser (upstream-response.c) is in the bytes of a host's answer */
typedef enum ParseState {
        PARSE_START,       /* before a response: line ends skipped */
        PARSE_STATUS,      /* the status line */
        PARSE_HEADERS,     /* header lines, up to the empty one */
        PARSE_BODY_LENGTH, /* Content-Length's bytes */
        PARSE_BODY_EOF,    /* a body that the close ends */
        PARSE_CHUNK_SIZE,  /* a chunk's size line */
        PARSE_CHUNK_DATA,
        PARSE_CHUNK_CR, /* the CRLF after a chunk's data */
        PARSE_CHUNK_LF,
        PARSE_TRAILERS,
        PARSE_CLOSED, /* after an interim response that said it is the host's last: bytes dropped */
        PARSE_DONE,
} ParseState;

typedef struct UpstreamParse {
        ParseState state;
        unsigned flags;       /* the framing and connection headers seen (RF_* of upstream-response.c) */
        uint8_t major, minor; /* HTTP version */
        bool skip_body;       /* HEAD, 204, 304, 1xx */
        bool in_section;      /* a header of the head or the trailers was read: a line may continue it */
        uint64_t left;        /* of the body or chunk being read */
        size_t head_bytes;    /* of the headers' names and values (the head keeps their lines) */
        Buffer line;          /* a line begun in an earlier read */
        const char *reason;   /* what was malformed, for the log */
} UpstreamParse;

struct UpstreamPool {
        sd_event *event;
        SocketWatchSet *sockets; /* where the connections' sockets are watched (the manager's) */
        SSL_CTX *tls_ctx;        /* for https:// hosts and fallbacks, made when first needed */
        Upstream *idle;
        size_t n_idle;
        bool stopping; /* nothing goes back into the pool */
};

struct Upstream {
        UpstreamPool *pool;
        UpstreamState state;
        int fd;
        SocketWatch *io;
        LazyTimer timer; /* its source made by upstream_connect() */
        struct sockaddr_storage address;
        socklen_t address_len;
        char *authority;
        SSL *ssl;       /* https */
        char *tls_host; /* https: the name (or address) the certificate must be for; NULL: http */
        /* the socket is registered once, for EPOLLIN|EPOLLOUT|EPOLLRDHUP edge-triggered (as the client's,
         * see client-internal.h); what it waits for is in the state and these flags */
        bool read_pending;  /* input may be in the socket that no edge will announce (left while paused) */
        bool peer_shut;     /* the host's FIN (or an error) was seen: a short read is not an empty socket */
        size_t read_budget; /* bytes read per turn of the loop (upstream_set_read_budget()); 0: the default
                             */
        usec_t idle_since;  /* in the pool since */

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
        unsigned n_interim; /* 1xx responses dropped so far */
        int write_error;    /* the send failed (the host closed early): what failed if no answer came */
        int cancel_error;   /* set by a callback's refusal or an error while in the parser */

        UpstreamParse parse;
        UpstreamResponse resp;

        const UpstreamCallbacks *cb;
        void *userdata;
        usec_t deadline;
        usec_t idle_timeout;  /* the host may send nothing this long (USEC_INFINITY: no bound) */
        usec_t last_activity; /* when it last sent something (the loop's time: no clock read per read) */

        LIST_FIELDS(Upstream, idle);
};

/* upstream-tls.c */
int upstream_tls_new(Upstream *u, int fd);
void upstream_tls_close(Upstream *u);
SSL_CTX *upstream_tls_context_free(SSL_CTX *ctx);
/* One step of the handshake: 1 when it is done, 0 when it waits for the socket, or < 0
 * (-EKEYREJECTED for an untrusted certificate, -EPROTO) when it failed; the caller goes on from there. */
int upstream_handshake(Upstream *u);
/* read(2) and send(2), through TLS for https: the same results (bytes, 0 at the end, -1 with errno,
 * EAGAIN when it must wait), so that one state machine serves both */
ssize_t upstream_io_read(Upstream *u, void *buf, size_t n);
ssize_t upstream_io_write(Upstream *u, const void *buf, size_t n);

/* upstream-head.c: a response's head, a line at a time */
/* what a response's head may hold: the bytes of its names and values */
#define UPSTREAM_HEAD_MAX (256 * 1024)
/* the framing and connection headers seen (UpstreamParse.flags) */
enum {
        RF_CHUNKED = 1 << 0,
        RF_CONTENT_LENGTH = 1 << 1,
        RF_TRANSFER_ENCODING = 1 << 2,
        RF_CONNECTION_CLOSE = 1 << 3,
        RF_CONNECTION_KEEP_ALIVE = 1 << 4,
        RF_EMPTY_CONTENT_LENGTH = 1 << 5, /* refused unless the next line continues it */
};
static inline bool upstream_value_chars(const char *p, size_t n) {
        return http_value_end(p, p + n) == p + n;
}

/* A malformed response: -EPROTO, and why for the log */
static inline int upstream_malformed(Upstream *u, const char *reason) {
        u->parse.reason = reason;
        return -EPROTO;
}
/* The status line (its line end cut off); the next lines are headers. 0, or -EPROTO. */
int upstream_head_status_line(Upstream *u, const char *p, size_t n);
/* A header line of the head or the trailers, its CR cut off: 0, or -EPROTO. */
int upstream_head_line(Upstream *u, const char *p, size_t n);
/* The header whose line is [p, p + n) (its CR cut off, its bytes checked), its name the first name_len
 * bytes, its value from v on: 0, or -EPROTO. */
int upstream_head_add(Upstream *u, const char *p, size_t name_len, const char *v, size_t n);
/* llhttp_should_keep_alive() for what the head said, skip_body for an answer without body (HEAD) */
bool upstream_head_keep_alive(const Upstream *u, bool skip_body);

/* upstream-response.c: a fresh parser for the next response on this connection */
void upstream_parser_init(Upstream *u);
void upstream_parser_done(Upstream *u);
/* The next bytes of the response, handed to the owner's callbacks as they are read: 0 when all were taken
 * and more is to come; 1 when the response ended, after *ret_used of them (the rest is not this
 * response's); -EPROTO for a malformed response (parse.reason says why); -ECANCELED when a callback
 * refused or the exchange must end with cancel_error (set); -ENOMEM. */
int upstream_parse(Upstream *u, const char *buf, size_t size, size_t *ret_used);
/* The host closed: 1 when that ends the response (a body without length), else 0 */
int upstream_parse_eof(Upstream *u);

/* upstream-pool.c */
/* Out of the pool's idle list, before the connection is freed or used */
void upstream_pool_remove(Upstream *u);
/* An idle connection to url's address that is still open, taken out of the pool; NULL if none. */
Upstream *upstream_pool_take(UpstreamPool *p, const HttpUrl *url);
/* A connection whose exchange ended well goes idle into the pool, or is freed when the pool is full
 * or stopping. */
void upstream_pool_put(Upstream *u);

/* upstream-connection.c: the Upstream's own primitives */
Upstream *upstream_free(Upstream *u);
/* The socket's edges raised again as they stand (one epoll_ctl): for what no new edge will announce,
 * such as input left while reading was paused; the loop dispatches it as an event */
int upstream_rearm(Upstream *u);
/* Sets the timer to deadline, or stops it for USEC_INFINITY; the timer must exist for a deadline
 * (upstream_connect() makes it). Lazy: a later deadline than the one set costs a store (lazy-timer.h). */
int upstream_arm_timer(Upstream *u, usec_t deadline);
/* The loop's time: what a deadline set from a callback counts from */
usec_t upstream_now(const Upstream *u);
