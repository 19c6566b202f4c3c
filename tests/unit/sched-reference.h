/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The scheduler before issue 26 (sched-reference.c): the calls of modelgated/sched.h, each prefixed ref_,
 * on types of its own. */

#include "modelgated/sched/sched.h"

typedef struct RefRequest {
        LIST_FIELDS(struct RefRequest, requests);
        size_t engine;
        usec_t arrived;
        SchedRequestState state;
        int fail_status;
        bool background; /* modelgate's own (a warm-up): not traffic for the idle clock */
} RefRequest;

typedef struct RefAction {
        SchedActionType type;
        RefRequest *req;
        ssize_t engine;
        int status;
        usec_t idle_for;
        bool requested; /* SCHED_STOP: asked for (ref_sched_request_stop), not the idle rule's */
} RefAction;

typedef struct RefSched {
        SchedConfig config;
        size_t n_engines;
        RefRequest *requests; /* waiting, in flight and failed, in arrival order */
        unsigned n_waiting, n_in_flight;

        ssize_t running;     /* the engine that is up, -1 for none */
        usec_t up_at;        /* when it came up */
        usec_t last_done;    /* when the last in-flight request ended, for the idle clock */
        ssize_t starting;    /* a START in progress (or an engine being adopted), -1 for none */
        bool stopping;       /* a STOP in progress */
        bool down;           /* the host is down: no switches, no idle stop */
        ssize_t wait_logged; /* the pending switch whose wait was logged */
        bool stop_requested; /* StopEngine(): stop the running engine once nothing is in flight or waiting */
        bool *abandoned;     /* per engine: an ABANDON to report */
} RefSched;

int ref_sched_init(RefSched *s, const SchedConfig *config, size_t n_engines);
void ref_sched_done(RefSched *s);
bool ref_sched_add(RefSched *s, usec_t now, RefRequest *r, size_t engine);
void ref_sched_remove(RefSched *s, usec_t now, RefRequest *r);
void ref_sched_engine_up(RefSched *s, usec_t now, size_t engine);
void ref_sched_engine_starting(RefSched *s, size_t engine);
void ref_sched_engine_stopping(RefSched *s);
void ref_sched_engine_down(RefSched *s, usec_t now);
void ref_sched_switch_failed(RefSched *s, usec_t now, int status, ssize_t still_running);
void ref_sched_host_down(RefSched *s, bool down);
void ref_sched_request_stop(RefSched *s);
bool ref_sched_next(RefSched *s, usec_t now, RefAction *ret);
usec_t ref_sched_next_timer(const RefSched *s, usec_t now);
usec_t ref_sched_hold_down_until(const RefSched *s, usec_t now);
usec_t ref_sched_idle_stop_at(const RefSched *s);
bool ref_sched_switch_pending(const RefSched *s);
unsigned ref_sched_ahead(const RefSched *s, const RefRequest *r);
