/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The header table, span and token comparisons, and which headers stop at each hop: see http-header.h.
 * Below the request parser (http-parser.c, http-chunked.c) and the upstream's response parser, which both use them. */

#include <assert.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "modelgated/http/http-header.h"

int http_header_table_add_grow(HttpHeader **headers, size_t *n, size_t *n_alloc, size_t max, size_t at) {
        assert(headers);
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

Span http_header_table_find_n(const char *base, const HttpHeader *headers, size_t n, const char *name,
                              size_t l) {
        assert(base);
        /* the name's length first: most headers differ in it; then its first letter (a letter and its
         * capital differ in bit 5 only) */
        for (size_t i = 0; i < n; i++)
                if (headers[i].name_len == l && l > 0 && ((base[headers[i].name] ^ name[0]) & ~0x20) == 0 &&
                    http_caseeq_n(base + headers[i].name, name, l))
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
