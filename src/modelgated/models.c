/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <stdio.h>
#include <string.h>

#include "modelgated/manager.h"
#include "modelgated/models.h"
#include "modelgated/route.h"
#include "modelgated/upstream.h"
#include "shared/log.h"

#define MODELS_FETCH_TIMEOUT_USEC (5 * USEC_PER_SEC)
#define MODELS_BODY_MAX (16 * 1024 * 1024)

typedef struct ModelsFetch {
        ModelsMerge *merge;
        const HostConf *host;
        Upstream *upstream;
        Buffer body;
        int status;
        bool ok;
        bool done;
} ModelsFetch;

struct ModelsMerge {
        Manager *manager;
        ModelsFetch *fetches;
        size_t n_fetches, n_pending;
        sd_event_source *done_source;
        ModelsMergeDone done;
        void *userdata;
};

int models_merge_host(const Config *c, const HostConf *h, const char *body, size_t n, json_object *data) {
        json_tokener *tok = json_tokener_new();
        json_object *root, *list;

        if (!tok)
                return -ENOMEM;
        root = json_tokener_parse_ex(tok, body, (int)MIN(n, (size_t)INT32_MAX));
        json_tokener_free(tok);
        if (!root || !json_object_object_get_ex(root, "data", &list) ||
            !json_object_is_type(list, json_type_array)) {
                json_object_put(root);
                return -EBADMSG;
        }
        for (size_t i = 0; i < json_object_array_length(list); i++) {
                json_object *e = json_object_array_get_idx(list, i), *id, *proxy;
                _cleanup_free_ char *nid = NULL;
                const char *key;

                if (!json_object_is_type(e, json_type_object) || !json_object_object_get_ex(e, "id", &id) ||
                    !json_object_is_type(id, json_type_string))
                        continue;
                key = json_object_get_string(id);
                if (asprintf(&nid, "%s-%s", h->name, key) < 0)
                        break;
                proxy = json_object_new_object();
                if (!proxy)
                        break;
                const EngineConf *eng = route_find_engine(c, h->name, key);
                json_object_object_add(proxy, "host", json_object_new_string(h->name));
                json_object_object_add(proxy, "key", json_object_new_string(key));
                json_object_object_add(proxy, "engine", eng ? json_object_new_string(eng->name) : NULL);
                /* "key" above copied the old id before it is replaced */
                json_object_object_add(e, "id", json_object_new_string(nid));
                json_object_object_add(e, "proxy", proxy);
                json_object_array_add(data, json_object_get(e));
        }
        json_object_put(root);
        return 0;
}

static int merge_done_cb(sd_event_source *s, void *userdata) {
        ModelsMerge *mm = userdata;
        json_object *root = json_object_new_object(), *data = json_object_new_array();
        const char *j;
        size_t l = 0;

        (void)sd_event_source_set_enabled(s, SD_EVENT_OFF);
        if (!root || !data) {
                json_object_put(root);
                json_object_put(data);
                mm->done(mm, NULL, 0, mm->userdata);
                return 0;
        }
        for (size_t i = 0; i < mm->n_fetches; i++) {
                ModelsFetch *f = &mm->fetches[i];
                if (!f->ok)
                        continue;
                if (models_merge_host(&mm->manager->config, f->host, buffer_peek(&f->body),
                                      buffer_size(&f->body), data) < 0)
                        log_warning("host %s: /models answer is not a model list, left out", f->host->name);
        }
        json_object_object_add(root, "object", json_object_new_string("list"));
        json_object_object_add(root, "data", data);
        j = json_object_to_json_string_length(root, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE,
                                              &l);
        mm->done(mm, j, l, mm->userdata); /* may free mm */
        json_object_put(root);
        return 0;
}

static void fetch_finished(ModelsFetch *f) {
        f->upstream = NULL;
        f->done = true;
        if (--f->merge->n_pending == 0)
                (void)sd_event_source_set_enabled(f->merge->done_source, SD_EVENT_ONESHOT);
}

static int fetch_on_headers(Upstream *u, const UpstreamResponse *resp, void *userdata) {
        ModelsFetch *f = userdata;
        f->status = resp->status;
        return 0;
}

static int fetch_on_body(Upstream *u, const char *p, size_t n, void *userdata) {
        ModelsFetch *f = userdata;
        if (buffer_size(&f->body) + n > MODELS_BODY_MAX)
                return -1;
        return buffer_append(&f->body, p, n);
}

static void fetch_on_complete(Upstream *u, void *userdata) {
        ModelsFetch *f = userdata;
        f->ok = f->status == 200;
        if (!f->ok)
                log_debug("host %s: GET /models answered %d", f->host->name, f->status);
        fetch_finished(f);
}

static void fetch_on_error(Upstream *u, int error, bool started, void *userdata) {
        ModelsFetch *f = userdata;
        log_debug("host %s: GET /models failed: %s", f->host->name, upstream_strerror(error));
        fetch_finished(f);
}

static const UpstreamCallbacks fetch_callbacks = {
        .on_headers = fetch_on_headers,
        .on_body = fetch_on_body,
        .on_complete = fetch_on_complete,
        .on_error = fetch_on_error,
};

ModelsMerge *models_merge_free(ModelsMerge *mm) {
        if (!mm)
                return NULL;
        for (size_t i = 0; i < mm->n_fetches; i++) {
                upstream_cancel(mm->fetches[i].upstream);
                buffer_done(&mm->fetches[i].body);
        }
        free(mm->fetches);
        sd_event_source_disable_unref(mm->done_source);
        free(mm);
        return NULL;
}

int models_merge_start(Manager *m, ModelsMergeDone done, void *userdata, ModelsMerge **ret) {
        ModelsMerge *mm;
        int r;

        mm = calloc(1, sizeof(ModelsMerge));
        if (!mm)
                return -ENOMEM;
        mm->manager = m;
        mm->done = done;
        mm->userdata = userdata;
        mm->fetches = calloc(MAX(m->config.n_hosts, 1u), sizeof(ModelsFetch));
        r = mm->fetches ? sd_event_add_defer(m->event, &mm->done_source, merge_done_cb, mm) : -ENOMEM;
        if (r < 0) {
                models_merge_free(mm);
                return r;
        }
        (void)sd_event_source_set_enabled(mm->done_source, SD_EVENT_OFF);

        for (size_t i = 0; i < m->config.n_hosts; i++) {
                const HostConf *h = &m->config.hosts[i];
                ModelsFetch *f = &mm->fetches[mm->n_fetches++];
                Buffer req = {};

                *f = (ModelsFetch){.merge = mm, .host = h};
                if (buffer_printf(&req,
                                  "GET %s/models HTTP/1.1\r\nHost: %s\r\nAccept: application/json\r\n\r\n",
                                  h->url.base_path, h->url.authority) < 0) {
                        buffer_done(&req);
                        models_merge_free(mm);
                        return -ENOMEM;
                }
                r = upstream_start(m, &h->url, &req, false, &fetch_callbacks, f, &f->upstream);
                buffer_done(&req);
                if (r < 0) {
                        log_debug("host %s: GET /models: %s", h->name, upstream_strerror(r));
                        f->done = true;
                        continue;
                }
                (void)upstream_set_deadline(f->upstream, MODELS_FETCH_TIMEOUT_USEC);
                mm->n_pending++;
        }
        if (mm->n_pending == 0)
                (void)sd_event_source_set_enabled(mm->done_source, SD_EVENT_ONESHOT);
        *ret = mm;
        return 0;
}
