/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* rule:usage: the counts and timings of each API's answer, as llama.cpp writes them (tools/server/
 * server-task.cpp, server-common.cpp), read from whole bodies and from streams cut at every byte */
#include <stdlib.h>
#include <string.h>

#include "shared/macro.h"

#include "modelgated/api/sse.h"
#include "modelgated/api/usage.h"
#include "tests.h"

#define TIMINGS                                                                                             \
        "\"timings\":{\"cache_n\":640,\"prompt_n\":172,\"prompt_ms\":86.0,\"prompt_per_token_ms\":0.5,"     \
        "\"prompt_per_second\":2000.0,\"predicted_n\":95,\"predicted_ms\":2000.0,"                          \
        "\"predicted_per_token_ms\":21.0,\"predicted_per_second\":47.5}"

/* Each API's stream, as llama.cpp sends it: the usage event (or chunk) last */
static const char chat_stream[] =
        "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":null},\"index\":0}],"
        "\"object\":\"chat.completion.chunk\"}\n\n"
        "data: {\"choices\":[{\"delta\":{\"content\":\"\\\"usage\\\": no\"},\"index\":0}]}\n\n"
        "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\",\"index\":0}]," TIMINGS "}\n\n"
        "data: "
        "{\"choices\":[],\"usage\":{\"completion_tokens\":95,\"prompt_tokens\":812,\"total_tokens\":907,"
        "\"prompt_tokens_details\":{\"cached_tokens\":640}}," TIMINGS "}\n\n"
        "data: [DONE]\n\n";

static const char anthropic_stream[] =
        "event: message_start\n"
        "data: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"content\":[],\"usage\":"
        "{\"cache_read_input_tokens\":640,\"input_tokens\":172,\"output_tokens\":0}}}\n\n"
        "event: content_block_delta\n"
        "data: "
        "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"a\"}}"
        "\n\n"
        "event: content_block_delta\n"
        "data: "
        "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"b\"}}"
        "\n\n"
        "event: message_delta\n"
        "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":"
        "{\"output_tokens\":95}}\n\n"
        "event: message_stop\n"
        "data: {\"type\":\"message_stop\"}\n\n";

static const char responses_stream[] =
        "event: response.output_text.delta\n"
        "data: {\"type\":\"response.output_text.delta\",\"delta\":\"a\"}\n\n"
        "event: response.completed\n"
        "data: "
        "{\"response\":{\"id\":\"r\",\"output\":[],\"status\":\"completed\",\"usage\":{\"input_tokens\":812,"
        "\"input_tokens_details\":{\"cached_tokens\":640},\"output_tokens\":95,\"total_tokens\":907}}"
        "," TIMINGS ",\"type\":\"response.completed\"}\n\n";

/* llama.cpp's native /completion body as it writes it, with n_probs: 17 members, timings before
 * completion_probabilities */
#define NATIVE_BODY                                                                                         \
        "{\"index\":0,\"content\":\"hi "                                                                    \
        "\\\"there\\\"\",\"tokens\":[],\"id_slot\":0,\"stop\":true,\"model\":"                              \
        "\"m\",\"tokens_predicted\":95,\"tokens_evaluated\":812,\"generation_settings\":{\"n_predict\":-1," \
        "\"seed\":4294967295,\"temperature\":0.800000011920929,\"samplers\":[\"top_k\",\"temperature\"],"   \
        "\"timings_per_token\":false},\"prompt\":\"<s> {\\\"usage\\\":{\\\"prompt_tokens\\\":1}}\","        \
        "\"has_new_line\":false,\"truncated\":false,\"stop_type\":\"limit\",\"stopping_word\":\"\","        \
        "\"tokens_cached\":906," TIMINGS ",\"completion_probabilities\":[{\"id\":29871,\"token\":\" \","    \
        "\"logprob\":-0.07,\"bytes\":[32],\"top_logprobs\":[{\"id\":29871,\"token\":\" \",\"logprob\":"     \
        "-0.07,\"bytes\":[32]}]},{\"id\":1,\"token\":\"}}\",\"logprob\":-1e-05,\"bytes\":[125,125],"        \
        "\"top_logprobs\":[]}]}"

