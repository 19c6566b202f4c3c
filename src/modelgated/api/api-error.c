/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "modelgated/api/api-error.h"
#include "modelgated/api/json-util.h"

#define API_ERROR_JSON_FLAGS (JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE)

const char *http_status_reason(int status) {
        switch (status) {
        case 100:
                return "Continue";
        case 200:
                return "OK";
        case 201:
                return "Created";
        case 202:
                return "Accepted";
        case 204:
                return "No Content";
        case 206:
                return "Partial Content";
        case 301:
                return "Moved Permanently";
        case 302:
                return "Found";
        case 304:
                return "Not Modified";
        case 400:
                return "Bad Request";
        case 401:
                return "Unauthorized";
        case 403:
                return "Forbidden";
        case 404:
                return "Not Found";
        case 405:
                return "Method Not Allowed";
        case 408:
                return "Request Timeout";
        case 409:
                return "Conflict";
        case 411:
                return "Length Required";
        case 413:
                return "Content Too Large";
        case 417:
                return "Expectation Failed";
        case 422:
                return "Unprocessable Content";
        case 423:
                return "Locked";
        case 426:
                return "Upgrade Required";
        case 429:
                return "Too Many Requests";
        case 431:
                return "Request Header Fields Too Large";
        case 500:
                return "Internal Server Error";
        case 501:
                return "Not Implemented";
        case 502:
                return "Bad Gateway";
        case 503:
                return "Service Unavailable";
        case 504:
                return "Gateway Timeout";
        default:
                return "Unknown";
        }
}

static const char *anthropic_type_for_status(int status) {
        switch (status) {
        case 401:
                return "authentication_error";
        case 403:
                return "permission_error";
        case 404:
                return "not_found_error";
        case 413:
                return "request_too_large";
        case 429:
                return "rate_limit_error";
        case 504:
                return "timeout_error";
        default:
                return status >= 500 ? "api_error" : "invalid_request_error";
        }
}

static const char *openai_type_for_status(int status) {
        switch (status) {
        case 401:
                return "authentication_error";
        case 403:
                return "permission_error";
        case 404:
                return "not_found_error";
        default:
                return status >= 500 ? "server_error" : "invalid_request_error";
        }
}

char *api_error_json(ApiKind api, int status, const char *code, const char *message, size_t *ret_size) {
        _cleanup_(json_object_putp) json_object *o = json_object_new_object(), *e = json_object_new_object();

        if (!o || !e)
                return NULL;
        json_object_object_add(e, "message", json_object_new_string(message));
        if (api == API_ANTHROPIC) {
                json_object_object_add(o, "type", json_object_new_string("error"));
                json_object_object_add(e, "type", json_object_new_string(anthropic_type_for_status(status)));
        } else {
                json_object_object_add(e, "type", json_object_new_string(openai_type_for_status(status)));
                json_object_object_add(e, "code", code ? json_object_new_string(code) : NULL);
        }
        json_object_object_add(o, "error", TAKE_PTR(e));
        return json_to_string_dup(o, API_ERROR_JSON_FLAGS, ret_size);
}

static const char *anthropic_type_for_llama(const char *t, int64_t code) {
        if (!t)
                return anthropic_type_for_status((int)code);
        if (streq(t, "invalid_request_error") || streq(t, "exceed_context_size_error") ||
            streq(t, "not_supported_error"))
                return "invalid_request_error";
        if (streq(t, "authentication_error") || streq(t, "permission_error") || streq(t, "not_found_error"))
                return t;
        return "api_error";
}

