/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What the rest of modelgate asks of a parsed request's headers: a header by name, whether Connection
 * names one, and the headers that go on to a host. Above the parser (http-parser.c), which builds the
 * HttpRequest these read, and the header rules (http-header.c) they apply. */

#include <assert.h>

#include "modelgated/http/http.h"

Span http_request_header_n(const HttpRequest *r, const char *name, size_t l) {
        assert(r);
        return http_header_table_find_n(buffer_peek(&r->head), r->headers, r->n_headers, name, l);
}

bool http_request_connection_lists(const HttpRequest *r, Span name) {
        assert(r);
        /* RFC 9110 §5.3: several Connection lines are one list */
        for (size_t i = 0; i < r->n_headers; i++)
                if (span_caseeq(http_header_name(r, i), "Connection") &&
                    span_list_has(http_header_value(r, i), name))
                        return true;
        return false;
}

bool http_request_opens_websocket(const HttpRequest *r) {
        assert(r);
        static const Span upgrade = {"upgrade", 7};

        if (r->method != HTTP_GET || r->http_major != 1 || r->http_minor != 1 ||
            !http_request_connection_lists(r, upgrade))
                return false;
        for (size_t i = 0; i < r->n_headers; i++)
                if (span_caseeq(http_header_name(r, i), "Upgrade") &&
                    span_has_token(http_header_value(r, i), "websocket"))
                        return true;
        return false;
}

int http_request_append_forwarded_headers(const HttpRequest *r, Buffer *out) {
        assert(r);
        bool connection = false;

        for (size_t i = 0; i < r->n_headers && !connection; i++)
                connection = span_caseeq(http_header_name(r, i), "Connection");
        for (size_t i = 0; i < r->n_headers; i++) {
                Span name = http_header_name(r, i), value = http_header_value(r, i);
                if (http_header_is_hop_by_hop(name) || http_header_is_credential(name) ||
                    (connection && http_request_connection_lists(r, name)) ||
                    http_header_is_request_id(name) || http_header_is_conversation_id(name))
                        continue;
                if (buffer_append(out, name.p, name.n) < 0 || buffer_append_str(out, ": ") < 0 ||
                    buffer_append(out, value.p, value.n) < 0 || buffer_append_str(out, "\r\n") < 0)
                        return -ENOMEM;
        }
        return 0;
}
