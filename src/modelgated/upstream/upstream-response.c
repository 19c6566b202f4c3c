/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A host's response as llhttp reads it (rule:host-input): status and headers collected into the
 * UpstreamResponse (with a bound on their size and number), handed to the owner once, then body pieces as
 * they come. 1xx interim responses are skipped with no content, and a body is never expected where HTTP says
 * there is none. These callbacks run inside llhttp_execute(): a refusal sets cancel_error, and
 * upstream-connection.c ends the exchange once the parser has returned. */

#include <assert.h>
#include <string.h>
#include <strings.h>

#include "modelgated/upstream/upstream-internal.h"

Span upstream_response_header_name(const UpstreamResponse *r, size_t i) {
        assert(r);
        return (Span){buffer_peek(&r->head) + r->headers[i].name, r->headers[i].name_len};
}

Span upstream_response_header_value(const UpstreamResponse *r, size_t i) {
        assert(r);
        return (Span){buffer_peek(&r->head) + r->headers[i].value, r->headers[i].value_len};
}

Span upstream_response_header(const UpstreamResponse *r, const char *name) {
        assert(r);
        return http_header_table_find(buffer_peek(&r->head), r->headers, r->n_headers, name);
}

static void response_reset(UpstreamResponse *r) {
        buffer_clear(&r->head);
        r->n_headers = 0;
        r->status = 0;
        r->chunked = r->has_content_length = r->keep_alive = false;
        r->content_length = 0;
}

static Upstream *upstream_of(llhttp_t *l) {
        return l->data;
}

static int on_message_begin(llhttp_t *l) {
        Upstream *u = upstream_of(l);
        response_reset(&u->resp);
        u->in_value = false;
        u->chunk_left = 0;
        u->crlf_left = 0;
        return 0;
}

static int on_header_field(llhttp_t *l, const char *at, size_t n) {
        Upstream *u = upstream_of(l);
        UpstreamResponse *r = &u->resp;

        if (buffer_size(&r->head) + n > 256 * 1024)
                return -1;
        if (r->n_headers == 0 || u->in_value) {
                if (http_header_table_add(&r->headers, &r->n_headers, &r->n_headers_alloc, 1024,
                                          buffer_size(&r->head)) < 0)
                        return -1;
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
        /* We never ask for an upgrade: a 101 would hand the connection to another protocol. */
        if (r->status == 101) {
                u->cancel_error = -EPROTO;
                return -1;
        }
        /* Other 1xx interim responses are dropped. They end at their empty line, whatever their headers
         * say (RFC 9112 §6.3 rule 1, RFC 9110 §15.2): llhttp would read a Content-Length or chunked body
         * for them, and those bytes would reach the client as an answer of their own. */
        if (r->status >= 100 && r->status < 200)
                return 1;
        r->chunked = (l->flags & F_CHUNKED) != 0;
        r->has_content_length = (l->flags & F_CONTENT_LENGTH) != 0;
        r->content_length = l->content_length;
        r->keep_alive = llhttp_should_keep_alive(l);
        u->headers_done = true;

        const UpstreamCallbacks *cb = u->cb;
        /* a failure of an owner that handed u over meanwhile (upstream_set_owner()) is not the new one's */
        if (cb && cb->on_headers && cb->on_headers(u, r, u->userdata) < 0 && u->cb == cb) {
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

static int on_chunk_header(llhttp_t *l) {
        Upstream *u = upstream_of(l);
        u->chunk_left = l->content_length;
        return 0;
}

/* llhttp takes any two bytes after a chunk's data ("5\r\nhelloXX0\r\n\r\n"): they must be CRLF, as a
 * request's must (http.c). Checked in the bytes llhttp is given, the rest at the start of the next read. */
int upstream_check_chunk_end(Upstream *u, const char *p, const char *end) {
        assert(u);
        for (; u->crlf_left > 0 && p < end; p++, u->crlf_left--)
                if (*p != "\r\n"[2 - u->crlf_left]) {
                        u->cancel_error = -EPROTO;
                        return -1;
                }
        return 0;
}

static int on_body(llhttp_t *l, const char *at, size_t n) {
        Upstream *u = upstream_of(l);

        if (u->resp.chunked && u->chunk_left > 0) {
                u->chunk_left -= MIN((uint64_t)n, u->chunk_left);
                if (u->chunk_left == 0) {
                        u->crlf_left = 2;
                        if (upstream_check_chunk_end(u, at + n, u->exec_end) < 0)
                                return -1;
                }
        }

        const UpstreamCallbacks *cb = u->cb;
        if (cb && cb->on_body && cb->on_body(u, at, n, u->userdata) < 0 && u->cb == cb) {
                u->cancel_error = -ECANCELED;
                return -1;
        }
        return u->cancel_error ? -1 : 0;
}

static int on_message_complete(llhttp_t *l) {
        Upstream *u = upstream_of(l);

        if (u->resp.status >= 100 && u->resp.status < 200) {
                /* a host that sends interim responses forever would hold the request with no answer */
                if (++u->n_interim > UPSTREAM_INTERIM_MAX) {
                        u->cancel_error = -EPROTO;
                        return -1;
                }
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
        .on_chunk_header = on_chunk_header,
        .on_body = on_body,
        .on_message_complete = on_message_complete,
};

void upstream_parser_init(Upstream *u) {
        assert(u);
        llhttp_init(&u->parser, HTTP_RESPONSE, &response_settings);
        u->parser.data = u;
}
