/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "modelgated/api/api-answer.h"
#include "modelgated/api/conversation.h"
#include "modelgated/api/route.h"
#include "shared/time-util.h"

#define WORDS_OF_(x) #x
#define WORDS_OF(x) WORDS_OF_(x)
#define RETRY_WORDS "modelgate keeps trying it, retry in " WORDS_OF(ANSWER_HOST_DOWN_RETRY_SEC) " s"
#define LISTS_THEM "GET /v1/models lists the models this proxy serves"

/* rule:resumable-streams: the bound in the words, at compile time */
#define LOOKUP_BODY_MAX WORDS_OF(CONV_LOOKUP_BODY_MAX)
#define LOOKUP_TOO_LARGE                                                                                    \
        "a stream lookup's body is at most " LOOKUP_BODY_MAX                                                \
        " bytes (256 ids of at most 256 bytes); ask for fewer ids at a time"

static const AnswerRow answer_table[_ANSWER_MAX] = {
        [ANSWER_OUT_OF_MEMORY] = {500, NULL, ANSWER_HEADERS_NONE, 0, "out of memory"},
        [ANSWER_ADMISSION_OUT_OF_MEMORY] = {500, NULL, ANSWER_HEADERS_BEARER, 0, "out of memory"},
        [ANSWER_ALIAS_TARGET_LOST] = {500, NULL, ANSWER_HEADERS_NONE, 0, "alias target without a host"},
        [ANSWER_BAD_REQUEST] = {400, "invalid_request", ANSWER_HEADERS_NONE, 0, "%s"},
        [ANSWER_MALFORMED_REQUEST] = {0, NULL, ANSWER_HEADERS_NONE, 0, "%s"},
        [ANSWER_NOT_A_PATH] = {400, "invalid_request", ANSWER_HEADERS_NONE, 0,
                               "the request target must be a path (modelgate is not a forward proxy)"},
        [ANSWER_HEADERS_TIMEOUT] = {408, "request_timeout", ANSWER_HEADERS_NONE, 0,
                                    "the client did not send its request headers in time"},
        [ANSWER_BODY_TIMEOUT] = {408, "request_timeout", ANSWER_HEADERS_NONE, 0,
                                 "the client did not send its request body within BodyTimeoutSec=%s"},
        [ANSWER_BODY_TOO_SLOW] =
                {408, "request_timeout", ANSWER_HEADERS_NONE, 0,
                 "the client sent its request body too slowly: nothing for IdleTimeoutSec=%s"},
        [ANSWER_TOO_MANY_CONNECTIONS] = {503, "too_many_connections", ANSWER_HEADERS_RETRY_AFTER, 5,
                                         "this address has %llu connections open to modelgate, more than "
                                         "MaxConnectionsPerAddress=%llu; close some and retry"},
        [ANSWER_INVALID_API_KEY] =
                {401, "invalid_api_key", ANSWER_HEADERS_BEARER, 0,
                 "the API key is not known to this proxy (digest %.8s…); ask its operator "
                 "for one"},
        [ANSWER_MISSING_API_KEY] =
                {401, "missing_api_key", ANSWER_HEADERS_BEARER, 0,
                 "this proxy needs an API key: send it as \"Authorization: Bearer <key>\" "
                 "or \"X-Api-Key: <key>\""},
        [ANSWER_DAILY_LIMIT] =
                {429, "rate_limit_exceeded", ANSWER_HEADERS_RETRY_AFTER, 0,
                 "%s has used its %llu requests for today (%s, UTC); the count starts again at "
                 "00:00 UTC (in %s)"},
        /* rule:daily-tokens */
        [ANSWER_DAILY_TOKENS] =
                {429, "rate_limit_exceeded", ANSWER_HEADERS_RETRY_AFTER, 0,
                 "this key has used %llu tokens today (%s, UTC), its tier's DailyTokens=%llu (prompt tokens "
                 "not from the cache, and generated ones); the count starts again at 00:00 UTC (in %s)"},
        [ANSWER_BODY_TOO_LARGE] = {413, "request_too_large", ANSWER_HEADERS_NONE, 0,
                                   "request body is larger than %s allows (%s %llu bytes)"},
        [ANSWER_BODY_NOT_TAKEN] = {413, "request_too_large", ANSWER_HEADERS_NONE, 0,
                                   "this request takes no body"},
        [ANSWER_INVALID_JSON] = {400, "invalid_json", ANSWER_HEADERS_NONE, 0,
                                 "the request body is not valid JSON (or not a JSON object)"},
        [ANSWER_MODEL_NOT_STRING] = {400, "invalid_model", ANSWER_HEADERS_NONE, 0,
                                     "\"model\" in the request body must be a string"},
        [ANSWER_MODEL_TWICE_IN_BODY] = {400, "invalid_model", ANSWER_HEADERS_NONE, 0,
                                        "\"model\" appears more than once in the request body"},
        [ANSWER_MODEL_MISSING_IN_BODY] = {400, "missing_model", ANSWER_HEADERS_NONE, 0,
                                          "the request body has no \"model\"; name one as \"<host>-<key>\" "
                                          "(GET /v1/models lists them)"},
        [ANSWER_MODEL_MISSING] = {400, "missing_model", ANSWER_HEADERS_NONE, 0,
                                  "the request names no model; send \"model\" in a JSON body or "
                                  "?model=<host>-<key> in the query (GET /v1/models lists them)"},
        [ANSWER_MODEL_BAD_ESCAPE] =
                {400, "invalid_model", ANSWER_HEADERS_NONE, 0,
                 "the query has a bad %%-escape in its model parameter or in a parameter "
                 "name"},
        [ANSWER_MODEL_TWICE_IN_QUERY] = {400, "invalid_model", ANSWER_HEADERS_NONE, 0,
                                         "the query names model more than once"},
        [ANSWER_MODEL_BODY_AND_QUERY] = {400, "invalid_model", ANSWER_HEADERS_NONE, 0,
                                         "the request names one model in its body and another in its query; "
                                         "name it once"},
        [ANSWER_MODEL_CONTROL_CHARACTER] = {400, "invalid_model", ANSWER_HEADERS_NONE, 0,
                                            "the model name holds a control character"},
        /* rule:activity-feed */
        [ANSWER_ACTIVITY_NOT_ALLOWED] = {403, "activity_not_allowed", ANSWER_HEADERS_NONE, 0,
                                         "this key's tier '%s' may not watch the activity; set Activity=yes "
                                         "in its [Tier] for an operator's key"},
        /* rule:swap-unload */
        [ANSWER_CONTROL_NOT_ALLOWED] = {403, "control_not_allowed", ANSWER_HEADERS_NONE, 0,
                                        "this key's tier '%s' may not stop engines; set Control=yes in its "
                                        "[Tier] for an operator's key"},
        /* rule:host-check */
        [ANSWER_HOST_NOT_SERVED] =
                {403, "host_not_served", ANSWER_HEADERS_NO_RETRY, 0,
                 "this request comes from a web page (it has %s) and names '%s' as its "
                 "Host, a name this proxy does not answer for: a page of another site "
                 "may have made that name lead here (DNS rebinding); if it is one of this "
                 "proxy's names, its operator adds it to [Proxy] ServerNames="},
        [ANSWER_UNLOAD_SWITCHING] = {409, "switching", ANSWER_HEADERS_NONE, 0,
                                     "host '%s' is switching engines; the clients waiting for the switch "
                                     "decide, and the new engine stops at its idle stop or at the next "
                                     "unload"},
        [ANSWER_MODEL_NOT_ALLOWED] =
                {403, "model_not_allowed", ANSWER_HEADERS_NONE, 0,
                 "this key (tier '%s') may not use model '%s'; GET /v1/models lists the "
                 "ones it may"},
        [ANSWER_UNKNOWN_HOST] =
                {404, "model_not_found", ANSWER_HEADERS_NONE, 0,
                 "model '%s' does not start with a configured host name and '-'; " LISTS_THEM},
        [ANSWER_UNKNOWN_MODEL] = {404, "model_not_found", ANSWER_HEADERS_NONE, 0,
                                  "host '%s' does not list a model '%s'; " LISTS_THEM},
        [ANSWER_NO_ENGINE] = {404, "model_not_found", ANSWER_HEADERS_NONE, 0,
                              "no engine of host '%s' serves '%s': no [Engine] of that host lists it in "
                              "Models=, and no engine runs there now; " LISTS_THEM},
        [ANSWER_NEVER_LISTED] = {404, "model_not_found", ANSWER_HEADERS_NONE, 0,
                                 "host '%s': engine '%s' did not list a model '%s' when it last ran, so it "
                                 "is not started for it (is the name or the engine's Models= mistyped?); "
                                 "a model added since is found once 'modelgatectl switch %s %s' has "
                                 "started it; " LISTS_THEM},
        [ANSWER_HOST_DOWN] = {503, "host_down", ANSWER_HEADERS_RETRY_AFTER_MS, ANSWER_HOST_DOWN_RETRY_SEC,
                              "host '%s' is down: %s; " RETRY_WORDS},
        [ANSWER_HOST_REMOVED] =
                {503, "host_down", ANSWER_HEADERS_RETRY_AFTER_MS, ANSWER_HOST_DOWN_RETRY_SEC,
                 "host '%s' was removed from modelgate's configuration by a reload; " LISTS_THEM " now"},
        [ANSWER_GPU_BUSY] = {423, "gpu_busy", ANSWER_HEADERS_NO_RETRY, 0, "%s"},
        [ANSWER_ENGINE_FAILED] = {0, "engine_failed", ANSWER_HEADERS_NONE, 0, "%s"},
        [ANSWER_UPSTREAM_FAILED] = {502, "upstream_failed", ANSWER_HEADERS_NONE, 0,
                                    "host '%s' failed this request: %s (%s)"},
        [ANSWER_UPSTREAM_TIMEOUT] = {504, "upstream_timeout", ANSWER_HEADERS_NONE, 0,
                                     "host '%s' sent nothing for %s (UpstreamIdleTimeoutSec=), so modelgate "
                                     "cancelled the request"},
        [ANSWER_UPSTREAM_ENDED_EARLY] = {502, "upstream_incomplete", ANSWER_HEADERS_NONE, 0,
                                         "host '%s' ended its answer early (%s)"},
        [ANSWER_UPSTREAM_STREAM_CUT] = {502, "upstream_incomplete", ANSWER_HEADERS_NONE, 0,
                                        "host '%s' stopped the stream before it ended (%s); the answer is "
                                        "incomplete"},
        [ANSWER_FALLBACK_FAILED] = {502, "fallback_failed", ANSWER_HEADERS_NONE, 0,
                                    "fallback '%s' (%s) failed: %s"},
        [ANSWER_BUDGET_EXCEEDED] = {504, "budget_exceeded", ANSWER_HEADERS_NONE, 0,
                                    "engine '%s' of host '%s': %s; the request was cancelled"},
        [ANSWER_CONFIG_ERROR] = {503, "config_error", ANSWER_HEADERS_NO_RETRY, 0, "%s"},
        [ANSWER_CRASH_LOOP] = {503, "crash_loop", ANSWER_HEADERS_NO_RETRY, 0, "%s"},
        [ANSWER_TOO_MANY_SUBSCRIBERS] = {503, "too_many_subscribers", ANSWER_HEADERS_RETRY_AFTER, 30,
                                         "%s has as many subscribers as this proxy takes (%zu of %llu; "
                                         "MaxFeedSubscribers=%llu for both feeds, at most half of "
                                         "MaxConnections=, keeps %llu for /activity alone)"},
        /* rule:probe: not retried by any SDK (x-should-retry: false, a 4xx they pass on); Claude Code's
         * token count then stands in its own estimate, as for any count it cannot get */
        [ANSWER_PROBE_NOT_SWITCHED] =
                {423, "engine_not_running", ANSWER_HEADERS_NO_RETRY, 0,
                 "engine '%s' of host '%s' is not running, and modelgate does not switch a GPU for a "
                 "token count or other probe (%s); estimate locally, or send a real request for that "
                 "model first"},
        [ANSWER_PROBE_NOT_LOADED] =
                {423, "engine_not_running", ANSWER_HEADERS_NO_RETRY, 0,
                 "model '%s' is not loaded in engine '%s' of host '%s', and modelgate does not load a model "
                 "for a token count or other probe; estimate locally, or send a real request for that model "
                 "first"},
        /* rule:resumable-streams: what llama-server's router answers on the wire for a conversation it
         * does not know (its HTTP layer writes these words over every 404 body, its "Stream not found or
         * expired" among them), and for a request without one; an id of another key gets the same,
         * never a hint of it. Written in the router's shape (client-stream.c): words without arguments,
         * no quote or backslash */
        [ANSWER_STREAM_NOT_FOUND] = {404, "stream_not_found", ANSWER_HEADERS_NONE, 0, "File Not Found"},
        /* rule:websocket-426: Codex's built-in provider takes a 426, and only that, for "use plain HTTP"
         * at once; any other refusal of its WebSocket costs it its retries first */
        [ANSWER_WEBSOCKET_REFUSED] = {426, "websocket_not_supported", ANSWER_HEADERS_UPGRADE, 0,
                                      "modelgate answers the Responses API over plain HTTP only, not over "
                                      "WebSocket: send the request as a POST to this path, without an "
                                      "Upgrade header"},
        [ANSWER_STREAM_NO_CONV_ID] = {400, "missing_conv_id", ANSWER_HEADERS_NONE, 0,
                                      "Missing conversation id in path"},
        /* rule:resumable-streams: the router's words for a from= that std::stoull cannot read; modelgate
         * says so for anything but digits, which the router would read otherwise than the client meant */
        [ANSWER_STREAM_BAD_FROM] = {400, "invalid_from", ANSWER_HEADERS_NONE, 0, "Invalid 'from' offset"},
        /* rule:resumable-streams: without arguments, so that the parser can say it of a chunked body */
        [ANSWER_LOOKUP_TOO_LARGE] = {413, "request_too_large", ANSWER_HEADERS_NONE, 0, LOOKUP_TOO_LARGE},
};

