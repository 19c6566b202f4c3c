/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What a host shows of itself: its state (decided mostly by host-switch.c's phases, and logged when it
 * goes down or comes back), what a waiting request waits for, and how its wait divides into time queued
 * and time switching. */

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>

#include "modelgated/catalog/catalog.h"
#include "modelgated/host/host-internal.h"
#include "modelgated/api/request-id.h"
#include "shared/log.h"
#include "shared/strv.h"

/* The state the daemon shows */

static const char *const host_state_table[_HOST_STATE_MAX] = {
        [HOST_DOWN] = "down",
        [HOST_IDLE] = "idle",
        [HOST_STARTING] = "starting",
        [HOST_SERVING] = "serving",
        [HOST_SWITCHING] = "switching",
        [HOST_BUSY] = "busy",
        [HOST_CONNECTING] = "connecting",
};

const char *host_state_to_string(HostState s) {
        return s >= 0 && s < _HOST_STATE_MAX ? host_state_table[s] : NULL;
}

static const char *const host_wait_table[] = {
        [HOST_WAIT_NONE] = NULL,
        [HOST_WAIT_STREAM] = "stream",
        [HOST_WAIT_HOLD_DOWN] = "hold-down",
        [HOST_WAIT_ENGINE_START] = "engine-start",
        [HOST_WAIT_SWITCH] = "switch",
        [HOST_WAIT_PROMPT_CACHE] = "prompt-cache",
};

const char *host_wait_to_string(HostWait w) {
        return w >= 0 && (size_t)w < ELEMENTSOF(host_wait_table) ? host_wait_table[w] : NULL;
}

bool host_engine_adopted(const Host *h) {
        assert(h);
        return h->engine_up && h->running_adopted;
}

const char *host_stopping(const Host *h) {
        assert(h);
        if (h->phase != PHASE_IDLE_STOP)
                return NULL;
        return h->stop_requested ? "stop" : "idle-stop";
}

/* modelgatectl engines, ListEngines(): engine i as its host's states say it */
const char *host_engine_state(const Host *h, size_t i) {
        assert(h);
        assert(i < h->n_engines);
        if (h->state == HOST_CONNECTING || h->bus_down)
                return "unknown"; /* nobody has asked its manager yet, or cannot now */
        if (h->running == (ssize_t)i) {
                if (h->phase == PHASE_IDLE_STOP || h->phase == PHASE_GIVING_UP ||
                    (h->phase == PHASE_STOPPING && h->target != (ssize_t)i))
                        return "stopping";
                return h->engine_up ? "serving" : "starting";
        }
        if (host_switch_target(h) == (ssize_t)i)
                return "starting";
        if (host_held_until(h, i) > 0)
                return "held";
        return "stopped";
}

char *host_waiter_log_words(const HostWaiter *w) {
        _cleanup_free_ char *model = log_escape_dup(w->model);
        char id[REQUEST_ID_MAX * 4 + 1];
        char *s;

        if (w->id.n == 0)
                return TAKE_PTR(model);
        log_escape(id, sizeof(id), w->id.p, w->id.n);
        return asprintf(&s, "%s id=%s", strna(model), id) < 0 ? NULL : s;
}

ssize_t host_switch_target(const Host *h) {
        assert(h);
        return h->phase != PHASE_NONE && h->phase != PHASE_IDLE_STOP ? h->target : -1;
}

/* rule:prompt-cache: "saving fork's prompt caches (2 slots) before the switch to mainline", "restoring
 * mainline's prompt caches (1 slot)" */
static int cache_step_words(const Host *h, const HostCacheStep *pc, char *buf, size_t l) {
        char n[32] = "";

        if (pc->found > 0)
                snprintf(n, sizeof(n), " (%llu slot%s)", (unsigned long long)pc->found,
                         pc->found == 1 ? "" : "s");
        if (pc->restore)
                return snprintf(buf, l, "restoring %s's prompt caches%s", engine_name(h, pc->engine), n);
        if (pc->before < 0)
                return snprintf(buf, l, "saving %s's prompt caches%s before its idle stop",
                                engine_name(h, pc->engine), n);
        return snprintf(buf, l, "saving %s's prompt caches%s before the switch to %s",
                        engine_name(h, pc->engine), n, engine_name(h, pc->before));
}

