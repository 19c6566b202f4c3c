/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The scheduler's decisions, in the order sched_next() takes them:
 *   1. answers already decided (a failed switch, a host gone down)
 *   2. abandoned switches to report (rule 6)
 *   3. waits that spent their budget: 504 (rule 5)
 *   nothing more while a switch or an idle stop is in progress
 *   4. with an engine up: release the requests for it, unless a switch is
 *      pending and the hold-down is over (rules 2, 3); start the first
 *      pending switch, in arrival order, once nothing is in flight and the
 *      hold-down is over (rules 1, 2, 4); else stop it when idle (rule 9)
 *   5. with no engine up: start the engine of the first waiting request
 * Everything is O(requests) per call; a host has a few hundred at most. */

#include <assert.h>
#include <stdlib.h>

#include "modelgated/sched.h"
#include "shared/macro.h"

int sched_init(Sched *s, const SchedConfig *config, size_t n_engines) {
        *s = (Sched){
                .config = *config,
                .n_engines = n_engines,
                .running = -1,
                .starting = -1,
                .wait_logged = -1,
        };
        s->abandoned = calloc(n_engines ?: 1, sizeof(bool));
        return s->abandoned ? 0 : -ENOMEM;
}

void sched_done(Sched *s) {
        while (s->requests) {
                SchedRequest *r = s->requests;
                LIST_REMOVE(requests, s->requests, r);
        }
        free(s->abandoned);
        s->abandoned = NULL;
}

static bool in_hold_down(const Sched *s, usec_t now) {
        return s->running >= 0 && s->config.hold_down != 0 &&
               (s->config.hold_down == USEC_INFINITY || now < s->up_at + s->config.hold_down);
}

/* The first waiting request for an engine other than the running one: the next switch (rule 4). */
static SchedRequest *pending_switch(const Sched *s) {
        LIST_FOREACH (requests, r, s->requests)
                if (r->state == SCHED_WAITING && (ssize_t)r->engine != s->running)
                        return r;
        return NULL;
}

static bool has_waiting_for(const Sched *s, size_t engine) {
        LIST_FOREACH (requests, r, s->requests)
                if (r->state == SCHED_WAITING && r->engine == engine)
                        return true;
        return false;
}

/* Rule 3: with an engine up, a request for it goes at once unless a switch is pending that it would
 * jump; inside the hold-down the fresh engine serves everyone who came for it, and whoever waited for
 * it to come up is served whatever the hold-down. */
static bool may_go(const Sched *s, usec_t now, const SchedRequest *r) {
        const SchedRequest *p;

        if (s->running < 0 || (ssize_t)r->engine != s->running || s->starting >= 0 || s->stopping || s->down)
                return false;
        if (in_hold_down(s, now))
                return true;
        if (r->arrived < s->up_at)
                return true;
        p = pending_switch(s);
        return !p || r->arrived < p->arrived;
}

