/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The header table, span and token comparisons, and which headers stop at each hop: see http-header.h.
 * Below the request parser (http-parser.c, http-chunked.c) and the upstream's response parser, which both
 * use them. */

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

const bool http_tchar[256] = {
        ['0' ... '9'] = true, ['A' ... 'Z'] = true, ['a' ... 'z'] = true, ['!'] = true,  ['#'] = true,
        ['$'] = true,         ['%'] = true,         ['&'] = true,         ['\''] = true, ['*'] = true,
        ['+'] = true,         ['-'] = true,         ['.'] = true,         ['^'] = true,  ['_'] = true,
        ['`'] = true,         ['|'] = true,         ['~'] = true,
};

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

/* The length first, then at most two names of that length: every header of every request and answer
 * is held against these */
bool http_header_is_hop_by_hop(Span name) {
        switch (name.n) {
        case 2:
                return http_caseeq_n(name.p, "te", 2);
        case 4:
                return http_caseeq_n(name.p, "host", 4);
        case 6:
                return http_caseeq_n(name.p, "expect", 6);
        case 7:
                return http_caseeq_n(name.p, "trailer", 7) || http_caseeq_n(name.p, "upgrade", 7);
        case 10:
                return http_caseeq_n(name.p, "connection", 10) || http_caseeq_n(name.p, "keep-alive", 10);
        case 14:
                return http_caseeq_n(name.p, "content-length", 14);
        case 16:
                return http_caseeq_n(name.p, "proxy-connection", 16);
        case 17:
                return http_caseeq_n(name.p, "transfer-encoding", 17);
        default:
                return false;
        }
}

bool http_header_is_credential(Span name) {
        switch (name.n) {
        case 6:
                return http_caseeq_n(name.p, "cookie", 6);
        case 9:
                return http_caseeq_n(name.p, "x-api-key", 9);
        case 13:
                return http_caseeq_n(name.p, "authorization", 13);
        case 19:
                return http_caseeq_n(name.p, "proxy-authorization", 19);
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
