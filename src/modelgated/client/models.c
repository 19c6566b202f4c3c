/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "modelgated/catalog/catalog-list.h"
#include "modelgated/api/first-wait.h"
#include "modelgated/catalog/catalog.h"
#include "modelgated/host/host.h"
#include "modelgated/api/json-util.h"
#include "modelgated/manager/manager.h"
#include "modelgated/client/models.h"
#include "modelgated/sched/model-memory.h"
#include "modelgated/api/route.h"
#include "shared/count-map.h"
#include "shared/log.h"
#include "shared/strv.h"

#define MODELS_RECENT_MAX 4
#define MODELS_JSON_FLAGS (JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE)

struct ModelsMerge {
        Manager *manager;
        ModelsCache *cache;
        sd_event_source *timer, *done_source;
        ModelsAllowed allowed;
        ModelsMergeDone done;
        void *userdata;
};

/* What the hosts' part of a listing is made of, per host: a change of any of it makes a new merge */
typedef struct ModelsCacheKey {
        uint64_t generation; /* the catalog's: its snapshot, its learned keys */
        ssize_t engine_up;   /* the engine named in "proxy" */
        bool down;           /* left out */
} ModelsCacheKey;

struct ModelsCache {
        ModelsList *hosts; /* the hosts' part, as merged last; NULL: none yet */
        uint64_t config_serial;
        uint64_t memory_generation; /* the model memory's, of that merge */
        ModelsCacheKey *keys;       /* per host of that configuration */
        size_t n_keys;
        uint64_t merges;
        /* while some catalog's first read is pending: when the listings stop waiting for it */
        FirstWait first_wait;
        /* the last answers made: a listing whose bytes are one of these shares it (a slow reader of a
         * big list holds a reference, not a copy of its own) */
        Blob *recent[MODELS_RECENT_MAX];
        size_t recent_next;
};

/* One entry of a list, serialized as a whole list serializes it */
typedef struct ModelsEntry {
        char *id;
        size_t offset, len; /* in the list's text */
        /* an [Alias]'s entry: the same without its targets, for a caller that may not use each of them
         * (an alias's tier learns nothing of what is behind it) */
        const AliasConf *alias;
        size_t opaque_offset, opaque_len;
} ModelsEntry;

struct ModelsList {
        Buffer text;
        ModelsEntry *entries;
        size_t n_entries, n_alloc;
        CountMap *index; /* id → 1 + the position of the first entry with that id */
};

/* "proxy" says where entry e's context came from when the memory gave some (rule:remembered-context) */
static int add_context(json_object *e, json_object *proxy, json_object *record) {
        char seen[32];
        int r = model_context_apply(e, record);

        if (r > 0) {
                json_object_object_add(proxy, "remembered", json_object_new_boolean(true));
                if (model_record_seen(record, seen))
                        json_object_object_add(proxy, "seen", json_object_new_string(seen));
        }
        return r;
}

/* Entry e of host h's list as a listing has it: its id "<host>-<key>" (returned), a "proxy" field, and its
 * context window (rule:model-context), from mem where the entry does not say it (mem may be NULL). NULL:
 * not an entry with an id, or out of memory. */
static char *merge_entry(const Config *c, const HostConf *h, const char *engine, const ModelMemory *mem,
                         json_object *e) {
        json_object *id, *proxy;
        _cleanup_free_ char *nid = NULL;
        const char *key;

        if (!json_object_is_type(e, json_type_object) || !json_object_object_get_ex(e, "id", &id) ||
            !json_object_is_type(id, json_type_string))
                return NULL;
        key = json_object_get_string(id);
        if (asprintf(&nid, "%s-%s", h->name, key) < 0)
                return NULL;
        proxy = json_object_new_object();
        if (!proxy)
                return NULL;
        const EngineConf *eng = engine ? NULL : config_engine_of_key(c, h->name, key);
        json_object_object_add(proxy, "host", json_object_new_string(h->name));
        json_object_object_add(proxy, "key", json_object_new_string(key));
        json_object_object_add(proxy, "engine",
                               engine ? json_object_new_string(engine)
                               : eng  ? json_object_new_string(eng->name)
                                      : NULL);
        if (add_context(e, proxy, model_memory_get(mem, h->name, key)) < 0) {
                json_object_put(proxy);
                return NULL;
        }
        /* "key" above copied the old id before it is replaced */
        json_object_object_add(e, "id", json_object_new_string(nid));
        json_object_object_add(e, "proxy", proxy);
        return TAKE_PTR(nid);
}

