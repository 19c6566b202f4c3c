/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The inside of a Host, shared by the three files one is made of, because
 * each holds a concept of its own that would drown the others. Bottom to top,
 * each calling only the ones below it:
 *   host-warmup.c  the HTTP exchanges that bring a started engine to serving,
 *                  and keep an idle one warm
 *   host-switch.c  the switch phases, the bus's news that drives them, and
 *                  the state the host shows, which those phases mostly decide
 *   host-state.c   the requests and the scheduler's actions, life and reload
 * and, beside them, host-idle-timer.c, the idle stop the host's manager holds, which the
 * other three tell when what it follows changes, and host-busy.c, the check that ends a
 * busy GPU, and host-prompt-cache.c, the saving and restoring of an engine's prompt caches around its
 * stop and start. Only those include it; everything else goes through host.h. */

#include "modelgated/hostbus/host-bus.h"
#include "modelgated/host/host.h"
#include "modelgated/upstream/upstream.h"
#include "modelgated/catalog/catalog-list.h"

#define HEALTH_PROBE_INTERVAL_USEC (250 * USEC_PER_MSEC)
#define HEALTH_PROBE_TIMEOUT_USEC (2 * USEC_PER_SEC)
#define PORT_PROBE_TIMEOUT_USEC (2 * USEC_PER_SEC)
/* rule:engine-unanswered: how long an active engine unit's URL may answer nothing before it is said */
#define ENGINE_UNANSWERED_USEC (5 * USEC_PER_SEC)

typedef enum SwitchPhase {
        PHASE_NONE,
        PHASE_LEASE, /* Shared=: taking the host's switch lease (rule:switch-lease) */
        PHASE_BUSY_CHECK,
        PHASE_PORT_PROBE,
        PHASE_SLOTS, /* the running engine's /slots, until none works (rule:slots-in-flight) */
        PHASE_STOPPING,
        PHASE_STARTING,
        PHASE_HEALTH,
        PHASE_GIVING_UP, /* stopping an engine that never became healthy */
        PHASE_IDLE_STOP, /* stopping an engine nobody used for IdleStopSec= */
} SwitchPhase;

typedef enum IdleTimerOp {
        IDLE_TIMER_NONE,
        IDLE_TIMER_STOP,    /* StopUnit: the engine is to stop, or another to start */
        IDLE_TIMER_CLEAR,   /* StopUnit of whatever the host holds for it, then CREATE */
        IDLE_TIMER_CREATE,  /* StartTransientUnit */
        IDLE_TIMER_RESTART, /* RestartUnit: renewed */
} IdleTimerOp;

/* What made the host busy (rule:busy-gpu), which is what host-busy.c checks again (rule:busy-recheck) */
typedef enum HostBusyKind {
        HOST_BUSY_UNITS,     /* a BusyUnits= unit is active */
        HOST_BUSY_PORT,      /* a server answers on the engine's URL while no engine unit runs */
        HOST_BUSY_CONDITION, /* the engine unit's ExecCondition=/Condition…= refused: not checked again */
} HostBusyKind;

typedef struct HostBusy {
        HostBusyKind kind;
        ssize_t engine; /* the engine whose URL the foreign server answered on */
        sd_event_source *timer;
        Upstream *probe; /* the GET /health of HOST_BUSY_PORT's check */
        bool listing;    /* HOST_BUSY_UNITS's ListUnitsByPatterns is under way */
} HostBusy;

/* What host-shared.c's one timer is for */
typedef enum SharedStep {
        SHARED_LEASE, /* ask for the lease again */
        SHARED_THEN,  /* the lease is ours and the others have seen it: go on */
        SHARED_SLOTS, /* ask /slots again */
} SharedStep;

/* rule:idle-stop-on-host: the timer unit on the host, as far as modelgated knows it */
typedef struct IdleTimer {
        ssize_t engine; /* whose timer the host holds, -1: none (or not known) */
        usec_t at;      /* when it elapses, on our clock (the host's start of it came a little later) */
        usec_t span;    /* its OnActiveSec= */
        IdleTimerOp op; /* the one call under way, and what it is for */
        ssize_t op_engine;
        usec_t op_sent, op_span;
        usec_t retry_at, backoff; /* after a failed call, not before */
        bool warned;
        sd_event_source *wake; /* the renewal while the engine is busy */
} IdleTimer;

