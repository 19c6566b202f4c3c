/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The switch scheduler as it was before issue 26, kept as the tests' model of the rules: every call walks
 * all the requests, which makes each decision easy to read off the rules (rule:switch-waits, rule:hold-down,
 * rule:no-starvation, rule:arrival-order, rule:wait-budget, rule:abandon-switch and rule:idle-stop).
 * test-sched drives it and modelgated/sched.c with the same random events and asserts the same answers. */

#include <assert.h>
#include <stdlib.h>

#include "shared/macro.h"
#include "unit/sched-reference.h"

int ref_sched_init(RefSched *s, const SchedConfig *config, size_t n_engines) {
        *s = (RefSched){
                .config = *config,
                .n_engines = n_engines,
                .running = -1,
                .starting = -1,
                .wait_logged = -1,
        };
        s->abandoned = calloc(n_engines ?: 1, sizeof(bool));
        return s->abandoned ? 0 : -ENOMEM;
}

void ref_sched_done(RefSched *s) {
        while (s->requests) {
                RefRequest *r = s->requests;
                LIST_REMOVE(requests, s->requests, r);
        }
        free(s->abandoned);
        s->abandoned = NULL;
}

static bool in_hold_down(const RefSched *s, usec_t now) {
        return s->running >= 0 && s->config.hold_down != 0 &&
               (s->config.hold_down == USEC_INFINITY || now < s->up_at + s->config.hold_down);
}

/* The first waiting request for an engine other than the running one: the next switch
 * (rule:arrival-order). */
static RefRequest *pending_switch(const RefSched *s) {
        LIST_FOREACH (requests, r, s->requests)
                if (r->state == SCHED_WAITING && (ssize_t)r->engine != s->running)
                        return r;
        return NULL;
}

static bool has_waiting_for(const RefSched *s, size_t engine) {
        LIST_FOREACH (requests, r, s->requests)
                if (r->state == SCHED_WAITING && r->engine == engine)
                        return true;
        return false;
}

/* Rule 3: with an engine up, a request for it goes at once unless a switch is pending that it would
 * jump; inside the hold-down the fresh engine serves everyone who came for it, and whoever waited for
 * it to come up is served whatever the hold-down. */
static bool may_go(const RefSched *s, usec_t now, const RefRequest *r) {
        const RefRequest *p;

        if (s->running < 0 || (ssize_t)r->engine != s->running || s->starting >= 0 || s->stopping || s->down)
                return false;
        if (in_hold_down(s, now))
                return true;
        if (r->arrived < s->up_at)
                return true;
        p = pending_switch(s);
        return !p || r->arrived < p->arrived;
}

bool ref_sched_add(RefSched *s, usec_t now, RefRequest *r, size_t engine) {
        assert(engine < s->n_engines);

        *r = (RefRequest){.engine = engine, .arrived = now, .state = SCHED_WAITING};
        LIST_APPEND(requests, s->requests, r);
        s->abandoned[engine] = false; /* someone wants it again */
        if (may_go(s, now, r)) {
                r->state = SCHED_IN_FLIGHT;
                s->n_in_flight++;
                return true;
        }
        s->n_waiting++;
        return false;
}

void ref_sched_remove(RefSched *s, usec_t now, RefRequest *r) {
        switch (r->state) {
        case SCHED_IN_FLIGHT:
                assert(s->n_in_flight > 0);
                if (--s->n_in_flight == 0 && !r->background)
                        s->last_done = now;
                break;
        case SCHED_WAITING:
                assert(s->n_waiting > 0);
                s->n_waiting--;
                break;
        case SCHED_FAILED:
                break;
        }
        LIST_REMOVE(requests, s->requests, r);
        /* rule:abandon-switch: the last client of a switch that has not started went away */
        if (r->state == SCHED_WAITING && (ssize_t)r->engine != s->running &&
            (ssize_t)r->engine != s->starting && !has_waiting_for(s, r->engine))
                s->abandoned[r->engine] = true;
        r->state = SCHED_FAILED;
}

void ref_sched_engine_up(RefSched *s, usec_t now, size_t engine) {
        assert(engine < s->n_engines);
        s->running = (ssize_t)engine;
        s->up_at = s->last_done = now;
        s->starting = -1;
        s->stop_requested = false;
        s->stopping = false;
        s->wait_logged = -1;
}

void ref_sched_engine_starting(RefSched *s, size_t engine) {
        assert(engine < s->n_engines);
        s->running = -1;
        s->starting = (ssize_t)engine;
}