int models_merge_host(const Config *c, const HostConf *h, const char *engine, const char *body, size_t n,
                      json_object *data) {
        json_object *root = NULL, *list;

        if (json_parse(/* tok= */ NULL, body, n, &root) == -ENOMEM)
                return -ENOMEM;
        if (!root || !json_object_object_get_ex(root, "data", &list) ||
            !json_object_is_type(list, json_type_array)) {
                json_object_put(root);
                return -EBADMSG;
        }
        for (size_t i = 0; i < json_object_array_length(list); i++) {
                json_object *e = json_object_array_get_idx(list, i);
                _cleanup_free_ char *nid = merge_entry(c, h, engine, /* mem= */ NULL, e);

                if (nid)
                        json_object_array_add(data, json_object_get(e));
        }
        json_object_put(root);
        return 0;
}

/* The list */

ModelsList *models_list_new(void) {
        return calloc(1, sizeof(ModelsList));
}

ModelsList *models_list_free(ModelsList *l) {
        if (!l)
                return NULL;
        for (size_t i = 0; i < l->n_entries; i++)
                free(l->entries[i].id);
        free(l->entries);
        buffer_done(&l->text);
        count_map_free(l->index);
        free(l);
        return NULL;
}

static const ModelsEntry *list_find(ModelsList *l, const char *id) {
        uint64_t *at = count_map_get(&l->index, id, false);
        /* 0: made by a list_add() that then ran out of memory */
        return at && *at > 0 ? &l->entries[*at - 1] : NULL;
}

static int list_add(ModelsList *l, const char *id, json_object *e) {
        size_t n = 0;
        const char *j = json_object_to_json_string_length(e, MODELS_JSON_FLAGS, &n);
        ModelsEntry x = {.offset = buffer_size(&l->text), .len = n};
        uint64_t *at;

        if (!j)
                return -ENOMEM;
        if (l->n_entries == l->n_alloc) {
                size_t k = MAX(l->n_alloc * 2, 16u);
                ModelsEntry *p = reallocarray(l->entries, k, sizeof(ModelsEntry));
                if (!p)
                        return -ENOMEM;
                l->entries = p;
                l->n_alloc = k;
        }
        at = count_map_get(&l->index, id, true);
        if (!at || !(x.id = strdup(id)))
                return -ENOMEM;
        if (buffer_append(&l->text, j, n) < 0) {
                free(x.id);
                return -ENOMEM;
        }
        /* a host may list an id twice: the first one is the one found */
        if (*at == 0)
                *at = l->n_entries + 1;
        l->entries[l->n_entries++] = x;
        return 0;
}

/* Entry id's "status" (a new reference; NULL for a JSON null), read again from its text: only an alias's
 * pick needs it, and keeping every entry's parsed would cost more than the few that are read. false:
 * no such entry, or it has no "status". */
static bool list_status(ModelsList *l, const char *id, json_object **ret) {
        const ModelsEntry *e = list_find(l, id);
        json_tokener *tok;
        json_object *o, *st;
        bool found = false;

        if (!e || !(tok = json_tokener_new()))
                return false;
        o = json_tokener_parse_ex(tok, buffer_peek(&l->text) + e->offset,
                                  (int)MIN(e->len, (size_t)INT32_MAX));
        json_tokener_free(tok);
        if (o && json_object_object_get_ex(o, "status", &st)) {
                *ret = json_object_get(st);
                found = true;
        }
        json_object_put(o);
        return found;
}

int models_list_add_host_list(ModelsList *l, const Config *c, const HostConf *h, const char *engine,
                              const ModelMemory *mem, const CatalogList *list) {
        json_tokener *tok = json_tokener_new();
        int r = 0;

        if (!tok)
                return -ENOMEM;
        /* entry by entry: a tree of the whole list would cost as much again to build and to free */
        for (size_t i = 0; r >= 0 && i < catalog_list_size(list); i++) {
                size_t n;
                const char *text = catalog_list_entry(list, i, &n);
                json_object *e;

                json_tokener_reset(tok);
                e = json_tokener_parse_ex(tok, text, (int)MIN(n, (size_t)INT32_MAX));
                _cleanup_free_ char *nid = e ? merge_entry(c, h, engine, mem, e) : NULL;
                if (nid)
                        r = list_add(l, nid, e);
                json_object_put(e);
        }
        json_tokener_free(tok);
        return r;
}

