/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* rule:usage: the engine's own token counts and timings, read from its answer as it passes; and
 * rule:usage-charge, for what the answer did not say. */

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "modelgated/api/usage-bytes.h"
#include "modelgated/api/usage.h"
#include "shared/macro.h"

/* Where a count comes from: a later one of a higher or the same rank replaces it, a lower one does not, so
 * that the answer's usage says what it says wherever in the text (or the stream) timings are */
enum {
        RANK_NONE,
        RANK_NATIVE,  /* llama.cpp's native tokens_evaluated, tokens_predicted */
        RANK_TIMINGS, /* llama.cpp's timings */
        RANK_USAGE,   /* a usage object */
};

enum {
        LEX_TOKEN, /* between tokens */
        LEX_STRING,
        LEX_SCALAR, /* a number or a literal */
};

/* What the value after a name is, to this reader */
enum {
        WANT_NONE,
        WANT_USAGE,   /* an object of usage numbers */
        WANT_TIMINGS, /* an object of timings */
        WANT_WRAP,    /* a top-level "message" or "response" object, which may hold usage */
        WANT_NATIVE_IN,
        WANT_NATIVE_OUT,
        WANT_STOP,
        WANT_MEMBER, /* + UsageMember: a number of the usage or timings object being read */
};

void usage_scan_init(UsageScan *s) {
        assert(s);
        s->depth = s->region = s->wrap = s->skip = 0;
        s->arrays = 0;
        s->lex = LEX_TOKEN;
        s->want = WANT_NONE;
        s->region_timings = s->escape = s->key_next = s->in_key = s->counts = s->stop = false;
        s->tok_n = 0;
        s->has = 0;
}

/* A count from a source of rank: written unless a higher one said it */
static void count(int64_t *field, uint8_t *field_rank, uint8_t rank, double v) {
        if (v < 0 || v > (double)INT64_MAX || rank < *field_rank)
                return;
        *field = (int64_t)v;
        *field_rank = rank;
}
#define COUNT(u, f, rank, v) count(&(u)->f, &(u)->f##_rank, rank, v)

static bool has(const UsageScan *s, UsageMember m) {
        return s->has & (1u << m);
}

/* A usage object: OpenAI's chat and completions (prompt_tokens counts the cached ones), Anthropic's
 * (input_tokens is what was not read from the cache, cache_read_input_tokens the rest; message_delta
 * says output_tokens alone, and keeps what message_start said), the Responses API's (input_tokens: all of
 * the prompt) */
static void read_usage(Usage *u, const UsageScan *s) {
        if (has(s, USAGE_M_PROMPT_TOKENS))
                COUNT(u, in, RANK_USAGE, s->v[USAGE_M_PROMPT_TOKENS]);
        if (has(s, USAGE_M_COMPLETION_TOKENS))
                COUNT(u, out, RANK_USAGE, s->v[USAGE_M_COMPLETION_TOKENS]);
        if (has(s, USAGE_M_CACHE_READ_INPUT_TOKENS)) {
                COUNT(u, cached, RANK_USAGE, s->v[USAGE_M_CACHE_READ_INPUT_TOKENS]);
                if (has(s, USAGE_M_INPUT_TOKENS))
                        COUNT(u, in, RANK_USAGE,
                              s->v[USAGE_M_INPUT_TOKENS] + s->v[USAGE_M_CACHE_READ_INPUT_TOKENS]);
        } else if (has(s, USAGE_M_INPUT_TOKENS))
                COUNT(u, in, RANK_USAGE, s->v[USAGE_M_INPUT_TOKENS]);
        if (has(s, USAGE_M_OUTPUT_TOKENS))
                COUNT(u, out, RANK_USAGE, s->v[USAGE_M_OUTPUT_TOKENS]);
        if (has(s, USAGE_M_CACHED_TOKENS))
                COUNT(u, cached, RANK_USAGE, s->v[USAGE_M_CACHED_TOKENS]);
}

/* llama.cpp's timings: the speeds, and the counts where no usage says them (a chat stream without
 * stream_options.include_usage; with timings_per_token, each chunk has its own, the last one stays) */
