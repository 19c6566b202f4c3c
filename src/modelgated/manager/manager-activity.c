/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What the hosts show, for /activity and GetActivity() (rule:activity-feed): a Host's state as the feed's
 * "host" event has it, its times moved to CLOCK_REALTIME, and the snapshot of the hosts and requests. */

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>

#include "modelgated/host/host.h"
#include "modelgated/manager/manager.h"
#include "modelgated/records/activity.h"

/* A CLOCK_MONOTONIC time of the loop as CLOCK_REALTIME; 0 and USEC_INFINITY (none) stay 0 */
static usec_t to_realtime(Manager *m, usec_t mono) {
        usec_t now_m, now_r;

        if (mono == 0 || mono == USEC_INFINITY)
                return 0;
        (void)sd_event_now(manager_event(m), CLOCK_MONOTONIC, &now_m);
        (void)sd_event_now(manager_event(m), CLOCK_REALTIME, &now_r);
        return mono >= now_m ? now_r + (mono - now_m) : now_r - MIN(now_r, now_m - mono);
}

void manager_activity_host(Manager *m, Host *h, ActivityHost *ret) {
        assert(m && h && ret);
        HostState st = host_state(h);
        ssize_t running = host_running(h), target = host_switch_target(h);

        *ret = (ActivityHost){
                /* rule:state-words: the bus's State, word for word */
                .state = host_state_to_string(st) ?: "unknown",
                .engine_since = host_engine_up(h) >= 0 ? to_realtime(m, host_up_since(h)) : 0,
                .adopted = host_engine_adopted(h),
                .stopping = host_stopping(h),
                .hold_down_until = running >= 0 ? to_realtime(m, host_hold_down_until(h)) : 0,
                .idle_stop_at = running >= 0 ? to_realtime(m, host_idle_stop_at(h)) : 0,
                .in_flight = host_in_flight(h),
                .waiting = host_waiting(h),
        };
        snprintf(ret->name, sizeof(ret->name), "%s", host_conf(h)->name);
        if (running >= 0 && (size_t)running < host_n_engines(h))
                snprintf(ret->engine, sizeof(ret->engine), "%s",
                         host_engine(h, (size_t)running)->conf->name);
        if (target >= 0 && (size_t)target < host_n_engines(h))
                snprintf(ret->switching_to, sizeof(ret->switching_to), "%s",
                         host_engine(h, (size_t)target)->conf->name);
}

int manager_activity_snapshot(Manager *m, bool event, Buffer *out) {
        assert(m && out);
        size_t n = manager_n_hosts(m);
        _cleanup_free_ ActivityHost *hosts = n > 0 ? calloc(n, sizeof(ActivityHost)) : NULL;

        if (n > 0 && !hosts)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                manager_activity_host(m, manager_host_at(m, i), &hosts[i]);
                /* the requests queued for a switch under way show it even when nobody watched */
                activity_host_changed(manager_activity(m), &hosts[i]);
        }
        return event ? activity_render_snapshot_event(manager_activity(m), hosts, n, out)
                     : activity_render_snapshot(manager_activity(m), hosts, n, out);
}
