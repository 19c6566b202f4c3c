/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The bytes a scan of JSON text for its usage (usage.c) stops at, found eight or sixteen at a time: the
 * end of a string, and in a container passed over, its strings and its nesting. Most of an answer's bytes
 * go by here. */

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "shared/word.h"

/* The bytes a string holds as they are: not '"' or '\\' */
static const bool string_stop_byte[256] = {['"'] = true, ['\\'] = true};

/* The next '"' or '\\' from p, eight bytes at a time: names and most values end in their first eight, and
 * the text of an answer, most of its bytes, goes by as fast */
static inline const char *string_stop(const char *p, const char *end) {
#ifdef __SSE2__
        /* sixteen at a time where the machine has it (every x86-64) */
        while (end - p >= 16) {
                __m128i v = _mm_loadu_si128((const __m128i *)p);
                unsigned m = (unsigned)_mm_movemask_epi8(_mm_or_si128(
                        _mm_cmpeq_epi8(v, _mm_set1_epi8('"')), _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'))));
                if (m != 0)
                        return p + __builtin_ctz(m);
                p += 16;
        }
#endif
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        while (end - p >= 8) {
                uint64_t v, m;
                memcpy(&v, p, 8);
                m = WORD_IS(v, '"') | WORD_IS(v, '\\');
                if (m != 0)
                        return p + (__builtin_ctzll(m) >> 3);
                p += 8;
        }
#endif
        while (p < end && !string_stop_byte[(unsigned char)*p])
                p++;
        return p;
}

/* In a container passed over, the bytes that matter: its strings and its nesting */
static const bool skip_stop_byte[256] = {
        ['"'] = true, ['{'] = true, ['}'] = true, ['['] = true, [']'] = true,
};

/* The next of '"', '{', '}', '[' and ']' from p, eight bytes at a time as string_stop() goes */
static inline const char *skip_stop(const char *p, const char *end) {
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        while (end - p >= 8) {
                uint64_t v, m;
                memcpy(&v, p, 8);
                /* '[' and '{', ']' and '}' differ in one bit (0x20) */
                m = WORD_IS(v, '"') | WORD_IS(v | WORD_BYTES(0x20), '{') |
                    WORD_IS(v | WORD_BYTES(0x20), '}');
                if (m != 0)
                        return p + (__builtin_ctzll(m) >> 3);
                p += 8;
        }
#endif
        while (p < end && !skip_stop_byte[(unsigned char)*p])
                p++;
        return p;
}