static void read_timings(Usage *u, const UsageScan *s) {
        double cache_n = has(s, USAGE_M_CACHE_N) ? s->v[USAGE_M_CACHE_N] : -1;

        if (has(s, USAGE_M_PROMPT_N) && s->v[USAGE_M_PROMPT_N] >= 0 &&
            s->v[USAGE_M_PROMPT_N] <= (double)INT64_MAX) {
                u->prompt_n = (int64_t)s->v[USAGE_M_PROMPT_N];
                COUNT(u, in, RANK_TIMINGS, s->v[USAGE_M_PROMPT_N] + MAX(cache_n, 0.0));
        }
        if (has(s, USAGE_M_PROMPT_MS))
                u->prompt_ms = s->v[USAGE_M_PROMPT_MS];
        if (has(s, USAGE_M_PREDICTED_N) && s->v[USAGE_M_PREDICTED_N] >= 0 &&
            s->v[USAGE_M_PREDICTED_N] <= (double)INT64_MAX) {
                u->predicted_n = (int64_t)s->v[USAGE_M_PREDICTED_N];
                COUNT(u, out, RANK_TIMINGS, s->v[USAGE_M_PREDICTED_N]);
        }
        if (has(s, USAGE_M_PREDICTED_MS))
                u->predicted_ms = s->v[USAGE_M_PREDICTED_MS];
        if (cache_n >= 0)
                COUNT(u, cached, RANK_TIMINGS, cache_n);
}

/* A number >= 0: digits, a fraction, an exponent (strtod only then) */
static bool parse_number(const char *t, size_t l, double *ret) {
        static const double pow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                       1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                       1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
        char buf[48], *e;
        uint64_t m = 0;
        size_t i, digits = 0, fraction = 0;

        if (l == 0 || t[0] < '0' || t[0] > '9')
                return false;
        for (i = 0; i < l && t[i] >= '0' && t[i] <= '9'; i++, digits++)
                m = m * 10 + (uint64_t)(t[i] - '0');
        if (i < l && t[i] == '.')
                for (i++; i < l && t[i] >= '0' && t[i] <= '9'; i++, digits++, fraction++)
                        m = m * 10 + (uint64_t)(t[i] - '0');
        /* a mantissa exact in a double over an exact power of ten: one correctly rounded division, as
         * strtod's own fast path (timings' milliseconds, 86.123) */
        if (i == l && digits <= 15 && fraction < ELEMENTSOF(pow10)) {
                *ret = (double)m / pow10[fraction];
                return true;
        }
        if (l >= sizeof(buf) || !strchr(".eE0123456789", t[i < l ? i : 0]))
                return false;
        memcpy(buf, t, l);
        buf[l] = 0;
        *ret = strtod(buf, &e);
        return e == buf + l;
}

#define NAME_IS(t, l, lit) ((l) == sizeof(lit) - 1 && memcmp(t, "" lit, sizeof(lit) - 1) == 0)

