/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The switch of a host's GPU from one engine to another, and what its bus
 * says meanwhile. At most one switch runs at a time, in phases:
 *   BUSY_CHECK  BusyUnits= active? (ListUnitsByPatterns)
 *   PORT_PROBE  no engine unit runs, yet something answers on the engine's port?
 *   STOPPING    StopUnit(replace) of each other running engine unit, to its JobRemoved; only the host's
 *               own engine units, over its own bus (rule:own-units-only)
 *   STARTING    StartUnit(fail) of the target, to its JobRemoved, then a fresh read of the
 *               unit: "done" can hide a condition refusal or an instant death (rule:job-done-is-not-running)
 *   HEALTH      GET /health until 200, bounded by StartTimeoutSec= (rule:ready-is-health)
 * A refusal (423) or failure (502) ends the switch and answers everyone who
 * waited for that engine. The same HEALTH phase adopts an engine found
 * running when the bus comes up. The bus's news (up, down, a unit changed)
 * lives here too, since it starts, ends or fails these phases; the state the
 * host shows, which the phases mostly decide, is host-view.c's. *When* to switch
 * is the Sched's (host-state.c carries its actions out). Each of these
 * events is one log line of its own, once (rule:host-log-lines). */

#include <assert.h>
#include <stdio.h>
#include <string.h>
#include <signal.h>
#include <sys/uio.h>
#include <sys/wait.h>

#include "modelgated/catalog/catalog.h"
#include "modelgated/host/host-internal.h"
#include "modelgated/records/metrics.h"
#include "modelgated/sched/exit-status.h"
#include "shared/errno-util.h"
#include "shared/log.h"
#include "shared/message-id.h"
#include "shared/strv.h"

static void phase_stop_others(Host *h);
static void phase_health(Host *h, bool adopting);

/* The switch */

void host_switch_reset(Host *h) {
        assert(h);
        if (h->phase >= PHASE_LEASE && h->phase <= PHASE_HEALTH && h->target >= 0) {
                /* rule:queued-and-switch: its waiting requests are told after this, and say how long */
                h->last_switch_target = h->target;
                h->last_switch_start = h->switch_start;
                h->last_switch_end = host_now(h);
        }
        h->phase = PHASE_NONE;
        h->target = -1;
        h->adopting = false;
        h->for_model = mfree(h->for_model);
        h->refusal = mfree(h->refusal);
        h->probe = upstream_cancel(h->probe);
        h->warmup = upstream_cancel(h->warmup);
        host_unanswered_reset(h);
        (void)sd_event_source_set_enabled(h->deadline, SD_EVENT_OFF);
        (void)sd_event_source_set_enabled(h->probe_timer, SD_EVENT_OFF);
        if (h->bus)
                host_bus_forget(h->bus, h);
        host_shared_reset(h); /* after the forget: the lease's StopUnit is sent, not forgotten */
}

void host_switch_adopt(Host *h, size_t engine) {
        assert(h);
        host_switch_reset(h);
        h->target = (ssize_t)engine;
        h->switch_start = host_now(h);
        phase_health(h, true);
        host_schedule_later(h);
}

void host_switch_drop(Host *h, const char *why) {
        assert(h);
        ssize_t target = h->target;

        log_notice("host %s: switch to %s dropped: %s", h->conf->name, engine_name(h, target), why);
        host_switch_reset(h);
        /* nobody waits for it: the failure answers nobody, and the engine that runs keeps running */
        sched_switch_failed(&h->sched, host_now(h), 503, h->engine_up ? h->running : -1);
        host_update_state(h);
        host_schedule_later(h);
}

/* The switch ends without the engine: everyone waiting for it gets 'status'. */
static void switch_fail(Host *h, int status, const char *message) {
        /* a refusal before anything was stopped leaves the running engine as it was */
        ssize_t still = h->engine_up && h->running >= 0 && h->running != h->target ? h->running : -1;

        host_switch_reset(h);
        if (status != 423)
                host_busy_clear(h);
        free(h->fail_message);
        h->fail_message = strdup(message);
        host_set_last_error(h, message);
        sched_switch_failed(&h->sched, host_now(h), status, still);
        if (still < 0) {
                h->running = -1;
                h->engine_up = false;
                catalog_engine_down(h->catalog);
        }
        host_update_state(h);
        host_schedule_later(h);
}

