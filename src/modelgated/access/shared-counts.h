/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The daily counts shared by several instances through Redis ([Access] Redis=, rule:shared-counts), on a
 * connection of its own on the daemon's sd-event loop (redis-conn.h): nothing waits on the store, and no
 * answer of Redis's can take the process down. A request is
 * admitted by a script that adds it to its caller's count only while the caps hold (atomic for every
 * instance: with several, none passes the cap), and tokens are added when a request ends. What this
 * instance counted and the store has not confirmed is owed (count-outbox.h), kept in redis-pending.json
 * and sent again, each change applied once, when the store answers again. While it does not, the instance
 * counts locally from the last shared counts it saw, and says so. */

#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "modelgated/access/count-outbox.h"

typedef struct SharedCounts SharedCounts;

typedef enum SharedVerdict {
        SHARED_ADMITTED,
        SHARED_REFUSED, /* a cap would be passed: counted nothing */
        SHARED_LOST,    /* the connection went first: the request is the caller's to decide, and counted as
                         * a plain change if it is served (count_outbox_lost()) */
} SharedVerdict;

/* An admission's answer, for the waiter given to shared_counts_admit(): the store's counts of the caller
 * after it (SHARED_LOST: the last known ones, with what is owed) */
typedef struct SharedCountsCallbacks {
        void (*admitted)(void *waiter, SharedVerdict v, uint64_t requests, uint64_t tokens, void *userdata);
        /* the store went away or came back (shared_counts_warning()) */
        void (*state_changed)(void *userdata);
} SharedCountsCallbacks;

/* target: "unix:/path" or "redis://ADDRESS[:PORT]" (conf.h); password NULL: no AUTH. Connects at once. */
int shared_counts_new(sd_event *event, const char *target, const char *password,
                      const SharedCountsCallbacks *cb, void *userdata, SharedCounts **ret);
/* Writes what is owed. */
SharedCounts *shared_counts_free(SharedCounts *s);
/* Whether s is for target with password (a reload that changes either makes another) */
bool shared_counts_is(const SharedCounts *s, const char *target, const char *password);
/* Whether the store answers: admissions go to it */
bool shared_counts_up(const SharedCounts *s);
/* "Redis at … is unreachable: …" while it is not, else NULL */
const char *shared_counts_warning(const SharedCounts *s);

/* The caller's counts of day as far as this instance knows: the store's last answer and what is owed. */
void shared_counts_view(SharedCounts *s, const char *day, const char *caller, uint64_t *ret_requests,
                        uint64_t *ret_tokens);
/* Asks the store to admit a request (only while shared_counts_up()); the answer goes to cb->admitted with
 * waiter, Returns the change, for shared_counts_forget_waiter(); NULL: not sent (out of memory), nothing
 * asked. */
CountOp *shared_counts_admit(SharedCounts *s, const char *day, const char *caller, uint64_t cap,
                             uint64_t tokens_cap, void *waiter);
/* The waiter is gone: its answer is heard by nobody (what the store counted stays counted). */
void shared_counts_forget_waiter(SharedCounts *s, CountOp *op);
/* Adds to the caller's counts of day: sent now, or owed until the store answers. -ENOMEM. */
int shared_counts_add(SharedCounts *s, const char *day, const char *caller, uint64_t requests,
                      uint64_t tokens);
