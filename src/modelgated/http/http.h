/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The client side of HTTP/1.1: a request parser that builds one HttpRequest at
 * a time, with the limits of modelgate.conf(5) applied as the bytes arrive, and
 * the refusals that request smuggling needs (RFC 9112 §6.3, §5.2: both
 * Content-Length and Transfer-Encoding, duplicate lengths, obsolete line
 * folding, bare LF line ends; rule:strict-requests). Methods are llhttp's
 * (llhttp_method_t, llhttp_method_name()). Non-logging; no I/O. */

#include <llhttp.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "modelgated/http/http-header.h"
#include "shared/buffer.h"

typedef struct HttpRequest {
        llhttp_method_t method;
        uint8_t http_major, http_minor;
        bool keep_alive;
        bool expect_continue;
        bool has_body;
        bool chunked;
        bool upgrade; /* asked for an Upgrade, which modelgate never honours (the request is plain HTTP/1.1)
                       */
        bool had_trailers; /* a chunked body ended with a trailer section, which was dropped */
        Buffer head;       /* the URL and the header names and values, back to back */
        size_t url, url_len;
        HttpHeader *headers;
        size_t n_headers, n_headers_alloc;
        size_t request_id_at; /* rule:request-id: the first X-Request-Id header's index + 1, 0: none */
        Buffer body;
} HttpRequest;

typedef enum HttpParseResult {
        HTTP_PARSE_MORE,    /* everything consumed, the request is not complete */
        HTTP_PARSE_HEADERS, /* headers complete (reported once per request), body pending */
        HTTP_PARSE_DONE,    /* a request is complete; bytes after it are not consumed */
} HttpParseResult;

/* The chunked framing of a request body (RFC 9112 §7.1), scanned byte by byte (http-chunked.c) */
typedef struct ChunkScan {
        unsigned state;
        unsigned digits;
        bool value_begun; /* an extension's value has its first byte */
        uint64_t size, left;
} ChunkScan;

typedef struct HttpParser {
        ChunkScan chunk;
        HttpRequest req;
        Buffer line; /* a line of the head that a read cut: held until its LF comes */
        uint64_t max_header_size, max_body_size;
        uint64_t default_max_body_size; /* max_body_size again after each request */
        const char *body_limit_message; /* a 413's words past max_body_size; NULL: MaxBodySize='s */
        size_t header_bytes;
        uint64_t content_length; /* the Content-Length header's */
        uint64_t body_left;      /* of a Content-Length body */
        unsigned n_content_length, n_transfer_encoding, n_host;
        bool connection_header, upgrade_header; /* seen: the head's end reads their lists */
        bool request_line_done;
        bool headers_complete;
        bool headers_reported;
        bool message_complete;
        bool started; /* a byte of this request has been seen */
        /* on error: the status to answer with and a message for people */
        int error_status;
        const char *error_message;
} HttpParser;

void http_parser_init(HttpParser *p, uint64_t max_header_size, uint64_t max_body_size);
void http_parser_done(HttpParser *p);
/* A lower body limit for the request whose headers were just reported (a tier's, say): a larger
 * Content-Length is refused at once (-EFBIG), chunks as they come (413, with the words 'why', a string
 * that outlives the request; NULL: MaxBodySize='s). */
int http_parser_limit_body(HttpParser *p, uint64_t max, const char *why);
/* Forget the finished request and get ready for the next one on the same connection. */
void http_parser_next(HttpParser *p);

/* Feeds bytes. Returns an HttpParseResult, with *ret_consumed set; or a negative errno
 * with p->error_status (400, 405, 413, 417, 431, 505) and p->error_message set. After an error the
 * connection cannot be read further and must be closed after the answer. */
int http_parser_feed(HttpParser *p, const char *data, size_t n, size_t *ret_consumed);

static inline Span http_request_url(const HttpRequest *r) {
        return (Span){buffer_peek(&r->head) + r->url, r->url_len};
}
static inline Span http_header_name(const HttpRequest *r, size_t i) {
        return (Span){buffer_peek(&r->head) + r->headers[i].name, r->headers[i].name_len};
}
static inline Span http_header_value(const HttpRequest *r, size_t i) {
        return (Span){buffer_peek(&r->head) + r->headers[i].value, r->headers[i].value_len};
}
/* http-request.c: what the rest of modelgate asks of a parsed request's headers. The value of the first
 * header called name (case-insensitive), or a NULL span */
Span http_request_header_n(const HttpRequest *r, const char *name, size_t l);
/* Inline, so that a literal name's length and words are known where it is asked for */
static inline Span http_request_header(const HttpRequest *r, const char *name) {
        return http_header_table_find(buffer_peek(&r->head), r->headers, r->n_headers, name);
}

/* Whether a Connection header (any of them: the tokens of every one count) names this header. */
bool http_request_connection_lists(const HttpRequest *r, Span name);

/* Whether the request opens a WebSocket (RFC 6455 §4.1): a GET in HTTP/1.1 whose Upgrade (any of them)
 * names websocket and whose Connection names upgrade. modelgate never opens one (rule:no-upgrade); this
 * says where it refuses one with 426 (rule:websocket-426). */
bool http_request_opens_websocket(const HttpRequest *r);

/* The request's headers as they go on to a host: everything but the hop-by-hop headers (and those
 * that a Connection header names), Host, framing, Expect, the credentials, X-Request-Id and
 * X-Conversation-Id (the caller writes its own of each: rule:request-id, rule:resumable-streams);
 * "Name: value\r\n" each. */
int http_request_append_forwarded_headers(const HttpRequest *r, Buffer *out);
