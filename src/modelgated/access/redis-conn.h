/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* One connection to Redis on the daemon's sd-event loop (rule:shared-counts): commands go out in order, and
 * each reply is the one of the command that has waited longest, as RESP has it. Redis's replies are input
 * like a host's answers. hiredis's reader parses them, with caps of its own here (an array of at most
 * REDIS_REPLY_ELEMENTS_MAX scalars, REDIS_REPLY_MAX bytes of a reply held), and hiredis formats commands;
 * nothing of hiredis's asynchronous client is used, whose queue aborts the process (an assertion in
 * redisProcessCallbacks()) on a reply that no command waits for. Here that reply, bytes that are not RESP,
 * a reply past the caps, a command without its reply REDIS_ANSWER_TIMEOUT_USEC after it was sent (each
 * command's own wait: a Redis that trickles answers still answers late), or a handler that finds its reply
 * wrong, end the connection, and only it: every command still waiting hears NULL, then failed() says why. */

#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <systemd/sd-event.h>

#include "shared/time-util.h"

#define REDIS_ANSWER_TIMEOUT_USEC (2 * USEC_PER_SEC)
#define REDIS_REPLY_ELEMENTS_MAX 16
#define REDIS_REPLY_MAX (64 * 1024)

typedef struct RedisConn RedisConn;

/* A command's reply, or NULL when the connection ended first; conn_userdata is redis_conn_new()'s, userdata
 * the command's. Returns NULL to go on, or why the reply is wrong (copied at once), which ends the
 * connection. */
typedef const char *(*RedisReplyHandler)(const redisReply *reply, void *conn_userdata, void *userdata);

typedef struct RedisConnCallbacks {
        /* connected, and past AUTH when there is a password: commands may go */
        void (*ready)(void *userdata);
        /* the connection, or the attempt, ended: every command that waited heard NULL first. broken: by
         * the peer's fault (a reply to no command, bytes that are not RESP, a reply past the caps, one that
         * is not an error reply and that its handler found wrong), not by a loss or a refusal. May come from
         * inside redis_conn_connect() (an address that refuses at once), never from redis_conn_send() */
        void (*failed)(const char *why, bool broken, void *userdata);
} RedisConnCallbacks;

/* target: "unix:/path" or "redis://ADDRESS[:PORT]", numeric (conf.h); password NULL: no AUTH. Does not
 * connect yet. */
int redis_conn_new(sd_event *event, const char *target, const char *password, const RedisConnCallbacks *cb,
                   void *userdata, RedisConn **ret);
/* Every command still waiting hears NULL; failed() is not called. */
RedisConn *redis_conn_free(RedisConn *rc);
/* Connects, when not connected or connecting. */
void redis_conn_connect(RedisConn *rc);
bool redis_conn_ready(const RedisConn *rc);
/* Sends a command (only while ready); its handler hears its reply, or NULL. 0, -ENOTCONN or -ENOMEM. */
int redis_conn_send(RedisConn *rc, int argc, const char **argv, RedisReplyHandler handler, void *userdata);
