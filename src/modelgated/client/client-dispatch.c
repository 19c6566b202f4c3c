/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A request, from its head to the host: admission ([Access], body limits) as soon as the head is read,
 * then the route (rule:host-in-name), the rewrite of its model, and the wait for the host's engine. Every
 * path passes through; only the model is rewritten (rule:passthrough). */

#include "modelgated/client/client-internal.h"
#include "modelgated/rules/attribution.h"
#include "modelgated/rules/basic-auth.h"
#include "modelgated/rules/model-memory.h"
#include "modelgated/rules/probe.h"

void client_go(Client *c) {
        if (client_send_upstream(c) >= 0)
                client_start_budget(c);
}

static void client_wait_for_engine(Client *c) {
        const Config *cf = manager_config(c->manager);

        if (!c->req->ask.stream || c->req->head || cf->keepalive_after_usec == USEC_INFINITY)
                return;
        if (!c->req->answer.keepalive) {
                if (sd_event_add_time_relative(manager_event(c->manager), &c->req->answer.keepalive,
                                               CLOCK_MONOTONIC, cf->keepalive_after_usec, 0,
                                               client_keepalive_cb, c) < 0)
                        return; /* no keepalives: the client waits in silence */
        } else
                (void)sd_event_source_set_time_relative(c->req->answer.keepalive, cf->keepalive_after_usec);
        (void)sd_event_source_set_enabled(c->req->answer.keepalive, SD_EVENT_ONESHOT);
}

static void client_engine_ready(HostWaiter *w, int status, const char *message) {
        _cleanup_(client_unrefp) Client *c = client_ref(container_of(w, Request, attempt.waiter)->client);

        /* rule:queued-and-switch: summed over an alias's targets */
        c->req->waited.queued += w->queued;
        c->req->waited.switched += w->switched;
        c->req->waited.caused_switch = c->req->waited.caused_switch || w->caused_switch;

        /* on success the comments go on while the engine's router loads the model */
        if (status != 0) {
                (void)sd_event_source_set_enabled(c->req->answer.keepalive, SD_EVENT_OFF);
                (void)client_attempt_failed(c, attempt_failure_of_refusal(status), status, message);
        } else {
                usec_t now = client_now(c);
                metrics_wait(manager_metrics(c->manager), c->req->host->name, now - c->req->start);
                metrics_queued(manager_metrics(c->manager), c->req->host->name, w->queued);
                activity_request_ready(&c->req->activity.entry, now);
                client_go(c);
        }
        client_flush(c);
        client_process(c);
}

/* The pages a browser reads with its own credentials (rule:ui-key): GET /ui and GET /activity, which change
 * nothing and which another site's page cannot read */
static bool request_is_browser(const HttpRequest *r, Span path) {
        return (r->method == HTTP_GET || r->method == HTTP_HEAD) &&
               (span_eq(path, "/ui") || span_eq(path, "/activity"));
}

/* [Access]: who the client is. false: answered already (401). */
static bool client_admit(Client *c) {
        HttpRequest *r = &c->parser.req;
        Span auth = http_request_header(r, "Authorization"), xkey = http_request_header(r, "X-Api-Key");
        _cleanup_free_ char *key = NULL;
        AccessDenial d;

        c->req->browser = request_is_browser(r, url_path(http_request_url(r)));
        if (auth.p && auth.n > 7 && strncasecmp(auth.p, "Bearer ", 7) == 0)
                key = strndup(auth.p + 7, auth.n - 7);
        else if (xkey.p)
                key = strndup(xkey.p, xkey.n);
        else if (c->req->browser && basic_auth_key(auth, &key) < 0) {
                client_answer(c, ANSWER_OUT_OF_MEMORY);
                return false;
        }
        /* the caller's tier points into this configuration: the request holds it, through a reload that
         * comes while its body is read or its listing waits */
        if (!c->req->config)
                c->req->config = config_ref(manager_config(c->manager));
        if (access_identify(c->req->config, key, c->peer, &c->req->caller, &d) != ACCESS_ALLOWED) {
                client_answer_message(c, d.answer, /* status= */ 0, /* retry_after= */ 0, d.message);
                c->req->caller.admitted = false;
                return false;
        }
        return true;
}

static void client_refuse_cap(Client *c, const AccessDenial *denial) {
        client_answer_message(c, denial->answer, /* status= */ 0, denial->retry_after, denial->message);
}

