/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The scheduler's decisions, in the order sched_next() takes them:
 *   1. answers already decided (a failed switch, a host gone down)
 *   2. abandoned switches to report (rule:abandon-switch), failed-start holds that are over
 *      (rule:failed-start-hold)
 *   3. waits that spent their budget: 504 (rule:wait-budget)
 *   nothing more while a switch or an idle stop is in progress
 *   4. with an engine up: release the requests for it, unless a switch is
 *      pending and the hold-down is over (rule:hold-down, rule:no-starvation); start the first
 *      pending switch, in arrival order, once nothing is in flight and the
 *      hold-down is over (rule:switch-waits, rule:hold-down, rule:arrival-order);
 *      else stop it when idle (rule:idle-stop)
 *   5. with no engine up: start the engine of the first waiting request
 * A host can have 10 000 clients waiting, each with a keepalive comment that
 * asks how many are ahead, so no call walks the requests (issue 26): each
 * costs O(engines) plus O(log waiting) on average. Every request waits with
 * the same budget, so the oldest waiting one, the head of the queue in
 * arrival order, is the first to spend it; each engine's first waiting
 * request heads its own queue, and the pending switch is the oldest of those
 * heads; "ahead" is counted in a tree of the waiting requests by arrival. */

#include <assert.h>
#include <stdlib.h>

#include "modelgated/sched/sched.h"
#include "shared/macro.h"

uint64_t sched_steps;

/* Queues with a head and a tail, after list.h; name is the link. Removing a request that is not in the
 * queue (its links NULL) changes nothing. */
