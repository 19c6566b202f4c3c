/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What a host's /models/sse says, read without a Catalog: the relabelling
 * of each event for modelgate's own feed, and the status events that change
 * a model list. Kept apart from the Catalog's timers and connections because
 * these are pure functions over JSON text, unit-tested and fuzzed on their
 * own (test-catalog, fuzz-models). */

#include <json-c/json.h>
#include <stdio.h>
#include <string.h>

#include "modelgated/catalog/catalog-event.h"
#include "modelgated/api/json-util.h"
#include "shared/strv.h"

void catalog_status_done(CatalogStatus *s) {
        s->key = mfree(s->key);
        s->status = mfree(s->status);
        json_object_put(s->info);
        s->info = NULL;
}

/* A JSON object of a feed event (n bytes, not NUL-terminated), with tok (reset first), or a tokener of
 * its own when NULL */
static int parse_object(json_tokener *tok, const char *json, size_t n, json_object **ret) {
        json_object *o;
        int r;

        r = json_parse(tok, json, n, &o);
        if (r < 0)
                return r;
        if (!json_object_is_type(o, json_type_object)) {
                json_object_put(o);
                return -EBADMSG;
        }
        *ret = o;
        return 0;
}

/* What event o says about one model's status: 0, -ENOMSG (no status) or -ENOMEM */
static int status_of(json_object *o, CatalogStatus *ret) {
        json_object *model, *event, *data, *status, *x, *v;

        *ret = (CatalogStatus){.percent = -1};
        *ret = (CatalogStatus){.percent = -1};
        /* llama.cpp sends "model_status" for the first loading event and "status_change" for every later
         * one; its README calls them all model_status */
        if (!json_object_object_get_ex(o, "event", &event) ||
            !json_object_is_type(event, json_type_string) ||
            !STR_IN_SET(json_object_get_string(event), "model_status", "status_change") ||
            !json_object_object_get_ex(o, "model", &model) ||
            !json_object_is_type(model, json_type_string) || !json_object_object_get_ex(o, "data", &data) ||
            !json_object_is_type(data, json_type_object) ||
            !json_object_object_get_ex(data, "status", &status) ||
            !json_object_is_type(status, json_type_string))
                return -ENOMSG;
        ret->key = strdup(json_object_get_string(model));
        ret->status = strdup(json_object_get_string(status));
        if (!ret->key || !ret->status) {
                catalog_status_done(ret);
                return -ENOMEM;
        }
        if (json_object_object_get_ex(data, "exit_code", &x) && json_object_is_type(x, json_type_int))
                ret->exit_code = json_object_get_int(x);
        /* {"stage","value"} in early builds, {"stages","current","value"} later: the value is what counts */
        if (json_object_object_get_ex(data, "progress", &x) && json_object_is_type(x, json_type_object) &&
            json_object_object_get_ex(x, "value", &v) &&
            (json_object_is_type(v, json_type_double) || json_object_is_type(v, json_type_int))) {
                double d = json_object_get_double(v);
                ret->percent = !(d > 0) ? 0 : d >= 1 ? 100 : (int)(d * 100); /* NaN too */
        }
        if (json_object_object_get_ex(data, "info", &x) && json_object_is_type(x, json_type_object))
                ret->info = json_object_get(x);
        return 0;
}