/* A caller whose day is used up is told on the head: its body is never read. */
static bool client_within_cap(Client *c) {
        Access *access = manager_access(c->manager);
        AccessDenial denial;

        if (!c->req->caller.admitted || !access ||
            access_check(access, c->req->config, &c->req->caller, c->peer, &denial) != ACCESS_OVER_CAP)
                return true;
        client_refuse_cap(c, &denial);
        return false;
}

/* What modelgate answers itself, for anyone: no admission. */
static bool request_is_open(const HttpRequest *r, Span path) {
        return (r->method == HTTP_GET || r->method == HTTP_HEAD) &&
               (span_eq(path, "/") || span_eq(path, "/health") || span_eq(path, "/metrics"));
}

/* The body limit of the caller: its tier's MaxBodySize=, or AnonymousMaxBodySize=; 0: MaxBodySize=. */
static uint64_t caller_body_limit(const Client *c) {
        const AccessConf *a = &(c->req->config ?: manager_config(c->manager))->access;
        return c->req->caller.tier ? c->req->caller.tier->max_body_size : a->anonymous_max_body_size;
}

static void client_refuse_body(Client *c) {
        client_answer(c, ANSWER_BODY_TOO_LARGE,
                      c->req->caller.tier ? "this key's tier" : "this proxy for clients without a key",
                      c->req->caller.tier ? "MaxBodySize=" : "AnonymousMaxBodySize=",
                      (unsigned long long)caller_body_limit(c));
}

/* [Access] on the head of a request whose body is still to come: who asks is known before anything of the
 * body is read, so that a client without a (good) key cannot make modelgate hold its body. false: it was
 * answered (401, 413), and the connection closes without reading the body. */
bool client_admit_head(Client *c) {
        assert(c);
        HttpRequest *r = &c->parser.req;
        Span path = url_path(http_request_url(r));
        bool open = request_is_open(r, path), close = c->close_after_response,
             access = manager_config(c->manager)->access.enabled, lookup = client_stream_is_lookup(r, path);

        if (!open && !lookup && !access)
                return true; /* rule:host-check: client_dispatch() checks it */
        /* an answer on the head is the request's answer: its access line names it, and the body that
         * follows is not read (the connection closes) */
        c->req->start = client_now(c);
        c->req->method = r->method;
        c->req->path = path;
        c->req->api = api_kind_for_path(path);
        c->close_after_response = true;
        if (client_host_refused(c)) /* rule:host-check: before anything else */
                return false;
        if (open) {
                /* what modelgate answers itself reads no body: none is held for it */
                if (http_parser_limit_body(&c->parser, 0, /* why= */ NULL) < 0) {
                        client_answer(c, ANSWER_BODY_NOT_TAKEN);
                        return false;
                }
        } else {
                if (access && (!client_admit(c) || !client_within_cap(c)))
                        return false;
                uint64_t limit = access ? caller_body_limit(c) : 0;
                if (limit > 0 && http_parser_limit_body(&c->parser, limit, /* why= */ NULL) < 0) {
                        client_refuse_body(c);
                        return false;
                }
                if (lookup && !client_stream_limit_lookup(c))
                        return false;
        }
        /* admitted: the request is dispatched when its body is in */
        c->req->method = REQUEST_NO_METHOD;
        c->req->path = (Span){};
        c->close_after_response = close;
        return true;
}

/* Finds the model, the host and the key, rewrites, and sends the request on. */
/* What client_dispatch() learns of a request on its way to the host */
typedef struct Dispatch {
        HttpRequest *r;
        Span url, path;
        Span span, qspan; /* the model's value in the body, in the query */
        bool in_body, in_query;
        const char *body;
        size_t body_len, url_len;
        const char *model; /* as the client named it: the Request's copy */
        char *qmodel;      /* the query's, while it is compared with the body's */
        const char *key;   /* the model without its host */
        char *quoted;      /* the key, for the query (the body's is written straight into the request) */
        char *new_url;
} Dispatch;

static void dispatch_done(Dispatch *d) {
        free(d->qmodel);
        free(d->quoted);
        free(d->new_url);
}

static void request_begin(Client *c, Dispatch *d) {
        HttpRequest *r = d->r;

        c->req->start = client_now(c);
        c->req->method = r->method;
        c->req->path = d->path;
        c->req->user_agent = http_request_header(r, "User-Agent");
        c->req->api = api_kind_for_path(d->path);
        c->req->head = r->method == HTTP_HEAD;
        c->req->http10 = r->http_major == 1 && r->http_minor == 0;
        if (!r->keep_alive || manager_stopping(c->manager))
                c->close_after_response = true;
}

