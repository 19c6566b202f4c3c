/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* A host's catalog: its /models snapshot, kept fresh, its event feed, and
 * the keys each of its engines served the last time it ran (SPEC §4 "The
 * model list is never stale after a change", §6). The snapshot is re-read
 * every PollIntervalSec=, after a /models/load or /models/unload forwarded
 * through modelgate succeeds, when the feed reports a change (at most once
 * every 2 s, download progress aside), each time the feed connects, and when
 * an engine comes up or goes down. The feed is followed while the host has a
 * server (for a host with engines: while one is up), relabelled, and handed to
 * every /models/sse subscriber. Learned keys live in a small JSON file in the
 * state directory, so a stopped engine's keys still route after a restart. */

#include <stdbool.h>
#include <sys/types.h>

#include "modelgated/conf.h"
#include "shared/buffer.h"

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
/* The host's engine i is up (learn its keys from the next snapshot), or none is. */
void catalog_engine_up(Catalog *c, size_t i);
void catalog_engine_down(Catalog *c);
/* The host went down (reason) or came back (NULL): feed subscribers are told. */
void catalog_host_state(Catalog *c, const char *down_reason);

/* The first read after start has ended (or there was nothing to read), and no reported change is
 * waiting to be read: a /models answer now would not be stale. */
bool catalog_ready(const Catalog *c);
/* The last good /models body, or NULL. */
const char *catalog_snapshot(const Catalog *c, size_t *ret_size);
/* 1: the snapshot lists key (id or alias); 0: it does not; -ENODATA: there is no snapshot. */
int catalog_lists(const Catalog *c, const char *key);
/* The engine whose learned key list has key, or -1. */
ssize_t catalog_engine_for_key(const Catalog *c, const char *key);
/* Engine i's learned keys (NULL-terminated, may be NULL). */
char *const *catalog_engine_keys(const Catalog *c, size_t i);

/* Pure: relabels one event of a host's /models/sse ("data: " stripped): "model" becomes "<host>-<key>"
 * ("<host>-*" for "" or "*") and "proxy":{"host","key"} is added. Appends "data: …\n\n" to out.
 * 0; -EBADMSG when the line is not such an event. Sets *ret_changes when the event may change the
 * model list (anything but download progress). */
int catalog_relabel_event(const char *host, const char *json, size_t n, Buffer *out, bool *ret_changes);
