/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Which target of an [Alias] serves a request (rule:alias-order), as a pure function of what each
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

#include "modelgated/conf/conf.h"
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

/* Which target each client used last, per alias (spread): bounded, and fair to the clients that keep
 * coming back, since a forgotten client only costs its prompt cache but a client pushed out by others
 * costs it every time.
 *
 * A client is its key (with [Access]), else its address, and within it the session it names, if any
 * (rule:sessions): a session stays on its target, not merely the key. Keyed and anonymous clients are held
 * apart, so that no number of anonymous addresses pushes out a client with a key. Each part is a segmented
 * LRU: a client's first request puts it on probation, a later one moves it to a protected segment that new
 * clients never evict, so a flood of addresses seen once only churns the probation segment; past its
 * share the protected segment's oldest goes back on probation. One prefix (a key, an IPv4 address, an
 * IPv6 /64: what [Access] counts) holds at most ALIAS_MEMORY_PER_PREFIX entries, past which it replaces
 * its own oldest: a /64 sending from any number of addresses evicts no one once it has them. Entries are
 * forgotten after ALIAS_MEMORY_USEC. */
#define ALIAS_MEMORY_ENTRIES 4096   /* per part: keyed, anonymous */
#define ALIAS_MEMORY_PROTECTED 3072 /* of them, at most this many protected */
#define ALIAS_MEMORY_PER_PREFIX 16
#define ALIAS_MEMORY_USEC (60 * USEC_PER_MINUTE)

/* Who asks */
typedef struct AliasClient {
        const char *key;     /* its key's digest; NULL: anonymous */
        const char *address; /* an anonymous client's address */
        const char *prefix;  /* and what [Access] counts it as (access_client_address(): IPv6 per /64); NULL:
                              * the address */
        uint64_t session;    /* rule:sessions: its session's id hash, 0 for none. A session of a key (or an
                              * address) is remembered apart from the key's other sessions and from its
                              * requests without one, and counts against the key's (the prefix's) share. */
} AliasClient;

typedef struct AliasMemory AliasMemory;

/* NULL: out of memory. The memory takes its full size at once (about 1.6 MB, touched as it fills). */
AliasMemory *alias_memory_new(void);
AliasMemory *alias_memory_free(AliasMemory *m);
/* The target client last used for alias, or -1. */
ssize_t alias_memory_recall(const AliasMemory *m, const char *alias, const AliasClient *client, usec_t now);
void alias_memory_store(AliasMemory *m, const char *alias, const AliasClient *client, size_t target,
                        usec_t now);
/* Forgets everything (a reload may have reordered the targets). */
void alias_memory_clear(AliasMemory *m);
/* Entries held, keyed and anonymous */
size_t alias_memory_size(const AliasMemory *m);
