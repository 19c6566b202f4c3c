/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* An alias's targets as alias_pick() sees them: what each target's host is doing now, and which target
 * a client used last. */

#include <stdlib.h>

#include "modelgated/host/host.h"
#include "modelgated/manager/manager.h"

static AliasTargetState target_state(Manager *m, const char *target, unsigned *ret_load) {
        const Config *c = manager_config(m);
        const char *key;
        const HostConf *hc = config_host_of_model(c, target, &key);
        Host *h = hc ? manager_host(m, hc) : NULL;
        ssize_t e;

        *ret_load = h ? host_in_flight(h) + host_waiting(h) : 0;
        if (!h || host_state(h) == HOST_DOWN)
                return ALIAS_TARGET_DOWN;
        if (!host_has_engines(h))
                return ALIAS_TARGET_WARM;
        e = host_find_engine(h, key, NULL);
        /* rule:failed-start-hold: a held engine refuses at once; the next target takes the request */
        if (e < 0 || host_held_until(h, (size_t)e) > 0)
                return ALIAS_TARGET_DOWN;
        if (host_engine_up(h) == e)
                return host_switch_pending(h) ? ALIAS_TARGET_OTHER : ALIAS_TARGET_WARM;
        /* rule:bus-gone: its engine serves on, but another one cannot be started there now */
        if (streq(host_bus_state(h), "gone"))
                return ALIAS_TARGET_DOWN;
        if (host_state(h) == HOST_IDLE || (host_state(h) == HOST_STARTING && host_running(h) == e))
                return ALIAS_TARGET_FREE;
        return ALIAS_TARGET_OTHER;
}

/* the loop's time: one "now" for everything one event does */
static usec_t loop_now(Manager *m) {
        usec_t t = 0;
        (void)sd_event_now(manager_event(m), CLOCK_MONOTONIC, &t);
        return t;
}

static void alias_targets(Manager *m, const AliasConf *a, AliasTarget *ret) {
        size_t i = 0;

        STRV_FOREACH (t, a->targets) {
                if (i >= ALIAS_TARGETS_MAX)
                        break;
                ret[i].state = target_state(m, *t, &ret[i].load);
                i++;
        }
}

ssize_t manager_alias_pick(Manager *m, const AliasConf *a, const AliasClient *client, uint64_t tried,
                           AliasTarget *ret_targets, const char **ret_why) {
        AliasTarget own[ALIAS_TARGETS_MAX], *t = ret_targets ?: own;
        ssize_t last = -1;

        alias_targets(m, a, t);
        if (client && a->policy == ALIAS_POLICY_SPREAD)
                last = alias_memory_recall(manager_alias_memory(m), a->name, client, loop_now(m));
        return alias_pick(a->policy, t, strv_length(a->targets), tried, last, ret_why);
}

void manager_alias_used(Manager *m, const AliasConf *a, const AliasClient *client, size_t target) {
        if (client && a->policy == ALIAS_POLICY_SPREAD)
                alias_memory_store(manager_alias_memory(m), a->name, client, target, loop_now(m));
}
