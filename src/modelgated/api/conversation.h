/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Resumable streams (rule:resumable-streams): which host served each conversation id, and the bodies of
 * POST /v1/streams/lookup read and written. A request that carries X-Conversation-Id makes llama-server
 * keep its stream in a buffer of the engine that served it, which a client reads again with GET
 * /v1/stream?conv_id=&from=N (N counts bytes of that buffer) while the engine runs; only that host can
 * answer. A conversation is its owner's: the key that started it (or, for a client without a key, its
 * address as the caps count it). The host never sees a client's id as it is: each owner's ids go there
 * under a mark of that owner (conv_host_prefix()), so that on the host one owner's id can neither replace,
 * nor be read, stopped or listed as, another's. Pure: the caller gives the time. */

#include <stdbool.h>
#include <stddef.h>

#include "modelgated/api/json-util.h"
#include "shared/macro.h"
#include "shared/time-util.h"

/* An id longer than this is not remembered (the request still goes on, carrying it) */
#define CONV_ID_MAX 256
/* At most this many conversations are remembered, and at most CONV_OWNER_MAX of one owner. Past the
 * owner's bound its own used longest ago makes room; past the map's, its own again if it has any, else
 * the one used longest ago: one owner never pushes out another's ids, and it takes 16 owners at their
 * bound to fill the map. */
#define CONV_MAP_MAX 4096
#define CONV_OWNER_MAX 256
/* The owner's mark an id carries to the host: "mg-", 16 hex digits of a hash of the owner, "-" */
#define CONV_HOST_PREFIX_LEN 20
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
/* A lookup looks at most at this many entries of its array (empty, repeated or not strings count too):
 * the rest are not asked for */
#define CONV_LOOKUP_MAX 256
/* A lookup's body is at most this long (413 beyond): 256 ids of the longest kind, quoted, with a comma
 * each, and 1 KiB for the object around them and some white space (256 * (256 + 3) + 1024, checked in
 * conversation.c); read and parsed only that far. A literal, for the words of the 413. */
#define CONV_LOOKUP_BODY_MAX 67328

typedef struct ConvEntry {
        char *id;
        char *host;   /* [Host] Name= */
        char *engine; /* [Engine] Name= of the engine that served it */
        char *owner;  /* who started it: "k:<key digest>", or "ip:<address>" for a client without a key */
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

/* The conversation was started (again) on host's engine by owner: it replaces an entry of the same owner
 * and id (the engine replaces a session of the same id, too); another owner's entry of that id is another
 * conversation. 0, or -ENOMEM. */
int conv_map_remember(ConvMap *m, const char *owner, const char *id, const char *host, const char *engine,
                      usec_t now);
/* The owner's entry of id if it has not expired, or NULL (expired ones are forgotten on the way): another
 * owner's id is as unknown as one never seen. */
const ConvEntry *conv_map_find(ConvMap *m, const char *owner, const char *id, usec_t now);
/* The owner's conversation was used now: it moves to the back and its time starts again. */
void conv_map_touch(ConvMap *m, const char *owner, const char *id, usec_t now);
/* Until when the conversations keep the daemon (rule:idle-exit): the last use of the newest and
 * CONV_HOLD_USEC; 0 for none */
usec_t conv_map_hold_until(const ConvMap *m);
/* Whether the entry's time is up at now */
bool conv_expired(const ConvEntry *e, usec_t now);

/* The mark of owner's ids on the host, CONV_HOST_PREFIX_LEN characters and a NUL: 0, or -EIO (out of
 * memory while hashing) */
int conv_host_prefix(const char *owner, char ret[static CONV_HOST_PREFIX_LEN + 1]);
/* "<prefix><id>", what the host knows owner's id by; NULL: out of memory */
char *conv_host_id(const char *owner, const char *id);
/* The query of a resume or a stop, modelgate's own: "/v1/stream?conv_id=<host id>" and, for a resume that
 * names one, "&from=<from>"; nothing else of the client's query goes on. NULL: out of memory. */
char *conv_stream_url(const char *host_id, const char *from);
/* Whether a resume's from= is an offset llama-server reads as the client meant it: 1 to 20 digits, at
 * most UINT64_MAX (its std::stoull would read "1x" as 1, and "-1" as the largest offset) */
bool conv_from_valid(const char *from);

/* The ids a lookup body asks for: {"conversation_ids": ["c1", …]}, of the array's first CONV_LOOKUP_MAX
 * entries the strings that are ids worth remembering (conv_id_valid()), each once, in the body's order. A
 * body that is not JSON or has no such array asks for none (llama-server's router answers [] to it). 0
 * with *ret (NULL for none), or -ENOMEM. */
int conv_lookup_ids(const char *body, size_t n, char ***ret);
/* The body asking one host for ids, each under the owner's mark: {"conversation_ids":["<prefix><id>",…]};
 * NULL: out of memory */
char *conv_lookup_body(const char *prefix, char *const *ids, size_t *ret_size);
/* Adds to 'into' (a JSON array being built) the objects of one host's answer, which is an array of
 * sessions ({"conversation_id":…,"is_done":…,"total_bytes":…,…}); each kept only when its id bears the
 * owner's mark and, without it, names one of 'ids' ("<id>" or "<id>::<model>", as the host matches them),
 * and shown with the id as its owner knows it: a host never shows one caller a conversation of another.
 * 0, -EBADMSG (not an array; nothing added) or -ENOMEM. */
int conv_lookup_merge(json_object *into, const char *body, size_t n, const char *prefix, char *const *ids);
