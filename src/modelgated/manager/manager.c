/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The Manager: the configuration and one Host per [Host] in step with it (hosts[i] is config->hosts[i]),
 * the hosts a reload left draining, and the reload itself, which never drops a connection
 * (rule:reload-drains). Socket-activated with a configuration that has errors, it holds the refusal instead
 * of hosts. */

#include <assert.h>
#include <stdio.h>
#include <string.h>
#include <systemd/sd-daemon.h>

#include "modelgated/access/access.h"
#include "modelgated/records/activity.h"
#include "modelgated/manager/engine-keys.h"
#include "modelgated/event/feed-hub.h"
#include "modelgated/host/host.h"
#include "modelgated/manager/manager.h"
#include "modelgated/manager/models-seen.h"
#include "modelgated/records/metrics.h"
#include "modelgated/records/run-record.h"
#include "modelgated/sched/model-memory.h"
#include "modelgated/upstream/upstream.h"
#include "shared/log.h"
#include "shared/strv.h"
#include "shared/time-util.h"

/* A crash loop (rule:crash-loop), for manager_record_run(): this many runs ended badly within the window.
 * Runs that end cleanly never count, so idle exits and re-activations, however many, cannot make one. */
#define CRASH_LOOP_RUNS 5
#define CRASH_LOOP_WINDOW (5 * USEC_PER_MINUTE)

struct Manager {
        sd_event *event;
        Config *config;
        char *config_path;
        bool user; /* a user instance: the user bus; else the system bus and polkit */

        Host **hosts;    /* per config->hosts[] */
        Host **draining; /* removed or replaced by a reload, answering what they had */
        size_t n_draining;
        sd_event_source *drain_source;

        /* Socket-activated with a configuration that has errors (rule:refusing-state): config is the
         * defaults, with no host, and every request is answered 503 with refusal until a reload brings a
         * good file. */
        char **config_errors;
        unsigned n_config_errors; /* also those past the CONFIG_ERRORS_MAX kept in config_errors */
        char *refusal;
        /* The runs before this one ended without a clean exit, CRASH_LOOP_RUNS times in CRASH_LOOP_WINDOW:
         * this run refuses like a broken file does, with no host, so that whatever crashed them is not
         * done again, until a reload or until those runs are older than the window. */
        RunRecord runs;
        bool crash_loop;
        unsigned warnings_serial; /* bumped when Warnings change in a way their number does not show */
        uint64_t config_serial;   /* bumped each time config is replaced */

        bool stopping;
        SocketWatchSet *sockets;
        UpstreamPool *pool;
        FeedHub *feed_hub;
        Activity *activity; /* rule:activity-feed: the requests and hosts as /activity shows them */
        Metrics *metrics;
        Access *access; /* daily counts; made by the first request [Access] counts */
        AliasMemory *alias_memory;
        ModelMemory *model_memory;  /* what each host last said of its models (models-seen.h) */
        bool model_memory_dirty;    /* times learned since it was written */
        ConvMap convs;              /* rule:resumable-streams: which host served each conversation */
        sd_event_source *conv_hold; /* when the conversations stop keeping the daemon */

        const ManagerCallbacks *cb;
        void *userdata;
};

int manager_new(sd_event *event, bool user, Manager **ret) {
        Manager *m = calloc(1, sizeof(Manager));
        int r;

        if (!m)
                return -ENOMEM;
        m->event = sd_event_ref(event);
        m->user = user;
        m->config = config_new();
        m->metrics = metrics_new();
        m->alias_memory = alias_memory_new();
        m->model_memory = model_memory_new();
        r = m->config && m->metrics && m->alias_memory && m->model_memory ? 0 : -ENOMEM;
        if (r >= 0)
                models_seen_load(m->model_memory);
        if (r >= 0)
                r = socket_watch_set_new(m->event, &m->sockets);
        if (r >= 0)
                r = upstream_pool_new(m->event, m->sockets, &m->pool);
        if (r >= 0)
                r = feed_hub_new(m->event, &m->feed_hub);
        if (r >= 0)
                r = activity_new(m->event, &m->activity);
        if (r < 0) {
                manager_free(m);
                return r;
        }
        *ret = m;
        return 0;
}