const AnswerRow *answer_row(Answer a) {
        assert(a >= 0 && a < _ANSWER_MAX);
        return &answer_table[a];
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
int answer_vformat(char *buf, size_t size, Answer a, va_list ap) {
        /* the format is the table's: its arguments are checked row by row in test-api-answer */
        return vsnprintf(buf, size, answer_row(a)->format, ap);
}
#pragma GCC diagnostic pop

bool answer_shape_ok(Answer a, const char *shape) {
        const char *f = answer_row(a)->format;

        for (f = strchr(f, '%'); f; f = strchr(f, '%')) {
                f++;
                if (*f == '%') {
                        f++;
                        continue;
                }
                f += strspn(f, "-+ #0123456789.*");
                char got = startswith(f, "llu") ? 'u' : startswith(f, "zu") ? 'z' : *f == 's' ? 's' : '?';
                if (*shape++ != got)
                        return false;
        }
        return *shape == '\0';
}

void answer_words(AnswerWords *w, Answer a, const char *shape, ...) {
        va_list ap;

        /* the wrappers' shapes (api-answer.h) are what the compiler checks; this, that the row has it */
        assert(answer_shape_ok(a, shape));
        *w = (AnswerWords){.answer = a};
        va_start(ap, shape);
        (void)answer_vformat(w->message, sizeof(w->message), a, ap);
        va_end(ap);
}

void answer_words_given(AnswerWords *w, Answer a, int status, uint64_t retry_after, const char *message) {
        *w = (AnswerWords){.answer = a, .status = status, .retry_after = retry_after};
        (void)snprintf(w->message, sizeof(w->message), "%s", message ?: "");
}

int answer_format(char *buf, size_t size, Answer a, ...) {
        va_list ap;
        int r;

        va_start(ap, a);
        r = answer_vformat(buf, size, a, ap);
        va_end(ap);
        return r;
}

char *answer_time_left(char *buf, size_t size, uint64_t seconds) {
        /* the seconds of 18 h 56 min would be noise; the clock time beside it is exact */
        if (seconds >= 60)
                seconds -= seconds % 60;
        return format_timespan(buf, size, seconds * USEC_PER_SEC);
}

int answer_retry_after(char *buf, size_t size, uint64_t seconds, bool ms) {
        if (ms)
                return snprintf(buf, size, "Retry-After: %llu\r\nretry-after-ms: %llu000\r\n",
                                (unsigned long long)seconds, (unsigned long long)seconds);
        return snprintf(buf, size, "Retry-After: %llu\r\n", (unsigned long long)seconds);
}

int answer_headers(char *buf, size_t size, Answer a, uint64_t retry_after) {
        const AnswerRow *row = answer_row(a);
        /* rule:bus-backoff: the host's own time (its bus's reconnect) before the row's steady one */
        uint64_t seconds = retry_after ?: row->retry_after;

        switch (row->headers) {
        case ANSWER_HEADERS_RETRY_AFTER:
        case ANSWER_HEADERS_RETRY_AFTER_MS:
                return answer_retry_after(buf, size, seconds, row->headers == ANSWER_HEADERS_RETRY_AFTER_MS);
        case ANSWER_HEADERS_NO_RETRY:
                return snprintf(buf, size, "x-should-retry: false\r\n");
        case ANSWER_HEADERS_BEARER:
                return snprintf(buf, size, "WWW-Authenticate: Bearer\r\n");
        case ANSWER_HEADERS_UPGRADE:
                /* RFC 9110 §7.8: Connection names the Upgrade it comes with */
                return snprintf(buf, size, "Upgrade: HTTP/1.1\r\nConnection: Upgrade\r\n");
        default:
                return snprintf(buf, size, "%s", "");
        }
}

/* The answer to a lookup of the model in the body or (query) in the query that found none to route by;
 * _ANSWER_INVALID when it found one, or found none and absent_ok (the other place may name it) */
Answer model_lookup_answer(int k, bool query, bool absent_ok, bool any_body) {
        switch (k) {
        case MODEL_FOUND:
                return _ANSWER_INVALID;
        case MODEL_ABSENT:
                return absent_ok  ? _ANSWER_INVALID
                       : any_body ? ANSWER_MODEL_MISSING_IN_BODY
                                  : ANSWER_MODEL_MISSING;
        case MODEL_NOT_JSON:
                return ANSWER_INVALID_JSON;
        case MODEL_NOT_STRING:
                return ANSWER_MODEL_NOT_STRING;
        case MODEL_TWICE:
                return query ? ANSWER_MODEL_TWICE_IN_QUERY : ANSWER_MODEL_TWICE_IN_BODY;
        case MODEL_BAD_ESCAPE:
                return ANSWER_MODEL_BAD_ESCAPE;
        default:
                return ANSWER_OUT_OF_MEMORY; /* k < 0: the one failure is -ENOMEM */
        }
}
