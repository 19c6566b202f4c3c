/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* [Access] and [Tier] (rule:access-on-head, rule:daily-cap, rule:daily-tokens, rule:tier-models): who may
 * send model requests, and how many a day. A key (from "Authorization: Bearer" or "X-Api-Key") is known by
 * its SHA-256 only; its tier caps its requests and its tokens per UTC day and may limit the models it sees.
 * Clients without a key are counted per source address. Counts, and the tokens each caller used on each of
 * the last days (rule:key-usage), are kept in the state directory (usage.json), written atomically at most
 * USAGE_SAVE_DELAY behind, so that an idle exit, a restart or a crash resets nobody's quota. */

#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "modelgated/api/api-answer.h"
#include "modelgated/conf/conf.h"
#include "modelgated/access/key-usage.h"
#include "modelgated/access/shared-counts.h"
#include "shared/list.h"
#include "shared/time-util.h"

#define USAGE_SAVE_DELAY_USEC (2 * USEC_PER_SEC)

typedef struct Access Access;

/* Who is asking, set by access_identify(); small, since every connection carries one. */
typedef struct AccessCaller {
        const TierConf *tier; /* NULL: anonymous */
        bool admitted;
        char digest[17]; /* a key's: the first 16 hex digits of its SHA-256 */
} AccessCaller;

/* Whom the caps count, and whose a resumable stream is: "k:" and its key's digest prefix, or "ip:" and the
 * address of a client without a key (access_client_address()). */
const char *access_caller_name(const AccessCaller *caller, const char *peer, char name[static 80]);
/* For the log: "free:3f2a9c1e" (tier and digest prefix, never the key) or "anonymous". */
const char *access_caller_id(const AccessCaller *caller, char buf[static 80]);

typedef struct AccessDenial {
        Answer answer;        /* ANSWER_INVALID_API_KEY, ANSWER_MISSING_API_KEY, ANSWER_DAILY_LIMIT or
                               * ANSWER_DAILY_TOKENS;
                               * ANSWER_ADMISSION_OUT_OF_MEMORY when hashing the key ran out of memory */
        char message[256];    /* the row's words */
        uint64_t retry_after; /* 429: seconds until the day rolls over */
} AccessDenial;

Access *access_new(sd_event *event);
/* Writes what is not written yet. */
Access *access_free(Access *a);

/* What admission decided: outcomes the caller answers, as positive codes; a failure (-ENOMEM) is negative */
typedef enum AccessVerdict {
        ACCESS_ALLOWED = 0,
        ACCESS_REFUSED,  /* an unknown key, or no key where anonymous clients are refused (401) */
        ACCESS_OVER_CAP, /* the caller's requests or tokens of the day are used up (429) */
        ACCESS_PENDING,  /* the shared store decides (access_admit()): the waiter hears */
} AccessVerdict;

/* An admission the shared store decides (rule:shared-counts), held by the request: what it asked for
 * points into the request (its configuration, caller and peer), which outlives the wait. */
typedef struct AccessWait AccessWait;
/* ACCESS_ALLOWED, or ACCESS_OVER_CAP with the denial */
typedef void (*AccessWaitFn)(AccessWait *w, int verdict, const AccessDenial *denial);
struct AccessWait {
        AccessWaitFn fn;
        Access *access;
        const Config *config;
        const AccessCaller *caller;
        const char *peer;
        bool waiting;
        CountOp *op; /* NULL: the store it asked was let go of (a reload): admitted from the loop */
        LIST_FIELDS(AccessWait, waits);
};

/* Who the caller is: ACCESS_ALLOWED, or ACCESS_REFUSED with *ret_denial filled when it cannot be served at
 * all; -ENOMEM, with *ret_denial filled too. */
int access_identify(const Config *c, const char *key, const char *peer, AccessCaller *ret,
                    AccessDenial *ret_denial);
/* Whether the caller's tier may use this client-visible model name. */
bool access_model_allowed(const AccessCaller *caller, const char *model);
/* Whether the caller's tier may use some model of host, as far as its globs say: one of its Models= can
 * match a name that begins with "<host>-" (judged by the glob's fixed beginning, so "*" or "3*" counts for
 * host 3090, and a glob that names only an alias counts for no host). */
bool access_host_allowed(const AccessCaller *caller, const char *host);
/* What an anonymous client is counted as: its IPv4 address (an IPv4-mapped IPv6 one too), or the /64 of
 * its IPv6 address ("2001:db8:1:2::/64"), since one IPv6 client has a whole /64 to send from. */
const char *access_client_address(const char *peer, char buf[static INET6_ADDRSTRLEN + 8]);
/* Counts a request against the caller's daily cap: ACCESS_ALLOWED, or ACCESS_OVER_CAP with *ret_denial. */
int access_count(Access *a, const Config *c, const AccessCaller *caller, const char *peer,
                 AccessDenial *ret_denial);
/* The same, or with [Access] Redis= reachable, ACCESS_PENDING: the store counts the request if the caps
 * hold for every instance, and w->fn hears (never from within this call). */
int access_admit(Access *a, const Config *c, const AccessCaller *caller, const char *peer,
                 AccessDenial *ret_denial, AccessWait *w);
/* The request is gone before the store answered: what it counted stays counted. */
void access_wait_cancel(AccessWait *w);
/* With [Access] Redis=: "connected" or "unreachable" (/health); NULL without */
const char *access_shared_state(Access *a);
/* Connects to the configuration's [Access] Redis= (again, when it names another), or lets go of one it
 * names no more: the configuration in force, at start and at each reload (the requests' own may be older) */
void access_configure(Access *a, const Config *c);
/* changed() hears when Redis goes away or comes back (the bus's Warnings) */
void access_set_changed(Access *a, void (*changed)(void *userdata), void *userdata);
/* While Redis does not answer, why (the bus's Warnings); else NULL */
const char *access_shared_warning(Access *a);
/* Whether the caller has a request of the day left, counting nothing: a request over its cap is refused on
 * its head, before its body is read. ACCESS_ALLOWED, or ACCESS_OVER_CAP with *ret_denial. */
int access_check(Access *a, const Config *c, const AccessCaller *caller, const char *peer,
                 AccessDenial *ret_denial);
/* The tokens of a request's answer, from the engine's own usage (rule:usage; -1: not known), added to the
 * caller's day (rule:key-usage): a key's, or an anonymous client's that is counted. Tokens spent past
 * DailyTokens= are counted all the same; the caller's next request is refused. */
void access_record_usage(Access *a, const Config *c, const AccessCaller *caller, const char *peer,
                         int64_t in, int64_t cached, int64_t out);
/* Every caller's count, the current day's first, then the days before, newest first (key-usage.h) */
int access_usage_foreach(Access *a, KeyUsageFn fn, void *userdata);