Manager *manager_free(Manager *m) {
        if (!m)
                return NULL;
        m->access = access_free(m->access);
        if (m->pool)
                upstream_pool_stop(m->pool);
        for (size_t i = 0; m->hosts && i < m->config->n_hosts; i++)
                host_free(m->hosts[i]);
        free(m->hosts);
        for (size_t i = 0; i < m->n_draining; i++)
                host_free(m->draining[i]);
        free(m->draining);
        sd_event_source_disable_unref(m->drain_source);
        config_unref(m->config);
        metrics_free(m->metrics);
        alias_memory_free(m->alias_memory);
        /* the times of the last reads, which were not worth a write each */
        if (m->model_memory_dirty)
                models_seen_save(m->model_memory);
        model_memory_free(m->model_memory);
        conv_map_done(&m->convs);
        sd_event_source_disable_unref(m->conv_hold);
        m->feed_hub = feed_hub_free(m->feed_hub);
        m->activity = activity_free(m->activity);
        /* after the hosts: their upstreams were the pool's */
        m->pool = upstream_pool_free(m->pool);
        m->sockets = socket_watch_set_free(m->sockets);
        free(m->config_path);
        strv_free(m->config_errors);
        free(m->refusal);
        run_record_done(&m->runs);
        sd_event_unref(m->event);
        return mfree(m);
}

void manager_set_callbacks(Manager *m, const ManagerCallbacks *cb, void *userdata) {
        assert(m);
        m->cb = cb;
        m->userdata = userdata;
}

static const char *reload_command(Manager *m) {
        return config_reload_command(m->user);
}

/* The answer to every request, the STATUS= and the D-Bus warning of a daemon that refuses requests
 * (refusal is taken). */
static void manager_refuse(Manager *m, char *refusal) {
        free(m->refusal);
        m->refusal = refusal;
        m->warnings_serial++;
        (void)sd_notifyf(false, "STATUS=Refusing requests: %s", m->refusal);
}

static int manager_set_refusal(Manager *m, char **errors, unsigned n_total, int r) {
        char *refusal = config_refusal_message(errors, n_total, r, m->user);

        if (!refusal)
                return log_oom();
        manager_refuse(m, refusal);
        return 0;
}

int manager_record_run(Manager *m) {
        assert(m);
        _cleanup_free_ char *refusal = NULL;
        char w[FORMAT_TIMESPAN_MAX];
        unsigned unclean;
        int r;

        /* the wall clock: the runs are of other processes, before this boot's monotonic clock too */
        r = run_record_start(&m->runs, now_usec(CLOCK_REALTIME), CRASH_LOOP_WINDOW, &unclean);
        if (r < 0 || unclean < CRASH_LOOP_RUNS)
                return r;
        format_timespan(w, sizeof(w), CRASH_LOOP_WINDOW);
        if (asprintf(&refusal,
                     "modelgated ended %u times in the last %s without a clean exit "
                     "(it crashed or was killed: 'journalctl %s-u modelgate' says why); "
                     "it refuses requests until '%s' while it runs, or until those runs are %s old",
                     unclean, w, m->user ? "--user " : "", reload_command(m), w) < 0)
                return log_oom();
        log_error("%s", refusal);
        /* the defaults, with no host: nothing that ran before runs again */
        config_unref(m->config);
        if (!(m->config = config_new()))
                return log_oom();
        m->config_serial++;
        m->crash_loop = true;
        manager_refuse(m, TAKE_PTR(refusal));
        return 0;
}

void manager_clean_exit(Manager *m) {
        assert(m);
        run_record_clean(&m->runs);
}

bool manager_crash_loop(Manager *m) {
        assert(m);
        return m->crash_loop;
}

int manager_load_config(Manager *m, const char *path) {
        assert(m);
        _cleanup_(config_unrefp) Config *c = config_new();
        int r;

        if (!c)
                return log_oom();
        if (free_and_strdup(&m->config_path, path) < 0)
                return log_oom();
        r = config_read(c, path);
        if (r < 0) {
                strv_free(m->config_errors);
                m->config_errors = TAKE_PTR(c->errors);
                m->n_config_errors = MAX(c->n_errors, 1u);
                if (!m->config_errors && strv_extend(&m->config_errors, strerror(-r)) < 0)
                        return log_oom();
                return r;
        }
        if (c->n_hosts == 0)
                log_warning("%s: no [Host] is configured; every model request will get 404", path);
        config_unref(m->config);
        m->config = TAKE_PTR(c);
        m->config_serial++;
        return 0;
}

