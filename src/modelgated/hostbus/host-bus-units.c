/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The units a HostBus follows, and the trust in what it hears of them. On each new connection: match
 * NameOwnerChanged and each unit's PropertiesChanged, Subscribe(), then per unit LoadUnit(), Ref(),
 * GetAll() and GetUnitFileState(), all pipelined (one connection delivers in order, so the matches are
 * in place before anything they must see). When every reply is in, the bus is up. From then on
 * PropertiesChanged keeps each UnitInfo current, and a signal is acted on only when it comes from the
 * manager's unique name, learnt from Subscribe()'s reply and followed through NameOwnerChanged.
 * rule:job-match-first, rule:job-done-is-not-running, rule:enabled-uncached and rule:engine-unit-checks say
 * what this relies on. */

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "modelgated/hostbus/host-bus-internal.h"
#include "shared/log.h"
#include "shared/strv.h"

void unit_info_done(UnitInfo *u) {
        free(u->name);
        free(u->path);
        free(u->load_state);
        free(u->active_state);
        free(u->sub_state);
        free(u->result);
        free(u->restart);
        free(u->file_state);
        strv_free(u->conflicts);
        *u = (UnitInfo){};
}

bool unit_info_is_running(const UnitInfo *u) {
        assert(u);
        return u->active_state &&
               (streq(u->active_state, "active") || streq(u->active_state, "activating") ||
                streq(u->active_state, "reloading") || streq(u->active_state, "deactivating"));
}

/* an asprintf()'s result r and string w into *l (w is not set when r < 0) */
static int push(char ***l, int r, char *w) {
        if (r < 0)
                return -ENOMEM;
        if (strv_push(l, w) < 0) {
                free(w);
                return -ENOMEM;
        }
        return 0;
}

int unit_info_check(const UnitInfo *u, char *const *engine_units, char ***warnings) {
        assert(u);
        char *w = NULL;
        int r;

        if (u->load_state && !streq(u->load_state, "loaded")) {
                r = asprintf(&w, "engine unit %s is %s", u->name, u->load_state);
                return push(warnings, r, w);
        }
        if (u->file_state && (startswith(u->file_state, "enabled") || streq(u->file_state, "indirect") ||
                              startswith(u->file_state, "linked"))) {
                r = asprintf(&w,
                             "engine unit %s is %s; modelgate starts engines itself, so it should have no "
                             "[Install] section and not be enabled",
                             u->name, u->file_state);
                if (push(warnings, r, w) < 0)
                        return -ENOMEM;
        }
        if (u->restart && !streq(u->restart, "no")) {
                r = asprintf(
                        &w,
                        "engine unit %s has Restart=%s; use Restart=no, so that a crash is seen and not "
                        "hidden by a restart that takes the GPU back",
                        u->name, u->restart);
                if (push(warnings, r, w) < 0)
                        return -ENOMEM;
        }
        STRV_FOREACH (other, (char **)engine_units) {
                if (streq(*other, u->name) || strv_contains(u->conflicts, *other))
                        continue;
                r = asprintf(&w, "engine unit %s lacks Conflicts=%s, so both could run at once", u->name,
                             *other);
                if (push(warnings, r, w) < 0)
                        return -ENOMEM;
        }
        return 0;
}

void host_bus_reset_units(HostBus *b) {
        assert(b);
        for (size_t i = 0; i < b->n_units; i++) {
                UnitInfo *u = &b->units[i].info;
                char *name = TAKE_PTR(u->name), *path = TAKE_PTR(u->path);
                unit_info_done(u);
                u->name = name;
                u->path = path;
        }
}

