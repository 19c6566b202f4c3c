/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* A host's catalog: its /models snapshot, kept fresh, its event feed, and
 * the keys each of its engines served the last time it ran (rule:list-never-stale, rule:engine-for-key,
 * rule:host-down). Each status event of the feed (model_status, status_change) is applied to the snapshot as
 * it arrives, and so is the 200 of a /models/load forwarded through modelgate
 * ("loading"), so a listing never waits for a host. The snapshot is also
 * re-read, for what events do not carry: every PollIntervalSec=, after a
 * /models/load or /models/unload forwarded through modelgate succeeds, when
 * the feed reports a change (at most once every 2 s, download progress
 * aside), each time the feed connects, and when an engine comes up or goes
 * down. Events that arrive while a read is under way are applied again to its
 * answer, which may be older than they are. The feed is followed while the
 * host has a server (for a host with engines: while one is up), relabelled,
 * and handed up with the model each event is about, for the /models/sse
 * subscribers whose tier may see it; it also tells how far a loading
 * model has got (a waiting client's keepalive comments say so). Learned keys
 * are kept per engine, so a stopped engine's keys still route; the owner
 * keeps them on disk (engine-keys.h). The catalog knows nothing of the Host:
 * its owner hands it what it reads and hears its news through
 * CatalogCallbacks. */

#include <stdbool.h>
#include <sys/types.h>
#include <systemd/sd-event.h>

#include "modelgated/conf/conf.h"
#include "modelgated/conf/engine.h"
#include "modelgated/event/feed-hub.h"
#include "shared/macro.h"

typedef struct Catalog Catalog;
typedef struct CatalogList CatalogList;
typedef struct UpstreamPool UpstreamPool;

/* What a catalog reads and how often: its host's [Host], the host's engines in the order of the file (none
 * for a plain host), and PollIntervalSec=. The owner keeps them alive, and hands over the new ones of a
 * reload with catalog_set_conf(). */
typedef struct CatalogConf {
        const HostConf *host;
        const HostEngine *engines;
        size_t n_engines;
        usec_t poll_interval;
} CatalogConf;

/* The news a catalog sends to its owner. Each may be called from inside any catalog_*() call but
 * catalog_free(). */
typedef struct CatalogCallbacks {
        /* catalog_ready() may have become true: the first read ended, or an engine's list was read. */
        void (*on_ready)(Catalog *c, void *userdata);
        /* An event for the /models/sse subscribers: a relabelled one ("data: …\n\n") with the model it is
         * about (none for a "<host>-*" event), or a comment that the host went down or came up (about the
         * whole host). */
        void (*on_feed)(Catalog *c, const FeedEvent *e, void *userdata);
        /* The keys engine i serves were learned anew (catalog_engine_keys()). */
        void (*on_keys_learned)(Catalog *c, size_t i, void *userdata);
        /* Engine i's list was read while it ran (catalog_snapshot()); changed: other bytes than the last
         * read's. Every good read says so, so that what is remembered of each model says when it was
         * last listed (rule:remembered-context). */
        void (*on_listed)(Catalog *c, size_t i, bool changed, void *userdata);
        /* An HTTP exchange with the host failed at the network level (reason), or one succeeded (NULL). */
        void (*on_http)(Catalog *c, const char *reason, void *userdata);
} CatalogCallbacks;

int catalog_new(sd_event *event, UpstreamPool *pool, const CatalogConf *conf, const CatalogCallbacks *cb,
                void *userdata, Catalog **ret);
Catalog *catalog_free(Catalog *c);
DEFINE_TRIVIAL_CLEANUP_FUNC(Catalog *, catalog_free);
/* host_down: the host has engines and its bus is not up yet; the reads begin when an engine comes up. */
void catalog_start(Catalog *c, bool host_down);
/* A reload kept the host (same name, URL and engines): the new configuration's copies. */
void catalog_set_conf(Catalog *c, const CatalogConf *conf);

/* Re-reads the snapshot soon, at most once every 2 s (coalesced with a read in progress): a request's
 * exchange with the host failed, and whether the host is down is for this read to say (its outcome reaches
 * the owner through on_http). */
void catalog_check_soon(Catalog *c);
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
/* The last good /models answer, entry by entry (catalog-list.h), or NULL. */
const CatalogList *catalog_snapshot(const Catalog *c);
/* 1: the snapshot lists key (id or alias); 0: it does not; -ENODATA: there is no snapshot. */
int catalog_lists(const Catalog *c, const char *key);
/* The engine whose learned key list has key, or -1. */
ssize_t catalog_engine_for_key(const Catalog *c, const char *key);
/* Engine i's learned keys (NULL-terminated, may be NULL). */
char *const *catalog_engine_keys(const Catalog *c, size_t i);
/* Engine i's keys as remembered from an earlier run, before anything is read (keys is taken). */
void catalog_set_engine_keys(Catalog *c, size_t i, char **keys);
/* Changes whenever what a listing takes from the catalog does: the snapshot (a read that brings other
 * bytes, an applied status event) or an engine's learned keys. Never the same for two catalogs. */
uint64_t catalog_generation(const Catalog *c);
