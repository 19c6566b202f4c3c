/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The words of a host that cannot serve a request, and when: at once, when the host is down, the engine
 * is held after a failed start (rule:failed-start-hold), the request would need a switch while the bus is
 * gone (rule:bus-gone) or a BusyUnits= unit is active (rule:busy-followed); or later, for a request that
 * waited, when the scheduler fails it; a probe that would move the GPU (rule:probe). A 503 that the bus
 * causes says when the bus is tried again, and the client's Retry-After is the same number
 * (host_retry_after()). */

#include <assert.h>
#include <stdio.h>

#include "modelgated/host/host-internal.h"
#include "modelgated/records/metrics.h"
#include "modelgated/api/api-answer.h"
#include "modelgated/sched/probe.h"
#include "modelgated/api/refusal-words.h"
#include "shared/log.h"
#include "shared/strv.h"

/* Whether the lost bus is what a 503 of the host says: not while its engine's URL fails too, whose words
 * (rule:host-down) say the steady 30 s of rule:retry-after */
static bool bus_is_why(const Host *h) {
        return h->bus && h->bus_down && h->probed && !h->http_down;
}

unsigned host_retry_after(const Host *h) {
        assert(h);
        if (!bus_is_why(h))
                return 0;
        usec_t in = host_bus_retry_in(h->bus, host_now(h));
        return (unsigned)MAX((in + USEC_PER_SEC - 1) / USEC_PER_SEC, 1u);
}

/* rule:bus-gone: "the bus of host '3090' is gone (ssh: bus connection lost): engine 'mainline' serves on,
 * but switching to engine 'fork' needs the bus; reconnecting in 8 s, retry then"; with no engine serving,
 * "host '3090' is down: ssh: bus connection lost; its bus is gone and no engine serves, and starting
 * engine 'fork' needs the bus; reconnecting in 8 s, retry then" */
static void bus_gone_words(const Host *h, ssize_t engine, char *buf, size_t l) {
        unsigned retry = host_retry_after(h);

        if (h->sched.bus_gone && h->running >= 0)
                snprintf(buf, l,
                         "the bus of host '%s' is gone (%s): engine '%s' serves on, but switching to engine "
                         "'%s' needs the bus; reconnecting in %u s, retry then",
                         h->conf->name, strna(h->down_reason), engine_name(h, h->running),
                         engine_name(h, engine), retry);
        else
                snprintf(buf, l,
                         "host '%s' is down: %s; its bus is gone and no engine serves, and starting engine "
                         "'%s' needs the bus; reconnecting in %u s, retry then",
                         h->conf->name, strna(h->down_reason), engine_name(h, engine), retry);
}

/* rule:busy-followed: what holds the GPU, "gpu-bench.service is active", as the switch's own check says it
 * (rule:busy-gpu) */
static void busy_reason(const Host *h, char *buf, size_t l) {
        char **active = h->bus ? host_bus_busy_active(h->bus) : NULL;
        _cleanup_free_ char *names = strv_join(active, ", ");

        snprintf(buf, l, "%s %s active", names && *names ? names : "a BusyUnits= unit",
                 active && active[0] && active[1] ? "are" : "is");
        /* rule:refusal-words: the host names its units; a 423 must not say what makes an agent retry */
        (void)refusal_words_strip(buf);
}

static void busy_words(const Host *h, ssize_t engine, char *buf, size_t l) {
        char reason[512];

        busy_reason(h, reason, sizeof(reason));
        snprintf(buf, l,
                 "the GPU of host '%s' is in use by someone else (%s), so modelgate did not switch it to "
                 "engine "
                 "'%s'; ask again once that work is done",
                 h->conf->name, reason, engine_name(h, engine));
}

void host_answer_failed(Host *h, HostWaiter *w, int status) {
        char msg[1024], t[FORMAT_TIMESPAN_MAX];
        const char *unanswered = w->engine == h->target ? host_unanswered(h) : NULL;

        host_waiter_times(h, w);
        /* answered: released by the scheduler already */
        host_unride(h, w);
        w->host = NULL;
        switch (status) {
        case 503:
                if (bus_is_why(h))
                        bus_gone_words(h, w->engine, msg, sizeof(msg));
                else
                        (void)answer_format(msg, sizeof(msg), ANSWER_HOST_DOWN, h->conf->name,
                                            strna(h->down_reason));
                break;
        case 504:
                metrics_budget_expired(h->env.metrics, h->conf->name);
                snprintf(
                        msg, sizeof(msg),
                        "waited %s for engine '%s' of host '%s' (WaitBudgetSec=), and it is still busy with "
                        "other requests or switching; send the request again later%s%s",
                        format_timespan(t, sizeof(t), h->sched.config.wait_budget) ?: "?",
                        engine_name(h, w->engine), h->conf->name, unanswered ? "; " : "", unanswered ?: "");
                break;
        case 423:
                if (h->sched.gpu_busy) {
                        metrics_refusal(h->env.metrics, h->conf->name);
                        busy_words(h, w->engine, msg, sizeof(msg));
                        break;
                }
                snprintf(msg, sizeof(msg), "%s", h->fail_message ?: "the GPU is in use by someone else");
                break;
        default:
                snprintf(msg, sizeof(msg), "%s", h->fail_message ?: "the engine could not be started");
        }
        w->ready(w, status, msg);
}

