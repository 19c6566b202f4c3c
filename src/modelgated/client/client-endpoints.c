/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* modelgate's own endpoints (rule:root-probe, rule:health, rule:merged-list, rule:merged-feed,
 * rule:ui-page): /health, /metrics, the merged model lists, the /models/sse feed, the /ui page and the
 * answer of a daemon whose configuration has errors. */

#include <assert.h>

#include "modelgated/client/client-internal.h"
#include "modelgated/client/ui-page.h"
#include "modelgated/api/first-wait.h"

static void client_feed_send(FeedSubscriber *s, const FeedEvent *e);

/* Only what the caller's tier may use (rule:tier-models). */
void client_models_catalogs_ready(Client *c) {
        models_merge_catalogs_ready(c->req->own.merge);
}

bool client_model_visible(const char *id, void *userdata) {
        Client *c = userdata;
        return access_model_allowed(&c->req->caller, id);
}

/* A /models/sse event is shown as /v1/models shows the model it is about: an event of "<host>-<key>" to a
 * tier that may use that name, so an alias's tier hears nothing of its targets (the alias has no events of
 * its own). An event about the whole host ("<host>-*", the host going down or coming back) goes to a tier
 * that may use some model of that host (access_host_allowed()): it names the host, and a models_reload is
 * what such a subscriber re-reads its list on. */
static bool client_feed_visible(Client *c, const FeedEvent *e) {
        if (e->model)
                return access_model_allowed(&c->req->caller, e->model);
        return !e->host || access_host_allowed(&c->req->caller, e->host);
}

void client_models_done(ModelsMerge *mm, Blob *json, void *userdata) {
        _cleanup_(client_unrefp) Client *c = client_ref(userdata);

        c->req->own.merge = models_merge_free(mm);
        if (!json)
                client_answer(c, ANSWER_OUT_OF_MEMORY);
        else
                client_respond_blob(c, 200, "application/json", json);
        client_flush(c);
        client_process(c);
}

/* rule:websocket-426: only a 426 makes a Responses client that opens a WebSocket fall back to plain HTTP
 * at once; anything else costs it its retries first, or its turn. true: answered */
bool client_refuse_websocket(Client *c) {
        if (!c->req->route->websocket_426 || !http_request_opens_websocket(&c->parser.req))
                return false;
        client_answer(c, ANSWER_WEBSOCKET_REFUSED);
        return true;
}

/* GET /health: cheap (no I/O, the hosts' states as they are) and true: "ok" while at least one host can
 * serve (is not down), "degraded" when none can; ?strict=1 makes the latter a 503, for load balancers. */
static void respond_health(Client *c, bool strict) {
        assert(c);
        Manager *m = c->manager;
        _cleanup_(buffer_done) Buffer b = {};
        char retry[64];
        size_t up = 0;

        size_t n = manager_n_hosts(m);

        for (size_t i = 0; i < n; i++)
                up += host_state(manager_host_at(m, i)) != HOST_DOWN;
        bool ok = up > 0 || n == 0;
        (void)buffer_printf(&b,
                            "{\"status\":\"%s\",\"version\":\"%s\",\"hosts\":%zu,\"hosts_up\":%zu,"
                            "\"connections\":%zu,\"host_states\":{",
                            ok ? "ok" : "degraded", MODELGATE_VERSION, n, up, c->set->n_clients);
        for (size_t i = 0; i < n; i++)
                /* host names are letters, digits, '_' and '.': nothing to escape */
                (void)buffer_printf(&b, "%s\"%s\":\"%s\"", i ? "," : "", manager_config(m)->hosts[i].name,
                                    host_state_to_string(host_state(manager_host_at(m, i))));
        /* rule:shared-counts: whether the daily counts are every instance's or, for now, this one's */
        const char *shared = manager_config(m)->access.redis && manager_access(m)
                                     ? access_shared_state(manager_access(m))
                                     : NULL;
        if (shared)
                (void)buffer_printf(&b, "},\"redis\":\"%s\"", shared);
        if (buffer_append_str(&b, shared ? "}" : "}}") < 0) {
                client_answer(c, ANSWER_OUT_OF_MEMORY);
                return;
        }
        (void)answer_retry_after(retry, sizeof(retry), ANSWER_HOST_DOWN_RETRY_SEC, /* ms= */ false);
        client_respond(c, strict && !ok ? 503 : 200, "application/json", buffer_peek(&b), buffer_size(&b),
                       strict && !ok ? retry : NULL);
}

static bool hosts_connecting(Manager *m) {
        for (size_t i = 0; i < manager_n_hosts(m); i++)
                if (host_state(manager_host_at(m, i)) == HOST_CONNECTING)
                        return true;
        return false;
}

