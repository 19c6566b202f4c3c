/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A busy GPU, and its end (rule:busy-recheck). A switch refused because the GPU is someone else's
 * (rule:busy-gpu) leaves the host busy; while it is, and nothing else moves its GPU, the same check that
 * refused it runs again every BUSY_RECHECK_USEC: the BusyUnits= (ListUnitsByPatterns), or GET /health on
 * the engine's URL for the foreign server. Once it finds the GPU free, the host is idle again, and says
 * so once. A refusal by the engine unit's own ExecCondition=/Condition…= is only known by starting that
 * unit, which would take the GPU: such a host stays busy until a request tries again. Beside the switch
 * (host-switch.c) because it outlives it: it begins when a switch ends. */

#include <assert.h>
#include <stdio.h>

#include "modelgated/host/host-internal.h"
#include "modelgated/http/http-writer.h"
#include "shared/log.h"
#include "shared/strv.h"

#define BUSY_RECHECK_USEC (2 * USEC_PER_SEC)

static HostBusy *busy_of(Host *h) {
        return &h->busy_check;
}

static void recheck_later(Host *h) {
        (void)sd_event_source_set_time_relative(h->busy_check.timer, BUSY_RECHECK_USEC);
        (void)sd_event_source_set_enabled(h->busy_check.timer, SD_EVENT_ONESHOT);
}

static void busy_over(Host *h, const char *why) {
        log_notice("host %s: GPU no longer busy (%s)", h->conf->name, why);
        host_busy_clear(h);
        host_update_state(h);
        host_schedule_later(h);
}

static void units_listed(HostBus *b, char **units, const char *error, void *userdata) {
        Host *h = container_of((HostBusy *)userdata, Host, busy_check);

        h->busy_check.listing = false;
        if (!h->busy)
                return;
        if (error || !strv_isempty(units) || h->phase != PHASE_NONE) {
                recheck_later(h); /* still someone's, or not known: look again */
                return;
        }
        busy_over(h, "no BusyUnits= unit is active any more");
}

static void port_finished(Host *h, bool answered) {
        char why[300];

        h->busy_check.probe = NULL;
        if (!h->busy)
                return;
        if (answered || h->phase != PHASE_NONE || h->running >= 0) {
                recheck_later(h);
                return;
        }
        snprintf(why, sizeof(why), "nothing answers on %s any more",
                 h->engines[h->busy_check.engine].url->text);
        busy_over(h, why);
}

static int port_on_headers(Upstream *u, const UpstreamResponse *resp, void *userdata) {
        return 0;
}

static void port_on_complete(Upstream *u, void *userdata) {
        port_finished(container_of((HostBusy *)userdata, Host, busy_check), true);
}

static void port_on_error(Upstream *u, int error, bool started, void *userdata) {
        /* a connection accepted and then silent is someone's server all the same */
        port_finished(container_of((HostBusy *)userdata, Host, busy_check), started || error == -ETIMEDOUT);
}

static const UpstreamCallbacks port_callbacks = {
        .on_headers = port_on_headers,
        .on_complete = port_on_complete,
        .on_error = port_on_error,
};

static int port_probe(Host *h) {
        const HttpUrl *url = h->engines[h->busy_check.engine].url;
        Buffer req = {};
        int r;

        if (http_write_request_head(&req, "GET", url->base_path, "/health", url->authority, "User-Agent",
                                    "modelgate", NULL) < 0) {
                buffer_done(&req);
                return -ENOMEM;
        }
        r = upstream_start(h->env.pool, url, &req, false, &port_callbacks, busy_of(h), &h->busy_check.probe);
        buffer_done(&req);
        if (r < 0)
                return r;
        (void)upstream_set_deadline(h->busy_check.probe, PORT_PROBE_TIMEOUT_USEC);
        return 0;
}

static int recheck_cb(sd_event_source *s, uint64_t usec, void *userdata) {
        Host *h = userdata;
        HostBusy *b = &h->busy_check;
        int r;

        if (!h->busy || b->listing || b->probe)
                return 0;
        /* a switch under way checks for itself; a host that is down is checked once it is back */
        if (h->phase != PHASE_NONE || h->bus_down) {
                recheck_later(h);
                return 0;
        }
        if (b->kind == HOST_BUSY_UNITS && strv_isempty(h->conf->busy_units)) {
                busy_over(h, "a reload emptied BusyUnits="); /* an empty list would match every unit */
                return 0;
        }
        if (b->kind == HOST_BUSY_UNITS) {
                r = host_bus_list_active(h->bus, h->conf->busy_units, units_listed, b);
                b->listing = r >= 0;
        } else
                r = port_probe(h);
        if (r == -ECONNREFUSED && b->kind == HOST_BUSY_PORT)
                /* refused at once: nobody listens there */
                port_finished(h, false);
        else if (r < 0)
                recheck_later(h);
        return 0;
}

int host_busy_init(Host *h) {
        assert(h);
        int r;

        h->busy_check.engine = -1;
        r = sd_event_add_time_relative(h->env.event, &h->busy_check.timer, CLOCK_MONOTONIC,
                                       BUSY_RECHECK_USEC, 0, recheck_cb, h);
        if (r < 0)
                return r;
        return sd_event_source_set_enabled(h->busy_check.timer, SD_EVENT_OFF);
}

void host_busy_done(Host *h) {
        assert(h);
        h->busy_check.probe = upstream_cancel(h->busy_check.probe);
        h->busy_check.timer = sd_event_source_disable_unref(h->busy_check.timer);
        /* a list under way is the bus's, freed with it, and never answered after host_free() */
}

void host_busy_set(Host *h, HostBusyKind kind, ssize_t engine) {
        assert(h);
        h->busy = true;
        h->busy_check.kind = kind;
        h->busy_check.engine = engine;
        if (kind == HOST_BUSY_CONDITION || (kind == HOST_BUSY_PORT && engine < 0))
                (void)sd_event_source_set_enabled(h->busy_check.timer, SD_EVENT_OFF);
        else
                recheck_later(h);
}

void host_busy_units_changed(Host *h) {
        assert(h);
        char **active = h->bus ? host_bus_busy_active(h->bus) : NULL;
        bool busy = !strv_isempty(active), was = h->sched.gpu_busy;
        const char *why = strv_isempty(h->conf->busy_units) ? "a reload emptied BusyUnits="
                                                            : "no BusyUnits= unit is active any more";

        sched_gpu_busy(&h->sched, busy);
        if (busy && !was) {
                _cleanup_free_ char *names = strv_join(active, ", ");
                log_notice("host %s: GPU busy: %s %s active (BusyUnits=)", h->conf->name, strna(names),
                           active[1] ? "are" : "is");
        } else if (!busy && h->busy && h->busy_check.kind == HOST_BUSY_UNITS) {
                busy_over(h, why);
                return;
        } else if (!busy && was)
                log_notice("host %s: GPU no longer busy (%s)", h->conf->name, why);
        host_update_state(h);
        host_schedule_later(h);
}

void host_busy_clear(Host *h) {
        assert(h);
        h->busy = false;
        h->busy_check.probe = upstream_cancel(h->busy_check.probe);
        (void)sd_event_source_set_enabled(h->busy_check.timer, SD_EVENT_OFF);
}
