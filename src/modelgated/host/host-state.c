/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* One Host per [Host]: the requests that use or wait for its engines, what
 * the daemon reads of it, and its life across reloads. The Sched decides;
 * schedule_cb() carries its actions out, one at a time, through the switch
 * (host-switch.c) and answers to the waiting requests. A host with
 * engines owns a HostBus; every host owns its Catalog, whose news it passes
 * up to its owner with its own (HostCallbacks). */

#include <assert.h>
#include <fnmatch.h>
#include <stdio.h>
#include <string.h>

#include "modelgated/api/api-answer.h"
#include "modelgated/catalog/catalog.h"
#include "modelgated/host/host-internal.h"
#include "modelgated/records/metrics.h"
#include "shared/log.h"
#include "shared/strv.h"

/* Carries out what the scheduler decides, one action at a time: each may re-enter (a client that is
 * answered can go away, or ask again). */
static int schedule_cb(sd_event_source *s, void *userdata) {
        Host *h = userdata;
        SchedAction a;
        usec_t now = host_now(h), next;

        /* what it does may ask for another look: a new source then (host_schedule_later()) */
        if (s && s == h->schedule_source)
                h->schedule_source = sd_event_source_disable_unref(h->schedule_source);

        while (sched_next(&h->sched, now, &a)) {
                HostWaiter *w = a.req ? container_of(a.req, HostWaiter, req) : NULL;

                switch (a.type) {
                case SCHED_GO:
                        host_waiter_times(h, w);
                        w->ready(w, 0, NULL);
                        break;
                case SCHED_FAIL:
                        host_answer_failed(h, w, a.status);
                        break;
                case SCHED_START:
                        w->caused_switch = true;
                        h->target = a.engine;
                        metrics_switch(h->env.metrics, h->conf->name, engine_name(h, a.engine));
                        free(h->for_model);
                        h->for_model = host_waiter_log_words(w); /* for log lines only */
                        host_begin_switch(h);
                        break;
                case SCHED_STOP:
                        host_prompt_cache_idle_stop(h, a.engine, a.requested);
                        break;
                case SCHED_WAIT: {
                        _cleanup_free_ char *model = host_waiter_log_words(w);
                        char why[160];
                        if (host_waiter_reason(w, why, sizeof(why)) < 0)
                                snprintf(why, sizeof(why), "the running engine");
                        log_notice("host %s: %s waits before switching to %s: %s", h->conf->name,
                                   strna(model), engine_name(h, a.engine), why);
                        break;
                }
                case SCHED_UNHOLD:
                        h->held_reasons[a.engine] = mfree(h->held_reasons[a.engine]);
                        h->holds_serial++;
                        log_notice(
                                "host %s: engine %s no longer held: FailedStartHoldSec= is over, the next "
                                "request starts it",
                                h->conf->name, engine_name(h, a.engine));
                        break;
                case SCHED_ABANDON:
                        log_notice("host %s: switch to %s abandoned, no client is waiting", h->conf->name,
                                   engine_name(h, a.engine));
                        break;
                case SCHED_NONE:
                        break;
                }
        }
        next = sched_next_timer(&h->sched, now);
        if (next == USEC_INFINITY)
                (void)sd_event_source_set_enabled(h->sched_timer, SD_EVENT_OFF);
        else {
                (void)sd_event_source_set_time(h->sched_timer, next);
                (void)sd_event_source_set_enabled(h->sched_timer, SD_EVENT_ONESHOT);
        }
        host_prime_rearm(h);
        host_idle_timer_sync(h);
        host_changed(h);
        return 0;
}

void host_schedule_later(Host *h) {
        if (!h->schedule_source)
                (void)sd_event_add_defer(h->env.event, &h->schedule_source, schedule_cb, h);
}

static int sched_timer_cb(sd_event_source *s, uint64_t usec, void *userdata) {
        return schedule_cb(NULL, userdata);
}

/* The catalog's news: its owner's business, or the daemon's, passed up */

