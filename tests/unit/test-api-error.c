/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "modelgated/api/api-error.h"
#include "modelgated/api/path-table.h"
#include "modelgated/api/sse.h"
#include "tests.h"

/* what the table of paths says of a path's API and of a WebSocket on it */
static ApiKind api_kind_for_path(Span path) {
        return path_route_api(path_route_lookup(path));
}

static bool api_refuses_websocket(Span path) {
        return path_route_lookup(path)->websocket_426;
}

static char *reword(ApiKind api, const char *in) {
        char *o = NULL;
        size_t n;
        return api_error_reword(api, in, strlen(in), &o, &n) > 0 ? o : NULL;
}

TEST(context_overflow) {
        const char *in =
                "{\"error\":{\"code\":400,\"message\":\"request (9000 tokens) exceeds the available context "
                "size (4096 tokens)\",\"type\":\"exceed_context_size_error\",\"n_prompt_tokens\":9000,"
                "\"n_ctx\":4096}}";
        _cleanup_free_ char *a = reword(API_ANTHROPIC, in), *o = reword(API_OPENAI, in);
        ASSERT_STREQ(a,
                     "{\"type\":\"error\",\"error\":{\"message\":\"prompt is too long: 9000 tokens > 4096 "
                     "maximum\",\"type\":\"invalid_request_error\"}}");
        ASSERT_TRUE(strstr(o, "\"message\":\"prompt is too long: 9000 tokens > 4096 maximum\""));
        ASSERT_TRUE(strstr(o, "\"code\":\"context_length_exceeded\""));
        ASSERT_TRUE(strstr(o, "\"param\":\"messages\""));
        /* the Responses API: OpenAI's shape, its request names the prompt "input" */
        _cleanup_free_ char *r = reword(API_RESPONSES, in);
        ASSERT_TRUE(strstr(r, "\"message\":\"prompt is too long: 9000 tokens > 4096 maximum\""));
        ASSERT_TRUE(strstr(r, "\"code\":\"context_length_exceeded\"") && strstr(r, "\"param\":\"input\""));
}

TEST(anthropic_rewrap) {
        _cleanup_free_ char *bare =
                reword(API_ANTHROPIC, "{\"code\":500,\"message\":\"boom\",\"type\":\"server_error\"}");
        ASSERT_STREQ(bare, "{\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"boom\"}}");
        _cleanup_free_ char *wrapped = reword(
                API_ANTHROPIC, "{\"error\":{\"code\":404,\"message\":\"nf\",\"type\":\"not_found_error\"}}");
        ASSERT_STREQ(wrapped,
                     "{\"type\":\"error\",\"error\":{\"type\":\"not_found_error\",\"message\":\"nf\"}}");
        /* already Anthropic's, OpenAI's on OpenAI routes, and non-errors stay */
        ASSERT_TRUE(
                !reword(API_ANTHROPIC, "{\"type\":\"error\",\"error\":{\"type\":\"x\",\"message\":\"m\"}}"));
        ASSERT_TRUE(!reword(API_OPENAI,
                            "{\"error\":{\"code\":500,\"message\":\"m\",\"type\":\"server_error\"}}"));
        ASSERT_TRUE(!reword(API_ANTHROPIC, "{\"choices\":[]}"));
        ASSERT_TRUE(!reword(API_ANTHROPIC, "not json"));
}