static int health_wait_cb(sd_event_source *s, uint64_t usec, void *userdata) {
        _cleanup_(client_unrefp) Client *c = client_ref(userdata);

        c->req->own.health_wait = sd_event_source_disable_unref(c->req->own.health_wait);
        respond_health(c, c->req->own.health_strict);
        client_flush(c);
        client_process(c);
        return 0;
}

/* rule:host-connecting: right after a start (or a reload that added a host), a host not probed yet would
 * show as neither up nor down: /health waits for the first probes, bounded as the first listing's wait
 * (rule:first-wait), so that a load balancer does not see the service fail at every socket activation */
void client_respond_health(Client *c, bool strict) {
        assert(c);
        Manager *m = c->manager;
        usec_t now, until;

        (void)sd_event_now(manager_event(m), CLOCK_MONOTONIC, &now);
        if (!hosts_connecting(m) || (until = first_wait_begin(&c->set->health_wait, now)) == 0 ||
            sd_event_add_time(manager_event(m), &c->req->own.health_wait, CLOCK_MONOTONIC, until, 0,
                              health_wait_cb, c) < 0) {
                respond_health(c, strict);
                return;
        }
        c->req->own.health_strict = strict;
}

void client_set_hosts_probed(ClientSet *set) {
        assert(set);

        if (hosts_connecting(set->manager))
                return;
        first_wait_end(&set->health_wait);
        /* answered from the loop, not from inside the host's news */
        LIST_FOREACH (clients, c, set->clients)
                if (c->req->own.health_wait)
                        (void)sd_event_source_set_time(c->req->own.health_wait, 0);
}

/* The configuration has errors (manager.h): every request gets them at once, and no host hears of it. A
 * person has to fix the file, so the SDKs are told not to retry (x-should-retry, as for 423): the agent
 * shows the message instead of retrying for minutes. */
void client_respond_refusal(Client *c, bool health) {
        assert(c);
        const char *refusal = manager_refusal(c->manager);
        bool crash_loop = manager_crash_loop(c->manager);
        _cleanup_free_ char *body = NULL;

        if (!health) {
                client_answer_message(c, crash_loop ? ANSWER_CRASH_LOOP : ANSWER_CONFIG_ERROR,
                                      /* status= */ 0, /* retry_after= */ 0, refusal);
                return;
        }
        json_object *o = json_object_new_object();
        if (o) {
                json_object_object_add(o, "status",
                                       json_object_new_string(crash_loop ? "crash-loop" : "config-error"));
                json_object_object_add(o, "version", json_object_new_string(MODELGATE_VERSION));
                json_object_object_add(o, "message", json_object_new_string(refusal));
                body = json_to_string_dup(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE,
                                          /* ret_size= */ NULL);
                json_object_put(o);
        }
        if (!body) {
                client_answer(c, ANSWER_OUT_OF_MEMORY);
                return;
        }
        client_respond(c, 503, "application/json", body, strlen(body), NULL);
}

/* Gauges of what the daemon holds now, after the counters; first the one counter kept outside Metrics,
 * by the cache whose work it counts */
static int render_gauges(Client *c, Buffer *b) {
        Manager *m = c->manager;
        usec_t now;
        static const struct {
                const char *name, *help;
                unsigned (*get)(const Host *h);
        } per_host[] = {
                {"modelgate_in_flight", "Requests sent to a host and not yet answered", host_in_flight},
                {"modelgate_waiting", "Requests waiting for their engine", host_waiting},
        };

        (void)sd_event_now(manager_event(m), CLOCK_MONOTONIC, &now);
        metrics_render_header(b, "modelgate_models_merges_total", "counter",
                              "Times the hosts' model lists were parsed and merged for /v1/models");
        (void)buffer_printf(b, "modelgate_models_merges_total %llu\n",
                            (unsigned long long)models_cache_merges(c->set->models));
        metrics_render_header(b, "modelgate_connections", "gauge", "Open client connections");
        (void)buffer_printf(b, "modelgate_connections %zu\n", c->set->n_clients);
        for (size_t g = 0; g < ELEMENTSOF(per_host); g++) {
                metrics_render_header(b, per_host[g].name, "gauge", per_host[g].help);
                for (size_t i = 0; i < manager_n_hosts(m); i++) {
                        _cleanup_(buffer_done) Buffer l = {};
                        metrics_append_label(&l, "host", host_conf(manager_host_at(m, i))->name);
                        (void)buffer_terminate(&l);
                        (void)buffer_printf(b, "%s{%s} %u\n", per_host[g].name, buffer_peek(&l),
                                            per_host[g].get(manager_host_at(m, i)));
                }
        }
        metrics_render_header(b, "modelgate_host_state", "gauge",
                              "1 for the state each host is in (org.modelgate1(5))");
        for (size_t i = 0; i < manager_n_hosts(m); i++)
                for (HostState st = 0; st < _HOST_STATE_MAX; st++) {
                        _cleanup_(buffer_done) Buffer l = {};
                        metrics_append_label(&l, "host", host_conf(manager_host_at(m, i))->name);
                        metrics_append_label(&l, "state", host_state_to_string(st));
                        (void)buffer_terminate(&l);
                        (void)buffer_printf(b, "modelgate_host_state{%s} %d\n", buffer_peek(&l),
                                            host_state(manager_host_at(m, i)) == st);
                }
        metrics_render_header(b, "modelgate_engine_up_seconds", "gauge",
                              "How long the running engine has been up");
        for (size_t i = 0; i < manager_n_hosts(m); i++) {
                Host *h = manager_host_at(m, i);
                ssize_t e = host_engine_up(h);
                if (e < 0)
                        continue;
                _cleanup_(buffer_done) Buffer l = {};
                metrics_append_label(&l, "host", host_conf(h)->name);
                metrics_append_label(&l, "engine", host_engine(h, (size_t)e)->conf->name);
                (void)buffer_terminate(&l);
                (void)buffer_printf(b, "modelgate_engine_up_seconds{%s} %.3f\n", buffer_peek(&l),
                                    (double)(now - host_up_since(h)) / USEC_PER_SEC);
        }
        return buffer_terminate(b);
}

