/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* One writer for the heads modelgate writes: see http-writer.h. */

#include <stdarg.h>

#include "modelgated/http/http-writer.h"

int http_write_request_head(Buffer *b, const char *method, const char *path_prefix, const char *path,
                            const char *host, ...) {
        va_list ap;
        int r;

        r = buffer_printf(b, "%s %s%s HTTP/1.1\r\nHost: %s\r\n", method, path_prefix, path, host);
        va_start(ap, host);
        for (const char *name; r >= 0 && (name = va_arg(ap, const char *));) {
                const char *value = va_arg(ap, const char *);
                r = buffer_printf(b, "%s: %s\r\n", name, value);
        }
        va_end(ap);
        return r < 0 ? r : buffer_append_str(b, "\r\n");
}

/* The heads' lines are written into room reserved once, in copies of lengths known beforehand: every
 * request and every answer writes them, and an append each was a room check and a call each */
static inline char *put(char *p, const char *s, size_t n) {
        memcpy(p, s, n);
        return p + n;
}
#define PUT_LIT(p, s) put(p, "" s, sizeof(s) - 1)

static size_t u64_len(uint64_t v) {
        size_t n = 1;
        while (v >= 10) {
                v /= 10;
                n++;
        }
        return n;
}

/* v's n digits at p; returns the end */
static char *put_u64(char *p, uint64_t v, size_t n) {
        char *q = p + n;
        do
                *--q = (char)('0' + v % 10);
        while (v /= 10);
        return p + n;
}

/* without printf: every answer writes one */
int http_write_status_line(Buffer *b, int status, const char *reason) {
        uint64_t s = (uint64_t)status;
        size_t rl = strlen(reason), sl = u64_len(s);
        char *p = buffer_append_space(b, 9 + sl + 1 + rl + 2);

        if (!p)
                return -ENOMEM;
        p = PUT_LIT(p, "HTTP/1.1 ");
        p = put_u64(p, s, sl);
        p = PUT_LIT(p, " ");
        p = put(p, reason, rl);
        PUT_LIT(p, "\r\n");
        return 0;
}

int http_write_content_length(Buffer *b, uint64_t n) {
        size_t l = u64_len(n);
        char *p = buffer_append_space(b, 16 + l + 2);

        if (!p)
                return -ENOMEM;
        p = PUT_LIT(p, "Content-Length: ");
        p = put_u64(p, n, l);
        PUT_LIT(p, "\r\n");
        return 0;
}

int http_write_request_line(Buffer *b, const char *method, const char *prefix, const char *path,
                            size_t path_len, const char *authority) {
        size_t ml = strlen(method), pl = strlen(prefix), al = strlen(authority);
        char *p = buffer_append_space(b, ml + 1 + pl + path_len + 17 + al + 2);

        if (!p)
                return -ENOMEM;
        p = put(p, method, ml);
        p = PUT_LIT(p, " ");
        p = put(p, prefix, pl);
        p = put(p, path, path_len);
        p = PUT_LIT(p, " HTTP/1.1\r\nHost: ");
        p = put(p, authority, al);
        PUT_LIT(p, "\r\n");
        return 0;
}
