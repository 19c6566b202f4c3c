/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* A D-Bus method call that is answered later: first authorized (polkit on the system bus,
 * asynchronously), then carried out, which may mean waiting for an engine. The calls of one object
 * are kept in a BusCallSet, so that they can all be answered when the daemon stops, and so that a
 * call still waiting keeps the daemon from its idle exit. Knows nothing of the objects whose methods
 * these are: userdata is theirs. */

#include <stdbool.h>
#include <systemd/sd-bus.h>

#include "modelgated/host/host.h"
#include "shared/list.h"
#include "shared/time-util.h"

typedef struct Server Server;
typedef struct BusCall BusCall;
typedef void (*BusCallAuthorized)(BusCall *c);

typedef struct BusCallSet {
        sd_bus *bus;
        bool polkit;    /* on the system bus polkit guards the methods that change anything */
        Server *server; /* told when a call ends: its end may allow the idle exit */
        BusCall *calls;
} BusCallSet;

struct BusCall {
        BusCallSet *set;
        void *userdata; /* the object whose method this is */
        sd_bus_message *message;
        sd_bus_slot *slot;                   /* the polkit query in flight */
        usec_t polkit_timeout, polkit_until; /* its bound, and when it passes (CLOCK_MONOTONIC) */
        const char *action;
        BusCallAuthorized authorized;
        char *host; /* by name: a reload may replace the Host meanwhile */
        char *engine;
        HostWaiter waiter;
        bool waiting;
        LIST_FIELDS(BusCall, calls);
};

/* A call to answer later, for the polkit action 'action'; authorized runs once it is allowed. NULL when
 * out of memory. */
BusCall *bus_call_new(BusCallSet *set, void *userdata, sd_bus_message *message, const char *action,
                      BusCallAuthorized authorized, const char *host);
void bus_call_free(BusCall *c);
/* Answers the call now, or later from c->authorized; takes the call either way. Returns 1, what a
 * method handler returns for a call it answers itself. */
int bus_call_authorize(BusCall *c);
/* Answers the call, and frees it */
void bus_call_reply(BusCall *c);
/* Answers the call with the error 'name' and a message formatted as by printf(), and frees it */
void bus_call_reply_error(BusCall *c, const char *name, const char *fmt, ...) _printf_(3, 4);

/* Every call still waiting is answered with this error (the daemon stops) */
void bus_call_set_reply_all(BusCallSet *s, const char *name, const char *message);
