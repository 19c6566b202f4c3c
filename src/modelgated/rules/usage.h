/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* What a request cost, from the engine's own numbers (rule:usage): the usage and timings llama.cpp (or a
 * fallback) writes into its answer, read as the bytes pass and never holding any back. In an event stream
 * each data line is looked at as the SSE filter passes it on, and only a line that names "usage" or
 * "timings" is parsed; of a whole body only its last USAGE_TAIL bytes are kept, where those members are
 * (llama.cpp writes an object's members in name order, and "timings" and "usage" come last; OpenAI and
 * Anthropic put usage at the end too), and the objects are parsed at its end. Only numbers are kept.
 * Pure. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shared/buffer.h"

#define USAGE_TAIL 4096

typedef struct Usage {
        /* tokens: the prompt's (with the cached ones), of it from the cache, generated; -1 unknown */
        int64_t in, cached, out;
        /* llama.cpp's timings: tokens evaluated and their time, for the prompt and for generation;
         * -1 unknown */
        int64_t prompt_n, predicted_n;
        double prompt_ms, predicted_ms;
        uint64_t deltas; /* stream events that carry a piece of the answer: what a cut stream counts */
        bool first_delta_seen;
        Buffer *tail; /* of a whole body: the caller's working space, kept across requests */
} Usage;

/* Nothing known yet; tail is emptied (NULL: no whole body is read) */
void usage_init(Usage *u, Buffer *tail);
/* Anything read at all */
bool usage_known(const Usage *u);

/* One JSON text (a data line's value, or a body's last bytes): its last "usage" and "timings" objects */
void usage_scan(Usage *u, const char *p, size_t n);
/* The value of an event stream's data line (after "data:" and its space) */
void usage_sse_data(Usage *u, const char *v, size_t n);
/* A whole body's bytes as they pass; usage_body_end() when it is all there. 0 or -ENOMEM. */
int usage_body_feed(Usage *u, const char *p, size_t n);
void usage_body_end(Usage *u);

/* The stream ended before its last event: the pieces that arrived are what was generated, as far as it
 * is known (llama.cpp sends one token in each) */
void usage_cut(Usage *u);

/* Tokens per second over ms, -1 when not known */
double usage_speed(int64_t n, double ms);