/* rule:wait-reason: what a waiting request waits for, in words and numbers, the same in the log line, the
 * keepalive comment and modelgatectl switch: the running engine's hold-down and the seconds left, its
 * streams in flight, an engine starting and for how long, or a switch ahead of it */
int host_waiter_reason(const HostWaiter *w, char *buf, size_t l) {
        assert(w);
        const Host *h = w->host;
        unsigned ahead, n;
        usec_t hold_left, now;
        int k;

        if (!h)
                return -ESTALE;
        HostWait why = host_waiter_wait(w, &ahead, &hold_left);
        const HostCacheStep *pc = host_cache_step(h);
        now = host_now(h);
        switch (why) {
        case HOST_WAIT_PROMPT_CACHE:
                k = cache_step_words(h, pc, buf, l);
                break;
        case HOST_WAIT_HOLD_DOWN:
                if (hold_left == USEC_INFINITY)
                        k = snprintf(buf, l, "held by engine %s's hold-down (HoldDownSec=infinity)",
                                     engine_name(h, h->running));
                else
                        k = snprintf(buf, l, "held by engine %s's hold-down, %llu s left",
                                     engine_name(h, h->running),
                                     (unsigned long long)((hold_left + USEC_PER_SEC - 1) / USEC_PER_SEC));
                break;
        case HOST_WAIT_STREAM:
                n = h->sched.n_in_flight;
                k = snprintf(buf, l, "waiting for %u running stream%s on %s", n, n == 1 ? "" : "s",
                             engine_name(h, h->running));
                break;
        case HOST_WAIT_ENGINE_START:
                if (h->phase != PHASE_NONE && h->phase != PHASE_IDLE_STOP && h->switch_start > 0 &&
                    now >= h->switch_start)
                        k = snprintf(buf, l, "starting %s (%.1f s)", engine_name(h, w->engine),
                                     (double)(now - h->switch_start) / USEC_PER_SEC);
                else
                        k = snprintf(buf, l, "starting %s", engine_name(h, w->engine));
                break;
        case HOST_WAIT_SWITCH:
                if (h->phase != PHASE_NONE && h->phase != PHASE_IDLE_STOP && h->target >= 0 &&
                    h->target != (ssize_t)w->engine)
                        k = snprintf(buf, l, "behind the switch to %s", engine_name(h, h->target));
                else
                        k = snprintf(buf, l, "waiting for the switch to %s", engine_name(h, w->engine));
                break;
        default:
                return -ENOENT;
        }
        /* sched_ahead() counts what is in flight too, said above where it is the reason */
        ahead -= MIN(ahead, h->sched.n_in_flight);
        if (k >= 0 && (size_t)k < l && ahead > 0)
                snprintf(buf + k, l - (size_t)k, ", %u queued ahead", ahead);
        return 0;
}

int host_wait_reason(const Host *h, char *buf, size_t l) {
        assert(h);
        const SchedRequest *r = sched_first_waiting(&h->sched);

        if (!r)
                return -ENOENT;
        return host_waiter_reason(container_of(r, HostWaiter, req), buf, l);
}

/* rule:activity-feed: what a waiting request waits for, as the scheduler and the switch see it now */
HostWait host_waiter_wait(const HostWaiter *w, unsigned *ret_ahead, usec_t *ret_hold_left) {
        assert(w);
        const Host *h = w->host;
        usec_t now, until;

        *ret_ahead = 0;
        *ret_hold_left = 0;
        if (!h || w->req.state != SCHED_WAITING)
                return HOST_WAIT_NONE;
        *ret_ahead = sched_ahead(&h->sched, &w->req);
        const HostCacheStep *pc = host_cache_step(h);
        if (pc && pc->end == 0)
                return HOST_WAIT_PROMPT_CACHE;
        if (h->phase != PHASE_NONE && h->phase != PHASE_IDLE_STOP)
                return h->target == w->engine && (h->running < 0 || h->running == h->target)
                               ? HOST_WAIT_ENGINE_START
                               : HOST_WAIT_SWITCH;
        if (h->running < 0)
                return HOST_WAIT_ENGINE_START;
        if (h->running == w->engine)
                return HOST_WAIT_SWITCH; /* behind a pending switch to another engine */
        now = host_now(h);
        until = sched_hold_down_until(&h->sched, now);
        if (until > now) {
                *ret_hold_left = until == USEC_INFINITY ? USEC_INFINITY : until - now;
                return HOST_WAIT_HOLD_DOWN;
        }
        return h->sched.n_in_flight > 0 ? HOST_WAIT_STREAM : HOST_WAIT_SWITCH;
}

