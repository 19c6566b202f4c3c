/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <string.h>

#include "modelgated/api/attribution.h"

#define ATTRIBUTION_OPEN "{\"type\":\"text\",\"text\":\"x-anthropic-billing-header: "

static const char *skip_ws(const char *p, const char *end) {
        while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n'))
                p++;
        return p;
}

/* After the opening quote of a string: the byte after its closing quote, or NULL */
static const char *skip_string(const char *p, const char *end) {
        while (p < end) {
                if (*p == '\\')
                        p += 2;
                else if (*p++ == '"')
                        return p;
        }
        return NULL;
}

/* The '[' of the top-level "system" member's array, or NULL. Strings are skipped whole, so that no byte
 * inside one (a prompt quoting a JSON body, say) is taken for structure. */
static const char *find_system_array(const char *p, const char *end) {
        unsigned depth = 1; /* inside the top-level object */

        while (p < end) {
                char ch = *p++;
                if (ch == '{' || ch == '[')
                        depth++;
                else if (ch == '}' || ch == ']') {
                        if (depth-- <= 1)
                                return NULL; /* the top-level object ended */
                } else if (ch == '"') {
                        const char *s = p;
                        p = skip_string(p, end);
                        if (!p)
                                return NULL;
                        if (depth != 1 || (size_t)(p - s) != 7 || memcmp(s, "system\"", 7) != 0)
                                continue;
                        const char *q = skip_ws(p, end);
                        if (q >= end || *q != ':')
                                continue; /* a value "system", not the member's name */
                        q = skip_ws(q + 1, end);
                        return q < end && *q == '[' ? q : NULL;
                }
        }
        return NULL;
}

/* The characters Claude Code's line is made of (names, versions, "; ", "=", ":"): anything else, an
 * escape in particular, is not that line */
static bool attribution_char(char ch) {
        return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
               strchr(" .;=:_-", ch);
}

Span attribution_block(const char *body, size_t n) {
        const char *end = body + n, *p, *b, *q;

        /* the common case, every request that is not Claude Code's: one memmem() */
        if (!memmem(body, n, "x-anthropic-billing-header: ", 28))
                return (Span){};
        p = skip_ws(body, end);
        if (p >= end || *p != '{')
                return (Span){};
        p = find_system_array(p + 1, end);
        if (!p)
                return (Span){};
        b = skip_ws(p + 1, end);
        if ((size_t)(end - b) < strlen(ATTRIBUTION_OPEN) ||
            memcmp(b, ATTRIBUTION_OPEN, strlen(ATTRIBUTION_OPEN)) != 0)
                return (Span){};
        q = b + strlen(ATTRIBUTION_OPEN);
        while (q < end && *q != '"') {
                if (*q == '\0' || !attribution_char(*q))
                        return (Span){};
                q++;
        }
        if (end - q < 2 || q[1] != '}')
                return (Span){};
        q += 2; /* the closing quote and brace: the block ends */
        const char *after = skip_ws(q, end);
        if (after < end && *after == ',')
                return (Span){b, (size_t)(skip_ws(after + 1, end) - b)};
        if (after < end && *after == ']')
                return (Span){b, (size_t)(q - b)};
        return (Span){};
}
