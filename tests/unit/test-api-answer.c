/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Every row of the error table (api-answer.h), written with arguments and rendered in both API shapes:
 * its status, code, headers and words are today's, byte for byte, and the body is JSON. */
#include <json-c/json.h>

#include "modelgated/api/api-answer.h"
#include "modelgated/api/json-util.h"
#include "modelgated/api/sse.h"
#include "tests.h"

/* Each row's words with sample arguments, as its callers pass them */
static void format_sample(Answer a, char *buf, size_t n) {
        char span[64];

        switch (a) {
        case ANSWER_OUT_OF_MEMORY:
        case ANSWER_ADMISSION_OUT_OF_MEMORY:
        case ANSWER_ALIAS_TARGET_LOST:
        case ANSWER_NOT_A_PATH:
        case ANSWER_HEADERS_TIMEOUT:
        case ANSWER_MISSING_API_KEY:
        case ANSWER_BODY_NOT_TAKEN:
        case ANSWER_INVALID_JSON:
        case ANSWER_MODEL_NOT_STRING:
        case ANSWER_MODEL_TWICE_IN_BODY:
        case ANSWER_MODEL_MISSING_IN_BODY:
        case ANSWER_MODEL_MISSING:
        case ANSWER_MODEL_BAD_ESCAPE:
        case ANSWER_MODEL_TWICE_IN_QUERY:
        case ANSWER_MODEL_BODY_AND_QUERY:
        case ANSWER_MODEL_CONTROL_CHARACTER:
        case ANSWER_STREAM_NOT_FOUND:
        case ANSWER_STREAM_NO_CONV_ID:
        case ANSWER_WEBSOCKET_REFUSED:
        case ANSWER_STREAM_BAD_FROM:
        case ANSWER_LOOKUP_TOO_LARGE:
                (void)answer_format(buf, n, a);
                return;
        case ANSWER_BAD_REQUEST:
        case ANSWER_MALFORMED_REQUEST:
        case ANSWER_GPU_BUSY:
        case ANSWER_ENGINE_FAILED:
        case ANSWER_CONFIG_ERROR:
        case ANSWER_CRASH_LOOP:
                (void)answer_format(buf, n, a, "words of 100% someone else's");
                return;
        case ANSWER_BODY_TIMEOUT:
        case ANSWER_BODY_TOO_SLOW:
                (void)answer_format(buf, n, a, "1min");
                return;
        case ANSWER_TOO_MANY_CONNECTIONS:
                (void)answer_format(buf, n, a, 17ULL, 16ULL);
                return;
        case ANSWER_INVALID_API_KEY:
                (void)answer_format(buf, n, a, "3f2a9c1e00ff");
                return;
        case ANSWER_DAILY_LIMIT:
                (void)answer_format(buf, n, a, "this key", 100ULL, "2026-12-01",
                                    answer_time_left(span, sizeof(span), 68178));
                return;
        case ANSWER_DAILY_TOKENS:
                (void)answer_format(buf, n, a, 2048ULL, "2026-12-01", 2000ULL,
                                    answer_time_left(span, sizeof(span), 42));
                return;
        case ANSWER_BODY_TOO_LARGE:
                (void)answer_format(buf, n, a, "this key's tier", "MaxBodySize=", 1024ULL);
                return;
        case ANSWER_MODEL_NOT_ALLOWED:
                (void)answer_format(buf, n, a, "free", "3090-big");
                return;
        case ANSWER_ACTIVITY_NOT_ALLOWED:
        case ANSWER_CONTROL_NOT_ALLOWED:
                (void)answer_format(buf, n, a, "free");
                return;
        case ANSWER_UNKNOWN_HOST:
        case ANSWER_HOST_REMOVED:
        case ANSWER_UNLOAD_SWITCHING:
                (void)answer_format(buf, n, a, "3090");
                return;

        case ANSWER_PROBE_NOT_LOADED:
                (void)answer_format(buf, n, a, "flint-xs", "fork", "3090");
                return;
        case ANSWER_UNKNOWN_MODEL:
        case ANSWER_NO_ENGINE:
                (void)answer_format(buf, n, a, "3090", "k\"q");
                return;
        case ANSWER_NEVER_LISTED:
                (void)answer_format(buf, n, a, "3090", "mainline", "ghost-7b", "3090", "mainline");
                return;
        case ANSWER_HOST_DOWN:
        case ANSWER_UPSTREAM_ENDED_EARLY:
        case ANSWER_UPSTREAM_STREAM_CUT:
                (void)answer_format(buf, n, a, "3090", "connection refused");
                return;
        case ANSWER_UPSTREAM_FAILED:
                (void)answer_format(buf, n, a, "3090", "connection reset", "http://10.0.0.2:8080");
                return;
        case ANSWER_UPSTREAM_TIMEOUT:
                (void)answer_format(buf, n, a, "3090", "5min");
                return;
        case ANSWER_FALLBACK_FAILED:
                (void)answer_format(buf, n, a, "cloud", "https://api.example", "connection refused");
                return;
        case ANSWER_BUDGET_EXCEEDED:
                (void)answer_format(buf, n, a, "fork", "3090", "no first token within 10s");
                return;
        case ANSWER_TOO_MANY_SUBSCRIBERS:
                (void)answer_format(buf, n, a, "/models/sse", (size_t)4, 4ULL, 8ULL, 4ULL);
                return;
        case ANSWER_HOST_NOT_SERVED:
                (void)answer_format(buf, n, a, "Sec-Fetch-Site", "rebound.example:8080");
                return;
        case ANSWER_PROBE_NOT_SWITCHED:
                (void)answer_format(buf, n, a, "fork", "3090", "engine 'mainline' runs");
                return;
        case _ANSWER_MAX:
        case _ANSWER_INVALID:
                break;
        }
        FAIL("row %d has no sample", a);
}

