/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The Manager is the top owner: the event loop, the configuration, the
 * listening sockets, every client connection and the pool of idle upstream
 * connections. Everything else reaches the loop through it. */

#include <stdbool.h>
#include <systemd/sd-event.h>

#include "modelgated/conf.h"
#include "shared/list.h"
#include "shared/macro.h"

typedef struct Manager Manager;
typedef struct Client Client;
typedef struct Upstream Upstream;
typedef struct Host Host;
typedef struct BusObject BusObject;

typedef struct Listener {
        Manager *manager;
        int fd;
        char *name;    /* FileDescriptorName= or the Listen= value */
        char *address; /* for logs and STATUS= */
        sd_event_source *source;
} Listener;

struct Manager {
        sd_event *event;
        Config *config;
        char *config_path;

        Listener *listeners;
        size_t n_listeners;
        bool socket_activated;
        bool listeners_paused;
        sd_event_source *accept_retry;

        Client *clients;
        size_t n_clients;
        struct CountMap *connections_by_address; /* MaxConnectionsPerAddress= */

        Host **hosts;    /* per config->hosts[] */
        Host **draining; /* removed or replaced by a reload, answering what they had */
        size_t n_draining;
        sd_event_source *drain_source;
        struct ModelsMerge *merges; /* /models answers waiting for the first reads */
        Client *feed_clients;       /* /models/sse subscribers */
        size_t n_feed_clients;
        sd_event_source *feed_keepalive;

        struct UpstreamPool *pool;

        /* Socket-activated with a configuration that has errors (SPEC §3): config is the defaults, with no
         * host, and every request is answered 503 with refusal until a reload brings a good file. */
        char **config_errors;
        char *refusal;
        unsigned warnings_serial; /* bumped when Warnings change in a way their number does not show */

        bool started;
        bool stopping;
        sd_event_source *stop_timer;
        sd_event_source *exit_idle_timer; /* armed while nothing needs the daemon */

        bool user;             /* a user instance: the user bus; else the system bus and polkit */
        BusObject *bus_object; /* NULL without a bus */

        struct Metrics *metrics;
        struct Access *access; /* daily counts; made by the first request [Access] counts */
        uint64_t n_requests;
        usec_t start_usec;
};

int manager_new(Manager **ret);
Manager *manager_free(Manager *m);
DEFINE_TRIVIAL_CLEANUP_FUNC(Manager *, manager_free);

/* Reads, verifies and resolves the configuration at path. On errors the defaults stay, m->config_errors
 * says what is wrong, and manager_start() brings up a daemon that refuses every request with that. */
int manager_load_config(Manager *m, const char *path);
int manager_start(Manager *m);
int manager_run(Manager *m);

/* A client connection went away: a slot for the listeners, maybe the end of a clean stop. */
void manager_client_gone(Manager *m);
/* The Host for h, which may be of an older configuration (a request that began before a reload): the
 * current host of that name, else the draining one, else NULL. */
Host *manager_host(Manager *m, const HostConf *h);
/* A client began to follow /models/sse: keepalive comments run while anyone does. */
void manager_feed_subscribed(Manager *m);
/* A host catalog's first read ended. */
void manager_catalog_ready(Manager *m);
/* Something the D-Bus object shows, or what keeps the daemon from its idle exit, may have changed. */
void manager_changed(Manager *m);
/* Reads the configuration again and applies it without dropping a connection (SPEC §3). On failure
 * nothing changes and *ret_error says why. */
int manager_reload(Manager *m, char **ret_error);
/* Re-enables listeners paused by MaxConnections= or EMFILE. */
void manager_resume_accepting(Manager *m);