/* What a member's name (t, l bytes: not escaped), just read, makes of its value */
static inline uint8_t want_of_name(const UsageScan *s, const char *t, size_t l) {
        if (s->region) {
                /* at any depth of the usage object: prompt_tokens_details.cached_tokens */
#define M(name, m) NAME_IS(t, l, name) ? (uint8_t)(WANT_MEMBER + (m))
                switch (l) {
                case 7:
                        return M("cache_n", USAGE_M_CACHE_N) : WANT_NONE;
                case 8:
                        return M("prompt_n", USAGE_M_PROMPT_N) : WANT_NONE;
                case 9:
                        return M("prompt_ms", USAGE_M_PROMPT_MS) : WANT_NONE;
                case 11:
                        return M("predicted_n", USAGE_M_PREDICTED_N) : WANT_NONE;
                case 12:
                        return M("input_tokens", USAGE_M_INPUT_TOKENS)
                            : M("predicted_ms", USAGE_M_PREDICTED_MS) : WANT_NONE;
                case 13:
                        return M("prompt_tokens", USAGE_M_PROMPT_TOKENS)
                            : M("output_tokens", USAGE_M_OUTPUT_TOKENS)
                            : M("cached_tokens", USAGE_M_CACHED_TOKENS) : WANT_NONE;
                case 17:
                        return M("completion_tokens", USAGE_M_COMPLETION_TOKENS) : WANT_NONE;
                case 23:
                        return M("cache_read_input_tokens", USAGE_M_CACHE_READ_INPUT_TOKENS) : WANT_NONE;
                default:
                        return WANT_NONE;
                }
#undef M
        }
        if (s->depth == 1)
                /* every name of the answer's own object comes here: told apart by its length first */
                switch (l) {
                case 4:
                        return NAME_IS(t, l, "stop") ? WANT_STOP : WANT_NONE;
                case 5:
                        return NAME_IS(t, l, "usage") ? WANT_USAGE : WANT_NONE;
                case 7:
                        return NAME_IS(t, l, "timings")   ? WANT_TIMINGS
                               : NAME_IS(t, l, "message") ? WANT_WRAP
                                                          : WANT_NONE;
                case 8:
                        return NAME_IS(t, l, "response") ? WANT_WRAP : WANT_NONE;
                case 16:
                        return NAME_IS(t, l, "tokens_evaluated")   ? WANT_NATIVE_IN
                               : NAME_IS(t, l, "tokens_predicted") ? WANT_NATIVE_OUT
                                                                   : WANT_NONE;
                default:
                        return WANT_NONE;
                }
        if (s->wrap > 0 && s->depth == s->wrap && NAME_IS(t, l, "usage"))
                return WANT_USAGE;
        return WANT_NONE;
}

static void scalar_end(UsageScan *s, Usage *u) {
        uint8_t w = s->want;
        double v;

        s->want = WANT_NONE;
        s->lex = LEX_TOKEN;
        if (w == WANT_NONE || s->tok_n > sizeof(s->tok))
                return;
        if (w == WANT_STOP) {
                if (NAME_IS(s->tok, s->tok_n, "true"))
                        s->stop = u->ended = true;
                return;
        }
        if (!parse_number(s->tok, s->tok_n, &v))
                return;
        if (w >= WANT_MEMBER) {
                s->v[w - WANT_MEMBER] = v;
                s->has |= 1u << (w - WANT_MEMBER);
        } else if (w == WANT_NATIVE_IN)
                COUNT(u, in, RANK_NATIVE, v);
        else if (w == WANT_NATIVE_OUT)
                COUNT(u, out, RANK_NATIVE, v);
}

static bool in_object(const UsageScan *s) {
        return s->depth >= 1 && s->depth <= 64 && !(s->arrays & (UINT64_C(1) << (s->depth - 1)));
}

static void open_container(UsageScan *s, bool array) {
        if (s->depth == UINT32_MAX)
                return; /* nothing at such a depth is read: it stays deep */
        s->depth++;
        if (s->depth <= 64) {
                if (array)
                        s->arrays |= UINT64_C(1) << (s->depth - 1);
                else
                        s->arrays &= ~(UINT64_C(1) << (s->depth - 1));
        }
        if (!array && s->region == 0 && (s->want == WANT_USAGE || s->want == WANT_TIMINGS)) {
                s->region = s->depth;
                s->region_timings = s->want == WANT_TIMINGS;
                s->has = 0;
                s->counts = true;
        } else if (!array && s->want == WANT_WRAP && s->wrap == 0)
                s->wrap = s->depth;
        else if (s->depth >= 2 && s->region == 0 && s->wrap != s->depth)
                s->skip = s->depth; /* nothing in it is read: passed over (usage_scan_feed()) */
        s->want = WANT_NONE;
        s->key_next = !array;
}

static void close_container(UsageScan *s, Usage *u) {
        s->want = WANT_NONE;
        s->key_next = false;
        if (s->depth == 0)
                return; /* not JSON: nothing is read from a close that opened nothing */
        if (s->region == s->depth) {
                /* whole: what it said is read, usage before timings or after, the ranks decide */
                if (s->region_timings)
                        read_timings(u, s);
                else
                        read_usage(u, s);
                s->region = 0;
        }
        if (s->wrap == s->depth)
                s->wrap = 0;
        s->depth--;
}

