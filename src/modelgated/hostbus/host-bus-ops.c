/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The calls an owner of a HostBus waits for: StartUnit/StopUnit until the job's JobRemoved (of a followed
 * unit, or of one by name), a re-read of one unit, a listing of active units, the transient idle
 * timer with its service (rule:idle-stop-on-host), also to its JobRemoved, and the read of the host's GPU
 * owner file by a transient unit (rule:gpu-owner). Each is a BusOp owned by the
 * HostBus, carrying the owner's callback and userdata; it ends exactly once, by its answer, by the lost bus
 * (every pending one fails then), or silently when its owner forgets it or the HostBus is freed. */

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "modelgated/hostbus/host-bus-internal.h"
#include "modelgated/api/refusal-words.h"
#include "shared/log.h"
#include "shared/random-util.h"
#include "shared/strv.h"

static void owner_unit_stop(BusOp *op);

static BusOp *bus_op_free(BusOp *op) {
        if (!op)
                return NULL;
        /* rule:gpu-owner: whatever ends the read (its answer, a forget, the HostBus's end), its unit goes */
        if (op->transient)
                owner_unit_stop(op);
        LIST_REMOVE(ops, op->bus->ops, op);
        sd_bus_slot_unref(op->slot);
        free(op->job);
        free(op->transient);
        free(op->text);
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
        HostBusText text_done = op->text_done;
        void *ud = op->userdata;
        size_t unit = op->unit;
        /* the job's result, a bus error's message and the owner's text come from the host: escaped
         * before any log line, LastError or client message can carry them */
        _cleanup_free_ char *e = error ? log_escape_dup(error) : NULL,
                            *res = result ? log_escape_dup(result) : NULL,
                            *text = op->text && !error ? log_escape_dup(op->text) : NULL;

        bus_op_free(op);
        if (job_done)
                job_done(b, unit, res, e ?: (res ? NULL : "out of memory"), ud);
        else if (done)
                done(b, units, e, ud);
        else if (text_done) {
                /* rule:gpu-owner: read for a 423, whose words must not make an agent retry it
                 * (rule:refusal-words): escaped first, since an escape may make a number of two bytes */
                if (text)
                        (void)refusal_words_strip(text);
                text_done(b, text, e ?: (text ? NULL : "out of memory"), ud);
        }
}

void host_bus_fail_ops(HostBus *b, const char *why) {
        assert(b);
        /* callbacks may add operations; they fail at once on a closed bus, so this ends */
        while (b->ops)
                bus_op_finish(b->ops, NULL, NULL, why);
}

void host_bus_free_ops(HostBus *b) {
        assert(b);
        while (b->ops)
                bus_op_free(b->ops);
}

void host_bus_forget(HostBus *b, void *userdata) {
        assert(b);
        LIST_FOREACH_SAFE (ops, op, next, b->ops)
                if (op->userdata == userdata)
                        bus_op_free(op);
}

static void owner_job_done(BusOp *op, const char *result);

static int job_removed_cb(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        HostBus *b = userdata;
        const char *path, *unit, *result;
        uint32_t id;

        if (!host_bus_from_manager(b, m) || sd_bus_message_read(m, "uoss", &id, &path, &unit, &result) < 0)
                return 0;
        LIST_FOREACH (ops, op, b->ops)
                if (op->job && streq(op->job, path)) {
                        if (op->text_done)
                                owner_job_done(op, result);
                        else
                                bus_op_finish(op, result, NULL, NULL);
                        break;
                }
        return 0;
}

int host_bus_match_job_removed(HostBus *b) {
        assert(b);
        return sd_bus_match_signal_async(b->bus, NULL, SD1, SD1_PATH, SD1_MANAGER, "JobRemoved",
                                         job_removed_cb, NULL, b);
}

/* An error reply that sd-bus makes up for each pending call when the connection closes ("Connection
 * terminated") arrives before the Disconnected signal: the news is the lost bus, so the owner hears "host
 * down" first, as for any other lost bus, and the operation fails with it. true: op is gone. */
static bool op_bus_closing(BusOp *op, sd_bus_message *m) {
        if (!sd_bus_message_is_method_error(m, NULL) || sd_bus_is_open(op->bus->bus) > 0)
                return false;
        op->slot = sd_bus_slot_unref(op->slot);
        if (!host_bus_lost(op->bus, "bus connection lost"))
                bus_op_finish(op, NULL, NULL, "bus connection lost");
        return true;
}