int models_list_add_host(ModelsList *l, const Config *c, const HostConf *h, const char *engine,
                         const char *body, size_t n) {
        _cleanup_(catalog_list_freep) CatalogList *list = NULL;
        int r;

        r = catalog_list_parse(body, n, SIZE_MAX, SIZE_MAX, &list);
        if (r < 0)
                return r == -ENOMEM ? r : -EBADMSG;
        return models_list_add_host_list(l, c, h, engine, /* mem= */ NULL, list);
}

/* One model of a stopped engine (or of a host that is down), as llama.cpp lists a model it does not run,
 * with what the host said of it when it last listed it (rule:remembered-context) */
static int add_stopped(ModelsList *l, const char *host, const char *engine, const char *key,
                       const ModelMemory *mem, bool down) {
        _cleanup_free_ char *id = NULL;
        int r;

        if (asprintf(&id, "%s-%s", host, key) < 0)
                return -ENOMEM;
        if (list_find(l, id))
                return 0;
        json_object *o = json_object_new_object(), *st = json_object_new_object(),
                    *proxy = json_object_new_object();
        json_object_object_add(o, "id", json_object_new_string(id));
        json_object_object_add(o, "object", json_object_new_string("model"));
        json_object_object_add(o, "owned_by", json_object_new_string("llamacpp"));
        json_object_object_add(st, "value", json_object_new_string("unloaded"));
        json_object_object_add(o, "status", st);
        json_object_object_add(proxy, "host", json_object_new_string(host));
        json_object_object_add(proxy, "key", json_object_new_string(key));
        json_object_object_add(proxy, "engine", json_object_new_string(engine));
        /* rule:down-listed: a down host's configured and learned models, said to be down */
        if (down)
                json_object_object_add(proxy, "host_state", json_object_new_string("down"));
        r = add_context(o, proxy, model_memory_get(mem, host, key));
        json_object_object_add(o, "proxy", proxy);
        if (r >= 0)
                r = list_add(l, id, o);
        json_object_put(o);
        return r;
}

int models_list_add_stopped(ModelsList *l, const char *host, const char *engine, char *const *keys,
                            const ModelMemory *mem, bool down) {
        STRV_FOREACH (k, keys) {
                int r = add_stopped(l, host, engine, *k, mem, down);
                if (r < 0)
                        return r;
        }
        return 0;
}

int models_list_add_learned(ModelsList *l, const char *host, const char *engine, char *const *keys) {
        return models_list_add_stopped(l, host, engine, keys, /* mem= */ NULL, /* down= */ false);
}

