/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Resumable streams (rule:resumable-streams): which host served each conversation id, and the bodies of
 * POST /v1/streams/lookup read and written. A request that carries X-Conversation-Id makes llama-server
 * keep its stream in a buffer of the engine that served it, which a client reads again with GET
 * /v1/stream?conv_id=&from=N (N counts bytes of that buffer) while the engine runs; only that host can
 * answer, and only the tier whose key started the conversation may ask. Pure: the caller gives the time. */

#include <stdbool.h>
#include <stddef.h>

#include "modelgated/rules/json-util.h"
#include "shared/macro.h"
#include "shared/time-util.h"

/* An id longer than this is not remembered (the request still goes on, carrying it) */
#define CONV_ID_MAX 256
/* At most this many conversations are remembered; past it, the one used longest ago makes room */
#define CONV_MAP_MAX 4096
/* A conversation is forgotten this long after its last use (its start, a resume, a lookup that found it,
 * or the end of its stream through modelgate). llama-server keeps a finished session 300 s after it ends
 * and collects them every 60 s, so at most 360 s: an entry outlives the session it names, and a stale one
 * only sends the client to the host that answers "not found" itself. */
#define CONV_TTL_USEC (10 * USEC_PER_MINUTE)
/* A remembered conversation keeps the daemon from its idle exit this long after its last use: llama-server
 * keeps a finished session for up to 360 s, and a daemon that exits forgets which host has it */
#define CONV_HOLD_USEC (6 * USEC_PER_MINUTE)
/* The rest of a stream whose client left is read at most this long and this far: a host that keeps such a
 * stream open (comments, or a generation that never ends) must not hold its engine in flight, and the
 * daemon up, for ever. Half an hour is a long answer at local speeds (32k tokens at 20 a second). */
#define CONV_DRAIN_MAX_USEC (30 * USEC_PER_MINUTE)
#define CONV_DRAIN_MAX_BYTES (64u * 1024 * 1024)
/* A lookup names at most this many ids: more are not asked for */
#define CONV_LOOKUP_MAX 256

typedef struct ConvEntry {
        char *id;
        char *host;   /* [Host] Name= */
        char *engine; /* [Engine] Name= of the engine that served it */
        char *owner;  /* the tier of the key that started it; "" for a client without a key */
        usec_t seen;  /* CLOCK_MONOTONIC: its last use */
} ConvEntry;

/* In order of last use, oldest first: the one to make room is entries[0], an expired one is at the
 * front. A linear scan: at CONV_MAP_MAX entries a miss compares 4096 short strings, once per stream
 * request, which is far from what a request costs already. */
typedef struct ConvMap {
        ConvEntry *entries;
        size_t n;
} ConvMap;

void conv_map_done(ConvMap *m);
/* Whether an id is one to remember: 1..CONV_ID_MAX bytes, no control characters */
bool conv_id_valid(const char *p, size_t n);
/* Whether a request to this path makes llama-server keep its stream for X-Conversation-Id: the
 * generating routes (server-stream.cpp's sessions are made by the completions handler alone); a header
 * on any other request (a token count, /tokenize, embeddings) leaves the session as it is. */
bool conv_path_keeps_stream(Span path);

/* What conv_map_remember() did: CONV_REMEMBERED, or CONV_TAKEN when a live entry of that id is another
 * owner's (it stays as it is: a caller never takes over, nor cuts, a conversation another tier started) */
typedef enum ConvRemember {
        CONV_REMEMBERED = 0,
        CONV_TAKEN,
} ConvRemember;

/* The conversation was started (again) on host's engine by owner: it replaces an entry of that id of the
 * same owner (the engine replaces a session of the same id, too). A ConvRemember, or -ENOMEM. */
int conv_map_remember(ConvMap *m, const char *id, const char *host, const char *engine, const char *owner,
                      usec_t now);
/* The entry of id if it has not expired, or NULL (expired ones are forgotten on the way). */
const ConvEntry *conv_map_find(ConvMap *m, const char *id, usec_t now);
/* The conversation was used now: it moves to the back and its time starts again. */
void conv_map_touch(ConvMap *m, const char *id, usec_t now);
/* Until when the conversations keep the daemon (rule:idle-exit): the last use of the newest and
 * CONV_HOLD_USEC; 0 for none */
usec_t conv_map_hold_until(const ConvMap *m);
/* Whether the entry's time is up at now */
bool conv_expired(const ConvEntry *e, usec_t now);
/* Whom an entry may be shown: the tier that started it (NULL or "": a client without a key) */
bool conv_owned_by(const ConvEntry *e, const char *owner);

/* The ids a lookup body asks for: {"conversation_ids": ["c1", …]}, strings that are not empty, each once,
 * at most CONV_LOOKUP_MAX, in the body's order. A body that is not JSON or has no such array asks for
 * none (llama-server's router answers [] to it). 0 with *ret (NULL for none), or -ENOMEM. */
int conv_lookup_ids(const char *body, size_t n, char ***ret);
/* The body asking one host for ids: {"conversation_ids":[…]}; NULL: out of memory */
char *conv_lookup_body(char *const *ids, size_t *ret_size);
/* Adds to 'into' (a JSON array being built) the objects of one host's answer, which is an array of
 * sessions ({"conversation_id":…,"is_done":…,"total_bytes":…,…}); each kept only when it names one of
 * 'ids' ("<id>" or "<id>::<model>", as the host matches them), so that a host never shows one caller a
 * conversation of another. 0, -EBADMSG (not an array; nothing added) or -ENOMEM. */
int conv_lookup_merge(json_object *into, const char *body, size_t n, char *const *ids);
