/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* rule:keepalive-events: what a waiting stream is sent after modelgate's early 200, per API, so that every
 * client's idle timer counts it (docs/clients-waiting.md has what each client counts, found by running
 * it). Coding agents time a stream out on the events their SSE parser hands on, not on `:` comments:
 *   - Anthropic (/v1/messages): the answer is begun with message_start, then a message_delta that
 *     changes nothing (stop_reason null, output_tokens 0) each interval; Claude Code counts nothing less,
 *     and the Anthropic SDK takes both without a trace in the final message.
 *   - Responses (/v1/responses): the answer is begun with response.created, then response.in_progress
 *     each interval; Codex counts any parsed event, and the OpenAI SDK's responses.stream() throws on
 *     any event before response.created.
 *   - OpenAI chat and completions: `:` comments, which every client there takes.
 * Each keepalive also carries, as a comment line beside the event, the words that say what the request
 * waits for (rule:wait-reason). The engine's own beginning is then spliced in by the SSE filter
 * (SseFilter.begun). Pure. */

#include <stdbool.h>

#include "modelgated/rules/api-error.h"
#include "shared/buffer.h"
#include "shared/macro.h"

/* Whether api's answer is begun by modelgate itself when it sends its early 200 */
bool early_answer_begins(ApiKind api);

/* The beginning of the answer for api, for the model the client named and its request id (the answer's
 * id is "msg_"/"resp_" and the request id's token characters), appended to out. 0 (nothing for an API
 * whose answer is not begun), or -ENOMEM. */
int early_answer_begin(ApiKind api, const char *model, Span request_id, uint64_t created_unix, Buffer *out);

/* One keepalive: the comment with words (may be NULL) and, where the answer was begun, the API's harmless
 * event. 0 or -ENOMEM. */
int early_answer_keepalive(ApiKind api, bool begun, Span request_id, const char *words, Buffer *out);
