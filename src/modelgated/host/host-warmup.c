/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* An engine's way from a running unit to serving, and its upkeep while it
 * serves (rule:warmup): GET /health until 200, then WarmupRequest= before it counts as up
 * (so that the first client does not pay the model's cold start), and the
 * same request again after PrimeAfterIdleSec= without traffic. Apart from
 * the switch phases because these are HTTP exchanges with the engine, with
 * their own timers and answers, while the phases are the bus's jobs. */

#include <assert.h>
#include <stdio.h>

#include "modelgated/host/host-internal.h"
#include "modelgated/http/http-writer.h"
#include "modelgated/sched/sched.h"
#include "shared/log.h"

int host_probe_on_headers(Upstream *u, const UpstreamResponse *resp, void *userdata) {
        Host *h = userdata;
        h->probe_status = resp->status;
        return 0;
}

static void probe_again(Host *h) {
        (void)sd_event_source_set_time_relative(h->probe_timer, HEALTH_PROBE_INTERVAL_USEC);
        (void)sd_event_source_set_enabled(h->probe_timer, SD_EVENT_ONESHOT);
}

static void warmup_done(Host *h, const char *error) {
        usec_t took = host_now(h) - h->warmup_start;
        char t[FORMAT_TIMESPAN_MAX];

        h->warmup = NULL;
        if (error)
                log_warning("host %s: warm-up request of engine %s failed (%s); it serves all the same",
                            h->conf->name, engine_name(h, h->target), error);
        else
                log_info("host %s: engine %s warmed up in %s", h->conf->name, engine_name(h, h->target),
                         format_timespan(t, sizeof(t), took / USEC_PER_MSEC * USEC_PER_MSEC) ?: "?");
        host_engine_restore_then_up(h);
}

static int warmup_on_headers(Upstream *u, const UpstreamResponse *resp, void *userdata) {
        Host *h = userdata;
        h->probe_status = resp->status;
        return 0;
}

/* NULL for a 2xx answer to a warm-up, else what was wrong with it */
static const char *warmup_error(const Host *h, char what[static 32]) {
        if (h->probe_status / 100 == 2)
                return NULL;
        snprintf(what, 32, "it answered %d", h->probe_status);
        return what;
}

static void warmup_on_complete(Upstream *u, void *userdata) {
        char what[32];
        warmup_done(userdata, warmup_error(userdata, what));
}

static void warmup_on_error(Upstream *u, int error, bool started, void *userdata) {
        warmup_done(userdata, upstream_strerror(error));
}

static const UpstreamCallbacks warmup_callbacks = {
        .on_headers = warmup_on_headers,
        .on_complete = warmup_on_complete,
        .on_error = warmup_on_error,
};

static int warmup_send(Host *h, size_t engine, const UpstreamCallbacks *cb) {
        const EngineConf *e = h->engines[engine].conf;
        const HttpUrl *url = h->engines[engine].url;
        Buffer req = {};
        Upstream **slot = cb == &warmup_callbacks ? &h->warmup : &h->prime_upstream;
        char length[32];
        int r;

        h->probe_status = 0;
        snprintf(length, sizeof(length), "%zu", e->warmup_size);
        if (http_write_request_head(&req, "POST", url->base_path, "/v1/chat/completions", url->authority,
                                    "User-Agent", "modelgate (warm-up)", "Content-Type", "application/json",
                                    "Content-Length", length, NULL) < 0 ||
            buffer_append(&req, e->warmup_body, e->warmup_size) < 0) {
                buffer_done(&req);
                return -ENOMEM;
        }
        r = upstream_start(h->env.pool, url, &req, false, cb, h, slot);
        buffer_done(&req);
        if (r < 0)
                return r;
        (void)upstream_set_idle_timeout(*slot, h->config->upstream_idle_timeout_usec);
        return 0;
}

/* PrimeAfterIdleSec=: the warm-up again after that long without traffic, once per idle period. It is a
 * request in flight like any other (a switch waits for it), but not traffic for the idle stop. */
static void prime_finished(Host *h, const char *error) {
        h->prime_upstream = NULL;
        if (h->priming) {
                sched_remove(&h->sched, host_now(h), &h->prime);
                h->priming = false;
        }
        if (error)
                log_warning("host %s: priming engine %s failed: %s", h->conf->name,
                            engine_name(h, h->running), error);
        else if (h->running >= 0) {
                char t[FORMAT_TIMESPAN_MAX];
                log_info("host %s: engine %s primed after %s idle (PrimeAfterIdleSec=)", h->conf->name,
                         engine_name(h, h->running),
                         format_timespan(t, sizeof(t), h->engines[h->running].conf->prime_after_idle_usec)
                                 ?: "?");
        }
        host_schedule_later(h);
}

static void prime_on_complete(Upstream *u, void *userdata) {
        char what[32];
        prime_finished(userdata, warmup_error(userdata, what));
}

static void prime_on_error(Upstream *u, int error, bool started, void *userdata) {
        prime_finished(userdata, upstream_strerror(error));
}

static const UpstreamCallbacks prime_callbacks = {
        .on_headers = warmup_on_headers,
        .on_complete = prime_on_complete,
        .on_error = prime_on_error,
};

/* When the running engine is due for a prime, or USEC_INFINITY. */
static usec_t prime_at(const Host *h) {
        usec_t idle_since;

        if (!h->engine_up || h->running < 0 || h->phase != PHASE_NONE || h->priming ||
            h->sched.n_in_flight > 0 || h->sched.n_waiting > 0)
                return USEC_INFINITY;
        const EngineConf *e = h->engines[h->running].conf;
        if (!e->warmup_body || e->prime_after_idle_usec == 0 || e->prime_after_idle_usec == USEC_INFINITY)
                return USEC_INFINITY;
        idle_since = MAX(h->sched.up_at, h->sched.last_done);
        if (h->primed_for == idle_since)
                return USEC_INFINITY; /* primed already; the next traffic starts a new idle period */
        return idle_since + e->prime_after_idle_usec;
}

int host_prime_timer_cb(sd_event_source *s, uint64_t usec, void *userdata) {
        Host *h = userdata;
        usec_t now = host_now(h), at = prime_at(h);

        if (at == USEC_INFINITY || at > now)
                return 0;
        h->primed_for = MAX(h->sched.up_at, h->sched.last_done);
        if (!sched_add(&h->sched, now, &h->prime, (size_t)h->running))
                /* it waits behind something: let the scheduler have it back */
                return sched_remove(&h->sched, now, &h->prime), 0;
        h->prime.background = true;
        h->priming = true;
        if (warmup_send(h, (size_t)h->running, &prime_callbacks) < 0)
                prime_finished(h, "out of memory");
        return 0;
}

void host_prime_rearm(Host *h) {
        assert(h);
        usec_t at = prime_at(h);

        if (!h->prime_timer)
                return;
        if (at == USEC_INFINITY) {
                (void)sd_event_source_set_enabled(h->prime_timer, SD_EVENT_OFF);
                return;
        }
        (void)sd_event_source_set_time(h->prime_timer, at);
        (void)sd_event_source_set_enabled(h->prime_timer, SD_EVENT_ONESHOT);
}

/* rule:engine-unanswered: the unit is active and its URL gives no answer at all (a refused or reset
 * connection, none in time): a few seconds of that is almost always a wrong address, the engine listening
 * on 127.0.0.1 where URL= points at the host's LAN address. The wait goes on to StartTimeoutSec= (a
 * container may still be pulling its image), but it is said: once in the log, in LastError, to the
 * waiting requests' keepalive comments, and in their final error. */
static void health_unanswered(Host *h, const char *reason) {
        usec_t now = host_now(h);
        const HttpUrl *url = h->engines[h->target].url;
        _cleanup_free_ char *words = NULL;

        if (h->unanswered)
                return;
        if (h->unanswered_since == 0) {
                h->unanswered_since = now;
                return;
        }
        if (now - h->unanswered_since < ENGINE_UNANSWERED_USEC)
                return;
        if (asprintf(&words,
                     "engine %s (%s) is active but nothing answers at %s (%s): is the engine listening "
                     "where URL= points?",
                     engine_name(h, h->target), engine_unit(h, h->target), url->text, reason) < 0)
                return;
        log_warning("host %s: %s", h->conf->name, words);
        host_set_last_error(h, words);
        h->unanswered = TAKE_PTR(words);
        host_changed(h);
}

const char *host_unanswered(const Host *h) {
        assert(h);
        return h->phase == PHASE_HEALTH ? h->unanswered : NULL;
}

void host_unanswered_reset(Host *h) {
        assert(h);
        h->unanswered_since = 0;
        h->unanswered = mfree(h->unanswered);
}

static void health_on_complete(Upstream *u, void *userdata) {
        Host *h = userdata;

        h->probe = NULL;
        h->unanswered_since = 0; /* something listens there: a 503 while it loads is an answer */
        if (h->probe_status != 200) {
                probe_again(h);
                return;
        }
        /* ready means answers at once: the first request must not pay the model's cold start */
        if (!h->adopting && h->engines[h->target].conf->warmup_body) {
                h->warmup_start = host_now(h);
                if (warmup_send(h, (size_t)h->target, &warmup_callbacks) >= 0)
                        return;
        }
        host_engine_restore_then_up(h);
}

static void health_on_error(Upstream *u, int error, bool started, void *userdata) {
        Host *h = userdata;

        h->probe = NULL;
        if (started)
                h->unanswered_since = 0;
        else
                health_unanswered(h, upstream_strerror(error));
        probe_again(h);
}

static const UpstreamCallbacks health_callbacks = {
        .on_headers = host_probe_on_headers,
        .on_complete = health_on_complete,
        .on_error = health_on_error,
};

int host_probe_start(Host *h, const UpstreamCallbacks *cb, usec_t timeout) {
        assert(h);
        const HttpUrl *url = h->engines[h->target].url;
        Buffer req = {};
        int r;

        h->probe_status = 0;
        if (http_write_request_head(&req, "GET", url->base_path, "/health", url->authority, "User-Agent",
                                    "modelgate", NULL) < 0) {
                buffer_done(&req);
                return -ENOMEM;
        }
        r = upstream_start(h->env.pool, url, &req, false, cb, h, &h->probe);
        buffer_done(&req);
        if (r < 0)
                return r;
        (void)upstream_set_deadline(h->probe, timeout);
        return 0;
}

void host_probe_health(Host *h) {
        int r = host_probe_start(h, &health_callbacks, HEALTH_PROBE_TIMEOUT_USEC);

        if (r < 0) {
                if (r != -ENOMEM)
                        health_unanswered(h, upstream_strerror(r)); /* refused at once (a unix socket) */
                probe_again(h);
        }
}

int host_probe_timer_cb(sd_event_source *s, uint64_t usec, void *userdata) {
        Host *h = userdata;

        if (h->phase == PHASE_HEALTH)
                host_probe_health(h);
        return 0;
}
