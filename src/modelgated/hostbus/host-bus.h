/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The bus to one host's service manager: the local user bus, the system bus,
 * or a remote user bus through ssh and systemd-stdio-bridge (rule:ssh-bridge). It
 * connects, subscribes, follows a fixed set of units (the host's engine
 * units: loaded and Ref()ed so their outcome stays readable, state kept from
 * PropertiesChanged) and the active units matching the host's BusyUnits=,
 * runs jobs to their JobRemoved, and reconnects with
 * backoff when the bus is lost. Everything is asynchronous on the one event
 * loop. It knows nothing of engines or policy; the Host does. */

#include <stdbool.h>
#include <systemd/sd-event.h>

#include "modelgated/conf/conf.h"
#include "shared/macro.h"

typedef struct HostBus HostBus;

typedef struct UnitInfo {
        char *name;
        char *path;
        char *load_state;   /* loaded, not-found, masked, … */
        char *active_state; /* active, activating, inactive, failed, … */
        char *sub_state;
        char *result;     /* Service.Result: success, exit-code, exec-condition, … */
        char *restart;    /* Service.Restart */
        char *file_state; /* GetUnitFileState(): enabled, static, …; NULL when it has no file */
        char **conflicts;
        int exec_main_code;   /* Service.ExecMainCode: CLD_EXITED, CLD_KILLED, CLD_DUMPED; 0 none yet */
        int exec_main_status; /* Service.ExecMainStatus: the exit status, or the signal */
        usec_t active_enter;  /* ActiveEnterTimestamp: CLOCK_REALTIME on the host's clock, 0: never */
        usec_t timeout_stop;  /* Service.TimeoutStopUSec, 0: not read */
        bool condition_result;
        bool read; /* every property above was read at least once */
} UnitInfo;

typedef struct HostBusCallbacks {
        /* Connected, subscribed, and every unit read. */
        void (*on_up)(HostBus *b, void *userdata);
        /* Lost, or could not connect; a reconnect is scheduled. */
        void (*on_down)(HostBus *b, const char *reason, void *userdata);
        /* A followed unit's state changed (not called while the bus is coming up). */
        void (*on_unit_changed)(HostBus *b, size_t i, void *userdata);
        /* rule:busy-followed: the set of active BusyUnits= units changed (not called while the bus is coming
         * up: on_up finds it read) */
        void (*on_busy_changed)(HostBus *b, void *userdata);
} HostBusCallbacks;

/* A job ended: 'result' is JobRemoved's (done, failed, canceled, …), or NULL when the call failed or the
 * bus was lost; then 'error' says why. */
typedef void (*HostBusJobDone)(HostBus *b, size_t i, const char *result, const char *error, void *userdata);
/* A read finished: 'error' is NULL on success. For a list, 'units' names what matched. */
typedef void (*HostBusDone)(HostBus *b, char **units, const char *error, void *userdata);

/* units are loaded and Ref()ed (their outcome stays readable); watched ones (after them, by index) are only
 * followed: another client's transient units, which a Ref() would keep from being collected. */
int host_bus_new(sd_event *e, const HostConf *h, char **units, char **watched, const HostBusCallbacks *cb,
                 void *userdata, HostBus **ret);
/* Closes the bus (an ssh child is stopped and reaped by sd-bus); pending callbacks are not called. */
HostBus *host_bus_free(HostBus *b);
DEFINE_TRIVIAL_CLEANUP_FUNC(HostBus *, host_bus_free);

/* Starts connecting. Failures come back through on_down, never as an error here. */
void host_bus_connect(HostBus *b);
bool host_bus_is_up(const HostBus *b);
size_t host_bus_n_units(const HostBus *b);
const UnitInfo *host_bus_unit(const HostBus *b, size_t i);
/* What the bus is, for logs: "user bus", "system bus", "ssh gpu@a9". */
const char *host_bus_label(const HostBus *b);

/* StartUnit or StopUnit (method) of followed unit i, waiting for the job's JobRemoved. */
int host_bus_job(HostBus *b, const char *method, size_t i, const char *mode, HostBusJobDone cb,
                 void *userdata);
/* rule:idle-stop-on-host: StopUnit or RestartUnit (method, mode replace) of a unit that is not followed,
 * by name, waiting for the job's JobRemoved as host_bus_job() does; cb's index is SIZE_MAX. */
int host_bus_unit_job(HostBus *b, const char *method, const char *unit, HostBusJobDone cb, void *userdata);
/* StartTransientUnit of 'timer', elapsing 'after' its start (within 'accuracy'), with the 'service' it
 * starts then, which stops 'stop_unit' (systemctl on the host), in the same call; waits for the job. */
int host_bus_start_stop_timer(HostBus *b, const char *timer, const char *service, const char *stop_unit,
                              usec_t after, usec_t accuracy, HostBusJobDone cb, void *userdata);
/* The text of the host's GPU owner file, %t/gpu.owner (its first line, at most 200 bytes, escaped, each of
 * the words rule:refusal-words forbids replaced by "…"; "" when it is empty or missing), read by a transient
 * oneshot unit that reports it as its status text (rule:gpu-owner): the bus is all modelgate has of a host.
 * 'error' says why there is none. */
typedef void (*HostBusText)(HostBus *b, const char *text, const char *error, void *userdata);
int host_bus_read_gpu_owner(HostBus *b, HostBusText cb, void *userdata);
/* rule:switch-lease: StartTransientUnit(mode fail) of 'unit', a service whose existence is the lease: it
 * runs until the process that holds this bus's end on the host exits (when the broker can say which one it
 * is) or for 'max', whichever comes first, and is collected then. cb's result is "done" (held), "exists"
 * (someone else holds it), or NULL with an error. Stop it with host_bus_unit_job(). */
int host_bus_take_lease(HostBus *b, const char *unit, const char *description, usec_t max, HostBusJobDone cb,
                        void *userdata);
/* Re-reads unit i's properties (after a job: a "done" can hide an inactive unit). */
int host_bus_refresh_unit(HostBus *b, size_t i, HostBusDone cb, void *userdata);
/* Units matching 'patterns' that are active, activating, reloading or deactivating. */
int host_bus_list_active(HostBus *b, char **patterns, HostBusDone cb, void *userdata);
/* Forgets every pending callback that carries 'userdata' (its owner is going away). */
void host_bus_forget(HostBus *b, void *userdata);

bool unit_info_is_running(const UnitInfo *u);
/* rule:busy-followed: the host's units that match BusyUnits= and are active, activating, reloading or
 * deactivating, as the bus last said; NULL (none known) while it is not up. */
char **host_bus_busy_active(const HostBus *b);
/* A reload changed BusyUnits= (host_bus_set_conf() first): they are followed anew; on_busy_changed says the
 * outcome. */
void host_bus_busy_reload(HostBus *b);
/* rule:bus-backoff: how long until the bus is tried again, on CLOCK_MONOTONIC from now: the reconnect
 * timer's time left, or, while a connection is being tried (or about to be), the wait that follows if it
 * fails. 0 while the bus is up. */
usec_t host_bus_retry_in(const HostBus *b, usec_t now);
/* rule:engine-unit-checks: what is wrong with engine unit u, as sentences appended to *warnings: not
 * found, enabled, Restart= other than no, a Conflicts= missing with one of engine_units (the host's engine
 * units, u's own among them). 0, or -ENOMEM. */
int unit_info_check(const UnitInfo *u, char *const *engine_units, char ***warnings);
/* A reload with the same bus settings: the new configuration's copy. */
void host_bus_set_conf(HostBus *b, const HostConf *h);
