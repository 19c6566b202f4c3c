/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A HostBus owns one sd_bus at a time. Coming up: match Disconnected and
 * JobRemoved, match each unit's PropertiesChanged, Subscribe(), then per unit
 * LoadUnit(), Ref(), GetAll(Unit), GetAll(Service) and GetUnitFileState(),
 * all pipelined (one connection delivers in order, so the matches are in
 * place before anything they must see). When every reply is in, the bus is
 * up. A lost bus fails every pending operation, is closed from a defer
 * source (never inside its own callback), and is replaced after a backoff.
 * systemd-notes.md §1 and §2 have the facts this relies on. */

#include <assert.h>
#include <fcntl.h>
#include <unistd.h>
#include <stdio.h>
#include <string.h>
#include <systemd/sd-bus.h>

#include "modelgated/host-bus.h"
#include "shared/list.h"
#include "shared/log.h"
#include "shared/strv.h"

#define RECONNECT_MIN_USEC (1 * USEC_PER_SEC)
#define RECONNECT_MAX_USEC (60 * USEC_PER_SEC)

#define SD1 "org.freedesktop.systemd1"
#define SD1_PATH "/org/freedesktop/systemd1"
#define SD1_MANAGER SD1 ".Manager"

typedef struct FollowedUnit {
        HostBus *bus;
        size_t index;
        UnitInfo info;
} FollowedUnit;

typedef struct BusOp BusOp;
struct BusOp {
        HostBus *bus;
        LIST_FIELDS(BusOp, ops);
        sd_bus_slot *slot;
        size_t unit;
        char *job; /* the job's path, once StartUnit/StopUnit answered */
        HostBusJobDone job_done;
        HostBusDone done;
        void *userdata;
};

struct HostBus {
        sd_event *event;
        const HostConf *host;
        HostBusCallbacks cb;
        void *userdata;
        char *label;

        sd_bus *bus;
        /* the unique name of org.freedesktop.systemd1 on this bus ("" on a bus without a broker): the
         * sender every signal we act on must have, since sd-bus does not check a well-known sender */
        char *manager_owner;
        /* ssh's (and systemd-stdio-bridge's) stderr: its lines go to the log prefixed and escaped, so that a
         * GPU host cannot write journal lines of its own ("<3>..." at a priority it chooses) */
        sd_event_source *stderr_source;
        char stderr_line[512];
        size_t stderr_len;
        bool up;
        bool subscribed;
        unsigned n_setup_pending;
        bool setup_failed;
        sd_event_source *close_source, *retry_source;
        usec_t backoff;
        char *down_reason;

        FollowedUnit *units;
        size_t n_units;
        BusOp *ops;
};

static void unit_info_done(UnitInfo *u) {
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
        return u->active_state &&
               (streq(u->active_state, "active") || streq(u->active_state, "activating") ||
                streq(u->active_state, "reloading") || streq(u->active_state, "deactivating"));
}

static BusOp *bus_op_free(BusOp *op) {
        if (!op)
                return NULL;
        LIST_REMOVE(ops, op->bus->ops, op);
        sd_bus_slot_unref(op->slot);
        free(op->job);
        free(op);
        return NULL;
}

static BusOp *bus_op_new(HostBus *b, size_t unit, void *userdata) {
        BusOp *op = calloc(1, sizeof(BusOp));
        if (!op)
                return NULL;
        op->bus = b;
        op->unit = unit;
        op->userdata = userdata;
        LIST_PREPEND(ops, b->ops, op);
        return op;
}

/* Ends an operation: its callback runs after it is unlinked, so the callback may start the next one. */
static void bus_op_finish(BusOp *op, const char *result, char **units, const char *error) {
        HostBus *b = op->bus;
        HostBusJobDone job_done = op->job_done;
        HostBusDone done = op->done;
        void *ud = op->userdata;
        size_t unit = op->unit;
        _cleanup_free_ char *e = error ? strdup(error) : NULL;

        bus_op_free(op);
        if (job_done)
                job_done(b, unit, result, e ?: (result ? NULL : "out of memory"), ud);
        else if (done)
                done(b, units, e, ud);
}