void client_respond_metrics(Client *c) {
        _cleanup_(buffer_done) Buffer b = {};
        assert(c);

        if (metrics_render(manager_metrics(c->manager), &b) < 0 || render_gauges(c, &b) < 0) {
                client_answer(c, ANSWER_OUT_OF_MEMORY);
                return;
        }
        client_respond(c, 200, "text/plain; version=0.0.4; charset=utf-8", buffer_peek(&b), buffer_size(&b),
                       NULL);
}

/* GET /ui: the page, embedded at build time, under a policy that lets only its own inline script and style
 * run and lets it talk only to its own origin (rule:ui-page); what it shows comes from /activity */
void client_respond_ui(Client *c) {
        char h[768];
        assert(c);

        int n = snprintf(h, sizeof(h),
                         "Content-Security-Policy: %s\r\n"
                         "X-Content-Type-Options: nosniff\r\n"
                         "Cache-Control: no-cache\r\n"
                         "Referrer-Policy: no-referrer\r\n"
                         "X-Frame-Options: DENY\r\n",
                         ui_page_csp);
        assert(n > 0 && (size_t)n < sizeof(h));
        client_respond(c, 200, "text/html; charset=utf-8", ui_page, ui_page_size, h);
}

/* GET /ui, admitted as /activity is (rule:activity-feed): a browser that sent no key is asked for one (a
 * 401 with a Basic challenge, rule:ui-key) even where clients without a key are admitted, as the page would
 * show it nothing */
void client_start_ui(Client *c) {
        assert(c);

        if (manager_config(c->manager)->access.enabled && !c->req->caller.tier) {
                client_answer(c, ANSWER_MISSING_API_KEY);
                return;
        }
        if (client_may_watch(c))
                client_respond_ui(c);
}

static const FeedSubscriberOps client_feed_ops = {
        .send = client_feed_send,
};

/* The head of a feed (/models/sse, /activity): true when the subscriber is to be added; false when it was
 * answered (refused, or a HEAD, which gets the head alone) */
bool client_feed_open(Client *c, const char *path) {
        assert(c);
        assert(path);
        Manager *m = c->manager;
        Config *config = manager_config(m);

        /* subscribers of both feeds hold their connection for good: together they may not take more than
         * half of MaxConnections=, so that /health and requests always find one; and /models/sse, which
         * any admitted key may follow, leaves room for the operator's /activity (and /ui's) */
        uint64_t max = MIN(config->max_feed_subscribers, config->max_connections / 2);
        uint64_t room = MIN((uint64_t)FEED_ACTIVITY_ROOM, max / 2);
        size_t models = feed_hub_count(manager_feed_hub(m)),
               n = models + feed_hub_count(activity_hub(manager_activity(m)));
        bool activity = streq(path, "/activity");
        if (n >= max || (!activity && models >= max - room)) {
                client_answer(c, ANSWER_TOO_MANY_SUBSCRIBERS, path, activity ? n : models,
                              (unsigned long long)(activity ? max : max - room), (unsigned long long)max,
                              (unsigned long long)room);
                return false;
        }
        if (client_queue_stream_head(c) < 0) {
                client_answer(c, ANSWER_OUT_OF_MEMORY);
                return false;
        }
        c->req->answer.head_sent = true;
        if (c->req->head) {
                c->req->answer.bytes = 0;
                client_response_complete(c, NULL);
                return false;
        }
        /* a feed is a trickle: a small kernel buffer lets a subscriber that stopped reading be seen (and
         * dropped) after a few hundred KiB instead of after megabytes */
        (void)setsockopt(c->fd, SOL_SOCKET, SO_SNDBUF, &(int){64 * 1024}, sizeof(int));
        c->feed = true;
        return true;
}