static void assert_all(const Usage *u, bool timings) {
        ASSERT_EQ(u->in, 812);
        ASSERT_EQ(u->cached, 640);
        ASSERT_EQ(u->out, 95);
        if (timings) {
                ASSERT_EQ(u->prompt_n, 172);
                ASSERT_EQ(u->predicted_n, 95);
                ASSERT_TRUE(usage_speed(u->prompt_n, u->prompt_ms) == 2000.0);
                ASSERT_TRUE(usage_speed(u->predicted_n, u->predicted_ms) == 47.5);
        }
}

/* s through the SSE filter in two pieces, cut at k: what passes is what came, and usage is read */
static bool stream_split(ApiKind api, const char *s, size_t n, size_t k, Usage *u) {
        SseFilter f;
        Buffer out = {};

        sse_filter_init(&f, api);
        usage_init(u, /* stream= */ true);
        f.usage = u;
        ASSERT_OK(sse_filter_feed(&f, s, k, &out));
        ASSERT_OK(sse_filter_feed(&f, s + k, n - k, &out));
        ASSERT_OK(sse_filter_finish(&f, &out));
        ASSERT_EQ(buffer_size(&out), n);
        ASSERT_TRUE(memcmp(buffer_peek(&out), s, n) == 0);
        sse_filter_done(&f);
        buffer_done(&out);
        return f.saw_done;
}

static void every_split(ApiKind api, const char *s, bool timings) {
        size_t n = strlen(s);
        for (size_t k = 0; k <= n; k++) {
                Usage u;
                /* each ends as its API ends a stream: not cut */
                ASSERT_TRUE(stream_split(api, s, n, k, &u));
                assert_all(&u, timings);
        }
}

TEST(chat_stream_at_every_byte_boundary) {
        every_split(API_OPENAI, chat_stream, true);
}

TEST(anthropic_stream_at_every_byte_boundary) {
        /* input_tokens there is what the cache did not hold */
        every_split(API_ANTHROPIC, anthropic_stream, false);
}

TEST(responses_stream_at_every_byte_boundary) {
        every_split(API_RESPONSES, responses_stream, true);
}

TEST(chat_stream_without_include_usage_counts_by_its_timings) {
        static const char s[] =
                "data: {\"choices\":[{\"delta\":{\"content\":\"a\"},\"index\":0}]}\n\n"
                "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]," TIMINGS "}\n\n"
                "data: [DONE]\n\n";
        Usage u;
        stream_split(API_OPENAI, s, strlen(s), 7, &u);
        ASSERT_EQ(u.in, 812);
        ASSERT_EQ(u.cached, 640);
        ASSERT_EQ(u.out, 95);
}

TEST(a_cut_stream_counts_what_arrived) {
        /* up to the second content_block_delta: message_start told the prompt, two pieces came */
        const char *end = strstr(anthropic_stream, "event: message_delta");
        Usage u;
        ASSERT_TRUE(!stream_split(API_ANTHROPIC, anthropic_stream, (size_t)(end - anthropic_stream), 3, &u));
        ASSERT_EQ(u.in, 812);
        ASSERT_EQ(u.out, 0);
        usage_cut(&u);
        ASSERT_EQ(u.out, 2);

        /* a chat stream cut before its usage: 1 token (the role's chunk carries none), nothing of the
         * prompt */
        end = strstr(chat_stream, "data: {\"choices\":[{\"delta\":{},");
        ASSERT_TRUE(!stream_split(API_OPENAI, chat_stream, (size_t)(end - chat_stream), 0, &u));
        ASSERT_EQ(u.in, -1);
        usage_cut(&u);
        ASSERT_EQ(u.out, 1);
        ASSERT_TRUE(usage_known(&u));
}

