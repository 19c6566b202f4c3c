/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* rule:codex-models: the model list as Codex asks a provider for it (GET /v1/models?client_version=…),
 * {"models":[ModelInfo…]}, each model with its context window. Codex decodes the whole list or nothing: a
 * ModelInfo must carry every field it requires (found against 0.171.0: slug, display_name,
 * base_instructions, supported_reasoning_levels, shell_type, visibility, supported_in_api, priority,
 * support_verbosity, truncation_policy, experimental_supported_tools), with the values Codex gives a
 * model it knows nothing of, but for the window and what puts modelgate's models first in its picker
 * (visibility, priority). Pure. */

#include <stdint.h>

#include "shared/buffer.h"

/* Appends the ModelInfo of model id with its context window (> 0) to out. 0 or -ENOMEM. */
int codex_model_info_append(Buffer *out, const char *id, int64_t window);