bool sched_add(Sched *s, usec_t now, SchedRequest *r, size_t engine) {
        assert(engine < s->n_engines);

        *r = (SchedRequest){.engine = engine, .arrived = now, .state = SCHED_WAITING};
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

void sched_remove(Sched *s, usec_t now, SchedRequest *r) {
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
        /* rule 6: the last client of a switch that has not started went away */
        if (r->state == SCHED_WAITING && (ssize_t)r->engine != s->running &&
            (ssize_t)r->engine != s->starting && !has_waiting_for(s, r->engine))
                s->abandoned[r->engine] = true;
        r->state = SCHED_FAILED;
}

void sched_engine_up(Sched *s, usec_t now, size_t engine) {
        assert(engine < s->n_engines);
        s->running = (ssize_t)engine;
        s->up_at = s->last_done = now;
        s->starting = -1;
        s->stop_requested = false;
        s->stopping = false;
        s->wait_logged = -1;
}

void sched_engine_starting(Sched *s, size_t engine) {
        assert(engine < s->n_engines);
        s->running = -1;
        s->starting = (ssize_t)engine;
}

void sched_engine_stopping(Sched *s) {
        s->running = -1;
        s->stopping = true;
}

void sched_engine_down(Sched *s, usec_t now) {
        s->running = -1;
        s->stop_requested = false;
        s->starting = -1;
        s->stopping = false;
        s->wait_logged = -1;
}

static void fail_waiting(Sched *s, ssize_t engine, int status) {
        LIST_FOREACH (requests, r, s->requests)
                if (r->state == SCHED_WAITING && (engine < 0 || (ssize_t)r->engine == engine)) {
                        r->state = SCHED_FAILED;
                        r->fail_status = status;
                        s->n_waiting--;
                }
}

void sched_switch_failed(Sched *s, usec_t now, int status, ssize_t still_running) {
        ssize_t target = s->starting;

        if (target >= 0)
                fail_waiting(s, target, status);
        s->starting = -1;
        s->wait_logged = -1;
        if (still_running < 0)
                s->running = -1;
}

void sched_host_down(Sched *s, bool down) {
        s->down = down;
        if (!down)
                return;
        fail_waiting(s, -1, 503);
        s->running = s->starting = -1;
        s->stopping = false;
        s->stop_requested = false;
        s->wait_logged = -1;
}

static usec_t deadline_of(const Sched *s, const SchedRequest *r) {
        if (s->config.wait_budget == USEC_INFINITY)
                return USEC_INFINITY;
        return r->arrived + s->config.wait_budget;
}

static usec_t idle_stop_at(const Sched *s) {
        if (s->running < 0 || s->down || s->starting >= 0 || s->stopping || s->n_waiting > 0 ||
            s->n_in_flight > 0)
                return USEC_INFINITY;
        if (s->stop_requested)
                return 0;
        if (s->config.idle_stop == USEC_INFINITY)
                return USEC_INFINITY;
        return MAX(s->up_at, s->last_done) + s->config.idle_stop;
}

usec_t sched_idle_stop_at(const Sched *s) {
        return idle_stop_at(s);
}

usec_t sched_hold_down_until(const Sched *s, usec_t now) {
        if (!in_hold_down(s, now) || s->config.hold_down == USEC_INFINITY)
                return in_hold_down(s, now) ? USEC_INFINITY : 0;
        return s->up_at + s->config.hold_down;
}

void sched_request_stop(Sched *s) {
        if (s->running >= 0 && s->starting < 0)
                s->stop_requested = true;
}

/* 1. answers already decided: a failed switch, a host gone down */
static bool next_decided_failure(Sched *s, SchedAction *ret) {
        LIST_FOREACH (requests, r, s->requests)
                if (r->state == SCHED_FAILED) {
                        LIST_REMOVE(requests, s->requests, r);
                        *ret = (SchedAction){.type = SCHED_FAIL,
                                             .req = r,
                                             .engine = (ssize_t)r->engine,
                                             .status = r->fail_status};
                        return true;
                }
        return false;
}

/* 2. rule 6: one abandoned switch to report */
static bool next_abandoned(Sched *s, SchedAction *ret) {
        for (size_t i = 0; i < s->n_engines; i++)
                if (s->abandoned[i]) {
                        s->abandoned[i] = false;
                        *ret = (SchedAction){.type = SCHED_ABANDON, .engine = (ssize_t)i};
                        return true;
                }
        return false;
}

/* 3. rule 5: a wait that spent its budget is answered 504 */
static bool next_expired(Sched *s, usec_t now, SchedAction *ret) {
        LIST_FOREACH (requests, r, s->requests)
                if (r->state == SCHED_WAITING && deadline_of(s, r) <= now) {
                        LIST_REMOVE(requests, s->requests, r);
                        s->n_waiting--;
                        r->state = SCHED_FAILED;
                        *ret = (SchedAction){
                                .type = SCHED_FAIL, .req = r, .engine = (ssize_t)r->engine, .status = 504};
                        /* a switch nobody waits for any more is not started (rule 6) */
                        if ((ssize_t)r->engine != s->running && (ssize_t)r->engine != s->starting &&
                            !has_waiting_for(s, r->engine))
                                s->abandoned[r->engine] = true;
                        return true;
                }
        return false;
}

/* 4. rules 2, 3: a waiting request the running engine may serve now */
static bool next_go(Sched *s, usec_t now, SchedAction *ret) {
        LIST_FOREACH (requests, r, s->requests)
                if (r->state == SCHED_WAITING && may_go(s, now, r)) {
                        r->state = SCHED_IN_FLIGHT;
                        s->n_waiting--;
                        s->n_in_flight++;
                        *ret = (SchedAction){.type = SCHED_GO, .req = r, .engine = (ssize_t)r->engine};
                        return true;
                }
        return false;
}

/* 4. rules 1, 2, 4: the pending switch p starts once nothing is in flight and the hold-down is over;
 * until then its wait is logged, once */
static bool next_switch(Sched *s, usec_t now, SchedRequest *p, SchedAction *ret) {
        if (s->n_in_flight == 0 && !in_hold_down(s, now)) {
                s->starting = (ssize_t)p->engine;
                s->wait_logged = -1;
                *ret = (SchedAction){.type = SCHED_START, .req = p, .engine = (ssize_t)p->engine};
                return true;
        }
        if (s->wait_logged != (ssize_t)p->engine) {
                s->wait_logged = (ssize_t)p->engine;
                *ret = (SchedAction){.type = SCHED_WAIT, .req = p, .engine = (ssize_t)p->engine};
                return true;
        }
        return false;
}

/* 4. rule 9: the running engine stops once idle long enough, or at once when a stop was asked for */
static bool next_idle_stop(Sched *s, usec_t now, SchedAction *ret) {
        if (idle_stop_at(s) > now)
                return false;
        *ret = (SchedAction){.type = SCHED_STOP,
                             .engine = s->running,
                             .idle_for = now - MAX(s->up_at, s->last_done),
                             .requested = s->stop_requested};
        s->stopping = true;
        s->stop_requested = false;
        return true;
}

/* 4. with an engine up; a pending switch rules out the idle stop */
static bool next_with_engine_up(Sched *s, usec_t now, SchedAction *ret) {
        SchedRequest *p;

        if (next_go(s, now, ret))
                return true;
        p = pending_switch(s);
        if (p)
                return next_switch(s, now, p, ret);
        return next_idle_stop(s, now, ret);
}

/* 5. nothing is up: the first waiting request's engine, once what was in flight has ended */
static bool next_with_engine_down(Sched *s, SchedAction *ret) {
        LIST_FOREACH (requests, r, s->requests)
                if (r->state == SCHED_WAITING) {
                        if (s->n_in_flight > 0)
                                return false;
                        s->starting = (ssize_t)r->engine;
                        *ret = (SchedAction){.type = SCHED_START, .req = r, .engine = (ssize_t)r->engine};
                        return true;
                }
        return false;
}

bool sched_next(Sched *s, usec_t now, SchedAction *ret) {
        *ret = (SchedAction){.type = SCHED_NONE, .engine = -1};

        if (next_decided_failure(s, ret) || next_abandoned(s, ret) || next_expired(s, now, ret))
                return true;
        if (s->down || s->starting >= 0 || s->stopping)
                return false;
        if (s->running >= 0)
                return next_with_engine_up(s, now, ret);
        return next_with_engine_down(s, ret);
}

usec_t sched_next_timer(const Sched *s, usec_t now) {
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

unsigned sched_ahead(const Sched *s, const SchedRequest *r) {
        unsigned n = s->n_in_flight;

        LIST_FOREACH (requests, x, s->requests) {
                if (x == r)
                        break;
                if (x->state == SCHED_WAITING)
                        n++;
        }
        return n;
}

bool sched_switch_pending(const Sched *s) {
        if (s->running < 0)
                return false;
        if (s->starting >= 0 && s->starting != s->running)
                return true;
        LIST_FOREACH (requests, x, s->requests)
                if (x->state == SCHED_WAITING && (ssize_t)x->engine != s->running)
                        return true;
        return false;
}
