/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* A line filter over a host's text/event-stream: every complete line is
 * passed on at once, unchanged, except the engine's beginning of an answer modelgate began (begun), and the
 * error events that rule:reword-context and rule:reword-anthropic say to reword (api_error_reword()), and on
 * the Responses API the OpenAI-shaped error llama.cpp sends there (a data line without an event line), which
 * becomes event response.failed (rule:error-event). Only a line not yet ended is held back, up to
 * SSE_LINE_MAX; a longer one is passed on raw. Pure. */

#include <stdbool.h>

#include "modelgated/api/api-error.h"
#include "modelgated/api/usage.h"
#include "shared/buffer.h"

#define SSE_LINE_MAX (1024 * 1024)
#define SSE_UPSTREAM_ERROR_MAX 256

typedef struct SseFilter {
        ApiKind api;
        Buffer line;
        bool in_error_event;
        bool event_named;       /* this event has an "event:" line */
        bool raw_until_newline; /* a line longer than SSE_LINE_MAX is being passed on raw */
        Usage *usage;           /* told every data line (rule:usage), or NULL */
        UsageEvent usage_event;
        bool saw_done; /* "data: [DONE]" (or, on the Responses API, its last event; on Anthropic's,
                        * message_stop) went by: the stream is complete */
        /* rule:keepalive-events: modelgate began this answer itself (early_answer_begin()), so the engine's
         * own beginning is spliced in: on Anthropic's API its message_start becomes a message_delta with
         * its usage (a second message_start is an error to the SDKs), on the Responses API its
         * response.created is left out. Once, for the first such event. */
        bool begun;
        bool in_begin_event; /* in the engine's beginning, which is being spliced */
        bool saw_data;       /* a data line of the engine's went by: it has begun to answer */
        /* rule:upstream-error: the first error the engine sent inside its 200 (an "error" event, or a data
         * line with an "error" member: llama.cpp's 500 in mid-stream), for the access line and /activity;
         * 0 and "": none. The message as the engine wrote it, cut at a character's end. */
        int upstream_error_status;
        char upstream_error[SSE_UPSTREAM_ERROR_MAX];
} SseFilter;

void sse_filter_init(SseFilter *f, ApiKind api);
void sse_filter_done(SseFilter *f);
/* Appends the output for these bytes to out. 0 or -ENOMEM. */
int sse_filter_feed(SseFilter *f, const char *p, size_t n, Buffer *out);
/* Flushes a last line without its line end. */
int sse_filter_finish(SseFilter *f, Buffer *out);

/* rule:upstream-error: the status and message of an error data line's JSON ({"error":{"code","message"}},
 * {"type":"error","error":{"type","message"}}, {"error":"text"}, and in an "error" event (in_event) also
 * llama.cpp's bare {"code","message","type"}): the status is the error's "code" when it is an HTTP status,
 * else 500. false: no error in it. Pure, for the filter and its tests. */
bool sse_upstream_error_of(const char *v, size_t vl, bool in_event, int *ret_status, char *message,
                           size_t size);

/* An error event in the API's shape, for a stream modelgate must end itself (rule:error-event,
 * rule:cut-stream). */
int sse_error_event(ApiKind api, int status, const char *code, const char *message, Buffer *out);
/* A host's whole error answer as one error event in the API's shape, reworded as rule:reword-context and
 * rule:reword-anthropic say: for an error that arrives after modelgate's early 200 (a client waited for its
 * engine). */
int sse_error_event_from_answer(ApiKind api, int status, const char *body, size_t n, Buffer *out);