static void catalog_ready_cb(Catalog *c, void *userdata) {
        Host *h = userdata;

        if (h->env.cb->on_catalog_ready)
                h->env.cb->on_catalog_ready(h, h->env.userdata);
}

static void catalog_feed_cb(Catalog *c, const FeedEvent *e, void *userdata) {
        Host *h = userdata;

        if (h->env.cb->on_feed)
                h->env.cb->on_feed(h, e, h->env.userdata);
}

static void catalog_keys_learned_cb(Catalog *c, size_t i, void *userdata) {
        Host *h = userdata;

        if (h->env.cb->on_keys_learned)
                h->env.cb->on_keys_learned(h, h->env.userdata);
}

static void catalog_listed_cb(Catalog *c, size_t i, bool changed, void *userdata) {
        Host *h = userdata;

        if (h->env.cb->on_listed)
                h->env.cb->on_listed(h, i, changed, h->env.userdata);
}

static void catalog_http_cb(Catalog *c, const char *reason, void *userdata) {
        host_report_http(userdata, reason);
}

static const CatalogCallbacks catalog_callbacks = {
        .on_ready = catalog_ready_cb,
        .on_feed = catalog_feed_cb,
        .on_keys_learned = catalog_keys_learned_cb,
        .on_listed = catalog_listed_cb,
        .on_http = catalog_http_cb,
};

/* Life */

/* The engines of host conf in config, in the order of the file. */
static int collect_engines(const Config *config, const HostConf *conf, HostEngine **ret, size_t *ret_n,
                           char ***ret_units) {
        _cleanup_free_ HostEngine *engines = NULL;
        _cleanup_strv_free_ char **units = NULL;
        size_t n = 0;

        for (size_t i = 0; i < config->n_engines; i++) {
                const EngineConf *e = &config->engines[i];
                if (!streq(e->host, conf->name))
                        continue;
                HostEngine *x = realloc(engines, sizeof(HostEngine) * (n + 1));
                if (!x)
                        return -ENOMEM;
                engines = x;
                engines[n++] = (HostEngine){.conf = e, .url = e->url.text ? &e->url : &conf->url};
                if (ret_units && strv_extend(&units, e->unit) < 0)
                        return -ENOMEM;
        }
        *ret = TAKE_PTR(engines);
        *ret_n = n;
        if (ret_units)
                *ret_units = TAKE_PTR(units);
        return 0;
}

static SchedConfig sched_config_of(const Config *config, const HostConf *conf) {
        SchedConfig sc = {
                .hold_down = conf->hold_down_usec != CONF_USEC_UNSET ? conf->hold_down_usec
                                                                     : config->hold_down_usec,
                .idle_stop = conf->idle_stop_usec != CONF_USEC_UNSET ? conf->idle_stop_usec
                                                                     : config->idle_stop_usec,
                .wait_budget = conf->wait_budget_usec != CONF_USEC_UNSET ? conf->wait_budget_usec
                                                                         : config->wait_budget_usec,
                .failed_start_hold = conf->failed_start_hold_usec != CONF_USEC_UNSET
                                             ? conf->failed_start_hold_usec
                                             : config->failed_start_hold_usec,
                .shared = conf->shared,
        };
        /* 0 means "never" for both, as ExitIdleSec=0 does */
        if (sc.idle_stop == 0)
                sc.idle_stop = USEC_INFINITY;
        if (sc.wait_budget == 0)
                sc.wait_budget = USEC_INFINITY;
        return sc;
}

static CatalogConf catalog_conf_of(const Host *h) {
        return (CatalogConf){
                .host = h->conf,
                .engines = h->engines,
                .n_engines = h->n_engines,
                .poll_interval = h->config->poll_interval_usec,
        };
}

