/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* rule:idle-stop-on-host: the idle stop held by the host's own manager as well, so that it happens when
 * modelgated is gone (stopped, killed, exited idle) or no longer has the host (a reload that removed
 * it). For the engine that runs (or starts), one transient timer unit on the host,
 * modelgate-idle-<engine unit>.timer, whose service stops the engine unit. It is made with
 * StartTransientUnit, OnActiveSec= reaching the idle stop as it stands plus a slack; renewed with
 * RestartUnit (OnActiveSec= counts from the timer's start) only when that slack no longer covers the
 * idle stop, so a burst of requests costs one call a slack, not one a request; and stopped when the
 * engine is to stop or another is to start. One call at a time, whose answer looks again. modelgated's
 * own idle stop (the Sched's) comes first while it runs: the host's is the one when it does not. */

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "modelgated/host/host-internal.h"
#include "shared/log.h"

#define SLACK_MIN_USEC (1 * USEC_PER_SEC)
#define SLACK_MAX_USEC (60 * USEC_PER_SEC)
#define RETRY_MIN_USEC (10 * USEC_PER_SEC)
#define RETRY_MAX_USEC (10 * USEC_PER_MINUTE)

/* [Engine] IdleStopSec= over the host's: unset leaves the host's (0 in the scheduler), 0 is never */
void host_engines_idle_stop_set(Host *h) {
        for (size_t i = 0; i < h->n_engines; i++) {
                usec_t v = h->engines[i].conf->idle_stop_usec;
                h->sched.engines[i].idle_stop = v == CONF_USEC_UNSET ? 0 : v == 0 ? USEC_INFINITY : v;
        }
}

usec_t host_engine_idle_stop(const Host *h, ssize_t engine) {
        assert(h);
        return engine >= 0 ? sched_engine_idle_stop(&h->sched, (size_t)engine) : h->sched.config.idle_stop;
}

bool host_keeps_daemon(const Host *h) {
        assert(h);
        /* an engine it runs must still get its idle stop, which only a running daemon can do */
        return !host_drained(h) ||
               (h->running >= 0 && host_engine_idle_stop(h, h->running) != USEC_INFINITY);
}

/* How late the host's stop may come after modelgated's: an eighth of IdleStopSec=, 1 s to 1 min. */
static usec_t slack_of(usec_t idle_stop) {
        return MIN(MAX(idle_stop / 8, SLACK_MIN_USEC), SLACK_MAX_USEC);
}

/* modelgate-idle-<unit without .service>.timer and .service; '@' (an instance) escaped as systemd does */
static int timer_names(const char *unit, char **ret_timer, char **ret_service) {
        size_t n = strlen(unit);
        char stem[512], *p = stem;

        if (n > 8 && streq(unit + n - 8, ".service"))
                n -= 8;
        for (size_t i = 0; i < n && p < stem + sizeof(stem) - 5; i++)
                p += unit[i] == '@' ? sprintf(p, "\\x40") : sprintf(p, "%c", unit[i]);
        *p = 0;
        if (asprintf(ret_timer, "modelgate-idle-%s.timer", stem) < 0)
                return -ENOMEM;
        if (asprintf(ret_service, "modelgate-idle-%s.service", stem) < 0) {
                *ret_timer = mfree(*ret_timer);
                return -ENOMEM;
        }
        return 0;
}

/* The engine whose timer the host should hold now, -1 for none; *ret_required: the earliest its
 * engine may stop, *ret_busy: whether that moves on with the clock (a request in flight, a start). */
static ssize_t wanted(const Host *h, usec_t now, usec_t *ret_required, bool *ret_busy) {
        usec_t idle, at;

        if (!h->bus || !host_bus_is_up(h->bus))
                return -1;
        switch (h->phase) {
        case PHASE_STOPPING:
        case PHASE_GIVING_UP:
        case PHASE_IDLE_STOP:
                return -1; /* a switch, a stop: the old engine's timer goes */
        case PHASE_STARTING:
        case PHASE_HEALTH:
                /* held from the start on: modelgated killed while an engine loads leaves no GPU taken */
                idle = host_engine_idle_stop(h, h->target);
                if (idle == USEC_INFINITY)
                        return -1;
                *ret_required = now + idle;
                *ret_busy = true;
                return h->target;
        default:
                if (h->running < 0)
                        return -1;
                idle = host_engine_idle_stop(h, h->running);
                if (idle == USEC_INFINITY)
                        return -1;
                at = h->phase == PHASE_NONE ? sched_idle_stop_at(&h->sched) : USEC_INFINITY;
                if (at == 0)
                        return -1; /* StopEngine(): it stops now */
                *ret_busy = at == USEC_INFINITY;
                *ret_required = *ret_busy ? now + idle : MAX(at, now);
                return h->running;
        }
}

static void send_op(Host *h, IdleTimerOp op, ssize_t e, usec_t span);

static void op_failed(Host *h, ssize_t e, const char *why) {
        IdleTimer *t = &h->idle_timer;

        t->engine = -1;
        if (!h->bus || !host_bus_is_up(h->bus))
                return; /* a lost bus: what the host holds is read again once it is back */
        /* a manager that refuses (polkit on a system manager) is asked less and less often */
        t->backoff = t->backoff ? MIN(t->backoff * 2, RETRY_MAX_USEC) : RETRY_MIN_USEC;
        t->retry_at = host_now(h) + t->backoff;
        if (!t->warned)
                log_warning("host %s: cannot hold the idle stop of engine %s on the host: %s; modelgated's "
                            "own still applies while it runs",
                            h->conf->name, engine_name(h, e), why);
        t->warned = true;
}

static void op_done(HostBus *b, size_t i, const char *result, const char *error, void *userdata) {
        IdleTimer *t = userdata;
        Host *h = container_of(t, Host, idle_timer);
        IdleTimerOp op = t->op;
        bool ok = result && streq(result, "done");

        t->op = IDLE_TIMER_NONE;
        switch (op) {
        case IDLE_TIMER_STOP:
                if (!ok)
                        log_debug("host %s: stopping the idle timer of engine %s: %s", h->conf->name,
                                  engine_name(h, t->op_engine), result ?: strna(error));
                t->engine = -1;
                break;
        case IDLE_TIMER_CLEAR:
                /* one left by an earlier modelgated, or none ("not loaded"): either way it is gone */
                send_op(h, IDLE_TIMER_CREATE, t->op_engine, t->op_span);
                return;
        case IDLE_TIMER_CREATE: {
                if (!ok) {
                        op_failed(h, t->op_engine, result ?: strna(error));
                        break;
                }
                char span[FORMAT_TIMESPAN_MAX];
                log_debug("host %s: idle stop of engine %s held by the host, in %s", h->conf->name,
                          engine_name(h, t->op_engine),
                          format_timespan(span, sizeof(span), t->op_span) ?: "?");
                t->engine = t->op_engine;
                t->span = t->op_span;
                t->at = t->op_sent + t->op_span;
                t->warned = false;
                t->backoff = 0;
                break;
        }
        case IDLE_TIMER_RESTART:
                if (ok)
                        t->at = t->op_sent + t->span;
                else
                        t->engine = -1; /* it elapsed, or someone stopped it: made anew */
                break;
        case IDLE_TIMER_NONE:
                break;
        }
        host_idle_timer_sync(h);
}

static void send_op(Host *h, IdleTimerOp op, ssize_t e, usec_t span) {
        IdleTimer *t = &h->idle_timer;
        _cleanup_free_ char *timer = NULL, *service = NULL;
        const char *unit = engine_unit(h, e);
        int r;

        r = timer_names(unit, &timer, &service);
        if (r >= 0 && op == IDLE_TIMER_CREATE)
                r = host_bus_start_stop_timer(h->bus, timer, service, unit, span,
                                              MIN(slack_of(host_engine_idle_stop(h, e)) / 4, USEC_PER_SEC),
                                              op_done, t);
        else if (r >= 0)
                r = host_bus_unit_job(h->bus, op == IDLE_TIMER_RESTART ? "RestartUnit" : "StopUnit", timer,
                                      op_done, t);
        if (r < 0) {
                op_failed(h, e, strerror(-r));
                return;
        }
        t->op = op;
        t->op_engine = e;
        t->op_sent = host_now(h);
        t->op_span = span;
}

static int wake_cb(sd_event_source *s, uint64_t usec, void *userdata) {
        host_idle_timer_sync(userdata);
        return 0;
}

static void wake_at(Host *h, usec_t when) {
        IdleTimer *t = &h->idle_timer;

        if (when == USEC_INFINITY) {
                (void)sd_event_source_set_enabled(t->wake, SD_EVENT_OFF);
                return;
        }
        if (!t->wake && sd_event_add_time(h->env.event, &t->wake, CLOCK_MONOTONIC, when, USEC_PER_MSEC * 10,
                                          wake_cb, h) < 0) {
                log_warning("host %s: cannot arm the renewal of the idle timer", h->conf->name);
                return;
        }
        (void)sd_event_source_set_time(t->wake, when);
        (void)sd_event_source_set_enabled(t->wake, SD_EVENT_ONESHOT);
}

void host_idle_timer_sync(Host *h) {
        assert(h);
        IdleTimer *t = &h->idle_timer;
        usec_t now = host_now(h), required = 0, slack, margin;
        bool busy = false;
        ssize_t want;

        if (t->op != IDLE_TIMER_NONE)
                return; /* its answer looks again */
        if (!h->bus || !host_bus_is_up(h->bus)) {
                t->engine = -1; /* not known until the bus is back */
                wake_at(h, USEC_INFINITY);
                return;
        }
        want = wanted(h, now, &required, &busy);
        if (t->engine >= 0 && t->engine != want) {
                send_op(h, IDLE_TIMER_STOP, t->engine, 0);
                return;
        }
        if (want < 0) {
                wake_at(h, USEC_INFINITY);
                return;
        }
        if (now < t->retry_at) {
                wake_at(h, t->retry_at);
                return;
        }
        slack = slack_of(host_engine_idle_stop(h, want));
        /* in flight, the earliest stop moves with the clock: renewed half a slack before it is reached */
        margin = busy ? slack / 2 : 0;
        if (t->engine == want && t->at >= required + margin && t->at <= required + 2 * slack) {
                wake_at(h, busy ? t->at - margin - host_engine_idle_stop(h, want) : USEC_INFINITY);
                return;
        }
        if (t->engine == want && t->at < required + margin && t->span >= required - now + margin)
                send_op(h, IDLE_TIMER_RESTART, want, t->span);
        else
                /* none, one of unknown length (an earlier modelgated's, a reload's new IdleStopSec=) */
                send_op(h, IDLE_TIMER_CLEAR, want, required - now + slack);
}

void host_idle_timer_done(Host *h) {
        assert(h);
        h->idle_timer.wake = sd_event_source_disable_unref(h->idle_timer.wake);
}
