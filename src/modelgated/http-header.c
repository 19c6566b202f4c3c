/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What the rest of modelgate asks of a parsed request's headers: a header by name, a token in a
 * comma-separated list (RFC 9110 §5.6.1), and which headers stop here when a request goes on to a host
 * (hop-by-hop, framing, Host, Expect, credentials: SPEC §4). Kept apart from the parser (http.c), which
 * builds the HttpRequest these read: pure functions, no parser state. */

#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "modelgated/http.h"

Span http_header_name(const HttpRequest *r, size_t i) {
        return (Span){buffer_peek(&r->head) + r->headers[i].name, r->headers[i].name_len};
}

Span http_header_value(const HttpRequest *r, size_t i) {
        return (Span){buffer_peek(&r->head) + r->headers[i].value, r->headers[i].value_len};
}

Span http_request_header(const HttpRequest *r, const char *name) {
        return http_header_table_find(buffer_peek(&r->head), r->headers, r->n_headers, name);
}

int http_header_table_add_grow(HttpHeader **headers, size_t *n, size_t *n_alloc, size_t max, size_t at) {
        if (*n >= max)
                return -E2BIG;
        if (*n == *n_alloc) {
                size_t a = *n_alloc ? *n_alloc * 2 : 16;
                HttpHeader *h = reallocarray(*headers, a, sizeof(HttpHeader));
                if (!h)
                        return -ENOMEM;
                *headers = h;
                *n_alloc = a;
        }
        (*headers)[(*n)++] = (HttpHeader){.name = at};
        return 0;
}

Span http_header_table_find(const char *base, const HttpHeader *headers, size_t n, const char *name) {
        size_t l = strlen(name);

        /* the name's length first: most headers differ in it */
        for (size_t i = 0; i < n; i++)
                if (headers[i].name_len == l && strncasecmp(base + headers[i].name, name, l) == 0)
                        return (Span){base + headers[i].value, headers[i].value_len};
        return (Span){};
}

bool span_has_token(Span list, const char *token) {
        return span_list_has(list, (Span){token, strlen(token)});
}

static inline uint64_t load_bytes(const char *p, size_t n) {
        uint64_t v = 0;
        memcpy(&v, p, n);
        return v;
}

/* Whether the n (<= 8) bytes at p are those of 'lower' (lower-case letters and '-') in any case: bit 5
 * is set in p's bytes where lower has a letter (bit 6 set; a letter and its capital differ in bit 5
 * only), and they must then be equal. Exact: a CR (0x0d) with bit 5 set would be a '-', but the '-'
 * positions are compared as they are. */
static inline bool chunk_is(const char *p, const char *lower, size_t n) {
        uint64_t l = load_bytes(lower, n);
        return (load_bytes(p, n) | ((l & UINT64_C(0x4040404040404040)) >> 1)) == l;
}

/* The same for any n: eight bytes at a time, the last eight overlapping. Inline, with n and lower
 * constants where it is called, the literal's words and masks are constants too. */
static inline bool name_is(const char *p, const char *lower, size_t n) {
        if (n <= 8)
                return chunk_is(p, lower, n);
        for (size_t i = 0; i + 8 < n; i += 8)
                if (!chunk_is(p + i, lower + i, 8))
                        return false;
        return chunk_is(p + n - 8, lower + n - 8, 8);
}

/* The length first, then at most two names of that length: every header of every request and answer
 * is held against these */
bool http_header_is_hop_by_hop(Span name) {
        switch (name.n) {
        case 2:
                return name_is(name.p, "te", 2);
        case 4:
                return name_is(name.p, "host", 4);
        case 6:
                return name_is(name.p, "expect", 6);
        case 7:
                return name_is(name.p, "trailer", 7) || name_is(name.p, "upgrade", 7);
        case 10:
                return name_is(name.p, "connection", 10) || name_is(name.p, "keep-alive", 10);
        case 14:
                return name_is(name.p, "content-length", 14);
        case 16:
                return name_is(name.p, "proxy-connection", 16);
        case 17:
                return name_is(name.p, "transfer-encoding", 17);
        default:
                return false;
        }
}

bool http_header_is_credential(Span name) {
        switch (name.n) {
        case 6:
                return name_is(name.p, "cookie", 6);
        case 9:
                return name_is(name.p, "x-api-key", 9);
        case 13:
                return name_is(name.p, "authorization", 13);
        case 19:
                return name_is(name.p, "proxy-authorization", 19);
        default:
                return false;
        }
}

bool span_list_has(Span list, Span token) {
        size_t i = 0;

        while (list.p && i < list.n) {
                while (i < list.n && (list.p[i] == ' ' || list.p[i] == '\t' || list.p[i] == ','))
                        i++;
                size_t s = i;
                while (i < list.n && list.p[i] != ',')
                        i++;
                size_t e = i;
                while (e > s && (list.p[e - 1] == ' ' || list.p[e - 1] == '\t'))
                        e--;
                if (e - s == token.n && strncasecmp(list.p + s, token.p, token.n) == 0)
                        return true;
        }
        return false;
}

bool http_request_connection_lists(const HttpRequest *r, Span name) {
        /* RFC 9110 §5.3: several Connection lines are one list */
        for (size_t i = 0; i < r->n_headers; i++)
                if (span_caseeq(http_header_name(r, i), "Connection") &&
                    span_list_has(http_header_value(r, i), name))
                        return true;
        return false;
}

int http_request_append_forwarded_headers(const HttpRequest *r, Buffer *out) {
        bool connection = false;

        for (size_t i = 0; i < r->n_headers && !connection; i++)
                connection = span_caseeq(http_header_name(r, i), "Connection");
        for (size_t i = 0; i < r->n_headers; i++) {
                Span name = http_header_name(r, i), value = http_header_value(r, i);
                if (http_header_is_hop_by_hop(name) || http_header_is_credential(name) ||
                    (connection && http_request_connection_lists(r, name)))
                        continue;
                if (buffer_append(out, name.p, name.n) < 0 || buffer_append_str(out, ": ") < 0 ||
                    buffer_append(out, value.p, value.n) < 0 || buffer_append_str(out, "\r\n") < 0)
                        return -ENOMEM;
        }
        return 0;
}
