/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A HostBus owns one sd_bus at a time, and this is its lifecycle: connect (the transport, then the
 * Disconnected match first, then the operations' and the units' matches and calls), up when the units'
 * setup is answered, lost when the connection ends or setup fails, closed from a defer source (never
 * inside its own callback), and replaced after a backoff that doubles up to 30 s. A lost bus tells
 * its owner first and then fails every pending operation. */

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "modelgated/hostbus/host-bus-internal.h"
#include "shared/log.h"
#include "shared/strv.h"

#define RECONNECT_MIN_USEC (1 * USEC_PER_SEC)
/* rule:bus-backoff: what a 503 tells a client to wait (rule:retry-after) is this timer's time left, so it
 * stays below the 60 s over which clients drop a Retry-After */
#define RECONNECT_MAX_USEC (30 * USEC_PER_SEC)

bool host_bus_lost(HostBus *b, const char *reason) {
        assert(b);
        bool was_up = b->up;
        _cleanup_free_ char *why = NULL;

        if (b->close_source && sd_event_source_get_enabled(b->close_source, NULL) > 0)
                return false; /* already going */
        if (b->host->bus_kind == BUS_SSH)
                (void)asprintf(&why, "ssh: %s%s", reason,
                               was_up || b->subscribed ? "" : " (ssh's own message is in modelgated's log)");
        else
                (void)asprintf(&why, "%s: %s", b->label, reason);
        b->up = false;
        (void)sd_event_source_set_enabled(b->close_source, SD_EVENT_ONESHOT);
        /* the owner first: it forgets its own operations and answers its waiters as "host down",
         * rather than each operation failing on its own */
        if (b->cb.on_down)
                b->cb.on_down(b, why ?: reason, b->userdata);
        host_bus_fail_ops(b, why ?: reason);
        return true;
}

static int disconnected_cb(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        HostBus *b = userdata;
        _cleanup_free_ char *reason = NULL;

        if (b->up)
                reason = strdup("bus connection lost");
        else if (b->down_reason)
                reason = strdup(b->down_reason);
        else
                reason = strdup("connection closed before the bus came up");
        host_bus_lost(b, reason ?: "bus connection lost");
        return 0;
}

static int retry_cb(sd_event_source *s, uint64_t usec, void *userdata) {
        host_bus_connect(userdata);
        return 0;
}

static usec_t next_backoff(const HostBus *b) {
        return b->backoff ? MIN(b->backoff * 2, RECONNECT_MAX_USEC) : RECONNECT_MIN_USEC;
}

usec_t host_bus_retry_in(const HostBus *b, usec_t now) {
        assert(b);
        usec_t at;
        int enabled = SD_EVENT_OFF;

        if (b->up)
                return 0;
        if (b->retry_source && sd_event_source_get_enabled(b->retry_source, &enabled) >= 0 &&
            enabled != SD_EVENT_OFF && sd_event_source_get_time(b->retry_source, &at) >= 0)
                return at > now ? at - now : 0;
        return next_backoff(b);
}

static void schedule_retry(HostBus *b) {
        b->backoff = next_backoff(b);
        if (!b->retry_source) {
                if (sd_event_add_time_relative(b->event, &b->retry_source, CLOCK_MONOTONIC, b->backoff, 0,
                                               retry_cb, b) < 0)
                        log_error("host %s: cannot arm the reconnect timer; the host stays down",
                                  b->host->name);
                return;
        }
        (void)sd_event_source_set_time_relative(b->retry_source, b->backoff);
        (void)sd_event_source_set_enabled(b->retry_source, SD_EVENT_ONESHOT);
}

static int close_cb(sd_event_source *s, void *userdata) {
        HostBus *b = userdata;

        (void)sd_event_source_set_enabled(s, SD_EVENT_OFF);
        /* not flushed: a stalled ssh would block the loop; closing stops and reaps the child. The busy
         * units' slots go first: they hold the closed bus until the next connection otherwise */
        b->busy_match = sd_bus_slot_unref(b->busy_match);
        b->busy_list = sd_bus_slot_unref(b->busy_list);
        b->bus = sd_bus_close_unref(b->bus);
        schedule_retry(b);
        return 0;
}

/* The order is what the pipeline relies on: Disconnected is matched before anything can fail, and
 * JobRemoved before any job can be started. */
static int bus_send_setup(HostBus *b) {
        int r;

        r = sd_bus_match_signal_async(b->bus, NULL, "org.freedesktop.DBus.Local", NULL,
                                      "org.freedesktop.DBus.Local", "Disconnected", disconnected_cb, NULL,
                                      b);
        if (r < 0)
                return r;
        r = host_bus_match_job_removed(b);
        if (r < 0)
                return r;
        return host_bus_follow_units(b);
}

