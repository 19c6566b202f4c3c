/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The daemon's front: listening sockets, accept, signals, the idle exit (rule:idle-exit) and the clean stop
 * (rule:clean-stop). It owns the connections (a ClientSet) and serves them from a Manager; its owner hears
 * of changes and is asked whether it keeps the daemon busy through ServerCallbacks. */

#include <stdbool.h>
#include <stddef.h>

#include "shared/macro.h"

typedef struct Manager Manager;
typedef struct Server Server;

typedef struct ServerCallbacks {
        /* connections, hosts or counts changed: what the D-Bus object shows may differ now */
        void (*changed)(void *userdata);
        /* true while the owner has work in flight (a D-Bus call being answered): no idle exit */
        bool (*busy)(void *userdata);
        /* the daemon is stopping (a stop, or the idle exit): the owner lets go of its bus name */
        void (*stopping)(void *userdata);
} ServerCallbacks;

int server_new(Manager *m, Server **ret);
Server *server_free(Server *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(Server *, server_free);
void server_set_callbacks(Server *s, const ServerCallbacks *cb, void *userdata);

/* Listens (the sockets systemd passed, else Listen=), starts the Manager's hosts, watches signals and
 * tells systemd it is ready. */
int server_start(Server *s);
int server_run(Server *s);
/* The clean stop of SIGTERM: no new connections, idle ones closed, running answers finished. */
void server_stop(Server *s);
/* Something the owner shows, or what keeps the daemon from its idle exit, may have changed. */
void server_changed(Server *s);

size_t server_n_connections(const Server *s);
size_t server_n_listeners(const Server *s);
const char *server_listener_address(const Server *s, size_t i);
