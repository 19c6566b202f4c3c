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
 *   - OpenAI chat completions: a chunk with no choices each interval, which Qwen Code counts (it does not
 *     count comments) and every other client takes (the OpenAI SDK's stream helper merges it away).
 *   - everything else (completions, llama.cpp's own paths): `:` comments.
 * Each keepalive also carries, as a comment line beside the event, the words that say what the request
 * waits for (rule:wait-reason). The engine's own beginning is then spliced in by the SSE filter
 * (SseFilter.begun). Pure. */

#include <stdbool.h>
#include <stdint.h>

#include "modelgated/api/api-error.h"
#include "modelgated/api/path-table.h"
#include "shared/buffer.h"
#include "shared/macro.h"

typedef enum EarlyAnswer {
        EARLY_COMMENT,    /* comments only */
        EARLY_CHAT_CHUNK, /* a chat.completion.chunk with "choices": [] beside each comment */
        EARLY_MESSAGE,    /* Anthropic's message begun, then message_delta */
        EARLY_RESPONSE,   /* the Responses API's response begun, then response.in_progress */
} EarlyAnswer;

/* What a waiting stream on the path of route (path-table.h) gets */
EarlyAnswer early_answer_of(const PathRoute *route);

/* Whether the answer is begun by modelgate itself when it sends its early 200 */
static inline bool early_answer_begins(EarlyAnswer k) {
        return k == EARLY_MESSAGE || k == EARLY_RESPONSE;
}

/* The beginning of the answer, for the model the client named and its request id (the answer's id is
 * "msg_"/"resp_"/"chatcmpl-" and the request id's token characters), appended to out. 0 (nothing for an
 * answer that is not begun), or -ENOMEM. */
int early_answer_begin(EarlyAnswer k, const char *model, Span request_id, uint64_t created_unix,
                       Buffer *out);

/* One keepalive: the comment with words (may be NULL) and the event beside it (where the answer was begun,
 * an event of it). 0 or -ENOMEM. */
int early_answer_keepalive(EarlyAnswer k, bool begun, const char *model, Span request_id,
                           uint64_t created_unix, const char *words, Buffer *out);