unsigned manager_n_config_errors(Manager *m) {
        assert(m);
        return m->n_config_errors;
}

void manager_changed(Manager *m) {
        assert(m);
        if (m->n_draining > 0)
                /* a draining host may be done now; not freed from here, which runs inside its callbacks */
                (void)sd_event_source_set_enabled(m->drain_source, SD_EVENT_ONESHOT);
        if (m->cb && m->cb->changed)
                m->cb->changed(m->userdata);
}

static void manager_catalog_ready(Manager *m) {
        if (m->cb && m->cb->catalog_ready)
                m->cb->catalog_ready(m->userdata);
}

/* A Host's news (host.h), and what its owner does with it */

static void host_changed_cb(Host *h, void *userdata) {
        Manager *m = userdata;

        /* rule:activity-feed: a host event only while someone follows /activity (a cheap check); during
         * a switch always, for the switching phase of the requests that wait for it */
        if (activity_watched(m->activity) || host_switch_target(h) >= 0) {
                ActivityHost v;
                manager_activity_host(m, h, &v);
                activity_host_changed(m->activity, &v);
        }
        manager_changed(m);
}

static void host_catalog_ready_cb(Host *h, void *userdata) {
        manager_catalog_ready(userdata);
}

static void host_probed_cb(Host *h, void *userdata) {
        Manager *m = userdata;

        if (m->cb && m->cb->host_probed)
                m->cb->host_probed(m->userdata);
}

static void host_feed_cb(Host *h, const FeedEvent *e, void *userdata) {
        Manager *m = userdata;

        feed_hub_broadcast(m->feed_hub, e);
}

static void host_keys_learned_cb(Host *h, void *userdata) {
        Manager *m = userdata;

        /* one file for every host of the configuration: a draining host's engines are a current host's,
         * or nobody's any more */
        engine_keys_save(m->hosts, m->config->n_hosts);
}

static void host_listed_cb(Host *h, size_t i, bool changed, void *userdata) {
        Manager *m = userdata;

        if (models_seen_learn(m->model_memory, h, i, changed)) {
                models_seen_save(m->model_memory);
                m->model_memory_dirty = false;
        } else
                m->model_memory_dirty = true;
}

static const HostCallbacks host_callbacks = {
        .on_changed = host_changed_cb,
        .on_catalog_ready = host_catalog_ready_cb,
        .on_probed = host_probed_cb,
        .on_feed = host_feed_cb,
        .on_keys_learned = host_keys_learned_cb,
        .on_listed = host_listed_cb,
};

/* A Host of config, with the keys its engines served when they last ran. */
static Host *manager_new_host(Manager *m, Config *config, const HostConf *conf) {
        const HostEnv env = {
                .event = m->event,
                .pool = m->pool,
                .metrics = m->metrics,
                .cb = &host_callbacks,
                .userdata = m,
        };
        Host *h = host_new(&env, config, conf);

        if (h)
                engine_keys_load(h);
        return h;
}

Host *manager_host(Manager *m, const HostConf *h) {
        assert(m);
        size_t i = (size_t)(h - m->config->hosts);

        if (h >= m->config->hosts && i < m->config->n_hosts)
                return m->hosts[i];
        for (i = 0; i < m->config->n_hosts; i++)
                if (streq(m->config->hosts[i].name, h->name))
                        return m->hosts[i];
        for (i = 0; i < m->n_draining; i++)
                if (streq(host_conf(m->draining[i])->name, h->name))
                        return m->draining[i];
        return NULL;
}

static usec_t manager_now(Manager *m) {
        usec_t t;
        (void)sd_event_now(m->event, CLOCK_MONOTONIC, &t);
        return t;
}

bool manager_keeps_daemon(Manager *m) {
        assert(m);
        for (size_t i = 0; i < m->config->n_hosts; i++)
                if (host_keeps_daemon(m->hosts[i]))
                        return true;
        /* rule:resumable-streams: a session on a host is found again only through this daemon's memory */
        if (manager_now(m) < conv_map_hold_until(&m->convs))
                return true;
        return m->n_draining > 0;
}