/* modelgate's own answers, and admission before anything reaches a host: true when answered */
static bool dispatch_own(Client *c, Dispatch *d) {
        HttpRequest *r = d->r;
        Span path = d->path;
        bool get = r->method == HTTP_GET || r->method == HTTP_HEAD;
        int k;

        if (d->url.n == 0 || d->url.p[0] != '/') {
                client_answer(c, ANSWER_NOT_A_PATH);
                return true;
        }
        /* before admission and the daemon's own refusals (rule:websocket-426) */
        if (client_refuse_websocket(c, path))
                return true;
        if (manager_refusal(c->manager)) {
                client_respond_refusal(c, get && span_eq(path, "/health"));
                return true;
        }
        if (get && span_eq(path, "/")) {
                /* clients (Claude Code among them) probe the root before their first request */
                static const char root[] = "{\"name\":\"modelgate\",\"version\":\"" MODELGATE_VERSION
                                           "\",\"models\":\"/v1/models\",\"health\":\"/health\"}";
                client_respond(c, 200, "application/json", root, sizeof(root) - 1, NULL);
                return true;
        }
        if (get && span_eq(path, "/health")) {
                client_respond_health(c, query_flag(d->url, "strict"));
                return true;
        }
        if (get && span_eq(path, "/metrics")) {
                client_respond_metrics(c);
                return true;
        }
        if (manager_config(c->manager)->access.enabled) {
                if (!c->req->caller.admitted && !client_admit(c))
                        return true;
                uint64_t limit = caller_body_limit(c);
                if (limit > 0 && buffer_size(&r->body) > limit) {
                        client_refuse_body(c);
                        return true;
                }
        }
        if (get && span_eq(path, "/ui")) {
                client_start_ui(c);
                return true;
        }
        /* a subscriber holds a connection for good: with [Access], only an admitted one */
        if (get && span_eq(path, "/models/sse")) {
                client_start_feed(c);
                return true;
        }
        if (get && span_eq(path, "/activity")) {
                client_start_activity(c);
                return true;
        }
        /* llama-swap's control endpoints, under the same admission (rule:swap-running, rule:swap-unload) */
        if (get && span_eq(path, "/running")) {
                client_respond_running(c);
                return true;
        }
        if (r->method == HTTP_GET && span_eq(path, "/unload")) {
                client_unload_all(c, /* api= */ false);
                return true;
        }
        if (r->method == HTTP_POST && span_eq(path, "/api/models/unload")) {
                client_unload_all(c, /* api= */ true);
                return true;
        }
        if (r->method == HTTP_POST && client_is_unload_model(path)) {
                client_unload_model(c, path);
                return true;
        }
        if (get && (span_eq(path, "/models") || span_eq(path, "/v1/models"))) {
                k = models_merge_start(c->manager, c->set->models, client_model_visible, client_models_done,
                                       c, &c->req->own.merge);
                if (k < 0)
                        client_answer(c, ANSWER_OUT_OF_MEMORY);
                return true;
        }
        return false;
}

/* The answer to a lookup of the model in the body or (query) in the query that found none to route by;
 * _ANSWER_INVALID when it found one, or found none and absent_ok (the other place may name it) */
static Answer model_lookup_answer(int k, bool query, bool absent_ok, bool any_body) {
        switch (k) {
        case MODEL_FOUND:
                return _ANSWER_INVALID;
        case MODEL_ABSENT:
                return absent_ok  ? _ANSWER_INVALID
                       : any_body ? ANSWER_MODEL_MISSING_IN_BODY
                                  : ANSWER_MODEL_MISSING;
        case MODEL_NOT_JSON:
                return ANSWER_INVALID_JSON;
        case MODEL_NOT_STRING:
                return ANSWER_MODEL_NOT_STRING;
        case MODEL_TWICE:
                return query ? ANSWER_MODEL_TWICE_IN_QUERY : ANSWER_MODEL_TWICE_IN_BODY;
        case MODEL_BAD_ESCAPE:
                return ANSWER_MODEL_BAD_ESCAPE;
        default:
                return ANSWER_OUT_OF_MEMORY; /* k < 0: the one failure is -ENOMEM */
        }
}