static void switch_refuse_busy(Host *h, HostBusyKind kind, const char *reason) {
        char msg[1600]; /* reason: up to 1100 (owner_read()) */

        log_warning("host %s: GPU busy (%s), switch to %s refused", h->conf->name, reason,
                    engine_name(h, h->target));
        metrics_refusal(h->env.metrics, h->conf->name);
        snprintf(msg, sizeof(msg),
                 "the GPU of host '%s' is in use by someone else (%s), so modelgate did not switch it to "
                 "engine '%s'; ask again once that work is done",
                 h->conf->name, reason, engine_name(h, h->target));
        host_busy_set(h, kind, h->target);
        switch_fail(h, 423, msg);
}

static void switch_fail_engine(Host *h, const char *what) {
        char msg[1024];

        log_error("host %s: engine %s (%s) %s", h->conf->name, engine_name(h, h->target),
                  engine_unit(h, h->target), what);
        snprintf(msg, sizeof(msg), "engine '%s' of host '%s' (unit %s) %s", engine_name(h, h->target),
                 h->conf->name, engine_unit(h, h->target), what);
        switch_fail(h, 502, msg);
}

/* rule:failed-start-hold: the engine itself failed to start (its job failed, its unit is not active after
 * it, it died or never answered /health in StartTimeoutSec=): its requests get these words at once for
 * FailedStartHoldSec=, so that each re-send of a failed turn does not start the broken unit again. The
 * waiting ones get the very same words now. */
static void switch_fail_start(Host *h, const char *what) {
        char msg[1024], t[FORMAT_TIMESPAN_MAX];
        ssize_t i = h->target;
        usec_t hold = h->sched.config.failed_start_hold;

        if (hold == 0 || i < 0) {
                switch_fail_engine(h, what);
                return;
        }
        snprintf(msg, sizeof(msg), "%s; modelgate does not start it again for %s (FailedStartHoldSec=) or "
                 "until 'modelgatectl reset-failed %s'", what,
                 hold == USEC_INFINITY ? "ever" : format_timespan(t, sizeof(t), hold) ?: "?", h->conf->name);
        sched_start_failed(&h->sched, host_now(h), (size_t)i);
        switch_fail_engine(h, msg);
        (void)free_and_strdup(&h->held_reasons[i], h->fail_message);
        h->holds_serial++;
        log_notice("host %s: engine %s held after its failed start: its requests get the same 502 %s%s",
                   h->conf->name, engine_name(h, i), hold == USEC_INFINITY ? "until reset-failed" : "for ",
                   hold == USEC_INFINITY ? "" : format_timespan(t, sizeof(t), hold) ?: "?");
}

/* "host 3090: engine fork up after 12.3s", with the switch's fields under the journal (rule:journal-fields)
 */
static void log_switch_done(Host *h, usec_t took) {
        char line[LOG_MESSAGE_ROOM + 512], f[4][256];
        struct iovec iov[4];
        int n;

        n = snprintf(line + LOG_MESSAGE_ROOM, sizeof(line) - LOG_MESSAGE_ROOM,
                     "host %s: engine %s up after %llu.%01llus", h->conf->name, engine_name(h, h->target),
                     (unsigned long long)(took / USEC_PER_SEC),
                     (unsigned long long)(took % USEC_PER_SEC / (100 * USEC_PER_MSEC)));
        n = MIN(MAX(n, 0), (int)(sizeof(line) - LOG_MESSAGE_ROOM - 1));
        if (!log_journal()) {
                log_line(LOG_NOTICE, line + LOG_MESSAGE_ROOM, (size_t)n);
                return;
        }
        /* names from the configuration: nothing in them to escape */
        char usec[24];
        snprintf(usec, sizeof(usec), "%llu", (unsigned long long)took);
        iov[0] = log_field(f[0], sizeof(f[0]), "MODELGATE_HOST", h->conf->name);
        iov[1] = log_field(f[1], sizeof(f[1]), "MODELGATE_ENGINE_FROM", engine_name(h, h->switch_from));
        iov[2] = log_field(f[2], sizeof(f[2]), "MODELGATE_ENGINE_TO", engine_name(h, h->target));
        iov[3] = log_field(f[3], sizeof(f[3]), "MODELGATE_SWITCH_USEC", usec);
        log_line_fields(LOG_NOTICE, MESSAGE_ID_SWITCH, line, (size_t)n, iov, 4);
}