static void body_split(const char *s, size_t k, Usage *u) {
        size_t n = strlen(s);
        usage_init(u, /* stream= */ false);
        usage_body_feed(u, s, k);
        usage_body_feed(u, s + k, n - k);
}

TEST(whole_bodies_of_each_api) {
        static const char *bodies[] = {
                /* chat and completions, in llama.cpp's order: timings appended after the id */
                "{\"choices\":[{\"finish_reason\":\"stop\",\"index\":0,\"message\":{\"content\":\"hi\"}}],"
                "\"created\":1,\"model\":\"m\",\"system_fingerprint\":\"b1\",\"object\":\"chat.completion\","
                "\"usage\":{\"completion_tokens\":95,\"prompt_tokens\":812,\"total_tokens\":907,"
                "\"prompt_tokens_details\":{\"cached_tokens\":640}},\"id\":\"c\"," TIMINGS "}",
                /* Anthropic's messages */
                "{\"content\":[{\"text\":\"hi\",\"type\":\"text\"}],\"id\":\"m\",\"model\":\"m\",\"role\":"
                "\"assistant\",\"stop_reason\":\"end_turn\",\"stop_sequence\":null,\"type\":\"message\","
                "\"usage\":{\"cache_read_input_tokens\":640,\"input_tokens\":172,\"output_tokens\":95}}",
                /* Responses (no timings in its body) */
                "{\"created_at\":1,\"id\":\"r\",\"model\":\"m\",\"object\":\"response\",\"output\":[],"
                "\"status\":\"completed\",\"usage\":{\"input_tokens\":812,\"output_tokens\":95,"
                "\"total_tokens\":907,\"input_tokens_details\":{\"cached_tokens\":640}}}",
                /* llama.cpp's native /completion (server_task_result_cmpl_final::to_json_non_oaicompat),
                 * with n_probs: completion_probabilities after timings */
                NATIVE_BODY,
        };
        for (size_t i = 0; i < ELEMENTSOF(bodies); i++)
                for (size_t k = 0; k <= strlen(bodies[i]); k++) {
                        Usage u;
                        body_split(bodies[i], k, &u);
                        assert_all(&u, i == 0 || i == 3); /* llama.cpp times chat's body and its own */
                }
}

/* The top-level members of a one-level object text, in the order of perm[] */
static char *permuted(const char *body, const size_t *perm, size_t n_members) {
        /* the members' spans: split at the commas of depth 1 */
        const char *m[32], *e[32];
        size_t k = 0;
        unsigned depth = 0;
        bool str = false;

        ASSERT_TRUE(n_members <= 32);
        for (const char *q = body; *q; q++) {
                if (str) {
                        if (*q == '\\')
                                q++;
                        else if (*q == '"')
                                str = false;
                        continue;
                }
                if (*q == '"')
                        str = true;
                else if (*q == '{' || *q == '[') {
                        if (depth++ == 0)
                                m[k] = q + 1;
                } else if (*q == '}' || *q == ']') {
                        if (--depth == 0)
                                e[k++] = q;
                } else if (*q == ',' && depth == 1) {
                        e[k++] = q;
                        m[k] = q + 1;
                }
        }
        ASSERT_EQ(k, n_members);
        char *out = malloc(strlen(body) + 1), *w = out;
        ASSERT_TRUE(out);
        *w++ = '{';
        for (size_t i = 0; i < n_members; i++) {
                if (i > 0)
                        *w++ = ',';
                memcpy(w, m[perm[i]], (size_t)(e[perm[i]] - m[perm[i]]));
                w += e[perm[i]] - m[perm[i]];
        }
        *w++ = '}';
        *w = 0;
        return out;
}

