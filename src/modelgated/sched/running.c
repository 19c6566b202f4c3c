/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "modelgated/api/json-util.h"
#include "modelgated/sched/running.h"

static int add_string(json_object *o, const char *key, const char *value) {
        json_object *s = json_object_new_string(value ?: "");
        if (!s || json_object_object_add(o, key, s) < 0) {
                json_object_put(s);
                return -ENOMEM;
        }
        return 0;
}

static int running_entry(const RunningModel *r, json_object **ret) {
        _cleanup_(json_object_putp) json_object *o = json_object_new_object();
        _cleanup_free_ char *model = NULL;

        if (!o || asprintf(&model, "%s-%s", r->host, r->key) < 0)
                return -ENOMEM;
        /* llama-swap's two keys first, as clients written for it look them up; then modelgate's */
        if (add_string(o, "model", model) < 0 || add_string(o, "state", r->state) < 0 ||
            add_string(o, "proxy", r->url) < 0 || add_string(o, "host", r->host) < 0 ||
            add_string(o, "engine", r->engine) < 0 || add_string(o, "unit", r->unit) < 0)
                return -ENOMEM;
        *ret = TAKE_PTR(o);
        return 0;
}

int running_render(const RunningModel *models, size_t n, char **ret, size_t *ret_size) {
        _cleanup_(json_object_putp) json_object *root = json_object_new_object();
        json_object *list = json_object_new_array();

        assert(models || n == 0);
        assert(ret);
        if (!root || !list || json_object_object_add(root, "running", list) < 0) {
                json_object_put(list);
                return -ENOMEM;
        }
        for (size_t i = 0; i < n; i++) {
                json_object *e = NULL;
                if (running_entry(&models[i], &e) < 0 || json_object_array_add(list, e) < 0) {
                        json_object_put(e);
                        return -ENOMEM;
                }
        }
        *ret = json_to_string_dup(root, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, ret_size);
        return *ret ? 0 : -ENOMEM;
}