void host_engine_is_up(Host *h) {
        assert(h);
        usec_t took = host_now(h) - h->switch_start;

        if (h->adopting)
                log_notice("host %s: engine %s adopted, it was already running", h->conf->name,
                           engine_name(h, h->target));
        else {
                log_switch_done(h, took);
                metrics_switch_time(h->env.metrics, h->conf->name, engine_name(h, h->target), took);
        }
        h->running = h->target;
        h->engine_up = true;
        host_busy_clear(h);
        h->up_since = host_now(h);
        (void)host_unhold(h, (size_t)h->target, "it is up after all"); /* started without modelgate */
        sched_engine_up(&h->sched, h->up_since, (size_t)h->target);
        /* rule:hold-down-from-host: an engine this instance did not start counts from the host's clock;
         * one it started, from when it saw it serve (later, when the unit is active before it serves) */
        if (h->adopting)
                sched_set_up_at(&h->sched, host_shared_up_at(h, (size_t)h->target, h->up_since));
        catalog_engine_up(h->catalog, (size_t)h->target);
        host_switch_reset(h);
        host_update_state(h);
        host_schedule_later(h);
}

/* No engine runs on the host any more (stopped on its own, idle-stopped, or given up on). */
static void engine_gone(Host *h) {
        h->running = -1;
        h->engine_up = false;
        h->http_down = false; /* it was that engine's URL that failed */
        sched_engine_down(&h->sched, host_now(h));
        catalog_engine_down(h->catalog);
        host_update_state(h);
        host_schedule_later(h);
}

static void give_up_stopped(HostBus *b, size_t i, const char *result, const char *error, void *userdata) {
        Host *h = userdata;

        h->phase = PHASE_NONE;
        engine_gone(h);
}

int host_deadline_cb(sd_event_source *s, uint64_t usec, void *userdata) {
        Host *h = userdata;
        char what[512], t[FORMAT_TIMESPAN_MAX];
        ssize_t target = h->target;

        if (h->phase != PHASE_HEALTH)
                return 0;
        /* rule:engine-unanswered: its URL, when that is what answered nothing */
        snprintf(what, sizeof(what),
                 "did not answer /health with 200 within %s (result: timeout); it was stopped%s%s%s",
                 format_timespan(t, sizeof(t), h->engines[target].conf->start_timeout_usec) ?: "?",
                 h->unanswered ? "; nothing answered at " : "",
                 h->unanswered ? h->engines[target].url->text : "",
                 h->unanswered ? " while its unit was active: is the engine listening where URL= points?"
                               : "");
        switch_fail_start(h, what);
        /* an engine that never became healthy must not keep the GPU */
        if (host_bus_job(h->bus, "StopUnit", (size_t)target, "replace", give_up_stopped, h) >= 0) {
                h->phase = PHASE_GIVING_UP;
                h->running = target;
                sched_engine_stopping(&h->sched);
                host_update_state(h);
        }
        return 0;
}

static void phase_health(Host *h, bool adopting) {
        usec_t timeout = h->engines[h->target].conf->start_timeout_usec;

        if (adopting)
                sched_engine_starting(&h->sched, (size_t)h->target);
        h->phase = PHASE_HEALTH;
        h->adopting = adopting;
        h->running = h->target;
        h->engine_up = false;
        host_update_state(h);
        if (timeout != USEC_INFINITY) {
                usec_t left = host_now(h) - h->switch_start;
                left = left < timeout ? timeout - left : 0;
                (void)sd_event_source_set_time_relative(h->deadline, left);
                (void)sd_event_source_set_enabled(h->deadline, SD_EVENT_ONESHOT);
        }
        host_probe_health(h);
}