int models_list_add_alias(ModelsList *l, ModelsList *hosts, const AliasConf *a, const AliasTarget *t,
                          ssize_t pick, const char *why) {
        assert(l);
        json_object *o = json_object_new_object(), *alias = json_object_new_object(),
                    *targets = json_object_new_array(), *proxy = json_object_new_object();
        json_object *st = NULL;
        int r;

        for (size_t k = 0; a->targets[k] && k < ALIAS_TARGETS_MAX; k++) {
                json_object *x = json_object_new_object();
                json_object_object_add(x, "id", json_object_new_string(a->targets[k]));
                json_object_object_add(x, "state",
                                       json_object_new_string(alias_target_state_to_string(t[k].state)));
                json_object_array_add(targets, x);
        }
        json_object_object_add(o, "id", json_object_new_string(a->name));
        json_object_object_add(o, "object", json_object_new_string("model"));
        json_object_object_add(o, "owned_by", json_object_new_string("modelgate"));
        /* a target is "<host>-<key>", never an alias (conf-verify.c): only the hosts' part can have it */
        if (pick >= 0 && list_status(hosts, a->targets[pick], &st))
                json_object_object_add(o, "status", st);
        json_object_object_add(alias, "policy", json_object_new_string(alias_policy_to_string(a->policy)));
        json_object_object_add(alias, "targets", targets);
        json_object_object_add(alias, "pick", pick >= 0 ? json_object_new_string(a->targets[pick]) : NULL);
        json_object_object_add(alias, "why", json_object_new_string(why));
        json_object_object_add(proxy, "alias", alias);
        json_object_object_add(o, "proxy", proxy);
        r = list_add(l, a->name, o);
        if (r >= 0) {
                /* the opaque variant: its policy only; no targets, no pick, no reason that names one */
                json_object *opaque = json_object_new_object();
                json_object_object_add(opaque, "policy",
                                       json_object_new_string(alias_policy_to_string(a->policy)));
                json_object_object_add(proxy, "alias", opaque);
                /* and the picked target's status by its value only: llama.cpp's carries the server's
                 * arguments, model paths and all */
                json_object *status, *value;
                if (json_object_object_get_ex(o, "status", &status) &&
                    json_object_object_get_ex(status, "value", &value)) {
                        json_object *v = json_object_new_object();
                        json_object_object_add(v, "value", json_object_get(value));
                        json_object_object_add(o, "status", v);
                }
                size_t n = 0;
                const char *j = json_object_to_json_string_length(o, MODELS_JSON_FLAGS, &n);
                ModelsEntry *e = &l->entries[l->n_entries - 1];
                e->alias = a;
                e->opaque_offset = buffer_size(&l->text);
                e->opaque_len = n;
                if (!j || buffer_append(&l->text, j, n) < 0)
                        r = -ENOMEM;
        }
        json_object_put(o);
        return r;
}

/* May the caller see what is behind the alias of e: every target, as /v1/models would list it? */
static bool alias_targets_visible(const ModelsEntry *e, ModelsAllowed allowed, void *userdata) {
        for (size_t k = 0; e->alias->targets[k] && k < ALIAS_TARGETS_MAX; k++)
                if (!allowed(e->alias->targets[k], userdata))
                        return false;
        return true;
}

static int render_entries(const ModelsList *l, ModelsAllowed allowed, void *userdata, Buffer *out,
                          bool *first) {
        for (size_t i = 0; l && i < l->n_entries; i++) {
                const ModelsEntry *e = &l->entries[i];
                if (allowed && !allowed(e->id, userdata))
                        continue;
                bool opaque = e->alias && allowed && !alias_targets_visible(e, allowed, userdata);
                if ((!*first && buffer_append_str(out, ",") < 0) ||
                    buffer_append(out, buffer_peek(&l->text) + (opaque ? e->opaque_offset : e->offset),
                                  opaque ? e->opaque_len : e->len) < 0)
                        return -ENOMEM;
                *first = false;
        }
        return 0;
}

int models_list_render(const ModelsList *hosts, const ModelsList *aliases, ModelsAllowed allowed,
                       void *userdata, Buffer *out) {
        bool first = true;

        /* byte for byte what json-c makes of {"object":"list","data":[…]} */
        if (buffer_append_str(out, "{\"object\":\"list\",\"data\":[") < 0 ||
            render_entries(hosts, allowed, userdata, out, &first) < 0 ||
            render_entries(aliases, allowed, userdata, out, &first) < 0)
                return -ENOMEM;
        return buffer_append_str(out, "]}");
}

/* The cache of the hosts' part */

ModelsCache *models_cache_new(void) {
        return calloc(1, sizeof(ModelsCache));
}

ModelsCache *models_cache_free(ModelsCache *cache) {
        if (!cache)
                return NULL;
        models_list_free(cache->hosts);
        for (size_t i = 0; i < MODELS_RECENT_MAX; i++)
                blob_unref(cache->recent[i]);
        free(cache->keys);
        free(cache);
        return NULL;
}

uint64_t models_cache_merges(const ModelsCache *cache) {
        assert(cache);
        return cache->merges;
}

static ModelsCacheKey key_of(Manager *m, size_t i) {
        Host *h = manager_host_at(m, i);

        return (ModelsCacheKey){.generation = catalog_generation(host_catalog(h)),
                                .engine_up = host_engine_up(h),
                                .down = host_state(h) == HOST_DOWN};
}