/* What each row says today, as the code before the table wrote it */
static const struct {
        Answer answer;
        int given_status;
        uint64_t given_retry;
        int status;
        const char *code, *headers, *message;
} rows[] = {
        {ANSWER_OUT_OF_MEMORY, 0, 0, 500, NULL, "", "out of memory"},
        {ANSWER_ADMISSION_OUT_OF_MEMORY, 0, 0, 500, NULL, "WWW-Authenticate: Bearer\r\n", "out of memory"},
        {ANSWER_ALIAS_TARGET_LOST, 0, 0, 500, NULL, "", "alias target without a host"},
        {ANSWER_BAD_REQUEST, 400, 0, 400, "invalid_request", "", "words of 100% someone else's"},
        {ANSWER_MALFORMED_REQUEST, 431, 0, 431, NULL, "", "words of 100% someone else's"},
        {ANSWER_NOT_A_PATH, 0, 0, 400, "invalid_request", "",
         "the request target must be a path (modelgate is not a forward proxy)"},
        {ANSWER_HEADERS_TIMEOUT, 0, 0, 408, "request_timeout", "",
         "the client did not send its request headers in time"},
        {ANSWER_BODY_TIMEOUT, 0, 0, 408, "request_timeout", "",
         "the client did not send its request body within BodyTimeoutSec=1min"},
        {ANSWER_BODY_TOO_SLOW, 0, 0, 408, "request_timeout", "",
         "the client sent its request body too slowly: nothing for IdleTimeoutSec=1min"},
        {ANSWER_TOO_MANY_CONNECTIONS, 0, 0, 503, "too_many_connections", "Retry-After: 5\r\n",
         "this address has 17 connections open to modelgate, more than MaxConnectionsPerAddress=16; close "
         "some "
         "and retry"},
        {ANSWER_INVALID_API_KEY, 0, 0, 401, "invalid_api_key", "WWW-Authenticate: Bearer\r\n",
         "the API key is not known to this proxy (digest 3f2a9c1e…); ask its operator for one"},
        {ANSWER_MISSING_API_KEY, 0, 0, 401, "missing_api_key", "WWW-Authenticate: Bearer\r\n",
         "this proxy needs an API key: send it as \"Authorization: Bearer <key>\" or \"X-Api-Key: <key>\""},
        {ANSWER_DAILY_LIMIT, 0, 3600, 429, "rate_limit_exceeded", "Retry-After: 3600\r\n",
         "this key has used its 100 requests for today (2026-12-01, UTC); the count starts again at 00:00 "
         "UTC (in "
         "18h 56min)"},
        {ANSWER_DAILY_TOKENS, 0, 3600, 429, "rate_limit_exceeded", "Retry-After: 3600\r\n",
         "this key has used 2048 tokens today (2026-12-01, UTC), its tier's DailyTokens=2000 (prompt tokens "
         "not from the cache, and generated ones); the count starts again at 00:00 UTC (in 42s)"},
        {ANSWER_BODY_TOO_LARGE, 0, 0, 413, "request_too_large", "",
         "request body is larger than this key's tier allows (MaxBodySize= 1024 bytes)"},
        {ANSWER_BODY_NOT_TAKEN, 0, 0, 413, "request_too_large", "", "this request takes no body"},
        {ANSWER_INVALID_JSON, 0, 0, 400, "invalid_json", "",
         "the request body is not valid JSON (or not a JSON object)"},
        {ANSWER_MODEL_NOT_STRING, 0, 0, 400, "invalid_model", "",
         "\"model\" in the request body must be a string"},
        {ANSWER_MODEL_TWICE_IN_BODY, 0, 0, 400, "invalid_model", "",
         "\"model\" appears more than once in the request body"},
        {ANSWER_MODEL_MISSING_IN_BODY, 0, 0, 400, "missing_model", "",
         "the request body has no \"model\"; name one as \"<host>-<key>\" (GET /v1/models lists them)"},
        {ANSWER_MODEL_MISSING, 0, 0, 400, "missing_model", "",
         "the request names no model; send \"model\" in a JSON body or ?model=<host>-<key> in the query "
         "(GET "
         "/v1/models lists them)"},
        {ANSWER_MODEL_BAD_ESCAPE, 0, 0, 400, "invalid_model", "",
         "the query has a bad %-escape in its model parameter or in a parameter name"},
        {ANSWER_MODEL_TWICE_IN_QUERY, 0, 0, 400, "invalid_model", "",
         "the query names model more than once"},
        {ANSWER_MODEL_BODY_AND_QUERY, 0, 0, 400, "invalid_model", "",
         "the request names one model in its body and another in its query; name it once"},
        {ANSWER_MODEL_CONTROL_CHARACTER, 0, 0, 400, "invalid_model", "",
         "the model name holds a control character"},
        {ANSWER_MODEL_NOT_ALLOWED, 0, 0, 403, "model_not_allowed", "",
         "this key (tier 'free') may not use model '3090-big'; GET /v1/models lists the ones it may"},
        {ANSWER_ACTIVITY_NOT_ALLOWED, 0, 0, 403, "activity_not_allowed", "",
         "this key's tier 'free' may not watch the activity; set Activity=yes in its [Tier] for an "
         "operator's "
         "key"},
        {ANSWER_CONTROL_NOT_ALLOWED, 0, 0, 403, "control_not_allowed", "",
         "this key's tier 'free' may not stop engines; set Control=yes in its [Tier] for an operator's key"},
        {ANSWER_UNLOAD_SWITCHING, 0, 0, 409, "switching", "",
         "host '3090' is switching engines; the clients waiting for the switch decide, and the new engine "
         "stops at its idle stop or at the next unload"},
        {ANSWER_UNKNOWN_HOST, 0, 0, 404, "model_not_found", "",
         "model '3090' does not start with a configured host name and '-'; GET /v1/models lists the "
         "models "
         "this proxy serves"},
        {ANSWER_UNKNOWN_MODEL, 0, 0, 404, "model_not_found", "",
         "host '3090' does not list a model 'k\"q'; GET /v1/models lists the models this proxy serves"},
        {ANSWER_NO_ENGINE, 0, 0, 404, "model_not_found", "",
         "no engine of host '3090' serves 'k\"q': no [Engine] of that host lists it in Models=, and no "
         "engine "
         "runs there now; GET /v1/models lists the models this proxy serves"},
        {ANSWER_NEVER_LISTED, 0, 0, 404, "model_not_found", "",
         "host '3090': engine 'mainline' did not list a model 'ghost-7b' when it last ran, so it is not "
         "started "
         "for it (is the name or the engine's Models= mistyped?); a model added since is found once "
         "'modelgatectl switch 3090 mainline' has started it; GET /v1/models lists the models this proxy "
         "serves"},
        {ANSWER_HOST_DOWN, 0, 0, 503, "host_down", "Retry-After: 30\r\nretry-after-ms: 30000\r\n",
         "host '3090' is down: connection refused; modelgate keeps trying it, retry in 30 s"},
        {ANSWER_HOST_REMOVED, 0, 0, 503, "host_down", "Retry-After: 30\r\nretry-after-ms: 30000\r\n",
         "host '3090' was removed from modelgate's configuration by a reload; GET /v1/models lists the "
         "models "
         "this proxy serves now"},
        {ANSWER_GPU_BUSY, 0, 0, 423, "gpu_busy", "x-should-retry: false\r\n",
         "words of 100% someone else's"},
        {ANSWER_ENGINE_FAILED, 504, 0, 504, "engine_failed", "", "words of 100% someone else's"},
        {ANSWER_UPSTREAM_FAILED, 0, 0, 502, "upstream_failed", "",
         "host '3090' failed this request: connection reset (http://10.0.0.2:8080)"},
        {ANSWER_UPSTREAM_TIMEOUT, 0, 0, 504, "upstream_timeout", "",
         "host '3090' sent nothing for 5min (UpstreamIdleTimeoutSec=), so modelgate cancelled the request"},
        {ANSWER_UPSTREAM_ENDED_EARLY, 0, 0, 502, "upstream_incomplete", "",
         "host '3090' ended its answer early (connection refused)"},
        {ANSWER_UPSTREAM_STREAM_CUT, 0, 0, 502, "upstream_incomplete", "",
         "host '3090' stopped the stream before it ended (connection refused); the answer is incomplete"},
        {ANSWER_FALLBACK_FAILED, 0, 0, 502, "fallback_failed", "",
         "fallback 'cloud' (https://api.example) failed: connection refused"},
        {ANSWER_BUDGET_EXCEEDED, 0, 0, 504, "budget_exceeded", "",
         "engine 'fork' of host '3090': no first token within 10s; the request was cancelled"},
        {ANSWER_CONFIG_ERROR, 0, 0, 503, "config_error", "x-should-retry: false\r\n",
         "words of 100% someone else's"},
        {ANSWER_CRASH_LOOP, 0, 0, 503, "crash_loop", "x-should-retry: false\r\n",
         "words of 100% someone else's"},
        {ANSWER_TOO_MANY_SUBSCRIBERS, 0, 0, 503, "too_many_subscribers", "Retry-After: 30\r\n",
         "/models/sse has as many subscribers as this proxy takes (4 of 4; MaxFeedSubscribers=8 for both "
         "feeds, at most half of MaxConnections=, keeps 4 for /activity alone)"},
        {ANSWER_HOST_NOT_SERVED, 0, 0, 403, "host_not_served", "x-should-retry: false\r\n",
         "this request comes from a web page (it has Sec-Fetch-Site) and names 'rebound.example:8080' as "
         "its "
         "Host, a name this proxy does not answer for: a page of another site may have made that name lead "
         "here (DNS rebinding); if it is one of this proxy's names, its operator adds it to [Proxy] "
         "ServerNames="},
        {ANSWER_PROBE_NOT_SWITCHED, 0, 0, 423, "engine_not_running", "x-should-retry: false\r\n",
         "engine 'fork' of host '3090' is not running, and modelgate does not switch a GPU for a token "
         "count "
         "or other probe (engine 'mainline' runs); estimate locally, or send a real request for that model "
         "first"},
        {ANSWER_STREAM_NOT_FOUND, 0, 0, 404, "stream_not_found", "", "File Not Found"},
        {ANSWER_PROBE_NOT_LOADED, 0, 0, 423, "engine_not_running", "x-should-retry: false\r\n",
         "model 'flint-xs' is not loaded in engine 'fork' of host '3090', and modelgate does not load a "
         "model "
         "for a token count or other probe; estimate locally, or send a real request for that model first"},
        {ANSWER_STREAM_NO_CONV_ID, 0, 0, 400, "missing_conv_id", "", "Missing conversation id in path"},
        {ANSWER_WEBSOCKET_REFUSED, 0, 0, 426, "websocket_not_supported",
         "Upgrade: HTTP/1.1\r\nConnection: Upgrade\r\n",
         "modelgate answers the Responses API over plain HTTP only, not over WebSocket: send the request as "
         "a POST to this path, without an Upgrade header"},
        {ANSWER_STREAM_BAD_FROM, 0, 0, 400, "invalid_from", "", "Invalid 'from' offset"},
        {ANSWER_LOOKUP_TOO_LARGE, 0, 0, 413, "request_too_large", "",
         "a stream lookup's body is at most 67328 bytes (256 ids of at most 256 bytes); ask for fewer ids "
         "at "
         "a time"},
};