int api_error_reword(ApiKind api, const char *body, size_t n, char **ret, size_t *ret_size) {
        _cleanup_(json_object_putp) json_object *root = NULL, *out = NULL;
        json_object *e = NULL, *w;
        const char *type, *message;
        int64_t code = 0;
        char buf[256];

        if (json_parse(/* tok= */ NULL, body, n, &root) < 0 || !json_object_is_type(root, json_type_object))
                return 0;

        if (json_object_object_get_ex(root, "error", &w) && json_object_is_type(w, json_type_object)) {
                const char *t = json_get_string(root, "type");
                if (t && streq(t, "error"))
                        return 0; /* Anthropic's shape already */
                e = w;
        } else if (json_get_string(root, "message") &&
                   (json_get_string(root, "type") || json_get_int(root, "code", &code)))
                e = root; /* llama.cpp's bare error in an Anthropic stream */
        else
                return 0;

        type = json_get_string(e, "type");
        message = json_get_string(e, "message") ?: "error";
        (void)json_get_int(e, "code", &code);

        if (type && streq(type, "exceed_context_size_error")) {
                int64_t np = 0, nc = 0;
                (void)json_get_int(e, "n_prompt_tokens", &np);
                (void)json_get_int(e, "n_ctx", &nc);
                snprintf(buf, sizeof(buf), "prompt is too long: %lld tokens > %lld maximum", (long long)np,
                         (long long)nc);
                if (api == API_ANTHROPIC) {
                        *ret = api_error_json(API_ANTHROPIC, 400, NULL, buf, ret_size);
                        return *ret ? 1 : 0;
                }
                out = json_object_new_object();
                json_object *oe = json_object_new_object();
                if (!out || !oe) {
                        json_object_put(oe);
                        return 0;
                }
                json_object_object_add(oe, "message", json_object_new_string(buf));
                json_object_object_add(oe, "type", json_object_new_string("invalid_request_error"));
                json_object_object_add(oe, "param",
                                       json_object_new_string(api == API_RESPONSES ? "input" : "messages"));
                json_object_object_add(oe, "code", json_object_new_string("context_length_exceeded"));
                json_object_object_add(oe, "n_prompt_tokens", json_object_new_int64(np));
                json_object_object_add(oe, "n_ctx", json_object_new_int64(nc));
                json_object_object_add(out, "error", oe);
                *ret = json_to_string_dup(out, API_ERROR_JSON_FLAGS, ret_size);
                return *ret ? 1 : 0;
        }

        if (api != API_ANTHROPIC)
                return 0;

        out = json_object_new_object();
        json_object *oe = json_object_new_object();
        if (!out || !oe) {
                json_object_put(oe);
                return 0;
        }
        json_object_object_add(out, "type", json_object_new_string("error"));
        json_object_object_add(oe, "type", json_object_new_string(anthropic_type_for_llama(type, code)));
        json_object_object_add(oe, "message", json_object_new_string(message));
        json_object_object_add(out, "error", oe);
        *ret = json_to_string_dup(out, API_ERROR_JSON_FLAGS, ret_size);
        return *ret ? 1 : 0;
}

char *api_response_failed_json(int status, const char *code, const char *message, size_t *ret_size) {
        _cleanup_(json_object_putp) json_object *o = json_object_new_object();
        json_object *r = json_object_new_object(), *e = json_object_new_object();

        if (!o || !r || !e) {
                json_object_put(r);
                json_object_put(e);
                return NULL;
        }
        /* Codex reads response.error.code (context_length_exceeded: its context-window message) and
         * .message; the SDKs read the event's type */
        json_object_object_add(e, "code", json_object_new_string(code ?: openai_type_for_status(status)));
        json_object_object_add(e, "message", json_object_new_string(message));
        json_object_object_add(r, "object", json_object_new_string("response"));
        json_object_object_add(r, "status", json_object_new_string("failed"));
        json_object_object_add(r, "error", e);
        json_object_object_add(o, "type", json_object_new_string("response.failed"));
        json_object_object_add(o, "response", r);
        return json_to_string_dup(o, API_ERROR_JSON_FLAGS, ret_size);
}

int api_response_failed_from(int status, const char *body, size_t n, char **ret, size_t *ret_size) {
        _cleanup_(json_object_putp) json_object *root = NULL;
        _cleanup_free_ char *reworded = NULL;
        json_object *e;
        size_t rl = 0;
        int64_t num;

        if (api_error_reword(API_RESPONSES, body, n, &reworded, &rl) > 0) {
                body = reworded;
                n = rl;
        }
        if (json_parse(/* tok= */ NULL, body, n, &root) < 0 ||
            !json_object_is_type(root, json_type_object) || !json_object_object_get_ex(root, "error", &e) ||
            !json_object_is_type(e, json_type_object))
                return 0;
        /* llama.cpp's "code" is the HTTP status, a number; its "type" names the error */
        const char *code = json_get_string(e, "code") ?: json_get_string(e, "type");
        if (!code && json_get_int(e, "code", &num) && num >= 400 && num < 600)
                status = (int)num;
        *ret = api_response_failed_json(status, code, json_get_string(e, "message") ?: "error", ret_size);
        return *ret ? 1 : -ENOMEM;
}
