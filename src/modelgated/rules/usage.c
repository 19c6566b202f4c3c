/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* rule:usage: the engine's own token counts and timings, read from its answer as it passes. */

#include <assert.h>
#include <errno.h>
#include <string.h>

#include <stdlib.h>

#include "modelgated/rules/usage.h"
#include "shared/macro.h"

static bool is_space(char c) {
        return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

/* The last quoted name key in p, looked for from the end: the members read here are at the end of what
 * carries them, so that finding one costs the few bytes after it */
static const char *find_last(const char *p, size_t n, const char *key, size_t kl) {
        if (n < kl)
                return NULL;
        /* from quote to quote: memrchr() skips the bytes between */
        for (const char *q = p + n - kl + 1; (q = memrchr(p, '"', (size_t)(q - p)));)
                if (memcmp(q, key, kl) == 0)
                        return q;
        return NULL;
}

/* The numbers read, by name */
typedef enum Member {
        M_PROMPT_TOKENS,
        M_COMPLETION_TOKENS,
        M_CACHE_READ_INPUT_TOKENS,
        M_INPUT_TOKENS,
        M_OUTPUT_TOKENS,
        M_CACHED_TOKENS, /* in prompt_tokens_details or input_tokens_details */
        M_PROMPT_N,
        M_PROMPT_MS,
        M_PREDICTED_N,
        M_PREDICTED_MS,
        M_CACHE_N,
        _M_MAX,
} Member;

#define NAME(s)                                                                                             \
        { "" s, sizeof(s) - 1 }
static const Span member_name[_M_MAX] = {
        [M_PROMPT_TOKENS] = NAME("prompt_tokens"),
        [M_COMPLETION_TOKENS] = NAME("completion_tokens"),
        [M_CACHE_READ_INPUT_TOKENS] = NAME("cache_read_input_tokens"),
        [M_INPUT_TOKENS] = NAME("input_tokens"),
        [M_OUTPUT_TOKENS] = NAME("output_tokens"),
        [M_CACHED_TOKENS] = NAME("cached_tokens"),
        [M_PROMPT_N] = NAME("prompt_n"),
        [M_PROMPT_MS] = NAME("prompt_ms"),
        [M_PREDICTED_N] = NAME("predicted_n"),
        [M_PREDICTED_MS] = NAME("predicted_ms"),
        [M_CACHE_N] = NAME("cache_n"),
};

typedef struct Members {
        double v[_M_MAX];
        unsigned has; /* 1u << Member: v[] of those only is set (so only this is cleared) */
} Members;

/* A number >= 0 at p: digits, a fraction, an exponent (strtod only then). Its end in *ret_end. */
static bool parse_number(const char *p, const char *end, double *ret, const char **ret_end) {
        const char *q = p;
        double v = 0;

        if (q >= end || *q < '0' || *q > '9')
                return false;
        for (; q < end && *q >= '0' && *q <= '9'; q++)
                v = v * 10 + (*q - '0');
        if (q < end && (*q == '.' || *q == 'e' || *q == 'E')) {
                char t[40], *e;
                size_t l = 0;
                while (p + l < end && l < sizeof(t) - 1 && p[l] && strchr("0123456789.eE+-", p[l]))
                        l++;
                memcpy(t, p, l);
                t[l] = 0;
                v = strtod(t, &e);
                q = p + (e - t);
        }
        *ret = v;
        *ret_end = q;
        return true;
}

/* The object that is the value of the member whose quoted name starts at k, as the span from its '{' to
 * its '}', or an empty span when it is not an object or not whole (a tail cut in its middle); in the same
 * pass, into m, every member in it (at any depth) whose value is a number >= 0 and whose name is one of
 * member_name */
static Span object_after(const char *k, size_t kl, const char *end, Members *m) {
        const char *q = k + kl, *o;
        unsigned depth = 0;

        m->has = 0;
        while (q < end && is_space(*q))
                q++;
        if (q >= end || *q != ':')
                return (Span){};
        for (q++; q < end && is_space(*q); q++)
                ;
        if (q >= end || *q != '{')
                return (Span){};
        for (o = q; q < end; q++) {
                if (*q == '{')
                        depth++;
                else if (*q == '}') {
                        if (--depth == 0)
                                return (Span){o, (size_t)(q + 1 - o)};
                } else if (*q == '"') {
                        const char *name = ++q;
                        /* the string's end: a quote that no backslash escapes (names here have none) */
                        while ((q = memchr(q, '"', (size_t)(end - q))) && q[-1] == '\\')
                                q++;
                        if (!q)
                                return (Span){};
                        size_t l = (size_t)(q - name), i;
                        const char *v = q + 1, *after;
                        double d;
                        /* the name first: the value of one not read here (total_tokens, a timing per
                         * token) is passed over as the bytes it is, neither '{', '}' nor '"', not parsed */
                        for (i = 0; i < _M_MAX; i++)
                                if (member_name[i].n == l && member_name[i].p[0] == name[0] &&
                                    memcmp(member_name[i].p, name, l) == 0)
                                        break;
                        if (i == _M_MAX)
                                continue;
                        while (v < end && is_space(*v))
                                v++;
                        if (v >= end || *v != ':')
                                continue; /* a string value, not a name */
                        for (v++; v < end && is_space(*v); v++)
                                ;
                        if (!parse_number(v, end, &d, &after))
                                continue;
                        q = after - 1;
                        m->v[i] = d;
                        m->has |= 1u << i;
                }
        }
        return (Span){};
}

/* The quoted name of the member whose object value ends at close ('}'), or NULL. Walked backwards over
 * the object: what it holds (timings: names and numbers) has no escaped quote; the caller reads it forwards
 * again from the name it finds, which is exact. */
static const char *name_of_object_ending_at(const char *p, const char *close) {
        unsigned depth = 0;
        const char *q;

        for (q = close; q >= p; q--) {
                if (*q == '"') {
                        q = q > p ? memrchr(p, '"', (size_t)(q - p)) : NULL;
                        if (!q)
                                return NULL;
                } else if (*q == '}')
                        depth++;
                else if (*q == '{' && --depth == 0)
                        break;
        }
        if (q < p)
                return NULL;
        for (q--; q >= p && is_space(*q); q--)
                ;
        if (q < p || *q != ':')
                return NULL;
        for (q--; q >= p && is_space(*q); q--)
                ;
        if (q <= p || *q != '"')
                return NULL;
        return memrchr(p, '"', (size_t)(q - p));
}

static Span timings_named_at(const char *k, const char *end, Members *m) {
        if (!k || (size_t)(end - k) < 9 || memcmp(k, "\"timings\"", 9) != 0)
                return (Span){};
        return object_after(k, 9, end, m);
}

/* llama.cpp's timings, looked for only where it writes them (appended to the answer's object, after the
 * members the API has): just after usage or the object that holds it (a stream's last chunk,
 * response.completed), or as the last member (a chat body, whose id comes after usage; a chat stream
 * without include_usage). Anything else would cost a scan of the whole text. */
static Span find_timings(const char *p, size_t n, Span usage, Members *m) {
        const char *end = p + n, *q;
        Span t;

        if (usage.n > 0) {
                unsigned closing = 0;
                for (q = usage.p + usage.n; q < end && (is_space(*q) || *q == '}'); q++)
                        closing += *q == '}';
                /* usage is the last member of the text's own object (as in OpenAI's bodies): what is
                 * looked for below would come back to usage's end, so it is not looked for */
                if (q == end && closing == 1)
                        return (Span){};
                if (q < end && *q == ',')
                        for (q++; q < end && is_space(*q); q++)
                                ;
                if ((t = timings_named_at(q, end, m)).n > 0)
                        return t;
        }
        for (q = end - 1; q >= p && is_space(*q); q--)
                ;
        if (q >= p && *q == '}') /* the text's own end */
                for (q--; q >= p && is_space(*q); q--)
                        ;
        if (q < p || *q != '}' || (usage.n > 0 && q == usage.p + usage.n - 1)) /* usage is the last */
                return (Span){};
        return timings_named_at(name_of_object_ending_at(p, q), end, m);
}

static bool count(const Members *m, Member i, int64_t *ret) {
        if (!(m->has & (1u << i)) || m->v[i] > (double)INT64_MAX)
                return false;
        *ret = (int64_t)m->v[i];
        return true;
}

static void read_usage(Usage *u, const Members *m) {
        int64_t in, cached;

        /* OpenAI's chat and completions: prompt_tokens counts the cached ones */
        u->usage_seen = true;
        if (m->has == 0) /* none of the numbers read here (total_tokens alone, say) */
                return;
        if (count(m, M_PROMPT_TOKENS, &in))
                u->in = in;
        (void)count(m, M_COMPLETION_TOKENS, &u->out);
        /* Anthropic's: input_tokens is what was not read from the cache, cache_read_input_tokens the rest
         * (an event without them, message_delta, keeps what message_start said) */
        if (count(m, M_CACHE_READ_INPUT_TOKENS, &cached)) {
                u->cached = cached;
                if (count(m, M_INPUT_TOKENS, &in))
                        u->in = in + cached;
        } else if (count(m, M_INPUT_TOKENS, &in)) /* Responses: all of the prompt */
                u->in = in;
        (void)count(m, M_OUTPUT_TOKENS, &u->out);
        (void)count(m, M_CACHED_TOKENS, &u->cached);
}

static void read_timings(Usage *u, const Members *m) {
        int64_t cache_n = -1;

        (void)count(m, M_PROMPT_N, &u->prompt_n);
        if (m->has & (1u << M_PROMPT_MS))
                u->prompt_ms = m->v[M_PROMPT_MS];
        (void)count(m, M_PREDICTED_N, &u->predicted_n);
        if (m->has & (1u << M_PREDICTED_MS))
                u->predicted_ms = m->v[M_PREDICTED_MS];
        (void)count(m, M_CACHE_N, &cache_n);
        /* an answer with timings and no usage (a chat stream without stream_options.include_usage): the
         * timings say it, the last of them (with timings_per_token, each chunk has its own) */
        if (u->usage_seen)
                return;
        if (u->prompt_n >= 0)
                u->in = u->prompt_n + MAX(cache_n, (int64_t)0);
        if (cache_n >= 0)
                u->cached = cache_n;
        if (u->predicted_n >= 0)
                u->out = u->predicted_n;
}

void usage_scan(Usage *u, const char *p, size_t n) {
        assert(u);
        const char *k = find_last(p, n, "\"usage\"", 7);
        Members mu, mt;
        Span o = k ? object_after(k, 7, p + n, &mu) : (Span){};

        /* usage first: timings fill in only what it did not say */
        if (o.n > 0)
                read_usage(u, &mu);
        if (find_timings(p, n, o, &mt).n > 0)
                read_timings(u, &mt);
}

static bool name_is(const char *v, size_t n, const char *s) {
        return n == strlen(s) && memcmp(v, s, n) == 0;
}

UsageEvent usage_event_of(const char *v, size_t n) {
        if (name_is(v, n, "content_block_delta") ||
            (n > 15 && memcmp(v, "response.", 9) == 0 && memcmp(v + n - 6, ".delta", 6) == 0))
                return USAGE_EVENT_DELTA;
        if (name_is(v, n, "message_start") || name_is(v, n, "message_delta") ||
            name_is(v, n, "response.completed"))
                return USAGE_EVENT_COUNTS;
        return USAGE_EVENT_OTHER;
}

/* The data ends with an object member: "…}}" */
static bool ends_with_object(const char *v, size_t n) {
        while (n > 0 && is_space(v[n - 1]))
                n--;
        if (n < 2 || v[n - 1] != '}')
                return false;
        for (n--; n > 0 && is_space(v[n - 1]); n--)
                ;
        return n > 0 && v[n - 1] == '}';
}

void usage_sse_data(Usage *u, UsageEvent ev, const char *v, size_t n) {
        assert(u);

        if (n == 0 || *v != '{')
                return;
        switch (ev) {
        case USAGE_EVENT_COUNTS:
                usage_scan(u, v, n);
                return;
        case USAGE_EVENT_DELTA:
                u->deltas++;
                return;
        case USAGE_EVENT_OTHER:
                return;
        case USAGE_EVENT_UNNAMED:
                break;
        }
        if (ends_with_object(v, n)) {
                /* a last chunk (or one with per-token timings) */
                usage_scan(u, v, n);
                return;
        }
        /* a chat stream's first chunk names the role and carries no token: looked for once */
        if (!u->first_delta_seen) {
                u->first_delta_seen = true;
                if (memmem(v, n, "\"role\"", 6))
                        return;
        }
        u->deltas++;
}

/* usage_body_feed() of a piece that is not the whole body: its last bytes kept */
int usage_body_keep(Usage *u, const char *p, size_t n) {
        assert(u && u->tail);
        Buffer *t = u->tail;

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

/* usage_body_end() of a body whose last bytes were kept */
void usage_body_read(Usage *u) {
        assert(u && u->tail && !u->body_read);
        usage_scan(u, buffer_peek(u->tail), buffer_size(u->tail));
        buffer_clear(u->tail);
}

void usage_cut(Usage *u) {
        assert(u);
        if (u->out < (int64_t)u->deltas)
                u->out = (int64_t)u->deltas;
}
