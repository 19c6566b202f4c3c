/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* rule:usage: the engine's own token counts and timings, read from its answer as it passes. */

#include <assert.h>
#include <errno.h>
#include <string.h>

#include "modelgated/rules/json-util.h"
#include "modelgated/rules/usage.h"

void usage_init(Usage *u, Buffer *tail) {
        assert(u);
        *u = (Usage){.in = -1, .cached = -1, .out = -1, .prompt_n = -1, .predicted_n = -1, .tail = tail};
        if (tail)
                buffer_clear(tail);
}

bool usage_known(const Usage *u) {
        return u->in >= 0 || u->out >= 0;
}

/* The last occurrence of needle in p */
static const char *find_last(const char *p, size_t n, const char *needle, size_t l) {
        const char *last = NULL;
        for (const char *q = p; q < p + n && (q = memmem(q, n - (size_t)(q - p), needle, l)); q++)
                last = q;
        return last;
}

/* The object that follows key (a quoted name) last in p, parsed, or NULL. A quoted name inside a JSON
 * string has its quotes escaped, so only a member matches. */
static json_object *member_object(const char *p, size_t n, const char *key, size_t kl) {
        const char *k = find_last(p, n, key, kl), *end = p + n, *q;
        if (!k)
                return NULL;
        for (q = k + kl; q < end && (*q == ' ' || *q == '\t' || *q == '\r' || *q == '\n' || *q == ':'); q++)
                ;
        if (q >= end || *q != '{')
                return NULL;
        json_tokener *tok = json_tokener_new();
        if (!tok)
                return NULL;
        json_object *o = json_tokener_parse_ex(tok, q, (int)MIN((size_t)(end - q), (size_t)INT32_MAX));
        json_tokener_free(tok);
        if (o && !json_object_is_type(o, json_type_object)) {
                json_object_put(o);
                return NULL;
        }
        return o; /* NULL too when the object is not whole (a tail cut in its middle) */
}

static bool get_number(json_object *o, const char *key, double *ret) {
        json_object *v;
        if (!json_object_object_get_ex(o, key, &v) ||
            !(json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double)))
                return false;
        double d = json_object_get_double(v);
        if (d < 0)
                return false;
        *ret = d;
        return true;
}

static bool get_count(json_object *o, const char *key, int64_t *ret) {
        double d;
        if (!get_number(o, key, &d))
                return false;
        *ret = (int64_t)d;
        return true;
}

static void read_usage(Usage *u, json_object *o) {
        json_object *details;
        int64_t in, cached;

        /* OpenAI's chat and completions: prompt_tokens counts the cached ones */
        if (get_count(o, "prompt_tokens", &in))
                u->in = in;
        (void)get_count(o, "completion_tokens", &u->out);
        /* Anthropic's: input_tokens is what was not read from the cache, cache_read_input_tokens the rest
         * (an event without them, message_delta, keeps what message_start said) */
        if (get_count(o, "cache_read_input_tokens", &cached)) {
                u->cached = cached;
                if (get_count(o, "input_tokens", &in))
                        u->in = in + cached;
        } else if (get_count(o, "input_tokens", &in)) /* Responses: all of the prompt */
                u->in = in;
        (void)get_count(o, "output_tokens", &u->out);
        if ((json_object_object_get_ex(o, "prompt_tokens_details", &details) ||
             json_object_object_get_ex(o, "input_tokens_details", &details)) &&
            json_object_is_type(details, json_type_object))
                (void)get_count(details, "cached_tokens", &u->cached);
}

static void read_timings(Usage *u, json_object *o) {
        int64_t cache_n = -1;

        (void)get_count(o, "prompt_n", &u->prompt_n);
        (void)get_number(o, "prompt_ms", &u->prompt_ms);
        (void)get_count(o, "predicted_n", &u->predicted_n);
        (void)get_number(o, "predicted_ms", &u->predicted_ms);
        (void)get_count(o, "cache_n", &cache_n);
        /* an answer with timings and no usage (a chat stream without stream_options.include_usage,
         * llama.cpp's own /completion): the timings say it */
        if (u->in < 0 && u->prompt_n >= 0)
                u->in = u->prompt_n + MAX(cache_n, (int64_t)0);
        if (u->cached < 0 && cache_n >= 0)
                u->cached = cache_n;
        if (u->out < 0 && u->predicted_n >= 0)
                u->out = u->predicted_n;
}

void usage_scan(Usage *u, const char *p, size_t n) {
        assert(u);
        json_object *o;

        /* usage first: timings fill in only what it did not say */
        if ((o = member_object(p, n, "\"usage\"", 7))) {
                read_usage(u, o);
                json_object_put(o);
        }
        if ((o = member_object(p, n, "\"timings\"", 9))) {
                read_timings(u, o);
                json_object_put(o);
        }
}

void usage_sse_data(Usage *u, const char *v, size_t n) {
        assert(u);

        if (n == 0 || *v != '{')
                return;
        if (memmem(v, n, "\"usage\"", 7) || memmem(v, n, "\"timings\"", 9))
                usage_scan(u, v, n);
        else if (memmem(v, n, "\"delta\"", 7)) {
                /* a chat stream's first chunk names the role and carries no token: looked for once */
                if (!u->first_delta_seen && (u->first_delta_seen = true) && memmem(v, n, "\"role\"", 6))
                        return;
                u->deltas++;
        }
}

int usage_body_feed(Usage *u, const char *p, size_t n) {
        assert(u);
        Buffer *t = u->tail;

        if (!t)
                return 0;
        if (n >= USAGE_TAIL) {
                buffer_clear(t);
                return buffer_append(t, p + n - USAGE_TAIL, USAGE_TAIL);
        }
        if (buffer_append(t, p, n) < 0)
                return -ENOMEM;
        if (buffer_size(t) > 2 * USAGE_TAIL)
                buffer_consume(t, buffer_size(t) - USAGE_TAIL);
        return 0;
}

void usage_body_end(Usage *u) {
        assert(u);

        if (!u->tail)
                return;
        usage_scan(u, buffer_peek(u->tail), buffer_size(u->tail));
        buffer_clear(u->tail);
}

void usage_cut(Usage *u) {
        assert(u);
        if (u->out < (int64_t)u->deltas)
                u->out = (int64_t)u->deltas;
}

double usage_speed(int64_t n, double ms) {
        return n >= 0 && ms > 0 ? (double)n * 1000.0 / ms : -1;
}
