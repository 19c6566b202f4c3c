/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* rule:prompt-cache: an engine's prompt caches (llama.cpp's KV cache of each slot) outlive its stop.
 *   SAVE     before an engine is stopped for a switch (after nothing is in flight) or for being idle: its
 *            /models, each loaded model's /slots, and POST /slots/<id>?action=save for each slot that
 *            holds a prompt, into a file named by (host, engine, model, slot), so the files on the GPU
 *            host never grow beyond one set
 *   RESTORE  when the engine is up again, before it counts as up (so before any request reaches it):
 *            POST /slots/<id>?action=restore of what was saved, once; with Shared=, where the last save
 *            may be another instance's, of each slot of each loaded model by the name a save gives it
 *            (it walks /models and /slots as a save does)
 * Each is a step of the switch of its own (host_cache_step()): the waiting requests' words, /activity's
 * host event and /ui's timeline show it while it runs and after.
 * Each is bounded by PromptCacheSaveSec= (0: off): what is not done by then is abandoned and the switch
 * goes on. A 501 (a server without --slot-save-path) ends the asking for that engine, said once. A
 * restore that fails is a cache miss: the request that waits is never told. Apart from host-switch.c
 * because these are HTTP exchanges with their own answers and timer, as host-shared.c's are. */

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "modelgated/host/host-internal.h"
#include "modelgated/http/http-writer.h"
#include "modelgated/records/metrics.h"
#include "modelgated/catalog/catalog-list.h"
#include "modelgated/api/json-util.h"
#include "shared/log.h"
#include "shared/strv.h"

#define PC_BODY_MAX (16 * 1024 * 1024) /* a /slots answer has each slot's prompt text */
#define PC_MODELS_MAX 4096
#define PC_SLOTS_MAX 256

typedef struct Saved {
        char *model;
        unsigned slot;
} Saved;

typedef struct EngineSaves {
        Saved *v;
        size_t n;
        bool unsupported; /* it answered 501: no --slot-save-path (said once) */
} EngineSaves;

typedef enum PcStep {
        PC_IDLE,
        PC_MODELS,  /* GET /models */
        PC_SLOTS,   /* GET /slots?model=…&autoload=false */
        PC_SAVE,    /* POST /slots/<id>?action=save (or restore, when it walks) */
        PC_RESTORE, /* POST /slots/<id>?action=restore */
} PcStep;

typedef struct PromptCache {
        EngineSaves *engines; /* n_engines */
        PcStep step;
        ssize_t engine;
        void (*then)(Host *h);
        usec_t start;
        CatalogList *models;
        size_t model;
        unsigned slots[PC_SLOTS_MAX];
        size_t n_slots, slot;
        Saved *restoring; /* the list being restored, taken from engines[engine] */
        size_t n_restoring, restore_i;
        Upstream *up;
        Buffer body;
        int status;
        uint64_t done, tokens, bytes;
        sd_event_source *budget;
        ssize_t stop_engine; /* the idle stop the save is for */
        bool walk; /* Shared=: a restore that finds its slots as a save does, by the files' names */
        HostCacheStep shown; /* the step under way or the last one: what the waiting requests are told */
        HostCacheStep last;  /* the last one that found or did something, or was abandoned: /activity's */
        bool last_any;
} PromptCache;

static void pc_next(Host *h);

static void saved_free(Saved *v, size_t n) {
        for (size_t i = 0; i < n; i++)
                free(v[i].model);
        free(v);
}