void manager_stop(Manager *m) {
        assert(m);
        m->stopping = true;
        upstream_pool_stop(m->pool);
}

int manager_start(Manager *m) {
        assert(m);
        m->hosts = calloc(MAX(m->config->n_hosts, 1u), sizeof(Host *));
        if (!m->hosts)
                return log_oom();
        for (size_t i = 0; i < m->config->n_hosts; i++)
                if (!(m->hosts[i] = manager_new_host(m, m->config, &m->config->hosts[i])))
                        return log_oom();
        for (size_t i = 0; i < m->config->n_hosts; i++)
                host_start(m->hosts[i]);
        if (m->config->access.redis) /* rule:shared-counts: what a crash left owed goes out at once */
                access_configure(manager_access(m), m->config);
        if (m->config_errors)
                /* Exiting would leave the socket's clients hanging and systemd restarting us for nothing:
                 * every request gets the errors at once, until a reload brings a good file. The errors
                 * are in the log, once. */
                return manager_set_refusal(m, m->config_errors, m->n_config_errors, -EINVAL);
        return 0;
}

static bool host_is_draining(Manager *m, const char *name) {
        for (size_t i = 0; i < m->n_draining; i++)
                if (streq(host_conf(m->draining[i])->name, name))
                        return true;
        return false;
}

/* Frees the draining hosts that have answered everything, and starts the hosts that replaced them: two
 * Hosts switching one GPU at once could cut a stream. */
static int drain_cb(sd_event_source *s, void *userdata) {
        Manager *m = userdata;

        for (size_t i = 0; i < m->n_draining;) {
                Host *h = m->draining[i];
                if (!host_drained(h)) {
                        i++;
                        continue;
                }
                log_info("host %s: drained, the previous configuration's host is gone", host_conf(h)->name);
                _cleanup_free_ char *name = strdup(host_conf(h)->name);
                host_free(h);
                memmove(m->draining + i, m->draining + i + 1, (m->n_draining - i - 1) * sizeof(Host *));
                m->n_draining--;
                for (size_t j = 0; name && j < m->config->n_hosts; j++)
                        if (streq(m->config->hosts[j].name, name) && !host_is_draining(m, name))
                                host_start(m->hosts[j]);
        }
        /* not manager_changed(): that would wake this up again at once while a host still drains */
        if (m->cb && m->cb->changed)
                m->cb->changed(m->userdata);
        return 0;
}

static int fail_reload(char **ret_error, int r, const char *why) {
        *ret_error = strdup(why);
        return r;
}

static bool taken_by(Host *const *hosts, size_t n, const Host *h) {
        for (size_t i = 0; i < n; i++)
                if (hosts[i] == h)
                        return true;
        return false;
}

/* The same URL, bus and engine units: the Host carries on with the new values, waiters and all; the
 * others are made now, so that running out of memory changes nothing (-ENOMEM, and nothing made stays). */
static int reload_match_hosts(Manager *m, Config *n, Host **hosts, bool *kept_from) {
        for (size_t i = 0; i < n->n_hosts; i++) {
                for (size_t j = 0; j < m->config->n_hosts && !hosts[i]; j++)
                        if (!taken_by(hosts, i, m->hosts[j]) &&
                            host_can_take(m->hosts[j], n, &n->hosts[i])) {
                                hosts[i] = m->hosts[j];
                                kept_from[i] = true;
                        }
                if (!hosts[i] && !(hosts[i] = manager_new_host(m, n, &n->hosts[i]))) {
                        for (size_t k = 0; k <= i; k++)
                                if (!kept_from[k])
                                        host_free(hosts[k]);
                        return -ENOMEM;
                }
        }
        return 0;
}

/* A new file with errors: the running configuration stays, or a refusing daemon refuses with the new
 * errors */