TEST(a_native_answer_in_any_member_order) {
        /* every rotation of its 17 members, and each one's reverse: timings first, last, in between */
        size_t perm[17];
        for (size_t r = 0; r < 17; r++)
                for (int reverse = 0; reverse <= 1; reverse++) {
                        for (size_t i = 0; i < 17; i++)
                                perm[reverse ? 16 - i : i] = (i + r) % 17;
                        _cleanup_free_ char *b = permuted(NATIVE_BODY, perm, 17);
                        Usage u;
                        body_split(b, r * 37 % strlen(b), &u);
                        assert_all(&u, true);
                }
}

TEST(usage_outranks_timings_in_any_order) {
        /* usage without the cached count, timings with it: usage's numbers, timings' cached count, in
         * either order; and llama.cpp's native counts only where neither says */
        static const char *bodies[] = {
                "{\"usage\":{\"prompt_tokens\":812,\"completion_tokens\":95},\"timings\":{\"prompt_n\":1,"
                "\"cache_n\":640,\"predicted_n\":2},\"tokens_evaluated\":3,\"tokens_predicted\":4}",
                "{\"tokens_predicted\":4,\"timings\":{\"prompt_n\":1,\"cache_n\":640,\"predicted_n\":2},"
                "\"tokens_evaluated\":3,\"usage\":{\"completion_tokens\":95,\"prompt_tokens\":812}}",
        };
        for (size_t i = 0; i < ELEMENTSOF(bodies); i++) {
                Usage u;
                body_split(bodies[i], 5, &u);
                ASSERT_EQ(u.in, 812);
                ASSERT_EQ(u.cached, 640);
                ASSERT_EQ(u.out, 95);
        }
        Usage u;
        body_split("{\"tokens_predicted\":4,\"content\":\"x\",\"tokens_evaluated\":3}", 9, &u);
        ASSERT_EQ(u.in, 3);
        ASSERT_EQ(u.out, 4);
        ASSERT_EQ(u.cached, -1);
}

TEST(a_native_stream_counts_as_it_goes) {
        /* each partial chunk says the prompt's count and the tokens so far; the last says "stop": true
         * (no [DONE] follows on the native routes) with the timings */
        static const char s[] =
                "data: {\"index\":0,\"content\":\"a\",\"tokens\":[1],\"stop\":false,\"id_slot\":0,"
                "\"tokens_predicted\":1,\"tokens_evaluated\":812}\n\n"
                "data: {\"index\":0,\"content\":\"b\",\"tokens\":[2],\"stop\":false,\"id_slot\":0,"
                "\"tokens_predicted\":2,\"tokens_evaluated\":812,\"completion_probabilities\":[{\"id\":2,"
                "\"token\":\"b\",\"logprob\":-0.5,\"bytes\":[98],\"top_logprobs\":[]}]}\n\n"
                "data: {\"index\":0,\"content\":\"\",\"tokens\":[],\"id_slot\":0,\"stop\":true,\"model\":"
                "\"m\",\"tokens_predicted\":95,\"tokens_evaluated\":812," TIMINGS "}\n\n";
        const char *last = strstr(s, "data: {\"index\":0,\"content\":\"\"");
        Usage u;

        for (size_t k = 0; k <= strlen(s); k += 7) {
                ASSERT_TRUE(!stream_split(API_OPENAI, s, strlen(s), k, &u)); /* no [DONE] */
                ASSERT_TRUE(u.ended);
                assert_all(&u, true);
                ASSERT_EQ(u.deltas, 2);
        }
        /* cut before the last chunk: the prompt is known, and the pieces */
        stream_split(API_OPENAI, s, (size_t)(last - s), 3, &u);
        ASSERT_TRUE(!u.ended);
        ASSERT_EQ(u.in, 812);
        usage_cut(&u);
        ASSERT_EQ(u.out, 2);
        /* with response_fields, the last chunk says only what was asked: the partials said the counts */
        static const char rf[] = "data: {\"index\":0,\"content\":\"a\",\"tokens\":[1],\"stop\":false,"
                                 "\"id_slot\":0,\"tokens_predicted\":1,\"tokens_evaluated\":812}\n\n"
                                 "data: {\"content\":\"\"}\n\n";
        stream_split(API_OPENAI, rf, strlen(rf), 0, &u);
        ASSERT_EQ(u.in, 812);
        usage_cut(&u);
        ASSERT_EQ(u.out, 2);
}