/* tell: the owner hears of the step's end (not while the host is reset, or freed) */
static void pc_end(Host *h, const char *why, bool tell) {
        PromptCache *c = h->prompt_cache;
        void (*then)(Host * h) = c->then;
        bool restore = c->step == PC_RESTORE || c->walk;
        char t[FORMAT_TIMESPAN_MAX];

        c->up = upstream_cancel(c->up);
        buffer_done(&c->body);
        c->models = catalog_list_free(c->models);
        saved_free(c->restoring, c->n_restoring);
        c->restoring = NULL;
        c->n_restoring = 0;
        (void)sd_event_source_set_enabled(c->budget, SD_EVENT_OFF);
        if (c->done > 0)
                metrics_prompt_cache(h->env.metrics, h->conf->name, engine_name(h, c->engine), restore,
                                     c->done, c->bytes, host_now(h) - c->start);
        if (c->done > 0 || why)
                log_notice("host %s: engine %s: %s the prompt caches of %llu slot%s (%llu tokens, %llu KiB) "
                           "in %s%s%s%s%s",
                           h->conf->name, engine_name(h, c->engine), restore ? "restored" : "saved",
                           (unsigned long long)c->done, c->done == 1 ? "" : "s",
                           (unsigned long long)c->tokens, (unsigned long long)(c->bytes / 1024),
                           format_timespan(t, sizeof(t),
                                           (host_now(h) - c->start) / USEC_PER_MSEC * USEC_PER_MSEC)
                                   ?: "?",
                           restore                ? ""
                           : c->shown.before >= 0 ? ", before the switch to "
                                                  : ", before its idle stop",
                           restore || c->shown.before < 0 ? "" : engine_name(h, c->shown.before),
                           why ? "; " : "", why ?: "");
        c->step = PC_IDLE;
        c->walk = false;
        c->then = NULL;
        c->shown.end = MAX(host_now(h), c->shown.start + 1);
        c->shown.end_wall = now_usec(CLOCK_REALTIME);
        if (c->shown.found > 0 || c->shown.slots > 0 || why) {
                c->last = c->shown;
                c->last_any = true;
        }
        if (tell)
                host_changed(h);
        if (then)
                then(h);
}

static void pc_finish(Host *h, const char *why) {
        pc_end(h, why, /* tell= */ true);
}

static int pc_budget_cb(sd_event_source *s, uint64_t usec, void *userdata) {
        Host *h = userdata;
        pc_finish(h, "the rest was abandoned at PromptCacheSaveSec=");
        return 0;
}

static int pc_on_headers(Upstream *u, const UpstreamResponse *resp, void *userdata) {
        Host *h = userdata;
        h->prompt_cache->status = resp->status;
        return 0;
}

static int pc_on_body(Upstream *u, const char *p, size_t n, void *userdata) {
        Host *h = userdata;
        PromptCache *c = h->prompt_cache;

        if (c->body.end + n > PC_BODY_MAX)
                return -EFBIG;
        return buffer_append(&c->body, p, n);
}

static json_object *pc_json(PromptCache *c) {
        json_object *o = NULL;
        if (c->status != 200 || json_parse(NULL, c->body.data ? c->body.data + c->body.start : "",
                                           c->body.end - c->body.start, &o) < 0)
                return NULL;
        return o;
}

/* The slots of the model asked about that hold a prompt: [{"id":0,"n_prompt_tokens":3404,…},…]; every slot
 * for a restore that walks (an engine just up holds none) */
static void pc_read_slots(PromptCache *c) {
        _cleanup_(json_object_putp) json_object *root = pc_json(c);

        c->n_slots = c->slot = 0;
        if (!json_object_is_type(root, json_type_array))
                return;
        for (size_t i = 0; i < json_object_array_length(root) && c->n_slots < PC_SLOTS_MAX; i++) {
                json_object *s = json_object_array_get_idx(root, i);
                int64_t id, n;
                if (json_get_int(s, "id", &id) && id >= 0 && id < 65536 &&
                    (c->walk || (json_get_int(s, "n_prompt_tokens", &n) && n > 0)))
                        c->slots[c->n_slots++] = (unsigned)id;
        }
}

