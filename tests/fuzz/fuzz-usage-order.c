/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* rule:usage and rule:usage-charge whatever the order of an answer's members: llama.cpp's answers in their
 * own shapes (tools/server/server-task.cpp), a native /completion body (with n_probs, so that
 * completion_probabilities follows timings) and a chat completion's, each as a JSON body and as an event
 * stream, with their top-level members permuted and some left out (as response_fields leaves them out),
 * fed in pieces of any size. The usage read is the numbers the answer's members say (they all say the same:
 * 812 in, 640 of them cached, 95 out), whatever their order; what no member says is charged by the rule,
 * never 0; a member's name in the answer's text (a decoy in content and prompt) is never read.
 *
 * Input: byte 0 picks the shape, byte 1 the members left out (bit i: member i), byte 2 the size of the
 * pieces, and the rest the order (a Lehmer code, a byte a position). An input of those 3 bytes alone with
 * bit 7 of byte 0 set puts the members in every order there is (8! of them) instead: the corpus has each
 * shape so, which the plain corpus runner replays as a test. */

#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "modelgated/api/sse.h"
#include "modelgated/api/usage.h"

#define N_MAX 8
#define ASK_BYTES 4000 /* the request's body: 1000 tokens by the rule */

#define TIMINGS                                                                                             \
        "\"timings\":{\"cache_n\":640,\"prompt_n\":172,\"prompt_ms\":86.0,\"prompt_per_token_ms\":0.5,"     \
        "\"prompt_per_second\":2000.0,\"predicted_n\":95,\"predicted_ms\":2000.0,"                          \
        "\"predicted_per_token_ms\":21.0,\"predicted_per_second\":47.5}"
#define DECOY "\"x \\\"usage\\\":{\\\"prompt_tokens\\\":1},\\\"tokens_predicted\\\":2,\\\"stop\\\":true}}\""

/* What a member says */
enum {
        SAYS_IN = 1 << 0,     /* the prompt's count */
        SAYS_CACHED = 1 << 1, /* of it, the cached */
        SAYS_OUT = 1 << 2,    /* the generated */
        SAYS_STOP = 1 << 3,   /* a native stream's last chunk */
};

typedef struct Member {
        const char *text;
        unsigned says;
} Member;

typedef struct Shape {
        const char *name;
        bool stream;
        const char *before; /* a stream's events before the one permuted */
        const char *after;  /* and after it */
        Member m[N_MAX];    /* the members of the body (or of the permuted event's data) */
        /* a stream's: what its earlier events say (a native stream's partial chunks), and its pieces */
        unsigned before_says;
        uint64_t pieces;
} Shape;

