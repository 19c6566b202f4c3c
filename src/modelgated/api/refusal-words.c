/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The retry words of rule:refusal-words, found and left out: see refusal-words.h. */

#include <string.h>

#include "modelgated/api/refusal-words.h"
#include "shared/macro.h"

/* '?' stands for any one character or none (pi's ".?"); everything else is itself, ASCII case ignored.
 * pi: /overloaded|rate.?limit|too many requests|429|500|502|503|504|service.?unavailable|server.?error|
 * internal.?error|connection.?error|connection.?refused|other side closed|fetch failed|upstream.?connect|
 * reset before headers|terminated|retry delay/i (clients.md); the rule adds timeout, x-api-key and
 * "prompt is too long" (Claude Code reads those two as a bad key and a full context). */
static const char *const WORDS[] = {
        "overloaded",
        "rate?limit",
        "too many requests",
        "429",
        "500",
        "502",
        "503",
        "504",
        "service?unavailable",
        "server?error",
        "internal?error",
        "connection?error",
        "connection?refused",
        "other side closed",
        "fetch failed",
        "upstream?connect",
        "reset before headers",
        "terminated",
        "retry delay",
        "timeout",
        "x-api-key",
        "prompt is too long",
};

static char lower(char c) {
        return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

/* The length of one UTF-8 character at s (1 for a byte that begins none) */
static size_t char_len(const char *s) {
        unsigned char c = (unsigned char)*s;
        size_t n = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;

        for (size_t i = 1; i < n; i++)
                if (((unsigned char)s[i] & 0xc0) != 0x80)
                        return 1;
        return n;
}

/* How many bytes of s the word matches from its start; 0: none */
static size_t match(const char *s, const char *w) {
        const char *p = s;

        for (; *w; w++) {
                if (*w == '?') {
                        /* any one character, then the rest; else none */
                        size_t k = *p ? match(p + char_len(p), w + 1) : 0;
                        if (k > 0)
                                return (size_t)(p - s) + char_len(p) + k;
                        k = match(p, w + 1);
                        return k > 0 ? (size_t)(p - s) + k : 0;
                }
                if (lower(*p) != *w)
                        return 0;
                p++;
        }
        return (size_t)(p - s);
}

bool refusal_words_find(const char *s, size_t *ret_offset, size_t *ret_length) {
        for (const char *p = s; *p; p++)
                for (size_t i = 0; i < ELEMENTSOF(WORDS); i++) {
                        size_t n = match(p, WORDS[i]);
                        if (n > 0) {
                                *ret_offset = (size_t)(p - s);
                                *ret_length = n;
                                return true;
                        }
                }
        return false;
}

size_t refusal_words_strip(char *s) {
        static const char ELLIPSIS[] = "\xe2\x80\xa6";
        size_t n = 0, at, len;

        /* each word is 3 bytes or more, and "…" none of them: every turn shortens s, or replaces one of
         * the words s had to begin with */
        while (refusal_words_find(s, &at, &len)) {
                memcpy(s + at, ELLIPSIS, 3);
                memmove(s + at + 3, s + at + len, strlen(s + at + len) + 1);
                n++;
        }
        return n;
}