int catalog_status_apply_entry(json_object *e, const CatalogStatus *s) {
        json_object *st, *v;
        bool failed = streq(s->status, "unloaded") && s->exit_code != 0;

        if (!json_object_is_type(e, json_type_object))
                return 0;
        if (!json_object_object_get_ex(e, "status", &st) || !json_object_is_type(st, json_type_object)) {
                st = json_object_new_object();
                if (!st)
                        return -ENOMEM;
                json_object_object_add(e, "status", st);
        }
        const char *old =
                json_object_object_get_ex(st, "value", &v) && json_object_is_type(v, json_type_string)
                        ? json_object_get_string(v)
                        : "";
        if (s->only_unloaded && !streq(old, "unloaded"))
                return 0;
        if (streq(old, s->status) && !failed && !json_object_object_get_ex(st, "failed", NULL) && !s->info)
                return 0;
        json_object_object_add(st, "value", json_object_new_string(s->status));
        /* llama.cpp lists a failed load as unloaded with "exit_code" and "failed":true */
        json_object_object_del(st, "exit_code");
        json_object_object_del(st, "failed");
        if (failed) {
                json_object_object_add(st, "exit_code", json_object_new_int(s->exit_code));
                json_object_object_add(st, "failed", json_object_new_boolean(true));
        }
        if (s->info) {
                json_object_object_foreach(s->info, k, val) {
                        if (!json_object_object_get_ex(e, k, NULL))
                                json_object_object_add(e, k, json_object_get(val));
                }
        }
        /* what a running model's process told about itself goes with it */
        if (streq(s->status, "unloaded"))
                json_object_object_del(e, "meta");
        return 1;
}

int catalog_status_apply(json_object *models, const CatalogStatus *s) {
        json_object *list;

        if (!json_object_object_get_ex(models, "data", &list) || !json_object_is_type(list, json_type_array))
                return -EBADMSG;
        for (size_t i = 0; i < json_object_array_length(list); i++) {
                json_object *e = json_object_array_get_idx(list, i), *id;

                if (!json_object_is_type(e, json_type_object) || !json_object_object_get_ex(e, "id", &id) ||
                    !json_object_is_type(id, json_type_string) || !streq(json_object_get_string(id), s->key))
                        continue;
                return catalog_status_apply_entry(e, s);
        }
        return 0;
}

/* Event o relabelled (o is changed), appended to out; *ret_model (optional) the client-visible name it is
 * about, NULL for the whole host */
static int relabel(const char *host, json_object *o, Buffer *out, bool *ret_changes, char **ret_model) {
        json_object *model, *event, *proxy;
        const char *key;
        _cleanup_free_ char *label = NULL;

        key = json_object_object_get_ex(o, "model", &model) && json_object_is_type(model, json_type_string)
                      ? json_object_get_string(model)
                      : "";
        /* llama.cpp's "*" (models_reload) or no model at all: about the whole host */
        bool whole_host = STR_IN_SET(key, "", "*");
        if (asprintf(&label, "%s-%s", host, *key ? key : "*") < 0)
                return -ENOMEM;
        proxy = json_object_new_object();
        json_object_object_add(proxy, "host", json_object_new_string(host));
        json_object_object_add(proxy, "key", json_object_new_string(*key ? key : "*"));
        json_object_object_add(o, "model", json_object_new_string(label));
        json_object_object_add(o, "proxy", proxy);
        if (ret_changes)
                *ret_changes = !(json_object_object_get_ex(o, "event", &event) &&
                                 json_object_is_type(event, json_type_string) &&
                                 streq(json_object_get_string(event), "download_progress"));
        if (buffer_append_str(out, "data: ") < 0 ||
            buffer_append_str(out, json_object_to_json_string_ext(
                                           o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE)) <
                    0 ||
            buffer_append_str(out, "\n\n") < 0)
                return -ENOMEM;
        if (ret_model)
                *ret_model = whole_host ? NULL : TAKE_PTR(label);
        return 0;
}

int catalog_event_read(json_tokener *tok, const char *host, const char *json, size_t n, Buffer *out,
                       bool *ret_changes, char **ret_model, CatalogStatus *ret_status) {
        json_object *o;
        int r;

        r = parse_object(tok, json, n, &o);
        if (r < 0)
                return r;
        /* the status first: relabelling changes "model" */
        r = status_of(o, ret_status);
        if (r != -ENOMEM)
                r = relabel(host, o, out, ret_changes, ret_model);
        json_object_put(o);
        if (r < 0)
                catalog_status_done(ret_status);
        return r;
}