void host_update_state(Host *h) {
        assert(h);
        HostState s, was = h->state;

        /* rule:host-connecting: not probed yet is not down */
        /* rule:bus-gone: an engine serving on through a lost bus is not down */
        bool down = (h->bus_down && !h->sched.bus_gone) || h->http_down;

        if (!h->probed)
                s = HOST_CONNECTING;
        else if (down)
                s = HOST_DOWN;
        else if (h->phase != PHASE_NONE)
                /* another engine still holds the GPU, or is being stopped: a switch; else a start */
                s = h->phase == PHASE_STOPPING || h->phase == PHASE_GIVING_UP ||
                                    (h->running >= 0 && h->running != h->target)
                            ? HOST_SWITCHING
                            : HOST_STARTING;
        else if (h->sched.gpu_busy) /* rule:busy-followed: whatever serves, no switch can be made */
                s = HOST_BUSY;
        else if (h->running >= 0 && h->engine_up)
                s = HOST_SERVING;
        else if (h->busy)
                s = HOST_BUSY;
        else
                s = HOST_IDLE;
        /* the engine found running stays adopted until it stops, or another start begins */
        if (h->phase == PHASE_HEALTH && h->adopting)
                h->running_adopted = true;
        else if (h->running < 0 || h->phase == PHASE_STARTING || (h->phase == PHASE_HEALTH && !h->adopting))
                h->running_adopted = false;
        if (s != h->state)
                log_debug("host %s: state %s → %s", h->conf->name, host_state_to_string(h->state),
                          host_state_to_string(s));
        h->state = s;
        host_idle_timer_sync(h);

        /* rule:down-logged-once: going down and coming back are logged once each, with the reason */
        bool recovered = false;
        if (!h->probed)
                return; /* the first connection is not an outcome yet */
        if (down && h->logged_down != 1) {
                log_warning("host %s down: %s", h->conf->name, h->down_reason ?: "unreachable");
                /* by its own probe: the engine's URL fails. A lost bus alone leaves the HTTP going, and
                 * the streams on it run to their end. */
                if (h->http_down)
                        host_tell_riders_down(h);
                if (h->catalog)
                        catalog_host_state(h->catalog, h->down_reason ?: "unreachable");
        } else if (!down && h->logged_down != 0) {
                log_notice("host %s up", h->conf->name);
                recovered = h->logged_down == 1;
                if (h->catalog)
                        catalog_host_state(h->catalog, NULL);
        }
        h->logged_down = down;
        if (down && h->down_reason && !streq_ptr(h->last_error, h->down_reason))
                host_set_last_error(h, h->down_reason);
        /* rule:last-error: recovered — the host is up again, or an engine came up since the error */
        if (!down && h->last_error && (recovered || (h->engine_up && h->up_since > h->last_error_at))) {
                h->last_error = mfree(h->last_error);
                h->last_error_at = h->last_error_realtime = 0;
        }
        if (was == HOST_CONNECTING && h->env.cb->on_probed)
                h->env.cb->on_probed(h, h->env.userdata);
        host_changed(h);
}

const char *host_bus_state(const Host *h) {
        assert(h);
        if (!h->bus)
                return "";
        if (!h->probed)
                return "connecting";
        return h->bus_down ? "gone" : "up";
}

const char *host_bus_error(const Host *h) {
        assert(h);
        return h->bus && h->bus_down && h->probed ? h->down_reason : NULL;
}

void host_set_last_error(Host *h, const char *message) {
        assert(h);
        if (free_and_strdup(&h->last_error, message) < 0)
                return;
        h->last_error_at = host_now(h);
        h->last_error_realtime = now_usec(CLOCK_REALTIME);
}

usec_t host_last_error_usec(const Host *h) {
        assert(h);
        return h->last_error ? h->last_error_realtime : 0;
}

/* What the engine that is up serves without a load (a router's loaded models, a plain server's one), as
 * its host lists it now */
char **host_loaded_models(const Host *h) {
        assert(h);
        const CatalogList *l = h->catalog && h->engine_up ? catalog_snapshot(h->catalog) : NULL;
        char **out = calloc(1, sizeof(char *));

        for (size_t i = 0; out && l && i < catalog_list_size(l); i++)
                if (!catalog_list_cold(l, i) && strv_extend(&out, catalog_list_id(l, i)) < 0) {
                        strv_free(out);
                        return NULL;
                }
        return out;
}