/* The model the request names, in its body or its query (rule:model-rewrite, rule:model-once): false when
 * answered */
static bool dispatch_read_model(Client *c, Dispatch *d) {
        _cleanup_free_ char *model = NULL; /* the body's */
        Answer a;
        int k;

        if (d->body_len > 0) {
                k = json_read_request(d->body, d->body_len, &d->span, &model, &c->req->ask);
                d->in_body = k == MODEL_FOUND;
                a = model_lookup_answer(k, /* query= */ false, /* absent_ok= */ true, /* any_body= */ true);
                if (a >= 0)
                        return client_answer(c, a), false;
        }
        /* a model in the query too: the host reads both, so both must name the same one (else a tier's
         * Models= would be checked against one and the host would load the other) */
        k = query_find_model(d->url, &d->qspan, &d->qmodel);
        d->in_query = k == MODEL_FOUND;
        a = model_lookup_answer(k, /* query= */ true, d->in_body, d->body_len > 0);
        if (a >= 0)
                return client_answer(c, a), false;
        if (d->in_body && d->in_query && !streq(model, d->qmodel))
                return client_answer(c, ANSWER_MODEL_BODY_AND_QUERY), false;
        if (!d->in_body) {
                model = TAKE_PTR(d->qmodel);
                d->span = d->qspan;
        }
        /* control characters would go into log lines and the host's request as they are */
        for (const char *q = model; *q; q++)
                if ((unsigned char)*q < 0x20 || *q == 0x7f)
                        return client_answer(c, ANSWER_MODEL_CONTROL_CHARACTER), false;
        free(c->req->model);
        d->model = c->req->model = TAKE_PTR(model);
        /* an alias's next target reads the model again: the activity record points at the Request's
         * string, and would point at the freed one until the next host's activity begin (which a host
         * removed by a reload never reaches) */
        c->req->activity.entry.model = c->req->model;
        return true;
}

/* The alias's target for this request (rule:alias-order, rule:alias-next-target): picked on what the hosts
 * do now, never one tried before. 'after' is the refusal that moved it on, NULL for the first pick. false:
 * none is left. */
static bool dispatch_pick_target(Client *c, const char *after) {
        const AliasConf *a = c->req->alias.conf;
        AliasClient who = client_identity(c);
        const char *why;
        ssize_t i;

        i = manager_alias_pick(c->manager, a, &who, c->req->alias.tried, NULL, &why);
        if (i < 0)
                return false;
        if (after) {
                _cleanup_free_ char *e = log_escape_dup(after);
                char id[REQUEST_ID_MAX * 4 + 1];
                log_notice("alias %s: target %s refused (%s); trying %s (%s) id=%s", a->name,
                           c->req->alias.target, strna(e), a->targets[i], why, client_log_id(c, id));
        } else
                log_debug("alias %s: %s%s%s%s picks %s (%s)", a->name, who.key ? "key:" : "",
                          who.key ?: who.address, who.session ? " session " : "",
                          who.session ? c->req->session.label : "", a->targets[i], why);
        c->req->alias.tried |= UINT64_C(1) << i;
        c->req->alias.target = a->targets[i];
        manager_alias_used(c->manager, a, &who, (size_t)i);
        return true;
}

static void dispatch_to_host(Client *c, Dispatch *d);

/* The request as the parser holds it (its body kept while an alias or Redis may need it again) */
static void dispatch_from_parser(Dispatch *d) {
        d->url = http_request_url(d->r);
        d->url_len = d->url.n;
        d->path = url_path(d->url);
        d->body = buffer_peek(&d->r->body);
        d->body_len = buffer_size(&d->r->body);
}

/* rule:shared-counts: Redis admitted the request (or refused it): on as dispatch_route() would have
 * gone, the request read again from the parser as client_next_target() does */
static void client_admitted(AccessWait *w, int verdict, const AccessDenial *denial) {
        _cleanup_(client_unrefp) Client *c = client_ref(container_of(w, Request, access_wait)->client);
        _cleanup_(dispatch_done) Dispatch d = {.r = &c->parser.req};

        dispatch_from_parser(&d);
        if (verdict == ACCESS_OVER_CAP)
                client_refuse_cap(c, denial);
        else if (dispatch_read_model(c, &d)) {
                c->req->host = config_host_of_model(c->req->config, c->req->alias.target ?: d.model, &d.key);
                if (c->req->host)
                        dispatch_to_host(c, &d);
                else /* routed before the wait, under the configuration the request holds */
                        client_answer(c, ANSWER_ALIAS_TARGET_LOST);
        }
        client_flush(c);
        client_process(c);
}