/* A host that is down, as its bus or its own probe says, refuses at once: a request sent to a host that
 * accepts connections and never answers would otherwise wait for UpstreamIdleTimeoutSec=. A request for the
 * engine that serves on through a lost bus (rule:bus-gone) is not refused. */
bool host_refuse_if_down(const Host *h, ssize_t engine, HostRefusal *ret) {
        /* the first connection is not an outcome yet: after an idle exit, the request that started this
         * instance must wait for the bus, not get a 503 */
        if (h->http_down) {
                ret->status = 503;
                (void)answer_format(ret->message, sizeof(ret->message), ANSWER_HOST_DOWN, h->conf->name,
                                    strna(h->down_reason));
                return true;
        }
        if (!h->bus_down || !h->probed || (h->sched.bus_gone && engine >= 0 && engine == h->running))
                return false;
        ret->status = 503;
        bus_gone_words(h, engine, ret->message, sizeof(ret->message));
        return true;
}

/* rule:failed-start-hold: an engine whose start failed a moment ago is not started again: its requests get
 * the failure's 502 and words at once */
bool host_refuse_if_held(const Host *h, size_t i, HostRefusal *ret) {
        if (sched_held_until(&h->sched, host_now(h), i) == 0)
                return false;
        ret->status = 502;
        snprintf(ret->message, sizeof(ret->message), "%s",
                 h->held_reasons[i] ?: "the engine failed to start a moment ago");
        return true;
}

/* rule:bus-gone, rule:busy-followed: a request that would need a switch that cannot be made now is told
 * so at once, not after it waited for the switch to be due */
bool host_refuse_at_once(Host *h, size_t i, HostRefusal *ret) {
        int status = sched_refusal(&h->sched, i);

        if (status == 0)
                return false;
        ret->status = status;
        if (status == 503)
                bus_gone_words(h, (ssize_t)i, ret->message, sizeof(ret->message));
        else {
                char reason[512];
                busy_reason(h, reason, sizeof(reason));
                log_warning("host %s: GPU busy (%s), switch to %s refused", h->conf->name, reason,
                            engine_name(h, (ssize_t)i));
                metrics_refusal(h->env.metrics, h->conf->name);
                busy_words(h, (ssize_t)i, ret->message, sizeof(ret->message));
                host_set_last_error(h, ret->message); /* rule:last-error, as the switch's refusal is */
        }
        return true;
}

/* rule:probe: beside host_join(), the other request that never switches. A probe for an engine that is not
 * up goes when its engine is up and staying, may start it on a GPU nothing uses (probe_decide()), and is
 * refused at once otherwise, with what holds the GPU */
bool host_refuses_probe(Host *h, size_t i, const char *key, HostRefusal *ret) {
        assert(h && i < h->n_engines && key && ret);
        HostState st = host_state(h);
        bool moving = st == HOST_STARTING || st == HOST_SWITCHING;
        ssize_t running = host_running(h);
        const char *engine = h->engines[i].conf->name;
        char why[160];

        bool cold = host_engine_up(h) == (ssize_t)i && host_key_cold(h, key);
        ProbeView v = {
                /* a router's model not loaded yet is not up: loading it may unload another */
                .up = host_engine_up(h) == (ssize_t)i && !cold,
                .switch_pending = moving || host_switch_pending(h),
                .running = moving || running >= 0,
                .in_flight = host_in_flight(h),
                .waiting = host_waiting(h),
        };
        if (probe_decide(&v) != PROBE_REFUSE)
                return false;
        ret->status = 423;
        if (cold) {
                (void)answer_format(ret->message, sizeof(ret->message), ANSWER_PROBE_NOT_LOADED, key, engine,
                                    h->conf->name);
                return true;
        }
        if (moving)
                snprintf(why, sizeof(why), "the host is switching engines");
        else if (running >= 0)
                snprintf(why, sizeof(why), "engine '%s' runs there", h->engines[running].conf->name);
        else
                snprintf(why, sizeof(why), "%u requests are in flight or waiting there",
                         v.in_flight + v.waiting);
        (void)answer_format(ret->message, sizeof(ret->message), ANSWER_PROBE_NOT_SWITCHED, engine,
                            h->conf->name, why);
        return true;
}
