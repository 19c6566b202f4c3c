/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Between the request parser's two files: the head's (http-parser.c) and the chunked body's
 * (http-chunked.c) */

#include <errno.h>
#include <stdbool.h>
#include <sys/types.h>

#include "modelgated/http/http.h"

/* The request is refused with status and message (answered by the caller); returns -EBADMSG */
static inline int http_fail(HttpParser *p, int status, const char *message) {
        p->error_status = status;
        p->error_message = message;
        return -EBADMSG;
}

static inline int http_body_too_large(HttpParser *p) {
        return http_fail(p, 413, p->body_limit_message ?: "request body is larger than MaxBodySize");
}

/* n more bytes of head (or of a chunk's extensions and trailers, which are head-like): bounded by
 * MaxHeaderSize=, or a trickle of them would hold the connection for good */
static inline int http_account(HttpParser *p, size_t n) {
        p->header_bytes += n;
        if (p->header_bytes > p->max_header_size)
                return http_fail(p, 431, "request headers are larger than MaxHeaderSize");
        return 0;
}

/* The chunked body's bytes from d: how many belong to this message (all of them, or up to its last
 * byte), or -EBADMSG with the error set */
ssize_t http_chunk_scan(HttpParser *p, const char *d, size_t n);
