/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The Manager holds what the daemon serves from: the configuration (or the errors that keep it from
 * serving, rule:refusing-state), one Host per [Host] in step with it, the hosts a reload left draining, the
 * upstream pool, the counters and the /models/sse feed hub. It knows nothing of listening sockets or client
 * connections (server.h, client.h sit above it) and tells its owner of changes through ManagerCallbacks.
 * Everything above reads it through the accessors below; its struct is its own. */

#include <stdbool.h>
#include <systemd/sd-event.h>

#include "modelgated/sched/alias-pick.h"
#include "modelgated/api/conversation.h"
#include "modelgated/conf/conf.h"
#include "modelgated/event/socket-watch.h"
#include "modelgated/records/activity.h"
#include "shared/macro.h"
#include "shared/time-util.h"

typedef struct Manager Manager;
typedef struct Host Host;
typedef struct UpstreamPool UpstreamPool;
typedef struct Metrics Metrics;
typedef struct Access Access;
typedef struct FeedHub FeedHub;
typedef struct Activity Activity;
typedef struct ModelMemory ModelMemory;

typedef struct ManagerCallbacks {
        /* a host's state, its counts, or what keeps the daemon from its idle exit may have changed */
        void (*changed)(void *userdata);
        /* a host catalog's first read ended: /models answers that wait for it can be given */
        void (*catalog_ready)(void *userdata);
        /* a host's first probe ended, it is connecting no more: /health answers that wait for it can go */
        void (*host_probed)(void *userdata);
        /* the configuration was replaced: settings such as ExitIdleSec= apply from now */
        void (*reloaded)(void *userdata);
} ManagerCallbacks;

int manager_new(sd_event *event, bool user, Manager **ret);
Manager *manager_free(Manager *m);
DEFINE_TRIVIAL_CLEANUP_FUNC(Manager *, manager_free);
void manager_set_callbacks(Manager *m, const ManagerCallbacks *cb, void *userdata);

/* Reads, verifies and resolves the configuration at path. On errors the defaults stay, every error is
 * logged (manager_n_config_errors() of them), and manager_start() brings up a daemon that refuses every
 * request with them. */
int manager_load_config(Manager *m, const char *path);
unsigned manager_n_config_errors(Manager *m);
/* Socket-activated, with a good configuration: records this run (run-record.h). When runs before it ended
 * without a clean exit CRASH_LOOP_RUNS times within CRASH_LOOP_WINDOW, the daemon refuses every request
 * with that, with no host (manager_crash_loop()), until a reload or until those runs are that old. */
int manager_record_run(Manager *m);
bool manager_crash_loop(Manager *m);
/* The loop ended cleanly (an idle exit, a stop): this run is no crash. */
void manager_clean_exit(Manager *m);
/* Makes and starts one Host per [Host]; with configuration errors, sets the refusal instead. */
int manager_start(Manager *m);
/* Reads the configuration again and applies it without dropping a connection (rule:reload-drains). On
 * failure nothing changes and *ret_error says why. */
int manager_reload(Manager *m, char **ret_error);
/* A clean stop began: no reload from now on, and no upstream connection goes back into the pool. */
void manager_stop(Manager *m);
/* A host still needs the daemon: an engine to stop when idle, or a previous configuration's host still
 * answering. */
bool manager_keeps_daemon(Manager *m);
/* Something a host shows changed: told to the owner (ManagerCallbacks.changed). */
void manager_changed(Manager *m);

sd_event *manager_event(Manager *m);
Config *manager_config(Manager *m);
bool manager_stopping(Manager *m);
/* Socket-activated with a configuration that has errors: the answer to every request, else NULL. */
const char *manager_refusal(Manager *m);
/* Bumped when the warnings change in a way their number does not show. */
unsigned manager_warnings_serial(Manager *m);
/* Bumped each time the configuration is replaced (a load, a reload), and with it the hosts. */
uint64_t manager_config_serial(Manager *m);

size_t manager_n_hosts(Manager *m);
/* The i-th host of the current configuration, for manager_config(m)->hosts[i]. */
Host *manager_host_at(Manager *m, size_t i);
/* The Host for h, which may be of an older configuration (a request that began before a reload): the
 * current host of that name, else the draining one, else NULL. */
Host *manager_host(Manager *m, const HostConf *h);

UpstreamPool *manager_pool(Manager *m);
/* where the clients' and hosts' sockets are watched */
SocketWatchSet *manager_sockets(Manager *m);
Metrics *manager_metrics(Manager *m);
FeedHub *manager_feed_hub(Manager *m);
/* rule:activity-feed: the requests in flight and done, the /activity subscribers (records/activity.h) */
Activity *manager_activity(Manager *m);
/* rule:history: the ring of the recent requests, read back from the journal, or from the state directory's
 * history file, which is then kept: returned, the caller's to free after the manager (NULL: none). Once, at
 * start, before the first request. */
HistoryFile *manager_history_start(Manager *m);
/* What host h shows, as /activity's "host" event has it */
void manager_activity_host(Manager *m, Host *h, ActivityHost *ret);
/* The snapshot of the hosts and requests (the JSON of GetActivity(), or as the "snapshot" event) */
int manager_activity_snapshot(Manager *m, bool event, Buffer *out);
/* [Access] counts; made by the first request that needs them, so that no file is read at start unless
 * [Access] is used. NULL: out of memory. */
Access *manager_access(Manager *m);
/* The conversations routed (rule:resumable-streams), at the loop's time: kept across reloads, since a
 * conversation names its host and engine by name, and a host that a reload removed is simply not found.
 * Each use keeps the daemon from its idle exit for CONV_HOLD_USEC (manager_keeps_daemon()). */
int manager_conv_remember(Manager *m, const char *owner, const char *id, const char *host,
                          const char *engine);
const ConvEntry *manager_conv_find(Manager *m, const char *owner, const char *id);
void manager_conv_touch(Manager *m, const char *owner, const char *id);

/* Aliases (manager-alias.c): the target a request of client (its key or address; NULL: none) picks now,
 * never one in 'tried', with the state of each target it was picked from (alias-pick.h) into ret_targets
 * (optional; room for ALIAS_TARGETS_MAX); and that client used target, for "spread" to keep it there. */
AliasMemory *manager_alias_memory(Manager *m);
ssize_t manager_alias_pick(Manager *m, const AliasConf *a, const AliasClient *client, uint64_t tried,
                           AliasTarget *ret_targets, const char **ret_why);
void manager_alias_used(Manager *m, const AliasConf *a, const AliasClient *client, size_t target);
/* What each host last said of its models (model-memory.h, rule:remembered-context), kept across runs. */
ModelMemory *manager_model_memory(Manager *m);
