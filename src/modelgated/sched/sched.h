/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The switch scheduler of one host: rule:switch-waits, rule:hold-down, rule:no-starvation,
 * rule:arrival-order, rule:wait-budget, rule:abandon-switch and rule:idle-stop as a pure state machine. It
 * is told what happens (a request arrives or ends, an engine is up or down, a switch failed, the host went
 * down) and the time, and it is asked, one at a time, what to do next (sched_next): release a request, fail
 * one, start a switch, stop an idle engine, or log a wait or an abandoned switch. No I/O, no clock of its
 * own: tests drive it with a fake clock, the host drives it with CLOCK_MONOTONIC.
 *
 * Why these rules: coding agents re-send a cut turn at once and forever, so
 * "switch at once" makes two agents on two engines of one GPU switch it back
 * and forth without end; with "wait for zero in flight" plus a hold-down plus
 * "queue behind a pending switch", they take turns. */

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "shared/list.h"
#include "shared/time-util.h"

typedef struct SchedConfig {
        usec_t hold_down;         /* HoldDownSec= */
        usec_t idle_stop;         /* IdleStopSec=, USEC_INFINITY: never */
        usec_t wait_budget;       /* WaitBudgetSec=, USEC_INFINITY: never */
        usec_t failed_start_hold; /* FailedStartHoldSec=, 0: none (rule:failed-start-hold) */
        bool shared; /* Shared= (rule:several-instances): the idle stop is the host's timer's alone, since
                      * this instance's idle clock knows nothing of the others' requests */
} SchedConfig;

typedef enum SchedRequestState {
        SCHED_WAITING,
        SCHED_IN_FLIGHT,
        SCHED_FAILED, /* to be answered with fail_status by the next sched_next() */
} SchedRequestState;

/* Embedded in whatever the caller uses for a request; the caller owns the memory, the scheduler the links:
 * requests in the queue of its state (waiting, in flight, failed), and while it waits, queue in its
 * engine's queue and tree_* in the tree of the waiting by arrival. */
typedef struct SchedRequest {
        LIST_FIELDS(struct SchedRequest, requests);
        LIST_FIELDS(struct SchedRequest, queue);
        struct SchedRequest *tree_parent, *tree_left, *tree_right;
        unsigned tree_size; /* of its subtree, itself included */
        uint64_t seq;       /* arrival order */
        size_t engine;
        usec_t arrived;
        SchedRequestState state;
        int fail_status;
        bool background; /* modelgate's own (a warm-up): not traffic for the idle clock */
} SchedRequest;

/* Requests in arrival order, first and last. */
typedef struct SchedQueue {
        SchedRequest *head, *tail;
} SchedQueue;

typedef struct SchedEngine {
        SchedQueue waiting; /* its waiting requests (linked by queue) */
        unsigned n_waiting;
        bool abandoned; /* an ABANDON to report */
        bool held;      /* its start failed at failed_at, and the hold has not been reported over */
        usec_t failed_at;
        usec_t idle_stop; /* its own [Engine] IdleStopSec= (USEC_INFINITY: never); 0: the host's */
} SchedEngine;

typedef enum SchedActionType {
        SCHED_NONE,
        SCHED_GO,      /* req: its engine is up, send it (it is in flight from now) */
        SCHED_FAIL,    /* req, status: answer it with this error (423, 502, 503, 504); it is forgotten */
        SCHED_START,   /* engine, req: switch the host to engine (req is its first waiter) */
        SCHED_STOP,    /* engine, idle_for: stop the idle engine */
        SCHED_WAIT,    /* engine, req: log that req waits for the running engine before this switch */
        SCHED_ABANDON, /* engine: the pending switch lost its last waiter before it started */
        SCHED_UNHOLD,  /* engine: the hold of its failed start is over (rule:failed-start-hold) */
} SchedActionType;

