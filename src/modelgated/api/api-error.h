/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* rule:error-shape: errors in the client's API shape, and the two host errors that
 * modelgate rewords so that coding agents recover by themselves. Pure. */

#include <stdbool.h>
#include <stddef.h>

#include "shared/macro.h"

typedef enum ApiKind {
        API_OPENAI,
        API_ANTHROPIC,
        API_RESPONSES, /* OpenAI's Responses API: OpenAI's error bodies, its own stream events */
        _API_KIND_MAX,
} ApiKind;

const char *http_status_reason(int status);

/* {"error":{"message","type","code"}} (OpenAI, Responses) or {"type":"error","error":{"type","message"}};
 * malloc'ed */
char *api_error_json(ApiKind api, int status, const char *code, const char *message, size_t *ret_size);

/* The Responses API's error in a stream (rule:error-event):
 * {"type":"response.failed","response":{"object":"response","status":"failed","error":{"code","message"}}};
 * code NULL: the status's type. malloc'ed */
char *api_response_failed_json(int status, const char *code, const char *message, size_t *ret_size);

/* An OpenAI-shaped error body ({"error":{...}}, as llama.cpp sends it on every route, reworded as
 * api_error_reword() says) as a response.failed body. Returns 1 with *ret set, 0 when the body is no
 * such error, or -ENOMEM. */
int api_response_failed_from(int status, const char *body, size_t n, char **ret, size_t *ret_size);

/* A host's error body, reworded where rule:reword-context and rule:reword-anthropic say so: llama.cpp's
 * exceed_context_size_error becomes "prompt is too long: N tokens > M maximum" (every API), and on the
 * Anthropic API a llama.cpp error (bare {code,message,type}, or OpenAI-wrapped) is wrapped in Anthropic's
 * shape. Returns 1 with *ret set, or 0 when the body stays as it is. */
int api_error_reword(ApiKind api, const char *body, size_t n, char **ret, size_t *ret_size);