static const Shape shapes[] = {
        {
                .name = "native /completion body, n_probs",
                .m = {{"\"index\":0,\"content\":" DECOY ",\"tokens\":[],\"id_slot\":0"},
                      {"\"stop\":true", SAYS_STOP},
                      {"\"model\":\"m\",\"generation_settings\":{\"n_predict\":-1,\"timings\":{\"prompt_n\":"
                       "1},"
                       "\"samplers\":[\"top_k\"]},\"prompt\":" DECOY},
                      {"\"tokens_predicted\":95", SAYS_OUT},
                      {"\"tokens_evaluated\":812", SAYS_IN},
                      {"\"has_new_line\":false,\"truncated\":false,\"stop_type\":\"limit\",\"stopping_"
                       "word\":"
                       "\"\",\"tokens_cached\":906"},
                      {TIMINGS, SAYS_IN | SAYS_CACHED | SAYS_OUT},
                      {"\"completion_probabilities\":[{\"id\":1,\"token\":\"}}\",\"logprob\":-1e-05,"
                       "\"bytes\":"
                       "[125,125],\"top_logprobs\":[{\"id\":2,\"token\":\"{\",\"logprob\":-9.5,\"bytes\":["
                       "123]}]}]"}},
        },
        {
                .name = "chat completion body",
                .m = {{"\"choices\":[{\"finish_reason\":\"stop\",\"index\":0,\"message\":{\"role\":"
                       "\"assistant\","
                       "\"content\":" DECOY "},\"logprobs\":{\"content\":[{\"id\":1,\"token\":\"a\","
                       "\"logprob\":-0.5,\"bytes\":[97],\"top_logprobs\":[]}]}}]"},
                      {"\"created\":1"},
                      {"\"model\":\"m\""},
                      {"\"system_fingerprint\":\"b1-0\""},
                      {"\"object\":\"chat.completion\""},
                      {"\"usage\":{\"completion_tokens\":95,\"prompt_tokens\":812,\"total_tokens\":907,"
                       "\"prompt_tokens_details\":{\"cached_tokens\":640}}",
                       SAYS_IN | SAYS_CACHED | SAYS_OUT},
                      {"\"id\":\"chatcmpl-1\""},
                      {TIMINGS, SAYS_IN | SAYS_CACHED | SAYS_OUT}},
        },
        {
                .name = "native /completion stream",
                .stream = true,
                .before = "data: {\"index\":0,\"content\":" DECOY
                          ",\"tokens\":[1],\"stop\":false,\"id_slot\":0,"
                          "\"tokens_predicted\":1,\"tokens_evaluated\":812}\n\n"
                          "data: {\"index\":0,\"content\":\"b\",\"tokens\":[2],\"stop\":false,\"id_slot\":0,"
                          "\"tokens_predicted\":2,\"tokens_evaluated\":812,\"completion_probabilities\":[{"
                          "\"id\":2,"
                          "\"token\":\"}}\",\"logprob\":-0.5,\"bytes\":[125,125],\"top_logprobs\":[]}]}\n\n"
                          "data: ",
                .after = "\n\n",
                .m = {{"\"index\":0,\"content\":\"\",\"tokens\":[]"},
                      {"\"id_slot\":0"},
                      {"\"stop\":true", SAYS_STOP},
                      {"\"model\":\"m\",\"generation_settings\":{\"n_predict\":-1},\"prompt\":" DECOY},
                      {"\"tokens_predicted\":95", SAYS_OUT},
                      {"\"tokens_evaluated\":812", SAYS_IN},
                      {"\"has_new_line\":false,\"truncated\":false,\"stop_type\":\"limit\",\"tokens_"
                       "cached\":906"},
                      {TIMINGS, SAYS_IN | SAYS_CACHED | SAYS_OUT}},
                .before_says = SAYS_IN,
                .pieces = 2,
        },
        {
                .name = "chat completion stream",
                .stream = true,
                .before =
                        "data: "
                        "{\"choices\":[{\"finish_reason\":null,\"index\":0,\"delta\":{\"role\":"
                        "\"assistant\","
                        "\"content\":null}}],\"created\":1,\"id\":\"c\",\"model\":\"m\",\"object\":"
                        "\"chat.completion.chunk\"}\n\n"
                        "data: "
                        "{\"choices\":[{\"finish_reason\":null,\"index\":0,\"delta\":{\"content\":" DECOY
                        "}}],\"created\":1,\"id\":\"c\",\"model\":\"m\",\"object\":\"chat.completion."
                        "chunk\"}\n\n"
                        "data: "
                        "{\"choices\":[{\"finish_reason\":null,\"index\":0,\"delta\":{\"content\":\"b\"}}],"
                        "\"created\":1,\"id\":\"c\",\"model\":\"m\",\"object\":\"chat.completion.chunk\"}"
                        "\n\n"
                        "data: "
                        "{\"choices\":[{\"finish_reason\":\"stop\",\"index\":0,\"delta\":{}}],\"created\":1,"
                        "\"id\":\"c\",\"model\":\"m\",\"object\":\"chat.completion.chunk\"}\n\n"
                        "data: ",
                .after = "\n\ndata: [DONE]\n\n",
                .m = {{"\"choices\":[]"},
                      {"\"created\":1"},
                      {"\"id\":\"c\""},
                      {"\"model\":\"m\""},
                      {"\"system_fingerprint\":\"b1-0\""},
                      {"\"object\":\"chat.completion.chunk\""},
                      {"\"usage\":{\"completion_tokens\":95,\"prompt_tokens\":812,\"total_tokens\":907,"
                       "\"prompt_tokens_details\":{\"cached_tokens\":640}}",
                       SAYS_IN | SAYS_CACHED | SAYS_OUT},
                      {TIMINGS, SAYS_IN | SAYS_CACHED | SAYS_OUT}},
                /* the finish chunk counts as a piece: it is one of a stream cut before it */
                .pieces = 3,
        },
};

#define N_SHAPES (sizeof(shapes) / sizeof(shapes[0]))

static size_t n_members(const Shape *s) {
        size_t n = 0;
        while (n < N_MAX && s->m[n].text)
                n++;
        return n;
}