Host *host_new(const HostEnv *env, Config *config, const HostConf *conf) {
        assert(env);
        Host *h = calloc(1, sizeof(Host));
        _cleanup_strv_free_ char **units = NULL;
        int r;

        if (!h)
                return NULL;
        h->env = *env;
        h->conf = conf;
        h->config = config_ref(config);
        h->running = h->target = h->switch_from = h->last_switch_target = h->idle_timer.engine = -1;
        h->state = HOST_CONNECTING;

        if (collect_engines(config, conf, &h->engines, &h->n_engines, &units) < 0)
                goto fail;
        h->held_reasons = calloc(h->n_engines ?: 1, sizeof(char *));
        if (!h->held_reasons)
                goto fail;
        SchedConfig sc = sched_config_of(config, conf);
        if (sched_init(&h->sched, &sc, h->n_engines) < 0)
                goto fail;
        host_engines_idle_stop_set(h);
        r = sd_event_add_time(env->event, &h->sched_timer, CLOCK_MONOTONIC, USEC_INFINITY, 0, sched_timer_cb,
                              h);
        if (r >= 0)
                r = sd_event_add_time_relative(env->event, &h->deadline, CLOCK_MONOTONIC, 0, 0,
                                               host_deadline_cb, h);
        if (r >= 0)
                r = sd_event_add_time_relative(env->event, &h->probe_timer, CLOCK_MONOTONIC, 0, 0,
                                               host_probe_timer_cb, h);
        if (r >= 0)
                r = host_busy_init(h);
        if (r >= 0)
                r = host_shared_init(h);
        if (r >= 0)
                r = host_prompt_cache_init(h);
        if (r >= 0)
                r = sd_event_add_time(env->event, &h->prime_timer, CLOCK_MONOTONIC, USEC_INFINITY,
                                      USEC_PER_SEC / 10, host_prime_timer_cb, h);
        if (r < 0)
                goto fail;
        (void)sd_event_source_set_enabled(h->sched_timer, SD_EVENT_OFF);
        (void)sd_event_source_set_enabled(h->deadline, SD_EVENT_OFF);
        (void)sd_event_source_set_enabled(h->probe_timer, SD_EVENT_OFF);
        (void)sd_event_source_set_enabled(h->prime_timer, SD_EVENT_OFF);
        /* hold-downs and budgets are rules with numbers: no 250 ms coalescing */
        (void)sd_event_source_set_time_accuracy(h->sched_timer, USEC_PER_MSEC);
        CatalogConf cc = catalog_conf_of(h);
        if (catalog_new(env->event, env->pool, &cc, &catalog_callbacks, h, &h->catalog) < 0)
                goto fail;
        if (h->n_engines > 0) {
                char *watched[] = {h->lease_unit, NULL};
                if (host_bus_new(env->event, conf, units, watched, &host_bus_callbacks, h, &h->bus) < 0)
                        goto fail;
                /* until the bus says otherwise: requests must not be sent to an engine nobody started */
                h->bus_down = true;
                h->logged_down = -1;
                h->down_reason = strdup("connecting");
                sched_host_down(&h->sched, true); /* requests wait (budgets apply) until it is known */
        }
        return h;
fail:
        host_free(h);
        return NULL;
}

Host *host_free(Host *h) {
        if (!h)
                return NULL;
        const SchedQueue *queues[] = {&h->sched.waiting, &h->sched.in_flight, &h->sched.failed};
        for (size_t i = 0; i < ELEMENTSOF(queues); i++)
                LIST_FOREACH (requests, r, queues[i]->head)
                        container_of(r, HostWaiter, req)->host = NULL;
        while (h->riders) {
                HostWaiter *w = h->riders;
                LIST_REMOVE(riders, h->riders, w);
                w->riding = false;
                w->host = NULL;
        }
        sd_event_source_disable_unref(h->down_source);
        h->prime_upstream = upstream_cancel(h->prime_upstream);
        sched_done(&h->sched);
        host_switch_reset(h);
        sd_event_source_disable_unref(h->prime_timer);
        host_idle_timer_done(h);
        host_busy_done(h);
        host_shared_done(h);
        host_prompt_cache_done(h);
        h->catalog = catalog_free(h->catalog);
        h->bus = host_bus_free(h->bus);
        sd_event_source_disable_unref(h->schedule_source);
        sd_event_source_disable_unref(h->sched_timer);
        free(h->fail_message);
        free(h->last_error);
        free(h->unanswered);
        sd_event_source_disable_unref(h->deadline);
        sd_event_source_disable_unref(h->probe_timer);
        for (size_t i = 0; h->held_reasons && i < h->n_engines; i++)
                free(h->held_reasons[i]);
        free(h->held_reasons);
        free(h->engines);
        free(h->down_reason);
        strv_free(h->warnings);
        config_unref(h->config);
        free(h);
        return NULL;
}