int unit_info_read_properties(sd_bus_message *m, UnitInfo *u) {
        int r;

        r = sd_bus_message_enter_container(m, 'a', "{sv}");
        if (r < 0)
                return r;
        while ((r = sd_bus_message_enter_container(m, 'e', "sv")) > 0) {
                const char *name, *s;
                char **target = NULL;

                r = sd_bus_message_read(m, "s", &name);
                if (r < 0)
                        return r;
                if (streq(name, "LoadState"))
                        target = &u->load_state;
                else if (streq(name, "ActiveState"))
                        target = &u->active_state;
                else if (streq(name, "SubState"))
                        target = &u->sub_state;
                else if (streq(name, "Result"))
                        target = &u->result;
                else if (streq(name, "Restart"))
                        target = &u->restart;

                if (target) {
                        r = sd_bus_message_read(m, "v", "s", &s);
                        if (r < 0)
                                return r;
                        /* a host's manager (or whatever answers on its bus) is not trusted with our log
                         * lines and LastError: what it says is kept escaped, as a client's strings are */
                        char *d = log_escape_dup(s);
                        if (!d)
                                return -ENOMEM;
                        free(*target);
                        *target = d;
                } else if (streq(name, "ActiveEnterTimestamp") || streq(name, "TimeoutStopUSec")) {
                        uint64_t v;
                        r = sd_bus_message_read(m, "v", "t", &v);
                        if (r < 0)
                                return r;
                        *(streq(name, "TimeoutStopUSec") ? &u->timeout_stop : &u->active_enter) = v;
                } else if (streq(name, "ConditionResult")) {
                        int v;
                        r = sd_bus_message_read(m, "v", "b", &v);
                        if (r < 0)
                                return r;
                        u->condition_result = v;
                } else if (streq(name, "ExecMainCode") || streq(name, "ExecMainStatus")) {
                        int v;
                        r = sd_bus_message_read(m, "v", "i", &v);
                        if (r < 0)
                                return r;
                        *(streq(name, "ExecMainCode") ? &u->exec_main_code : &u->exec_main_status) = v;
                } else if (streq(name, "Conflicts")) {
                        char **l = NULL;
                        r = sd_bus_message_enter_container(m, 'v', "as");
                        if (r < 0)
                                return r;
                        r = sd_bus_message_read_strv(m, &l);
                        if (r < 0)
                                return r;
                        strv_free(u->conflicts);
                        u->conflicts = l;
                        r = sd_bus_message_exit_container(m);
                        if (r < 0)
                                return r;
                } else {
                        r = sd_bus_message_skip(m, "v");
                        if (r < 0)
                                return r;
                }
                r = sd_bus_message_exit_container(m);
                if (r < 0)
                        return r;
        }
        if (r < 0)
                return r;
        return sd_bus_message_exit_container(m);
}

void host_bus_setup_step_done(HostBus *b) {
        assert(b->n_setup_pending > 0);
        if (--b->n_setup_pending > 0 || b->setup_failed || !b->subscribed)
                return;
        for (size_t i = 0; i < b->n_units; i++)
                b->units[i].info.read = true;
        b->up = true;
        b->backoff = 0;
        b->down_reason = mfree(b->down_reason);
        if (b->cb.on_up)
                b->cb.on_up(b, b->userdata);
}

static int setup_reply_cb(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        FollowedUnit *fu = userdata;
        HostBus *b = fu->bus;
        const char *e = bus_message_error(m);
        int r;

        if (e) {
                /* a missing unit answers LoadUnit with LoadState=not-found, but Ref() and the Service
                 * interface fail: the unit check reports it, the bus is still usable */
                log_debug("host %s: reading %s: %s", b->host->name, fu->info.name, e);
        } else if (sd_bus_message_has_signature(m, "a{sv}")) {
                r = unit_info_read_properties(m, &fu->info);
                if (r < 0)
                        log_warning_errno(r, "host %s: cannot read the properties of %s: %m", b->host->name,
                                          fu->info.name);
        } else if (sd_bus_message_has_signature(m, "s")) {
                const char *s;
                if (sd_bus_message_read(m, "s", &s) >= 0) {
                        free(fu->info.file_state);
                        fu->info.file_state = log_escape_dup(s);
                }
        }
        host_bus_setup_step_done(b);
        return 0;
}

/* Who holds our end of the bus on the host: not part of the setup (a direct connection has no broker to
 * ask), and long known by the time a switch wants a lease */
static int peer_pid_cb(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        HostBus *b = userdata;
        uint32_t pid;

        if (!sd_bus_message_is_method_error(m, NULL) && sd_bus_message_read(m, "u", &pid) >= 0)
                b->peer_pid = pid;
        return 0;
}

static int subscribe_reply_cb(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        HostBus *b = userdata;
        const char *e = bus_message_error(m);

        if (e) {
                /* a transport that failed (Disconnected follows), or a manager that refused us: either
                 * way this bus is no use, and a new one is tried after the backoff */
                b->setup_failed = true;
                log_debug("host %s: Subscribe() failed: %s", b->host->name, e);
                host_bus_lost(b, sd_bus_message_is_method_error(m, SD_BUS_ERROR_NO_REPLY)
                                         ? "connection closed before the bus came up"
                                         : e);
                return 0;
        }
        b->subscribed = true;
        free(b->manager_owner);
        b->manager_owner = strdup(sd_bus_message_get_sender(m) ?: "");
        /* a reply came, so the bus runs and its unique name is known without waiting */
        const char *unique = NULL;
        if (b->manager_owner && *b->manager_owner && sd_bus_get_unique_name(b->bus, &unique) >= 0)
                (void)sd_bus_call_method_async(b->bus, NULL, "org.freedesktop.DBus", "/org/freedesktop/DBus",
                                               "org.freedesktop.DBus", "GetConnectionUnixProcessID",
                                               peer_pid_cb, b, "s", unique);
        host_bus_setup_step_done(b);
        return 0;
}