/* The host the model names, checked against the caller's tier and counted for the day: false when
 * answered, or when Redis decides (client_admitted() goes on) */
static bool dispatch_route(Client *c, Dispatch *d) {
        int k;

        /* a caller whose day is used up hears so first, as it does on a head with a body (the same answer
         * however the request came in pieces) */
        if (!client_within_cap(c))
                return false;
        /* a tier's Models= limits routing as much as the list */
        if (c->req->caller.admitted && !access_model_allowed(&c->req->caller, d->model))
                return client_answer(c, ANSWER_MODEL_NOT_ALLOWED, c->req->caller.tier->name, c->req->model),
                       false;
        if (!c->req->config)
                c->req->config = config_ref(manager_config(c->manager));
        client_read_session(c);
        c->req->alias.conf = config_find_alias(c->req->config, d->model);
        if (c->req->alias.conf && !dispatch_pick_target(c, NULL))
                return client_answer(c, ANSWER_OUT_OF_MEMORY), false;
        /* the host the model names, or none: never another host's copy (rule:no-substitute) */
        c->req->host = config_host_of_model(c->req->config, c->req->alias.target ?: d->model, &d->key);
        if (!c->req->host) {
                char m2[160];
                log_escape(m2, sizeof(m2), d->model, strlen(d->model));
                return client_answer(c, ANSWER_UNKNOWN_HOST, m2), false;
        }
        /* counted once it routes: a mistyped model name costs nobody a request of the day */
        if (c->req->caller.admitted) {
                AccessDenial denial;
                Access *access = manager_access(c->manager);
                c->req->access_wait.fn = client_admitted;
                k = access ? access_admit(access, c->req->config, &c->req->caller, c->peer, &denial,
                                          &c->req->access_wait)
                           : -ENOMEM;
                if (k == ACCESS_PENDING)
                        return false;
                if (k == ACCESS_OVER_CAP)
                        return client_refuse_cap(c, &denial), false;
                if (k < 0)
                        return client_answer(c, ANSWER_OUT_OF_MEMORY), false;
        }
        return true;
}

/* The model renamed to its key where the client named it (the host sees "laguna-xs"): false when
 * answered */
static bool dispatch_rewrite(Client *c, Dispatch *d) {
        if (!d->in_body)
                d->span = (Span){};
        if (d->in_query) {
                d->quoted = query_escape(d->key);
                d->new_url = d->quoted ? span_replace(d->url, d->qspan, d->quoted, &d->url_len) : NULL;
                d->url = (Span){d->new_url, d->url_len};
                if (!d->new_url)
                        return client_answer(c, ANSWER_OUT_OF_MEMORY), false;
        }
        return true;
}

/* The engine of the host that serves the key, and what that engine's [Engine] says of budgets and the
 * fallback: the engine's index, -1 for a host without engines, or < -1 when answered */
