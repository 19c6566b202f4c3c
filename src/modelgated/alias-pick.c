/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <string.h>

#include "modelgated/alias-pick.h"

static const char *const target_state_names[_ALIAS_TARGET_STATE_MAX] = {
        [ALIAS_TARGET_DOWN] = "down",
        [ALIAS_TARGET_OTHER] = "needs-switch",
        [ALIAS_TARGET_FREE] = "can-start",
        [ALIAS_TARGET_WARM] = "warm",
};

const char *alias_target_state_to_string(AliasTargetState s) {
        return s < _ALIAS_TARGET_STATE_MAX ? target_state_names[s] : NULL;
}

static bool untried(uint64_t tried, size_t i) {
        return !(tried & (UINT64_C(1) << i));
}

/* The first untried target in at least state 'min', or -1 */
static ssize_t first_at_least(const AliasTarget *t, size_t n, uint64_t tried, AliasTargetState min) {
        for (size_t i = 0; i < n; i++)
                if (untried(tried, i) && t[i].state >= min)
                        return (ssize_t)i;
        return -1;
}

static ssize_t pick_warm(const AliasTarget *t, size_t n, uint64_t tried, const char **ret_why) {
        static const char *const why[_ALIAS_TARGET_STATE_MAX] = {
                [ALIAS_TARGET_WARM] = "engine up",
                [ALIAS_TARGET_FREE] = "can start its engine without stopping another",
                [ALIAS_TARGET_OTHER] = "host up, waits for a switch",
        };
        for (AliasTargetState s = ALIAS_TARGET_WARM; s > ALIAS_TARGET_DOWN; s--)
                for (size_t i = 0; i < n; i++)
                        if (untried(tried, i) && t[i].state == s) {
                                *ret_why = why[s];
                                return (ssize_t)i;
                        }
        return -1;
}

/* Among the warm targets, the least loaded; the client's last one while it is warm and not the busiest */
static ssize_t pick_spread(const AliasTarget *t, size_t n, uint64_t tried, ssize_t last,
                           const char **ret_why) {
        ssize_t least = -1;
        unsigned max_other = 0;
        bool other = false;

        for (size_t i = 0; i < n; i++) {
                if (!untried(tried, i) || t[i].state != ALIAS_TARGET_WARM)
                        continue;
                if (least < 0 || t[i].load < t[least].load)
                        least = (ssize_t)i;
                if ((ssize_t)i != last) {
                        max_other = other && max_other > t[i].load ? max_other : t[i].load;
                        other = true;
                }
        }
        if (last >= 0 && (size_t)last < n && untried(tried, (size_t)last) &&
            t[last].state == ALIAS_TARGET_WARM && (!other || t[last].load <= max_other)) {
                *ret_why = "this client's last target";
                return last;
        }
        if (least >= 0)
                *ret_why = "fewest requests";
        return least;
}

ssize_t alias_pick(AliasPolicy policy, const AliasTarget *t, size_t n, uint64_t tried, ssize_t last,
                   const char **ret_why) {
        const char *why = NULL;
        ssize_t i = -1;

        n = n > ALIAS_TARGETS_MAX ? ALIAS_TARGETS_MAX : n;
        switch (policy) {
        case ALIAS_POLICY_ORDERED:
                i = first_at_least(t, n, tried, ALIAS_TARGET_OTHER);
                why = "first whose host is up";
                break;
        case ALIAS_POLICY_SPREAD:
                i = pick_spread(t, n, tried, last, &why);
                if (i < 0)
                        i = pick_warm(t, n, tried, &why);
                break;
        default:
                i = pick_warm(t, n, tried, &why);
                break;
        }
        if (i < 0) {
                i = first_at_least(t, n, tried, ALIAS_TARGET_DOWN);
                why = "every target left is down";
        }
        if (ret_why)
                *ret_why = i >= 0 ? why : "every target was tried";
        return i;
}

/* FNV-1a over alias, a NUL and client: the slot and the check of who is in it */
static uint64_t memory_hash(const char *alias, const char *client) {
        uint64_t h = UINT64_C(14695981039346656037);
        for (const char *p = alias;; p++) {
                h = (h ^ (uint8_t)*p) * UINT64_C(1099511628211);
                if (!*p)
                        break;
        }
        for (const char *p = client; *p; p++)
                h = (h ^ (uint8_t)*p) * UINT64_C(1099511628211);
        return h ?: 1;
}

ssize_t alias_memory_recall(const AliasMemory *m, const char *alias, const char *client, usec_t now) {
        uint64_t who = memory_hash(alias, client);
        size_t s = who % ALIAS_MEMORY_SLOTS;

        if (m->slots[s].who != who || now >= m->slots[s].used + ALIAS_MEMORY_USEC)
                return -1;
        return m->slots[s].target;
}

void alias_memory_store(AliasMemory *m, const char *alias, const char *client, size_t target, usec_t now) {
        uint64_t who = memory_hash(alias, client);
        size_t s = who % ALIAS_MEMORY_SLOTS;

        m->slots[s].who = who;
        m->slots[s].used = now;
        m->slots[s].target = (uint16_t)target;
}

void alias_memory_clear(AliasMemory *m) {
        memset(m, 0, sizeof(*m));
}