/* A bus policy that lets signals through lets any local user send one with the manager's interface:
 * only the manager's unique name is believed. */
bool host_bus_from_manager(HostBus *b, sd_bus_message *m) {
        assert(b);
        const char *sender = sd_bus_message_get_sender(m);
        if (!b->manager_owner)
                return false; /* not known yet: the state is read after Subscribe() anyway */
        if (!*b->manager_owner)
                return true; /* a direct connection: the peer is the manager */
        if (sender && streq(sender, b->manager_owner))
                return true;
        log_debug("host %s: a %s signal from %s, not from the service manager (%s), ignored", b->host->name,
                  strna(sd_bus_message_get_member(m)), strna(sender), b->manager_owner);
        return false;
}

static int name_owner_changed_cb(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        HostBus *b = userdata;
        const char *name, *old, *new;

        /* only the bus itself says who owns a name */
        if (!streq_ptr(sd_bus_message_get_sender(m), "org.freedesktop.DBus") ||
            sd_bus_message_read(m, "sss", &name, &old, &new) < 0 || !streq(name, SD1) || !b->manager_owner)
                return 0;
        free(b->manager_owner);
        /* while nobody owns it, no signal is the manager's: "-" is no unique name */
        b->manager_owner = strdup(*new ? new : "-");
        return 0;
}

static int properties_changed_cb(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        FollowedUnit *fu = userdata;
        HostBus *b = fu->bus;
        const char *iface;
        int r;

        if (!host_bus_from_manager(b, m))
                return 0;
        r = sd_bus_message_read(m, "s", &iface);
        if (r < 0 || (!streq(iface, SD1 ".Unit") && !streq(iface, SD1 ".Service")))
                return 0;
        r = unit_info_read_properties(m, &fu->info);
        if (r < 0) {
                log_debug_errno(r, "host %s: bad PropertiesChanged for %s: %m", b->host->name,
                                fu->info.name);
                return 0;
        }
        if (b->up && b->cb.on_unit_changed)
                b->cb.on_unit_changed(b, fu->index, b->userdata);
        return 0;
}

static int send_unit_reads(HostBus *b, FollowedUnit *fu) {
        struct {
                const char *path, *iface, *member, *sig;
                const void *arg;
        } calls[] = {
                {SD1_PATH, SD1_MANAGER, "LoadUnit", "s", fu->info.name},
                /* rule:job-done-is-not-running: keeps the unit loaded, its outcome readable */
                {fu->info.path, SD1 ".Unit", "Ref", NULL, NULL},
                /* "": every interface, so Unit and Service properties in one answer */
                {fu->info.path, "org.freedesktop.DBus.Properties", "GetAll", "s", ""},
                /* rule:enabled-uncached: computed on every call, where the Unit property is cached */
                {SD1_PATH, SD1_MANAGER, "GetUnitFileState", "s", fu->info.name},
        };
        int r;

        for (size_t k = 0; k < ELEMENTSOF(calls); k++) {
                /* a watched unit is another client's transient one: a LoadUnit() or Ref() would keep it
                 * loaded after it ends, and its name could not be started again (UnitExists) */
                if (fu->watched && k != 2)
                        continue;
                r = sd_bus_call_method_async(b->bus, NULL, SD1, calls[k].path, calls[k].iface,
                                             calls[k].member, setup_reply_cb, fu, calls[k].sig,
                                             calls[k].arg);
                if (r < 0)
                        return r;
                b->n_setup_pending++;
        }
        return 0;
}

int host_bus_follow_units(HostBus *b) {
        assert(b);
        int r;

        b->peer_pid = 0;

        /* a manager that re-executes comes back under a new unique name */
        r = sd_bus_match_signal_async(b->bus, NULL, "org.freedesktop.DBus", "/org/freedesktop/DBus",
                                      "org.freedesktop.DBus", "NameOwnerChanged", name_owner_changed_cb,
                                      NULL, b);
        if (r < 0)
                return r;
        for (size_t i = 0; i < b->n_units; i++) {
                FollowedUnit *fu = &b->units[i];
                r = sd_bus_match_signal_async(b->bus, NULL, SD1, fu->info.path,
                                              "org.freedesktop.DBus.Properties", "PropertiesChanged",
                                              properties_changed_cb, NULL, fu);
                if (r < 0)
                        return r;
        }
        b->n_setup_pending = 1;
        r = sd_bus_call_method_async(b->bus, NULL, SD1, SD1_PATH, SD1_MANAGER, "Subscribe",
                                     subscribe_reply_cb, b, NULL);
        if (r < 0)
                return r;
        for (size_t i = 0; i < b->n_units; i++) {
                r = send_unit_reads(b, &b->units[i]);
                if (r < 0)
                        return r;
        }
        return host_bus_follow_busy(b);
}