struct Host {
        HostEnv env;
        Config *config; /* the configuration conf belongs to: a reload keeps it while this host lives */
        const HostConf *conf;
        HostEngine *engines;
        size_t n_engines;
        HostBus *bus;

        HostState state;
        bool probed; /* the first probe ended (rule:host-connecting): the bus's outcome, or the first read's
                      */
        bool bus_down;
        char *down_reason;
        bool http_down;
        int logged_down; /* -1: nothing logged yet, so the first outcome is */

        ssize_t running; /* the engine whose unit runs, -1 for none */
        bool engine_up;  /* and whose /health answered 200 */
        usec_t up_since;
        bool running_adopted; /* the engine that runs was found running, not started here (host-view.c) */
        bool busy;            /* the last switch was refused, and nothing found the GPU free since */
        HostBusy busy_check;
        bool stop_requested; /* the stop in progress is StopEngine()'s */

        SwitchPhase phase;
        ssize_t target;
        bool adopting;
        char *for_model;
        char *refusal; /* an ExecCondition= refusal's words, while the GPU owner is read (rule:gpu-owner) */
        usec_t switch_start;
        ssize_t switch_from; /* the engine that ran when the switch began, or -1 */
        /* the last switch that ended (up or failed): its target and its time, for the requests that
         * waited for it (rule:queued-and-switch) */
        ssize_t last_switch_target;
        usec_t last_switch_start, last_switch_end;
        Upstream *probe;
        int probe_status;
        /* rule:engine-unanswered: since when HEALTH's probes of the active unit got no answer at all (0:
         * they did), and the words said once that lasted ENGINE_UNANSWERED_USEC (NULL: not said) */
        usec_t unanswered_since;
        char *unanswered;
        sd_event_source *deadline, *probe_timer;

        Sched sched;
        /* every request attached or acquired (host_attach(), host_acquire()): those in flight are told
         * when the probe finds the host down, from down_source (never from inside the probe's callback) */
        HostWaiter *riders;
        sd_event_source *down_source;
        Catalog *catalog;
        char *fail_message; /* for the requests a failed switch answers */
        char *last_error;   /* LastError: the last failed switch or the last reason to be down, until the
                             * host recovers from it (host_set_last_error()) */
        usec_t last_error_at, last_error_realtime; /* when it was said: CLOCK_MONOTONIC, CLOCK_REALTIME */
        /* rule:failed-start-hold: per engine, the words of its failed start while the scheduler holds it
         * (sched_held_until()); holds_serial counts the holds begun and ended, for FailedStarts */
        char **held_reasons;
        unsigned holds_serial;
        char **warnings;
        sd_event_source *schedule_source, *sched_timer;

        /* WarmupRequest=: sent after /health answers 200, before the engine counts as up; and again after
         * PrimeAfterIdleSec= without traffic, as a request in flight of modelgate's own */
        Upstream *warmup, *prime_upstream;
        usec_t warmup_start;
        SchedRequest prime;
        bool priming;
        usec_t primed_for; /* the idle period (its start) a prime was sent for */
        sd_event_source *prime_timer;
        IdleTimer idle_timer;

        /* rule:several-instances (host-shared.c) */
        char *lease_unit; /* Shared=: modelgate-switch-<host>.service, followed as the bus's last unit */
        bool lease_taking, lease_held, lease_releasing;
        bool lease_up;      /* the lease unit runs, as last heard (whoever holds it) */
        usec_t lease_since; /* when ours was taken */
        bool lease_wait;    /* another instance holds it: asked for again every LEASE_RETRY_USEC */
        void (*lease_then)(Host *h);
        bool slots_busy; /* a slot of slots_engine works */
        ssize_t slots_engine;
        CatalogList *slots_list; /* the engine's own /models, read first */
        size_t slots_model;      /* its entry asked about */
        bool slots_asked;        /* the answer under way is a /slots (not the /models) */
        Upstream *slots;
        Buffer slots_body;
        void (*slots_then)(Host *h);
        SharedStep shared_step;
        sd_event_source *shared_timer;