void ref_sched_engine_stopping(RefSched *s) {
        s->running = -1;
        s->stopping = true;
}

void ref_sched_engine_down(RefSched *s, usec_t now) {
        s->running = -1;
        s->stop_requested = false;
        s->starting = -1;
        s->stopping = false;
        s->wait_logged = -1;
}

static void fail_waiting(RefSched *s, ssize_t engine, int status) {
        LIST_FOREACH (requests, r, s->requests)
                if (r->state == SCHED_WAITING && (engine < 0 || (ssize_t)r->engine == engine)) {
                        r->state = SCHED_FAILED;
                        r->fail_status = status;
                        s->n_waiting--;
                }
}

void ref_sched_switch_failed(RefSched *s, usec_t now, int status, ssize_t still_running) {
        ssize_t target = s->starting;

        if (target >= 0)
                fail_waiting(s, target, status);
        s->starting = -1;
        s->wait_logged = -1;
        if (still_running < 0)
                s->running = -1;
}

void ref_sched_host_down(RefSched *s, bool down) {
        s->down = down;
        if (!down)
                return;
        fail_waiting(s, -1, 503);
        s->running = s->starting = -1;
        s->stopping = false;
        s->stop_requested = false;
        s->wait_logged = -1;
}

static usec_t deadline_of(const RefSched *s, const RefRequest *r) {
        if (s->config.wait_budget == USEC_INFINITY)
                return USEC_INFINITY;
        return r->arrived + s->config.wait_budget;
}

static usec_t idle_stop_at(const RefSched *s) {
        if (s->running < 0 || s->down || s->starting >= 0 || s->stopping || s->n_waiting > 0 ||
            s->n_in_flight > 0)
                return USEC_INFINITY;
        if (s->stop_requested)
                return 0;
        if (s->config.idle_stop == USEC_INFINITY)
                return USEC_INFINITY;
        return MAX(s->up_at, s->last_done) + s->config.idle_stop;
}

usec_t ref_sched_idle_stop_at(const RefSched *s) {
        return idle_stop_at(s);
}

usec_t ref_sched_hold_down_until(const RefSched *s, usec_t now) {
        if (!in_hold_down(s, now) || s->config.hold_down == USEC_INFINITY)
                return in_hold_down(s, now) ? USEC_INFINITY : 0;
        return s->up_at + s->config.hold_down;
}

void ref_sched_request_stop(RefSched *s) {
        if (s->running >= 0 && s->starting < 0)
                s->stop_requested = true;
}

/* 1. answers already decided: a failed switch, a host gone down */
static bool next_decided_failure(RefSched *s, RefAction *ret) {
        LIST_FOREACH (requests, r, s->requests)
                if (r->state == SCHED_FAILED) {
                        LIST_REMOVE(requests, s->requests, r);
                        *ret = (RefAction){.type = SCHED_FAIL,
                                           .req = r,
                                           .engine = (ssize_t)r->engine,
                                           .status = r->fail_status};
                        return true;
                }
        return false;
}

/* 2. rule:abandon-switch: one abandoned switch to report */
static bool next_abandoned(RefSched *s, RefAction *ret) {
        for (size_t i = 0; i < s->n_engines; i++)
                if (s->abandoned[i]) {
                        s->abandoned[i] = false;
                        *ret = (RefAction){.type = SCHED_ABANDON, .engine = (ssize_t)i};
                        return true;
                }
        return false;
}

/* 3. rule:wait-budget: a wait that spent its budget is answered 504 */
static bool next_expired(RefSched *s, usec_t now, RefAction *ret) {
        LIST_FOREACH (requests, r, s->requests)
                if (r->state == SCHED_WAITING && deadline_of(s, r) <= now) {
                        LIST_REMOVE(requests, s->requests, r);
                        s->n_waiting--;
                        r->state = SCHED_FAILED;
                        *ret = (RefAction){
                                .type = SCHED_FAIL, .req = r, .engine = (ssize_t)r->engine, .status = 504};
                        /* a switch nobody waits for any more is not started (rule:abandon-switch) */
                        if ((ssize_t)r->engine != s->running && (ssize_t)r->engine != s->starting &&
                            !has_waiting_for(s, r->engine))
                                s->abandoned[r->engine] = true;
                        return true;
                }
        return false;
}

