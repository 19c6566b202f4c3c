/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* PropertiesChanged for the Manager and Host objects. Callers only say that something may have changed
 * (bus_object_changed()); at most every EMIT_DELAY_USEC, what each object shows is compared with what
 * was last announced, and one signal per object names what differs. A burst of changes becomes one
 * signal, and nothing needs to know which property a change touches. */

#include <assert.h>
#include <stdlib.h>

#include "modelgated/bus/bus-object-internal.h"
#include "shared/strv.h"

#define EMIT_DELAY_USEC (50 * USEC_PER_MSEC)

/* What a Host object showed when PropertiesChanged was last sent. */
struct HostSeen {
        const Host *host; /* a different Host at this index (a reload): everything changed */
        HostState state;
        ssize_t engine;
        unsigned in_flight, waiting;
        usec_t hold_down, idle_stop;
        unsigned holds; /* host_holds_serial() */
        char *last_error;
        usec_t last_error_at;  /* host_last_error_usec(): a repeated error is said again, at a new time */
        const char *bus_state; /* host_bus_state(): a static string */
        char *bus_error;
};

/* One HostSeen per host; a reload may have changed their number */
static int seen_resize(BusObject *o, size_t n) {
        if (o->n_seen == n)
                return 0;
        /* before the array shrinks: afterwards these entries are not ours to read */
        for (size_t i = n; i < o->n_seen; i++)
                o->seen[i].last_error = mfree(o->seen[i].last_error);
        for (size_t i = n; i < o->n_seen; i++)
                o->seen[i].bus_error = mfree(o->seen[i].bus_error);
        HostSeen *s2 = reallocarray(o->seen, n ?: 1, sizeof(HostSeen));
        if (!s2)
                return -ENOMEM;
        for (size_t i = o->n_seen; i < n; i++)
                s2[i] = (HostSeen){};
        o->seen = s2;
        o->n_seen = n;
        return 0;
}

/* Which properties of host i differ from what was last announced (NULL-terminated, in changed), and
 * records what it shows now. Returns how many. */
static size_t host_compare(BusObject *o, size_t i, const char *changed[static 18]) {
        Host *h = manager_host_at(o->manager, i);
        HostSeen *v = &o->seen[i], now = {
                                           .host = h,
                                           .state = host_state(h),
                                           .engine = host_running(h),
                                           .in_flight = host_in_flight(h),
                                           .waiting = host_waiting(h),
                                           .hold_down = bus_object_realtime(o, host_hold_down_until(h)),
                                           .idle_stop = bus_object_realtime(o, host_idle_stop_at(h)),
                                           .holds = host_holds_serial(h),
                                           .bus_state = host_bus_state(h),
                                           .last_error_at = host_last_error_usec(h),
                                   };
        size_t k = 0;
        bool all = v->host != h;

        if (all) {
                changed[k++] = "URL";
                changed[k++] = "Bus";
                changed[k++] = "Engines";
        }
        if (all || v->state != now.state)
                changed[k++] = "State";
        if (all || v->engine != now.engine) {
                changed[k++] = "Engine";
                changed[k++] = "Unit";
        }
        if (all || v->in_flight != now.in_flight)
                changed[k++] = "InFlight";
        if (all || v->waiting != now.waiting)
                changed[k++] = "Waiting";
        if (all || v->hold_down != now.hold_down)
                changed[k++] = "HoldDownUntilUSec";
        if (all || v->idle_stop != now.idle_stop)
                changed[k++] = "IdleStopAtUSec";
        if (all || v->holds != now.holds)
                changed[k++] = "FailedStarts";
        if (all || !streq_ptr(v->last_error, host_last_error(h))) {
                changed[k++] = "LastError";
                changed[k++] = "LastErrorUSec";
                (void)free_and_strdup(&v->last_error, host_last_error(h));
        } else if (v->last_error_at != now.last_error_at)
                changed[k++] = "LastErrorUSec";
        if (all || !streq_ptr(v->bus_state, now.bus_state))
                changed[k++] = "BusState";
        if (all || !streq_ptr(v->bus_error, host_bus_error(h))) {
                changed[k++] = "BusError";
                (void)free_and_strdup(&v->bus_error, host_bus_error(h));
        }
        changed[k] = NULL;
        now.last_error = v->last_error;
        now.bus_error = v->bus_error;
        *v = now;
        return k;
}

static void emit_host_changes(BusObject *o, size_t i) {
        const char *changed[18];

        if (host_compare(o, i, changed) > 0 && o->primed) {
                _cleanup_free_ char *p = bus_object_host_path(manager_host_at(o->manager, i));
                if (p)
                        (void)sd_bus_emit_properties_changed_strv(o->bus, p, "org.modelgate1.Host",
                                                                  (char **)changed);
        }
}

/* Unlike a Host's, the Manager's differences are announced from the first comparison on */
static void emit_manager_changes(BusObject *o) {
        Manager *m = o->manager;
        unsigned in_flight, waiting, nw = bus_object_n_warnings(m);
        const char *changed[8];
        size_t n = 0;

        bus_object_totals(m, &in_flight, &waiting);
        if (o->seen_connections != server_n_connections(o->server))
                changed[n++] = "Connections";
        if (o->seen_in_flight != in_flight)
                changed[n++] = "InFlight";
        if (o->seen_waiting != waiting)
                changed[n++] = "Waiting";
        /* a refusal begins, ends or changes only with a change of the warnings */
        if (o->seen_n_warnings != nw || o->seen_warnings_serial != manager_warnings_serial(m)) {
                changed[n++] = "Warnings";
                changed[n++] = "Refusing";
        }
        changed[n] = NULL;
        o->seen_connections = (unsigned)server_n_connections(o->server);
        o->seen_in_flight = in_flight;
        o->seen_waiting = waiting;
        o->seen_n_warnings = nw;
        o->seen_warnings_serial = manager_warnings_serial(m);
        if (n > 0)
                (void)sd_bus_emit_properties_changed_strv(o->bus, OBJECT_PATH, "org.modelgate1.Manager",
                                                          (char **)changed);
}

static int emit_cb(sd_event_source *s, uint64_t usec, void *userdata) {
        BusObject *o = userdata;

        if (seen_resize(o, manager_n_hosts(o->manager)) < 0)
                return 0;
        for (size_t i = 0; i < manager_n_hosts(o->manager); i++)
                emit_host_changes(o, i);
        o->primed = true;
        emit_manager_changes(o);
        return 0;
}

void bus_object_changed(BusObject *o) {
        if (!o || sd_event_source_get_enabled(o->emit_timer, NULL) > 0)
                return;
        (void)sd_event_source_set_time_relative(o->emit_timer, EMIT_DELAY_USEC);
        (void)sd_event_source_set_enabled(o->emit_timer, SD_EVENT_ONESHOT);
}

int bus_object_changes_start(BusObject *o) {
        assert(o);
        return sd_event_add_time_relative(manager_event(o->manager), &o->emit_timer, CLOCK_MONOTONIC,
                                          EMIT_DELAY_USEC, 10 * USEC_PER_MSEC, emit_cb, o);
}

void bus_object_changes_stop(BusObject *o) {
        assert(o);
        o->emit_timer = sd_event_source_disable_unref(o->emit_timer);
        for (size_t i = 0; i < o->n_seen; i++) {
                free(o->seen[i].last_error);
                free(o->seen[i].bus_error);
        }
        o->seen = mfree(o->seen);
        o->n_seen = 0;
}