/* The answer in the order perm, without the members of drop, read as client_log_access() reads it */
static void check(const Shape *s, const size_t *perm, size_t n, unsigned drop, size_t piece) {
        static char text[16384];
        char *w = text;
        unsigned says = s->before_says;
        size_t len;
        Usage u;

        if (s->before)
                w = stpcpy(w, s->before);
        *w++ = '{';
        for (size_t i = 0, k = 0; i < n; i++) {
                const Member *m = &s->m[perm[i]];
                if (drop & (1u << perm[i]))
                        continue;
                if (k++ > 0)
                        *w++ = ',';
                w = stpcpy(w, m->text);
                says |= m->says;
        }
        *w++ = '}';
        if (s->after)
                w = stpcpy(w, s->after);
        len = (size_t)(w - text);
        assert(len < sizeof(text));

        usage_init(&u, s->stream);
        bool cut = false;
        if (s->stream) {
                _cleanup_(buffer_done) Buffer out = {};
                SseFilter f;
                sse_filter_init(&f, API_OPENAI);
                f.usage = &u;
                for (size_t o = 0; o < len; o += piece)
                        assert(sse_filter_feed(&f, text + o, MIN(piece, len - o), &out) >= 0);
                assert(sse_filter_finish(&f, &out) >= 0);
                cut = !f.saw_done && !u.ended;
                sse_filter_done(&f);
                assert(buffer_size(&out) == len && memcmp(buffer_peek(&out), text, len) == 0);
        } else
                for (size_t o = 0; o < len; o += piece)
                        usage_body_feed(&u, text + o, MIN(piece, len - o));
        if (cut)
                usage_cut(&u);
        usage_charge(&u, ASK_BYTES, /* max_out= */ -1);

        /* what the members said, whatever their order; else the rule */
        assert(u.in == ((says & SAYS_IN) ? 812 : ASK_BYTES / USAGE_CHARGE_BYTES_PER_TOKEN));
        assert(u.in_charged == !(says & SAYS_IN));
        assert(u.cached == ((says & SAYS_CACHED) ? 640 : -1));
        assert(u.ended == !!(says & SAYS_STOP));
        if (says & SAYS_OUT)
                assert(u.out == 95 && !u.out_charged);
        else if (s->stream) {
                /* a native stream's partial chunks said 2 so far; a stream cut before its last chunk counts
                 * its pieces (the last chunk one of them, when it says nothing) */
                assert(!u.out_charged);
                assert(u.out >= (int64_t)s->pieces && u.out <= (int64_t)s->pieces + 1);
        } else
                assert(u.out_charged && u.out >= USAGE_CHARGE_OUT_MIN);
        assert(u.in > 0 && u.out > 0);
}

/* Every order of the n members, by Heap's algorithm */
static void every_order(const Shape *s, size_t n, unsigned drop, size_t piece) {
        size_t perm[N_MAX] = {}, c[N_MAX] = {};

        for (size_t i = 0; i < n; i++)
                perm[i] = i;
        check(s, perm, n, drop, piece);
        for (size_t i = 1; i < n;) {
                if (c[i] < i) {
                        size_t j = i % 2 == 0 ? 0 : c[i], t = perm[j];
                        perm[j] = perm[i];
                        perm[i] = t;
                        check(s, perm, n, drop, piece);
                        c[i]++;
                        i = 1;
                } else
                        c[i++] = 0;
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        size_t perm[N_MAX] = {}, pool[N_MAX], n, piece;
        const Shape *s;
        unsigned drop;

        if (size < 3)
                return 0;
        s = &shapes[(data[0] & 0x7f) % N_SHAPES];
        n = n_members(s);
        drop = data[1];
        piece = (size_t)data[2] % 97 + 1;
        if ((data[0] & 0x80) && size == 3) {
                every_order(s, n, drop, piece);
                return 0;
        }
        /* the order the rest of the input says: each byte picks one of the members still to place */
        for (size_t i = 0; i < n; i++)
                pool[i] = i;
        for (size_t i = 0, left = n; i < n; i++, left--) {
                size_t k = 3 + i < size ? data[3 + i] % left : 0;
                perm[i] = pool[k];
                memmove(pool + k, pool + k + 1, (left - k - 1) * sizeof(size_t));
        }
        check(s, perm, n, drop, piece);
        return 0;
}
