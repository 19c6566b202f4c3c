/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* What the bus-object files share and nothing else may see: the BusObject itself, and the few calls by
 * which its parts hand over to each other. The files, bottom to top, each calling only those below it:
 * bus-object-view.c, what the objects show that both the properties and the signals compute;
 * bus-object-changes.c, the PropertiesChanged signals of both objects; bus-object-host.c, the Host
 * objects; bus-object-manager.c, the Manager object and the object's lifecycle on the bus (publish,
 * name, free). bus-call.c, below them all, knows nothing of them. */

#include <stdbool.h>
#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#include "modelgated/bus/bus-call.h"
#include "modelgated/bus/bus-object.h"
#include "modelgated/host/host.h"
#include "modelgated/manager/manager.h"
#include "modelgated/server/server.h"
#include "shared/time-util.h"

#define OBJECT_PATH "/org/modelgate1"
#define HOST_PREFIX "/org/modelgate1/host"

#define ERROR_NO_SUCH_HOST "org.modelgate1.Error.NoSuchHost"
#define ERROR_NO_SUCH_ENGINE "org.modelgate1.Error.NoSuchEngine"
#define ERROR_HOST_DOWN "org.modelgate1.Error.HostDown"
#define ERROR_BUSY "org.modelgate1.Error.Busy"
#define ERROR_ENGINE_FAILED "org.modelgate1.Error.EngineFailed"
#define ERROR_TIMEOUT "org.modelgate1.Error.Timeout"
#define ERROR_SWITCHING "org.modelgate1.Error.Switching"
#define ERROR_RELOAD_FAILED "org.modelgate1.Error.ReloadFailed"
#define ERROR_STOPPING "org.modelgate1.Error.Stopping"

typedef struct HostSeen HostSeen;

struct BusObject {
        Manager *manager;
        Server *server;
        sd_bus *bus;
        usec_t realtime_offset;
        bool primed; /* the first comparison only records */
        sd_event_source *emit_timer;
        HostSeen *seen;
        size_t n_seen;
        unsigned seen_connections, seen_in_flight, seen_waiting, seen_n_warnings, seen_warnings_serial;
        BusCallSet calls;
};

/* bus-object-view.c: what the Manager object shows, the wall-clock time D-Bus shows for a deadline, and
 * where a Host object is */
void bus_object_totals(Manager *m, unsigned *in_flight, unsigned *waiting);
unsigned bus_object_n_warnings(Manager *m);
usec_t bus_object_realtime(const BusObject *o, usec_t mono);
/* The object path of a host; NULL when out of memory */
char *bus_object_host_path(const Host *h);

/* bus-object-changes.c (and bus_object_changed() of bus-object.h) */
/* Starts comparing (first after the delay, then after each bus_object_changed()) */
int bus_object_changes_start(BusObject *o);
void bus_object_changes_stop(BusObject *o);

/* bus-object-host.c */
/* Publishes the Host objects under HOST_PREFIX, for every host there is when they are looked up */
int bus_object_host_publish(BusObject *o);
