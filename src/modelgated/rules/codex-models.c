/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <assert.h>
#include <errno.h>

#include "modelgated/rules/codex-models.h"
#include "modelgated/rules/json-util.h"

#define CODEX_JSON_FLAGS (JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE)

int codex_model_info_append(Buffer *out, const char *id, int64_t window) {
        _cleanup_(json_object_putp) json_object *o = json_object_new_object();
        json_object *truncation = json_object_new_object();
        const char *j;
        size_t n = 0;

        assert(out);
        assert(id);
        assert(window > 0);
        if (!o || !truncation) {
                json_object_put(truncation);
                return -ENOMEM;
        }
        json_object_object_add(o, "slug", json_object_new_string(id));
        json_object_object_add(o, "display_name", json_object_new_string(id));
        json_object_object_add(o, "context_window", json_object_new_int64(window));
        /* Codex takes a listed model's base instructions from here and never its own: modelgate has none
         * to give, so the agent sends none, and a user who wants some sets model_instructions_file in
         * Codex's config.toml */
        json_object_object_add(o, "base_instructions", json_object_new_string(""));
        json_object_object_add(o, "supported_reasoning_levels", json_object_new_array());
        json_object_object_add(o, "shell_type", json_object_new_string("default"));
        json_object_object_add(o, "visibility", json_object_new_string("list"));
        json_object_object_add(o, "supported_in_api", json_object_new_boolean(true));
        /* before the models Codex ships (1 and up): with no model given, it picks the first of these */
        json_object_object_add(o, "priority", json_object_new_int(0));
        json_object_object_add(o, "support_verbosity", json_object_new_boolean(false));
        json_object_object_add(truncation, "mode", json_object_new_string("bytes"));
        json_object_object_add(truncation, "limit", json_object_new_int(10000));
        json_object_object_add(o, "truncation_policy", truncation);
        json_object_object_add(o, "experimental_supported_tools", json_object_new_array());
        j = json_object_to_json_string_length(o, CODEX_JSON_FLAGS, &n);
        if (!j)
                return -ENOMEM;
        return buffer_append(out, j, n);
}