TEST(own_errors) {
        _cleanup_free_ char *a = api_error_json(API_ANTHROPIC, 423, "gpu_busy", "GPU busy", NULL);
        ASSERT_STREQ(a, "{\"type\":\"error\",\"error\":{\"message\":\"GPU "
                        "busy\",\"type\":\"invalid_request_error\"}}");
        _cleanup_free_ char *o = api_error_json(API_OPENAI, 404, "model_not_found", "no", NULL);
        ASSERT_STREQ(o, "{\"error\":{\"message\":\"no\",\"type\":\"not_found_error\",\"code\":\"model_not_"
                        "found\"}}");
        _cleanup_free_ char *d = api_error_json(API_ANTHROPIC, 503, NULL, "down", NULL);
        ASSERT_TRUE(strstr(d, "api_error") && !strstr(d, "overloaded"));
        ASSERT_EQ(api_kind_for_path((Span){"/v1/messages", 12}), API_ANTHROPIC);
        ASSERT_EQ(api_kind_for_path((Span){"/v1/messages/count_tokens", 25}), API_ANTHROPIC);
        ASSERT_EQ(api_kind_for_path((Span){"/v1/messagesx", 13}), API_OPENAI);
        ASSERT_EQ(api_kind_for_path((Span){"/v1/responses", 13}), API_RESPONSES);
        ASSERT_EQ(api_kind_for_path((Span){"/responses", 10}), API_RESPONSES);
        ASSERT_EQ(api_kind_for_path((Span){"/v1/responses/input_tokens", 26}), API_RESPONSES);
        ASSERT_EQ(api_kind_for_path((Span){"/v1/responsesx", 14}), API_OPENAI);
        ASSERT_EQ(api_kind_for_path((Span){"/v1/chat/completions", 20}), API_OPENAI);
        /* rule:websocket-426: the Responses API's own two paths, nothing below or beside them */
        ASSERT_TRUE(api_refuses_websocket((Span){"/v1/responses", 13}));
        ASSERT_TRUE(api_refuses_websocket((Span){"/responses", 10}));
        ASSERT_TRUE(!api_refuses_websocket((Span){"/v1/responses/input_tokens", 26}));
        ASSERT_TRUE(!api_refuses_websocket((Span){"/v1/responsesx", 14}));
        ASSERT_TRUE(!api_refuses_websocket((Span){"/v1/realtime", 12}));
        ASSERT_TRUE(!api_refuses_websocket((Span){"/v1/respons", 11}));
        ASSERT_TRUE(!api_refuses_websocket((Span){"", 0}));
        ASSERT_STREQ(http_status_reason(426), "Upgrade Required");
        /* the Responses API answers errors before a stream in OpenAI's shape */
        _cleanup_free_ char *r = api_error_json(API_RESPONSES, 404, "model_not_found", "no", NULL);
        ASSERT_STREQ(r, o);
        _cleanup_free_ char *f = api_response_failed_json(502, "engine_failed", "unit x failed", NULL);
        ASSERT_STREQ(f, "{\"type\":\"response.failed\",\"response\":{\"object\":\"response\",\"status\":"
                        "\"failed\",\"error\":{\"code\":\"engine_failed\",\"message\":\"unit x failed\"}}}");
        _cleanup_free_ char *g = api_response_failed_json(500, NULL, "m", NULL);
        ASSERT_TRUE(strstr(g, "\"code\":\"server_error\""));
}

static void sse_run(ApiKind api, const char *in, size_t step, const char *expect) {
        SseFilter f;
        Buffer out = {};
        sse_filter_init(&f, api);
        for (size_t i = 0; i < strlen(in); i += step)
                ASSERT_OK(sse_filter_feed(&f, in + i, MIN(step, strlen(in) - i), &out));
        ASSERT_OK(sse_filter_finish(&f, &out));
        ASSERT_OK(buffer_terminate(&out));
        ASSERT_STREQ(buffer_peek(&out), expect);
        sse_filter_done(&f);
        buffer_done(&out);
}

TEST(sse_filter) {
        const char *in =
                ":\n\nevent: message_start\ndata: {\"a\":1}\n\nevent: error\r\ndata: {\"code\":500,"
                "\"message\":\"m\",\"type\":\"server_error\"}\r\n\r\ndata: {\"error\":\"x\"}\n\ntail";
        const char *out =
                ":\n\nevent: message_start\ndata: {\"a\":1}\n\nevent: error\r\ndata: {\"type\":\"error\","
                "\"error\":{\"type\":\"api_error\",\"message\":\"m\"}}\r\n\r\ndata: "
                "{\"error\":\"x\"}\n\ntail";
        for (size_t step = 1; step <= strlen(in); step++)
                sse_run(API_ANTHROPIC, in, step, out);
        /* OpenAI streams: only a context overflow is reworded */
        sse_run(API_OPENAI,
                "data: {\"error\":{\"code\":500,\"message\":\"m\",\"type\":\"server_error\"}}\n\n", 7,
                "data: {\"error\":{\"code\":500,\"message\":\"m\",\"type\":\"server_error\"}}\n\n");
}