/* STARTING */

/* How the unit's main process ended, as systemctl status says it (rule:exit-status-words): ", exit status
 * 3", ", killed by signal SIGKILL", or "" when it never ran. systemd sends the Service interface's
 * changes before the Unit's, so a PropertiesChanged that says failed finds these read already. */
static void unit_exit_how(const UnitInfo *u, char *buf, size_t l) {
        buf[0] = 0;
        if (u->exec_main_code == CLD_EXITED)
                exit_status_describe(u->exec_main_status, buf, l);
        else if (u->exec_main_code == CLD_KILLED || u->exec_main_code == CLD_DUMPED)
                snprintf(buf, l, ", killed by signal SIG%s%s", sigabbrev_np(u->exec_main_status) ?: "?",
                         u->exec_main_code == CLD_DUMPED ? " (core dumped)" : "");
}

/* rule:gpu-owner: the refusal says whom the GPU is for, when the host's gpu.owner says it */
static void owner_read(HostBus *b, const char *text, const char *error, void *userdata) {
        Host *h = userdata;
        char what[1100]; /* the refusal (256) and up to 200 bytes of the host's text, each escaped to 4 */

        if (text && *text && !streq(text, "modelgate"))
                snprintf(what, sizeof(what), "%s; gpu.owner names '%s'", h->refusal, text);
        else {
                if (error)
                        log_debug("host %s: who owns the GPU could not be read: %s", h->conf->name, error);
                snprintf(what, sizeof(what), "%s", h->refusal);
        }
        switch_refuse_busy(h, HOST_BUSY_CONDITION, what);
}

static void start_checked(HostBus *b, char **units, const char *error, void *userdata) {
        Host *h = userdata;
        const UnitInfo *u = host_bus_unit(b, (size_t)h->target);
        char what[512];

        if (error) {
                snprintf(what, sizeof(what), "could not be read after its start: %s", error);
                switch_fail_engine(h, what);
                return;
        }
        if (unit_info_is_running(u)) {
                phase_health(h, false);
                return;
        }
        if (!u->condition_result || streq_ptr(u->result, "exec-condition")) {
                snprintf(what, sizeof(what), "%s refused to start: its %s failed", u->name,
                         streq_ptr(u->result, "exec-condition") ? "ExecCondition=" : "Condition…=");
                /* the example engines' ExecCondition= refuses while %t/gpu.owner names someone else: the
                 * host is asked what it says before the waiting requests are answered */
                if (streq_ptr(u->result, "exec-condition") && (h->refusal = strdup(what)) &&
                    host_bus_read_gpu_owner(b, owner_read, h) >= 0)
                        return;
                h->refusal = mfree(h->refusal);
                switch_refuse_busy(h, HOST_BUSY_CONDITION, what);
                return;
        }
        char how[256];
        unit_exit_how(u, how, sizeof(how));
        /* rule:engine-logs: what the engine itself said is in its journal, on its host */
        snprintf(what, sizeof(what),
                 "failed to start (result: %s%s, state: %s); its log: 'modelgatectl logs %s %s'",
                 u->result && !streq(u->result, "success") ? u->result : "exit-code", how,
                 strna(u->active_state), h->conf->name, engine_name(h, h->target));
        switch_fail_start(h, what);
}

static void start_done(HostBus *b, size_t i, const char *result, const char *error, void *userdata) {
        Host *h = userdata;
        char what[512];

        if (!result) {
                snprintf(what, sizeof(what), "could not be started: %s", error);
                switch_fail_start(h, what);
                return;
        }
        /* "done" says little (rule:job-done-is-not-running); the unit's own state says the rest */
        int r = host_bus_refresh_unit(b, i, start_checked, h);
        if (ERRNO_IS_DISCONNECT(r))
                /* the bus went away between the job's end and this read: its loss ends the switch, and
                 * the waiting requests hear "host down" (503), not that the engine failed */
                return;
        if (r < 0) {
                snprintf(what, sizeof(what), "could not be read after its start (job result: %s)", result);
                switch_fail_engine(h, what);
        }
}