static int reload_refused(Manager *m, Config *n, int r, char **ret_error) {
        unsigned count = MAX(n->n_errors, 1u);
        _cleanup_free_ char *what = config_errors_join(n->errors, count, r), *why = NULL;

        if (m->refusal) {
                log_error("Reload refused: %s %s %u error%s (above); every request is answered with them",
                          m->config_path, m->crash_loop ? "has" : "still has", count, count == 1 ? "" : "s");
                /* a crash loop's refusal gives way to the errors: a good file serves, as after any */
                m->crash_loop = false;
                strv_free(m->config_errors);
                m->config_errors = TAKE_PTR(n->errors);
                m->n_config_errors = count;
                (void)manager_set_refusal(m, m->config_errors, count, r);
                manager_changed(m);
        } else {
                log_error("Reload refused, the running configuration stays: %s has %u error%s (above)",
                          m->config_path, count, count == 1 ? "" : "s");
                /* 'systemctl reload' says only that the job failed, and points at 'systemctl status' */
                (void)sd_notifyf(false,
                                 "STATUS=Reload refused, serving with the previous configuration: %u "
                                 "error%s, the first: %s",
                                 count, count == 1 ? "" : "s",
                                 n->errors && n->errors[0] ? n->errors[0] : strerror(r < 0 ? -r : r));
        }
        if (!what || asprintf(&why, "the configuration has errors: %s; %s", what,
                              m->refusal ? "modelgate still refuses every request"
                                         : "the running configuration stays") < 0)
                return fail_reload(ret_error, r, "the configuration has errors (see the log)");
        *ret_error = TAKE_PTR(why);
        return r;
}

/* A configuration without errors is loaded: whatever refused requests before (its errors, a crash loop)
 * is over. */
static void reload_serves_again(Manager *m) {
        if (!m->refusal)
                return;
        strv_free(TAKE_PTR(m->config_errors));
        m->refusal = mfree(m->refusal);
        m->warnings_serial++;
        if (m->crash_loop) {
                /* the operator looked: the runs before count no more */
                run_record_forget(&m->runs);
                m->crash_loop = false;
                log_notice("Reloaded after a crash loop: serving requests");
        } else
                log_notice("%s has no errors now: serving requests", m->config_path);
}

int manager_reload(Manager *m, char **ret_error) {
        assert(m);
        _cleanup_(config_unrefp) Config *n = NULL;
        _cleanup_free_ Host **hosts = NULL;
        _cleanup_free_ bool *kept_from = NULL;
        size_t kept = 0, added = 0, drained = 0;
        Host **draining;
        int r;

        *ret_error = NULL;
        if (m->stopping)
                return fail_reload(ret_error, -ESHUTDOWN, "modelgated is stopping");
        n = config_new();
        if (!n)
                return fail_reload(ret_error, -ENOMEM, "out of memory");
        log_info("Reloading %s", m->config_path);
        r = config_read(n, m->config_path); /* getaddrinfo() blocks the loop for a moment: names are rare */
        if (r < 0)
                return reload_refused(m, n, r, ret_error);

        hosts = calloc(MAX(n->n_hosts, 1u), sizeof(Host *));
        kept_from = calloc(MAX(n->n_hosts, 1u), sizeof(bool));
        draining = reallocarray(m->draining, m->n_draining + m->config->n_hosts + 1, sizeof(Host *));
        if (!hosts || !kept_from || !draining)
                return fail_reload(ret_error, -ENOMEM, "out of memory");
        m->draining = draining;

        if (reload_match_hosts(m, n, hosts, kept_from) < 0)
                return fail_reload(ret_error, -ENOMEM, "out of memory");
        /* the rest finish what they have; nothing new reaches them */
        for (size_t j = 0; j < m->config->n_hosts; j++)
                if (!taken_by(hosts, n->n_hosts, m->hosts[j])) {
                        m->draining[m->n_draining++] = m->hosts[j];
                        drained++;
                }

        Config *old = m->config;
        m->config = TAKE_PTR(n);
        m->config_serial++;
        if (m->config->access.redis || m->access) /* another Redis, or none */
                access_configure(manager_access(m), m->config);
        /* an alias's targets may be others now, or in another order */
        alias_memory_clear(m->alias_memory);
        free(m->hosts);
        m->hosts = TAKE_PTR(hosts);
        for (size_t i = 0; i < m->config->n_hosts; i++) {
                if (kept_from[i]) {
                        (void)host_set_conf(m->hosts[i], m->config, &m->config->hosts[i]);
                        kept++;
                        continue;
                }
                added++;
                if (!host_is_draining(m, m->config->hosts[i].name))
                        host_start(m->hosts[i]);
                else
                        log_info(
                                "host %s: changed; it starts once the previous one has answered what it has",
                                m->config->hosts[i].name);
        }
        config_unref(old);

        reload_serves_again(m);
        log_notice("Reloaded %s: %zu host(s), %zu kept, %zu new, %zu draining", m->config_path,
                   m->config->n_hosts, kept, added, drained);
        (void)sd_notifyf(false, "STATUS=Reloaded; %zu host(s)", m->config->n_hosts);
        if (!m->drain_source && sd_event_add_defer(m->event, &m->drain_source, drain_cb, m) >= 0)
                (void)sd_event_source_set_enabled(m->drain_source, SD_EVENT_OFF);
        if (m->cb && m->cb->reloaded)
                m->cb->reloaded(m->userdata);
        manager_changed(m);
        return 0;
}