static int job_reply_cb(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        BusOp *op = userdata;
        const char *e = bus_message_error(m), *path;
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
        /* JobRemoved comes later: the reply is sent before the job runs (rule:job-match-first) */
        return 0;
}

/* Sends m for op; reply_cb gets it, and ends it with bus_op_finish(). On failure op is freed. */
static int bus_op_call(BusOp *op, sd_bus_message *m, sd_bus_message_handler_t reply_cb) {
        int r = sd_bus_call_async(op->bus->bus, &op->slot, m, reply_cb, op, 0);
        if (r < 0)
                bus_op_free(op);
        return r < 0 ? r : 0;
}

/* Sends m as operation on unit i */
static int bus_op_send(HostBus *b, size_t i, void *userdata, HostBusJobDone job_done, HostBusDone done,
                       sd_bus_message *m, sd_bus_message_handler_t reply_cb) {
        BusOp *op = bus_op_new(b, i, userdata);

        if (!op)
                return -ENOMEM;
        op->job_done = job_done;
        op->done = done;
        return bus_op_call(op, m, reply_cb);
}

static int unit_job(HostBus *b, const char *method, size_t i, const char *unit, const char *mode,
                    HostBusJobDone cb, void *userdata) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        int r;

        if (!b->up)
                return -ENOTCONN;
        r = sd_bus_message_new_method_call(b->bus, &m, SD1, SD1_PATH, SD1_MANAGER, method);
        if (r >= 0)
                r = sd_bus_message_append(m, "ss", unit, mode);
        if (r < 0)
                return r;
        return bus_op_send(b, i, userdata, cb, NULL, m, job_reply_cb);
}

int host_bus_job(HostBus *b, const char *method, size_t i, const char *mode, HostBusJobDone cb,
                 void *userdata) {
        assert(b);
        return unit_job(b, method, i, b->units[i].info.name, mode, cb, userdata);
}

int host_bus_unit_job(HostBus *b, const char *method, const char *unit, HostBusJobDone cb, void *userdata) {
        assert(b);
        assert(unit);
        return unit_job(b, method, SIZE_MAX, unit, "replace", cb, userdata);
}

static int refresh_reply_cb(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        BusOp *op = userdata;
        const char *e = bus_message_error(m);

        if (op_bus_closing(op, m))
                return 0;
        op->slot = sd_bus_slot_unref(op->slot);
        if (!e && unit_info_read_properties(m, &op->bus->units[op->unit].info) < 0)
                e = "bad reply from the service manager";
        bus_op_finish(op, NULL, NULL, e);
        return 0;
}

