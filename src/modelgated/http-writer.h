/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The requests modelgate makes of its own (health probes, /models reads,
 * the feed, warm-ups) are written here, so that every one of them has the
 * same request line and header layout, and a change to it is made once.
 * Requests forwarded for clients are not: their heads are the client's,
 * rewritten. Non-logging; no I/O. */

#include "shared/buffer.h"

/* Appends "<method> <path_prefix><path> HTTP/1.1", "Host: <host>", then each "<name>: <value>" of the
 * NULL-terminated name, value pairs that follow, each line ended by CRLF, and the empty line that ends the
 * head. 0, or -ENOMEM (b then holds part of the head). */
int http_write_request_head(Buffer *b, const char *method, const char *path_prefix, const char *path,
                            const char *host, ...) __attribute__((__sentinel__));
