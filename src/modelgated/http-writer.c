/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* One writer for the request heads modelgate sends of its own accord: see
 * http-writer.h. */

#include <stdarg.h>

#include "modelgated/http-writer.h"

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