/* The answer to a save or restore: {"n_saved"|"n_restored": N, "n_written"|"n_read": B, …}; true: done */
static bool pc_read_action(Host *h) {
        PromptCache *c = h->prompt_cache;
        _cleanup_(json_object_putp) json_object *root = pc_json(c);
        bool save = c->step == PC_SAVE && !c->walk;
        int64_t n = 0, b = 0;

        if (!root)
                return false;
        (void)json_get_int(root, save ? "n_saved" : "n_restored", &n);
        (void)json_get_int(root, save ? "n_written" : "n_read", &b);
        c->done++;
        c->tokens += (uint64_t)MAX(n, (int64_t)0);
        c->bytes += (uint64_t)MAX(b, (int64_t)0);
        c->shown.slots = c->done;
        c->shown.tokens = c->tokens;
        c->shown.bytes = c->bytes;
        host_changed(h);
        return true;
}

static void pc_remember(Host *h, const char *model, unsigned slot) {
        EngineSaves *e = &h->prompt_cache->engines[h->prompt_cache->engine];
        Saved *v = reallocarray(e->v, e->n + 1, sizeof(Saved));
        char *m = strdup(model);

        if (!v || !m) {
                free(m);
                if (v)
                        e->v = v;
                return;
        }
        e->v = v;
        e->v[e->n++] = (Saved){m, slot};
}

static void pc_on_complete(Upstream *u, void *userdata) {
        Host *h = userdata;
        PromptCache *c = h->prompt_cache;

        c->up = NULL;
        if (c->status == 501 && (c->step == PC_SAVE || c->step == PC_RESTORE)) {
                /* rule:prompt-cache: said once per engine (until a reload) */
                c->engines[c->engine].unsupported = true;
                log_notice("host %s: engine %s does not save prompt caches (it answered 501: start it with "
                           "--slot-save-path DIR, or set PromptCacheSaveSec=0)",
                           h->conf->name, engine_name(h, c->engine));
                pc_finish(h, NULL);
                return;
        }
        switch (c->step) {
        case PC_MODELS:
                if (c->status != 200 || catalog_list_parse(c->body.data ? c->body.data + c->body.start : "",
                                                           c->body.end - c->body.start, PC_MODELS_MAX,
                                                           PC_BODY_MAX, &c->models) < 0) {
                        pc_finish(h, NULL);
                        return;
                }
                c->model = 0;
                c->n_slots = c->slot = 0;
                break;
        case PC_SLOTS:
                pc_read_slots(c);
                if (c->n_slots > 0) {
                        c->shown.found += c->n_slots;
                        host_changed(h);
                }
                if (c->n_slots == 0)
                        c->model++;
                break;
        case PC_SAVE:
                if (c->walk) {
                        if (!pc_read_action(h))
                                log_info("host %s: engine %s: the prompt cache of slot %u was not restored "
                                         "(%d): a cache miss",
                                         h->conf->name, engine_name(h, c->engine), c->slots[c->slot],
                                         c->status);
                } else if (pc_read_action(h))
                        pc_remember(h, catalog_list_id(c->models, c->model), c->slots[c->slot]);
                else
                        log_info("host %s: engine %s: the prompt cache of slot %u could not be saved (%d)",
                                 h->conf->name, engine_name(h, c->engine), c->slots[c->slot], c->status);
                if (++c->slot >= c->n_slots) {
                        c->n_slots = c->slot = 0;
                        c->model++;
                }
                break;
        case PC_RESTORE:
                if (!pc_read_action(h))
                        /* a file gone, another build's format, a context too small: a cache miss */
                        log_info("host %s: engine %s: the prompt cache of slot %u was not restored (%d): a "
                                 "cache miss",
                                 h->conf->name, engine_name(h, c->engine), c->restoring[c->restore_i].slot,
                                 c->status);
                c->restore_i++;
                break;
        case PC_IDLE:
                return;
        }
        buffer_done(&c->body);
        pc_next(h);
}

static void pc_on_error(Upstream *u, int error, bool started, void *userdata) {
        Host *h = userdata;
        PromptCache *c = h->prompt_cache;

        c->up = NULL;
        log_info("host %s: engine %s: prompt cache %s: %s", h->conf->name, engine_name(h, c->engine),
                 c->step == PC_RESTORE || c->walk ? "restore" : "save", upstream_strerror(error));
        pc_finish(h, NULL);
}

