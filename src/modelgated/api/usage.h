/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* What a request cost, from the engine's own numbers (rule:usage): the usage and timings llama.cpp (or a
 * fallback) writes into its answer, read as the bytes pass and never holding any back. A JSON text (a whole
 * body in pieces of any size, or one data line of an event stream) goes through a small scanner that keeps
 * a bounded state (the depth, whether each level is an object, a name or a number of at most 40 bytes)
 * and reads members by where they are, whatever their order: "usage" and "timings" at the top (or "usage"
 * inside a top-level "message" or "response": Anthropic's message_start, response.completed), and
 * llama.cpp's native "tokens_evaluated", "tokens_predicted" and "stop" at the top. A member inside a
 * string, or deeper in the answer, is never one of them: an answer's text cannot say what it cost.
 * What no member said is charged by rule:usage-charge (usage_charge()). Pure, without json-c: a tokener
 * and its objects cost more than the rest of a small request's accounting. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The numbers read inside a usage or timings object, by name */
typedef enum UsageMember {
        USAGE_M_PROMPT_TOKENS,
        USAGE_M_COMPLETION_TOKENS,
        USAGE_M_CACHE_READ_INPUT_TOKENS,
        USAGE_M_INPUT_TOKENS,
        USAGE_M_OUTPUT_TOKENS,
        USAGE_M_CACHED_TOKENS, /* in prompt_tokens_details or input_tokens_details */
        USAGE_M_PROMPT_N,
        USAGE_M_PROMPT_MS,
        USAGE_M_PREDICTED_N,
        USAGE_M_PREDICTED_MS,
        USAGE_M_CACHE_N,
        _USAGE_M_MAX,
} UsageMember;

/* One JSON text being read: its state between two pieces */
typedef struct UsageScan {
        uint32_t depth;      /* containers open */
        uint64_t arrays;     /* bit d - 1: the container at depth d is an array (up to depth 64) */
        uint32_t region;     /* the depth of the usage or timings object being read, 0: none */
        uint32_t wrap;       /* the depth of a top-level "message" or "response" object, 0: none */
        uint32_t skip;       /* the depth of a container nothing in which is read (passed over), 0: none */
        uint8_t lex;         /* between tokens, in a string, in a number or literal */
        uint8_t want;        /* what the value after the name just read is, to this reader */
        bool region_timings; /* the region is a timings object (else usage) */
        bool escape;         /* in a string, after a backslash */
        bool key_next;       /* the next string is a member's name */
        bool in_key;         /* the string being read is one */
        bool counts;         /* this text had a usage or timings object where they are read */
        bool stop;           /* and llama.cpp's native "stop": true */
        uint8_t tok_n;       /* bytes of a name or a scalar so far; sizeof(tok) + 1: longer, not ours */
        char tok[40];
        unsigned has; /* 1u << UsageMember: v[] of those only is set */
        double v[_USAGE_M_MAX];
} UsageScan;

typedef struct Usage {
        /* tokens: the prompt's (with the cached ones), of it from the cache, generated; -1 unknown */
        int64_t in, cached, out;
        /* llama.cpp's timings: tokens evaluated and their time, for the prompt and for generation;
         * -1 unknown */
        int64_t prompt_n, predicted_n;
        double prompt_ms, predicted_ms;
        uint64_t deltas;     /* stream events that carry a piece of the answer: what a cut stream counts */
        uint64_t body_bytes; /* of a whole body, read so far */
        bool stream;         /* an event stream (else a whole JSON body) */
        bool first_delta_seen;
        /* what said in, cached and out: a usage object outranks timings, which outrank llama.cpp's native
         * counts, whatever their order (usage.c) */
        uint8_t in_rank, cached_rank, out_rank;
        bool ended; /* a native stream's last chunk ("stop": true, no [DONE] follows) went by */
        /* rule:usage-charge: the part was not said by the answer, and is charged by the rule */
        bool in_charged, out_charged;
        UsageScan body; /* a whole body's scan */
} Usage;

void usage_scan_init(UsageScan *s);

/* Nothing known yet, for an event stream or a whole body. Inline, field by field: each answer that may carry
 * usage starts with it, and a struct assignment cleared it byte by byte. */
static inline void usage_init(Usage *u, bool stream) {
        u->in = u->cached = u->out = u->prompt_n = u->predicted_n = -1;
        u->prompt_ms = u->predicted_ms = 0;
        u->deltas = u->body_bytes = 0;
        u->stream = stream;
        u->in_rank = u->cached_rank = u->out_rank = 0;
        u->first_delta_seen = u->ended = false;
        u->in_charged = u->out_charged = false;
        if (!stream)
                usage_scan_init(&u->body);
}
/* Anything read at all (inline, as usage_speed(): the access line, the metrics and the activity record
 * each ask at every request's end) */
static inline bool usage_known(const Usage *u) {
        return u->in >= 0 || u->out >= 0;
}

/* A piece of the JSON text s reads: what it completes is read into u */
void usage_scan_feed(UsageScan *s, Usage *u, const char *p, size_t n);
/* One whole JSON text (a data line's value) */
void usage_scan(Usage *u, const char *p, size_t n);
/* What an event's name says of its data */
typedef enum UsageEvent {
        USAGE_EVENT_UNNAMED, /* no event line: OpenAI's chat and completions, llama.cpp's native routes */
        USAGE_EVENT_COUNTS,  /* message_start, message_delta, response.completed */
        USAGE_EVENT_DELTA,   /* content_block_delta, response.….delta: a piece of the answer */
        USAGE_EVENT_OTHER,
} UsageEvent;
UsageEvent usage_event_of(const char *name, size_t n);
/* The value of an event stream's data line (after "data:" and its space), in an event of kind ev */
void usage_sse_data(Usage *u, UsageEvent ev, const char *v, size_t n);
/* A whole body's bytes as they pass */
static inline void usage_body_feed(Usage *u, const char *p, size_t n) {
        u->body_bytes += n;
        usage_scan_feed(&u->body, u, p, n);
}

/* The stream ended before its last event: the pieces that arrived are what was generated, as far as it
 * is known (llama.cpp sends one token in each) */
void usage_cut(Usage *u);

/* rule:usage-charge: a generation's answer whose tokens were not all said is charged for what it may have
 * cost: a prompt not said at a token for each USAGE_CHARGE_BYTES_PER_TOKEN bytes of the request's body
 * (ask_bytes, rounded up); generated tokens not said, in a stream, one for each piece that arrived, and of a
 * whole body, the request's own limit (max_out >= 0: n_predict, max_tokens, …), else the larger of
 * USAGE_CHARGE_OUT_MIN and the answer's bytes at the same rate. in_charged and out_charged say which. */
#define USAGE_CHARGE_BYTES_PER_TOKEN 4
#define USAGE_CHARGE_OUT_MIN 4096
void usage_charge(Usage *u, uint64_t ask_bytes, int64_t max_out);

/* "in:812,cached:640,out:95" ("?" for a part not known, "~" before a charged one), into buf; its length */
size_t usage_format(char *buf, size_t size, const Usage *u);

/* Tokens per second over ms, -1 when not known */
static inline double usage_speed(int64_t n, double ms) {
        return n >= 0 && ms > 0 ? (double)n * 1000.0 / ms : -1;
}

/* rule:usage: the prompt's tokens the engine evaluated, not taken from its prompt cache: llama.cpp's
 * timings.prompt_n when said (what the GPU did), else the prompt less its cached part; -1 unknown */
static inline int64_t usage_prefilled(const Usage *u) {
        if (u->prompt_n >= 0)
                return u->prompt_n;
        if (u->in >= 0 && !u->in_charged && u->cached >= 0) /* rule:usage-charge's is not the engine's */
                return u->in > u->cached ? u->in - u->cached : 0;
        return -1;
}
