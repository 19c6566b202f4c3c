/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The request for a host, written once from the client's: its request line for the target, the headers that
 * go on (X-Request-Id and X-Conversation-Id modelgate's own), and the body with the model renamed
 * (rule:model-rewrite) and Claude Code's attribution line cut (rule:attribution-line). */

#include "modelgated/client/client-internal.h"

/* The request for a host: the body is the client's with the bytes of 'span' (the model's value; empty:
 * none) replaced by 'key' as a JSON string, and the bytes of 'cut' left out (rule:attribution-line; empty:
 * none), written straight into the request, so that no rewritten copy of the body (nor of the quoted key)
 * is made. The two never overlap: one is a member's value, the other an element of another member. */
int client_build_request(Client *c, const HttpUrl *target, Span url, Span body, Span span, const char *key,
                         Span cut, Buffer *out) {
        HttpRequest *r = &c->parser.req;
        size_t wl = span.p ? json_quoted_len(key) : 0;
        size_t body_len = body.n - span.n + wl - cut.n;
        /* the edits in the body's order */
        Span first = span, second = cut;
        bool first_is_key = true;
        int k;

        if (cut.p && (!span.p || cut.p < span.p)) {
                first = cut;
                second = span;
                first_is_key = false;
        }
        k = http_write_request_line(out, llhttp_method_name(r->method), target->base_path, url.p, url.n,
                                    target->authority);
        if (k < 0)
                return k;
        /* rule:request-id: the client's when it is sane, else the one made here (the client's own goes
         * no further then) */
        if (http_request_append_forwarded_headers(r, out) < 0 || client_append_request_id(c, out) < 0 ||
            (c->req->stream.conv_host_id && buffer_printf(out, "X-Conversation-Id: %s\r\n", c->req->stream.conv_host_id) < 0))
                return -ENOMEM;
        if (body_len > 0 || r->method == HTTP_POST || r->method == HTTP_PUT || r->method == HTTP_PATCH)
                if (http_write_content_length(out, body_len) < 0)
                        return -ENOMEM;
        if (buffer_append_str(out, "\r\n") < 0)
                return -ENOMEM;
        const char *p = body.p, *end = body.p + body.n;
        for (int i = 0; i < 2; i++) {
                Span e = i == 0 ? first : second;
                bool is_key = i == 0 ? first_is_key : !first_is_key;
                if (!e.p)
                        continue;
                if (buffer_append(out, p, (size_t)(e.p - p)) < 0 ||
                    (is_key && json_quote_append(out, key, wl) < 0))
                        return -ENOMEM;
                p = e.p + e.n;
        }
        if (buffer_append(out, p, (size_t)(end - p)) < 0)
                return -ENOMEM;
        return 0;
}