static const UpstreamCallbacks pc_callbacks = {
        .on_headers = pc_on_headers,
        .on_body = pc_on_body,
        .on_complete = pc_on_complete,
        .on_error = pc_on_error,
};

static void url_escape(char *buf, size_t l, const char *s) {
        static const char hex[] = "0123456789ABCDEF";
        size_t k = 0;

        for (const unsigned char *p = (const unsigned char *)s; *p && k + 4 < l; p++)
                if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                    strchr("-._~", *p))
                        buf[k++] = (char)*p;
                else {
                        buf[k++] = '%';
                        buf[k++] = hex[*p >> 4];
                        buf[k++] = hex[*p & 15];
                }
        buf[k] = 0;
}

/* modelgate-<engine>-<hash of host, engine and model>-<slot>.slot: fixed per (engine, model, slot), and only
 * the characters llama.cpp's fs_validate_filename() takes */
static void pc_filename(const Host *h, ssize_t engine, const char *model, unsigned slot, char *buf,
                        size_t l) {
        uint64_t x = 14695981039346656037ULL;
        const char *parts[] = {h->conf->name, engine_name(h, engine), model};
        char name[65];
        size_t k = 0;

        for (size_t i = 0; i < ELEMENTSOF(parts); i++)
                for (const unsigned char *p = (const unsigned char *)parts[i];; p++) {
                        x = (x ^ *p) * 1099511628211ULL;
                        if (!*p)
                                break;
                }
        for (const char *p = engine_name(h, engine); *p && k < sizeof(name) - 1; p++)
                name[k++] = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                                            (*p >= '0' && *p <= '9') || *p == '-' || *p == '_'
                                    ? *p
                                    : '_';
        name[k] = 0;
        snprintf(buf, l, "modelgate-%s-%016llx-%u.slot", name, (unsigned long long)x, slot);
}

static int pc_send(Host *h, const char *method, const char *path, const char *body) {
        PromptCache *c = h->prompt_cache;
        const HttpUrl *url = h->engines[c->engine].url;
        Buffer req = {};
        char length[32];
        int r;

        c->status = 0;
        buffer_done(&c->body);
        snprintf(length, sizeof(length), "%zu", body ? strlen(body) : 0);
        if (body)
                r = http_write_request_head(&req, method, url->base_path, path, url->authority, "User-Agent",
                                            "modelgate", "Content-Type", "application/json",
                                            "Content-Length", length, NULL);
        else
                r = http_write_request_head(&req, method, url->base_path, path, url->authority, "User-Agent",
                                            "modelgate", NULL);
        if (r >= 0 && body)
                r = buffer_append(&req, body, strlen(body));
        if (r >= 0)
                r = upstream_start(h->env.pool, url, &req, false, &pc_callbacks, h, &c->up);
        buffer_done(&req);
        return r;
}