static ssize_t dispatch_engine(Client *c, Dispatch *d, Host *host) {
        char k2[160];
        ssize_t engine;

        c->req->model_label = NULL; /* an alias's earlier target named its own */
        if (!host_has_engines(host)) {
                int listed = catalog_lists(host_catalog(host), d->key);
                if (listed > 0) {
                        c->req->model_label = d->key; /* rule:usage-metrics: the host lists it */
                        client_activity_model_listed(c, host);
                }
                if (span_startswith(d->path, "/models") || listed != 0)
                        return -1;
                /* rule:unlisted-key-404: a key the host does not list (its list is known) is 404;
                 * /models/... calls (a download of a new model, say) are the host's to judge */
                log_escape(k2, sizeof(k2), d->key, strlen(d->key));
                return client_answer(c, ANSWER_UNKNOWN_MODEL, c->req->host->name, k2), -2;
        }
        engine = host_find_engine(host, d->key, &c->req->model_label);
        if (engine < 0) {
                log_escape(k2, sizeof(k2), d->key, strlen(d->key));
                return client_answer(c, ANSWER_NO_ENGINE, c->req->host->name, k2), -2;
        }
        /* rule:never-listed-404: no GPU moves for a name its engine is known not to have and the host never
         * listed (models-seen.json: what a list read while another engine shared its URL taught is not
         * trusted alone); /models/... calls are the host's to judge, as in rule:unlisted-key-404 */
        if (!span_startswith(d->path, "/models") && host_key_known_absent(host, (size_t)engine, d->key) &&
            !model_memory_get(manager_model_memory(c->manager), c->req->host->name, d->key)) {
                const char *e = host_engine(host, (size_t)engine)->conf->name;
                log_escape(k2, sizeof(k2), d->key, strlen(d->key));
                return client_answer(c, ANSWER_NEVER_LISTED, c->req->host->name, e, k2, c->req->host->name,
                                     e),
                       -2;
        }
        c->req->attempt.target = host_engine(host, (size_t)engine)->url;
        c->req->attempt.engine_conf = host_engine(host, (size_t)engine)->conf;
        c->req->attempt.engine_name = c->req->attempt.engine_conf->name;
        /* the fallback spends the operator's cloud key: inference only, on a path of modelgate's
         * own, and only for a model in the body (the only place it can be renamed) */
        c->req->fallback.path = client_fallback_path(d->r->method, d->path);
        c->req->fallback.conf =
                c->req->fallback.path && d->in_body
                        ? config_find_fallback(c->req->config, c->req->attempt.engine_conf->fallback)
                        : NULL;
        if (c->req->fallback.conf)
                c->req->attempt.awaiting_first_token = c->req->ask.stream && !c->req->head;
        if (c->req->ask.stream && c->req->attempt.engine_conf->first_token_budget_usec != 0)
                c->req->attempt.awaiting_first_token = !c->req->head;
        return engine;
}

static void dispatch_to_host(Client *c, Dispatch *d);

/* rule:probe: a probe (probe_path()) for an engine that is not up never moves the GPU nor waits behind a
 * switch: it goes when its engine is up and staying, may start it on a GPU nothing uses, and is answered
 * at once otherwise (the alias's next target may have its engine up). false: it was answered, or moved on.
 */
static bool dispatch_probe_may_go(Client *c, Dispatch *d, Host *host, size_t engine) {
        HostState st = host_state(host);
        bool moving = st == HOST_STARTING || st == HOST_SWITCHING;
        ssize_t running = host_running(host);
        char why[160], msg[512];

        if (!probe_path(d->path, d->r->method == HTTP_GET || d->r->method == HTTP_HEAD))
                return true;
        bool cold = host_engine_up(host) == (ssize_t)engine && host_key_cold(host, d->key);
        ProbeView v = {
                /* a router's model not loaded yet is not up: loading it may unload another */
                .up = host_engine_up(host) == (ssize_t)engine && !cold,
                .switch_pending = moving || host_switch_pending(host),
                .running = moving || running >= 0,
                .in_flight = host_in_flight(host),
                .waiting = host_waiting(host),
        };
        if (probe_decide(&v) != PROBE_REFUSE)
                return true;
        if (cold) {
                (void)answer_format(msg, sizeof(msg), ANSWER_PROBE_NOT_LOADED, d->key,
                                    c->req->attempt.engine_name, c->req->host->name);
                (void)client_attempt_failed(c, ATTEMPT_PROBE, 423, msg);
                return false;
        }
        if (moving)
                snprintf(why, sizeof(why), "the host is switching engines");
        else if (running >= 0)
                snprintf(why, sizeof(why), "engine '%s' runs there",
                         host_engine(host, (size_t)running)->conf->name);
        else
                snprintf(why, sizeof(why), "%u requests are in flight or waiting there",
                         v.in_flight + v.waiting);
        (void)answer_format(msg, sizeof(msg), ANSWER_PROBE_NOT_SWITCHED, c->req->attempt.engine_name,
                            c->req->host->name, why);
        (void)client_attempt_failed(c, ATTEMPT_PROBE, 423, msg);
        return false;
}

/* A complete request: modelgate's own answer, or on to its host (at once, or when its engine is up). */
void client_dispatch(Client *c) {
        assert(c);
        HttpRequest *r = &c->parser.req;
        _cleanup_(dispatch_done) Dispatch d = {.r = r};

        dispatch_from_parser(&d);
        request_begin(c, &d);
        if (client_host_refused(c) || dispatch_own(c, &d) || client_dispatch_stream(c, d.url, d.path) ||
            !dispatch_read_model(c, &d) || !dispatch_route(c, &d))
                return;
        dispatch_to_host(c, &d);
}