TEST(members_elsewhere_are_not_read) {
        /* deeper than where they are read (the debugging __verbose, a tool's arguments, a choice), inside a
         * string, escaped, or not of the right type */
        static const char body[] =
                "{\"__verbose\":{\"timings\":{\"prompt_n\":5,\"predicted_n\":5},\"tokens_predicted\":5,"
                "\"usage\":{\"prompt_tokens\":5}},\"choices\":[{\"usage\":{\"prompt_tokens\":6},"
                "\"message\":{\"content\":\"\\\"usage\\\":{\\\"prompt_tokens\\\":7}\"}}],"
                "\"message\":[{\"usage\":{\"prompt_tokens\":8}}],\"stop\":\"true\",\"tokens_predicted\":"
                "\"9\","
                "\"us\\u0061ge\":{\"prompt_tokens\":10},\"usage\":5,\"timings\":[{\"prompt_n\":11}]}";
        for (size_t k = 0; k <= strlen(body); k++) {
                Usage u;
                body_split(body, k, &u);
                ASSERT_TRUE(!usage_known(&u));
                ASSERT_TRUE(!u.ended);
        }
}

TEST(a_huge_body_is_read_in_bounded_memory) {
        /* 3 MiB of answer before the usage, and 3 MiB of probabilities after it: the scan keeps no bytes */
        size_t big = 3 * 1024 * 1024, n;
        char *s = malloc(2 * big + 400), *w = s;
        ASSERT_TRUE(s);
        w = stpcpy(w, "{\"content\":\"");
        memset(w, 'x', big);
        w += big;
        w = stpcpy(w, "\",\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":9},\"p\":[");
        for (size_t i = 0; i + 8 < big; i += 8)
                w = stpcpy(w, "[-0.25],");
        w = stpcpy(w, "0]}");
        n = (size_t)(w - s);
        Usage u;
        usage_init(&u, /* stream= */ false);
        for (size_t at = 0; at < n; at += 1000)
                usage_body_feed(&u, s + at, MIN((size_t)1000, n - at));
        ASSERT_EQ(u.in, 7);
        ASSERT_EQ(u.out, 9);
        ASSERT_EQ(u.cached, -1);
        ASSERT_EQ(u.body_bytes, n);
        ASSERT_TRUE(sizeof(Usage) < 512);
        free(s);

        /* a body cut in the middle of its usage says nothing of it */
        usage_init(&u, /* stream= */ false);
        usage_body_feed(&u, "{\"usage\":{\"prompt_tokens\":7,", 29);
        ASSERT_TRUE(!usage_known(&u));
}

TEST(what_is_not_usage_is_not_read) {
        Usage u;
        usage_init(&u, /* stream= */ true);
        /* a quoted "usage" inside a string is escaped, a usage that is not an object is not one, negative
         * counts are not counts */
        usage_scan(&u, "{\"content\":\"\\\"usage\\\":{\\\"prompt_tokens\\\":5}\"}", 45);
        usage_scan(&u, "{\"usage\":5}", 11);
        usage_scan(&u, "{\"usage\":{\"prompt_tokens\":-3,\"completion_tokens\":\"9\"}}", 52);
        ASSERT_TRUE(!usage_known(&u));
        ASSERT_TRUE(usage_speed(5, 0) < 0);
        ASSERT_TRUE(usage_speed(-1, 10) < 0);
}

