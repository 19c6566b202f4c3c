/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The host's units that match its BusyUnits= patterns and are active (rule:busy-followed): listed with
 * ListUnitsByPatterns when the bus comes up, as a step of its setup, and then kept from the manager's
 * PropertiesChanged on every unit object (one match on the unit path namespace, its ActiveState read as
 * the engine units' is), so that the owner knows the GPU is someone else's before a request waits for a
 * switch. The set is the bus's: forgotten when it is lost, listed again on the next one. */

#include <assert.h>
#include <fnmatch.h>
#include <stdlib.h>

#include "modelgated/hostbus/host-bus-internal.h"
#include "shared/log.h"
#include "shared/strv.h"

static bool busy_state(const char *state) {
        /* what host_bus_list_active() lists, and rule:busy-gpu calls busy */
        return streq(state, "active") || streq(state, "activating") || streq(state, "reloading") ||
               streq(state, "deactivating");
}

static bool busy_pattern_matches(const HostBus *b, const char *unit) {
        STRV_FOREACH (p, b->host->busy_units)
                if (fnmatch(*p, unit, FNM_NOESCAPE) == 0)
                        return true;
        return false;
}

/* unit's ActiveState, as a PropertiesChanged of the Unit interface says it; NULL when it does not */
static int read_active_state(sd_bus_message *m, const char **ret) {
        const char *iface, *key;
        int r;

        *ret = NULL;
        r = sd_bus_message_read(m, "s", &iface);
        if (r < 0 || !streq(iface, SD1 ".Unit"))
                return r;
        r = sd_bus_message_enter_container(m, 'a', "{sv}");
        if (r < 0)
                return r;
        while ((r = sd_bus_message_enter_container(m, 'e', "sv")) > 0) {
                r = sd_bus_message_read(m, "s", &key);
                if (r >= 0 && streq(key, "ActiveState"))
                        r = sd_bus_message_read(m, "v", "s", ret);
                else if (r >= 0)
                        r = sd_bus_message_skip(m, "v");
                if (r < 0)
                        return r;
                r = sd_bus_message_exit_container(m);
                if (r < 0)
                        return r;
        }
        return r;
}

static int busy_changed_cb(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        HostBus *b = userdata;
        _cleanup_free_ char *unit = NULL;
        const char *state;

        if (!host_bus_from_manager(b, m) ||
            sd_bus_path_decode(sd_bus_message_get_path(m), SD1_PATH "/unit", &unit) <= 0 ||
            !busy_pattern_matches(b, unit) || read_active_state(m, &state) < 0 || !state)
                return 0;
        bool now = busy_state(state), was = strv_contains(b->busy_active, unit);
        if (now == was)
                return 0;
        if (now) {
                if (strv_extend(&b->busy_active, unit) < 0)
                        return 0;
        } else {
                size_t j = 0;
                for (size_t i = 0; b->busy_active[i]; i++)
                        if (streq(b->busy_active[i], unit))
                                free(b->busy_active[i]);
                        else
                                b->busy_active[j++] = b->busy_active[i];
                b->busy_active[j] = NULL;
        }
        if (b->up && b->cb.on_busy_changed)
                b->cb.on_busy_changed(b, b->userdata);
        return 0;
}

/* The answer of ListUnitsByPatterns: the units in it are active, and so are those signalled meanwhile */
static void busy_read_list(HostBus *b, sd_bus_message *m) {
        const char *e = bus_message_error(m), *name;
        _cleanup_strv_free_ char **names = NULL;
        int r;

        if (e) {
                /* the switch's own check still asks (rule:busy-gpu): a refusal then, as before */
                log_warning("host %s: cannot list the BusyUnits= units: %s", b->host->name, e);
                return;
        }
        r = sd_bus_message_enter_container(m, 'a', "(ssssssouso)");
        while (r > 0 && (r = sd_bus_message_read(m, "(ssssssouso)", &name, NULL, NULL, NULL, NULL, NULL,
                                                 NULL, NULL, NULL, NULL)) > 0)
                if (strv_extend(&names, name) < 0)
                        r = -ENOMEM;
        if (r < 0)
                log_warning_errno(r, "host %s: cannot read the BusyUnits= units: %m", b->host->name);
        STRV_FOREACH (n, names)
                if (busy_pattern_matches(b, *n) && !strv_contains(b->busy_active, *n) &&
                    strv_extend(&b->busy_active, *n) < 0)
                        break;
}

static int busy_listed_cb(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        HostBus *b = userdata;

        b->busy_list = sd_bus_slot_unref(b->busy_list);
        busy_read_list(b, m);
        host_bus_setup_step_done(b);
        return 0;
}

static int busy_relisted_cb(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        HostBus *b = userdata;

        b->busy_list = sd_bus_slot_unref(b->busy_list);
        busy_read_list(b, m);
        if (b->up && b->cb.on_busy_changed)
                b->cb.on_busy_changed(b, b->userdata);
        return 0;
}

/* The match, and the listing whose answer goes to cb */
static int busy_follow(HostBus *b, sd_bus_message_handler_t cb) {
        char *states[] = {(char *)"active", (char *)"activating", (char *)"reloading",
                          (char *)"deactivating", NULL};
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        int r;

        strv_free(b->busy_active);
        b->busy_active = NULL;
        b->busy_match = sd_bus_slot_unref(b->busy_match);
        /* a listing still under way was asked with the old patterns: its answer is not wanted */
        b->busy_list = sd_bus_slot_unref(b->busy_list);
        /* an empty list would match every unit */
        if (strv_isempty(b->host->busy_units))
                return 0;
        r = sd_bus_add_match_async(b->bus, &b->busy_match,
                                   "type='signal',sender='" SD1
                                   "',interface='org.freedesktop.DBus.Properties',"
                                   "member='PropertiesChanged',path_namespace='" SD1_PATH "/unit',"
                                   "arg0='" SD1 ".Unit'",
                                   busy_changed_cb, NULL, b);
        if (r < 0)
                return r;
        r = sd_bus_message_new_method_call(b->bus, &m, SD1, SD1_PATH, SD1_MANAGER, "ListUnitsByPatterns");
        if (r >= 0)
                r = sd_bus_message_append_strv(m, states);
        if (r >= 0)
                r = sd_bus_message_append_strv(m, b->host->busy_units);
        if (r >= 0)
                r = sd_bus_call_async(b->bus, &b->busy_list, m, cb, b, 0);
        return r < 0 ? r : 1;
}

int host_bus_follow_busy(HostBus *b) {
        assert(b);
        int r = busy_follow(b, busy_listed_cb);

        if (r > 0)
                b->n_setup_pending++;
        return MIN(r, 0);
}

void host_bus_busy_reload(HostBus *b) {
        assert(b);
        /* a bus coming up reads the new patterns itself */
        if (!b->up)
                return;
        int r = busy_follow(b, busy_relisted_cb);
        if (r < 0)
                log_warning_errno(r, "host %s: cannot follow the BusyUnits= units: %m", b->host->name);
        if (r <= 0 && b->cb.on_busy_changed)
                b->cb.on_busy_changed(b, b->userdata);
}

char **host_bus_busy_active(const HostBus *b) {
        assert(b);
        return b->up ? b->busy_active : NULL;
}
