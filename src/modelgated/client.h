/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* One client connection: HTTP/1.1 keep-alive, pipelined requests answered in
 * order, each request routed to its host and the host's answer streamed back
 * with modelgate's own framing. */

#include <sys/socket.h>

#include "shared/list.h"

typedef struct Manager Manager;
typedef struct Client Client;

int client_new(Manager *m, int fd, const struct sockaddr *peer, socklen_t peer_len);
void client_free(Client *c);
Client *client_next(Client *c);
/* Sends an event (or comment) to every /models/sse subscriber; one that is too far behind is dropped. */
void client_feed_broadcast(Manager *m, const char *p, size_t n);
/* A clean stop: idle connections close now, busy ones after their response. */
void client_stop(Client *c);
