/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* One HTTP/1.1 request to a host, and the connection it rides on. The
 * request bytes are written as the socket takes them; the response is parsed
 * as it is read and handed to the owner as it arrives (status and headers once,
 * then each piece of body as it is read). Connections a host keeps alive go
 * back to a small per-address pool. A request that fails on a pooled
 * connection before any response byte (the host closed it meanwhile) is sent
 * once more on a fresh one, which is safe because nothing was answered. */

#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "modelgated/conf/conf.h"
#include "modelgated/http/http.h"
#include "modelgated/event/socket-watch.h"
#include "shared/buffer.h"
#include "shared/list.h"

typedef struct UpstreamPool UpstreamPool;
typedef struct Upstream Upstream;

typedef struct UpstreamResponse {
        int status;
        Buffer head;         /* header names and values */
        HttpHeader *headers; /* offsets into head */
        size_t n_headers, n_headers_alloc;
        bool chunked;
        bool has_content_length;
        uint64_t content_length;
        bool keep_alive;
} UpstreamResponse;

typedef struct UpstreamCallbacks {
        /* Status and headers are known. < 0: cancel the request. */
        int (*on_headers)(Upstream *u, const UpstreamResponse *resp, void *userdata);
        /* A piece of body (de-chunked). < 0: cancel the request. */
        int (*on_body)(Upstream *u, const char *p, size_t n, void *userdata);
        /* Optional: one read from the host has been handed over (headers, body, or both) and more may
         * follow; the owner writes out what it has. It may cancel u here. */
        void (*on_read_end)(Upstream *u, void *userdata);
        /* The end of the response. The owner must forget u afterwards. */
        void (*on_complete)(Upstream *u, void *userdata);
        /* The request failed (-ECONNREFUSED, -ETIMEDOUT, -ECONNRESET, -EPROTO…); 'started' says whether
         * on_headers was called. The owner must forget u afterwards. */
        void (*on_error)(Upstream *u, int error, bool started, void *userdata);
} UpstreamCallbacks;

/* The idle connections hosts keep alive, per address, and the one TLS context of the process. */
int upstream_pool_new(sd_event *event, SocketWatchSet *sockets, UpstreamPool **ret);
UpstreamPool *upstream_pool_free(UpstreamPool *p);
/* At stop: the idle connections close, and no connection goes back into the pool from now on. */
void upstream_pool_stop(UpstreamPool *p);

/* Sends 'request' (the full request bytes; the buffer is taken) to url's address. */
int upstream_start(UpstreamPool *p, const HttpUrl *url, Buffer *request, bool head_request,
                   const UpstreamCallbacks *cb, void *userdata, Upstream **ret);
/* Stops reading the response while the owner cannot take more (backpressure). */
void upstream_set_reading(Upstream *u, bool on);
/* At most bytes of the response are read in one turn of the loop (0: UPSTREAM_READ_BUDGET, 64 KiB); the
 * rest waits for the next turn, after every other socket that is ready. For an owner whose work per byte
 * is more than relaying it (parsing JSON), so that its share of a turn stays a share. */
void upstream_set_read_budget(Upstream *u, size_t bytes);
/* Bounds the whole exchange from now; expiry calls on_error(-ETIMEDOUT). */
int upstream_set_deadline(Upstream *u, usec_t usec);
/* Once connected, fail with -ETIME when the host sends nothing for usec (from now, and after each
 * read); 0 or USEC_INFINITY: no bound. */
int upstream_set_idle_timeout(Upstream *u, usec_t usec);
/* Whether the host's status and headers have come (on_headers was called) */
bool upstream_answer_started(const Upstream *u);
/* The request may be sent twice (rule:retry-idempotent): a POST of modelgate's own that only reads (a
 * lookup), retried on a fresh connection when a pooled one fails before the answer, as a GET is. Called
 * right after upstream_start(): a failure of the first write is retried whatever the method. */
void upstream_set_idempotent(Upstream *u);
/* Another owner takes the request over as it is, from the next callback on (also from inside one of the
 * old owner's callbacks, whose return then no longer cancels it): the rest of an answer that its first
 * owner's client left, read to its end (rule:resumable-streams). */
void upstream_set_owner(Upstream *u, const UpstreamCallbacks *cb, void *userdata);
/* The owner gives up: the connection is closed (so the host stops working on it). */
Upstream *upstream_cancel(Upstream *u);

/* The value of the first header called name (case-insensitive), or an empty Span. Inline, so that a
 * literal name's length and words are constants where it is asked for. */
static inline Span upstream_response_header(const UpstreamResponse *r, const char *name) {
        return http_header_table_find(buffer_peek(&r->head), r->headers, r->n_headers, name);
}
Span upstream_response_header_name(const UpstreamResponse *r, size_t i);
Span upstream_response_header_value(const UpstreamResponse *r, size_t i);

/* Human words for a connection error, as rule:down-logged-once logs them ("connection refused") */
const char *upstream_strerror(int error);