bool host_can_take(const Host *h, const Config *config, const HostConf *conf) {
        assert(h);
        _cleanup_free_ HostEngine *engines = NULL;
        size_t n;

        if (!streq(h->conf->name, conf->name) || !streq(h->conf->url.text, conf->url.text) ||
            !streq_ptr(h->conf->bus, conf->bus) || !streq_ptr(h->conf->ssh_command, conf->ssh_command) ||
            !streq_ptr(h->conf->bus_path, conf->bus_path) || h->conf->shared != conf->shared)
                return false;
        if (collect_engines(config, conf, &engines, &n, NULL) < 0 || n != h->n_engines)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!streq(engines[i].conf->name, h->engines[i].conf->name) ||
                    !streq(engines[i].conf->unit, h->engines[i].conf->unit))
                        return false;
        return true;
}

int host_set_conf(Host *h, Config *config, const HostConf *conf) {
        assert(h);
        HostEngine *engines;
        size_t n;

        assert(host_can_take(h, config, conf));
        if (collect_engines(config, conf, &engines, &n, NULL) < 0)
                return -ENOMEM;
        bool busy_units_changed = !strv_equal(h->conf->busy_units, conf->busy_units);
        free(h->engines);
        h->engines = engines;
        h->conf = conf;
        h->sched.config = sched_config_of(config, conf);
        host_engines_idle_stop_set(h);
        if (h->bus)
                host_bus_set_conf(h->bus, conf);
        if (h->bus && busy_units_changed) /* rule:busy-followed */
                host_bus_busy_reload(h->bus);
        config_unref(h->config);
        h->config = config_ref(config);
        CatalogConf cc = catalog_conf_of(h);
        catalog_set_conf(h->catalog, &cc);
        host_prompt_cache_reloaded(h);
        host_schedule_later(h); /* a new hold-down, idle stop or budget may apply now */
        return 0;
}

bool host_drained(const Host *h) {
        assert(h);
        return h->sched.n_in_flight == 0 && h->sched.n_waiting == 0 && h->phase == PHASE_NONE;
}

void host_start(Host *h) {
        assert(h);
        if (h->bus)
                host_bus_connect(h->bus);
        catalog_start(h->catalog, h->bus_down);
}

const HostConf *host_conf(const Host *h) {
        assert(h);
        return h->conf;
}

HostState host_state(const Host *h) {
        assert(h);
        return h->state;
}

bool host_has_engines(const Host *h) {
        assert(h);
        return h->n_engines > 0;
}

size_t host_n_engines(const Host *h) {
        assert(h);
        return h->n_engines;
}

const HostEngine *host_engine(const Host *h, size_t i) {
        assert(h);
        return i < h->n_engines ? &h->engines[i] : NULL;
}

char *const *host_warnings(const Host *h) {
        assert(h);
        return h->warnings;
}

Catalog *host_catalog(const Host *h) {
        assert(h);
        return h->catalog;
}

ssize_t host_engine_up(const Host *h) {
        assert(h);
        return h->engine_up ? h->running : -1;
}

bool host_key_cold(const Host *h, const char *key) {
        assert(h);
        const CatalogList *l = catalog_snapshot(h->catalog);
        ssize_t i = l ? catalog_list_find(l, key) : -1;

        return i >= 0 && catalog_list_cold(l, (size_t)i);
}

