/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* One Host per [Host]. A host with engines owns a HostBus and runs at most
 * one switch at a time, in phases:
 *   BUSY_CHECK  BusyUnits= active? (ListUnitsByPatterns)
 *   PORT_PROBE  no engine unit runs, yet something answers on the engine's port?
 *   STOPPING    StopUnit(replace) of each other running engine unit, to its JobRemoved
 *   STARTING    StartUnit(fail) of the target, to its JobRemoved, then a fresh read of the
 *               unit: "done" can hide a condition refusal or an instant death (SPEC §5)
 *   HEALTH      GET /health until 200, bounded by StartTimeoutSec= (rule 7)
 * A refusal (423) or failure (502) ends the switch and answers everyone who
 * waited for that engine. The same HEALTH phase adopts an engine found
 * running when the bus comes up. */

#include <assert.h>
#include <fnmatch.h>
#include <stdio.h>
#include <string.h>

#include "modelgated/catalog.h"
#include "modelgated/host-bus.h"
#include "modelgated/host.h"
#include "modelgated/manager.h"
#include "modelgated/metrics.h"
#include "modelgated/upstream.h"
#include "shared/log.h"
#include "shared/strv.h"

#define HEALTH_PROBE_INTERVAL_USEC (250 * USEC_PER_MSEC)
#define HEALTH_PROBE_TIMEOUT_USEC (2 * USEC_PER_SEC)
#define PORT_PROBE_TIMEOUT_USEC (2 * USEC_PER_SEC)

typedef enum SwitchPhase {
        PHASE_NONE,
        PHASE_BUSY_CHECK,
        PHASE_PORT_PROBE,
        PHASE_STOPPING,
        PHASE_STARTING,
        PHASE_HEALTH,
        PHASE_GIVING_UP, /* stopping an engine that never became healthy */
        PHASE_IDLE_STOP, /* stopping an engine nobody used for IdleStopSec= */
} SwitchPhase;

struct Host {
        Manager *manager;
        Config *config; /* the configuration conf belongs to: a reload keeps it while this host lives */
        const HostConf *conf;
        HostEngine *engines;
        size_t n_engines;
        HostBus *bus;

        HostState state;
        bool bus_down;
        char *down_reason;
        bool http_down;
        int logged_down; /* -1: nothing logged yet, so the first outcome is */

        ssize_t running; /* the engine whose unit runs, -1 for none */
        bool engine_up;  /* and whose /health answered 200 */
        usec_t up_since;
        bool busy;           /* the last switch was refused */
        bool stop_requested; /* the stop in progress is StopEngine()'s */

        SwitchPhase phase;
        ssize_t target;
        bool adopting;
        char *for_model;
        usec_t switch_start;
        Upstream *probe;
        int probe_status;
        sd_event_source *deadline, *probe_timer;

        Sched sched;
        Catalog *catalog;
        char *fail_message; /* for the requests a failed switch answers */
        char *last_error;   /* LastError: the last failed switch or the last reason to be down */
        char **warnings;
        sd_event_source *schedule_source, *sched_timer;

        /* WarmupRequest=: sent after /health answers 200, before the engine counts as up; and again after
         * PrimeAfterIdleSec= without traffic, as a request in flight of modelgate's own */
        Upstream *warmup, *prime_upstream;
        usec_t warmup_start;
        SchedRequest prime;
        bool priming;
        usec_t primed_for; /* the idle period (its start) a prime was sent for */
        sd_event_source *prime_timer;
};

static const char *const host_state_table[_HOST_STATE_MAX] = {
        [HOST_DOWN] = "down",       [HOST_IDLE] = "idle",           [HOST_STARTING] = "starting",
        [HOST_SERVING] = "serving", [HOST_SWITCHING] = "switching", [HOST_BUSY] = "busy",
};

const char *host_state_to_string(HostState s) {
        return s >= 0 && s < _HOST_STATE_MAX ? host_state_table[s] : NULL;
}

static void host_begin_switch(Host *h);
static void phase_stop_others(Host *h);
static void phase_health(Host *h, bool adopting);

static const char *engine_name(const Host *h, ssize_t i) {
        return i >= 0 && (size_t)i < h->n_engines ? h->engines[i].conf->name : "-";
}

static const char *engine_unit(const Host *h, ssize_t i) {
        return i >= 0 && (size_t)i < h->n_engines ? h->engines[i].conf->unit : "-";
}

static void host_update_state(Host *h) {
        HostState s;

        if (h->bus_down || h->http_down)
                s = HOST_DOWN;
        else if (h->phase != PHASE_NONE)
                /* another engine still holds the GPU, or is being stopped: a switch; else a start */
                s = h->phase == PHASE_STOPPING || h->phase == PHASE_GIVING_UP ||
                                    (h->running >= 0 && h->running != h->target)
                            ? HOST_SWITCHING
                            : HOST_STARTING;
        else if (h->running >= 0 && h->engine_up)
                s = HOST_SERVING;
        else if (h->busy)
                s = HOST_BUSY;
        else
                s = HOST_IDLE;
        if (s != h->state)
                log_debug("host %s: state %s → %s", h->conf->name, host_state_to_string(h->state),
                          host_state_to_string(s));
        h->state = s;

        /* SPEC §6: going down and coming back are logged once each, with the reason */
        int down = h->bus_down || h->http_down;
        if (h->bus && h->bus_down && streq_ptr(h->down_reason, "connecting"))
                return; /* the first connection is not an outcome yet */
        if (down && h->logged_down != 1) {
                log_warning("host %s down: %s", h->conf->name, h->down_reason ?: "unreachable");
                if (h->catalog)
                        catalog_host_state(h->catalog, h->down_reason ?: "unreachable");
        } else if (!down && h->logged_down != 0) {
                log_notice("host %s up", h->conf->name);
                if (h->catalog)
                        catalog_host_state(h->catalog, NULL);
        }
        h->logged_down = down;
        if (down && h->down_reason && !streq(h->down_reason, "connecting"))
                (void)free_and_strdup(&h->last_error, h->down_reason);
        manager_changed(h->manager);
}