static void phase_start(Host *h) {
        char what[256];
        int r;

        if (unit_info_is_running(host_bus_unit(h->bus, (size_t)h->target))) {
                phase_health(h, false);
                return;
        }
        h->phase = PHASE_STARTING;
        h->running = -1;
        h->engine_up = false;
        host_update_state(h);
        r = host_bus_job(h->bus, "StartUnit", (size_t)h->target, "fail", start_done, h);
        if (r < 0) {
                snprintf(what, sizeof(what), "could not be started: %s", strerror(-r));
                switch_fail_engine(h, what);
        }
}

/* STOPPING */

static void stop_done(HostBus *b, size_t i, const char *result, const char *error, void *userdata) {
        Host *h = userdata;
        char msg[512];

        if (!result || !streq(result, "done")) {
                snprintf(msg, sizeof(msg), "could not stop engine unit %s of host '%s' (%s)",
                         engine_unit(h, i), h->conf->name, result ?: error);
                log_error("host %s: %s", h->conf->name, msg);
                switch_fail(h, 502, msg);
                return;
        }
        if ((ssize_t)i == h->running) {
                h->running = -1;
                h->engine_up = false;
        }
        phase_stop_others(h);
}

static void phase_stop_others(Host *h) {
        int r;

        for (size_t i = 0; i < h->n_engines; i++) {
                if ((ssize_t)i == h->target || !unit_info_is_running(host_bus_unit(h->bus, i)))
                        continue;
                h->phase = PHASE_STOPPING;
                host_update_state(h);
                r = host_bus_job(h->bus, "StopUnit", i, "replace", stop_done, h);
                if (r < 0) {
                        char what[256];
                        snprintf(what, sizeof(what), "could not be started: stopping %s failed: %s",
                                 engine_unit(h, (ssize_t)i), strerror(-r));
                        switch_fail_engine(h, what);
                }
                return;
        }
        phase_start(h);
}

/* PORT_PROBE: something answers where the engine would listen, while none of our units runs */

static void port_probe_answered(Host *h) {
        char reason[300];

        snprintf(reason, sizeof(reason), "a server answers on %s while no engine unit of the host is active",
                 h->engines[h->target].url->text);
        switch_refuse_busy(h, HOST_BUSY_PORT, reason);
}

static void port_on_complete(Upstream *u, void *userdata) {
        Host *h = userdata;
        h->probe = NULL;
        port_probe_answered(h);
}

static void port_on_error(Upstream *u, int error, bool started, void *userdata) {
        Host *h = userdata;

        h->probe = NULL;
        if (started) {
                port_probe_answered(h);
                return;
        }
        phase_stop_others(h);
}

static const UpstreamCallbacks port_callbacks = {
        .on_headers = host_probe_on_headers,
        .on_complete = port_on_complete,
        .on_error = port_on_error,
};

static bool any_engine_running(Host *h) {
        for (size_t i = 0; i < h->n_engines; i++)
                if (unit_info_is_running(host_bus_unit(h->bus, i)))
                        return true;
        return false;
}

/* SLOTS: the engine that runs (another than the target) may be at work for someone else */
static void phase_slots(Host *h) {
        for (size_t i = 0; i < h->n_engines; i++)
                if ((ssize_t)i != h->target && unit_info_is_running(host_bus_unit(h->bus, i))) {
                        h->phase = PHASE_SLOTS;
                        host_slots_check(h, (ssize_t)i, phase_stop_others);
                        return;
                }
        phase_stop_others(h);
}

static void phase_port_probe(Host *h) {
        if (any_engine_running(h)) {
                phase_slots(h);
                return;
        }
        h->phase = PHASE_PORT_PROBE;
        if (host_probe_start(h, &port_callbacks, PORT_PROBE_TIMEOUT_USEC) < 0)
                phase_stop_others(h);
}

/* BUSY_CHECK */