/* The bytes that end a number or a literal */
static const bool scalar_end_byte[256] = {
        [','] = true,  ['}'] = true, [']'] = true, [' '] = true, ['\t'] = true, ['\r'] = true,
        ['\n'] = true, [':'] = true, ['"'] = true, ['{'] = true, ['['] = true,
};
/* In a string, from p: past its end, or to end (the string goes on in the next piece); a name's bytes are
 * kept, or read where they are when the name is whole in this piece */
static const char *scan_string(UsageScan *s, const char *p, const char *end) {
        for (;;) {
                if (s->escape) {
                        if (p == end)
                                return end;
                        s->escape = false;
                        p++;
                }
                const char *q = string_stop(p, end);
                if (s->in_key && s->tok_n == 0 && q < end && *q == '"') {
                        s->lex = LEX_TOKEN;
                        s->want = want_of_name(s, p, (size_t)(q - p));
                        return q + 1;
                }
                if (s->in_key) {
                        size_t l = (size_t)(q - p);
                        if (s->tok_n + l <= sizeof(s->tok)) {
                                memcpy(s->tok + s->tok_n, p, l);
                                s->tok_n += l;
                        } else
                                s->tok_n = sizeof(s->tok) + 1;
                }
                if (q == end)
                        return end;
                if (*q == '\\') {
                        s->escape = true;
                        if (s->in_key) /* no name read here is written with an escape */
                                s->tok_n = sizeof(s->tok) + 1;
                        p = q + 1;
                        continue;
                }
                s->lex = LEX_TOKEN;
                if (s->in_key)
                        s->want = s->tok_n > 0 && s->tok_n <= sizeof(s->tok)
                                          ? want_of_name(s, s->tok, s->tok_n)
                                          : WANT_NONE;
                return q + 1;
        }
}

/* The end of a container passed over: what is read after it is its parent's */
static const char *skip_end(UsageScan *s, const char *p) {
        s->skip = 0;
        s->want = WANT_NONE;
        s->key_next = false;
        return p;
}

#ifdef __SSE2__
/* skip_container() sixteen bytes at a time, from p outside a string: which bytes are in strings is told by
 * the quotes before them (a running parity), so only the nesting outside them is looked at one by one. To
 * the first block with a backslash (whose quotes do not say that), or the last whole one: the scan goes on
 * from the returned place byte by byte, in a string if s->lex says so; s->skip 0: past the container. */
static const char *skip_blocks(UsageScan *s, const char *p, const char *end) {
        const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'),
                      bit5 = _mm_set1_epi8(0x20), open = _mm_set1_epi8('{'), close = _mm_set1_epi8('}');
        unsigned in_string = 0; /* 0xffff: the block starts in one */

        for (; end - p >= 16; p += 16) {
                __m128i v = _mm_loadu_si128((const __m128i *)p), folded = _mm_or_si128(v, bit5);
                unsigned q = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, quote)), str;
                unsigned o = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(folded, open));  /* '{' and '[' */
                unsigned c = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(folded, close)); /* '}' and ']' */

                if (_mm_movemask_epi8(_mm_cmpeq_epi8(v, backslash)) != 0)
                        break;
                /* bit i: an odd number of quotes up to byte i, that is byte i in a string */
                str = q ^ (q << 1);
                str ^= str << 2;
                str ^= str << 4;
                str ^= str << 8;
                str = (str ^ in_string) & 0xffff;
                for (unsigned m = (o | c) & ~str; m != 0; m &= m - 1) {
                        unsigned i = (unsigned)__builtin_ctz(m);
                        if (o & (1u << i)) {
                                if (s->depth < UINT32_MAX)
                                        s->depth++;
                        } else if (--s->depth < s->skip)
                                return skip_end(s, p + i + 1);
                }
                in_string = str & 0x8000 ? 0xffff : 0;
        }
        if (in_string) {
                s->lex = LEX_STRING;
                s->in_key = false;
        }
        return p;
}
#endif

/* In a container nothing in which is read, from p: past its end, or to end; only its strings and its
 * nesting are looked at */
