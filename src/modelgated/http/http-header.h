/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Headers as modelgate keeps them, for requests (http.h) and for an upstream's responses alike: a table
 * of offsets into one buffer, spans compared with names, tokens of comma-separated lists (RFC 9110
 * §5.6.1), and which headers stop at each hop (hop-by-hop, framing, Host, Expect, credentials:
 * rule:hop-by-hop, rule:credentials-stop). Pure functions; nothing here knows a request. */

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "shared/buffer.h"
#include "shared/word.h"

/* RFC 9110 §5.6.2 tchar: the bytes of a header's name (a request's, a host's answer's), of a chunk
 * extension's and a trailer's name; one lookup a byte */
extern const bool http_tchar[256];
static inline bool http_is_tchar(unsigned char c) {
        return http_tchar[c];
}

/* A header value's bytes (RFC 9110 §5.5): TAB, and all but the other control characters and DEL */
static inline bool http_is_value_char(unsigned char c) {
        return c >= ' ' ? c != 0x7f : c == '\t';
}
/* The first byte of [p, end) that is no value byte (a line's CR, most likely), or end: eight at a time
 * where the word says none of its bytes is below a space or a DEL (the last eight overlapping those
 * before, which are value bytes: the lowest byte a word flags is then exact), else from the first that
 * may be (a TAB is flagged, and is a value byte). One at a time only for fewer than eight. For a
 * request's values and a host's answer's alike. */
static inline const char *http_value_end(const char *p, const char *end) {
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        while (end - p >= 8) {
                uint64_t w;
                memcpy(&w, p, 8);
                uint64_t m = WORD_BELOW(w, ' ') | WORD_IS(w, 0x7f);
                if (m == 0) {
                        if (end - p == 8)
                                return end;
                        p = end - p >= 16 ? p + 8 : end - 8;
                        continue;
                }
                p += __builtin_ctzll(m) / 8;
                if (!http_is_value_char((unsigned char)*p))
                        return p;
                p++;
        }
#endif
        for (; p < end; p++)
                if (!http_is_value_char((unsigned char)*p))
                        return p;
        return end;
}

typedef struct HttpHeader {
        size_t name, name_len; /* offsets into HttpRequest.head */
        size_t value, value_len;
} HttpHeader;

/* A table of headers whose names and values are offsets into one buffer, as the request parser and an
 * upstream's response parser both collect them. Adds an entry starting at offset 'at' (the table grows
 * by doubling); -E2BIG when it holds max already, -ENOMEM. Inline where there is room, as there is for
 * all but a connection's first few headers. */
int http_header_table_add_grow(HttpHeader **headers, size_t *n, size_t *n_alloc, size_t max, size_t at);
static inline int http_header_table_add(HttpHeader **headers, size_t *n, size_t *n_alloc, size_t max,
                                        size_t at) {
        if (*n >= *n_alloc || *n >= max)
                return http_header_table_add_grow(headers, n, n_alloc, max, at);
        (*headers)[(*n)++] = (HttpHeader){.name = at};
        return 0;
}
/* The value of the first header named name (l bytes; case-insensitive), or an empty Span. */
Span http_header_table_find_n(const char *base, const HttpHeader *headers, size_t n, const char *name,
                              size_t l);
/* ASCII case-insensitive comparison, eight bytes at a time (no call, no locale). Exact for any bytes:
 * where t has a letter, bit 5 is set on both sides before they are compared, and only a letter's two
 * cases give that letter then; every other byte is compared as it is. With t a literal where it is
 * inlined, its words and masks are constants. */
static inline uint64_t http_load(const char *p, size_t n) {
        uint64_t v = 0;
        if (__builtin_constant_p(n))
                memcpy(&v, p, n);
        else /* not a call for a few bytes */
                for (size_t i = 0; i < n; i++)
                        v |= (uint64_t)(unsigned char)p[i] << (8 * i);
        return v;
}
/* bit 5 of each byte of v that is an ASCII letter */
static inline uint64_t http_letter_bits(uint64_t v) {
        uint64_t low = (v | WORD_BYTES(0x20)) & WORD_BYTES(0x7f);
        uint64_t ge_a = low + WORD_BYTES(0x80 - 'a'), gt_z = low + WORD_BYTES(0x7f - 'z');
        return (ge_a & ~gt_z & ~v & WORD_BYTES(0x80)) >> 2;
}
static inline bool http_caseeq_word(uint64_t p, uint64_t t) {
        uint64_t m = http_letter_bits(t);
        return (p | m) == (t | m);
}
static inline bool http_caseeq_n(const char *p, const char *t, size_t n) {
        if (n <= 8)
                return http_caseeq_word(http_load(p, n), http_load(t, n));
        for (size_t i = 0; i + 8 < n; i += 8)
                if (!http_caseeq_word(http_load(p + i, 8), http_load(t + i, 8)))
                        return false;
        return http_caseeq_word(http_load(p + n - 8, 8), http_load(t + n - 8, 8));
}

/* The same for a literal name, inline: its length and its words are constants where it is asked for (a
 * request's headers are asked for several names each) */
static inline Span http_header_table_find(const char *base, const HttpHeader *headers, size_t n,
                                          const char *name) {
        size_t l = strlen(name);
        for (size_t i = 0; i < n; i++)
                if (headers[i].name_len == l && http_caseeq_n(base + headers[i].name, name, l))
                        return (Span){base + headers[i].value, headers[i].value_len};
        return (Span){};
}

/* Inline, so that the length of a literal t is known where it is called, and a span of another
 * length costs one comparison: every header of every request is held against several names. */
static inline bool span_caseeq(Span s, const char *t) {
        size_t l = strlen(t);
        return s.p && l == s.n && http_caseeq_n(s.p, t, l);
}
/* X-Request-Id (rule:request-id): held against every header each way */
static inline bool http_header_is_request_id(Span s) {
        return s.n == 12 && http_caseeq_n(s.p, "X-Request-Id", 12);
}
/* X-Conversation-Id (rule:resumable-streams): a host gets modelgate's own, under its owner's mark */
static inline bool http_header_is_conversation_id(Span s) {
        return s.n == 17 && http_caseeq_n(s.p, "X-Conversation-Id", 17);
}
static inline bool span_eq(Span s, const char *t) {
        size_t l = strlen(t);
        return s.p && l == s.n && memcmp(s.p, t, l) == 0;
}
static inline bool span_startswith(Span s, const char *prefix) {
        size_t l = strlen(prefix);
        return s.n >= l && memcmp(s.p, prefix, l) == 0;
}
/* A token in a comma-separated header value, case-insensitive ("close" in "keep-alive, Close") */
bool span_has_token(Span list, const char *token);
bool span_list_has(Span list, Span token);

/* RFC 9110 §7.6.1 hop-by-hop headers, plus what modelgate owns on each hop (framing, Host,
 * Expect) and the credentials that must never reach a host (rule:hop-by-hop, rule:credentials-stop). */
bool http_header_is_hop_by_hop(Span name);
bool http_header_is_credential(Span name);
