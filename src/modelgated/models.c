/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <stdio.h>
#include <string.h>

#include "modelgated/catalog.h"
#include "modelgated/host.h"
#include "modelgated/manager.h"
#include "modelgated/models.h"
#include "modelgated/route.h"
#include "shared/log.h"
#include "shared/strv.h"

#define MODELS_FIRST_WAIT_USEC (2 * USEC_PER_SEC)

struct ModelsMerge {
        Manager *manager;
        sd_event_source *timer, *done_source;
        ModelsMergeDone done;
        void *userdata;
};

int models_merge_host(const Config *c, const HostConf *h, const char *engine, const char *body, size_t n,
                      json_object *data) {
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
                const EngineConf *eng = engine ? NULL : config_engine_of_key(c, h->name, key);
                json_object_object_add(proxy, "host", json_object_new_string(h->name));
                json_object_object_add(proxy, "key", json_object_new_string(key));
                json_object_object_add(proxy, "engine",
                                       engine ? json_object_new_string(engine)
                                       : eng  ? json_object_new_string(eng->name)
                                              : NULL);
                /* "key" above copied the old id before it is replaced */
                json_object_object_add(e, "id", json_object_new_string(nid));
                json_object_object_add(e, "proxy", proxy);
                json_object_array_add(data, json_object_get(e));
        }
        json_object_put(root);
        return 0;
}

/* A stopped engine's learned keys: listed as llama.cpp lists a model it does not run. */
static void merge_learned(Manager *m, Host *h, json_object *data) {
        const HostConf *hc = host_conf(h);
        Catalog *c = host_catalog(h);

        for (size_t e = 0; e < host_n_engines(h); e++) {
                if ((ssize_t)e == host_engine_up(h))
                        continue;
                STRV_FOREACH (k, catalog_engine_keys(c, e)) {
                        _cleanup_free_ char *id = NULL;
                        bool dup = false;
                        if (asprintf(&id, "%s-%s", hc->name, *k) < 0)
                                return;
                        for (size_t i = 0; i < json_object_array_length(data) && !dup; i++) {
                                json_object *x, *xid;
                                x = json_object_array_get_idx(data, i);
                                dup = json_object_object_get_ex(x, "id", &xid) &&
                                      streq(json_object_get_string(xid), id);
                        }
                        if (dup)
                                continue;
                        json_object *o = json_object_new_object(), *st = json_object_new_object(),
                                    *proxy = json_object_new_object();
                        json_object_object_add(o, "id", json_object_new_string(id));
                        json_object_object_add(o, "object", json_object_new_string("model"));
                        json_object_object_add(o, "owned_by", json_object_new_string("llamacpp"));
                        json_object_object_add(st, "value", json_object_new_string("unloaded"));
                        json_object_object_add(o, "status", st);
                        json_object_object_add(proxy, "host", json_object_new_string(hc->name));
                        json_object_object_add(proxy, "key", json_object_new_string(*k));
                        json_object_object_add(proxy, "engine",
                                               json_object_new_string(host_engine(h, e)->conf->name));
                        json_object_object_add(o, "proxy", proxy);
                        json_object_array_add(data, o);
                }
        }
}

static json_object *find_id(json_object *data, const char *id) {
        for (size_t i = 0; i < json_object_array_length(data); i++) {
                json_object *x = json_object_array_get_idx(data, i), *xid;
                if (json_object_object_get_ex(x, "id", &xid) && streq(json_object_get_string(xid), id))
                        return x;
        }
        return NULL;
}

/* Each [Alias] as a model of modelgate's own: its policy, its targets and what each is doing, the one
 * it would pick now and why, and that target's status as its host lists it. */
