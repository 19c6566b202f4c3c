/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Every head modelgate writes is written here: the requests it makes of its
 * own (health probes, /models reads, the feed, warm-ups), and the status
 * line, framing headers and event-stream head of every answer to a client,
 * so that a change to their layout is made once. The headers of a forwarded
 * request or answer are the peer's, filtered where they are forwarded.
 * Non-logging; no I/O; no printf on the per-request paths. */

#include <stdint.h>

#include "shared/buffer.h"

/* The headers of an event stream modelgate answers itself (the early 200, /models/sse) */
#define HTTP_SSE_HEADERS "Content-Type: text/event-stream\r\nCache-Control: no-cache\r\n"

/* "<method> <prefix><path> HTTP/1.1", "Host: <authority>", each with CRLF: the start of a request whose
 * other headers follow. 0 or -ENOMEM. */
int http_write_request_line(Buffer *b, const char *method, const char *prefix, const char *path,
                            size_t path_len, const char *authority);
/* "HTTP/1.1 <status> <reason>" and CRLF. 0 or -ENOMEM. */
int http_write_status_line(Buffer *b, int status, const char *reason);
/* "Content-Length: <n>" and CRLF. 0 or -ENOMEM. */
int http_write_content_length(Buffer *b, uint64_t n);

/* Appends "<method> <path_prefix><path> HTTP/1.1", "Host: <host>", then each "<name>: <value>" of the
 * NULL-terminated name, value pairs that follow, each line ended by CRLF, and the empty line that ends the
 * head. 0, or -ENOMEM (b then holds part of the head). */
int http_write_request_head(Buffer *b, const char *method, const char *path_prefix, const char *path,
                            const char *host, ...) __attribute__((__sentinel__));