static void host_schedule_later(Host *h) {
        (void)sd_event_source_set_enabled(h->schedule_source, SD_EVENT_ONESHOT);
}

static void switch_reset(Host *h) {
        h->phase = PHASE_NONE;
        h->target = -1;
        h->adopting = false;
        h->for_model = mfree(h->for_model);
        h->probe = upstream_cancel(h->probe);
        h->warmup = upstream_cancel(h->warmup);
        (void)sd_event_source_set_enabled(h->deadline, SD_EVENT_OFF);
        (void)sd_event_source_set_enabled(h->probe_timer, SD_EVENT_OFF);
        if (h->bus)
                host_bus_forget(h->bus, h);
}

/* The switch ends without the engine: everyone waiting for it gets 'status'. */
static void switch_fail(Host *h, int status, const char *message) {
        /* a refusal before anything was stopped leaves the running engine as it was */
        ssize_t still = h->engine_up && h->running >= 0 && h->running != h->target ? h->running : -1;

        switch_reset(h);
        h->busy = status == 423;
        free(h->fail_message);
        h->fail_message = strdup(message);
        (void)free_and_strdup(&h->last_error, message);
        sched_switch_failed(&h->sched, now_usec(CLOCK_MONOTONIC), status, still);
        if (still < 0) {
                h->running = -1;
                h->engine_up = false;
                catalog_engine_down(h->catalog);
        }
        host_update_state(h);
        host_schedule_later(h);
}

static void switch_refuse_busy(Host *h, const char *reason) {
        char msg[512];

        log_warning("host %s: GPU busy (%s), switch to %s refused", h->conf->name, reason,
                    engine_name(h, h->target));
        metrics_refusal(manager_metrics(h->manager), h->conf->name);
        snprintf(msg, sizeof(msg),
                 "the GPU of host '%s' is in use by someone else (%s), so modelgate did not switch it to "
                 "engine '%s'; ask again once that work is done",
                 h->conf->name, reason, engine_name(h, h->target));
        switch_fail(h, 423, msg);
}

static void switch_fail_engine(Host *h, const char *what) {
        char msg[512];

        log_error("host %s: engine %s (%s) %s", h->conf->name, engine_name(h, h->target),
                  engine_unit(h, h->target), what);
        snprintf(msg, sizeof(msg), "engine '%s' of host '%s' (unit %s) %s", engine_name(h, h->target),
                 h->conf->name, engine_unit(h, h->target), what);
        switch_fail(h, 502, msg);
}

static void engine_is_up(Host *h) {
        char t[32];
        usec_t took = now_usec(CLOCK_MONOTONIC) - h->switch_start;

        snprintf(t, sizeof(t), "%llu.%01llus", (unsigned long long)(took / USEC_PER_SEC),
                 (unsigned long long)(took % USEC_PER_SEC / (100 * USEC_PER_MSEC)));
        if (h->adopting)
                log_notice("host %s: engine %s adopted, it was already running", h->conf->name,
                           engine_name(h, h->target));
        else
                log_notice("host %s: engine %s up after %s", h->conf->name, engine_name(h, h->target), t);
        h->running = h->target;
        h->engine_up = true;
        h->busy = false;
        h->up_since = now_usec(CLOCK_MONOTONIC);
        sched_engine_up(&h->sched, h->up_since, (size_t)h->target);
        catalog_engine_up(h->catalog, (size_t)h->target);
        switch_reset(h);
        host_update_state(h);
        host_schedule_later(h);
}

/* HEALTH: GET /health until 200 */

static int probe_on_headers(Upstream *u, const UpstreamResponse *resp, void *userdata) {
        Host *h = userdata;
        h->probe_status = resp->status;
        return 0;
}

static void probe_again(Host *h) {
        (void)sd_event_source_set_time_relative(h->probe_timer, HEALTH_PROBE_INTERVAL_USEC);
        (void)sd_event_source_set_enabled(h->probe_timer, SD_EVENT_ONESHOT);
}

static int warmup_send(Host *h, size_t engine, const UpstreamCallbacks *cb);

static void warmup_done(Host *h, const char *error) {
        usec_t took = now_usec(CLOCK_MONOTONIC) - h->warmup_start;
        char t[FORMAT_TIMESPAN_MAX];

        h->warmup = NULL;
        if (error)
                log_warning("host %s: warm-up request of engine %s failed (%s); it serves all the same",
                            h->conf->name, engine_name(h, h->target), error);
        else
                log_info("host %s: engine %s warmed up in %s", h->conf->name, engine_name(h, h->target),
                         format_timespan(t, sizeof(t), took / USEC_PER_MSEC * USEC_PER_MSEC) ?: "?");
        engine_is_up(h);
}

static int warmup_on_headers(Upstream *u, const UpstreamResponse *resp, void *userdata) {
        Host *h = userdata;
        h->probe_status = resp->status;
        return 0;
}

/* NULL for a 2xx answer to a warm-up, else what was wrong with it */
static const char *warmup_error(const Host *h, char what[static 32]) {
        if (h->probe_status / 100 == 2)
                return NULL;
        snprintf(what, 32, "it answered %d", h->probe_status);
        return what;
}

static void warmup_on_complete(Upstream *u, void *userdata) {
        char what[32];
        warmup_done(userdata, warmup_error(userdata, what));
}

static void warmup_on_error(Upstream *u, int error, bool started, void *userdata) {
        warmup_done(userdata, upstream_strerror(error));
}