static void busy_listed(HostBus *b, char **units, const char *error, void *userdata) {
        Host *h = userdata;
        char msg[512];

        if (error) {
                snprintf(msg, sizeof(msg), "could not be started: checking BusyUnits= failed: %s", error);
                switch_fail_engine(h, msg);
                return;
        }
        if (!strv_isempty(units)) {
                _cleanup_free_ char *names = strv_join(units, ", ");
                snprintf(msg, sizeof(msg), "%s %s active", names ?: units[0], units[1] ? "are" : "is");
                switch_refuse_busy(h, HOST_BUSY_UNITS, msg);
                return;
        }
        phase_port_probe(h);
}

static void phase_busy_check(Host *h) {
        int r;

        h->phase = PHASE_BUSY_CHECK;
        host_update_state(h);
        if (strv_isempty(h->conf->busy_units)) {
                phase_port_probe(h);
                return;
        }
        r = host_bus_list_active(h->bus, h->conf->busy_units, busy_listed, h);
        if (r < 0)
                busy_listed(h->bus, NULL, strerror(-r), h);
}

void host_begin_switch(Host *h) {
        assert(h);

        h->switch_start = host_now(h);
        h->switch_from = h->running;
        log_notice("host %s: switching to engine %s for %s", h->conf->name, engine_name(h, h->target),
                   h->for_model ?: "a request");
        h->phase = PHASE_LEASE;
        host_update_state(h);
        host_lease_take(h, phase_busy_check);
}

/* IDLE_STOP */

static void idle_stopped(HostBus *b, size_t i, const char *result, const char *error, void *userdata) {
        Host *h = userdata;
        char t[FORMAT_TIMESPAN_MAX];

        if (result && streq(result, "done") && h->stop_requested)
                log_notice("host %s: engine %s stopped on request", h->conf->name,
                           engine_name(h, (ssize_t)i));
        else if (result && streq(result, "done"))
                /* the rule's time, not the timer's (which fires a little after it) */
                log_notice("host %s: idle %s, engine %s stopped", h->conf->name,
                           format_timespan(t, sizeof(t), host_engine_idle_stop(h, (ssize_t)i)) ?: "?",
                           engine_name(h, (ssize_t)i));
        else
                log_warning("host %s: idle stop of engine %s failed: %s", h->conf->name,
                            engine_name(h, (ssize_t)i), result ?: strna(error));
        h->phase = PHASE_NONE;
        h->stop_requested = false;
        engine_gone(h);
}

void host_idle_stop(Host *h, ssize_t engine, bool requested) {
        assert(h);
        h->phase = PHASE_IDLE_STOP;
        h->stop_requested = requested;
        h->target = -1;
        host_update_state(h);
        if (host_bus_job(h->bus, "StopUnit", (size_t)engine, "replace", idle_stopped, h) < 0)
                idle_stopped(h->bus, (size_t)engine, NULL, "the bus is not connected", h);
}

/* The bus */

static void bus_up(HostBus *b, void *userdata) {
        Host *h = userdata;
        ssize_t found = -1;
        bool served_on = h->sched.bus_gone;

        h->probed = true;
        h->bus_down = false;
        h->down_reason = mfree(h->down_reason);
        sched_host_down(&h->sched, false);
        sched_bus_gone(&h->sched, false);
        host_check_units(h);
        for (size_t i = 0; i < h->n_engines; i++)
                if (unit_info_is_running(host_bus_unit(b, i))) {
                        if (found >= 0)
                                log_warning("host %s: engine units %s and %s are both active", h->conf->name,
                                            engine_unit(h, found), engine_unit(h, (ssize_t)i));
                        else
                                found = (ssize_t)i;
                }
        host_busy_units_changed(h);
        /* rule:bus-gone: the engine that served on while the bus was gone still runs: it stays as it is,
         * its hold-down and idle clock too */
        if (served_on && found >= 0 && found == h->running && h->engine_up) {
                log_notice("host %s: bus back; engine %s served on meanwhile", h->conf->name,
                           engine_name(h, found));
                host_shared_bus_up(h);
                host_update_state(h);
                host_schedule_later(h);
                return;
        }
        sched_engine_down(&h->sched, host_now(h));
        h->running = -1;
        h->engine_up = false;
        catalog_engine_down(h->catalog);
        host_shared_bus_up(h);
        if (found >= 0) {
                /* the daemon may have exited idle and come back: the running engine is ours */
                h->target = found;
                h->switch_start = host_now(h);
                phase_health(h, true);
        }
        host_update_state(h);
        host_schedule_later(h);
}

