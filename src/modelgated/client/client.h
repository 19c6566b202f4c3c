/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* One client connection: HTTP/1.1 keep-alive, pipelined requests answered in
 * order, each request routed to its host and the host's answer streamed back
 * with modelgate's own framing. The connections of a daemon are a ClientSet,
 * which counts them (per address too, for MaxConnectionsPerAddress=) and tells
 * its owner when one opens or closes. */

#include <stdbool.h>
#include <sys/socket.h>

typedef struct Manager Manager;
typedef struct Client Client;
typedef struct ClientSet ClientSet;

typedef struct ClientSetCallbacks {
        /* a connection opened or closed */
        void (*changed)(void *userdata);
        /* at MaxConnections=, a connection became one that client_new() may close to make room */
        void (*room)(void *userdata);
} ClientSetCallbacks;

int client_set_new(Manager *m, const ClientSetCallbacks *cb, void *userdata, ClientSet **ret);
/* Closes every connection, without telling the owner. */
ClientSet *client_set_free(ClientSet *set);
size_t client_set_count(const ClientSet *set);
/* At MaxConnections= with every connection holding an admitted request: a new one must wait. Below it, or
 * with a connection that holds none, client_new() makes room (see ClientSet.idle). */
bool client_set_full(const ClientSet *set);
/* A clean stop: idle connections close now, busy ones after their response. */
void client_set_stop(ClientSet *set);
/* Every host catalog may have had its first read: /models answers waiting for it may go. */
void client_set_catalogs_ready(ClientSet *set);
/* A host's first probe ended: a /health waiting for the first probes may go (rule:host-connecting). */
void client_set_hosts_probed(ClientSet *set);

/* Takes fd. A connection over MaxConnectionsPerAddress= is answered 503 and closed; any other, at
 * MaxConnections=, closes the connection that has held no admitted request for longest (silent since
 * accept, idle between requests, or still sending its head). */
int client_new(ClientSet *set, int fd, const struct sockaddr *peer, socklen_t peer_len);
