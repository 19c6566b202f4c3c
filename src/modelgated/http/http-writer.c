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

/* without printf: every answer writes one */
int http_write_status_line(Buffer *b, int status, const char *reason) {
        if (buffer_append_str(b, "HTTP/1.1 ") < 0 || buffer_append_u64(b, (uint64_t)status) < 0 ||
            buffer_append_str(b, " ") < 0 || buffer_append_str(b, reason) < 0 ||
            buffer_append_str(b, "\r\n") < 0)
                return -ENOMEM;
        return 0;
}

int http_write_content_length(Buffer *b, uint64_t n) {
        if (buffer_append_str(b, "Content-Length: ") < 0 || buffer_append_u64(b, n) < 0 ||
            buffer_append_str(b, "\r\n") < 0)
                return -ENOMEM;
        return 0;
}

int http_write_request_line(Buffer *b, const char *method, const char *prefix, const char *path,
                            size_t path_len, const char *authority) {
        if (buffer_append_str(b, method) < 0 || buffer_append_str(b, " ") < 0 ||
            buffer_append_str(b, prefix) < 0 || buffer_append(b, path, path_len) < 0 ||
            buffer_append_str(b, " HTTP/1.1\r\nHost: ") < 0 || buffer_append_str(b, authority) < 0 ||
            buffer_append_str(b, "\r\n") < 0)
                return -ENOMEM;
        return 0;
}
