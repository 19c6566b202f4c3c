/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What a switch asks of the host itself, rather than of this instance's own counts (rule:several-instances):
 *   SLOTS   before the running engine is stopped, its /slots: a slot at work is a request in flight,
 *           whoever sent it (another modelgate, a client that went straight to llama-server), and the
 *           switch waits for it as for one of ours (rule:slots-in-flight). Every host, Shared= or not.
 *   LEASE   with Shared=, one switch at a time per host, decided by whoever holds the lease, a transient
 *           unit on the host's manager (rule:switch-lease). Its holder honours the running engine's
 *           hold-down as the host's clock counts it (rule:hold-down-from-host); the others see the lease
 *           through PropertiesChanged and queue their requests behind it (rule:foreign-switch).
 * Apart from host-switch.c because these are the questions put to the host, each with its own timer and
 * answers, while the switch's phases are the jobs. */

#include <assert.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>

#include "modelgated/host/host-internal.h"
#include "modelgated/http/http-writer.h"
#include "modelgated/catalog/catalog-list.h"
#include "modelgated/api/json-util.h"
#include "shared/log.h"

#define SLOTS_RECHECK_USEC (250 * USEC_PER_MSEC)
#define SLOTS_TIMEOUT_USEC (2 * USEC_PER_SEC)
#define SLOTS_BODY_MAX (4 * 1024 * 1024)
#define SLOTS_MODELS_MAX 4096
#define LEASE_RETRY_USEC (500 * USEC_PER_MSEC)
/* rule:foreign-switch: how long the others get to see a lease before the slots are asked: a request one of
 * them sent just before it saw the lease has reached a slot by then */
#define LEASE_SETTLE_USEC (250 * USEC_PER_MSEC)
/* The lease outlives any switch it covers: the stops (each unit's TimeoutStopSec=, systemd's default when
 * not read), the start (StartTimeoutSec=), and a margin for the checks and the bus */
#define LEASE_STOP_DEFAULT_USEC (90 * USEC_PER_SEC)
#define LEASE_MARGIN_USEC (5 * USEC_PER_SEC)
#define LEASE_MAX_USEC (30 * USEC_PER_MINUTE)
/* How much of a wait for someone else's slots one lease covers; then it is taken anew */
#define LEASE_SLOTS_USEC (10 * USEC_PER_SEC)

static void shared_wait(Host *h, usec_t usec, SharedStep step) {
        h->shared_step = step;
        (void)sd_event_source_set_time_relative(h->shared_timer, usec);
        (void)sd_event_source_set_enabled(h->shared_timer, SD_EVENT_ONESHOT);
}

/* rule:foreign-switch: the lease is on the host and is not ours */
static void sync_foreign(Host *h) {
        bool on = false;

        if (h->lease_unit && h->bus && host_bus_is_up(h->bus)) {
                on = unit_info_is_running(host_bus_unit(h->bus, h->n_engines));
                /* ours until the host says it has ended */
                if (!on)
                        h->lease_releasing = false;
                if (h->lease_taking || h->lease_held || h->lease_releasing)
                        on = false;
        }
        if (on == (h->sched.foreign_since > 0))
                return;
        log_info("host %s: %s", h->conf->name,
                 on ? "another modelgate is switching it: requests for its engine wait for that switch"
                    : "the other modelgate's switch ended");
        sched_foreign_switch(&h->sched, host_now(h), on);
        host_update_state(h);
        host_schedule_later(h);
}

static void lease_take(Host *h);

void host_shared_unit_changed(Host *h) {
        assert(h);
        bool was = h->lease_up;

        h->lease_up = unit_info_is_running(host_bus_unit(h->bus, h->n_engines));
        if (h->lease_held && was && !h->lease_up) {
                /* RuntimeMaxSec= (or its tail) ended it under us: another may take it now */
                log_warning("host %s: the switch lease %s ended before the switch did%s", h->conf->name,
                            h->lease_unit, h->phase <= PHASE_SLOTS ? "; it is taken again" : "");
                h->lease_held = false;
                if (h->phase >= PHASE_LEASE && h->phase <= PHASE_SLOTS) {
                        h->slots = upstream_cancel(h->slots);
                        buffer_done(&h->slots_body);
                        h->phase = PHASE_LEASE;
                        lease_take(h);
                }
        }
        sync_foreign(h);
}

/* A new bus: whatever this instance held went with the old one's end on the host (rule:switch-lease) */
void host_shared_bus_up(Host *h) {
        assert(h);
        h->lease_held = h->lease_taking = h->lease_releasing = false;
        h->lease_up = h->lease_unit && unit_info_is_running(host_bus_unit(h->bus, h->n_engines));
        sync_foreign(h);
}

