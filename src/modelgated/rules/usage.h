/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* What a request cost, from the engine's own numbers (rule:usage): the usage and timings llama.cpp (or a
 * fallback) writes into its answer, read as the bytes pass and never holding any back. In an event stream
 * each data line is looked at as the SSE filter passes it on, and only one that can carry them is read:
 * after event message_start, message_delta or response.completed, or, in a stream without event names
 * (chat, completions), a line that ends with an object member ("}}"), as llama.cpp's last chunks do. Of a
 * whole body only its last USAGE_TAIL bytes are kept, where those members are (llama.cpp writes an
 * object's members in name order, so "timings" and "usage" come last; OpenAI and Anthropic put usage at
 * the end too), and read at its end. Both are looked for from the end, and only numbers are kept, without
 * json-c: a tokener and its objects cost more than the rest of a small request's accounting. Pure. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shared/buffer.h"

#define USAGE_TAIL 2048

typedef struct Usage {
        /* tokens: the prompt's (with the cached ones), of it from the cache, generated; -1 unknown */
        int64_t in, cached, out;
        /* llama.cpp's timings: tokens evaluated and their time, for the prompt and for generation;
         * -1 unknown */
        int64_t prompt_n, predicted_n;
        double prompt_ms, predicted_ms;
        uint64_t deltas; /* stream events that carry a piece of the answer: what a cut stream counts */
        bool first_delta_seen;
        bool usage_seen; /* a usage object said the counts: timings no longer do */
        Buffer *tail;    /* of a whole body: the caller's working space, kept across requests */
        bool body_read;  /* the body's last piece was read where it was */
} Usage;

/* Nothing known yet; tail is emptied (NULL: no whole body is read). Inline, field by field: each answer
 * that may carry usage starts with it, and a struct assignment cleared it byte by byte. */
static inline void usage_init(Usage *u, Buffer *tail) {
        u->in = u->cached = u->out = u->prompt_n = u->predicted_n = -1;
        u->prompt_ms = u->predicted_ms = 0;
        u->deltas = 0;
        u->first_delta_seen = u->usage_seen = u->body_read = false;
        u->tail = tail;
        if (tail)
                buffer_clear(tail);
}
/* Anything read at all (inline, as usage_speed(): the access line, the metrics and the activity record
 * each ask at every request's end) */
static inline bool usage_known(const Usage *u) {
        return u->in >= 0 || u->out >= 0;
}

/* One JSON text (a data line's value, or a body's last bytes): its last "usage" and "timings" objects */
void usage_scan(Usage *u, const char *p, size_t n);
/* What an event's name says of its data */
typedef enum UsageEvent {
        USAGE_EVENT_UNNAMED, /* no event line: OpenAI's chat and completions */
        USAGE_EVENT_COUNTS,  /* message_start, message_delta, response.completed */
        USAGE_EVENT_DELTA,   /* content_block_delta, response.….delta: a piece of the answer */
        USAGE_EVENT_OTHER,
} UsageEvent;
UsageEvent usage_event_of(const char *name, size_t n);
/* The value of an event stream's data line (after "data:" and its space), in an event of kind ev */
void usage_sse_data(Usage *u, UsageEvent ev, const char *v, size_t n);
/* A whole body's bytes as they pass (last: they end it, when the caller knows its length); usage_body_end()
 * when it is all there. 0 or -ENOMEM. Inline where a small answer goes, whole in one piece: read where
 * it is, not copied. */
int usage_body_keep(Usage *u, const char *p, size_t n);
static inline int usage_body_feed(Usage *u, const char *p, size_t n, bool last) {
        if (!u->tail || u->body_read)
                return 0;
        if (last && buffer_is_empty(u->tail)) {
                size_t k = n < USAGE_TAIL ? n : USAGE_TAIL;
                usage_scan(u, p + n - k, k);
                u->body_read = true;
                return 0;
        }
        return usage_body_keep(u, p, n);
}
void usage_body_read(Usage *u);
static inline void usage_body_end(Usage *u) {
        if (u->tail && !u->body_read)
                usage_body_read(u);
}

/* The stream ended before its last event: the pieces that arrived are what was generated, as far as it
 * is known (llama.cpp sends one token in each) */
void usage_cut(Usage *u);

/* Tokens per second over ms, -1 when not known */
static inline double usage_speed(int64_t n, double ms) {
        return n >= 0 && ms > 0 ? (double)n * 1000.0 / ms : -1;
}

/* rule:usage: the prompt's tokens the engine evaluated, not taken from its prompt cache: llama.cpp's
 * timings.prompt_n when said (what the GPU did), else the prompt less its cached part; -1 unknown */
static inline int64_t usage_prefilled(const Usage *u) {
        if (u->prompt_n >= 0)
                return u->prompt_n;
        if (u->in >= 0 && u->cached >= 0)
                return u->in > u->cached ? u->in - u->cached : 0;
        return -1;
}
