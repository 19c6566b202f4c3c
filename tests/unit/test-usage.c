/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* rule:usage: the counts and timings of each API's answer, as llama.cpp writes them (tools/server/
 * server-task.cpp, server-common.cpp), read from whole bodies and from streams cut at every byte */
#include <stdlib.h>
#include <string.h>

#include "modelgated/rules/sse.h"
#include "modelgated/rules/usage.h"
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
        usage_init(u, NULL);
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

static void body_split(const char *s, size_t k, Usage *u, Buffer *tail) {
        size_t n = strlen(s);
        usage_init(u, tail);
        ASSERT_OK(usage_body_feed(u, s, k, false));
        ASSERT_OK(usage_body_feed(u, s + k, n - k, k % 2 == 0));
        usage_body_end(u);
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
        };
        Buffer tail = {};
        for (size_t i = 0; i < ELEMENTSOF(bodies); i++)
                for (size_t k = 0; k <= strlen(bodies[i]); k++) {
                        Usage u;
                        body_split(bodies[i], k, &u, &tail);
                        assert_all(&u, i == 0); /* llama.cpp times only chat's body */
                }
        buffer_done(&tail);
}

TEST(a_huge_body_keeps_only_its_tail) {
        /* 3 MiB of answer before the usage: only USAGE_TAIL bytes are ever kept */
        size_t big = 3 * 1024 * 1024;
        char *s = malloc(big + 200);
        ASSERT_TRUE(s);
        strcpy(s, "{\"content\":\"");
        memset(s + 12, 'x', big);
        strcpy(s + 12 + big, "\",\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":9}}");
        Buffer tail = {};
        Usage u;
        usage_init(&u, &tail);
        size_t n = strlen(s);
        for (size_t at = 0; at < n; at += 1000) {
                ASSERT_OK(usage_body_feed(&u, s + at, MIN((size_t)1000, n - at), false));
                ASSERT_TRUE(buffer_size(&tail) <= 2 * USAGE_TAIL);
        }
        usage_body_end(&u);
        ASSERT_EQ(u.in, 7);
        ASSERT_EQ(u.out, 9);
        ASSERT_EQ(u.cached, -1);
        free(s);

        /* a body whose usage is not whole in the tail (a cut body) says nothing */
        usage_init(&u, &tail);
        ASSERT_OK(usage_body_feed(&u, "{\"usage\":{\"prompt_tokens\":7,", 29, true));
        usage_body_end(&u);
        ASSERT_TRUE(!usage_known(&u));
        buffer_done(&tail);
}

TEST(what_is_not_usage_is_not_read) {
        Usage u;
        usage_init(&u, NULL);
        /* a quoted "usage" inside a string is escaped, a usage that is not an object is not one, negative
         * counts are not counts */
        usage_scan(&u, "{\"content\":\"\\\"usage\\\":{\\\"prompt_tokens\\\":5}\"}", 45);
        usage_scan(&u, "{\"usage\":5}", 11);
        usage_scan(&u, "{\"usage\":{\"prompt_tokens\":-3,\"completion_tokens\":\"9\"}}", 52);
        ASSERT_TRUE(!usage_known(&u));
        ASSERT_TRUE(usage_speed(5, 0) < 0);
        ASSERT_TRUE(usage_speed(-1, 10) < 0);
}

TESTS_MAIN