/* POST /slots/<slot>?action=… with {"filename": …, "model": …}; in router mode "model" names the child */
static int pc_send_action(Host *h, const char *action, const char *model, unsigned slot) {
        _cleanup_(json_object_putp) json_object *o = json_object_new_object();
        char path[128], file[160];

        if (!o)
                return -ENOMEM;
        pc_filename(h, h->prompt_cache->engine, model, slot, file, sizeof(file));
        /* a save never loads a model that went meanwhile; a restore loads the one it is for */
        snprintf(path, sizeof(path), "/slots/%u?action=%s%s", slot, action,
                 streq(action, "save") ? "&autoload=false" : "");
        if (json_object_object_add(o, "filename", json_object_new_string(file)) < 0 ||
            json_object_object_add(o, "model", json_object_new_string(model)) < 0)
                return -ENOMEM;
        return pc_send(h, "POST", path, json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
}

static void pc_next(Host *h) {
        PromptCache *c = h->prompt_cache;
        char path[1024], id[900];
        int r;

        if (c->step == PC_RESTORE) {
                if (c->restore_i >= c->n_restoring) {
                        pc_finish(h, NULL);
                        return;
                }
                r = pc_send_action(h, "restore", c->restoring[c->restore_i].model,
                                   c->restoring[c->restore_i].slot);
        } else if (!c->models) {
                c->step = PC_MODELS;
                r = pc_send(h, "GET", "/models", NULL);
        } else {
                while (c->model < catalog_list_size(c->models) && catalog_list_cold(c->models, c->model))
                        c->model++;
                if (c->model >= catalog_list_size(c->models)) {
                        pc_finish(h, NULL);
                        return;
                }
                if (c->n_slots == 0) {
                        /* ?model=: a router's per-model slots, without loading a model that just went */
                        c->step = PC_SLOTS;
                        url_escape(id, sizeof(id), catalog_list_id(c->models, c->model));
                        snprintf(path, sizeof(path), "/slots?model=%s&autoload=false", id);
                        r = pc_send(h, "GET", path, NULL);
                } else {
                        c->step = PC_SAVE;
                        r = pc_send_action(h, c->walk ? "restore" : "save",
                                           catalog_list_id(c->models, c->model), c->slots[c->slot]);
                }
        }
        if (r < 0)
                pc_finish(h, NULL);
}

/* walk: a restore that finds its slots as a save does (Shared=) */
static bool pc_begin(Host *h, ssize_t engine, PcStep step, bool walk, void (*then)(Host *h)) {
        PromptCache *c = h->prompt_cache;
        usec_t budget;

        if (!c || engine < 0 || (size_t)engine >= h->n_engines || c->step != PC_IDLE)
                return false;
        budget = h->engines[engine].conf->prompt_cache_save_usec;
        if (budget == 0 || budget == USEC_INFINITY || c->engines[engine].unsupported)
                return false;
        c->step = step;
        c->walk = walk;
        c->engine = engine;
        c->then = then;
        c->start = host_now(h);
        c->done = c->tokens = c->bytes = 0;
        c->models = catalog_list_free(c->models);
        /* a step of the switch of its own: the waiting requests' words, /activity and /ui show it */
        c->shown = (HostCacheStep){.restore = step == PC_RESTORE || walk,
                                   .engine = engine,
                                   .before = step == PC_RESTORE || walk ? -1 : h->target,
                                   .start = c->start,
                                   .start_wall = now_usec(CLOCK_REALTIME)};
        host_changed(h);
        (void)sd_event_source_set_time_relative(c->budget, budget);
        (void)sd_event_source_set_enabled(c->budget, SD_EVENT_ONESHOT);
        return true;
}

void host_prompt_cache_save(Host *h, ssize_t engine, void (*then)(Host *h)) {
        assert(h && then);
        /* a save never delays a stop for another reason: an engine that is not up has nothing to give */
        if (engine != h->running || !h->engine_up ||
            !pc_begin(h, engine, PC_MODELS, /* walk= */ false, then)) {
                then(h);
                return;
        }
        /* what is saved now replaces what was: the same files */
        EngineSaves *e = &h->prompt_cache->engines[engine];
        saved_free(e->v, e->n);
        e->v = NULL;
        e->n = 0;
        pc_next(h);
}

void host_prompt_cache_restore(Host *h, ssize_t engine, void (*then)(Host *h)) {
        assert(h && then);
        PromptCache *c = h->prompt_cache;

        if (h->adopting || !c || engine < 0 || (size_t)engine >= h->n_engines) {
                then(h);
                return;
        }
        if (h->conf->shared) {
                /* rule:prompt-cache: another instance may have saved last, and the names are the files':
                 * each slot of each model the engine has loaded, by the name a save gives it. The
                 * instance that started the engine restores; the others adopt it, and do not. */
                saved_free(c->engines[engine].v, c->engines[engine].n);
                c->engines[engine].v = NULL;
                c->engines[engine].n = 0;
                if (!pc_begin(h, engine, PC_MODELS, /* walk= */ true, then)) {
                        then(h);
                        return;
                }
                pc_next(h);
                return;
        }
        if (c->engines[engine].n == 0 || !pc_begin(h, engine, PC_RESTORE, /* walk= */ false, then)) {
                then(h);
                return;
        }
        /* restored once: the slots move on from here, and the next save says what they hold then */
        c->restoring = c->engines[engine].v;
        c->n_restoring = c->engines[engine].n;
        c->restore_i = 0;
        c->shown.found = c->n_restoring;
        c->engines[engine].v = NULL;
        c->engines[engine].n = 0;
        pc_next(h);
}

const HostCacheStep *host_cache_step(const Host *h) {
        assert(h);
        return h->prompt_cache && h->prompt_cache->step != PC_IDLE ? &h->prompt_cache->shown : NULL;
}

const HostCacheStep *host_cache_step_shown(const Host *h) {
        assert(h);
        const PromptCache *c = h->prompt_cache;

        if (c && c->step != PC_IDLE && (c->shown.found > 0 || c->shown.slots > 0))
                return &c->shown;
        return c && c->last_any ? &c->last : NULL;
}

void host_prompt_cache_reset(Host *h) {
        PromptCache *c = h->prompt_cache;

        if (!c || c->step == PC_IDLE)
                return;
        c->then = NULL; /* what the switch waited for is gone with it */
        pc_end(h, "cancelled", /* tell= */ false);
}

char **host_prompt_cache_unsupported(const Host *h) {
        char **l = calloc(1, sizeof(char *));

        for (size_t i = 0; l && h->prompt_cache && i < h->n_engines; i++)
                if (h->prompt_cache->engines[i].unsupported && strv_extend(&l, engine_name(h, i)) < 0) {
                        strv_free(l);
                        return NULL;
                }
        return l;
}

void host_prompt_cache_reloaded(Host *h) {
        for (size_t i = 0; h->prompt_cache && i < h->n_engines; i++)
                h->prompt_cache->engines[i].unsupported = false;
}

int host_prompt_cache_init(Host *h) {
        PromptCache *c = calloc(1, sizeof(PromptCache));
        int r;

        if (!c)
                return -ENOMEM;
        h->prompt_cache = c;
        c->engine = -1;
        c->engines = calloc(MAX(h->n_engines, (size_t)1), sizeof(EngineSaves));
        if (!c->engines)
                return -ENOMEM;
        r = sd_event_add_time(h->env.event, &c->budget, CLOCK_MONOTONIC, USEC_INFINITY, USEC_PER_MSEC,
                              pc_budget_cb, h);
        if (r < 0)
                return r;
        (void)sd_event_source_set_enabled(c->budget, SD_EVENT_OFF);
        return 0;
}

void host_prompt_cache_done(Host *h) {
        PromptCache *c = h->prompt_cache;

        if (!c)
                return;
        c->up = upstream_cancel(c->up);
        buffer_done(&c->body);
        c->models = catalog_list_free(c->models);
        saved_free(c->restoring, c->n_restoring);
        for (size_t i = 0; c->engines && i < h->n_engines; i++)
                saved_free(c->engines[i].v, c->engines[i].n);
        free(c->engines);
        sd_event_source_disable_unref(c->budget);
        free(c);
        h->prompt_cache = NULL;
}

void host_engine_restore_then_up(Host *h) {
        host_prompt_cache_restore(h, h->target, host_engine_is_up);
}

static void pc_stop_after_save(Host *h) {
        host_idle_stop(h, h->prompt_cache->stop_engine, false);
}

void host_prompt_cache_idle_stop(Host *h, ssize_t engine, bool requested) {
        assert(h);
        if (requested || !h->prompt_cache) {
                host_idle_stop(h, engine, requested);
                return;
        }
        /* shown as the stop it is part of while it saves; the scheduler holds the engine's requests */
        h->phase = PHASE_IDLE_STOP;
        h->target = -1;
        host_update_state(h);
        h->prompt_cache->stop_engine = engine;
        host_prompt_cache_save(h, engine, pc_stop_after_save);
}