static void bus_down(HostBus *b, const char *reason, void *userdata) {
        Host *h = userdata;
        /* rule:bus-gone: the engine that serves (no stop of it begun) goes on serving on its URL, which the
         * catalog's probe checks as before; only what needs the bus waits for it */
        bool serves = h->probed && h->engine_up && h->running >= 0 && h->phase <= PHASE_SLOTS;

        host_switch_reset(h);
        h->probed = true;
        h->bus_down = true;
        free(h->down_reason);
        h->down_reason = strdup(reason);
        sched_gpu_busy(&h->sched, false); /* not known without the bus */
        if (serves) {
                /* said once: each reconnect that fails comes here again */
                if (!h->sched.bus_gone)
                        log_warning("host %s: bus gone (%s); engine %s serves on, switches wait for the bus",
                                    h->conf->name, reason, engine_name(h, h->running));
                sched_bus_gone(&h->sched, true);
        } else {
                sched_bus_gone(&h->sched, false); /* nothing serves on: the host is down */
                h->running = -1;
                h->engine_up = false;
                sched_host_down(&h->sched, true);
                catalog_engine_down(h->catalog);
        }
        host_update_state(h);
        host_schedule_later(h);
}

static void busy_changed(HostBus *b, void *userdata) {
        host_busy_units_changed(userdata);
}

static void unit_changed(HostBus *b, size_t i, void *userdata) {
        Host *h = userdata;
        const UnitInfo *u = host_bus_unit(b, i);
        char what[512];

        if (i >= h->n_engines) {
                host_shared_unit_changed(h);
                return;
        }
        if (!unit_info_is_running(u)) {
                if ((ssize_t)i != h->running || h->phase == PHASE_STOPPING || h->phase == PHASE_GIVING_UP ||
                    h->phase == PHASE_IDLE_STOP)
                        return;
                if (h->phase >= PHASE_LEASE && h->phase <= PHASE_SLOTS) {
                        /* stopped before our switch stopped it (another instance's switch, a crash): our
                         * switch goes on from the host as it is now, and the scheduler's start stays */
                        log_notice("host %s: engine %s stopped while the switch to %s waited", h->conf->name,
                                   engine_name(h, (ssize_t)i), engine_name(h, h->target));
                        h->running = -1;
                        h->engine_up = false;
                        h->http_down = false;
                        catalog_engine_down(h->catalog);
                        host_update_state(h);
                        return;
                }
                if (h->sched.foreign_since > 0 && h->phase == PHASE_NONE) {
                        log_notice("host %s: engine %s stopped by another modelgate's switch", h->conf->name,
                                   engine_name(h, (ssize_t)i));
                        engine_gone(h);
                        return;
                }
                char how[256];
                unit_exit_how(u, how, sizeof(how));
                snprintf(what, sizeof(what),
                         "stopped%s (state: %s, result: %s%s); its log: 'modelgatectl logs %s %s'",
                         h->engine_up ? " on its own" : "", strna(u->active_state), strna(u->result), how,
                         h->conf->name, engine_name(h, (ssize_t)i));
                if (h->phase == PHASE_HEALTH && h->target == (ssize_t)i) {
                        switch_fail_start(h, what);
                        return;
                }
                log_warning("host %s: engine %s %s", h->conf->name, engine_name(h, (ssize_t)i), what);
                engine_gone(h);
                return;
        }
        if (h->running < 0 && h->phase == PHASE_NONE) {
                /* started by someone else (or restarted by systemd): ours all the same, once healthy */
                log_notice("host %s: engine unit %s became %s without modelgate", h->conf->name, u->name,
                           u->active_state);
                h->target = (ssize_t)i;
                h->switch_start = host_now(h);
                phase_health(h, true);
        }
}

const HostBusCallbacks host_bus_callbacks = {
        .on_up = bus_up,
        .on_down = bus_down,
        .on_unit_changed = unit_changed,
        .on_busy_changed = busy_changed,
};