void host_bus_connect(HostBus *b) {
        assert(b);
        _cleanup_free_ char *reason = NULL;
        int r;

        if (b->bus)
                return;
        b->up = b->subscribed = b->setup_failed = false;
        b->manager_owner = mfree(b->manager_owner);
        b->down_reason = mfree(b->down_reason);
        host_bus_reset_units(b);

        r = sd_bus_new(&b->bus);
        if (r >= 0)
                r = host_bus_set_address(b, &reason);
        if (r >= 0)
                r = sd_bus_set_bus_client(b->bus, true);
        if (r >= 0)
                r = sd_bus_set_description(b->bus, b->host->name);
        if (r >= 0)
                r = sd_bus_attach_event(b->bus, b->event, SD_EVENT_PRIORITY_NORMAL);
        if (r >= 0)
                r = host_bus_start(b);
        if (r >= 0)
                r = bus_send_setup(b);
        if (r < 0) {
                if (!reason)
                        reason = strdup(strerror(-r));
                b->up = false;
                if (b->bus) {
                        /* the close waits for the loop: we may be inside a callback of the caller */
                        b->down_reason = strdup(reason ?: "cannot connect");
                        host_bus_lost(b, reason ?: "cannot connect");
                } else {
                        if (b->cb.on_down)
                                b->cb.on_down(b, reason ?: "cannot connect", b->userdata);
                        schedule_retry(b);
                }
        }
}

int host_bus_new(sd_event *e, const HostConf *h, char **units, char **watched, const HostBusCallbacks *cb,
                 void *userdata, HostBus **ret) {
        _cleanup_(host_bus_freep) HostBus *b = NULL;
        int r;

        b = calloc(1, sizeof(HostBus));
        if (!b)
                return -ENOMEM;
        b->event = sd_event_ref(e);
        b->host = h;
        b->cb = *cb;
        b->userdata = userdata;
        if (h->bus_kind == BUS_SSH)
                r = asprintf(&b->label, "ssh %s", h->bus + 4);
        else
                r = asprintf(&b->label, "%s bus", h->bus_kind == BUS_LOCAL ? "user" : "system");
        if (r < 0)
                return -ENOMEM;
        size_t n_loaded = strv_length(units);
        b->n_units = n_loaded + strv_length(watched);
        b->units = calloc(MAX(b->n_units, 1u), sizeof(FollowedUnit));
        if (!b->units)
                return -ENOMEM;
        for (size_t i = 0; i < b->n_units; i++) {
                FollowedUnit *fu = &b->units[i];
                const char *name = i < n_loaded ? units[i] : watched[i - n_loaded];
                fu->bus = b;
                fu->index = i;
                fu->watched = i >= n_loaded;
                if (!(fu->info.name = strdup(name)))
                        return -ENOMEM;
                r = sd_bus_path_encode(SD1_PATH "/unit", name, &fu->info.path);
                if (r < 0)
                        return r;
        }
        r = sd_event_add_defer(e, &b->close_source, close_cb, b);
        if (r < 0)
                return r;
        (void)sd_event_source_set_enabled(b->close_source, SD_EVENT_OFF);
        *ret = TAKE_PTR(b);
        return 0;
}

HostBus *host_bus_free(HostBus *b) {
        if (!b)
                return NULL;
        host_bus_free_ops(b);
        b->bus = sd_bus_close_unref(b->bus);
        sd_event_source_disable_unref(b->close_source);
        sd_event_source_disable_unref(b->retry_source);
        for (size_t i = 0; i < b->n_units; i++)
                unit_info_done(&b->units[i].info);
        free(b->units);
        free(b->label);
        free(b->down_reason);
        free(b->manager_owner);
        strv_free(b->busy_active);
        sd_bus_slot_unref(b->busy_match);
        sd_bus_slot_unref(b->busy_list);
        host_bus_stderr_close(b);
        sd_event_unref(b->event);
        free(b);
        return NULL;
}

bool host_bus_is_up(const HostBus *b) {
        return b && b->up;
}

size_t host_bus_n_units(const HostBus *b) {
        assert(b);
        return b->n_units;
}

const UnitInfo *host_bus_unit(const HostBus *b, size_t i) {
        assert(b);
        assert(i < b->n_units);
        return &b->units[i].info;
}

const char *host_bus_label(const HostBus *b) {
        assert(b);
        return b->label;
}

void host_bus_set_conf(HostBus *b, const HostConf *h) {
        assert(b);
        b->host = h;
}