ssize_t host_find_engine(const Host *h, const char *key, const char **ret_model) {
        assert(h);
        ssize_t i;
        int k;

        /* rule:usage-metrics: the model's name for /metrics is the Models= glob that matched, or the key
         * where the host lists it; never a client's string that nothing bounds */
        if (ret_model)
                *ret_model = NULL;
        for (size_t e = 0; e < h->n_engines; e++)
                STRV_FOREACH (g, h->engines[e].conf->models)
                        if (fnmatch(*g, key, 0) == 0) {
                                if (ret_model)
                                        *ret_model = *g;
                                return (ssize_t)e;
                        }
        i = catalog_engine_for_key(h->catalog, key);
        if (i >= 0) {
                if (ret_model)
                        *ret_model = key;
                return i;
        }
        if (h->running >= 0 && (k = catalog_lists(h->catalog, key)) != 0) {
                if (ret_model && k > 0)
                        *ret_model = key;
                return h->running; /* it lists the key now, or its list is not known yet */
        }
        return -1;
}

static void host_ride(Host *h, HostWaiter *w) {
        LIST_PREPEND(riders, h->riders, w);
        w->riding = true;
}

HostAcquire host_attach(Host *h, HostWaiter *w, HostDownFn down, const char *model, HostRefusal *ret) {
        if (host_refuse_if_down(h, -1, ret))
                return HOST_REFUSED;
        *w = (HostWaiter){.host = h, .engine = -1, .model = model, .down = down};
        host_ride(h, w);
        return HOST_ACQUIRED;
}

HostAcquire host_acquire(Host *h, size_t i, HostWaiter *w, HostReadyFn ready, HostDownFn down,
                         const char *model, HostRefusal *ret) {
        assert(i < h->n_engines);

        if (host_refuse_if_down(h, (ssize_t)i, ret) || host_refuse_if_held(h, i, ret) ||
            host_refuse_at_once(h, i, ret))
                return HOST_REFUSED;
        *w = (HostWaiter){.host = h, .engine = (ssize_t)i, .model = model, .ready = ready, .down = down};
        host_ride(h, w);
        if (sched_add(&h->sched, host_now(h), &w->req, i)) {
                host_changed(h);
                return HOST_ACQUIRED;
        }
        host_schedule_later(h);
        return HOST_QUEUED;
}

HostAcquire host_join(Host *h, size_t i, HostWaiter *w, HostDownFn down, const char *model,
                      HostRefusal *ret) {
        assert(i < h->n_engines);

        if (host_refuse_if_down(h, (ssize_t)i, ret))
                return HOST_REFUSED;
        *w = (HostWaiter){.host = h, .engine = (ssize_t)i, .model = model, .down = down};
        if (!sched_join(&h->sched, host_now(h), &w->req, i)) {
                *w = (HostWaiter){};
                ret->status = 404;
                snprintf(ret->message, sizeof(ret->message), "engine %s of host %s is not up",
                         h->engines[i].conf->name, h->conf->name);
                return HOST_REFUSED;
        }
        host_ride(h, w);
        host_changed(h);
        return HOST_ACQUIRED;
}

void host_release(HostWaiter *w) {
        assert(w);
        Host *h = w->host;

        if (!h)
                return;
        host_unride(h, w);
        w->host = NULL;
        if (w->engine < 0)
                return;
        sched_remove(&h->sched, host_now(h), &w->req);
        host_schedule_later(h);
}

int host_waiter_loading(const HostWaiter *w) {
        assert(w);
        const Host *h = w->host;
        const char *key = h && w->model ? startswith(w->model, h->conf->name) : NULL;

        /* the engine is up, and the router loads the model: how far it has got, as its feed says */
        if (!key || *key != '-' || w->engine != host_engine_up(h))
                return -ENOENT;
        return catalog_load_progress(h->catalog, key + 1);
}