typedef struct SchedAction {
        SchedActionType type;
        SchedRequest *req;
        ssize_t engine;
        int status;
        usec_t idle_for;
        bool requested; /* SCHED_STOP: asked for (sched_request_stop), not the idle rule's */
} SchedAction;

typedef struct Sched {
        SchedConfig config;
        size_t n_engines;
        SchedEngine *engines;
        /* each request in one of these (linked by requests), by its state */
        SchedQueue waiting;   /* in arrival order */
        SchedQueue in_flight; /* in no order */
        SchedQueue failed;    /* to be answered, in arrival order */
        SchedRequest *tree;   /* the waiting ones again, by arrival, counted: sched_ahead() */
        uint64_t next_seq;
        usec_t last_arrived;
        unsigned n_waiting, n_in_flight;

        ssize_t running;  /* the engine that is up, -1 for none */
        usec_t up_at;     /* when it came up */
        usec_t last_done; /* when the last in-flight request ended, for the idle clock */
        ssize_t starting; /* a START in progress (or an engine being adopted), -1 for none */
        bool stopping;    /* a STOP in progress */
        bool down;        /* the host is down: no switches, no idle stop */
        /* rule:bus-gone: the host's bus is gone while its engine serves: that engine goes on serving, and
         * nothing that needs the bus (a start, a switch, an idle stop) happens until it is back */
        bool bus_gone;
        /* rule:busy-followed: a BusyUnits= unit is active on the host: no switch can be made */
        bool gpu_busy;
        ssize_t wait_logged; /* the pending switch whose wait was logged */
        bool stop_requested; /* StopEngine(): stop the running engine once nothing is in flight or waiting */
        usec_t foreign_since; /* rule:foreign-switch: another instance's switch of the host, under way since
                               * then; 0: none */
} Sched;

/* The steps the schedulers' loops have taken (a request, an engine or a tree node visited), all of them
 * together: what the tests count to show that no call walks the waiting requests. */
extern uint64_t sched_steps;

int sched_init(Sched *s, const SchedConfig *config, size_t n_engines);
void sched_done(Sched *s);

/* A request for engine arrives. true: it may go at once (it is in flight); false: it waits. now never goes
 * back from one call to the next (CLOCK_MONOTONIC): the queues are in arrival order, and so in the order of
 * their budgets' ends. */
bool sched_add(Sched *s, usec_t now, SchedRequest *r, size_t engine);
/* A request that only the running engine can answer (a resumed stream, whose buffer is that engine's:
 * rule:resumable-streams) joins it: true when engine is the one up and no switch or stop has begun, and it
 * is in flight from now, ahead of a pending switch, which waits for it as for any request in flight
 * (rule:switch-waits); false, and nothing is added, otherwise. It never makes a switch. */
bool sched_join(Sched *s, usec_t now, SchedRequest *r, size_t engine);
/* A request ended (answered, or its client went away): in flight, waiting or failed. */
void sched_remove(Sched *s, usec_t now, SchedRequest *r);

/* The engine a START named (or one found running) is up: its hold-down and idle clock start now. */
void sched_engine_up(Sched *s, usec_t now, size_t engine);
/* An engine found running that is not up yet (it is being checked): nothing else starts meanwhile. */
void sched_engine_starting(Sched *s, size_t engine);
/* The engine is being stopped outside a STOP (it never became healthy): nothing starts meanwhile. */
void sched_engine_stopping(Sched *s);
/* No engine runs any more (it stopped on its own, the idle stop finished, or a failed start). */
void sched_engine_down(Sched *s, usec_t now);
/* The START failed: every request waiting for that engine fails with status. still_running: the engine
 * that kept running (a refusal before anything was stopped), or -1. */
void sched_switch_failed(Sched *s, usec_t now, int status, ssize_t still_running);
/* rule:failed-start-hold: the start of engine failed (its waiting requests are sched_switch_failed()'s);
 * for FailedStartHoldSec= its requests are to be refused at once, not started again. */