/* SLOTS */

static void slots_next(Host *h);
static void slots_idle(Host *h);

/* Whether the answer says a slot works: [{"id":0,…,"is_processing":true,…},…]. Anything else (501 for
 * --no-slots, an old build without the route, a body that is not that) says nothing either way. */
static int slots_busy(const Host *h) {
        _cleanup_(json_object_putp) json_object *root = NULL;

        if (h->probe_status != 200)
                return -ENODATA;
        root = json_tokener_parse(h->slots_body.data ? h->slots_body.data + h->slots_body.start : "");
        if (!json_object_is_type(root, json_type_array))
                return -ENODATA;
        for (size_t i = 0; i < json_object_array_length(root); i++) {
                json_object *p = NULL;
                if (json_object_object_get_ex(json_object_array_get_idx(root, i), "is_processing", &p) &&
                    json_object_get_boolean(p))
                        return 1;
        }
        return 0;
}

static void slots_answered(Host *h, int busy) {
        h->slots = NULL;
        buffer_done(&h->slots_body);
        if (!h->slots_list) {
                /* an engine that cannot list its models cannot say what its slots do */
                if (busy < 0) {
                        slots_idle(h);
                        return;
                }
        }
        if (busy <= 0) {
                if (h->slots_asked)
                        h->slots_model++;
                slots_next(h);
                return;
        }
        if (!h->slots_busy) {
                log_notice(
                        "host %s: switch to %s waits: engine %s is working on a request that did not come "
                        "through this modelgate (its /slots)",
                        h->conf->name, engine_name(h, h->target), engine_name(h, h->slots_engine));
                h->slots_busy = true;
                host_changed(h);
        }
        if (h->lease_held && host_now(h) >= h->lease_since + LEASE_SLOTS_USEC) {
                /* the lease covers this much of the wait: a new one, with a new RuntimeMaxSec= */
                log_info("host %s: the switch lease %s is taken anew after 10 s of waiting for the slots",
                         h->conf->name, h->lease_unit);
                host_lease_release(h);
                h->phase = PHASE_LEASE;
                shared_wait(h, 0, SHARED_LEASE);
                return;
        }
        shared_wait(h, SLOTS_RECHECK_USEC, SHARED_SLOTS);
}

static int slots_on_body(Upstream *u, const char *p, size_t n, void *userdata) {
        Host *h = userdata;

        if (h->slots_body.end + n > SLOTS_BODY_MAX)
                return -EFBIG;
        return buffer_append(&h->slots_body, p, n);
}

static void slots_on_complete(Upstream *u, void *userdata) {
        Host *h = userdata;
        char nul = 0;

        if (!h->slots_list) {
                /* the first answer is the engine's own /models: the models a slot can work for now */
                int r = h->probe_status == 200
                                ? catalog_list_parse(
                                          h->slots_body.data ? h->slots_body.data + h->slots_body.start : "",
                                          h->slots_body.end - h->slots_body.start, SLOTS_MODELS_MAX,
                                          SLOTS_BODY_MAX, &h->slots_list)
                                : -ENODATA;
                slots_answered(h, r < 0 ? r : 0);
                return;
        }
        if (buffer_append(&h->slots_body, &nul, 1) < 0) {
                slots_answered(h, -ENOMEM);
                return;
        }
        slots_answered(h, slots_busy(h));
}

static void slots_on_error(Upstream *u, int error, bool started, void *userdata) {
        Host *h = userdata;
        log_debug("host %s: /slots of engine %s: %s", h->conf->name, engine_name(h, h->slots_engine),
                  upstream_strerror(error));
        slots_answered(h, -ENODATA);
}

static const UpstreamCallbacks slots_callbacks = {
        .on_headers = host_probe_on_headers,
        .on_body = slots_on_body,
        .on_complete = slots_on_complete,
        .on_error = slots_on_error,
};

/* ?model=<id>&autoload=false: a router's per-model slots, without loading the model if it just went; a
 * plain llama-server ignores the query */
static int slots_path(char *buf, size_t l, const char *id) {
        static const char hex[] = "0123456789ABCDEF";
        size_t k = (size_t)snprintf(buf, l, "/slots?model=");

        for (const char *p = id; *p && k + 4 < l; p++) {
                unsigned char c = (unsigned char)*p;
                if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    strchr("-._~", c))
                        buf[k++] = (char)c;
                else {
                        buf[k++] = '%';
                        buf[k++] = hex[c >> 4];
                        buf[k++] = hex[c & 15];
                }
        }
        if (k + sizeof("&autoload=false") > l)
                return -ENAMETOOLONG;
        memcpy(buf + k, "&autoload=false", sizeof("&autoload=false"));
        return 0;
}