static const UpstreamCallbacks warmup_callbacks = {
        .on_headers = warmup_on_headers,
        .on_complete = warmup_on_complete,
        .on_error = warmup_on_error,
};

int warmup_send(Host *h, size_t engine, const UpstreamCallbacks *cb) {
        const EngineConf *e = h->engines[engine].conf;
        const HttpUrl *url = h->engines[engine].url;
        Buffer req = {};
        Upstream **slot = cb == &warmup_callbacks ? &h->warmup : &h->prime_upstream;
        int r;

        h->probe_status = 0;
        if (buffer_printf(
                    &req,
                    "POST %s/v1/chat/completions HTTP/1.1\r\nHost: %s\r\nUser-Agent: modelgate (warm-up)\r\n"
                    "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                    url->base_path, url->authority, e->warmup_size) < 0 ||
            buffer_append(&req, e->warmup_body, e->warmup_size) < 0) {
                buffer_done(&req);
                return -ENOMEM;
        }
        r = upstream_start(manager_pool(h->manager), url, &req, false, cb, h, slot);
        buffer_done(&req);
        if (r < 0)
                return r;
        (void)upstream_set_idle_timeout(*slot, manager_config(h->manager)->upstream_idle_timeout_usec);
        return 0;
}

/* PrimeAfterIdleSec=: the warm-up again after that long without traffic, once per idle period. It is a
 * request in flight like any other (a switch waits for it), but not traffic for the idle stop. */
static void prime_finished(Host *h, const char *error) {
        h->prime_upstream = NULL;
        if (h->priming) {
                sched_remove(&h->sched, now_usec(CLOCK_MONOTONIC), &h->prime);
                h->priming = false;
        }
        if (error)
                log_warning("host %s: priming engine %s failed: %s", h->conf->name,
                            engine_name(h, h->running), error);
        else if (h->running >= 0) {
                char t[FORMAT_TIMESPAN_MAX];
                log_info("host %s: engine %s primed after %s idle (PrimeAfterIdleSec=)", h->conf->name,
                         engine_name(h, h->running),
                         format_timespan(t, sizeof(t), h->engines[h->running].conf->prime_after_idle_usec)
                                 ?: "?");
        }
        host_schedule_later(h);
}

static void prime_on_complete(Upstream *u, void *userdata) {
        char what[32];
        prime_finished(userdata, warmup_error(userdata, what));
}

static void prime_on_error(Upstream *u, int error, bool started, void *userdata) {
        prime_finished(userdata, upstream_strerror(error));
}

static const UpstreamCallbacks prime_callbacks = {
        .on_headers = warmup_on_headers,
        .on_complete = prime_on_complete,
        .on_error = prime_on_error,
};

/* When the running engine is due for a prime, or USEC_INFINITY. */
static usec_t prime_at(const Host *h) {
        usec_t idle_since;

        if (!h->engine_up || h->running < 0 || h->phase != PHASE_NONE || h->priming ||
            h->sched.n_in_flight > 0 || h->sched.n_waiting > 0)
                return USEC_INFINITY;
        const EngineConf *e = h->engines[h->running].conf;
        if (!e->warmup_body || e->prime_after_idle_usec == 0 || e->prime_after_idle_usec == USEC_INFINITY)
                return USEC_INFINITY;
        idle_since = MAX(h->sched.up_at, h->sched.last_done);
        if (h->primed_for == idle_since)
                return USEC_INFINITY; /* primed already; the next traffic starts a new idle period */
        return idle_since + e->prime_after_idle_usec;
}

static int prime_timer_cb(sd_event_source *s, uint64_t usec, void *userdata) {
        Host *h = userdata;
        usec_t now = now_usec(CLOCK_MONOTONIC), at = prime_at(h);

        if (at == USEC_INFINITY || at > now)
                return 0;
        h->primed_for = MAX(h->sched.up_at, h->sched.last_done);
        if (!sched_add(&h->sched, now, &h->prime, (size_t)h->running))
                /* it waits behind something: let the scheduler have it back */
                return sched_remove(&h->sched, now, &h->prime), 0;
        h->prime.background = true;
        h->priming = true;
        if (warmup_send(h, (size_t)h->running, &prime_callbacks) < 0)
                prime_finished(h, "out of memory");
        return 0;
}

static void prime_rearm(Host *h) {
        usec_t at = prime_at(h);

        if (!h->prime_timer)
                return;
        if (at == USEC_INFINITY) {
                (void)sd_event_source_set_enabled(h->prime_timer, SD_EVENT_OFF);
                return;
        }
        (void)sd_event_source_set_time(h->prime_timer, at);
        (void)sd_event_source_set_enabled(h->prime_timer, SD_EVENT_ONESHOT);
}

static void health_on_complete(Upstream *u, void *userdata) {
        Host *h = userdata;

        h->probe = NULL;
        if (h->probe_status != 200)
                return probe_again(h);
        /* ready means answers at once: the first request must not pay the model's cold start */
        if (!h->adopting && h->engines[h->target].conf->warmup_body) {
                h->warmup_start = now_usec(CLOCK_MONOTONIC);
                if (warmup_send(h, (size_t)h->target, &warmup_callbacks) >= 0)
                        return;
        }
        engine_is_up(h);
}

static void health_on_error(Upstream *u, int error, bool started, void *userdata) {
        Host *h = userdata;

        h->probe = NULL;
        probe_again(h);
}

static const UpstreamCallbacks health_callbacks = {
        .on_headers = probe_on_headers,
        .on_complete = health_on_complete,
        .on_error = health_on_error,
};

static int probe_start(Host *h, const UpstreamCallbacks *cb, usec_t timeout) {
        const HttpUrl *url = h->engines[h->target].url;
        Buffer req = {};
        int r;

        h->probe_status = 0;
        if (buffer_printf(&req, "GET %s/health HTTP/1.1\r\nHost: %s\r\nUser-Agent: modelgate\r\n\r\n",
                          url->base_path, url->authority) < 0) {
                buffer_done(&req);
                return -ENOMEM;
        }
        r = upstream_start(manager_pool(h->manager), url, &req, false, cb, h, &h->probe);
        buffer_done(&req);
        if (r < 0)
                return r;
        (void)upstream_set_deadline(h->probe, timeout);
        return 0;
}

static int probe_timer_cb(sd_event_source *s, uint64_t usec, void *userdata) {
        Host *h = userdata;

        if (h->phase != PHASE_HEALTH)
                return 0;
        if (probe_start(h, &health_callbacks, HEALTH_PROBE_TIMEOUT_USEC) < 0)
                probe_again(h);
        return 0;
}

/* No engine runs on the host any more (stopped on its own, idle-stopped, or given up on). */
static void engine_gone(Host *h) {
        h->running = -1;
        h->engine_up = false;
        h->http_down = false; /* it was that engine's URL that failed */
        sched_engine_down(&h->sched, now_usec(CLOCK_MONOTONIC));
        catalog_engine_down(h->catalog);
        host_update_state(h);
        host_schedule_later(h);
}

static void give_up_stopped(HostBus *b, size_t i, const char *result, const char *error, void *userdata) {
        Host *h = userdata;

        h->phase = PHASE_NONE;
        engine_gone(h);
}

static int deadline_cb(sd_event_source *s, uint64_t usec, void *userdata) {
        Host *h = userdata;
        char what[256], t[FORMAT_TIMESPAN_MAX];
        ssize_t target = h->target;

        if (h->phase != PHASE_HEALTH)
                return 0;
        snprintf(what, sizeof(what),
                 "did not answer /health with 200 within %s (result: timeout); it was stopped",
                 format_timespan(t, sizeof(t), h->engines[target].conf->start_timeout_usec) ?: "?");
        switch_fail_engine(h, what);
        /* an engine that never became healthy must not keep the GPU */
        if (host_bus_job(h->bus, "StopUnit", (size_t)target, "replace", give_up_stopped, h) >= 0) {
                h->phase = PHASE_GIVING_UP;
                h->running = target;
                sched_engine_stopping(&h->sched);
                host_update_state(h);
        }
        return 0;
}

static void phase_health(Host *h, bool adopting) {
        usec_t timeout = h->engines[h->target].conf->start_timeout_usec;

        if (adopting)
                sched_engine_starting(&h->sched, (size_t)h->target);
        h->phase = PHASE_HEALTH;
        h->adopting = adopting;
        h->running = h->target;
        h->engine_up = false;
        host_update_state(h);
        if (timeout != USEC_INFINITY) {
                usec_t left = now_usec(CLOCK_MONOTONIC) - h->switch_start;
                left = left < timeout ? timeout - left : 0;
                (void)sd_event_source_set_time_relative(h->deadline, left);
                (void)sd_event_source_set_enabled(h->deadline, SD_EVENT_ONESHOT);
        }
        if (probe_start(h, &health_callbacks, HEALTH_PROBE_TIMEOUT_USEC) < 0)
                probe_again(h);
}

/* STARTING */

static void start_checked(HostBus *b, char **units, const char *error, void *userdata) {
        Host *h = userdata;
        const UnitInfo *u = host_bus_unit(b, (size_t)h->target);
        char what[256];

        if (error) {
                snprintf(what, sizeof(what), "could not be read after its start: %s", error);
                return switch_fail_engine(h, what);
        }
        if (unit_info_is_running(u))
                return phase_health(h, false);
        if (!u->condition_result || streq_ptr(u->result, "exec-condition")) {
                snprintf(what, sizeof(what), "%s refused to start: its %s failed", u->name,
                         streq_ptr(u->result, "exec-condition") ? "ExecCondition=" : "Condition…=");
                return switch_refuse_busy(h, what);
        }
        snprintf(what, sizeof(what), "failed to start (result: %s, state: %s)",
                 u->result && !streq(u->result, "success") ? u->result : "exit-code",
                 strna(u->active_state));
        switch_fail_engine(h, what);
}

static void start_done(HostBus *b, size_t i, const char *result, const char *error, void *userdata) {
        Host *h = userdata;
        char what[512];

        if (!result) {
                snprintf(what, sizeof(what), "could not be started: %s", error);
                return switch_fail_engine(h, what);
        }
        /* "done" says little (systemd-notes.md §2.6); the unit's own state says the rest */
        if (host_bus_refresh_unit(b, i, start_checked, h) < 0) {
                snprintf(what, sizeof(what), "could not be read after its start (job result: %s)", result);
                switch_fail_engine(h, what);
        }
}

static void phase_start(Host *h) {
        char what[256];
        int r;

        if (unit_info_is_running(host_bus_unit(h->bus, (size_t)h->target)))
                return phase_health(h, false);
        h->phase = PHASE_STARTING;
        h->running = -1;
        h->engine_up = false;
        host_update_state(h);
        r = host_bus_job(h->bus, "StartUnit", (size_t)h->target, "fail", start_done, h);
        if (r < 0) {
                snprintf(what, sizeof(what), "could not be started: %s", strerror(-r));
                switch_fail_engine(h, what);
        }
}

/* STOPPING */

static void stop_done(HostBus *b, size_t i, const char *result, const char *error, void *userdata) {
        Host *h = userdata;
        char msg[512];

        if (!result || !streq(result, "done")) {
                snprintf(msg, sizeof(msg), "could not stop engine unit %s of host '%s' (%s)",
                         engine_unit(h, i), h->conf->name, result ?: error);
                log_error("host %s: %s", h->conf->name, msg);
                switch_fail(h, 502, msg);
                return;
        }
        if ((ssize_t)i == h->running) {
                h->running = -1;
                h->engine_up = false;
        }
        phase_stop_others(h);
}

static void phase_stop_others(Host *h) {
        int r;

        for (size_t i = 0; i < h->n_engines; i++) {
                if ((ssize_t)i == h->target || !unit_info_is_running(host_bus_unit(h->bus, i)))
                        continue;
                h->phase = PHASE_STOPPING;
                host_update_state(h);
                r = host_bus_job(h->bus, "StopUnit", i, "replace", stop_done, h);
                if (r < 0) {
                        char what[256];
                        snprintf(what, sizeof(what), "could not be started: stopping %s failed: %s",
                                 engine_unit(h, (ssize_t)i), strerror(-r));
                        switch_fail_engine(h, what);
                }
                return;
        }
        phase_start(h);
}

/* PORT_PROBE: something answers where the engine would listen, while none of our units runs */

static void port_probe_answered(Host *h) {
        char reason[300];

        snprintf(reason, sizeof(reason), "a server answers on %s while no engine unit of the host is active",
                 h->engines[h->target].url->text);
        switch_refuse_busy(h, reason);
}

static void port_on_complete(Upstream *u, void *userdata) {
        Host *h = userdata;
        h->probe = NULL;
        port_probe_answered(h);
}

static void port_on_error(Upstream *u, int error, bool started, void *userdata) {
        Host *h = userdata;

        h->probe = NULL;
        if (started)
                return port_probe_answered(h);
        phase_stop_others(h);
}

static const UpstreamCallbacks port_callbacks = {
        .on_headers = probe_on_headers,
        .on_complete = port_on_complete,
        .on_error = port_on_error,
};

static bool any_engine_running(Host *h) {
        for (size_t i = 0; i < h->n_engines; i++)
                if (unit_info_is_running(host_bus_unit(h->bus, i)))
                        return true;
        return false;
}

static void phase_port_probe(Host *h) {
        if (any_engine_running(h))
                return phase_stop_others(h);
        h->phase = PHASE_PORT_PROBE;
        if (probe_start(h, &port_callbacks, PORT_PROBE_TIMEOUT_USEC) < 0)
                phase_stop_others(h);
}

/* BUSY_CHECK */

static void busy_listed(HostBus *b, char **units, const char *error, void *userdata) {
        Host *h = userdata;
        char msg[512];

        if (error) {
                snprintf(msg, sizeof(msg), "could not be started: checking BusyUnits= failed: %s", error);
                return switch_fail_engine(h, msg);
        }
        if (!strv_isempty(units)) {
                _cleanup_free_ char *names = strv_join(units, ", ");
                snprintf(msg, sizeof(msg), "%s %s active", names ?: units[0], units[1] ? "are" : "is");
                return switch_refuse_busy(h, msg);
        }
        phase_port_probe(h);
}

static void host_begin_switch(Host *h) {
        int r;

        h->switch_start = now_usec(CLOCK_MONOTONIC);
        log_notice("host %s: switching to engine %s for %s", h->conf->name, engine_name(h, h->target),
                   h->for_model ?: "a request");
        h->phase = PHASE_BUSY_CHECK;
        host_update_state(h);
        if (strv_isempty(h->conf->busy_units))
                return phase_port_probe(h);
        r = host_bus_list_active(h->bus, h->conf->busy_units, busy_listed, h);
        if (r < 0)
                busy_listed(h->bus, NULL, strerror(-r), h);
}

/* IDLE_STOP */

static void idle_stopped(HostBus *b, size_t i, const char *result, const char *error, void *userdata) {
        Host *h = userdata;
        char t[FORMAT_TIMESPAN_MAX];

        if (result && streq(result, "done") && h->stop_requested)
                log_notice("host %s: engine %s stopped on request", h->conf->name,
                           engine_name(h, (ssize_t)i));
        else if (result && streq(result, "done"))
                /* the rule's time, not the timer's (which fires a little after it) */
                log_notice("host %s: idle %s, engine %s stopped", h->conf->name,
                           format_timespan(t, sizeof(t), h->sched.config.idle_stop) ?: "?",
                           engine_name(h, (ssize_t)i));
        else
                log_warning("host %s: idle stop of engine %s failed: %s", h->conf->name,
                            engine_name(h, (ssize_t)i), result ?: strna(error));
        h->phase = PHASE_NONE;
        h->stop_requested = false;
        engine_gone(h);
}

static void host_idle_stop(Host *h, ssize_t engine, bool requested) {
        h->phase = PHASE_IDLE_STOP;
        h->stop_requested = requested;
        h->target = -1;
        host_update_state(h);
        if (host_bus_job(h->bus, "StopUnit", (size_t)engine, "replace", idle_stopped, h) < 0)
                idle_stopped(h->bus, (size_t)engine, NULL, "the bus is not connected", h);
}

static void answer_failed(Host *h, HostWaiter *w, int status) {
        char msg[512], t[FORMAT_TIMESPAN_MAX];

        w->host = NULL;
        switch (status) {
        case 503:
                snprintf(msg, sizeof(msg), "host '%s' is down: %s; modelgate keeps trying it, retry in 30 s",
                         h->conf->name, strna(h->down_reason));
                break;
        case 504:
                metrics_budget_expired(manager_metrics(h->manager), h->conf->name);
                snprintf(
                        msg, sizeof(msg),
                        "waited %s for engine '%s' of host '%s' (WaitBudgetSec=), and it is still busy with "
                        "other requests or switching; send the request again later",
                        format_timespan(t, sizeof(t), h->sched.config.wait_budget) ?: "?",
                        engine_name(h, w->engine), h->conf->name);
                break;
        default:
                snprintf(msg, sizeof(msg), "%s", h->fail_message ?: "the engine could not be started");
        }
        w->ready(w, status, msg);
}

/* Carries out what the scheduler decides, one action at a time: each may re-enter (a client that is
 * answered can go away, or ask again). */
static int schedule_cb(sd_event_source *s, void *userdata) {
        Host *h = userdata;
        SchedAction a;
        usec_t now = now_usec(CLOCK_MONOTONIC), next;

        while (sched_next(&h->sched, now, &a)) {
                HostWaiter *w = a.req ? container_of(a.req, HostWaiter, req) : NULL;

                switch (a.type) {
                case SCHED_GO:
                        w->ready(w, 0, NULL);
                        break;
                case SCHED_FAIL:
                        answer_failed(h, w, a.status);
                        break;
                case SCHED_START:
                        h->target = a.engine;
                        metrics_switch(manager_metrics(h->manager), h->conf->name, engine_name(h, a.engine));
                        free(h->for_model);
                        h->for_model = log_escape_dup(w->model); /* for log lines only */
                        host_begin_switch(h);
                        break;
                case SCHED_STOP:
                        host_idle_stop(h, a.engine, a.requested);
                        break;
                case SCHED_WAIT: {
                        _cleanup_free_ char *model = log_escape_dup(w->model);
                        log_notice("host %s: %s waits for the running engine before switching to %s",
                                   h->conf->name, strna(model), engine_name(h, a.engine));
                        break;
                }
                case SCHED_ABANDON:
                        log_notice("host %s: switch to %s abandoned, no client is waiting", h->conf->name,
                                   engine_name(h, a.engine));
                        break;
                case SCHED_NONE:
                        break;
                }
                now = now_usec(CLOCK_MONOTONIC);
        }
        next = sched_next_timer(&h->sched, now);
        if (next == USEC_INFINITY)
                (void)sd_event_source_set_enabled(h->sched_timer, SD_EVENT_OFF);
        else {
                (void)sd_event_source_set_time(h->sched_timer, next);
                (void)sd_event_source_set_enabled(h->sched_timer, SD_EVENT_ONESHOT);
        }
        prime_rearm(h);
        manager_changed(h->manager);
        return 0;
}

static int sched_timer_cb(sd_event_source *s, uint64_t usec, void *userdata) {
        return schedule_cb(NULL, userdata);
}

/* The bus */

static void check_units(Host *h) {
        strv_free(h->warnings);
        h->warnings = NULL;

        for (size_t i = 0; i < h->n_engines; i++) {
                const UnitInfo *u = host_bus_unit(h->bus, i);
                _cleanup_free_ char *w = NULL;

                if (u->load_state && !streq(u->load_state, "loaded")) {
                        if (asprintf(&w, "engine unit %s is %s", u->name, u->load_state) >= 0)
                                (void)strv_push(&h->warnings, TAKE_PTR(w));
                        continue;
                }
                if (u->file_state &&
                    (startswith(u->file_state, "enabled") || streq(u->file_state, "indirect") ||
                     startswith(u->file_state, "linked")))
                        if (asprintf(&w,
                                     "engine unit %s is %s; modelgate starts engines itself, so it should "
                                     "have no [Install] section and not be enabled",
                                     u->name, u->file_state) >= 0)
                                (void)strv_push(&h->warnings, TAKE_PTR(w));
                if (u->restart && !streq(u->restart, "no"))
                        if (asprintf(
                                    &w,
                                    "engine unit %s has Restart=%s; use Restart=no, so that a crash is seen "
                                    "and not hidden by a restart that takes the GPU back",
                                    u->name, u->restart) >= 0)
                                (void)strv_push(&h->warnings, TAKE_PTR(w));
                for (size_t j = 0; j < h->n_engines; j++) {
                        const char *other = h->engines[j].conf->unit;
                        if (j == i || strv_contains(u->conflicts, other))
                                continue;
                        if (asprintf(&w, "engine unit %s lacks Conflicts=%s, so both could run at once",
                                     u->name, other) >= 0)
                                (void)strv_push(&h->warnings, TAKE_PTR(w));
                }
        }
        STRV_FOREACH (w, h->warnings)
                log_warning("host %s: %s", h->conf->name, *w);
}

static void bus_up(HostBus *b, void *userdata) {
        Host *h = userdata;
        ssize_t found = -1;

        h->bus_down = false;
        h->down_reason = mfree(h->down_reason);
        sched_host_down(&h->sched, false);
        sched_engine_down(&h->sched, now_usec(CLOCK_MONOTONIC));
        check_units(h);
        for (size_t i = 0; i < h->n_engines; i++)
                if (unit_info_is_running(host_bus_unit(b, i))) {
                        if (found >= 0)
                                log_warning("host %s: engine units %s and %s are both active", h->conf->name,
                                            engine_unit(h, found), engine_unit(h, (ssize_t)i));
                        else
                                found = (ssize_t)i;
                }
        h->running = -1;
        h->engine_up = false;
        catalog_engine_down(h->catalog);
        if (found >= 0) {
                /* the daemon may have exited idle and come back: the running engine is ours */
                h->target = found;
                h->switch_start = now_usec(CLOCK_MONOTONIC);
                phase_health(h, true);
        }
        host_update_state(h);
        host_schedule_later(h);
}

static void bus_down(HostBus *b, const char *reason, void *userdata) {
        Host *h = userdata;

        switch_reset(h);
        h->running = -1;
        h->engine_up = false;
        h->bus_down = true;
        free(h->down_reason);
        h->down_reason = strdup(reason);
        sched_host_down(&h->sched, true);
        catalog_engine_down(h->catalog);
        host_update_state(h);
        host_schedule_later(h);
}

static void unit_changed(HostBus *b, size_t i, void *userdata) {
        Host *h = userdata;
        const UnitInfo *u = host_bus_unit(b, i);
        char what[256];

        if (!unit_info_is_running(u)) {
                if ((ssize_t)i != h->running || h->phase == PHASE_STOPPING || h->phase == PHASE_GIVING_UP ||
                    h->phase == PHASE_IDLE_STOP)
                        return;
                snprintf(what, sizeof(what), "stopped%s (state: %s, result: %s)",
                         h->engine_up ? " on its own" : "", strna(u->active_state), strna(u->result));
                if (h->phase == PHASE_HEALTH && h->target == (ssize_t)i)
                        return switch_fail_engine(h, what);
                log_warning("host %s: engine %s %s", h->conf->name, engine_name(h, (ssize_t)i), what);
                return engine_gone(h);
        }
        if (h->running < 0 && h->phase == PHASE_NONE) {
                /* started by someone else (or restarted by systemd): ours all the same, once healthy */
                log_notice("host %s: engine unit %s became %s without modelgate", h->conf->name, u->name,
                           u->active_state);
                h->target = (ssize_t)i;
                h->switch_start = now_usec(CLOCK_MONOTONIC);
                phase_health(h, true);
        }
}

static const HostBusCallbacks host_bus_callbacks = {
        .on_up = bus_up,
        .on_down = bus_down,
        .on_unit_changed = unit_changed,
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
        };
        /* 0 means "never" for both, as ExitIdleSec=0 does */
        if (sc.idle_stop == 0)
                sc.idle_stop = USEC_INFINITY;
        if (sc.wait_budget == 0)
                sc.wait_budget = USEC_INFINITY;
        return sc;
}