        struct PromptCache *prompt_cache; /* rule:prompt-cache (host-prompt-cache.c) */
};

/* rule:last-error: what went wrong, said now (LastError, LastErrorUSec) */
void host_set_last_error(Host *h, const char *message);

/* The host went down: its requests in flight hear it soon, from down_source (host_down_cb) */
void host_tell_riders_down(Host *h);

static inline void host_unride(Host *h, HostWaiter *w) {
        if (w->riding) {
                LIST_REMOVE(riders, h->riders, w);
                w->riding = false;
        }
}

static inline const char *engine_name(const Host *h, ssize_t i) {
        return i >= 0 && (size_t)i < h->n_engines ? h->engines[i].conf->name : "-";
}

static inline const char *engine_unit(const Host *h, ssize_t i) {
        return i >= 0 && (size_t)i < h->n_engines ? h->engines[i].conf->unit : "-";
}

/* The time of the event being dispatched: whatever one event sets off sees one "now", and so does the
 * scheduler. */
static inline usec_t host_now(const Host *h) {
        usec_t t;

        /* sd_event_now() fails only for a clock the loop does not keep, or in a forked child */
        if (sd_event_now(h->env.event, CLOCK_MONOTONIC, &t) < 0)
                return now_usec(CLOCK_MONOTONIC);
        return t;
}

/* Tells the owner that something it shows changed. */
static inline void host_changed(Host *h) {
        if (h->env.cb->on_changed)
                h->env.cb->on_changed(h, h->env.userdata);
}

/* Lets schedule_cb() (host-state.c) look again, once the event at hand is done: every part calls it
 * when it changes what the scheduler decides on. Its source exists only while it is due: sd-event keeps
 * a defer source in its queue of pending sources for as long as it exists, off or not, and every turn of
 * the loop puts the source that fired into that queue and takes it out again, comparing it with each. */
void host_schedule_later(Host *h);

/* host-state.c */
/* rule:failed-start-hold: the hold of engine i's failed start ends before its time, for 'why'. true: it
 * was held. */
bool host_unhold(Host *h, size_t i, const char *why);

/* host-refusal.c */
/* Answers w, which the scheduler failed with status, with the host's words for it */
void host_answer_failed(Host *h, HostWaiter *w, int status);
/* true, with ret filled in, when a request for engine (-1: a host without engines) is refused at once: the
 * host is down, engine i is held, or the request needs a switch that cannot be made now */
bool host_refuse_if_down(const Host *h, ssize_t engine, HostRefusal *ret);
bool host_refuse_if_held(const Host *h, size_t i, HostRefusal *ret);
bool host_refuse_at_once(Host *h, size_t i, HostRefusal *ret);

/* host-view.c */
/* The warnings of the host's engine units (not found, enabled, Restart=, Conflicts=), read on the bus */
void host_check_units(Host *h);

/* host-switch.c */
extern const HostBusCallbacks host_bus_callbacks;
void host_update_state(Host *h);
void host_switch_reset(Host *h);
/* rule:queued-and-switch: sets w->queued and w->switched, before w is told */
void host_waiter_times(const Host *h, HostWaiter *w);
void host_begin_switch(Host *h);
/* An engine found up on the host (another instance's) is taken as it is, in place of the switch under way,
 * whose requests wait on as the scheduler says */