static json_object *member(json_object *o, const char *key) {
        json_object *v = NULL;
        ASSERT_TRUE(json_object_object_get_ex(o, key, &v));
        return v;
}

/* The row's body in one API shape: JSON, with the words, the status's type and (OpenAI) the code */
static void check_shape(ApiKind api, int status, const char *code, const char *message, const char *body) {
        _cleanup_(json_object_putp) json_object *o = NULL;
        json_object *e;

        ASSERT_OK(json_parse(/* tok= */ NULL, body, strlen(body), &o));
        e = member(o, "error");
        ASSERT_STREQ(json_get_string(e, "message"), message);
        ASSERT_TRUE(json_get_string(e, "type"));
        if (api == API_ANTHROPIC) {
                ASSERT_STREQ(json_get_string(o, "type"), "error");
                ASSERT_TRUE(!json_object_object_get_ex(e, "code", NULL));
        } else if (code)
                ASSERT_STREQ(json_get_string(e, "code"), code);
        else
                ASSERT_TRUE(json_object_is_type(member(e, "code"), json_type_null));
        ASSERT_TRUE(status >= 400 && status < 600);
}

/* event: response.failed, its body the words and the row's code (or the status's type) */
static void check_response_failed(int status, const char *code, const char *message, const char *event) {
        static const char head[] = "event: response.failed\ndata: ";
        _cleanup_(json_object_putp) json_object *o = NULL;
        json_object *r, *e;

        ASSERT_TRUE(startswith(event, head) && streq(event + strlen(event) - 2, "\n\n"));
        ASSERT_OK(json_parse(/* tok= */ NULL, event + strlen(head), strlen(event) - strlen(head) - 2, &o));
        ASSERT_STREQ(json_get_string(o, "type"), "response.failed");
        r = member(o, "response");
        ASSERT_STREQ(json_get_string(r, "status"), "failed");
        e = member(r, "error");
        ASSERT_STREQ(json_get_string(e, "message"), message);
        if (code)
                ASSERT_STREQ(json_get_string(e, "code"), code);
        else
                ASSERT_STREQ(json_get_string(e, "code"),
                             status >= 500 ? "server_error" : "invalid_request_error");
}