static const char *message_error(sd_bus_message *m) {
        const sd_bus_error *e = sd_bus_message_get_error(m);
        if (!e)
                return NULL;
        return e->message ?: e->name ?: "unknown error";
}

/* Reads the properties this module follows from an a{sv}; others are skipped. */
static int read_properties(sd_bus_message *m, UnitInfo *u) {
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
                        char *d = strdup(s);
                        if (!d)
                                return -ENOMEM;
                        free(*target);
                        *target = d;
                } else if (streq(name, "ConditionResult")) {
                        int v;
                        r = sd_bus_message_read(m, "v", "b", &v);
                        if (r < 0)
                                return r;
                        u->condition_result = v;
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

static void setup_step_done(HostBus *b) {
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
        const char *e = message_error(m);
        int r;

        if (e) {
                /* a missing unit answers LoadUnit with LoadState=not-found, but Ref() and the Service
                 * interface fail: the unit check reports it, the bus is still usable */
                log_debug("host %s: reading %s: %s", b->host->name, fu->info.name, e);
        } else if (sd_bus_message_has_signature(m, "a{sv}")) {
                r = read_properties(m, &fu->info);
                if (r < 0)
                        log_warning_errno(r, "host %s: cannot read the properties of %s: %m", b->host->name,
                                          fu->info.name);
        } else if (sd_bus_message_has_signature(m, "s")) {
                const char *s;
                if (sd_bus_message_read(m, "s", &s) >= 0) {
                        free(fu->info.file_state);
                        fu->info.file_state = strdup(s);
                }
        }
        setup_step_done(b);
        return 0;
}

static bool bus_lost(HostBus *b, const char *reason);

static int subscribe_reply_cb(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        HostBus *b = userdata;
        const char *e = message_error(m);

        if (e) {
                /* a transport that failed (Disconnected follows), or a manager that refused us: either
                 * way this bus is no use, and a new one is tried after the backoff */
                b->setup_failed = true;
                log_debug("host %s: Subscribe() failed: %s", b->host->name, e);
                bus_lost(b, sd_bus_message_is_method_error(m, SD_BUS_ERROR_NO_REPLY)
                                    ? "connection closed before the bus came up"
                                    : e);
                return 0;
        }
        b->subscribed = true;
        free(b->manager_owner);
        b->manager_owner = strdup(sd_bus_message_get_sender(m) ?: "");
        setup_step_done(b);
        return 0;
}

/* Whether a signal comes from the service manager, not from another client of the bus that fakes it (a
 * bus policy that lets signals through lets any local user send one with the manager's interface) */
static bool from_manager(HostBus *b, sd_bus_message *m) {
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

        if (!from_manager(b, m))
                return 0;
        r = sd_bus_message_read(m, "s", &iface);
        if (r < 0 || (!streq(iface, SD1 ".Unit") && !streq(iface, SD1 ".Service")))
                return 0;
        r = read_properties(m, &fu->info);
        if (r < 0) {
                log_debug_errno(r, "host %s: bad PropertiesChanged for %s: %m", b->host->name,
                                fu->info.name);
                return 0;
        }
        if (b->up && b->cb.on_unit_changed)
                b->cb.on_unit_changed(b, fu->index, b->userdata);
        return 0;
}

static int job_removed_cb(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        HostBus *b = userdata;
        const char *path, *unit, *result;
        uint32_t id;

        if (!from_manager(b, m) || sd_bus_message_read(m, "uoss", &id, &path, &unit, &result) < 0)
                return 0;
        LIST_FOREACH (ops, op, b->ops)
                if (op->job && streq(op->job, path)) {
                        bus_op_finish(op, result, NULL, NULL);
                        break;
                }
        return 0;
}

static void fail_ops(HostBus *b, const char *why) {
        /* callbacks may add operations; they fail at once on a closed bus, so this ends */
        while (b->ops)
                bus_op_finish(b->ops, NULL, NULL, why);
}

static int close_cb(sd_event_source *s, void *userdata);

/* false: it was lost already (its operations failed then) */
static bool bus_lost(HostBus *b, const char *reason) {
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
        fail_ops(b, why ?: reason);
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
        bus_lost(b, reason ?: "bus connection lost");
        return 0;
}

static int retry_cb(sd_event_source *s, uint64_t usec, void *userdata) {
        host_bus_connect(userdata);
        return 0;
}

static void schedule_retry(HostBus *b) {
        b->backoff = b->backoff ? MIN(b->backoff * 2, RECONNECT_MAX_USEC) : RECONNECT_MIN_USEC;
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
        /* not flushed: a stalled ssh would block the loop; closing stops and reaps the child */
        b->bus = sd_bus_close_unref(b->bus);
        schedule_retry(b);
        return 0;
}

static char *address_escape(const char *s) {
        char *r = malloc(strlen(s) * 3 + 1), *p = r;
        if (!r)
                return NULL;
        for (; *s; s++) {
                if ((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
                    strchr("_-/.", *s))
                        *p++ = *s;
                else
                        p += sprintf(p, "%%%02x", (unsigned char)*s);
        }
        *p = 0;
        return r;
}

static int bus_setup_address(HostBus *b, char **ret_reason) {
        int r;

        switch (b->host->bus_kind) {
        case BUS_LOCAL: {
                const char *a = getenv("DBUS_SESSION_BUS_ADDRESS"), *rt = getenv("XDG_RUNTIME_DIR");
                _cleanup_free_ char *addr = NULL, *e = NULL;
                if (!a) {
                        if (!rt) {
                                *ret_reason = strdup("no user bus (neither DBUS_SESSION_BUS_ADDRESS nor "
                                                     "XDG_RUNTIME_DIR is set)");
                                return -ENOMEDIUM;
                        }
                        e = address_escape(rt);
                        if (!e || asprintf(&addr, "unix:path=%s/bus", e) < 0)
                                return -ENOMEM;
                        a = addr;
                }
                return sd_bus_set_address(b->bus, a);
        }
        case BUS_SYSTEM:
                return sd_bus_set_address(b->bus, getenv("DBUS_SYSTEM_BUS_ADDRESS")
                                                          ?: "unix:path=/run/dbus/system_bus_socket");
        case BUS_SSH: {
                _cleanup_strv_free_ char **argv = NULL;
                r = host_conf_ssh_argv(b->host, &argv);
                if (r < 0)
                        return r;
                return sd_bus_set_exec(b->bus, argv[0], argv);
        }
        }
        return -EINVAL;
}

static int bus_send_setup(HostBus *b) {
        int r;

        r = sd_bus_match_signal_async(b->bus, NULL, "org.freedesktop.DBus.Local", NULL,
                                      "org.freedesktop.DBus.Local", "Disconnected", disconnected_cb, NULL,
                                      b);
        if (r < 0)
                return r;
        r = sd_bus_match_signal_async(b->bus, NULL, SD1, SD1_PATH, SD1_MANAGER, "JobRemoved", job_removed_cb,
                                      NULL, b);
        if (r < 0)
                return r;
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
                FollowedUnit *fu = &b->units[i];
                struct {
                        const char *path, *iface, *member, *sig;
                        const void *arg;
                } calls[] = {
                        {SD1_PATH, SD1_MANAGER, "LoadUnit", "s", fu->info.name},
                        /* keeps the unit loaded, so an inactive outcome stays readable (§2.5) */
                        {fu->info.path, SD1 ".Unit", "Ref", NULL, NULL},
                        /* "": every interface, so Unit and Service properties in one answer */
                        {fu->info.path, "org.freedesktop.DBus.Properties", "GetAll", "s", ""},
                        /* computed on every call; the Unit property is cached until daemon-reload (§2.8) */
                        {SD1_PATH, SD1_MANAGER, "GetUnitFileState", "s", fu->info.name},
                };
                for (size_t k = 0; k < ELEMENTSOF(calls); k++) {
                        r = sd_bus_call_method_async(b->bus, NULL, SD1, calls[k].path, calls[k].iface,
                                                     calls[k].member, setup_reply_cb, fu, calls[k].sig,
                                                     calls[k].arg);
                        if (r < 0)
                                return r;
                        b->n_setup_pending++;
                }
        }
        return 0;
}

static void stderr_flush(HostBus *b) {
        char e[4 * sizeof(b->stderr_line) + 8];

        if (b->stderr_len == 0)
                return;
        log_escape(e, sizeof(e), b->stderr_line, b->stderr_len);
        log_warning("host %s: %s: %s", b->host->name, b->host->bus_kind == BUS_SSH ? "ssh" : "bus", e);
        b->stderr_len = 0;
}

static int stderr_cb(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        HostBus *b = userdata;
        char buf[4096];
        ssize_t k = read(fd, buf, sizeof(buf));

        if (k < 0 && (errno == EAGAIN || errno == EINTR))
                return 0;
        if (k <= 0) {
                /* every writer has gone (the child exited) */
                stderr_flush(b);
                b->stderr_source = sd_event_source_disable_unref(b->stderr_source);
                return 0;
        }
        for (ssize_t i = 0; i < k; i++) {
                if (buf[i] == '\n' || buf[i] == '\r') {
                        stderr_flush(b);
                        continue;
                }
                if (b->stderr_len == sizeof(b->stderr_line))
                        stderr_flush(b);
                b->stderr_line[b->stderr_len++] = buf[i];
        }
        return 0;
}

/* sd_bus_start() forks the ssh child for an exec: address; its stderr is made a pipe of ours for the
 * moment of the fork (the loop is single-threaded, so nothing else writes to fd 2 meanwhile) */
static int bus_start(HostBus *b) {
        _cleanup_close_ int saved = -1, rd = -1, wr = -1;
        int p[2], r;

        if (b->host->bus_kind != BUS_SSH)
                return sd_bus_start(b->bus);
        stderr_flush(b);
        b->stderr_source = sd_event_source_disable_unref(b->stderr_source);
        if (pipe2(p, O_CLOEXEC) < 0)
                return sd_bus_start(b->bus);
        rd = p[0];
        wr = p[1];
        (void)fcntl(rd, F_SETFL, O_NONBLOCK);
        saved = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
        if (saved < 0 || dup2(wr, STDERR_FILENO) < 0)
                return sd_bus_start(b->bus);
        r = sd_bus_start(b->bus);
        (void)dup2(saved, STDERR_FILENO);
        if (sd_event_add_io(b->event, &b->stderr_source, rd, EPOLLIN, stderr_cb, b) >= 0) {
                (void)sd_event_source_set_io_fd_own(b->stderr_source, true);
                TAKE_FD(rd);
        }
        return r;
}

void host_bus_connect(HostBus *b) {
        _cleanup_free_ char *reason = NULL;
        int r;

        if (b->bus)
                return;
        b->up = b->subscribed = b->setup_failed = false;
        b->manager_owner = mfree(b->manager_owner);
        b->down_reason = mfree(b->down_reason);
        for (size_t i = 0; i < b->n_units; i++) {
                UnitInfo *u = &b->units[i].info;
                char *name = TAKE_PTR(u->name), *path = TAKE_PTR(u->path);
                unit_info_done(u);
                u->name = name;
                u->path = path;
        }

        r = sd_bus_new(&b->bus);
        if (r >= 0)
                r = bus_setup_address(b, &reason);
        if (r >= 0)
                r = sd_bus_set_bus_client(b->bus, true);
        if (r >= 0)
                r = sd_bus_set_description(b->bus, b->host->name);
        if (r >= 0)
                r = sd_bus_attach_event(b->bus, b->event, SD_EVENT_PRIORITY_NORMAL);
        if (r >= 0)
                r = bus_start(b);
        if (r >= 0)
                r = bus_send_setup(b);
        if (r < 0) {
                if (!reason)
                        reason = strdup(strerror(-r));
                b->up = false;
                if (b->bus) {
                        /* the close waits for the loop: we may be inside a callback of the caller */
                        b->down_reason = strdup(reason ?: "cannot connect");
                        bus_lost(b, reason ?: "cannot connect");
                } else {
                        if (b->cb.on_down)
                                b->cb.on_down(b, reason ?: "cannot connect", b->userdata);
                        schedule_retry(b);
                }
        }
}

int host_bus_new(sd_event *e, const HostConf *h, char **units, const HostBusCallbacks *cb, void *userdata,
                 HostBus **ret) {
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
        b->n_units = strv_length(units);
        b->units = calloc(MAX(b->n_units, 1u), sizeof(FollowedUnit));
        if (!b->units)
                return -ENOMEM;
        for (size_t i = 0; i < b->n_units; i++) {
                FollowedUnit *fu = &b->units[i];
                fu->bus = b;
                fu->index = i;
                if (!(fu->info.name = strdup(units[i])))
                        return -ENOMEM;
                r = sd_bus_path_encode(SD1_PATH "/unit", units[i], &fu->info.path);
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
        while (b->ops)
                bus_op_free(b->ops);
        b->bus = sd_bus_close_unref(b->bus);
        sd_event_source_disable_unref(b->close_source);
        sd_event_source_disable_unref(b->retry_source);
        for (size_t i = 0; i < b->n_units; i++)
                unit_info_done(&b->units[i].info);
        free(b->units);
        free(b->label);
        free(b->down_reason);
        free(b->manager_owner);
        stderr_flush(b);
        sd_event_source_disable_unref(b->stderr_source);
        sd_event_unref(b->event);
        free(b);
        return NULL;
}

bool host_bus_is_up(const HostBus *b) {
        return b && b->up;
}

size_t host_bus_n_units(const HostBus *b) {
        return b->n_units;
}

const UnitInfo *host_bus_unit(const HostBus *b, size_t i) {
        assert(i < b->n_units);
        return &b->units[i].info;
}

const char *host_bus_label(const HostBus *b) {
        return b->label;
}

void host_bus_forget(HostBus *b, void *userdata) {
        LIST_FOREACH_SAFE (ops, op, next, b->ops)
                if (op->userdata == userdata)
                        bus_op_free(op);
}

/* An error reply that sd-bus makes up for each pending call when the connection closes ("Connection
 * terminated") arrives before the Disconnected signal: the news is the lost bus, so the owner hears "host
 * down" first, as for any other lost bus, and the operation fails with it. true: op is gone. */
static bool op_bus_closing(BusOp *op, sd_bus_message *m) {
        if (!sd_bus_message_is_method_error(m, NULL) || sd_bus_is_open(op->bus->bus) > 0)
                return false;
        op->slot = sd_bus_slot_unref(op->slot);
        if (!bus_lost(op->bus, "bus connection lost"))
                bus_op_finish(op, NULL, NULL, "bus connection lost");
        return true;
}

static int job_reply_cb(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        BusOp *op = userdata;
        const char *e = message_error(m), *path;
        int r;

        if (op_bus_closing(op, m))
                return 0;
        op->slot = sd_bus_slot_unref(op->slot);
        if (e) {
                bus_op_finish(op, NULL, NULL, e);
                return 0;
        }
        r = sd_bus_message_read(m, "o", &path);
        if (r < 0 || !(op->job = strdup(path))) {
                bus_op_finish(op, NULL, NULL, "bad reply from the service manager");
                return 0;
        }
        /* JobRemoved comes later: the reply is sent before the job runs (systemd-notes.md §2.4) */
        return 0;
}

/* Sends m as operation on unit i; reply_cb gets it, and ends it with bus_op_finish(). */
static int bus_op_send(HostBus *b, size_t i, void *userdata, HostBusJobDone job_done, HostBusDone done,
                       sd_bus_message *m, sd_bus_message_handler_t reply_cb) {
        BusOp *op = bus_op_new(b, i, userdata);
        int r;

        if (!op)
                return -ENOMEM;
        op->job_done = job_done;
        op->done = done;
        r = sd_bus_call_async(b->bus, &op->slot, m, reply_cb, op, 0);
        if (r < 0)
                bus_op_free(op);
        return r < 0 ? r : 0;
}

int host_bus_job(HostBus *b, const char *method, size_t i, const char *mode, HostBusJobDone cb,
                 void *userdata) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        int r;

        if (!b->up)
                return -ENOTCONN;
        r = sd_bus_message_new_method_call(b->bus, &m, SD1, SD1_PATH, SD1_MANAGER, method);
        if (r >= 0)
                r = sd_bus_message_append(m, "ss", b->units[i].info.name, mode);
        if (r < 0)
                return r;
        return bus_op_send(b, i, userdata, cb, NULL, m, job_reply_cb);
}

static int refresh_reply_cb(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        BusOp *op = userdata;
        const char *e = message_error(m);

        if (op_bus_closing(op, m))
                return 0;
        op->slot = sd_bus_slot_unref(op->slot);
        if (!e && read_properties(m, &op->bus->units[op->unit].info) < 0)
                e = "bad reply from the service manager";
        bus_op_finish(op, NULL, NULL, e);
        return 0;
}

int host_bus_refresh_unit(HostBus *b, size_t i, HostBusDone cb, void *userdata) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        int r;

        if (!b->up)
                return -ENOTCONN;
        r = sd_bus_message_new_method_call(b->bus, &m, SD1, b->units[i].info.path,
                                           "org.freedesktop.DBus.Properties", "GetAll");
        if (r >= 0)
                r = sd_bus_message_append(m, "s", ""); /* "": every interface */
        if (r < 0)
                return r;
        return bus_op_send(b, i, userdata, NULL, cb, m, refresh_reply_cb);
}

