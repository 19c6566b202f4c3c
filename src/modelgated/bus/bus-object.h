/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* org.modelgate1 (rule:bus-object, org.modelgate1(5)): the Manager object at
 * /org/modelgate1 and one Host object per host under /org/modelgate1/host,
 * on the bus of the instance. Properties are read from the live state; what
 * changed is found by comparing with what was last announced, so callers
 * only say "something may have changed" and a burst of changes becomes one
 * PropertiesChanged per object. Methods that change anything are checked
 * with polkit on the system bus, asynchronously. */

#include <stdbool.h>

#include "shared/macro.h"

typedef struct Manager Manager;
typedef struct Server Server;
typedef struct BusObject BusObject;

/* Connects to the user (user=true) or system bus, publishes the objects and asks for the name. Failing
 * to do so is logged, not fatal: the HTTP side works without the bus. */
int bus_object_new(Manager *m, Server *server, bool user, BusObject **ret);
BusObject *bus_object_free(BusObject *o);
DEFINE_TRIVIAL_CLEANUP_FUNC(BusObject *, bus_object_free);
/* Gives the name up (a stop or an idle exit): D-Bus activation starts the next instance. */
void bus_object_release_name(BusObject *o);
/* Something a property shows may have changed. Cheap: the comparison runs at most every 50 ms. */
void bus_object_changed(BusObject *o);
/* Calls waiting for an answer (a SwitchEngine waits for its engine): they keep the daemon from exiting. */
bool bus_object_busy(const BusObject *o);