TEST(every_row_in_every_shape) {
        bool seen[_ANSWER_MAX] = {};

        for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
                Answer a = rows[i].answer;
                const AnswerRow *row = answer_row(a);
                char message[512], headers[128];
                int status = answer_status(a, rows[i].given_status);

                ASSERT_TRUE(!seen[a]);
                seen[a] = true;
                format_sample(a, message, sizeof(message));
                if (!streq(message, rows[i].message))
                        FAIL("row %d: '%s' != '%s'", a, message, rows[i].message);
                ASSERT_EQ(status, rows[i].status);
                ASSERT_TRUE(streq_ptr(row->code, rows[i].code));
                ASSERT_TRUE(answer_headers(headers, sizeof(headers), a, rows[i].given_retry) <
                            (int)sizeof(headers));
                ASSERT_STREQ(headers, rows[i].headers);
                for (ApiKind api = 0; api < _API_KIND_MAX; api++) {
                        _cleanup_free_ char *j = api_error_json(api, status, row->code, message, NULL);
                        _cleanup_(buffer_done) Buffer ev = {};
                        ASSERT_TRUE(j);
                        check_shape(api, status, row->code, message, j);
                        /* after the early 200, the same body as an SSE error event (the Responses API's
                         * own event there) */
                        ASSERT_OK(sse_error_event(api, status, row->code, message, &ev));
                        ASSERT_OK(buffer_terminate(&ev));
                        if (api == API_RESPONSES)
                                check_response_failed(status, row->code, message, buffer_peek(&ev));
                        else
                                ASSERT_TRUE(strstr(buffer_peek(&ev), j));
                }
        }
        for (Answer a = 0; a < _ANSWER_MAX; a++)
                if (!seen[a])
                        FAIL("row %d of the table is not tested", a);
}

