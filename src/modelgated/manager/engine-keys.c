/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The learned-keys file: see engine-keys.h. It sits above the Host because
 * it is about every host at once; a Catalog only keeps its own host's keys
 * in memory and says when they change. */

#include <json-c/json.h>
#include <string.h>

#include "modelgated/catalog/catalog.h"
#include "modelgated/manager/engine-keys.h"
#include "modelgated/host/host.h"
#include "shared/log.h"
#include "shared/state-file.h"
#include "shared/strv.h"

#define ENGINE_KEYS_FILE "engine-keys.json"

void engine_keys_save(Host *const *hosts, size_t n_hosts) {
        _cleanup_free_ char *path = state_file_path(ENGINE_KEYS_FILE);
        json_object *root = json_object_new_object();

        if (!path || !root)
                goto out;
        for (size_t i = 0; i < n_hosts; i++) {
                Host *h = hosts[i];
                Catalog *c = host_catalog(h);
                json_object *ho = json_object_new_object();
                for (size_t e = 0; c && e < host_n_engines(h); e++) {
                        json_object *l = json_object_new_array();
                        STRV_FOREACH (k, catalog_engine_keys(c, e))
                                json_object_array_add(l, json_object_new_string(*k));
                        json_object_object_add(ho, host_engine(h, e)->conf->name, l);
                }
                json_object_object_add(root, host_conf(h)->name, ho);
        }
        const char *text = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY |
                                                                        JSON_C_TO_STRING_NOSLASHESCAPE);
        int r = state_file_write(path, text, strlen(text));
        if (r < 0)
                log_warning_errno(r, "Cannot write %s, learned engine keys will not survive a restart: %m",
                                  path);
out:
        json_object_put(root);
}

/* The keys of one engine's list in the file. */
static char **keys_of(json_object *l) {
        char **keys = NULL;

        for (size_t k = 0; k < json_object_array_length(l); k++) {
                json_object *s = json_object_array_get_idx(l, k);
                if (json_object_is_type(s, json_type_string))
                        (void)strv_extend(&keys, json_object_get_string(s));
        }
        return keys;
}

void engine_keys_load(Host *h) {
        _cleanup_free_ char *path = state_file_path(ENGINE_KEYS_FILE);
        json_object *root, *ho;

        if (!path || access(path, F_OK) < 0)
                return;
        root = json_object_from_file(path);
        if (!root || !json_object_is_type(root, json_type_object)) {
                log_warning("%s is not a JSON object, ignoring it (learned engine keys start empty)", path);
                json_object_put(root);
                return;
        }
        if (json_object_object_get_ex(root, host_conf(h)->name, &ho) &&
            json_object_is_type(ho, json_type_object))
                for (size_t e = 0; e < host_n_engines(h); e++) {
                        json_object *l;
                        if (!json_object_object_get_ex(ho, host_engine(h, e)->conf->name, &l) ||
                            !json_object_is_type(l, json_type_array))
                                continue;
                        catalog_set_engine_keys(host_catalog(h), e, keys_of(l));
                }
        json_object_put(root);
}
