/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* What the bus-object files share and nothing else may see: the BusObject itself, and the few calls by
 * which its parts hand over to each other. bus-object-manager.c holds the Manager object and the object's
 * lifecycle on the bus (publish, name, free), bus-object-host.c the Host objects, and
 * bus-object-changes.c the PropertiesChanged signals of both. */

#include <stdbool.h>
#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#include "modelgated/bus-call.h"
#include "modelgated/bus-object.h"
#include "modelgated/host.h"
#include "modelgated/manager.h"
#include "modelgated/server.h"
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

/* bus-object-manager.c: what the Manager object shows, and the wall-clock time D-Bus shows for a deadline */
void bus_object_totals(Manager *m, unsigned *in_flight, unsigned *waiting);
unsigned bus_object_n_warnings(Manager *m);
usec_t bus_object_realtime(const BusObject *o, usec_t mono);

/* bus-object-host.c */
/* Publishes the Host objects under HOST_PREFIX, for every host there is when they are looked up */
int bus_object_host_publish(BusObject *o);
/* The object path of a host; NULL when out of memory */
char *bus_object_host_path(const Host *h);

/* bus-object-changes.c */
/* Starts comparing (first after the delay, then after each bus_object_changed()) */
int bus_object_changes_start(BusObject *o);
void bus_object_changes_stop(BusObject *o);
