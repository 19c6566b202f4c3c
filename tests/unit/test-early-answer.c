/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* rule:keepalive-events: what a waiting stream is sent per API, and the engine's beginning spliced into an
 * answer modelgate began */
#include "modelgated/api/early-answer.h"
#include "modelgated/api/sse.h"
#include "tests.h"

static const Span ID = {"abc-123", 7};

static char *begin(EarlyAnswer k, const char *model) {
        Buffer b = {};
        ASSERT_OK(early_answer_begin(k, model, ID, 1700000000, &b));
        ASSERT_OK(buffer_terminate(&b));
        return buffer_steal(&b, NULL);
}

static char *keepalive(EarlyAnswer k, bool begun, const char *words) {
        Buffer b = {};
        ASSERT_OK(early_answer_keepalive(k, begun, "3090-laguna-xs", ID, 1700000000, words, &b));
        ASSERT_OK(buffer_terminate(&b));
        return buffer_steal(&b, NULL);
}

TEST(begin_per_api) {
        ASSERT_TRUE(early_answer_of(path_route_lookup((Span){"/v1/messages", sizeof("/v1/messages") - 1})) ==
                    EARLY_MESSAGE);
        ASSERT_TRUE(early_answer_of(path_route_lookup(
                            (Span){"/v1/responses", sizeof("/v1/responses") - 1})) == EARLY_RESPONSE);
        ASSERT_TRUE(early_answer_of(path_route_lookup(
                            (Span){"/v1/chat/completions", sizeof("/v1/chat/completions") - 1})) ==
                    EARLY_CHAT_CHUNK);
        ASSERT_TRUE(early_answer_of(path_route_lookup((Span){
                            "/chat/completions", sizeof("/chat/completions") - 1})) == EARLY_CHAT_CHUNK);
        ASSERT_TRUE(early_answer_of(path_route_lookup(
                            (Span){"/v1/completions", sizeof("/v1/completions") - 1})) == EARLY_COMMENT);
        ASSERT_TRUE(early_answer_of(path_route_lookup((Span){"/completion", sizeof("/completion") - 1})) ==
                    EARLY_COMMENT);
        ASSERT_TRUE(early_answer_begins(EARLY_MESSAGE) && early_answer_begins(EARLY_RESPONSE));
        ASSERT_TRUE(!early_answer_begins(EARLY_CHAT_CHUNK) && !early_answer_begins(EARLY_COMMENT));

        _cleanup_free_ char *a = begin(EARLY_MESSAGE, "3090-laguna\"xs");
        ASSERT_STREQ(a,
                     "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":"
                     "\"msg_abc-123\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":"
                     "\"3090-laguna\\\"xs\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":"
                     "{\"input_tokens\":0,\"output_tokens\":0}}}\n\n");
        _cleanup_free_ char *r = begin(EARLY_RESPONSE, "3090-laguna-xs");
        ASSERT_STREQ(r, "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":"
                        "\"resp_abc-123\",\"object\":\"response\",\"created_at\":1700000000,\"status\":"
                        "\"in_progress\",\"model\":\"3090-laguna-xs\",\"output\":[]}}\n\n");
        _cleanup_free_ char *o = begin(EARLY_CHAT_CHUNK, "m");
        ASSERT_STREQ(o, "");
}

TEST(request_id_token_characters_only) {
        Buffer b = {};
        Span hostile = {"a\"b\n{c}", 7};
        ASSERT_OK(early_answer_begin(EARLY_RESPONSE, "m", hostile, 1, &b));
        ASSERT_OK(buffer_terminate(&b));
        ASSERT_TRUE(strstr(buffer_peek(&b), "\"id\":\"resp_a_b__c_\""));
        buffer_done(&b);
}

TEST(keepalive_per_api) {
        _cleanup_free_ char *c = keepalive(EARLY_COMMENT, false, "starting fork (2.1 s)");
        ASSERT_STREQ(c, ": starting fork (2.1 s)\n\n");
        /* a line break in the words would end the comment */
        _cleanup_free_ char *nl = keepalive(EARLY_COMMENT, false, "a\nb");
        ASSERT_STREQ(nl, ": a b\n\n");
        /* chat: a chunk with no choices, which Qwen Code counts and the others take */
        _cleanup_free_ char *ch = keepalive(EARLY_CHAT_CHUNK, false, "w");
        ASSERT_STREQ(
                ch,
                ": w\ndata: {\"id\":\"chatcmpl-abc-123\",\"object\":\"chat.completion.chunk\",\"created\":"
                "1700000000,\"model\":\"3090-laguna-xs\",\"choices\":[]}\n\n");
        _cleanup_free_ char *a = keepalive(EARLY_MESSAGE, true, "w");
        ASSERT_STREQ(
                a, ": w\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":"
                   "null,\"stop_sequence\":null},\"usage\":{\"output_tokens\":0}}\n\n");
        _cleanup_free_ char *r = keepalive(EARLY_RESPONSE, true, "w");
        ASSERT_STREQ(
                r, ": w\nevent: response.in_progress\ndata: {\"type\":\"response.in_progress\",\"response\":"
                   "{\"id\":\"resp_abc-123\",\"object\":\"response\",\"status\":\"in_progress\"}}\n\n");
        /* not begun (an API that is not, or a keepalive before the beginning): the comment only */
        _cleanup_free_ char *n = keepalive(EARLY_MESSAGE, false, "w");
        ASSERT_STREQ(n, ": w\n\n");
}