static int list_reply_cb(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        BusOp *op = userdata;
        _cleanup_strv_free_ char **names = NULL;
        const char *e = message_error(m);
        int r;

        if (op_bus_closing(op, m))
                return 0;
        op->slot = sd_bus_slot_unref(op->slot);
        if (e) {
                bus_op_finish(op, NULL, NULL, e);
                return 0;
        }
        r = sd_bus_message_enter_container(m, 'a', "(ssssssouso)");
        while (r >= 0) {
                const char *name, *d, *load, *active, *sub, *following, *upath, *jtype, *jpath;
                uint32_t jid;
                r = sd_bus_message_read(m, "(ssssssouso)", &name, &d, &load, &active, &sub, &following,
                                        &upath, &jid, &jtype, &jpath);
                if (r <= 0)
                        break;
                if (strv_extend(&names, name) < 0)
                        r = -ENOMEM;
        }
        if (r < 0) {
                bus_op_finish(op, NULL, NULL, "bad reply from the service manager");
                return 0;
        }
        if (!names && !(names = calloc(1, sizeof(char *)))) {
                bus_op_finish(op, NULL, NULL, "out of memory");
                return 0;
        }
        bus_op_finish(op, NULL, names, NULL);
        return 0;
}

int host_bus_list_active(HostBus *b, char **patterns, HostBusDone cb, void *userdata) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        char *states[] = {(char *)"active", (char *)"activating", (char *)"reloading",
                          (char *)"deactivating", NULL};
        int r;

        if (!b->up)
                return -ENOTCONN;
        r = sd_bus_message_new_method_call(b->bus, &m, SD1, SD1_PATH, SD1_MANAGER, "ListUnitsByPatterns");
        if (r >= 0)
                r = sd_bus_message_append_strv(m, states);
        if (r >= 0)
                r = sd_bus_message_append_strv(m, patterns);
        if (r < 0)
                return r;
        return bus_op_send(b, 0, userdata, NULL, cb, m, list_reply_cb);
}

void host_bus_set_conf(HostBus *b, const HostConf *h) {
        b->host = h;
}