int host_waiter_describe(const HostWaiter *w, char *buf, size_t l) {
        assert(w);
        const Host *h = w->host;
        int p;

        if (!h)
                return -ESTALE;
        p = host_waiter_loading(w);
        if (p >= 0) {
                snprintf(buf, l, "loading %s %d%%", w->model, p);
                return 1;
        }
        if (p == -ENODATA) {
                snprintf(buf, l, "loading %s", w->model);
                return 1;
        }
        if (w->req.state == SCHED_IN_FLIGHT) {
                snprintf(buf, l, "waiting for engine %s on %s to answer", engine_name(h, w->engine),
                         h->conf->name);
                return 0;
        }
        /* rule:engine-unanswered first: it is why the engine's start takes so long */
        char reason[160];
        const char *why = w->engine == h->target ? host_unanswered(h) : NULL;
        if (!why && host_waiter_reason(w, reason, sizeof(reason)) >= 0)
                why = reason;
        if (why)
                snprintf(buf, l, "waiting for engine %s on %s: %s", engine_name(h, w->engine), h->conf->name,
                         why);
        else
                snprintf(buf, l, "waiting for engine %s on %s, %u ahead", engine_name(h, w->engine),
                         h->conf->name, sched_ahead(&h->sched, &w->req));
        return 1;
}

unsigned host_in_flight(const Host *h) {
        assert(h);
        return h->sched.n_in_flight;
}

bool host_switch_pending(const Host *h) {
        assert(h);
        return sched_switch_pending(&h->sched);
}

unsigned host_waiting(const Host *h) {
        assert(h);
        return h->sched.n_waiting;
}

ssize_t host_running(const Host *h) {
        assert(h);
        return h->running;
}

const char *host_last_error(const Host *h) {
        assert(h);
        return h->last_error;
}

const char *host_down_reason(const Host *h) {
        assert(h);
        return h->bus_down || h->http_down ? h->down_reason : NULL;
}

usec_t host_hold_down_until(const Host *h) {
        assert(h);
        return sched_hold_down_until(&h->sched, host_now(h));
}

usec_t host_idle_stop_at(const Host *h) {
        assert(h);
        return h->phase == PHASE_NONE ? sched_idle_stop_at(&h->sched) : USEC_INFINITY;
}

int host_request_stop(Host *h) {
        assert(h);
        if (h->bus_down)
                return -ENOTCONN;
        if (h->running < 0 && h->phase == PHASE_NONE)
                return 0;
        if (h->phase != PHASE_NONE && h->phase != PHASE_IDLE_STOP)
                return -EBUSY; /* a switch is under way: its waiters decide */
        sched_request_stop(&h->sched);
        host_schedule_later(h);
        return 1;
}

usec_t host_up_since(const Host *h) {
        assert(h);
        return h->up_since;
}

usec_t host_held_until(const Host *h, size_t i) {
        assert(h);
        return i < h->n_engines ? sched_held_until(&h->sched, host_now(h), i) : 0;
}

const char *host_held_reason(const Host *h, size_t i) {
        assert(h);
        return host_held_until(h, i) > 0 ? h->held_reasons[i] : NULL;
}

unsigned host_holds_serial(const Host *h) {
        assert(h);
        return h->holds_serial;
}

bool host_unhold(Host *h, size_t i, const char *why) {
        assert(h);
        bool was = sched_unhold(&h->sched, host_now(h), i);

        if (h->held_reasons[i]) {
                h->held_reasons[i] = mfree(h->held_reasons[i]);
                h->holds_serial++;
        }
        if (was)
                log_notice("host %s: engine %s no longer held: %s, the next request starts it",
                           h->conf->name, engine_name(h, (ssize_t)i), why);
        host_schedule_later(h); /* its timer may go */
        return was;
}

int host_reset_failed(Host *h) {
        assert(h);
        int n = 0;

        for (size_t i = 0; i < h->n_engines; i++)
                n += host_unhold(h, i, "reset-failed");
        host_changed(h);
        return n;
}