static char *splice(ApiKind api, bool begun, const char *in, size_t step) {
        SseFilter f;
        Buffer out = {};
        sse_filter_init(&f, api);
        f.begun = begun;
        for (size_t i = 0; i < strlen(in); i += step)
                ASSERT_OK(sse_filter_feed(&f, in + i, MIN(step, strlen(in) - i), &out));
        ASSERT_OK(sse_filter_finish(&f, &out));
        ASSERT_OK(buffer_terminate(&out));
        sse_filter_done(&f);
        return buffer_steal(&out, NULL);
}

/* llama.cpp's own beginning of an Anthropic stream, as server-task.cpp writes it */
static const char ANTHROPIC_STREAM[] =
        "event: message_start\n"
        "data: {\"type\":\"message_start\",\"message\":{\"id\":\"chatcmpl-x\",\"type\":\"message\",\"role\":"
        "\"assistant\",\"content\":[],\"model\":\"laguna-xs\",\"stop_reason\":null,\"stop_sequence\":null,"
        "\"usage\":{\"cache_read_input_tokens\":12,\"input_tokens\":30,\"output_tokens\":0}}}\n"
        "\n"
        "event: content_block_start\n"
        "data: "
        "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}"
        "\n"
        "\n"
        "event: message_start\n"
        "data: {\"type\":\"message_start\"}\n"
        "\n";

TEST(splice_anthropic) {
        for (size_t step = 1; step <= sizeof(ANTHROPIC_STREAM); step += 7) {
                _cleanup_free_ char *o = splice(API_ANTHROPIC, true, ANTHROPIC_STREAM, step);
                ASSERT_STREQ(o, "event: message_delta\n"
                                "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":null,"
                                "\"stop_sequence\":null},\"usage\":{\"cache_read_input_tokens\":12,"
                                "\"input_tokens\":30,\"output_tokens\":0}}\n"
                                "\n"
                                "event: content_block_start\n"
                                "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":"
                                "{\"type\":\"text\",\"text\":\"\"}}\n"
                                "\n"
                                /* once only: what follows the first is the engine's, as it is */
                                "event: message_start\n"
                                "data: {\"type\":\"message_start\"}\n"
                                "\n");
        }
        /* not begun: unchanged */
        _cleanup_free_ char *same = splice(API_ANTHROPIC, false, ANTHROPIC_STREAM, 5);
        ASSERT_STREQ(same, ANTHROPIC_STREAM);
}

TEST(splice_anthropic_without_usage) {
        _cleanup_free_ char *o = splice(API_ANTHROPIC, true,
                                        "event: message_start\r\ndata: not json\r\n\r\nevent: ping\r\n", 3);
        ASSERT_STREQ(
                o, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":null,"
                   "\"stop_sequence\":null},\"usage\":{\"output_tokens\":0}}\r\n\r\nevent: ping\r\n");
        /* a usage without output_tokens gets it: the SDKs copy it from every message_delta */
        _cleanup_free_ char *u =
                splice(API_ANTHROPIC, true,
                       "event: message_start\ndata: {\"message\":{\"usage\":{\"input_tokens\":3}}}\n\n", 64);
        ASSERT_TRUE(strstr(u, "\"usage\":{\"input_tokens\":3,\"output_tokens\":0}"));
}

TEST(splice_responses) {
        const char *in =
                "event: response.created\n"
                "data: "
                "{\"type\":\"response.created\",\"response\":{\"id\":\"resp_e\",\"object\":\"response\","
                "\"status\":\"in_progress\"}}\n"
                "\n"
                "event: response.in_progress\n"
                "data: {\"type\":\"response.in_progress\",\"response\":{\"id\":\"resp_e\"}}\n"
                "\n";
        for (size_t step = 1; step < strlen(in); step += 5) {
                _cleanup_free_ char *o = splice(API_RESPONSES, true, in, step);
                ASSERT_STREQ(o,
                             "event: response.in_progress\n"
                             "data: {\"type\":\"response.in_progress\",\"response\":{\"id\":\"resp_e\"}}\n"
                             "\n");
        }
        /* the engine's usage is still read from the beginning it sends: nothing here, and no crash */
        _cleanup_free_ char *same = splice(API_RESPONSES, false, in, 4);
        ASSERT_STREQ(same, in);
        /* chat completions have no beginning of modelgate's own */
        _cleanup_free_ char *chat = splice(API_OPENAI, true, in, 4);
        ASSERT_STREQ(chat, in);
}

TEST(splice_reads_usage_first) {
        SseFilter f;
        Buffer out = {};
        Usage u;
        usage_init(&u, NULL);
        sse_filter_init(&f, API_ANTHROPIC);
        f.begun = true;
        f.usage = &u;
        ASSERT_OK(sse_filter_feed(&f, ANTHROPIC_STREAM, strlen(ANTHROPIC_STREAM), &out));
        ASSERT_OK(sse_filter_finish(&f, &out));
        /* the engine's prompt, with what came from its cache */
        ASSERT_TRUE(u.in == 42 && u.cached == 12);
        sse_filter_done(&f);
        buffer_done(&out);
}

TESTS_MAIN