static void merge_aliases(Manager *m, json_object *data) {
        const Config *c = manager_config(m);

        for (size_t i = 0; i < c->n_aliases; i++) {
                const AliasConf *a = &c->aliases[i];
                AliasTarget t[ALIAS_TARGETS_MAX];
                const char *why;
                ssize_t pick = manager_alias_pick(m, a, NULL, 0, t, &why);
                json_object *o = json_object_new_object(), *alias = json_object_new_object(),
                            *targets = json_object_new_array(), *proxy = json_object_new_object(), *st;

                for (size_t k = 0; a->targets[k] && k < ALIAS_TARGETS_MAX; k++) {
                        json_object *x = json_object_new_object();
                        json_object_object_add(x, "id", json_object_new_string(a->targets[k]));
                        json_object_object_add(
                                x, "state",
                                json_object_new_string(alias_target_state_to_string(t[k].state)));
                        json_object_array_add(targets, x);
                }
                json_object_object_add(o, "id", json_object_new_string(a->name));
                json_object_object_add(o, "object", json_object_new_string("model"));
                json_object_object_add(o, "owned_by", json_object_new_string("modelgate"));
                json_object *target = pick >= 0 ? find_id(data, a->targets[pick]) : NULL;
                if (target && json_object_object_get_ex(target, "status", &st))
                        json_object_object_add(o, "status", json_object_get(st));
                json_object_object_add(alias, "policy",
                                       json_object_new_string(alias_policy_to_string(a->policy)));
                json_object_object_add(alias, "targets", targets);
                json_object_object_add(alias, "pick",
                                       pick >= 0 ? json_object_new_string(a->targets[pick]) : NULL);
                json_object_object_add(alias, "why", json_object_new_string(why));
                json_object_object_add(proxy, "alias", alias);
                json_object_object_add(o, "proxy", proxy);
                json_object_array_add(data, o);
        }
}

static int merge_done_cb(sd_event_source *s, void *userdata) {
        ModelsMerge *mm = userdata;
        Manager *m = mm->manager;
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
        for (size_t i = 0; i < manager_n_hosts(m); i++) {
                Host *h = manager_host_at(m, i);
                const char *body;
                size_t n;
                ssize_t e = host_engine_up(h);

                /* SPEC §4: hosts that are down are left out, not guessed at */
                if (host_state(h) == HOST_DOWN)
                        continue;
                body = catalog_snapshot(host_catalog(h), &n);
                if (body &&
                    models_merge_host(manager_config(m), host_conf(h),
                                      e >= 0 ? host_engine(h, e)->conf->name : NULL, body, n, data) < 0)
                        log_warning("host %s: /models answer is not a model list, left out",
                                    host_conf(h)->name);
                merge_learned(m, h, data);
        }
        merge_aliases(m, data);
        json_object_object_add(root, "object", json_object_new_string("list"));
        json_object_object_add(root, "data", data);
        j = json_object_to_json_string_length(root, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE,
                                              &l);
        mm->done(mm, j, l, mm->userdata); /* may free mm */
        json_object_put(root);
        return 0;
}

static bool all_ready(Manager *m) {
        for (size_t i = 0; i < manager_n_hosts(m); i++)
                if (!catalog_ready(host_catalog(manager_host_at(m, i))))
                        return false;
        return true;
}

static int merge_timer_cb(sd_event_source *s, uint64_t usec, void *userdata) {
        ModelsMerge *mm = userdata;
        (void)sd_event_source_set_enabled(mm->done_source, SD_EVENT_ONESHOT);
        return 0;
}

void models_merge_catalogs_ready(ModelsMerge *mm) {
        if (mm && all_ready(mm->manager))
                (void)sd_event_source_set_enabled(mm->done_source, SD_EVENT_ONESHOT);
}

ModelsMerge *models_merge_free(ModelsMerge *mm) {
        if (!mm)
                return NULL;
        sd_event_source_disable_unref(mm->timer);
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
        r = sd_event_add_defer(manager_event(m), &mm->done_source, merge_done_cb, mm);
        if (r < 0) {
                models_merge_free(mm);
                return r;
        }
        if (all_ready(m)) {
                *ret = mm;
                return 0;
        }
        /* the first request after a start waits (bounded) for the first read of each reachable host,
         * instead of answering an empty list; later ones only for the list of an engine that just came up,
         * never for a load, an unload or a feed event, which are in the snapshot at once (SPEC §4) */
        (void)sd_event_source_set_enabled(mm->done_source, SD_EVENT_OFF);
        r = sd_event_add_time_relative(manager_event(m), &mm->timer, CLOCK_MONOTONIC, MODELS_FIRST_WAIT_USEC,
                                       0, merge_timer_cb, mm);
        if (r < 0) {
                models_merge_free(mm);
                return r;
        }
        *ret = mm;
        return 0;
}