static bool cache_fresh(const ModelsCache *cache, Manager *m) {
        if (!cache->hosts || cache->config_serial != manager_config_serial(m) ||
            cache->memory_generation != model_memory_generation(manager_model_memory(m)) ||
            cache->n_keys != manager_n_hosts(m))
                return false;
        for (size_t i = 0; i < cache->n_keys; i++) {
                ModelsCacheKey k = key_of(m, i);
                if (k.generation != cache->keys[i].generation || k.engine_up != cache->keys[i].engine_up ||
                    k.down != cache->keys[i].down)
                        return false;
        }
        return true;
}

/* The exact names (no glob) of engine e's Models= that route to e (the first engine whose Models= matches
 * a key serves it): NULL-terminated, the strings borrowed; NULL when out of memory or none. */
static const char **exact_names(const Config *c, const HostConf *h, const EngineConf *e) {
        const char **names = calloc(strv_length(e->models) + 1, sizeof(char *));
        size_t n = 0;

        STRV_FOREACH (g, e->models)
                if (names && !strpbrk(*g, "*?[\\") && config_engine_of_key(c, h->name, *g) == e)
                        names[n++] = *g;
        return names;
}

/* Host h's entries: its running engine's list (the host's own words), then each other engine's learned
 * keys and exact Models= names, with what the host last said of each (rule:remembered-context). A host
 * that is down lists only the latter, said to be down (rule:down-listed); one without engines is left
 * out (rule:down-left-out). */
static int merge_host(ModelsList *l, Manager *m, Host *h) {
        const Config *c = manager_config(m);
        const ModelMemory *mem = manager_model_memory(m);
        const char *name = host_conf(h)->name;
        bool down = host_state(h) == HOST_DOWN;
        const CatalogList *list = down ? NULL : catalog_snapshot(host_catalog(h));
        ssize_t up = down ? -1 : host_engine_up(h);
        int r = 0;

        /* rule:down-left-out: of a host without engines, nothing is configuration: not guessed at */
        if (down && host_n_engines(h) == 0)
                return 0;
        if (list)
                r = models_list_add_host_list(l, c, host_conf(h),
                                              up >= 0 ? host_engine(h, up)->conf->name : NULL, mem, list);
        for (size_t e = 0; r >= 0 && e < host_n_engines(h); e++) {
                const EngineConf *eng = host_engine(h, e)->conf;
                if ((ssize_t)e == up && list)
                        continue; /* the running engine's own list wins over what was remembered */
                _cleanup_free_ const char **names = exact_names(c, host_conf(h), eng);
                r = models_list_add_stopped(l, name, eng->name, catalog_engine_keys(host_catalog(h), e), mem,
                                            down);
                if (r >= 0)
                        r = models_list_add_stopped(l, name, eng->name, (char *const *)names, mem, down);
        }
        return r;
}

static ModelsList *merge_hosts(Manager *m) {
        _cleanup_(models_list_freep) ModelsList *l = models_list_new();

        for (size_t i = 0; l && i < manager_n_hosts(m); i++)
                if (merge_host(l, m, manager_host_at(m, i)) == -ENOMEM)
                        return NULL;
        return TAKE_PTR(l);
}

/* The hosts' part: the last merge while nothing it was made of changed, else a new one. NULL: out of
 * memory. */
static ModelsList *cache_hosts(ModelsCache *cache, Manager *m) {
        ModelsCacheKey *keys;
        ModelsList *l;

        if (cache_fresh(cache, m))
                return cache->hosts;
        keys = calloc(MAX(manager_n_hosts(m), 1u), sizeof(ModelsCacheKey));
        l = keys ? merge_hosts(m) : NULL;
        if (!l) {
                free(keys);
                return NULL;
        }
        for (size_t i = 0; i < manager_n_hosts(m); i++)
                keys[i] = key_of(m, i);
        models_list_free(cache->hosts);
        free(cache->keys);
        cache->hosts = l;
        cache->keys = keys;
        cache->n_keys = manager_n_hosts(m);
        cache->config_serial = manager_config_serial(m);
        cache->memory_generation = model_memory_generation(manager_model_memory(m));
        cache->merges++;
        return l;
}

/* Each [Alias] as a model of modelgate's own: its policy, its targets and what each is doing, the one
 * it would pick now and why, and that target's status as its host lists it. Made anew on every request:
 * what it shows changes with every request under way. */