sd_event *manager_event(Manager *m) {
        assert(m);
        return m->event;
}

Config *manager_config(Manager *m) {
        assert(m);
        return m->config;
}

bool manager_stopping(Manager *m) {
        assert(m);
        return m->stopping;
}

const char *manager_refusal(Manager *m) {
        assert(m);
        return m->refusal;
}

unsigned manager_warnings_serial(Manager *m) {
        assert(m);
        return m->warnings_serial;
}

uint64_t manager_config_serial(Manager *m) {
        assert(m);
        return m->config_serial;
}

size_t manager_n_hosts(Manager *m) {
        assert(m);
        return m->config->n_hosts;
}

Host *manager_host_at(Manager *m, size_t i) {
        assert(m);
        return i < m->config->n_hosts && m->hosts ? m->hosts[i] : NULL;
}

UpstreamPool *manager_pool(Manager *m) {
        assert(m);
        return m->pool;
}

SocketWatchSet *manager_sockets(Manager *m) {
        assert(m);
        return m->sockets;
}

Metrics *manager_metrics(Manager *m) {
        assert(m);
        return m->metrics;
}

Activity *manager_activity(Manager *m) {
        assert(m);
        return m->activity;
}

FeedHub *manager_feed_hub(Manager *m) {
        assert(m);
        return m->feed_hub;
}

AliasMemory *manager_alias_memory(Manager *m) {
        assert(m);
        return m->alias_memory;
}

/* the hold is over: the server looks at its idle exit again */
static int conv_hold_cb(sd_event_source *s, uint64_t usec, void *userdata) {
        manager_changed(userdata);
        return 0;
}

/* rule:idle-exit: the newest conversation's use moves the end of the hold */
static void manager_conv_used(Manager *m) {
        usec_t until = conv_map_hold_until(&m->convs);

        if (until == 0)
                return;
        if (!m->conv_hold) {
                if (sd_event_add_time(m->event, &m->conv_hold, CLOCK_MONOTONIC, until, USEC_PER_SEC,
                                      conv_hold_cb, m) < 0)
                        return; /* no hold: a conversation started now may not outlive an idle exit */
        } else
                (void)sd_event_source_set_time(m->conv_hold, until);
        (void)sd_event_source_set_enabled(m->conv_hold, SD_EVENT_ONESHOT);
}

int manager_conv_remember(Manager *m, const char *owner, const char *id, const char *host,
                          const char *engine) {
        assert(m);
        int r = conv_map_remember(&m->convs, owner, id, host, engine, manager_now(m));
        if (r >= 0)
                manager_conv_used(m);
        return r;
}

const ConvEntry *manager_conv_find(Manager *m, const char *owner, const char *id) {
        assert(m);
        return conv_map_find(&m->convs, owner, id, manager_now(m));
}

void manager_conv_touch(Manager *m, const char *owner, const char *id) {
        assert(m);
        conv_map_touch(&m->convs, owner, id, manager_now(m));
        manager_conv_used(m);
}

static void access_changed_cb(void *userdata) {
        manager_changed(userdata);
}

Access *manager_access(Manager *m) {
        assert(m);
        if (!m->access && (m->access = access_new(m->event)))
                access_set_changed(m->access, access_changed_cb, m);
        return m->access;
}

ModelMemory *manager_model_memory(Manager *m) {
        assert(m);
        return m->model_memory;
}
