/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <assert.h>
#include <json-c/json.h>
#include <string.h>

#include "modelgated/api/early-answer.h"
#include "modelgated/api/json-util.h"

EarlyAnswer early_answer_of(const PathRoute *route) {
        switch (path_route_api(route)) {
        case API_ANTHROPIC:
                return EARLY_MESSAGE;
        case API_RESPONSES:
                return EARLY_RESPONSE;
        default:
                /* the chat completions' paths, as /activity names them too */
                return streq(path_route_activity(route), "chat") ? EARLY_CHAT_CHUNK : EARLY_COMMENT;
        }
}

/* The answer's id: the prefix and the request id's token characters (a client's X-Request-Id may hold
 * anything a header may; an id goes into JSON and clients' logs) */
static int append_id(Buffer *out, const char *prefix, Span request_id) {
        if (buffer_append_str(out, prefix) < 0)
                return -ENOMEM;
        for (size_t i = 0; i < request_id.n && i < 64; i++) {
                char ch = request_id.p[i];
                bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                          ch == '-' || ch == '_';
                if (buffer_append(out, ok ? &ch : "_", 1) < 0)
                        return -ENOMEM;
        }
        return 0;
}

/* model as a JSON string, quotes included */
static int append_json_string(Buffer *out, const char *s) {
        _cleanup_(json_object_putp) json_object *o = json_object_new_string(s ?: "");
        if (!o)
                return -ENOMEM;
        const char *j =
                json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
        return j && buffer_append_str(out, j) >= 0 ? 0 : -ENOMEM;
}

int early_answer_begin(EarlyAnswer k, const char *model, Span request_id, uint64_t created_unix,
                       Buffer *out) {
        assert(out);

        switch (k) {
        case EARLY_MESSAGE:
                /* the shape llama.cpp and Anthropic send; usage is the engine's, spliced in later */
                if (buffer_append_str(out,
                                      "event: message_start\ndata: {\"type\":\"message_start\",\"message\":"
                                      "{\"id\":") < 0 ||
                    append_id(out, "\"msg_", request_id) < 0 ||
                    buffer_append_str(out, "\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],"
                                           "\"model\":") < 0 ||
                    append_json_string(out, model) < 0 ||
                    buffer_append_str(out, ",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":"
                                           "{\"input_tokens\":0,\"output_tokens\":0}}}\n\n") < 0)
                        return -ENOMEM;
                return 0;
        case EARLY_RESPONSE:
                /* "output": [] — the OpenAI SDK's responses.stream() pushes the output items onto it */
                if (buffer_append_str(out, "event: response.created\ndata: {\"type\":\"response.created\","
                                           "\"response\":{\"id\":") < 0 ||
                    append_id(out, "\"resp_", request_id) < 0 ||
                    buffer_append_str(out, "\",\"object\":\"response\",\"created_at\":") < 0 ||
                    buffer_append_u64(out, created_unix) < 0 ||
                    buffer_append_str(out, ",\"status\":\"in_progress\",\"model\":") < 0 ||
                    append_json_string(out, model) < 0 || buffer_append_str(out, ",\"output\":[]}}\n\n") < 0)
                        return -ENOMEM;
                return 0;
        default:
                return 0;
        }
}

int early_answer_keepalive(EarlyAnswer k, bool begun, const char *model, Span request_id,
                           uint64_t created_unix, const char *words, Buffer *out) {
        assert(out);

        if (words) {
                /* one comment line: the words never hold a line break (they are modelgate's own, and the
                 * names in them are checked when configured) */
                if (buffer_append_str(out, ": ") < 0)
                        return -ENOMEM;
                for (const char *q = words; *q; q++)
                        if (buffer_append(out, *q == '\n' || *q == '\r' ? " " : q, 1) < 0)
                                return -ENOMEM;
                if (buffer_append_str(out, "\n") < 0)
                        return -ENOMEM;
        }
        if (k == EARLY_CHAT_CHUNK) {
                /* the shape of OpenAI's own usage chunk: the SDK's helper merges its id and model away
                 * when the engine's chunks come */
                if (append_id(out, "data: {\"id\":\"chatcmpl-", request_id) < 0 ||
                    buffer_append_str(out, "\",\"object\":\"chat.completion.chunk\",\"created\":") < 0 ||
                    buffer_append_u64(out, created_unix) < 0 || buffer_append_str(out, ",\"model\":") < 0 ||
                    append_json_string(out, model) < 0 || buffer_append_str(out, ",\"choices\":[]}\n") < 0)
                        return -ENOMEM;
        } else if (begun && k == EARLY_MESSAGE) {
                if (buffer_append_str(out,
                                      "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":"
                                      "{\"stop_reason\":null,\"stop_sequence\":null},\"usage\":"
                                      "{\"output_tokens\":0}}\n") < 0)
                        return -ENOMEM;
        } else if (begun && k == EARLY_RESPONSE) {
                if (buffer_append_str(
                            out, "event: response.in_progress\ndata: {\"type\":\"response.in_progress\","
                                 "\"response\":{\"id\":") < 0 ||
                    append_id(out, "\"resp_", request_id) < 0 ||
                    buffer_append_str(out, "\",\"object\":\"response\",\"status\":\"in_progress\"}}\n") < 0)
                        return -ENOMEM;
        }
        return buffer_append_str(out, "\n") < 0 ? -ENOMEM : 0;
}
