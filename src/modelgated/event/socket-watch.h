/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The proxy's sockets (clients' and hosts' connections) in an epoll set of their own, which is one
 * sd-event source: a turn of the loop dispatches every socket that is ready (up to a batch), where
 * sd-event dispatches one source per turn and asks the kernel again (epoll_wait) before each next one.
 * Under load that was one epoll_wait() per socket event; here it is two per batch. Sockets are
 * registered once, edge-triggered, as they were with sd-event. Listening sockets, the bus and timers
 * stay sd-event's own. */

#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-event.h>

typedef struct SocketWatchSet SocketWatchSet;
typedef struct SocketWatch SocketWatch;

/* revents as epoll reports them; the watch may be freed inside, and any other watch too */
typedef void (*socket_watch_handler_t)(SocketWatch *w, int fd, uint32_t revents, void *userdata);

int socket_watch_set_new(sd_event *event, SocketWatchSet **ret);
/* every watch must have been freed before (a watch left would point to a set that is gone) */
SocketWatchSet *socket_watch_set_free(SocketWatchSet *set);

/* sd_event_loop() for a loop whose proxy sockets are all in set: a turn in which only sockets are ready
 * is one epoll_wait() of the set, which holds the loop's own fd too, and the handlers called from here,
 * not from an sd-event source (whose dispatch costs a turn a few hundred instructions of sd-event's: two
 * priority queues, the source's reference counts). sd-event still prepares and reads every turn, so its
 * timers, defer sources and the time of the turn are as under sd_event_loop(). Returns the exit code
 * given to sd_event_exit(), or a negative errno. */
int socket_watch_loop(SocketWatchSet *set);

int socket_watch_add(SocketWatchSet *set, int fd, uint32_t events, socket_watch_handler_t handler,
                     void *userdata, SocketWatch **ret);
/* Takes the socket out of the set (before it is closed: a copy of it in a child process would keep it
 * in), and out of a batch being dispatched. NULL-safe; returns NULL. */
SocketWatch *socket_watch_free(SocketWatch *w);
/* The same events again: an edge for a state the socket is already in (input left unread) */
int socket_watch_rearm(SocketWatch *w);
/* Events the running batch has read for this socket and not dispatched yet; 0 when none */
uint32_t socket_watch_pending(const SocketWatch *w);
/* Whether a batch is being dispatched, so that socket_watch_pending() knows what the kernel had said by
 * the batch's start; outside one (a timer's or the bus's callback) events may wait unread */
bool socket_watch_in_batch(const SocketWatch *w);

/* sd_event_now(event, CLOCK_MONOTONIC): the loop's time of its iteration, which is one for the whole of a
 * batch; so inside one it is asked of sd-event once (whose every call checks the process's pid), and
 * kept till the batch's end. Outside a batch of event's, sd_event_now() itself. */
uint64_t socket_watch_loop_now(sd_event *event);
