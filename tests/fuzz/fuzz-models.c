/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A host's /models answer through the merge, and a host's event through the relabelling: any bytes
 * are either refused or give JSON whose every id names the host. The same bytes as a status event applied
 * to a list, and as a list a status event is applied to: refused, or applied without harm. The same bytes
 * read as a list as it arrives, split anywhere: the same list, or the same refusal, as read whole. */
#include <assert.h>
#include <json-c/json.h>
#include <stdint.h>
#include <string.h>

#include "modelgated/catalog/catalog-event.h"
#include "modelgated/catalog/catalog-list.h"
#include "modelgated/client/models.h"

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
        CatalogStatus st;
        if (catalog_event_read(NULL, "a9", (const char *)data, size, &out, &changes, &about, &st) == 0) {
                /* what a tier's filter reads: a name of this host, or nothing (the whole host) */
                assert(!about || strncmp(about, "a9-", 3) == 0);
                /* the output is one SSE event: "data: {...}\n\n" (not NUL-terminated) */
                json_tokener *tok = json_tokener_new();
                const char *p = memmem(buffer_peek(&out), buffer_size(&out), "{", 1);
                assert(buffer_size(&out) > 0);
                if (tok && p) {
                        json_object *o = json_tokener_parse_ex(
                                tok, p, (int)(buffer_size(&out) - (size_t)(p - buffer_peek(&out))));
                        if (o)
                                json_object_put(o);
                }
                if (tok)
                        json_tokener_free(tok);
                if (st.key) {
                        json_object *l = json_tokener_parse("{\"data\":[{\"id\":\"m\",\"status\":{\"value\":"
                                                            "\"unloaded\"}},{\"id\":\"q\"}]}");
                        assert(st.status && st.percent >= -1 && st.percent <= 100);
                        assert(catalog_status_apply(l, &st) >= 0);
                        json_object_put(l);
                }
                catalog_status_done(&st);
        }
        CatalogList *whole = NULL, *split = NULL;
        size_t k = size > 0 ? data[0] % (size + 1) : 0;
        int rw = catalog_list_parse((const char *)data, size, 64, SIZE_MAX, &whole);
        int rs = catalog_list_new(64, SIZE_MAX, &split);
        if (rs == 0)
                rs = catalog_list_read(split, (const char *)data, k);
        if (rs == 0)
                rs = catalog_list_read(split, (const char *)data + k, size - k);
        if (rs == 0)
                rs = catalog_list_read_end(split);
        if (rw != -ENOMEM && rs != -ENOMEM)
                assert(rw == rs);
        if (rw == 0 && rs == 0) {
                assert(catalog_list_equal(whole, split));
                for (size_t i = 0; i < catalog_list_size(whole); i++) {
                        size_t n;
                        const char *text = catalog_list_entry(whole, i, &n);
                        json_tokener *t = json_tokener_new();
                        json_object *e = t ? json_tokener_parse_ex(t, text, (int)n) : NULL, *id;
                        assert(!t || (json_object_object_get_ex(e, "id", &id) &&
                                      strcmp(json_object_get_string(id), catalog_list_id(whole, i)) == 0));
                        json_object_put(e);
                        if (t)
                                json_tokener_free(t);
                        assert(catalog_list_has(whole, catalog_list_id(whole, i)));
                }
                if (catalog_list_size(whole) > 0) {
                        CatalogStatus s = {.key = (char *)catalog_list_id(whole, 0),
                                           .status = (char *)"unloaded",
                                           .exit_code = 1,
                                           .percent = -1};
                        assert(catalog_list_apply(whole, &s) >= 0);
                        assert(catalog_list_find(whole, s.key) == 0);
                }
        }
        catalog_list_free(whole);
        catalog_list_free(split);
        ModelsList *ml = models_list_new();
        (void)models_list_add_host(ml, &c, &host, NULL, (const char *)data, size);
        models_list_free(ml);

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