#define QUEUE_APPEND(name, q, item)                                                                         \
        do {                                                                                                \
                SchedQueue *_q = (q);                                                                       \
                SchedRequest *_item = (item);                                                               \
                _item->name##_next = NULL;                                                                  \
                if ((_item->name##_prev = _q->tail))                                                        \
                        _q->tail->name##_next = _item;                                                      \
                else                                                                                        \
                        _q->head = _item;                                                                   \
                _q->tail = _item;                                                                           \
        } while (0)

/* item goes before at, or last when at is NULL */
#define QUEUE_INSERT_BEFORE(name, q, at, item)                                                              \
        do {                                                                                                \
                SchedQueue *_qi = (q);                                                                      \
                SchedRequest *_at = (at), *_new = (item);                                                   \
                if (!_at)                                                                                   \
                        QUEUE_APPEND(name, _qi, _new);                                                      \
                else {                                                                                      \
                        _new->name##_next = _at;                                                            \
                        if ((_new->name##_prev = _at->name##_prev))                                         \
                                _at->name##_prev->name##_next = _new;                                       \
                        else                                                                                \
                                _qi->head = _new;                                                           \
                        _at->name##_prev = _new;                                                            \
                }                                                                                           \
        } while (0)

#define QUEUE_REMOVE(name, q, item)                                                                         \
        do {                                                                                                \
                SchedQueue *_q = (q);                                                                       \
                SchedRequest *_item = (item);                                                               \
                if (_item->name##_next)                                                                     \
                        _item->name##_next->name##_prev = _item->name##_prev;                               \
                else if (_q->tail == _item)                                                                 \
                        _q->tail = _item->name##_prev;                                                      \
                if (_item->name##_prev)                                                                     \
                        _item->name##_prev->name##_next = _item->name##_next;                               \
                else if (_q->head == _item)                                                                 \
                        _q->head = _item->name##_next;                                                      \
                _item->name##_next = _item->name##_prev = NULL;                                             \
        } while (0)

/* r is in q, one of the queues by state */
static bool queue_has(const SchedQueue *q, const SchedRequest *r) {
        return r->requests_prev || q->head == r;
}

int sched_init(Sched *s, const SchedConfig *config, size_t n_engines) {
        assert(s);
        *s = (Sched){
                .config = *config,
                .n_engines = n_engines,
                .running = -1,
                .starting = -1,
                .wait_logged = -1,
        };
        s->engines = calloc(n_engines ?: 1, sizeof(SchedEngine));
        return s->engines ? 0 : -ENOMEM;
}

void sched_done(Sched *s) {
        SchedQueue *queues[] = {&s->waiting, &s->in_flight, &s->failed};

        for (size_t i = 0; i < ELEMENTSOF(queues); i++)
                while (queues[i]->head)
                        QUEUE_REMOVE(requests, queues[i], queues[i]->head);
        s->tree = NULL;
        free(s->engines);
        s->engines = NULL;
}

static void waiting_add(Sched *s, SchedRequest *r) {
        SchedEngine *e = &s->engines[r->engine];

        QUEUE_APPEND(requests, &s->waiting, r);
        QUEUE_APPEND(queue, &e->waiting, r);
        e->n_waiting++;
        s->n_waiting++;
        sched_tree_insert(s, r);
}

/* r waits no more; its state is the caller's to set */
static void waiting_drop(Sched *s, SchedRequest *r) {
        SchedEngine *e = &s->engines[r->engine];

        assert(s->n_waiting > 0 && e->n_waiting > 0);
        QUEUE_REMOVE(requests, &s->waiting, r);
        QUEUE_REMOVE(queue, &e->waiting, r);
        e->n_waiting--;
        s->n_waiting--;
        sched_tree_remove(s, r);
}

static void in_flight_add(Sched *s, SchedRequest *r) {
        r->state = SCHED_IN_FLIGHT;
        QUEUE_APPEND(requests, &s->in_flight, r);
        s->n_in_flight++;
}

static bool in_hold_down(const Sched *s, usec_t now) {
        return s->running >= 0 && s->config.hold_down != 0 &&
               (s->config.hold_down == USEC_INFINITY || now < s->up_at + s->config.hold_down);
}

/* The first waiting request for an engine other than the running one: the next switch (rule:arrival-order).
 * The oldest of the other engines' first waiting requests: however many wait for an engine, a resent
 * request among them, it is one switch (rule:resend-joins). */
static SchedRequest *pending_switch(const Sched *s) {
        SchedRequest *p = s->waiting.head;

        if (!p || (ssize_t)p->engine != s->running)
                return p;
        p = NULL;
        for (size_t i = 0; i < s->n_engines; i++) {
                SchedRequest *h = s->engines[i].waiting.head;

                sched_steps++;
                if (h && (ssize_t)i != s->running && (!p || h->seq < p->seq))
                        p = h;
        }
        return p;
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
        if (s->foreign_since > 0 && r->arrived >= s->foreign_since)
                return false;
        p = pending_switch(s);
        return !p || r->arrived < p->arrived;
}

bool sched_add(Sched *s, usec_t now, SchedRequest *r, size_t engine) {
        assert(s);
        assert(engine < s->n_engines);

        /* the queues are in the budgets' order only if no arrival is earlier than the one before */
        s->last_arrived = MAX(now, s->last_arrived);
        *r = (SchedRequest){
                .engine = engine, .arrived = s->last_arrived, .seq = s->next_seq++, .state = SCHED_WAITING};
        s->engines[engine].abandoned = false; /* someone wants it again */
        if (may_go(s, now, r)) {
                in_flight_add(s, r);
                return true;
        }
        waiting_add(s, r);
        return false;
}

bool sched_join(Sched *s, usec_t now, SchedRequest *r, size_t engine) {
        assert(s);
        assert(engine < s->n_engines);

        if ((ssize_t)engine != s->running || s->starting >= 0 || s->stopping || s->down)
                return false;
        s->last_arrived = MAX(now, s->last_arrived);
        *r = (SchedRequest){
                .engine = engine, .arrived = s->last_arrived, .seq = s->next_seq++, .state = SCHED_WAITING};
        in_flight_add(s, r);
        return true;
}

void sched_remove(Sched *s, usec_t now, SchedRequest *r) {
        assert(s);
        switch (r->state) {
        case SCHED_IN_FLIGHT:
                assert(s->n_in_flight > 0);
                QUEUE_REMOVE(requests, &s->in_flight, r);
                if (--s->n_in_flight == 0 && !r->background)
                        s->last_done = now;
                break;
        case SCHED_WAITING:
                waiting_drop(s, r);
                /* rule:abandon-switch: the last client of a switch that has not started went away */
                if ((ssize_t)r->engine != s->running && (ssize_t)r->engine != s->starting &&
                    s->engines[r->engine].n_waiting == 0)
                        s->engines[r->engine].abandoned = true;
                break;
        case SCHED_FAILED: /* in the failed queue, or answered already */
                QUEUE_REMOVE(requests, &s->failed, r);
                break;
        }
        r->state = SCHED_FAILED;
}

void sched_engine_up(Sched *s, usec_t now, size_t engine) {
        assert(s);
        assert(engine < s->n_engines);
        s->engines[engine].held = false; /* it runs after all: nothing to hold */
        s->running = (ssize_t)engine;
        s->up_at = s->last_done = now;
        s->starting = -1;
        s->stop_requested = false;
        s->stopping = false;
        s->wait_logged = -1;
}

void sched_engine_starting(Sched *s, size_t engine) {
        assert(s);
        assert(engine < s->n_engines);
        s->running = -1;
        s->starting = (ssize_t)engine;
}

void sched_engine_stopping(Sched *s) {
        assert(s);
        s->running = -1;
        s->stopping = true;
}

void sched_engine_down(Sched *s, usec_t now) {
        assert(s);
        s->running = -1;
        s->stop_requested = false;
        s->starting = -1;
        s->stopping = false;
        s->wait_logged = -1;
}

/* The waiting requests for engine (or all of them) fail: into the failed queue, which stays in arrival
 * order, as both are. */
static void fail_waiting(Sched *s, ssize_t engine, int status) {
        SchedQueue *from = engine < 0 ? &s->waiting : &s->engines[engine].waiting;
        SchedRequest *at = s->failed.head;

        while (from->head) {
                SchedRequest *r = from->head;

                sched_steps++;
                waiting_drop(s, r);
                r->state = SCHED_FAILED;
                r->fail_status = status;
                while (at && at->seq < r->seq) {
                        sched_steps++;
                        at = at->requests_next;
                }
                QUEUE_INSERT_BEFORE(requests, &s->failed, at, r);
        }
}

/* The waiting requests for every engine but keep fail */
static void fail_waiting_others(Sched *s, ssize_t keep, int status) {
        for (size_t i = 0; i < s->n_engines; i++)
                if ((ssize_t)i != keep)
                        fail_waiting(s, (ssize_t)i, status);
}

void sched_switch_failed(Sched *s, usec_t now, int status, ssize_t still_running) {
        assert(s);
        ssize_t target = s->starting;

        if (target >= 0)
                fail_waiting(s, target, status);
        s->starting = -1;
        s->wait_logged = -1;
        if (still_running < 0)
                s->running = -1;
}

static usec_t held_until(const Sched *s, const SchedEngine *e) {
        if (!e->held || s->config.failed_start_hold == 0)
                return 0;
        if (s->config.failed_start_hold == USEC_INFINITY)
                return USEC_INFINITY;
        return e->failed_at + s->config.failed_start_hold;
}

void sched_start_failed(Sched *s, usec_t now, size_t engine) {
        assert(s);
        assert(engine < s->n_engines);
        if (s->config.failed_start_hold == 0)
                return;
        s->engines[engine].held = true;
        s->engines[engine].failed_at = now;
}

usec_t sched_held_until(const Sched *s, usec_t now, size_t engine) {
        assert(s);
        assert(engine < s->n_engines);
        usec_t t = held_until(s, &s->engines[engine]);

        return t > now ? t : 0;
}

bool sched_unhold(Sched *s, usec_t now, size_t engine) {
        assert(s);
        assert(engine < s->n_engines);
        bool was = sched_held_until(s, now, engine) > 0;

        s->engines[engine].held = false;
        return was;
}

void sched_host_down(Sched *s, bool down) {
        assert(s);
        s->down = down;
        if (!down)
                return;
        fail_waiting(s, -1, 503);
        s->running = s->starting = -1;
        s->stopping = false;
        s->stop_requested = false;
        s->wait_logged = -1;
}

void sched_bus_gone(Sched *s, bool gone) {
        assert(s);
        s->bus_gone = gone;
        if (!gone)
                return;
        /* what needs the bus is not under way any more: the switch was reset with the bus */
        fail_waiting_others(s, s->running, 503);
        s->starting = -1;
        s->stopping = s->stop_requested = false;
        s->wait_logged = -1;
}

void sched_gpu_busy(Sched *s, bool busy) {
        assert(s);
        s->gpu_busy = busy;
        for (size_t i = 0; busy && i < s->n_engines; i++)
                if (sched_refusal(s, i) == 423)
                        fail_waiting(s, (ssize_t)i, 423);
}

int sched_refusal(const Sched *s, size_t engine) {
        assert(s);
        assert(engine < s->n_engines);
        if ((ssize_t)engine == s->running || (ssize_t)engine == s->starting)
                return 0;
        return s->bus_gone ? 503 : s->gpu_busy ? 423 : 0;
}

static usec_t deadline_of(const Sched *s, const SchedRequest *r) {
        if (s->config.wait_budget == USEC_INFINITY)
                return USEC_INFINITY;
        return r->arrived + s->config.wait_budget;
}

usec_t sched_engine_idle_stop(const Sched *s, size_t i) {
        assert(i < s->n_engines);
        return s->engines[i].idle_stop ?: s->config.idle_stop;
}

static usec_t idle_stop_at(const Sched *s) {
        if (s->running < 0 || s->down || s->bus_gone || s->starting >= 0 || s->stopping ||
            s->n_waiting > 0 || s->n_in_flight > 0)
                return USEC_INFINITY;
        if (s->stop_requested)
                return 0;
        usec_t idle = sched_engine_idle_stop(s, (size_t)s->running);
        if (idle == USEC_INFINITY)
                return USEC_INFINITY;
        return MAX(s->up_at, s->last_done) + idle;
}

usec_t sched_idle_stop_at(const Sched *s) {
        return idle_stop_at(s);
}

/* When this instance stops the idle engine itself: with others in front of the host, only on request
 * (the host's timer, which every instance renews, is the idle stop), and never during another's switch */
static usec_t own_idle_stop_at(const Sched *s) {
        if (s->foreign_since > 0 || (s->config.shared && !s->stop_requested))
                return USEC_INFINITY;
        return idle_stop_at(s);
}

void sched_set_up_at(Sched *s, usec_t up_at) {
        assert(s);
        if (s->running >= 0 && up_at < s->up_at)
                s->up_at = up_at;
}

void sched_foreign_switch(Sched *s, usec_t now, bool on) {
        assert(s);
        s->foreign_since = on ? MAX(now, 1u) : 0;
}

usec_t sched_hold_down_until(const Sched *s, usec_t now) {
        assert(s);
        if (!in_hold_down(s, now) || s->config.hold_down == USEC_INFINITY)
                return in_hold_down(s, now) ? USEC_INFINITY : 0;
        return s->up_at + s->config.hold_down;
}

void sched_request_stop(Sched *s) {
        assert(s);
        if (s->running >= 0 && s->starting < 0)
                s->stop_requested = true;
}

/* 1. answers already decided: a failed switch, a host gone down */
static bool next_decided_failure(Sched *s, SchedAction *ret) {
        SchedRequest *r = s->failed.head;

        if (!r)
                return false;
        QUEUE_REMOVE(requests, &s->failed, r);
        *ret = (SchedAction){
                .type = SCHED_FAIL, .req = r, .engine = (ssize_t)r->engine, .status = r->fail_status};
        return true;
}

/* 2. rule:abandon-switch: one abandoned switch to report */
static bool next_abandoned(Sched *s, SchedAction *ret) {
        for (size_t i = 0; i < s->n_engines; i++) {
                sched_steps++;
                if (s->engines[i].abandoned) {
                        s->engines[i].abandoned = false;
                        *ret = (SchedAction){.type = SCHED_ABANDON, .engine = (ssize_t)i};
                        return true;
                }
        }
        return false;
}

/* 2. rule:failed-start-hold: one hold that is over (its time passed, or a reload shortened it) */
static bool next_hold_over(Sched *s, usec_t now, SchedAction *ret) {
        for (size_t i = 0; i < s->n_engines; i++) {
                sched_steps++;
                if (s->engines[i].held && held_until(s, &s->engines[i]) <= now) {
                        s->engines[i].held = false;
                        *ret = (SchedAction){.type = SCHED_UNHOLD, .engine = (ssize_t)i};
                        return true;
                }
        }
        return false;
}

/* 3. rule:wait-budget: a wait that spent its budget is answered 504; the oldest is the first to */
static bool next_expired(Sched *s, usec_t now, SchedAction *ret) {
        SchedRequest *r = s->waiting.head;

        if (!r || deadline_of(s, r) > now)
                return false;
        waiting_drop(s, r);
        r->state = SCHED_FAILED;
        *ret = (SchedAction){.type = SCHED_FAIL, .req = r, .engine = (ssize_t)r->engine, .status = 504};
        /* a switch nobody waits for any more is not started (rule:abandon-switch) */
        if ((ssize_t)r->engine != s->running && (ssize_t)r->engine != s->starting &&
            s->engines[r->engine].n_waiting == 0)
                s->engines[r->engine].abandoned = true;
        return true;
}

/* 4. rule:hold-down, rule:no-starvation: a waiting request the running engine may serve now. Only the first
 * one for it can be: a later one arrived no earlier, so whatever keeps the first waiting keeps it too. */
static bool next_go(Sched *s, usec_t now, SchedAction *ret) {
        SchedRequest *r = s->engines[s->running].waiting.head;

        if (!r || !may_go(s, now, r))
                return false;
        waiting_drop(s, r);
        in_flight_add(s, r);
        *ret = (SchedAction){.type = SCHED_GO, .req = r, .engine = (ssize_t)r->engine};
        return true;
}

/* 4. rule:switch-waits, rule:hold-down, rule:arrival-order: the pending switch p starts once nothing is in
 * flight and the hold-down is over; until then its wait is logged, once */
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

/* 4. rule:idle-stop: the running engine stops once idle long enough, or at once when a stop was asked for */
static bool next_idle_stop(Sched *s, usec_t now, SchedAction *ret) {
        if (own_idle_stop_at(s) > now)
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
        SchedRequest *r = s->waiting.head;

        if (!r || s->n_in_flight > 0)
                return false;
        s->starting = (ssize_t)r->engine;
        *ret = (SchedAction){.type = SCHED_START, .req = r, .engine = (ssize_t)r->engine};
        return true;
}

bool sched_next(Sched *s, usec_t now, SchedAction *ret) {
        assert(s);
        *ret = (SchedAction){.type = SCHED_NONE, .engine = -1};

        if (next_decided_failure(s, ret) || next_abandoned(s, ret) || next_hold_over(s, now, ret) ||
            next_expired(s, now, ret))
                return true;
        if (s->down || s->starting >= 0 || s->stopping)
                return false;
        if (s->bus_gone) /* rule:bus-gone: only what the running engine serves */
                return s->running >= 0 && next_go(s, now, ret);
        if (s->running >= 0)
                return next_with_engine_up(s, now, ret);
        return next_with_engine_down(s, ret);
}

usec_t sched_next_timer(const Sched *s, usec_t now) {
        assert(s);
        /* the first budget to end is the oldest wait's */
        usec_t t = s->waiting.head ? deadline_of(s, s->waiting.head) : USEC_INFINITY;

        for (size_t i = 0; i < s->n_engines; i++)
                if (s->engines[i].held)
                        t = MIN(t, held_until(s, &s->engines[i]));

        if (!s->down && !s->bus_gone && s->starting < 0 && !s->stopping && s->running >= 0) {
                if (in_hold_down(s, now) && pending_switch(s) && s->config.hold_down != USEC_INFINITY)
                        t = MIN(t, s->up_at + s->config.hold_down);
                t = MIN(t, own_idle_stop_at(s));
        }
        return t;
}

unsigned sched_ahead(const Sched *s, const SchedRequest *r) {
        assert(s);
        /* answered or removed: not the scheduler's any more, everyone is ahead */
        if (r->state == SCHED_FAILED && !queue_has(&s->failed, r))
                return s->n_in_flight + s->n_waiting;
        return s->n_in_flight + sched_tree_count_before(s, r->seq);
}

const SchedRequest *sched_first_waiting(const Sched *s) {
        assert(s);
        const SchedRequest *x = s->tree;

        while (x && x->tree_left)
                x = x->tree_left;
        return x;
}

bool sched_switch_pending(const Sched *s) {
        assert(s);
        if (s->running < 0)
                return false;
        if (s->starting >= 0 && s->starting != s->running)
                return true;
        return s->n_waiting > s->engines[s->running].n_waiting;
}