static ModelsList *merge_aliases(Manager *m, ModelsList *hosts) {
        const Config *c = manager_config(m);
        _cleanup_(models_list_freep) ModelsList *l = models_list_new();

        for (size_t i = 0; l && i < c->n_aliases; i++) {
                const AliasConf *a = &c->aliases[i];
                AliasTarget t[ALIAS_TARGETS_MAX];
                const char *why;
                ssize_t pick = manager_alias_pick(m, a, NULL, 0, t, &why);

                if (models_list_add_alias(l, hosts, a, t, pick, why) < 0)
                        return NULL;
        }
        return TAKE_PTR(l);
}

/* The answer as a blob: one of the recent ones with the same bytes, or a new one kept among them. NULL:
 * out of memory. */
static Blob *cache_share(ModelsCache *cache, const Buffer *out) {
        size_t n = buffer_size(out);
        Blob *b;

        for (size_t i = 0; i < MODELS_RECENT_MAX; i++)
                if (cache->recent[i] && cache->recent[i]->size == n &&
                    memcmp(cache->recent[i]->data, buffer_peek(out), n) == 0)
                        return blob_ref(cache->recent[i]);
        b = blob_new(buffer_peek(out), n);
        if (!b)
                return NULL;
        blob_unref(cache->recent[cache->recent_next]);
        cache->recent[cache->recent_next] = blob_ref(b);
        cache->recent_next = (cache->recent_next + 1) % MODELS_RECENT_MAX;
        return b;
}

static int merge_done_cb(sd_event_source *s, void *userdata) {
        ModelsMerge *mm = userdata;
        _cleanup_(models_list_freep) ModelsList *aliases = NULL;
        _cleanup_(buffer_done) Buffer out = {};
        ModelsList *hosts;

        (void)sd_event_source_set_enabled(s, SD_EVENT_OFF);
        hosts = cache_hosts(mm->cache, mm->manager);
        aliases = hosts ? merge_aliases(mm->manager, hosts) : NULL;
        if (!aliases || models_list_render(hosts, aliases, mm->allowed, mm->userdata, &out) < 0)
                return mm->done(mm, NULL, mm->userdata), 0; /* may free mm */
        _cleanup_(blob_unrefp) Blob *answer = cache_share(mm->cache, &out);
        mm->done(mm, answer, mm->userdata);
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

void models_cache_catalogs_ready(ModelsCache *cache, Manager *m) {
        assert(cache);
        if (all_ready(m))
                first_wait_end(&cache->first_wait);
}

ModelsMerge *models_merge_free(ModelsMerge *mm) {
        if (!mm)
                return NULL;
        sd_event_source_disable_unref(mm->timer);
        sd_event_source_disable_unref(mm->done_source);
        free(mm);
        return NULL;
}

int models_merge_start(Manager *m, ModelsCache *cache, ModelsAllowed allowed, ModelsMergeDone done,
                       void *userdata, ModelsMerge **ret) {
        ModelsMerge *mm;
        int r;

        mm = calloc(1, sizeof(ModelsMerge));
        if (!mm)
                return -ENOMEM;
        mm->manager = m;
        mm->cache = cache;
        mm->allowed = allowed;
        mm->done = done;
        mm->userdata = userdata;
        r = sd_event_add_defer(manager_event(m), &mm->done_source, merge_done_cb, mm);
        if (r < 0) {
                models_merge_free(mm);
                return r;
        }
        if (all_ready(m)) {
                first_wait_end(&cache->first_wait);
                *ret = mm;
                return 0;
        }
        /* the first request after a start waits (bounded) for the first read of each reachable host,
         * instead of answering an empty list; later ones only for the list of an engine that just came up,
         * never for a load, an unload or a feed event, which are in the snapshot at once
         * (rule:list-never-stale) */
        usec_t now;
        (void)sd_event_now(manager_event(m), CLOCK_MONOTONIC, &now);
        usec_t until = first_wait_begin(&cache->first_wait, now);
        if (until == 0) {
                *ret = mm; /* this spell has had its wait: the list as it is */
                return 0;
        }
        (void)sd_event_source_set_enabled(mm->done_source, SD_EVENT_OFF);
        r = sd_event_add_time(manager_event(m), &mm->timer, CLOCK_MONOTONIC, until, 0, merge_timer_cb, mm);
        if (r < 0) {
                models_merge_free(mm);
                return r;
        }
        *ret = mm;
        return 0;
}