/* GET /models/sse: every host's feed, relabelled, until the client goes */
void client_start_feed(Client *c) {
        assert(c);
        Manager *m = c->manager;
        FeedHub *hub = manager_feed_hub(m);
        Config *config = manager_config(m);
        char hello[128];
        size_t hosts = 0;
        int n;

        if (!client_feed_open(c, "/models/sse"))
                return;
        /* the caller's tier is in the configuration it was admitted under, which the request holds until
         * the feed ends: a reload leaves it valid, and the subscriber under the tier it came with */
        assert(!c->req->caller.tier || c->req->config);
        for (size_t i = 0; i < config->n_hosts; i++)
                hosts += access_host_allowed(&c->req->caller, config->hosts[i].name);
        n = snprintf(hello, sizeof(hello), ": modelgate model events from %zu host(s)\n\n", hosts);
        (void)client_frame_body(c, hello, (size_t)n);
        feed_hub_subscribe(hub, &c->feed_sub, &client_feed_ops);
}

static void client_feed_send(FeedSubscriber *s, const FeedEvent *e) {
        _cleanup_(client_unrefp) Client *c = client_ref(container_of(s, Client, feed_sub));

        if (!client_feed_visible(c, e))
                return;
        if (buffer_size(&c->out) > CLIENT_FEED_OUT_MAX) {
                /* bounded: a subscriber that does not read is dropped, not buffered for ever */
                log_info("Client %s does not read /models/sse, dropping it", c->peer);
                client_log_access(c, "cut=slow-client");
                client_close(c);
                return;
        }
        if (client_frame_body(c, e->text, e->size) < 0)
                client_close(c);
        else
                client_flush(c);
}

static void own_root(Client *c, Span url, Span path) {
        /* clients (Claude Code among them) probe the root before their first request */
        static const char root[] = "{\"name\":\"modelgate\",\"version\":\"" MODELGATE_VERSION
                                   "\",\"models\":\"/v1/models\",\"health\":\"/health\"}";
        client_respond(c, 200, "application/json", root, sizeof(root) - 1, NULL);
}

static void own_health(Client *c, Span url, Span path) {
        client_respond_health(c, query_flag(url, "strict"));
}

static void own_metrics(Client *c, Span url, Span path) {
        client_respond_metrics(c);
}

static void own_ui(Client *c, Span url, Span path) {
        client_start_ui(c);
}

/* a subscriber holds a connection for good: with [Access], only an admitted one */
static void own_feed(Client *c, Span url, Span path) {
        client_start_feed(c);
}

static void own_activity(Client *c, Span url, Span path) {
        client_start_activity(c);
}

/* llama-swap's control endpoints, under the same admission (rule:swap-running, rule:swap-unload) */
static void own_running(Client *c, Span url, Span path) {
        client_respond_running(c);
}

static void own_unload(Client *c, Span url, Span path) {
        client_unload_all(c, /* api= */ false);
}

static void own_unload_api(Client *c, Span url, Span path) {
        client_unload_all(c, /* api= */ true);
}

static void own_unload_model(Client *c, Span url, Span path) {
        client_unload_model(c, path);
}

static void own_models(Client *c, Span url, Span path) {
        if (models_merge_start(c->manager, c->set->models, client_model_visible, client_models_done, c,
                               &c->req->own.merge) < 0)
                client_answer(c, ANSWER_OUT_OF_MEMORY);
}

static void own_stream(Client *c, Span url, Span path) {
        client_dispatch_stream(c, url);
}

void client_dispatch_own(Client *c, PathOwn own, Span url, Span path) {
        static void (*const handlers[_PATH_OWN_MAX])(Client * c, Span url, Span path) = {
                [PATH_OWN_ROOT] = own_root,
                [PATH_OWN_HEALTH] = own_health,
                [PATH_OWN_METRICS] = own_metrics,
                [PATH_OWN_UI] = own_ui,
                [PATH_OWN_FEED] = own_feed,
                [PATH_OWN_ACTIVITY] = own_activity,
                [PATH_OWN_RUNNING] = own_running,
                [PATH_OWN_UNLOAD] = own_unload,
                [PATH_OWN_UNLOAD_API] = own_unload_api,
                [PATH_OWN_UNLOAD_MODEL] = own_unload_model,
                [PATH_OWN_MODELS] = own_models,
                [PATH_OWN_STREAM] = own_stream,
                [PATH_OWN_STREAM_LOOKUP] = own_stream,
        };
        assert(c);
        assert(own > PATH_OWN_NONE && own < _PATH_OWN_MAX);
        handlers[own](c, url, path);
}