static const char *skip_container(UsageScan *s, const char *p, const char *end) {
        for (;;) {
                if (s->lex == LEX_STRING) {
                        p = scan_string(s, p, end);
                        if (s->lex == LEX_STRING)
                                return end;
                }
#ifdef __SSE2__
                if (end - p >= 16) {
                        p = skip_blocks(s, p, end);
                        if (s->skip == 0)
                                return p;
                        if (s->lex == LEX_STRING)
                                continue;
                }
#endif
                p = skip_stop(p, end);
                if (p == end)
                        return end;
                switch (*p++) {
                case '"': {
                        const char *q = string_stop(p, end);
                        if (q < end && *q == '"') {
                                p = q + 1; /* whole, without an escape: the rule */
                                break;
                        }
                        s->lex = LEX_STRING;
                        s->in_key = false;
                        break;
                }
                case '{':
                case '[':
                        if (s->depth < UINT32_MAX)
                                s->depth++;
                        break;
                default:
                        if (--s->depth < s->skip)
                                return skip_end(s, p);
                }
        }
}

/* In a number or a literal, from p: past it (its end is read as a token's), or to end; its bytes kept when
 * it is a value read here */
static const char *scan_scalar(UsageScan *s, Usage *u, const char *p, const char *end) {
        const char *q = p;

        while (q < end && !scalar_end_byte[(unsigned char)*q])
                q++;
        if (s->want != WANT_NONE) {
                size_t l = (size_t)(q - p);
                if (s->tok_n + l <= sizeof(s->tok)) {
                        memcpy(s->tok + s->tok_n, p, l);
                        s->tok_n += l;
                } else
                        s->tok_n = sizeof(s->tok) + 1;
        }
        if (q < end)
                scalar_end(s, u);
        return q;
}

void usage_scan_feed(UsageScan *s, Usage *u, const char *p, size_t n) {
        assert(s);
        assert(u);
        const char *end = p + n;

        /* what the piece before left unfinished; a container passed over is only entered by
         * open_container() (below) */
        if (s->skip > 0)
                p = skip_container(s, p, end);
        else if (s->lex == LEX_STRING)
                p = scan_string(s, p, end);
        else if (s->lex == LEX_SCALAR)
                p = scan_scalar(s, u, p, end);
        while (p < end) {
                switch (*p++) {
                case '{':
                case '[':
                        open_container(s, /* array= */ p[-1] == '[');
                        if (s->skip > 0)
                                p = skip_container(s, p, end);
                        break;
                case '}':
                case ']':
                        close_container(s, u);
                        break;
                case ',':
                        s->want = WANT_NONE;
                        s->key_next = in_object(s);
                        break;
                case ':':
                        s->key_next = false;
                        break;
                case '"': {
                        const char *q = string_stop(p, end);
                        if (q < end && *q == '"') {
                                /* whole in this piece, without an escape: the rule; and the ':' after a
                                 * name or the ',' after a value, as a rule the next byte, taken here as
                                 * the cases below take them */
                                if (s->key_next) {
                                        s->want = want_of_name(s, p, (size_t)(q - p));
                                        s->key_next = false;
                                        p = q + 1;
                                        if (p < end && *p == ':')
                                                p++;
                                } else {
                                        p = q + 1;
                                        if (p < end && *p == ',') {
                                                p++;
                                                s->key_next = in_object(s);
                                        }
                                        s->want = WANT_NONE;
                                }
                                break;
                        }
                        s->lex = LEX_STRING;
                        s->in_key = s->key_next;
                        s->key_next = false;
                        if (s->in_key)
                                s->tok_n = 0;
                        else
                                s->want = WANT_NONE;
                        p = scan_string(s, p, end);
                        break;
                }
                case ' ':
                case '\t':
                case '\r':
                case '\n':
                        break;
                default:
                        s->lex = LEX_SCALAR;
                        s->key_next = false;
                        s->tok_n = 0;
                        p = scan_scalar(s, u, p - 1, end);
                        break;
                }
        }
}

/* One whole text: what it said, in s */
static void scan_text(UsageScan *s, Usage *u, const char *p, size_t n) {
        usage_scan_init(s);
        usage_scan_feed(s, u, p, n);
        if (s->lex == LEX_SCALAR)
                scalar_end(s, u);
}