/* 4. rule:hold-down, rule:no-starvation: a waiting request the running engine may serve now */
static bool next_go(RefSched *s, usec_t now, RefAction *ret) {
        LIST_FOREACH (requests, r, s->requests)
                if (r->state == SCHED_WAITING && may_go(s, now, r)) {
                        r->state = SCHED_IN_FLIGHT;
                        s->n_waiting--;
                        s->n_in_flight++;
                        *ret = (RefAction){.type = SCHED_GO, .req = r, .engine = (ssize_t)r->engine};
                        return true;
                }
        return false;
}

/* 4. rule:switch-waits, rule:hold-down, rule:arrival-order: the pending switch p starts once nothing is in
 * flight and the hold-down is over; until then its wait is logged, once */
static bool next_switch(RefSched *s, usec_t now, RefRequest *p, RefAction *ret) {
        if (s->n_in_flight == 0 && !in_hold_down(s, now)) {
                s->starting = (ssize_t)p->engine;
                s->wait_logged = -1;
                *ret = (RefAction){.type = SCHED_START, .req = p, .engine = (ssize_t)p->engine};
                return true;
        }
        if (s->wait_logged != (ssize_t)p->engine) {
                s->wait_logged = (ssize_t)p->engine;
                *ret = (RefAction){.type = SCHED_WAIT, .req = p, .engine = (ssize_t)p->engine};
                return true;
        }
        return false;
}

/* 4. rule:idle-stop: the running engine stops once idle long enough, or at once when a stop was asked for */
static bool next_idle_stop(RefSched *s, usec_t now, RefAction *ret) {
        if (idle_stop_at(s) > now)
                return false;
        *ret = (RefAction){.type = SCHED_STOP,
                           .engine = s->running,
                           .idle_for = now - MAX(s->up_at, s->last_done),
                           .requested = s->stop_requested};
        s->stopping = true;
        s->stop_requested = false;
        return true;
}

/* 4. with an engine up; a pending switch rules out the idle stop */
static bool next_with_engine_up(RefSched *s, usec_t now, RefAction *ret) {
        RefRequest *p;

        if (next_go(s, now, ret))
                return true;
        p = pending_switch(s);
        if (p)
                return next_switch(s, now, p, ret);
        return next_idle_stop(s, now, ret);
}

/* 5. nothing is up: the first waiting request's engine, once what was in flight has ended */
static bool next_with_engine_down(RefSched *s, RefAction *ret) {
        LIST_FOREACH (requests, r, s->requests)
                if (r->state == SCHED_WAITING) {
                        if (s->n_in_flight > 0)
                                return false;
                        s->starting = (ssize_t)r->engine;
                        *ret = (RefAction){.type = SCHED_START, .req = r, .engine = (ssize_t)r->engine};
                        return true;
                }
        return false;
}

bool ref_sched_next(RefSched *s, usec_t now, RefAction *ret) {
        *ret = (RefAction){.type = SCHED_NONE, .engine = -1};

        if (next_decided_failure(s, ret) || next_abandoned(s, ret) || next_expired(s, now, ret))
                return true;
        if (s->down || s->starting >= 0 || s->stopping)
                return false;
        if (s->running >= 0)
                return next_with_engine_up(s, now, ret);
        return next_with_engine_down(s, ret);
}

usec_t ref_sched_next_timer(const RefSched *s, usec_t now) {
        usec_t t = USEC_INFINITY;

        LIST_FOREACH (requests, r, s->requests)
                if (r->state == SCHED_WAITING)
                        t = MIN(t, deadline_of(s, r));
        if (!s->down && s->starting < 0 && !s->stopping && s->running >= 0) {
                if (in_hold_down(s, now) && pending_switch(s) && s->config.hold_down != USEC_INFINITY)
                        t = MIN(t, s->up_at + s->config.hold_down);
                t = MIN(t, idle_stop_at(s));
        }
        return t;
}

unsigned ref_sched_ahead(const RefSched *s, const RefRequest *r) {
        unsigned n = s->n_in_flight;

        LIST_FOREACH (requests, x, s->requests) {
                if (x == r)
                        break;
                if (x->state == SCHED_WAITING)
                        n++;
        }
        return n;
}

bool ref_sched_switch_pending(const RefSched *s) {
        if (s->running < 0)
                return false;
        if (s->starting >= 0 && s->starting != s->running)
                return true;
        LIST_FOREACH (requests, x, s->requests)
                if (x->state == SCHED_WAITING && (ssize_t)x->engine != s->running)
                        return true;
        return false;
}