/* The probe's outcome: the host is up or down (rule:host-down) */

void host_report_http(Host *h, const char *reason) {
        assert(h);
        bool down = reason != NULL;

        if (!h->probed && h->n_engines == 0) {
                /* rule:host-connecting: a host without engines is probed by its first read, either way */
                h->probed = true;
                h->http_down = down;
                if (down)
                        (void)free_and_strdup(&h->down_reason, reason);
                host_update_state(h);
                return;
        }
        /* with engines, only the engine that is up can fail: one stopping (an idle stop, a switch) is
         * expected to refuse connections */
        if (down && h->n_engines > 0 &&
            (!h->engine_up || h->phase != PHASE_NONE ||
             h->sched.foreign_since > 0)) /* or another's switch */
                return;
        if (down == h->http_down)
                return;
        h->http_down = down;
        if (down && !h->bus_down) {
                free(h->down_reason);
                h->down_reason = strdup(reason);
        }
        host_update_state(h);
}

void host_report_request_failed(Host *h) {
        assert(h);
        catalog_check_soon(h->catalog);
}

/* rule:down-fails-fast: the host is down by its own probe: its requests in flight fail now instead of
 * waiting for UpstreamIdleTimeoutSec=. Each leaves the riders before it hears, since its answer may end
 * its request or start another; the waiting ones are the scheduler's (sched_host_down()) or wait on. */
static int host_down_cb(sd_event_source *s, void *userdata) {
        Host *h = userdata;

        /* a source only while it is due, as host_schedule_later()'s */
        h->down_source = sd_event_source_disable_unref(h->down_source);

        while (h->http_down) {
                HostWaiter *w = NULL;
                LIST_FOREACH (riders, x, h->riders)
                        if (x->engine < 0 || x->req.state == SCHED_IN_FLIGHT) {
                                w = x;
                                break;
                        }
                if (!w)
                        break;
                host_unride(h, w);
                if (w->down)
                        w->down(w);
        }
        return 0;
}

void host_tell_riders_down(Host *h) {
        assert(h);
        if (h->riders && !h->down_source)
                (void)sd_event_add_defer(h->env.event, &h->down_source, host_down_cb, h);
}

/* rule:queued-and-switch: of the time since w's request asked, the part its own engine's switch (or start)
 * took, the one under way or the last that ended; the rest it was queued */
void host_waiter_times(const Host *h, HostWaiter *w) {
        bool under_way = h->phase >= PHASE_LEASE && h->phase <= PHASE_HEALTH;
        usec_t now = host_now(h), from = w->req.arrived;
        usec_t start = under_way ? h->switch_start : h->last_switch_start;
        usec_t end = under_way ? now : h->last_switch_end;
        ssize_t target = under_way ? h->target : h->last_switch_target;

        from = MAX(from, start);
        w->switched = target == w->engine && end > from ? end - from : 0;
        w->queued = now > w->req.arrived + w->switched ? now - w->req.arrived - w->switched : 0;
}

/* What is wrong with the host's engine units, as the bus read them: the warnings the host shows
 * (rule:engine-unit-checks, the same checks as modelgated --check-config --hosts) */
void host_check_units(Host *h) {
        _cleanup_strv_free_ char **others = NULL;

        strv_free(h->warnings);
        h->warnings = NULL;
        for (size_t i = 0; i < h->n_engines; i++)
                if (strv_extend(&others, h->engines[i].conf->unit) < 0)
                        return;
        for (size_t i = 0; i < h->n_engines; i++)
                (void)unit_info_check(host_bus_unit(h->bus, i), others, &h->warnings);
        STRV_FOREACH (w, h->warnings)
                log_warning("host %s: %s", h->conf->name, *w);
}

bool host_key_known_absent(const Host *h, size_t i, const char *key) {
        assert(h);
        char *const *keys;

        if (i >= h->n_engines || h->running == (ssize_t)i)
                return false; /* a running engine answers for itself, and no GPU moves for it */
        keys = catalog_engine_keys(h->catalog, i);
        if (!keys || !keys[0])
                return false; /* never read: only its start can say */
        if (catalog_lists(h->catalog, key) > 0)
                return false;
        STRV_FOREACH (k, keys)
                if (streq(*k, key))
                        return false;
        return true;
}