static void slots_idle(Host *h) {
        h->slots_list = catalog_list_free(h->slots_list);
        if (h->slots_busy) {
                h->slots_busy = false;
                /* the wait for someone else's request was a queue, not part of StartTimeoutSec= */
                h->switch_start = host_now(h);
                host_changed(h);
        }
        /* rule:prompt-cache: nothing works in the engine's slots now: what they hold is saved, then stopped
         */
        host_prompt_cache_save(h, h->slots_engine, h->slots_then);
}

/* GET /models of the engine, then the next of its models that is not cold: the ones a slot can work for
 * (the catalog's snapshot may be another engine's, or older than the switch) */
static void slots_next(Host *h) {
        const CatalogList *l = h->slots_list;
        const HttpUrl *url = h->engines[h->slots_engine].url;
        Buffer req = {};
        char path[1024] = "/models";
        int r;

        while (l && h->slots_model < catalog_list_size(l) && catalog_list_cold(l, h->slots_model))
                h->slots_model++;
        if (l && h->slots_model >= catalog_list_size(l)) {
                slots_idle(h);
                return;
        }
        h->slots_asked = l != NULL;
        if (l && slots_path(path, sizeof(path), catalog_list_id(l, h->slots_model)) < 0) {
                h->slots_model++;
                slots_next(h);
                return;
        }
        h->probe_status = 0;
        r = http_write_request_head(&req, "GET", url->base_path, path, url->authority, "User-Agent",
                                    "modelgate", NULL);
        if (r >= 0)
                r = upstream_start(h->env.pool, url, &req, false, &slots_callbacks, h, &h->slots);
        buffer_done(&req);
        if (r >= 0)
                (void)upstream_set_deadline(h->slots, SLOTS_TIMEOUT_USEC);
        else
                slots_answered(h, -ENODATA);
}

void host_slots_check(Host *h, ssize_t engine, void (*then)(Host *h)) {
        assert(h);
        h->slots_engine = engine;
        h->slots_then = then;
        h->slots_model = 0;
        h->slots_list = catalog_list_free(h->slots_list);
        /* rule:abandon-switch: it has not stopped anything yet, so it is dropped like one not begun */
        if (h->slots_busy && h->sched.engines[h->target].n_waiting == 0) {
                host_switch_drop(h, "its waiting requests all left while the engine's slots were at work");
                return;
        }
        slots_next(h);
}

/* LEASE */

static void lease_stopped(HostBus *b, size_t i, const char *result, const char *error, void *userdata) {
        Host *h = userdata;
        if (error)
                log_debug("host %s: the switch lease %s could not be stopped: %s", h->conf->name,
                          h->lease_unit, error);
}

void host_lease_release(Host *h) {
        assert(h);
        if (!h->lease_held)
                return;
        h->lease_held = false;
        if (h->bus && host_bus_unit_job(h->bus, "StopUnit", h->lease_unit, lease_stopped, h) >= 0)
                h->lease_releasing = true;
        sync_foreign(h);
}

/* The host's clock, mapped on ours: when the manager says engine i's unit became active */
usec_t host_shared_up_at(const Host *h, size_t i, usec_t now) {
        const UnitInfo *u = host_bus_unit(h->bus, i);
        usec_t real = now_usec(CLOCK_REALTIME);

        if (!u->active_enter || u->active_enter > real)
                return now;
        return now > real - u->active_enter ? now - (real - u->active_enter) : 0;
}

/* rule:hold-down-from-host: once the lease is ours, the host may have been switched by another instance
 * meanwhile: an engine up that this instance did not know is up (or the very target) is taken as it is,
 * and the scheduler decides again, with that engine's hold-down as the host counts it; -1: none */
static ssize_t lease_found_other(const Host *h) {
        for (size_t i = 0; i < h->n_engines; i++) {
                if (!unit_info_is_running(host_bus_unit(h->bus, i)))
                        continue;
                if ((ssize_t)i == h->target || (ssize_t)i != h->running || !h->engine_up)
                        return (ssize_t)i;
        }
        return -1;
}