/* llama.cpp's /v1/responses stream: named events, and on an error OpenAI's data line without a name */
TEST(sse_filter_responses) {
        const char *in =
                "event: response.created\ndata: {\"type\":\"response.created\"}\n\n"
                "event: response.output_text.delta\r\ndata: {\"type\":\"response.output_text.delta\","
                "\"delta\":\"\\\"error\\\"\"}\r\n\r\n"
                "data: {\"error\":{\"code\":500,\"message\":\"boom\",\"type\":\"server_error\"}}\r\n\r\n";
        const char *out =
                "event: response.created\ndata: {\"type\":\"response.created\"}\n\n"
                "event: response.output_text.delta\r\ndata: {\"type\":\"response.output_text.delta\","
                "\"delta\":\"\\\"error\\\"\"}\r\n\r\n"
                "event: response.failed\r\ndata: {\"type\":\"response.failed\",\"response\":{\"object\":"
                "\"response\",\"status\":\"failed\",\"error\":{\"code\":\"server_error\",\"message\":"
                "\"boom\"}}}\r\n\r\n";
        for (size_t step = 1; step <= strlen(in); step++)
                sse_run(API_RESPONSES, in, step, out);
        /* a context overflow mid-stream: Codex's code for it */
        sse_run(API_RESPONSES,
                "data: {\"error\":{\"code\":400,\"message\":\"x\",\"type\":\"exceed_context_size_error\","
                "\"n_prompt_tokens\":9000,\"n_ctx\":512}}\n\n",
                5,
                "event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"object\":"
                "\"response\",\"status\":\"failed\",\"error\":{\"code\":\"context_length_exceeded\","
                "\"message\":\"prompt is too long: 9000 tokens > 512 maximum\"}}}\n\n");
        /* an event already named (a cloud's own "error" event) stays as it is */
        sse_run(API_RESPONSES,
                "event: error\ndata: {\"type\":\"error\",\"code\":\"x\",\"message\":\"m\"}\n\n", 3,
                "event: error\ndata: {\"type\":\"error\",\"code\":\"x\",\"message\":\"m\"}\n\n");
}

/* the Responses API ends its stream with a named event, not [DONE]: that is a whole stream */
TEST(responses_stream_end) {
        static const char *const ends[] = {"response.completed", "response.failed", "response.incomplete"};
        for (size_t i = 0; i < ELEMENTSOF(ends); i++) {
                SseFilter f;
                _cleanup_(buffer_done) Buffer out = {};
                _cleanup_free_ char *in = NULL;
                ASSERT_TRUE(asprintf(&in, "event: response.created\ndata: {}\n\nevent: %s\n", ends[i]) > 0);
                sse_filter_init(&f, API_RESPONSES);
                ASSERT_OK(sse_filter_feed(&f, in, 34, &out));
                ASSERT_TRUE(!f.saw_done);
                ASSERT_OK(sse_filter_feed(&f, in + 34, strlen(in) - 34, &out));
                ASSERT_TRUE(f.saw_done);
                sse_filter_done(&f);
        }
        /* the same names on another API end nothing */
        SseFilter f;
        _cleanup_(buffer_done) Buffer out = {};
        sse_filter_init(&f, API_OPENAI);
        ASSERT_OK(sse_filter_feed(&f, "event: response.completed\n", 26, &out));
        ASSERT_TRUE(!f.saw_done);
        sse_filter_done(&f);
}

static char *event_from(ApiKind api, int status, const char *body) {
        Buffer out = {};
        ASSERT_OK(sse_error_event_from_answer(api, status, body, strlen(body), &out));
        char *s = strndup(buffer_peek(&out) ?: "", buffer_size(&out));
        buffer_done(&out);
        return s;
}