TEST(retry_after_family) {
        char b[96];

        ASSERT_EQ(answer_retry_after(b, sizeof(b), ANSWER_HOST_DOWN_RETRY_SEC, /* ms= */ true), 40);
        ASSERT_STREQ(b, "Retry-After: 30\r\nretry-after-ms: 30000\r\n");
        (void)answer_retry_after(b, sizeof(b), 7, /* ms= */ false);
        ASSERT_STREQ(b, "Retry-After: 7\r\n");
}

/* a 429's time to the day's end, for people: minutes from a minute on */
TEST(time_left) {
        char b[64];
        ASSERT_STREQ(answer_time_left(b, sizeof(b), 68178), "18h 56min");
        ASSERT_STREQ(answer_time_left(b, sizeof(b), 3600), "1h");
        ASSERT_STREQ(answer_time_left(b, sizeof(b), 59), "59s");
        ASSERT_STREQ(answer_time_left(b, sizeof(b), 0), "0");
}

/* The typed wrappers: the shape of each row they are used with, and the same words as answer_format() */
TEST(typed_words) {
        AnswerWords w;
        char m[512];

        ASSERT_TRUE(answer_shape_ok(ANSWER_NOT_A_PATH, ""));
        ASSERT_TRUE(answer_shape_ok(ANSWER_MODEL_BAD_ESCAPE, "")); /* "%%" is no argument */
        ASSERT_TRUE(answer_shape_ok(ANSWER_UNKNOWN_HOST, "s"));
        ASSERT_TRUE(answer_shape_ok(ANSWER_MODEL_NOT_ALLOWED, "ss"));
        ASSERT_TRUE(answer_shape_ok(ANSWER_PROBE_NOT_SWITCHED, "sss"));
        ASSERT_TRUE(answer_shape_ok(ANSWER_NEVER_LISTED, "sssss"));
        ASSERT_TRUE(answer_shape_ok(ANSWER_BODY_TOO_LARGE, "ssu"));
        ASSERT_TRUE(!answer_shape_ok(ANSWER_BODY_TOO_LARGE, "sss"));
        ASSERT_TRUE(!answer_shape_ok(ANSWER_UNKNOWN_HOST, ""));
        ASSERT_TRUE(!answer_shape_ok(ANSWER_UNKNOWN_HOST, "ss"));
        answer_words_ssu(&w, ANSWER_BODY_TOO_LARGE, "this key's tier", "MaxBodySize=", 1024);
        (void)answer_format(m, sizeof(m), ANSWER_BODY_TOO_LARGE, "this key's tier", "MaxBodySize=", 1024ULL);
        ASSERT_STREQ(w.message, m);
        ASSERT_EQ(w.answer, ANSWER_BODY_TOO_LARGE);
        ASSERT_EQ(w.status, 0);
        answer_words_given(&w, ANSWER_DAILY_LIMIT, 0, 42, "spent");
        ASSERT_STREQ(w.message, "spent");
        ASSERT_EQ(w.retry_after, 42u);
}

TESTS_MAIN