void usage_scan(Usage *u, const char *p, size_t n) {
        UsageScan s;

        assert(u);
        scan_text(&s, u, p, n);
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

/* Whether a name the scan reads is in the text at all, unescaped, as the scan reads names: a chunk that
 * carries a token (most of a stream's lines) has none, and is looked at quote by quote rather than scanned
 */
static bool may_say_counts(const char *v, size_t n) {
        const char *end = v + n;

        for (const char *q = v; (q = memchr(q, '"', (size_t)(end - q))); q++) {
                const char *t = q + 1;
                size_t left = (size_t)(end - t);
#define FOLLOWS(lit) (left >= sizeof(lit) - 1 && memcmp(t, "" lit, sizeof(lit) - 1) == 0)
                switch (left > 0 ? *t : 0) {
                case 'u':
                        if (FOLLOWS("usage\""))
                                return true;
                        break;
                case 't':
                        if (FOLLOWS("timings\"") || FOLLOWS("tokens_evaluated\"") ||
                            FOLLOWS("tokens_predicted\""))
                                return true;
                        break;
                case 's':
                        if (FOLLOWS("stop\""))
                                return true;
                        break;
                }
#undef FOLLOWS
        }
        return false;
}

void usage_sse_data(Usage *u, UsageEvent ev, const char *v, size_t n) {
        UsageScan s;

        assert(u);
        if (n == 0 || *v != '{')
                return;
        switch (ev) {
        case USAGE_EVENT_COUNTS:
                scan_text(&s, u, v, n);
                return;
        case USAGE_EVENT_DELTA:
                u->deltas++;
                return;
        case USAGE_EVENT_OTHER:
                return;
        case USAGE_EVENT_UNNAMED:
                break;
        }
        /* every line that may say them is read, wherever its members are: a native stream's chunks each say
         * the prompt's count and the tokens so far, and the counts come last in llama.cpp's last chunks but
         * need not. A last chunk (or one with per-token timings, whose predicted_n counts), or a native
         * stream's last, is not a piece of the answer. */
        if (may_say_counts(v, n)) {
                scan_text(&s, u, v, n);
                if (s.counts || s.stop)
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

void usage_cut(Usage *u) {
        assert(u);
        if (u->out < (int64_t)u->deltas)
                u->out = (int64_t)u->deltas;
}

static uint64_t tokens_of_bytes(uint64_t n) {
        return n / USAGE_CHARGE_BYTES_PER_TOKEN + (n % USAGE_CHARGE_BYTES_PER_TOKEN != 0);
}

void usage_charge(Usage *u, uint64_t ask_bytes, int64_t max_out) {
        assert(u);
        if (u->in < 0) {
                u->in = (int64_t)MIN(tokens_of_bytes(ask_bytes), (uint64_t)INT64_MAX);
                u->in_charged = true;
        }
        if (u->out >= 0)
                return;
        if (u->stream) {
                /* each piece that arrived, as a cut stream counts them: a stream says itself */
                u->out = (int64_t)MIN(u->deltas, (uint64_t)INT64_MAX);
                return;
        }
        u->out = max_out >= 0
                         ? max_out
                         : (int64_t)MIN(MAX(tokens_of_bytes(u->body_bytes), (uint64_t)USAGE_CHARGE_OUT_MIN),
                                        (uint64_t)INT64_MAX);
        u->out_charged = true;
}

static const char *format_count(char buf[static 24], int64_t v, bool charged) {
        if (v < 0)
                return "?";
        (void)snprintf(buf, 24, "%s%" PRIi64, charged ? "~" : "", v);
        return buf;
}

size_t usage_format(char *buf, size_t size, const Usage *u) {
        char a[24], b[24], c[24];
        int k;

        assert(buf && size > 0);
        k = snprintf(buf, size, "in:%s,cached:%s,out:%s", format_count(a, u->in, u->in_charged),
                     format_count(b, u->cached, false), format_count(c, u->out, u->out_charged));
        return k < 0 ? 0 : MIN((size_t)k, size - 1);
}