TEST(what_an_answer_did_not_say_is_charged_by_the_rule) {
        char line[128];
        Usage u;

        /* llama.cpp's native body with response_fields ["content"]: nothing said. The prompt at 4 bytes a
         * token of the request's body (rounded up); the output at the request's limit */
        body_split("{\"content\":\"hello\"}", 3, &u);
        ASSERT_TRUE(!usage_known(&u));
        usage_charge(&u, 401, 64);
        ASSERT_EQ(u.in, 101);
        ASSERT_EQ(u.out, 64);
        ASSERT_TRUE(u.in_charged && u.out_charged);
        ASSERT_EQ(usage_format(line, sizeof(line), &u), strlen("in:~101,cached:?,out:~64"));
        ASSERT_STREQ(line, "in:~101,cached:?,out:~64");
        /* no limit: USAGE_CHARGE_OUT_MIN, or the answer's bytes at the same rate when more */
        body_split("{\"content\":\"hello\"}", 3, &u);
        usage_charge(&u, 0, -1);
        ASSERT_EQ(u.in, 0);
        ASSERT_EQ(u.out, USAGE_CHARGE_OUT_MIN);
        size_t big = 4 * USAGE_CHARGE_OUT_MIN * 3;
        char *b = malloc(big + 1);
        ASSERT_TRUE(b);
        memset(b, ' ', big);
        b[0] = '{', b[big - 1] = '}', b[big] = 0;
        body_split(b, 0, &u);
        free(b);
        usage_charge(&u, 8, -1);
        ASSERT_EQ(u.out, 3 * USAGE_CHARGE_OUT_MIN);
        ASSERT_EQ(u.in, 2);

        /* what was said stays: only the prompt is charged (response_fields ["content", "tokens_predicted"])
         */
        body_split("{\"content\":\"hello\",\"tokens_predicted\":95}", 3, &u);
        usage_charge(&u, 4000, 64);
        ASSERT_EQ(u.in, 1000);
        ASSERT_EQ(u.out, 95);
        ASSERT_TRUE(u.in_charged && !u.out_charged);

        /* a chat stream left after its first token: its prompt charged, its output the piece that came */
        const char *end = strstr(chat_stream, "data: {\"choices\":[{\"delta\":{},");
        stream_split(API_OPENAI, chat_stream, (size_t)(end - chat_stream), 0, &u);
        usage_cut(&u);
        usage_charge(&u, 200000, 100000);
        ASSERT_EQ(u.in, 50000);
        ASSERT_EQ(u.out, 1);
        ASSERT_TRUE(u.in_charged && !u.out_charged);
        usage_format(line, sizeof(line), &u);
        ASSERT_STREQ(line, "in:~50000,cached:?,out:1");
        /* a whole stream that never said its counts (no usage, no timings): its pieces */
        static const char plain[] =
                "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n"
                "data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\ndata: [DONE]\n\n";
        stream_split(API_OPENAI, plain, strlen(plain), 0, &u);
        usage_charge(&u, 40, 5);
        ASSERT_EQ(u.out, 2);
        ASSERT_EQ(u.in, 10);
}

TEST(timings_milliseconds_are_read_as_strtod_reads_them) {
        /* the speeds are said to a tenth: a millisecond read otherwise could round one the other way */
        static const char *ms[] = {"86.123",      "0.5007", "2000.456",          "47.48",
                                   "1.0",         "12.3e2", "123456789.1234567", "0.1",
                                   "99999.99999", "3"};
        for (size_t i = 0; i < ELEMENTSOF(ms); i++) {
                char text[128];
                Usage u;
                snprintf(text, sizeof(text), "{\"timings\":{\"prompt_n\":7,\"prompt_ms\":%s}}", ms[i]);
                usage_init(&u, /* stream= */ true);
                usage_scan(&u, text, strlen(text));
                ASSERT_TRUE(u.prompt_ms == strtod(ms[i], NULL));
        }
}

TESTS_MAIN
