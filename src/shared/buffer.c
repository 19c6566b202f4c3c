/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shared/buffer.h"

static int buffer_reserve(Buffer *b, size_t n) {
        if (b->alloc - b->end >= n)
                return 0;
        /* Slide down what is left before growing: a queue that is drained
         * as fast as it is filled never grows. */
        if (b->start > 0) {
                memmove(b->data, b->data + b->start, b->end - b->start);
                b->end -= b->start;
                b->start = 0;
                if (b->alloc - b->end >= n)
                        return 0;
        }
        size_t want = b->end + n;
        if (want < b->end)
                return -ENOMEM;
        size_t a = b->alloc ? b->alloc : 256;
        while (a < want) {
                if (a > SIZE_MAX / 2)
                        return -ENOMEM;
                a *= 2;
        }
        char *d = realloc(b->data, a);
        if (!d)
                return -ENOMEM;
        b->data = d;
        b->alloc = a;
        return 0;
}

int buffer_append_grow(Buffer *b, const void *p, size_t n) {
        assert(b);
        if (n == 0)
                return 0;
        if (buffer_reserve(b, n) < 0)
                return -ENOMEM;
        memcpy(b->data + b->end, p, n);
        b->end += n;
        return 0;
}

char *buffer_append_space(Buffer *b, size_t n) {
        assert(b);
        if (buffer_reserve(b, n) < 0)
                return NULL;
        b->end += n;
        return b->data + b->end - n;
}

int buffer_printf(Buffer *b, const char *fmt, ...) {
        assert(b);
        va_list ap;
        size_t room;
        int k;

        /* one pass as a rule: format into the room there is, and only again when it was too small */
        if (buffer_reserve(b, 256) < 0)
                return -ENOMEM;
        room = b->alloc - b->end;
        va_start(ap, fmt);
        k = vsnprintf(b->data + b->end, room, fmt, ap);
        va_end(ap);
        if (k < 0)
                return -EINVAL;
        if ((size_t)k >= room) {
                if (buffer_reserve(b, (size_t)k + 1) < 0)
                        return -ENOMEM;
                va_start(ap, fmt);
                (void)vsnprintf(b->data + b->end, (size_t)k + 1, fmt, ap);
                va_end(ap);
        }
        b->end += (size_t)k;
        return 0;
}

int buffer_append_u64(Buffer *b, uint64_t v) {
        size_t n = 1;
        char *q;

        /* the digits counted, then written where they go, from the last: no copy, no call to copy */
        for (uint64_t w = v; w >= 10; w /= 10)
                n++;
        q = buffer_append_space(b, n);
        if (!q)
                return -ENOMEM;
        q += n;
        do
                *--q = (char)('0' + v % 10);
        while (v /= 10);
        return 0;
}

void buffer_consume(Buffer *b, size_t n) {
        assert(b);
        if (n >= buffer_size(b)) {
                b->start = b->end = 0;
                return;
        }
        b->start += n;
}

void buffer_done(Buffer *b) {
        free(b->data);
        *b = (Buffer){};
}

int buffer_terminate(Buffer *b) {
        assert(b);
        if (buffer_reserve(b, 1) < 0)
                return -ENOMEM;
        b->data[b->end] = 0;
        return 0;
}

char *buffer_steal(Buffer *b, size_t *ret_size) {
        assert(b);
        char *s;

        if (buffer_terminate(b) < 0)
                return NULL;
        if (b->start > 0)
                memmove(b->data, b->data + b->start, b->end - b->start + 1);
        if (ret_size)
                *ret_size = b->end - b->start;
        s = b->data;
        *b = (Buffer){};
        return s;
}