/* after modelgate's early 200 a host's error answer becomes one SSE error event (rule:error-event) */
TEST(host_error_answer_after_an_early_200) {
        char *s;

        /* OpenAI route: llama.cpp's body is already OpenAI's shape, printed on one line */
        s = event_from(
                API_OPENAI, 500,
                "{\"error\": {\"code\": 500,\n \"message\": \"boom\", \"type\": \"server_error\"}}\n");
        ASSERT_STREQ(s,
                     "data: {\"error\":{\"code\":500,\"message\":\"boom\",\"type\":\"server_error\"}}\n\n");
        free(s);
        /* Anthropic route: an event: error line and Anthropic's shape */
        s = event_from(API_ANTHROPIC, 500,
                       "{\"error\":{\"code\":500,\"message\":\"boom\",\"type\":\"server_error\"}}");
        ASSERT_TRUE(startswith(s, "event: error\ndata: {\"type\":\"error\",\"error\":{"));
        ASSERT_TRUE(strstr(s, "\"message\":\"boom\"") != NULL);
        free(s);
        /* the context overflow is reworded there too */
        s = event_from(
                API_OPENAI, 400,
                "{\"error\":{\"code\":400,\"message\":\"the request exceeds the available context size\","
                "\"type\":\"exceed_context_size_error\",\"n_prompt_tokens\":9000,\"n_ctx\":4096}}");
        ASSERT_TRUE(strstr(s, "prompt is too long: 9000 tokens > 4096 maximum") != NULL);
        ASSERT_TRUE(strstr(s, "\n") == s + strlen(s) - 2); /* one line, then the blank one */
        free(s);
        /* not JSON: an error event that quotes the start of it */
        s = event_from(API_OPENAI, 502, "<html>Bad Gateway</html>");
        ASSERT_TRUE(strstr(s, "the host answered 502: <html>Bad Gateway</html>") != NULL);
        ASSERT_TRUE(startswith(s, "data: {\"error\":"));
        free(s);
        /* Responses route: event response.failed, with Codex's code for an overflow */
        s = event_from(
                API_RESPONSES, 400,
                "{\"error\":{\"code\":400,\"message\":\"the request exceeds the available context size\","
                "\"type\":\"exceed_context_size_error\",\"n_prompt_tokens\":9000,\"n_ctx\":4096}}");
        ASSERT_STREQ(s,
                     "event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"object\":"
                     "\"response\",\"status\":\"failed\",\"error\":{\"code\":\"context_length_exceeded\","
                     "\"message\":\"prompt is too long: 9000 tokens > 4096 maximum\"}}}\n\n");
        free(s);
        /* modelgate's own OpenAI-shaped body keeps its code; a host's number code becomes its type */
        s = event_from(API_RESPONSES, 502,
                       "{\"error\":{\"message\":\"unit x failed\",\"type\":\"server_error\",\"code\":"
                       "\"engine_failed\"}}");
        ASSERT_TRUE(strstr(s, "\"error\":{\"code\":\"engine_failed\",\"message\":\"unit x failed\"}"));
        free(s);
        s = event_from(API_RESPONSES, 500,
                       "{\"error\":{\"code\":500,\"message\":\"b\",\"type\":\"server_error\"}}");
        ASSERT_TRUE(strstr(s, "\"error\":{\"code\":\"server_error\",\"message\":\"b\"}"));
        free(s);
        s = event_from(API_RESPONSES, 502, "<html>Bad Gateway</html>");
        ASSERT_TRUE(startswith(s, "event: response.failed\ndata: {\"type\":\"response.failed\""));
        ASSERT_TRUE(strstr(s, "\"code\":\"upstream_error\",\"message\":\"the host answered 502: <html>"));
        free(s);
}

/* rule:upstream-error: the engine's error inside its 200 is kept, its status and message, the first only */
TEST(an_engines_error_in_mid_stream_is_kept_for_the_log) {
        struct {
                ApiKind api;
                const char *in;
                int status;
                const char *message;
        } cases[] = {
                {API_OPENAI,
                 "data: {\"choices\":[]}\n\ndata: {\"error\":{\"code\":500,\"message\":\"generation "
                 "failed\",\"type\":\"server_error\"}}\n\n",
                 500, "generation failed"},
                /* llama.cpp's bare error in an Anthropic stream */
                {API_ANTHROPIC,
                 "event: error\ndata: {\"code\":503,\"message\":\"Loading model\",\"type\":\"x\"}\n\n"
                 "event: error\ndata: {\"code\":500,\"message\":\"second\"}\n\n",
                 503, "Loading model"},
                {API_ANTHROPIC,
                 "event: error\ndata: "
                 "{\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"m\"}}"
                 "\n\n",
                 500, "m"},
                /* a chunk whose text holds the word is no error; nor is a bare object outside an error event
                 */
                {API_OPENAI, "data: {\"choices\":[{\"delta\":{\"content\":\"\\\"error\\\"\"}}]}\n\n", 0, ""},
                {API_ANTHROPIC, "event: content_block_delta\ndata: {\"code\":500}\n\n", 0, ""},
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                SseFilter f;
                _cleanup_(buffer_done) Buffer out = {};
                sse_filter_init(&f, cases[i].api);
                ASSERT_OK(sse_filter_feed(&f, cases[i].in, strlen(cases[i].in), &out));
                ASSERT_EQ(f.upstream_error_status, cases[i].status);
                ASSERT_STREQ(f.upstream_error, cases[i].message);
                sse_filter_done(&f);
        }
}

TEST(an_engines_long_error_message_is_cut_at_a_character) {
        char in[600], msg[SSE_UPSTREAM_ERROR_MAX];
        int status = 0;
        /* "é" (2 bytes) over and over: the cut falls inside one unless it is moved back */
        size_t n = (size_t)snprintf(in, sizeof(in), "{\"error\":\"");
        while (n < 500)
                n += (size_t)snprintf(in + n, sizeof(in) - n, "\xc3\xa9");
        n += (size_t)snprintf(in + n, sizeof(in) - n, "\"}");
        ASSERT_TRUE(sse_upstream_error_of(in, n, false, &status, msg, sizeof(msg)));
        ASSERT_EQ(status, 500);
        ASSERT_EQ(strlen(msg), (size_t)SSE_UPSTREAM_ERROR_MAX - 2);
}

TESTS_MAIN
