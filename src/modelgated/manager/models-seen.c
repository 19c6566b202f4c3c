/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The model memory's file: see models-seen.h. */

#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "modelgated/catalog/catalog.h"
#include "modelgated/host/host.h"
#include "modelgated/manager/models-seen.h"
#include "modelgated/catalog/catalog-list.h"
#include "modelgated/sched/model-memory.h"
#include "shared/fileio.h"
#include "shared/log.h"
#include "shared/state-file.h"

#define MODELS_SEEN_FILE "models-seen.json"

void models_seen_save(ModelMemory *mem) {
        _cleanup_free_ char *path = state_file_path(MODELS_SEEN_FILE);
        _cleanup_free_ char *text = model_memory_format(mem);
        int r;

        if (!path || !text) {
                log_warning("Cannot write %s, what hosts said of their models will not survive a restart",
                            path ?: MODELS_SEEN_FILE);
                return;
        }
        r = state_file_write(path, text, strlen(text));
        if (r < 0)
                log_warning_errno(r,
                                  "Cannot write %s, what hosts said of their models will not survive a "
                                  "restart: %m",
                                  path);
}

void models_seen_load(ModelMemory *mem) {
        _cleanup_free_ char *path = state_file_path(MODELS_SEEN_FILE), *text = NULL, *aside = NULL;
        size_t n = 0;
        int r;

        if (!path)
                return;
        r = read_full_file(path, &text, &n);
        if (r == -ENOENT)
                return; /* a first start: nothing said yet */
        if (r >= 0)
                r = model_memory_parse(mem, text, n);
        if (r >= 0 || r == -ENOMEM)
                return;
        /* kept aside for a look, and said: the listing starts again from what hosts say now */
        if (asprintf(&aside, "%s.corrupt", path) >= 0 && rename(path, aside) >= 0)
                log_warning("%s cannot be read (%s); moved to %s, the models of stopped engines are listed "
                            "without what their hosts said of them until they run again",
                            path, r == -EBADMSG ? "not a model memory" : strerror(-r), aside);
        else
                log_warning("%s cannot be read (%s); the models of stopped engines are listed without what "
                            "their hosts said of them until they run again",
                            path, r == -EBADMSG ? "not a model memory" : strerror(-r));
}

bool models_seen_learn(ModelMemory *mem, Host *h, size_t i, bool changed) {
        const CatalogList *list = catalog_snapshot(host_catalog(h));
        const char *host = host_conf(h)->name, *engine = host_engine(h, i)->conf->name;
        usec_t now = now_usec(CLOCK_REALTIME);
        json_tokener *tok;
        bool save = false;

        if (!list || !(tok = json_tokener_new()))
                return false;
        for (size_t k = 0; k < catalog_list_size(list); k++) {
                size_t len;
                const char *text;
                json_object *e;

                /* the same list as the last read: each entry's time only, without parsing it again */
                if (!changed && model_memory_touch(mem, host, catalog_list_id(list, k), now))
                        continue;
                text = catalog_list_entry(list, k, &len);
                json_tokener_reset(tok);
                e = json_tokener_parse_ex(tok, text, (int)MIN(len, (size_t)INT32_MAX));
                if (e && model_memory_learn(mem, host, engine, e, now) > 0)
                        save = true;
                json_object_put(e);
        }
        json_tokener_free(tok);
        return save;
}
