/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* rule:attribution-line: Claude Code starts every request's system prompt with a text block
 *   {"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.197.0df; cc_entrypoint=sdk-cli;"}
 * whose last characters differ between conversations. llama.cpp reuses the longest common prefix of a
 * prompt from its cache, and this is the prompt's first line: a new session or a subagent can never reuse
 * the system prompt and tools the engine already holds. The block is cut out of a request for a host —
 * only that block, only in that shape, as the first element of the top-level "system" array — and the
 * fallback (a cloud API, which reads it) gets the request as the client sent it. Pure. */

#include <stddef.h>

#include "shared/macro.h"

/* The bytes to cut out of a JSON body: the block and the comma after it (or before it, when it is the
 * array's only element, none); an empty span (p NULL) when the body has no such block. */
Span attribution_block(const char *body, size_t n);
