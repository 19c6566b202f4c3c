/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* A growable byte queue: appended at the end, consumed from the front.
 * Every Buffer that a peer can fill has a cap, checked by the caller
 * (buffer_size() against its own maximum) before appending; the buffer
 * itself only grows. */

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "shared/macro.h"

typedef struct Buffer {
        char *data;
        size_t start; /* consumed bytes at the front */
        size_t end;   /* first free byte */
        size_t alloc;
} Buffer;

static inline size_t buffer_size(const Buffer *b) {
        return b->end - b->start;
}
static inline const char *buffer_peek(const Buffer *b) {
        return b->data ? b->data + b->start : "";
}
static inline bool buffer_is_empty(const Buffer *b) {
        return b->end == b->start;
}

/* buffer_append() when the room is not there yet: grows the buffer first */
int buffer_append_grow(Buffer *b, const void *p, size_t n);
/* Inline, as buffer_append_str(): a request's head is a few dozen appends, most of them of a few bytes
 * known where they are written, into room that is there already. */
static inline int buffer_append(Buffer *b, const void *p, size_t n) {
        if (n == 0)
                return 0;
        if (b->alloc - b->end < n)
                return buffer_append_grow(b, p, n);
        memcpy(b->data + b->end, p, n);
        b->end += n;
        return 0;
}
static inline int buffer_append_str(Buffer *b, const char *s) {
        return buffer_append(b, s, strlen(s));
}
/* n bytes more at the end, for the caller to write into; NULL when out of memory */
char *buffer_append_space(Buffer *b, size_t n);
int buffer_printf(Buffer *b, const char *fmt, ...) _printf_(2, 3);
/* decimal, without printf: for what every request writes */
int buffer_append_u64(Buffer *b, uint64_t v);
void buffer_consume(Buffer *b, size_t n);
void buffer_done(Buffer *b);
static inline void buffer_clear(Buffer *b) {
        b->start = b->end = 0;
}
/* Empties b, and gives its memory back when it holds more than keep bytes: a buffer that is filled again
 * and again keeps a small allocation (malloc and free each time cost more than the bytes), not one that
 * grew for a single big content */
static inline void buffer_clear_keep(Buffer *b, size_t keep) {
        if (b->alloc > keep)
                buffer_done(b);
        else
                buffer_clear(b);
}
/* Makes the contents a NUL-terminated string (the NUL is not counted) */
int buffer_terminate(Buffer *b);
/* Hands the contents to the caller as a malloc'ed NUL-terminated string and empties the buffer */
char *buffer_steal(Buffer *b, size_t *ret_size);
