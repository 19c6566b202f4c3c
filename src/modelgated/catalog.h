/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* A host's catalog: its /models snapshot, kept fresh, its event feed, and
 * the keys each of its engines served the last time it ran (SPEC §4 "The
 * model list is never stale after a change", §6). Each status event of the
 * feed (model_status, status_change) is applied to the snapshot as it
 * arrives, and so is the 200 of a /models/load forwarded through modelgate
 * ("loading"), so a listing never waits for a host. The snapshot is also
 * re-read, for what events do not carry: every PollIntervalSec=, after a
 * /models/load or /models/unload forwarded through modelgate succeeds, when
 * the feed reports a change (at most once every 2 s, download progress
 * aside), each time the feed connects, and when an engine comes up or goes
 * down. Events that arrive while a read is under way are applied again to its
 * answer, which may be older than they are. The feed is followed while the
 * host has a server (for a host with engines: while one is up), relabelled,
 * and handed to every /models/sse subscriber; it also tells how far a loading
 * model has got (a waiting client's keepalive comments say so). Learned keys
 * live in a small JSON file in the state directory, so a stopped engine's
 * keys still route after a restart. */

#include <stdbool.h>
#include <sys/types.h>

#include "modelgated/conf.h"

typedef struct Manager Manager;
typedef struct Host Host;
typedef struct Catalog Catalog;

Catalog *catalog_new(Manager *m, Host *h);
Catalog *catalog_free(Catalog *c);
void catalog_start(Catalog *c);
/* A reload kept the host (same name and URL): the new configuration's copy. */
void catalog_set_conf(Catalog *c, const HostConf *conf);

/* Re-reads the snapshot soon (coalesced with a read in progress). */
void catalog_refresh(Catalog *c);
/* A /models/load (load) or /models/unload of model ("<host>-<key>") forwarded to the host succeeded: a
 * load's model reads "loading" at once (llama.cpp answers once the model's process is spawned), and the
 * snapshot is re-read. */
void catalog_model_call_done(Catalog *c, const char *model, bool load);
/* The host's engine i is up (learn its keys from the next snapshot), or none is. */
void catalog_engine_up(Catalog *c, size_t i);
void catalog_engine_down(Catalog *c);
/* The host went down (reason) or came back (NULL): feed subscribers are told. */
void catalog_host_state(Catalog *c, const char *down_reason);

/* The first read after start has ended (or there was nothing to read), and the list of an engine that
 * came up has been read: a /models answer now would not be empty or another engine's. Loads, unloads and
 * feed events never make it false: they are in the snapshot at once. */
bool catalog_ready(const Catalog *c);
/* How far key's load has got, as the feed said: 0–100 (percent); -ENODATA: loading, no progress said yet;
 * -ENOENT: not loading (or not known to be). */
int catalog_load_progress(const Catalog *c, const char *key);
/* The last good /models body, or NULL. */
const char *catalog_snapshot(const Catalog *c, size_t *ret_size);
/* 1: the snapshot lists key (id or alias); 0: it does not; -ENODATA: there is no snapshot. */
int catalog_lists(const Catalog *c, const char *key);
/* The engine whose learned key list has key, or -1. */
ssize_t catalog_engine_for_key(const Catalog *c, const char *key);
/* Engine i's learned keys (NULL-terminated, may be NULL). */
char *const *catalog_engine_keys(const Catalog *c, size_t i);