int host_bus_refresh_unit(HostBus *b, size_t i, HostBusDone cb, void *userdata) {
        assert(b);
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
        const char *e = bus_message_error(m);
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
        assert(b);
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

/* The service the timer starts: systemctl on the host stops the engine unit, through the same
 * manager, with the same StopUnit job modelgate would send. Both units go when inactive, failed or
 * not (CollectMode=), so none is left behind in list-units. */
static int append_stopper(sd_bus_message *m, const HostBus *b, const char *service, const char *stop_unit) {
        bool user = b->host->bus_kind != BUS_SYSTEM;
        int r;

        r = sd_bus_message_open_container(m, 'a', "(sa(sv))");
        if (r >= 0)
                r = sd_bus_message_open_container(m, 'r', "sa(sv)");
        if (r >= 0)
                r = sd_bus_message_append(m, "s", service);
        if (r >= 0 && user)
                r = sd_bus_message_append(m, "a(sv)", 4, "Description", "s", "modelgate: idle stop", "Type",
                                          "s", "oneshot", "CollectMode", "s", "inactive-or-failed",
                                          "ExecStart", "a(sasb)", 1, "systemctl", 4, "systemctl", "--user",
                                          "stop", stop_unit, false);
        else if (r >= 0)
                r = sd_bus_message_append(m, "a(sv)", 4, "Description", "s", "modelgate: idle stop", "Type",
                                          "s", "oneshot", "CollectMode", "s", "inactive-or-failed",
                                          "ExecStart", "a(sasb)", 1, "systemctl", 3, "systemctl", "stop",
                                          stop_unit, false);
        if (r >= 0)
                r = sd_bus_message_close_container(m);
        if (r >= 0)
                r = sd_bus_message_close_container(m);
        return r;
}

int host_bus_start_stop_timer(HostBus *b, const char *timer, const char *service, const char *stop_unit,
                              usec_t after, usec_t accuracy, HostBusJobDone cb, void *userdata) {
        assert(b);
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        int r;

        if (!b->up)
                return -ENOTCONN;
        r = sd_bus_message_new_method_call(b->bus, &m, SD1, SD1_PATH, SD1_MANAGER, "StartTransientUnit");
        if (r >= 0)
                r = sd_bus_message_append(m, "ss", timer, "replace");
        /* OnActiveSec= counts from the timer's own start, so a RestartUnit() renews it; it goes when it
         * has elapsed (RemainAfterElapse=no), and fires within 'accuracy', not the default minute. What it
         * starts is the service of its own name (252 takes no transient Unit=): the caller names both. */
        if (r >= 0)
                r = sd_bus_message_append(m, "a(sv)", 5, "Description", "s", "modelgate: idle stop",
                                          "TimersMonotonic", "a(st)", 1, "OnActiveSec", after,
                                          "AccuracyUSec", "t", accuracy, "RemainAfterElapse", "b", false,
                                          "CollectMode", "s", "inactive-or-failed");
        if (r >= 0)
                r = append_stopper(m, b, service, stop_unit);
        if (r < 0)
                return r;
        return bus_op_send(b, SIZE_MAX, userdata, cb, NULL, m, job_reply_cb);
}

/* rule:gpu-owner: the unit's status text is the file's first line. Its main process is the one that
 * notifies (exec), so the manager knows whom the message is from though it exits at once; the unit stays
 * active after it (RemainAfterExit=), since the text goes when the unit stops, until modelgate stops it
 * however the read ends (RuntimeMaxSec= does not apply to an exited oneshot on 252: a modelgated killed,
 * or a bus lost, between the two leaves it, exited, until the host's manager restarts). No $ in it is
 * systemd's (no-env-expand): ${XDG_RUNTIME_DIR:-/run} is %t of a user's and of the system's manager
 * alike. */
#define OWNER_SCRIPT                                                                                        \
        "exec systemd-notify --status=\"$(head -n 1 \"${XDG_RUNTIME_DIR:-/run}/gpu.owner\" 2>/dev/null | "  \
        "head -c 4096)\""

/* Its part is done: the unit goes (CollectMode=). Sent whether or not the bus is still open: on a closed
 * one it fails at once, and the unit stays, exited, as rule:gpu-owner says. */
static void owner_unit_stop(BusOp *op) {
        (void)sd_bus_call_method_async(op->bus->bus, NULL, SD1, SD1_PATH, SD1_MANAGER, "StopUnit", NULL,
                                       NULL, "ss", op->transient, "replace");
}

/* At most OWNER_TEXT_MAX bytes of the first line, cut where a UTF-8 character begins: the host's manager
 * drops a status that is not UTF-8, so the script sends the whole line (up to 4 KiB) and the cut is here */
#define OWNER_TEXT_MAX 200
static char *owner_line(const char *text) {
        size_t n = strcspn(text, "\n");

        if (n > OWNER_TEXT_MAX) {
                n = OWNER_TEXT_MAX;
                while (n > 0 && ((unsigned char)text[n] & 0xc0) == 0x80)
                        n--;
        }
        return strndup(text, n);
}

static int owner_status_cb(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        BusOp *op = userdata;
        const char *e = bus_message_error(m), *text = NULL;

        if (op_bus_closing(op, m))
                return 0;
        op->slot = sd_bus_slot_unref(op->slot);
        if (!e && sd_bus_message_read(m, "v", "s", &text) < 0)
                e = "bad reply from the service manager";
        if (!e && !(op->text = owner_line(text)))
                e = "out of memory";
        bus_op_finish(op, NULL, NULL, e);
        return 0;
}

static void owner_job_done(BusOp *op, const char *result) {
        _cleanup_free_ char *path = NULL, *why = NULL;
        int r;

        op->job = mfree(op->job);
        if (!streq(result, "done")) {
                if (asprintf(&why, "the unit that reads it ended its start with '%s'", result) < 0)
                        why = NULL;
                bus_op_finish(op, NULL, NULL, why ?: "out of memory");
                return;
        }
        r = sd_bus_path_encode("/org/freedesktop/systemd1/unit", op->transient, &path);
        if (r >= 0)
                r = sd_bus_call_method_async(op->bus->bus, &op->slot, SD1, path,
                                             "org.freedesktop.DBus.Properties", "Get", owner_status_cb, op,
                                             "ss", SD1 ".Service", "StatusText");
        if (r < 0)
                bus_op_finish(op, NULL, NULL, "the status of the unit that reads it could not be asked for");
}

int host_bus_read_gpu_owner(HostBus *b, HostBusText cb, void *userdata) {
        assert(b);
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        _cleanup_free_ char *name = NULL;
        static uint64_t seed, n;
        BusOp *op;
        int r;

        if (!b->up)
                return -ENOTCONN;
        /* one of its own per read: another modelgate in front of the same host (on another machine, or
         * in a container with the same pid) may ask at the same time */
        if (!seed)
                random_seed(&seed, sizeof(seed));
        if (asprintf(&name, "modelgate-gpu-owner-%016llx.service", (unsigned long long)(seed + n++)) < 0)
                return -ENOMEM;
        r = sd_bus_message_new_method_call(b->bus, &m, SD1, SD1_PATH, SD1_MANAGER, "StartTransientUnit");
        if (r >= 0)
                r = sd_bus_message_append(m, "ss", name, "fail");
        if (r >= 0)
                r = sd_bus_message_append(m, "a(sv)", 7, "Description", "s", "modelgate: who owns the GPU",
                                          "Type", "s", "oneshot", "RemainAfterExit", "b", true,
                                          "NotifyAccess", "s", "exec", "TimeoutStartUSec", "t",
                                          10 * USEC_PER_SEC, "CollectMode", "s", "inactive-or-failed",
                                          "ExecStartEx", "a(sasas)", 1, "/bin/sh", 3, "sh", "-c",
                                          OWNER_SCRIPT, 1, "no-env-expand");
        if (r >= 0)
                r = sd_bus_message_append(m, "a(sa(sv))", 0);
        if (r < 0)
                return r;
        op = bus_op_new(b, SIZE_MAX, userdata);
        if (!op)
                return -ENOMEM;
        op->text_done = cb;
        r = bus_op_call(op, m, job_reply_cb);
        if (r >= 0) /* asked for: from now on it is stopped however the read ends */
                op->transient = TAKE_PTR(name);
        return r;
}

/* Another holds the lease: the answer, not a failure */
static int lease_reply_cb(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        BusOp *op = userdata;

        if (!sd_bus_message_is_method_error(m, SD1 ".UnitExists"))
                return job_reply_cb(m, userdata, ret_error);
        op->slot = sd_bus_slot_unref(op->slot);
        bus_op_finish(op, "exists", NULL, NULL);
        return 0;
}

/* rule:switch-lease: a service that only waits, so that its existence is the lock. tail --pid ends it when
 * the process that holds our end of the bus on the host exits (ourselves, or the stdio bridge that dies
 * with our ssh), so a killed modelgate's lease goes within a second; RuntimeMaxSec= ends it in any case
 * (a broker that could not say that pid, one in another PID namespace), and CollectMode= makes the name
 * free again however it ended. */
int host_bus_take_lease(HostBus *b, const char *unit, const char *description, usec_t max, HostBusJobDone cb,
                        void *userdata) {
        assert(b);
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        char pid[32];
        int r;

        if (!b->up)
                return -ENOTCONN;
        snprintf(pid, sizeof(pid), "--pid=%" PRIu32, b->peer_pid);
        r = sd_bus_message_new_method_call(b->bus, &m, SD1, SD1_PATH, SD1_MANAGER, "StartTransientUnit");
        if (r >= 0)
                r = sd_bus_message_append(m, "ss", unit, "fail");
        if (r >= 0)
                r = sd_bus_message_open_container(m, 'a', "(sv)");
        if (r >= 0)
                r = sd_bus_message_append(m, "(sv)(sv)(sv)(sv)", "Description", "s", description, "Type",
                                          "s", "exec", "RuntimeMaxUSec", "t", max, "CollectMode", "s",
                                          "inactive-or-failed");
        if (r >= 0 && b->peer_pid > 0)
                r = sd_bus_message_append(m, "(sv)", "ExecStart", "a(sasb)", 1, "tail", 6, "tail", "-f",
                                          "-s", "0.25", pid, "/dev/null", false);
        else if (r >= 0)
                r = sd_bus_message_append(m, "(sv)", "ExecStart", "a(sasb)", 1, "sleep", 2, "sleep",
                                          "infinity", false);
        if (r >= 0)
                r = sd_bus_message_close_container(m);
        if (r >= 0)
                r = sd_bus_message_append(m, "a(sa(sv))", 0);
        if (r < 0)
                return r;
        return bus_op_send(b, SIZE_MAX, userdata, cb, NULL, m, lease_reply_cb);
}
