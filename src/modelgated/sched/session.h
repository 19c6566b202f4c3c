/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* An agent's session (rule:sessions): which requests belong together, from the header the agent sends
 * with each (Claude Code's X-Claude-Code-Session-Id, opencode's X-Session-Id and x-session-affinity,
 * Codex's session-id), and the bounded table of sessions that /activity, /ui and modelgatectl top show.
 * Pure: the caller gives the time.
 *
 * A session id is the client's text. It is checked (1 to SESSION_ID_MAX token characters, else the request
 * has no session) and never shown: the access line and the views name a session by its label, the first
 * SESSION_LABEL_LEN hex digits of the id's SHA-256, which its user can compute (printf %s ID | sha256sum)
 * and which carries no word a client chose (rule:no-text-in-activity). Nor is it trusted: a session is the
 * pair (caller, id), the caller being its key or, without one, its address, so that two keys sending one id
 * are two sessions and no id reaches another caller's. Sessions decide nothing about admission. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "modelgated/http/http.h"
#include "modelgated/sched/alias-pick.h"
#include "shared/macro.h"
#include "shared/time-util.h"

#define SESSION_ID_MAX 128
#define SESSION_LABEL_LEN 12
/* names in SessionHeaders= */
#define SESSION_HEADERS_MAX 16

/* SessionHeaders='s default, in its order, NULL-terminated */
extern const char *const session_headers_default[];

/* 1 to SESSION_ID_MAX RFC 9110 token characters: no space, quote, control or non-ASCII byte */
bool session_id_valid(Span id);
/* The request's session id: the value of the first of names (in the list's order) that the request
 * carries, when it is valid; otherwise (none present, or the first present one invalid) a NULL span. */
Span session_id_of(const HttpRequest *r, char *const *names);
/* The id's hash for the tables (FNV-1a), never 0, which stands for "no session". Not a secret one: two ids
 * of one caller that collide are one session of that caller, which hurts nobody else. */
uint64_t session_id_hash(Span id);
/* The id's label: SESSION_LABEL_LEN lowercase hex digits of its SHA-256, and a NUL. -EIO: OpenSSL could
 * not (ret is then "?"). */
int session_label(Span id, char ret[static SESSION_LABEL_LEN + 1]);

/* What the views show of a session. Times are CLOCK_MONOTONIC, the caller's; realtime is what to add to
 * show them as CLOCK_REALTIME. */
typedef struct Session {
        char label[SESSION_LABEL_LEN + 1];
        char key[80]; /* its caller as the access line names it ("tier:digest"); empty: anonymous */
        char host[64], engine[64], model[128]; /* of its last request */
        usec_t first, last; /* its first request's start; its last request's start or end */
        usec_t realtime;
        unsigned turns;     /* its generating requests that reached a host */
        unsigned in_flight; /* its requests routed to a host and not ended yet */
        unsigned waits;     /* its requests that waited for an engine (queued or switching) */
        unsigned switches;  /* the switches (or starts) of an engine its requests caused */
        uint64_t wait_usec; /* the time they waited */
        uint64_t tokens_in, tokens_cached, tokens_out; /* as the engines' answers said */
} Session;

/* Sessions are kept like the spread memory (rule:alias-order): keyed and anonymous callers apart, so that
 * no number of addresses pushes out a key's sessions; one caller (a key, an IPv4 address, an IPv6 /64)
 * holds at most SESSION_TABLE_PER_CALLER, past which its own oldest goes; a full part makes room with its
 * oldest session that has nothing in flight (its oldest, when every one has). A session is forgotten
 * SESSION_TABLE_USEC after its last request, unless one is in flight. */
#define SESSION_TABLE_ENTRIES 256 /* per part: keyed, anonymous */
#define SESSION_TABLE_PER_CALLER 32
#define SESSION_TABLE_USEC (60 * USEC_PER_MINUTE)

typedef struct SessionTable SessionTable;

/* NULL: out of memory. It takes its full size at once (about 280 KB, touched as it fills). */
SessionTable *session_table_new(void);
SessionTable *session_table_free(SessionTable *t);
/* The session (who, id hash), or NULL when unknown or forgotten by now. who->key (a digest) or
 * who->address names the caller; who->session is ignored (hash says which). */
Session *session_table_find(SessionTable *t, const AliasClient *who, uint64_t hash, usec_t now);
/* The same, made when unknown, empty but for its label and first (now), in the room another session left
 * (see above). Never NULL. */
Session *session_table_get(SessionTable *t, const AliasClient *who, uint64_t hash, const char *label,
                           usec_t now);
/* The sessions not forgotten at now, the most recently active first: at most max into ret. Returns how
 * many. */
size_t session_table_list(SessionTable *t, usec_t now, const Session **ret, size_t max);