void sched_start_failed(Sched *s, usec_t now, size_t engine);
/* When the hold of engine's failed start ends, or 0 when it is not held. */
usec_t sched_held_until(const Sched *s, usec_t now, size_t engine);
/* The hold ends before its time (an operator's ResetFailed(), the unit became active without modelgate).
 * true: it was held. */
bool sched_unhold(Sched *s, usec_t now, size_t engine);

/* rule:hold-down-from-host: the running engine's hold-down and idle clock count from up_at (when the host's
 * manager says it became active), not from when this instance saw it up: every instance in front of the
 * host then counts the same hold-down. Only ever earlier than sched_engine_up()'s now. */
void sched_set_up_at(Sched *s, usec_t up_at);
/* rule:foreign-switch: another instance holds the host's switch lease (on), or no longer does (off): from
 * now on, requests for the running engine wait behind that switch as behind one of ours
 * (rule:no-starvation), the hold-down aside, and the idle stop waits. */
void sched_foreign_switch(Sched *s, usec_t now, bool on);

/* The host is down (every waiting request fails with 503) or back. */
void sched_host_down(Sched *s, bool down);
/* rule:bus-gone: the host's bus is gone (or back) while the running engine serves: every request waiting
 * for another engine fails with 503, the running engine's go on, and no start, switch or idle stop is
 * decided until the bus is back. */
void sched_bus_gone(Sched *s, bool gone);
/* rule:busy-followed: a BusyUnits= unit became active (or none is any more): every request waiting for a
 * switch that has not begun fails with 423, at once rather than when the switch is due. */
void sched_gpu_busy(Sched *s, bool busy);
/* What a new request for engine gets at once instead of a place in the queue: 0 (none: it queues or goes),
 * 503 (it needs a switch or a start and the bus is gone), 423 (it needs one and a BusyUnits= unit is
 * active). A request for the running engine, or for the one being started, is never refused here. */
int sched_refusal(const Sched *s, size_t engine);

/* Stop the running engine as soon as nothing is in flight or waiting, hold-down and IdleStopSec= aside
 * (an operator's StopEngine()). Nothing when no engine is up; forgotten when another one comes up. */
void sched_request_stop(Sched *s);

/* What to do next. Returns false (and SCHED_NONE) when nothing is to be done now. Each action is
 * already accounted for: carry it out, then ask again. */
bool sched_next(Sched *s, usec_t now, SchedAction *ret);
/* When sched_next() may have something new to say without any event: a budget, the end of a
 * hold-down, an idle stop. USEC_INFINITY: never. */
usec_t sched_next_timer(const Sched *s, usec_t now);

/* When the running engine's hold-down ends, or 0 when none is running or it is over. */
usec_t sched_hold_down_until(const Sched *s, usec_t now);
/* When the idle stop will happen as things are, USEC_INFINITY if it will not. */
usec_t sched_idle_stop_at(const Sched *s);
/* Engine i's IdleStopSec=: its own, else the host's (config.idle_stop); USEC_INFINITY: never */
usec_t sched_engine_idle_stop(const Sched *s, size_t i);

/* A switch away from the running engine is coming: one is starting, or a request waits for another
 * engine (an alias sends nobody else there meanwhile). */
bool sched_switch_pending(const Sched *s);

/* Requests ahead of r: those in flight, and those waiting that arrived before it (all of them when r has
 * been answered or removed). */
unsigned sched_ahead(const Sched *s, const SchedRequest *r);
/* sched-tree.c, for sched.c alone: the waiting requests again, in a tree by arrival (seq) with subtree
 * sizes, so that sched_ahead() walks none of them (issue 26). */
void sched_tree_insert(Sched *s, SchedRequest *r);
void sched_tree_remove(Sched *s, SchedRequest *r);
/* How many waiting requests arrived before seq. */
unsigned sched_tree_count_before(const Sched *s, uint64_t seq);

/* The waiting request that arrived first, or NULL: the tree's leftmost */
const SchedRequest *sched_first_waiting(const Sched *s);