void host_switch_adopt(Host *h, size_t engine);
/* A switch that has stopped nothing is dropped: nobody waits for it any more (rule:abandon-switch) */
void host_switch_drop(Host *h, const char *why);
void host_idle_stop(Host *h, ssize_t engine, bool requested);
/* "3090-flint-40b id=…": w's model and request id as the log lines about it say them, escaped */
char *host_waiter_log_words(const HostWaiter *w);
/* The scheduler's engines take their [Engine] IdleStopSec= (at start and at each reload) */
void host_engines_idle_stop_set(Host *h);
/* engine's IdleStopSec= (its [Engine]'s, else the host's); engine -1: the host's */
usec_t host_engine_idle_stop(const Host *h, ssize_t engine);
/* The engine the switch was for answers (and is warmed up): it serves from now. */
void host_engine_is_up(Host *h);
int host_deadline_cb(sd_event_source *s, uint64_t usec, void *userdata);

/* host-idle-timer.c */
/* Makes, renews or stops the host's idle timer for what the host now is; cheap when nothing is due. */
void host_idle_timer_sync(Host *h);
void host_idle_timer_done(Host *h);

/* host-shared.c */
int host_shared_init(Host *h);
void host_shared_done(Host *h);
/* Cancels what is asked of the host, and gives the lease back */
void host_shared_reset(Host *h);
void host_shared_bus_up(Host *h);
/* The lease unit (the bus's unit n_engines) changed */
void host_shared_unit_changed(Host *h);
/* LEASE: with Shared=, then() once the lease is ours (or cannot be had); at once without Shared= */
void host_lease_take(Host *h, void (*then)(Host *h));
void host_lease_release(Host *h);
/* SLOTS: then() once no slot of engine works, or its /slots cannot say */
void host_slots_check(Host *h, ssize_t engine, void (*then)(Host *h));
/* rule:hold-down-from-host: when engine i's unit became active (ActiveEnterTimestamp), on our clock; now
 * when the host's manager does not say, or says a time to come */
usec_t host_shared_up_at(const Host *h, size_t i, usec_t now);

/* host-prompt-cache.c (rule:prompt-cache) */
int host_prompt_cache_init(Host *h);
void host_prompt_cache_done(Host *h);
/* Cancels a save or restore under way, without going on to what it was for (the switch is reset) */
void host_prompt_cache_reset(Host *h);
/* then() once the prompt caches of the running engine are saved, or cannot be, or the budget ran out */
void host_prompt_cache_save(Host *h, ssize_t engine, void (*then)(Host *h));
/* then() once what was saved for engine is restored (once), or cannot be */
void host_prompt_cache_restore(Host *h, ssize_t engine, void (*then)(Host *h));
/* A reload kept the host: an engine that answered 501 is asked again (it may have --slot-save-path now) */
void host_prompt_cache_reloaded(Host *h);
/* The scheduler's stop: an idle one saves first, one asked for by hand does not */
void host_prompt_cache_idle_stop(Host *h, ssize_t engine, bool requested);
/* host_engine_is_up() after a restore of what was saved for the target */
void host_engine_restore_then_up(Host *h);

/* host-busy.c */
int host_busy_init(Host *h);
void host_busy_done(Host *h);
/* The switch to engine was refused for kind: busy, checked again every 2 s until the GPU is free. */
void host_busy_set(Host *h, HostBusyKind kind, ssize_t engine);
/* Not busy (an engine came up, or the GPU was found free). */
void host_busy_clear(Host *h);
/* rule:busy-followed: the bus's set of active BusyUnits= units changed, or was read anew */
void host_busy_units_changed(Host *h);

/* host-warmup.c */
/* GET /health of the switch's target; the answer goes to cb. */
int host_probe_start(Host *h, const UpstreamCallbacks *cb, usec_t timeout);
int host_probe_on_headers(Upstream *u, const UpstreamResponse *resp, void *userdata);
/* HEALTH: probes until /health answers 200, then warms the engine up, then host_engine_is_up(). */
void host_probe_health(Host *h);
/* rule:engine-unanswered: what the waiting requests are told of an active unit whose URL answers
 * nothing (NULL: nothing to tell), and its end with the switch */
const char *host_unanswered(const Host *h);
void host_unanswered_reset(Host *h);
int host_probe_timer_cb(sd_event_source *s, uint64_t usec, void *userdata);
void host_prime_rearm(Host *h);
int host_prime_timer_cb(sd_event_source *s, uint64_t usec, void *userdata);
