/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Which target of an [Alias] serves a request (SPEC §4, aliases), as a pure function of what each
 * target's host is doing now, and the memory of which target a client used last. No I/O, no clock of
 * its own: tests drive it with a fake one, the manager with CLOCK_MONOTONIC.
 *
 * Why "warm" first: two agents on one model must never make a GPU switch engines while another GPU has
 * that model up; a switch costs a model load, and the hold-down makes the loser wait. Why a memory for
 * "spread": llama.cpp reuses its prompt cache only on the box that holds it, so a client that moves
 * pays for its whole prompt again. */

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "modelgated/conf.h"
#include "shared/time-util.h"

/* Best last: the order "warm" ranks them in */
typedef enum AliasTargetState {
        ALIAS_TARGET_DOWN,  /* its host is down, or no engine of it serves the key */
        ALIAS_TARGET_OTHER, /* its host is up, but the request would wait for a switch (another engine
                             * runs or is starting, or the GPU was someone else's) */
        ALIAS_TARGET_FREE,  /* no other engine runs there: it starts (or is starting) this one, stopping none
                             */
        ALIAS_TARGET_WARM,  /* its engine is up and nothing waits to switch it away */
        _ALIAS_TARGET_STATE_MAX,
} AliasTargetState;

typedef struct AliasTarget {
        AliasTargetState state;
        unsigned load; /* requests in flight and waiting on its host */
} AliasTarget;

const char *alias_target_state_to_string(AliasTargetState s);

/* The target for a request: never one in 'tried' (bit i: target i); 'last' is the target this client
 * used last for this alias (spread), or -1. Returns its index and sets *ret_why (a phrase for logs and
 * modelgatectl: "engine up", …), or -1 when every target was tried. When every untried target is down the
 * first is picked all the same: its refusal moves the request on, and after the last one the fallback
 * answers. */
ssize_t alias_pick(AliasPolicy policy, const AliasTarget *t, size_t n, uint64_t tried, ssize_t last,
                   const char **ret_why);

/* Which target each client used last, per alias: a fixed table (a forgotten client only costs it its
 * prompt cache), entries forgotten after ALIAS_MEMORY_USEC. */
#define ALIAS_MEMORY_SLOTS 1024
#define ALIAS_MEMORY_USEC (60 * USEC_PER_MINUTE)

typedef struct AliasMemory {
        struct {
                uint64_t who; /* hash of alias and client; 0: empty */
                usec_t used;
                uint16_t target;
        } slots[ALIAS_MEMORY_SLOTS];
} AliasMemory;

/* The target client last used for alias, or -1. */
ssize_t alias_memory_recall(const AliasMemory *m, const char *alias, const char *client, usec_t now);
void alias_memory_store(AliasMemory *m, const char *alias, const char *client, size_t target, usec_t now);
/* Forgets everything (a reload may have reordered the targets). */
void alias_memory_clear(AliasMemory *m);