Host *host_new(Manager *m, Config *config, const HostConf *conf) {
        Host *h = calloc(1, sizeof(Host));
        _cleanup_strv_free_ char **units = NULL;
        int r;

        if (!h)
                return NULL;
        h->manager = m;
        h->conf = conf;
        h->config = config_ref(config);
        h->running = h->target = -1;
        h->state = HOST_IDLE;

        if (collect_engines(config, conf, &h->engines, &h->n_engines, &units) < 0)
                goto fail;
        SchedConfig sc = sched_config_of(config, conf);
        if (sched_init(&h->sched, &sc, h->n_engines) < 0)
                goto fail;
        r = sd_event_add_defer(manager_event(m), &h->schedule_source, schedule_cb, h);
        if (r >= 0)
                r = sd_event_add_time(manager_event(m), &h->sched_timer, CLOCK_MONOTONIC, USEC_INFINITY, 0,
                                      sched_timer_cb, h);
        if (r >= 0)
                r = sd_event_add_time_relative(manager_event(m), &h->deadline, CLOCK_MONOTONIC, 0, 0, deadline_cb,
                                               h);
        if (r >= 0)
                r = sd_event_add_time_relative(manager_event(m), &h->probe_timer, CLOCK_MONOTONIC, 0, 0,
                                               probe_timer_cb, h);
        if (r >= 0)
                r = sd_event_add_time(manager_event(m), &h->prime_timer, CLOCK_MONOTONIC, USEC_INFINITY,
                                      USEC_PER_SEC / 10, prime_timer_cb, h);
        if (r < 0)
                goto fail;
        (void)sd_event_source_set_enabled(h->schedule_source, SD_EVENT_OFF);
        (void)sd_event_source_set_enabled(h->sched_timer, SD_EVENT_OFF);
        (void)sd_event_source_set_enabled(h->deadline, SD_EVENT_OFF);
        (void)sd_event_source_set_enabled(h->probe_timer, SD_EVENT_OFF);
        (void)sd_event_source_set_enabled(h->prime_timer, SD_EVENT_OFF);
        /* hold-downs and budgets are rules with numbers: no 250 ms coalescing */
        (void)sd_event_source_set_time_accuracy(h->sched_timer, USEC_PER_MSEC);
        h->catalog = catalog_new(m, h);
        if (!h->catalog)
                goto fail;
        if (h->n_engines > 0) {
                if (host_bus_new(manager_event(m), conf, units, &host_bus_callbacks, h, &h->bus) < 0)
                        goto fail;
                /* until the bus says otherwise: requests must not be sent to an engine nobody started */
                h->bus_down = true;
                h->logged_down = -1;
                h->down_reason = strdup("connecting");
                h->state = HOST_DOWN;
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
        LIST_FOREACH (requests, r, h->sched.requests)
                container_of(r, HostWaiter, req)->host = NULL;
        h->prime_upstream = upstream_cancel(h->prime_upstream);
        sched_done(&h->sched);
        switch_reset(h);
        sd_event_source_disable_unref(h->prime_timer);
        h->catalog = catalog_free(h->catalog);
        h->bus = host_bus_free(h->bus);
        sd_event_source_disable_unref(h->schedule_source);
        sd_event_source_disable_unref(h->sched_timer);
        free(h->fail_message);
        free(h->last_error);
        sd_event_source_disable_unref(h->deadline);
        sd_event_source_disable_unref(h->probe_timer);
        free(h->engines);
        free(h->down_reason);
        strv_free(h->warnings);
        config_unref(h->config);
        free(h);
        return NULL;
}

bool host_can_take(const Host *h, const Config *config, const HostConf *conf) {
        _cleanup_free_ HostEngine *engines = NULL;
        size_t n;

        if (!streq(h->conf->name, conf->name) || !streq(h->conf->url.text, conf->url.text) ||
            !streq_ptr(h->conf->bus, conf->bus) || !streq_ptr(h->conf->ssh_command, conf->ssh_command) ||
            !streq_ptr(h->conf->bus_path, conf->bus_path))
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
        HostEngine *engines;
        size_t n;

        assert(host_can_take(h, config, conf));
        if (collect_engines(config, conf, &engines, &n, NULL) < 0)
                return -ENOMEM;
        free(h->engines);
        h->engines = engines;
        h->conf = conf;
        h->sched.config = sched_config_of(config, conf);
        catalog_set_conf(h->catalog, conf);
        if (h->bus)
                host_bus_set_conf(h->bus, conf);
        config_unref(h->config);
        h->config = config_ref(config);
        host_schedule_later(h); /* a new hold-down, idle stop or budget may apply now */
        return 0;
}

bool host_drained(const Host *h) {
        return h->sched.n_in_flight == 0 && h->sched.n_waiting == 0 && h->phase == PHASE_NONE;
}

void host_start(Host *h) {
        if (h->bus)
                host_bus_connect(h->bus);
        catalog_start(h->catalog);
}

const HostConf *host_conf(const Host *h) {
        return h->conf;
}

HostState host_state(const Host *h) {
        return h->state;
}

bool host_has_engines(const Host *h) {
        return h->n_engines > 0;
}

size_t host_n_engines(const Host *h) {
        return h->n_engines;
}

const HostEngine *host_engine(const Host *h, size_t i) {
        return i < h->n_engines ? &h->engines[i] : NULL;
}

char *const *host_warnings(const Host *h) {
        return h->warnings;
}

Catalog *host_catalog(const Host *h) {
        return h->catalog;
}

ssize_t host_engine_up(const Host *h) {
        return h->engine_up ? h->running : -1;
}

ssize_t host_find_engine(const Host *h, const char *key) {
        ssize_t i;

        for (size_t e = 0; e < h->n_engines; e++)
                STRV_FOREACH (g, h->engines[e].conf->models)
                        if (fnmatch(*g, key, 0) == 0)
                                return (ssize_t)e;
        i = catalog_engine_for_key(h->catalog, key);
        if (i >= 0)
                return i;
        if (h->running >= 0 && catalog_lists(h->catalog, key) != 0)
                return h->running; /* it lists the key now, or its list is not known yet */
        return -1;
}

int host_acquire(Host *h, size_t i, HostWaiter *w, HostReadyFn ready, const char *model, HostRefusal *ret) {
        assert(i < h->n_engines);

        /* the first connection is not an outcome yet: after an idle exit, the request that started this
         * instance must wait for the bus, not get a 503 */
        if (h->bus_down && !streq_ptr(h->down_reason, "connecting")) {
                ret->status = 503;
                snprintf(ret->message, sizeof(ret->message),
                         "host '%s' is down: %s; modelgate keeps trying it, retry in 30 s", h->conf->name,
                         strna(h->down_reason));
                return -1;
        }
        *w = (HostWaiter){.host = h, .engine = (ssize_t)i, .model = model, .ready = ready};
        if (sched_add(&h->sched, now_usec(CLOCK_MONOTONIC), &w->req, i)) {
                manager_changed(h->manager);
                return 0;
        }
        host_schedule_later(h);
        return 1;
}

void host_release(HostWaiter *w) {
        Host *h = w->host;

        if (!h)
                return;
        sched_remove(&h->sched, now_usec(CLOCK_MONOTONIC), &w->req);
        w->host = NULL;
        host_schedule_later(h);
}

int host_waiter_describe(const HostWaiter *w, char *buf, size_t l) {
        const Host *h = w->host;
        const char *key;
        int p;

        if (!h)
                return -ESTALE;
        /* the engine is up, and the router loads the model: how far it has got, as its feed says */
        key = w->model ? startswith(w->model, h->conf->name) : NULL;
        if (key && *key == '-' && w->engine == host_engine_up(h)) {
                p = catalog_load_progress(h->catalog, key + 1);
                if (p >= 0) {
                        snprintf(buf, l, "loading %s %d%%", w->model, p);
                        return 1;
                }
                if (p == -ENODATA) {
                        snprintf(buf, l, "loading %s", w->model);
                        return 1;
                }
        }
        if (w->req.state == SCHED_IN_FLIGHT) {
                snprintf(buf, l, "waiting for engine %s on %s to answer", engine_name(h, w->engine),
                         h->conf->name);
                return 0;
        }
        snprintf(buf, l, "waiting for engine %s on %s, %u ahead", engine_name(h, w->engine), h->conf->name,
                 sched_ahead(&h->sched, &w->req));
        return 1;
}

void host_report_http(Host *h, const char *reason) {
        bool down = reason != NULL;

        /* with engines, only the engine that is up can fail: one stopping (an idle stop, a switch) is
         * expected to refuse connections */
        if (down && h->n_engines > 0 && (!h->engine_up || h->phase != PHASE_NONE))
                return;
        if (down == h->http_down)
                return;
        h->http_down = down;
        if (down && !h->bus_down) {
                free(h->down_reason);
                h->down_reason = strdup(reason);
        }
        host_update_state(h);
}

unsigned host_in_flight(const Host *h) {
        return h->sched.n_in_flight;
}

unsigned host_waiting(const Host *h) {
        return h->sched.n_waiting;
}

ssize_t host_running(const Host *h) {
        return h->running;
}

const char *host_last_error(const Host *h) {
        return h->last_error;
}

usec_t host_hold_down_until(const Host *h) {
        return sched_hold_down_until(&h->sched, now_usec(CLOCK_MONOTONIC));
}

usec_t host_idle_stop_at(const Host *h) {
        return h->phase == PHASE_NONE ? sched_idle_stop_at(&h->sched) : USEC_INFINITY;
}

int host_request_stop(Host *h) {
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

bool host_keeps_daemon(const Host *h) {
        /* an engine it runs must still get its idle stop, which only a running daemon can do */
        return !host_drained(h) || (h->running >= 0 && h->sched.config.idle_stop != USEC_INFINITY);
}

Manager *host_manager(const Host *h) {
        return h->manager;
}

usec_t host_up_since(const Host *h) {
        return h->up_since;
}
