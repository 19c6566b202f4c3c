/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* A Host at run time: its bus, its engines and which one runs, the requests
 * in flight and the requests waiting for an engine, and the switch in
 * progress. The switch *mechanics* live here (busy checks, StopUnit,
 * StartUnit, the unit's real outcome, /health); *when* to switch, and who
 * goes, is the Sched's (sched.h), whose actions this module carries out. */

#include <stdbool.h>
#include <sys/types.h>
#include <systemd/sd-event.h>

#include "modelgated/conf/conf.h"
#include "modelgated/conf/engine.h"
#include "modelgated/event/feed-hub.h"
#include "modelgated/sched/sched.h"
#include "shared/list.h"
#include "shared/time-util.h"

typedef struct Host Host;
typedef struct HostBus HostBus;
typedef struct HostWaiter HostWaiter;
typedef struct Catalog Catalog;
typedef struct UpstreamPool UpstreamPool;
typedef struct Metrics Metrics;

typedef enum HostState {
        HOST_DOWN,       /* bus unreachable, or the engine's URL fails while its unit is active */
        HOST_IDLE,       /* bus up, no engine running */
        HOST_STARTING,   /* an engine is starting (no engine was running) */
        HOST_SERVING,    /* an engine is up */
        HOST_SWITCHING,  /* one engine is stopping for another */
        HOST_BUSY,       /* the last switch was refused: the GPU is someone else's, and still is */
        HOST_CONNECTING, /* not probed since start: its bus connects, or its first read is under way */
        _HOST_STATE_MAX,
} HostState;

const char *host_state_to_string(HostState s);

/* The outcome for a waiting request: status 0 means "go, the engine is up"; otherwise an HTTP status
 * (423, 502, 503) and a message for the client. */
typedef void (*HostReadyFn)(HostWaiter *w, int status, const char *message);
/* The host's probe found it down while the request was in flight (host_down_reason() says why). The
 * waiter is no longer told anything else of the host's state; it is still to be released. */
typedef void (*HostDownFn)(HostWaiter *w);

struct HostWaiter {
        Host *host;     /* NULL once released or answered with an error */
        ssize_t engine; /* index into the host's engines; -1: a host without engines (host_attach()) */
        const char *model;
        /* rule:request-id: the request's id, on the log lines about it (the switch it causes, its wait);
         * set by the caller once host_acquire() has queued it or let it go; none: {} */
        Span id;
        HostReadyFn ready;
        HostDownFn down; /* optional */
        SchedRequest req;
        LIST_FIELDS(HostWaiter, riders); /* in the host's riders while 'riding' */
        bool riding;
        /* rule:queued-and-switch: set before ready() is called, of the time since host_acquire(): how
         * much the request spent waiting for a switch (or start) of its own engine, and how much in the
         * queue otherwise (the running stream, the hold-down, another engine's switch) */
        usec_t queued, switched;
        bool caused_switch; /* rule:sessions: the host switched to (or started) its engine for it: it was
                             * the switch's first waiter */
};

typedef struct HostRefusal {
        int status;
        char message[1024];
} HostRefusal;

/* The news a host sends to its owner. Each may be called from inside any host_*() call but host_free(). */
typedef struct HostCallbacks {
        /* Something a host shows (state, engine, counts, errors), or whether it keeps the daemon from its
         * idle exit, may have changed. */
        void (*on_changed)(Host *h, void *userdata);
        /* catalog_ready() of the host's catalog may have become true. */
        void (*on_catalog_ready)(Host *h, void *userdata);
        /* An event of the host's feed for the /models/sse subscribers, relabelled, or a comment, with
         * what it is about. */
        void (*on_feed)(Host *h, const FeedEvent *e, void *userdata);
        /* The host's first probe ended (its bus came up or failed, or its first read ended): it is no
         * longer HOST_CONNECTING. */
        void (*on_probed)(Host *h, void *userdata);
        /* The keys one of its engines serves were learned anew (catalog_engine_keys()). */
        void (*on_keys_learned)(Host *h, void *userdata);
        /* Engine i's list was read while it ran (CatalogCallbacks.on_listed). */
        void (*on_listed)(Host *h, size_t i, bool changed, void *userdata);
} HostCallbacks;

/* What a host gets from its owner, who keeps all of it alive for as long as the host lives. */
typedef struct HostEnv {
        sd_event *event;
        UpstreamPool *pool;
        Metrics *metrics;
        const HostCallbacks *cb;
        void *userdata;
} HostEnv;

/* A host of config (the running one, or a reload's new one). */
Host *host_new(const HostEnv *env, Config *config, const HostConf *conf);
Host *host_free(Host *h);
/* Connects the bus of a host that has engines. */
void host_start(Host *h);

const HostConf *host_conf(const Host *h);
HostState host_state(const Host *h);
bool host_has_engines(const Host *h);
size_t host_n_engines(const Host *h);
const HostEngine *host_engine(const Host *h, size_t i);
/* The engine for 'key' (rule:engine-for-key): the first whose Models= globs match; else the one whose key
 * list, last seen while it ran, has it; else the running one, if it lists the key now (or nothing is known
 * yet); -1 when none. ret_model (optional): the name /metrics may label the request's model with, the
 * Models= glob that matched or the key where the host lists it, else NULL (rule:usage-metrics). */
ssize_t host_find_engine(const Host *h, const char *key, const char **ret_model);
/* rule:never-listed-404: engine i (found by its Models=) is known not to serve key: it does not run, its
 * list was read when it last ran (and kept on disk) and key is not in it, nor in what the host lists now.
 * false when nothing is known: an engine never seen running is started for the key. */
bool host_key_known_absent(const Host *h, size_t i, const char *key);
char *const *host_warnings(const Host *h);
Catalog *host_catalog(const Host *h);
/* The engine that is up (its /health answered 200), or -1. */
ssize_t host_engine_up(const Host *h);
/* Whether the running engine lists key as a model it would have to load first (a router's "unloaded" or
 * "loading"): a request for it moves the GPU as a switch does (rule:probe). */
bool host_key_cold(const Host *h, const char *key);

/* What a host does with a request that asks for it: outcomes its caller handles, never failures */
typedef enum HostAcquire {
        HOST_ACQUIRED, /* go now: counted in flight until host_release() */
        HOST_QUEUED,   /* w->ready is called later */
        HOST_REFUSED,  /* refused now: the host is down (503), or the engine's start failed a moment
                        * ago (502, rule:failed-start-hold); the HostRefusal says why */
} HostAcquire;

/* Asks for engine i: HOST_ACQUIRED, HOST_QUEUED or HOST_REFUSED (down, or held). 'down' (optional) hears of
 * the host going down while the request is in flight. */
HostAcquire host_acquire(Host *h, size_t i, HostWaiter *w, HostReadyFn ready, HostDownFn down,
                         const char *model, HostRefusal *ret);
/* The same for a host without engines: HOST_ACQUIRED, in flight until host_release(); or HOST_REFUSED
 * (its probe found it down). */
HostAcquire host_attach(Host *h, HostWaiter *w, HostDownFn down, const char *model, HostRefusal *ret);
/* For a request only engine i can answer while it runs (sched_join()): HOST_ACQUIRED, in flight until
 * host_release(), when i is up and no switch has begun; HOST_REFUSED otherwise, ret's status 503 when the
 * host is down, 404 when i is not the engine up. Never queues, never switches. */
HostAcquire host_join(Host *h, size_t i, HostWaiter *w, HostDownFn down, const char *model,
                      HostRefusal *ret);
/* rule:probe: whether a probe (path-table.h) for engine i, whose model is key, is refused before
 * host_acquire(), because that would stop an engine, wait behind a switch or queue behind other requests:
 * true with ret's 423 and its words. Never switches, never queues. */
bool host_refuses_probe(Host *h, size_t i, const char *key, HostRefusal *ret);
/* The request is done or its client has gone; safe to call twice or on a waiter never used. */
void host_release(HostWaiter *w);
/* For a waiting client's keepalive comments, what it waits for: "waiting for engine fork on 3090, 2 ahead";
 * or, once the engine is up and its router loads the model (its feed says so), "loading 3090-flint-40b
 * 40%". 1: the request waits; 0: it is in flight and nothing is known to hold it up (buf says "waiting for
 * engine fork on 3090 to answer"); -ESTALE: released. */
int host_waiter_describe(const HostWaiter *w, char *buf, size_t l);

/* The model w asks for is being loaded by the running engine's router: its percent, -ENODATA when its feed
 * gives none; -ENOENT: it is not loading */
int host_waiter_loading(const HostWaiter *w);
/* What a waiting request waits for (rule:activity-feed), for the /activity feed's "queued" event */
typedef enum HostWait {
        HOST_WAIT_NONE,         /* it does not wait (in flight, or released) */
        HOST_WAIT_STREAM,       /* the running engine's requests in flight, before the switch */
        HOST_WAIT_HOLD_DOWN,    /* the running engine's hold-down */
        HOST_WAIT_ENGINE_START, /* its engine starting, nothing else held the GPU */
        HOST_WAIT_SWITCH,       /* a switch: to its engine, or first to another one */
        HOST_WAIT_PROMPT_CACHE, /* the switch's save or restore of prompt caches (rule:prompt-cache) */
} HostWait;
const char *host_wait_to_string(HostWait w);
/* Why w waits, the requests ahead of it (ret_ahead) and the hold-down left (ret_hold_left, 0: none) */
HostWait host_waiter_wait(const HostWaiter *w, unsigned *ret_ahead, usec_t *ret_hold_left);
/* What it waits for, in words with its numbers ("held by engine mainline's hold-down, 17 s left",
 * "waiting for 1 running stream on mainline", "starting fork (2.1 s)"); -ENOENT when it does not wait */
int host_waiter_reason(const HostWaiter *w, char *buf, size_t l);
/* The same for the request that has waited longest on the host; -ENOENT when none waits */
int host_wait_reason(const Host *h, char *buf, size_t l);
/* The engine that is up was found running (adopted), not started by this daemon */
bool host_engine_adopted(const Host *h);
/* Why the running engine's unit is being stopped: "idle-stop" (IdleStopSec=), "stop" (StopEngine()), or
 * NULL when it is not */
const char *host_stopping(const Host *h);
/* The engine a switch or start under way goes to, or -1 */
ssize_t host_switch_target(const Host *h);
/* rule:prompt-cache: a save or restore of an engine's prompt caches, a step of the switch (or of the idle
 * stop) of its own */
typedef struct HostCacheStep {
        bool restore;                  /* else a save */
        ssize_t engine;                /* whose caches */
        ssize_t before;                /* a save: the engine the switch goes to; -1: an idle stop */
        usec_t start, end;             /* CLOCK_MONOTONIC; end 0: under way */
        usec_t start_wall, end_wall;   /* the same as CLOCK_REALTIME, read once: /activity's, steady */
        uint64_t found;                /* slots that hold a prompt (a save), or to restore */
        uint64_t slots, tokens, bytes; /* done so far */
} HostCacheStep;
/* The step under way (what a waiting request is told), or NULL */
const HostCacheStep *host_cache_step(const Host *h);
/* What /activity shows: the step under way once it found a slot, else the last one that found or did
 * something, or was abandoned; NULL: none yet. A save of an engine whose slots hold nothing is no step. */
const HostCacheStep *host_cache_step_shown(const Host *h);

/* An HTTP exchange of the host's own probe (its catalog's reads) failed at the network level (reason) or
 * succeeded (NULL): the host is down, or up. */
void host_report_http(Host *h, const char *reason);
/* A client's request to the host failed at the network level, or got a malformed answer. That is the
 * request's failure, not the host's (rule:one-request-failure): the host's probe looks again soon, and it
 * says. */
void host_report_request_failed(Host *h);

unsigned host_in_flight(const Host *h);
/* sched_switch_pending() of the host's scheduler */
bool host_switch_pending(const Host *h);
unsigned host_waiting(const Host *h);
/* The engine whose unit runs (up or being checked), or -1. */
ssize_t host_running(const Host *h);
/* Engine i's state: "serving", "starting", "stopping", "stopped", "held" (after a failed start) or
 * "unknown" (its host's bus is not known or gone) */
const char *host_engine_state(const Host *h, size_t i);
const char *host_last_error(const Host *h);
/* rule:last-error: when LastError was said, CLOCK_REALTIME µs (0: no error) */
usec_t host_last_error_usec(const Host *h);
/* The models the engine that is up serves without a load, as the host lists them (an empty list when
 * none is up); NULL: out of memory */
char **host_loaded_models(const Host *h);
/* rule:prompt-cache: the engines that answered a save or restore with 501 (no --slot-save-path), until
 * a reload; a new strv, NULL on ENOMEM */
char **host_prompt_cache_unsupported(const Host *h);
/* Why the host is down (its bus, or its probe), or NULL while it is not */
const char *host_down_reason(const Host *h);
/* rule:bus-gone: its bus, "up", "connecting" (not probed yet), "gone" (lost or not reachable: its engine
 * may serve on), or "" for a host without engines, which has none; and why it is gone (NULL: it is not) */
const char *host_bus_state(const Host *h);
const char *host_bus_error(const Host *h);
/* rule:bus-backoff: the seconds until the host's lost bus is tried again, what a 503 it causes says and
 * its Retry-After carries; 0 when the bus is not the reason (the answer's own default applies) */
unsigned host_retry_after(const Host *h);
/* CLOCK_MONOTONIC: the end of the running engine's hold-down (0: none, USEC_INFINITY: forever), and when
 * its idle stop happens as things are (USEC_INFINITY: not now). */
usec_t host_hold_down_until(const Host *h);
usec_t host_idle_stop_at(const Host *h);
/* StopEngine(): the running engine stops once nothing is in flight or waiting. 1: requested; 0: nothing
 * runs; -EBUSY: a switch is under way; -ENOTCONN: the host is down. */
int host_request_stop(Host *h);
/* Something still needs this daemon: requests, a switch, or an engine whose idle stop is still due. */
bool host_keeps_daemon(const Host *h);

/* Reload: whether this host can carry on with conf (same URL, bus and engine units, in order: only
 * values change), and doing so. */
bool host_can_take(const Host *h, const Config *config, const HostConf *conf);
int host_set_conf(Host *h, Config *config, const HostConf *conf);
/* Nothing in flight or waiting and no switch under way: a host a reload removed can go. */
bool host_drained(const Host *h);
/* CLOCK_MONOTONIC: when the engine that is up came up. */
usec_t host_up_since(const Host *h);

/* rule:failed-start-hold: when the hold of engine i's failed start ends (CLOCK_MONOTONIC; USEC_INFINITY:
 * never by itself), or 0 when it is not held; and the words its requests get meanwhile (NULL: not held) */
usec_t host_held_until(const Host *h, size_t i);
const char *host_held_reason(const Host *h, size_t i);
/* Counts the holds begun and ended: what FailedStarts shows changed when it did */
unsigned host_holds_serial(const Host *h);
/* ResetFailed(): every hold ends now. Returns how many engines were held. */
int host_reset_failed(Host *h);
