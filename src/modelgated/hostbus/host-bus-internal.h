/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* What the host-bus files share and nothing else may see: the HostBus itself, and the few calls by
 * which its five parts hand over to each other. host-bus-connection.c holds the connection's lifecycle
 * (connect, lost, closed, reconnected), host-bus-transport.c how a connection reaches the manager
 * (addresses, the ssh bridge), host-bus-units.c what is followed on it (the setup pipeline,
 * PropertiesChanged, the manager's unique name), host-bus-busy.c which BusyUnits= units are active,
 * and host-bus-ops.c the calls an owner waits for (jobs, re-reads, listings). A part that learns the bus is
 * lost (a reply in units or ops can be the first news of it) calls host_bus_lost(): the lifecycle that
 * answers it is the connection's. */

#include <stdbool.h>
#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#include "modelgated/hostbus/host-bus.h"
#include "shared/list.h"
#include "shared/time-util.h"

#define SD1 "org.freedesktop.systemd1"
#define SD1_PATH "/org/freedesktop/systemd1"
#define SD1_MANAGER SD1 ".Manager"

typedef struct FollowedUnit {
        HostBus *bus;
        size_t index;
        bool watched; /* followed only: not loaded, not Ref()ed (host_bus_new()) */
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
        HostBusText text_done; /* the GPU owner's read (host_bus_read_gpu_owner()) */
        char *transient;       /* its unit, once asked for: stopped when the op ends */
        char *text;
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

        /* the pid, on the host, of whoever holds our end of this bus there (ourselves on a local bus, the
         * stdio bridge through ssh), as the broker says; 0: not known (a direct connection, or a broker in
         * another PID namespace). rule:switch-lease ties a lease to it. */
        uint32_t peer_pid;

        /* rule:busy-followed: the units matching BusyUnits= that are active, as last heard */
        char **busy_active;
        sd_bus_slot *busy_match; /* their PropertiesChanged, on this bus */
        sd_bus_slot *busy_list;  /* the listing of them under way: a new one (a reload) cancels it */

        FollowedUnit *units;
        size_t n_units;
        BusOp *ops;
};

static inline const char *bus_message_error(sd_bus_message *m) {
        const sd_bus_error *e = sd_bus_message_get_error(m);
        if (!e)
                return NULL;
        return e->message ?: e->name ?: "unknown error";
}

/* host-bus-connection.c */
/* The bus is lost: tells the owner first, then fails every pending operation, then schedules the close
 * and the reconnect. false: it was lost already (its operations failed then). */
bool host_bus_lost(HostBus *b, const char *reason);

/* host-bus-transport.c */
/* Sets the bus's address from the host's Bus=; *ret_reason may say why it could not, for on_down. */
int host_bus_set_address(HostBus *b, char **ret_reason);
/* sd_bus_start(), with an ssh child's stderr piped to our log. */
int host_bus_start(HostBus *b);
/* Logs what is left of ssh's stderr and stops reading it. */
void host_bus_stderr_close(HostBus *b);

/* host-bus-units.c */
void unit_info_done(UnitInfo *u);
/* Reads the properties UnitInfo holds from an a{sv}; others are skipped. */
int unit_info_read_properties(sd_bus_message *m, UnitInfo *u);
/* Forgets what was read of each unit on the previous bus; names and paths stay. */
void host_bus_reset_units(HostBus *b);
/* Whether a signal is the service manager's, rather than another client's of the same bus. */
bool host_bus_from_manager(HostBus *b, sd_bus_message *m);
/* The matches and calls that follow the units on a new bus; its last reply brings the bus up. */
int host_bus_follow_units(HostBus *b);
/* One reply of the setup is in: the last one brings the bus up. */
void host_bus_setup_step_done(HostBus *b);

/* host-bus-busy.c */
/* The match and the listing that follow the BusyUnits= units on a new bus, as steps of its setup. */
int host_bus_follow_busy(HostBus *b);

/* host-bus-ops.c */
int host_bus_match_job_removed(HostBus *b);
/* Fails every pending operation with 'why'; their callbacks run. */
void host_bus_fail_ops(HostBus *b, const char *why);
/* Drops every pending operation; their callbacks do not run. */
void host_bus_free_ops(HostBus *b);
