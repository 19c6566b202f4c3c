/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A host's /models answer through the merge, and a host's event through the relabelling: any bytes
 * are either refused or give JSON whose every id names the host. The same bytes as a status event applied
 * to a list, and as a list a status event is applied to: refused, or applied without harm. */
#include <assert.h>
#include <json-c/json.h>
#include <stdint.h>
#include <string.h>

#include "modelgated/catalog-event.h"
#include "modelgated/models.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static Config c;
        static HostConf host = {.name = (char *)"a9"};
        static char *globs[] = {(char *)"q*", NULL};
        static EngineConf engine = {.host = (char *)"a9", .name = (char *)"fork", .models = globs};
        _cleanup_(buffer_done) Buffer out = {};
        json_object *list = json_object_new_array();
        bool changes;

        if (!c.hosts) {
                c.hosts = &host;
                c.n_hosts = 1;
                c.engines = &engine;
                c.n_engines = 1;
        }
        if (models_merge_host(&c, &host, size & 1 ? "fork" : NULL, (const char *)data, size, list) == 0)
                for (size_t i = 0; i < json_object_array_length(list); i++) {
                        json_object *id;
                        assert(json_object_object_get_ex(json_object_array_get_idx(list, i), "id", &id));
                        assert(strncmp(json_object_get_string(id), "a9-", 3) == 0);
                }
        json_object_put(list);

        _cleanup_free_ char *about = NULL;
        if (catalog_relabel_event("a9", (const char *)data, size, &out, &changes, &about) == 0 &&
            buffer_size(&out) > 0) {
                /* what a tier's filter reads: a name of this host, or nothing (the whole host) */
                assert(!about || strncmp(about, "a9-", 3) == 0);
                /* the output is one SSE event: "data: {...}\n\n" (not NUL-terminated) */
                json_tokener *tok = json_tokener_new();
                const char *p = memmem(buffer_peek(&out), buffer_size(&out), "{", 1);
                if (tok && p) {
                        json_object *o = json_tokener_parse_ex(
                                tok, p, (int)(buffer_size(&out) - (size_t)(p - buffer_peek(&out))));
                        if (o)
                                json_object_put(o);
                }
                if (tok)
                        json_tokener_free(tok);
        }

        CatalogStatus st;
        if (catalog_status_parse((const char *)data, size, &st) == 0) {
                json_object *l = json_tokener_parse(
                        "{\"data\":[{\"id\":\"m\",\"status\":{\"value\":\"unloaded\"}},{\"id\":\"q\"}]}");
                assert(st.key && st.status && st.percent >= -1 && st.percent <= 100);
                assert(catalog_status_apply(l, &st) >= 0);
                json_object_put(l);
                catalog_status_done(&st);
        }
        json_tokener *tok = json_tokener_new();
        json_object *l = tok ? json_tokener_parse_ex(tok, (const char *)data, (int)size) : NULL;
        if (l) {
                CatalogStatus s = {
                        .key = (char *)"m", .status = (char *)"unloaded", .exit_code = 1, .percent = -1};
                (void)catalog_status_apply(l, &s);
                json_object_put(l);
        }
        if (tok)
                json_tokener_free(tok);
        return 0;
}