/* An alias's target refused before any byte of its answer reached the client (host down, GPU busy,
 * engine failed, connection refused): the same request goes to the next target, each at most once, and
 * is exactly a request for that target from then on. false: none is left (the fallback is next). */
bool client_next_target(Client *c, const char *why) {
        assert(c);
        HttpRequest *r = &c->parser.req;
        _cleanup_(dispatch_done) Dispatch d = {.r = r};

        if (!c->req->alias.conf || c->req->attempt.via_fallback || c->req->answer.engine_bytes_sent ||
            !dispatch_pick_target(c, why))
                return false;
        metrics_alias_move(manager_metrics(c->manager), c->req->alias.conf->name);
        client_attempt_end(c);
        c->req->fallback.conf = NULL; /* the next target's engine names its own */

        /* the request is the parser's still (its body kept for this): read again, it cannot fail now */
        dispatch_from_parser(&d);
        if (!dispatch_read_model(c, &d))
                return true;
        c->req->host = config_host_of_model(c->req->config, c->req->alias.target, &d.key);
        if (!c->req->host) /* verified at load; the config is the one the pick read */
                return client_answer(c, ANSWER_ALIAS_TARGET_LOST), true;
        dispatch_to_host(c, &d);
        return true;
}

/* The routed request, rewritten, to its host: at once, or when its engine is up. */
static void dispatch_to_host(Client *c, Dispatch *d) {
        HttpRequest *r = d->r;

        if (!dispatch_rewrite(c, d))
                return;
        Host *host = manager_host(c->manager, c->req->host);
        if (!host) {
                /* admitted (or moved on to this alias target) under a configuration that a reload has
                 * replaced since, and the host it named is gone and drained: the host's refusal, so
                 * that an alias moves on and the fallback may answer */
                char msg[256];
                (void)answer_format(msg, sizeof(msg), ANSWER_HOST_REMOVED, c->req->host->name);
                (void)client_attempt_failed(c, ATTEMPT_REFUSED, 503, msg);
                return;
        }
        c->req->attempt.target = &c->req->host->url;
        ssize_t engine = dispatch_engine(c, d, host);
        if (engine < -1)
                return;
        if (!client_stream_remember(c, d->r, d->path, engine >= 0 ? c->req->attempt.engine_name : ""))
                return;
        /* rule:attribution-line: Claude Code's changing first line never reaches a llama.cpp host (the
         * fallback builds its request from the client's body as it was) */
        Span cut = c->req->api == API_ANTHROPIC && d->body && d->r->method == HTTP_POST
                           ? attribution_block(d->body, d->body_len)
                           : (Span){};
        if (client_build_request(c, c->req->attempt.target, d->url,
                                 (Span){d->body ?: "", d->body ? d->body_len : 0}, d->span, d->key, cut,
                                 &c->req->attempt.pending) < 0) {
                client_answer(c, ANSWER_OUT_OF_MEMORY);
                return;
        }
        /* the request's own copy of the body is not needed any more, unless a fallback or an alias's next
         * target may need it */
        if (!c->req->fallback.conf && !c->req->alias.conf)
                buffer_done(&r->body);
        if (engine >= 0 && !dispatch_probe_may_go(c, d, host, (size_t)engine))
                return;
        HostRefusal refusal;
        client_activity_begin(c);
        HostAcquire k = engine >= 0 ? host_acquire(host, (size_t)engine, &c->req->attempt.waiter,
                                                   client_engine_ready, client_host_went_down,
                                                   c->req->alias.target ?: c->req->model, &refusal)
                                    : host_attach(host, &c->req->attempt.waiter, client_host_went_down,
                                                  c->req->alias.target ?: c->req->model, &refusal);
        if (k != HOST_REFUSED)
                c->req->attempt.waiter.id = client_request_id(c); /* for the switch and wait lines */
        switch (k) {
        case HOST_REFUSED:
                (void)client_attempt_failed(c, attempt_failure_of_refusal(refusal.status), refusal.status,
                                            refusal.message);
                return;
        case HOST_QUEUED:
                client_activity_queued(c);
                client_wait_for_engine(c);
                return; /* client_engine_ready() goes on */
        case HOST_ACQUIRED:
                if (engine >= 0) {
                        metrics_wait(manager_metrics(c->manager), c->req->host->name, 0);
                        metrics_queued(manager_metrics(c->manager), c->req->host->name, 0);
                        client_wait_for_engine(c); /* its router may still have to load the model */
                }
                break;
        }
        client_go(c);
}