static void lease_taken(HostBus *b, size_t i, const char *result, const char *error, void *userdata) {
        Host *h = userdata;

        h->lease_taking = false;
        if (result && streq(result, "exists")) {
                if (!h->lease_wait) {
                        log_notice("host %s: switch to %s waits for another modelgate's switch of the host "
                                   "(%s)",
                                   h->conf->name, engine_name(h, h->target), h->lease_unit);
                        h->lease_wait = true;
                        host_changed(h);
                }
                sync_foreign(h);
                shared_wait(h, LEASE_RETRY_USEC, SHARED_LEASE);
                return;
        }
        if (!result || !streq(result, "done")) {
                /* a manager that runs no transient units of ours: the switch goes on, undecided */
                log_warning("host %s: the switch lease %s could not be taken (%s); switching without it",
                            h->conf->name, h->lease_unit, result ?: strna(error));
                h->lease_wait = false;
                h->switch_start = host_now(h);
                sync_foreign(h);
                h->lease_then(h);
                return;
        }
        h->lease_held = true;
        h->lease_wait = false;
        h->lease_since = host_now(h);
        /* the switch begins now: the wait for the lease was a queue, not part of StartTimeoutSec= */
        h->switch_start = host_now(h);
        sync_foreign(h);
        ssize_t found = lease_found_other(h);
        if (found >= 0) {
                log_notice("host %s: engine %s came up under another modelgate; taken as it is, the switch "
                           "to %s waits as the rules say",
                           h->conf->name, engine_name(h, found), engine_name(h, h->target));
                host_switch_adopt(h, (size_t)found); /* gives the lease back */
                return;
        }
        shared_wait(h, LEASE_SETTLE_USEC, SHARED_THEN);
}

static usec_t lease_max(const Host *h) {
        usec_t max = h->engines[h->target].conf->start_timeout_usec, stop = 0;

        for (size_t i = 0; i < h->n_engines; i++) {
                usec_t t = host_bus_unit(h->bus, i)->timeout_stop ?: LEASE_STOP_DEFAULT_USEC;
                stop = MAX(stop, t);
        }
        if (max == USEC_INFINITY || stop == USEC_INFINITY)
                return LEASE_MAX_USEC;
        return MIN(max + stop + LEASE_SLOTS_USEC + LEASE_MARGIN_USEC, LEASE_MAX_USEC);
}

static void lease_take(Host *h) {
        usec_t max = lease_max(h);
        int r;

        h->lease_taking = true;
        r = host_bus_take_lease(h->bus, h->lease_unit, "modelgate: switch lease", max, lease_taken, h);
        if (r < 0)
                lease_taken(h->bus, SIZE_MAX, NULL, strerror(-r), h);
}

void host_lease_take(Host *h, void (*then)(Host *h)) {
        assert(h);
        h->lease_then = then;
        if (!h->lease_unit || h->lease_held) {
                then(h);
                return;
        }
        lease_take(h);
}

static int shared_timer_cb(sd_event_source *s, uint64_t usec, void *userdata) {
        Host *h = userdata;

        switch (h->shared_step) {
        case SHARED_LEASE:
                if (h->phase != PHASE_LEASE)
                        break;
                if (h->sched.engines[h->target].n_waiting == 0) /* rule:abandon-switch */
                        host_switch_drop(h, "its waiting requests all left while it waited for the lease");
                else
                        lease_take(h);
                break;
        case SHARED_THEN:
                if (h->phase == PHASE_LEASE)
                        h->lease_then(h);
                break;
        case SHARED_SLOTS:
                if (h->phase == PHASE_SLOTS)
                        host_slots_check(h, h->slots_engine, h->slots_then);
                break;
        }
        return 0;
}

void host_shared_reset(Host *h) {
        assert(h);
        host_prompt_cache_reset(h);
        h->slots = upstream_cancel(h->slots);
        buffer_done(&h->slots_body);
        h->slots_list = catalog_list_free(h->slots_list);
        h->slots_busy = h->lease_wait = h->lease_taking = false;
        if (h->shared_timer)
                (void)sd_event_source_set_enabled(h->shared_timer, SD_EVENT_OFF);
        host_lease_release(h);
}

int host_shared_init(Host *h) {
        assert(h);
        int r;

        if (h->conf->shared && asprintf(&h->lease_unit, "modelgate-switch-%s.service", h->conf->name) < 0)
                return -ENOMEM;
        r = sd_event_add_time_relative(h->env.event, &h->shared_timer, CLOCK_MONOTONIC, 0, USEC_PER_MSEC,
                                       shared_timer_cb, h);
        if (r < 0)
                return r;
        (void)sd_event_source_set_enabled(h->shared_timer, SD_EVENT_OFF);
        return 0;
}

void host_shared_done(Host *h) {
        assert(h);
        h->shared_timer = sd_event_source_disable_unref(h->shared_timer);
        h->lease_unit = mfree(h->lease_unit);
}
