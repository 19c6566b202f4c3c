/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A request, from its head to the host: admission ([Access], body limits) as soon as the head is read,
 * then, once its body is in, the phases of DISPATCH_PHASES in their order: modelgate's own endpoints,
 * the model, the route (rule:host-in-name), the rewrite of its model, and the wait for the host's engine.
 * Every path passes through; only the model is rewritten (rule:passthrough). */

#include "modelgated/client/client-internal.h"
#include "modelgated/api/attribution.h"
#include "modelgated/access/basic-auth.h"
#include "modelgated/sched/model-memory.h"
#include "modelgated/api/path-table.h"

/* The phases of a request, in their order: each one's name, its function, and whether it only reads the
 * request into the Dispatch (dispatch_run() reads the request again through those). A wait (Redis
 * admission, the host's engine) or an alias's next target goes on from one of them. */
#define DISPATCH_PHASES(X)                                                                                  \
        X(BEGIN, phase_begin, false)                                                                        \
        X(HOST_CHECK, phase_host_check, false) /* rule:host-check: before anything else */                  \
        X(OWN, phase_own, false)               /* modelgate's own endpoints, and [Access]'s admission */    \
        X(READ_MODEL, phase_read_model, true)  /* the model the request names */                            \
        X(ROUTE, phase_route, false)           /* the caller's day and tier, the alias's target */          \
        X(TARGET, phase_target, true)          /* the host the model (or the alias's target) names */       \
        X(ADMIT, phase_admit, false)           /* counted for the caller's day: Redis may answer later */   \
        X(REWRITE, phase_rewrite, false)       /* where Redis's answer and the alias's next target go on */ \
        X(HOST, phase_host, false)                                                                          \
        X(ENGINE, phase_engine, false)                                                                      \
        X(BUILD, phase_build, false)                                                                        \
        X(PROBE, phase_probe, false)                                                                        \
        X(ACQUIRE, phase_acquire, false)                                                                    \
        X(GO, phase_go, false) /* where the host's engine, once up, goes on */

#define DISPATCH_PHASE_ENUM(name, fn, reads) DISPATCH_##name,
typedef enum DispatchPhase {
        DISPATCH_PHASES(DISPATCH_PHASE_ENUM) _DISPATCH_PHASE_MAX,
} DispatchPhase;

/* What a phase says: on to the next; an answer (Dispatch.answer), which dispatch_run() writes; or nothing
 * more here: answered by its own means (an own endpoint, the attempt table), or waiting, and a callback
 * goes on */
typedef enum PhaseEnd {
        PHASE_GOES_ON,
        PHASE_ANSWERS,
        PHASE_DONE,
        PHASE_WAITS,
} PhaseEnd;

static void dispatch_run(Client *c, DispatchPhase from);

void client_go(Client *c) {
        if (client_send_upstream(c) >= 0)
                client_start_budget(c);
}

static void client_answer_words(Client *c, const AnswerWords *w) {
        client_answer_message(c, w->answer, w->status, w->retry_after, w->message);
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
                client_activity_ready(c, now);
                dispatch_run(c, DISPATCH_GO);
        }
        client_flush(c);
        client_process(c);
}

/* [Access]: who the client is. false: refused, in w (401). */
static bool client_admit(Client *c, AnswerWords *w) {
        HttpRequest *r = &c->parser.req;
        Span auth = http_request_header(r, "Authorization"), xkey = http_request_header(r, "X-Api-Key");
        _cleanup_free_ char *key = NULL;
        AccessDenial d;

        c->req->browser = path_route_browser(c->req->route, r->method);
        if (auth.p && auth.n > 7 && strncasecmp(auth.p, "Bearer ", 7) == 0)
                key = strndup(auth.p + 7, auth.n - 7);
        else if (xkey.p)
                key = strndup(xkey.p, xkey.n);
        else if (c->req->browser && basic_auth_key(auth, &key) < 0) {
                answer_words_0(w, ANSWER_OUT_OF_MEMORY);
                return false;
        }
        /* the caller's tier points into this configuration: the request holds it, through a reload that
         * comes while its body is read or its listing waits */
        if (!c->req->config)
                c->req->config = config_ref(manager_config(c->manager));
        if (access_identify(c->req->config, key, c->peer, &c->req->caller, &d) != ACCESS_ALLOWED) {
                answer_words_given(w, d.answer, /* status= */ 0, /* retry_after= */ 0, d.message);
                c->req->caller.admitted = false;
                return false;
        }
        return true;
}

static void refuse_cap(AnswerWords *w, const AccessDenial *denial) {
        answer_words_given(w, denial->answer, /* status= */ 0, denial->retry_after, denial->message);
}

/* A caller whose day is used up is told on the head: its body is never read. false: refused, in w. */
static bool client_within_cap(Client *c, AnswerWords *w) {
        Access *access = manager_access(c->manager);
        AccessDenial denial;

        if (!c->req->caller.admitted || !access ||
            access_check(access, c->req->config, &c->req->caller, c->peer, &denial) != ACCESS_OVER_CAP)
                return true;
        refuse_cap(w, &denial);
        return false;
}

/* The body limit of the caller: its tier's MaxBodySize=, or AnonymousMaxBodySize=; 0: MaxBodySize=. */
static uint64_t caller_body_limit(const Client *c) {
        const AccessConf *a = &(c->req->config ?: manager_config(c->manager))->access;
        return c->req->caller.tier ? c->req->caller.tier->max_body_size : a->anonymous_max_body_size;
}

static void refuse_body(Client *c, AnswerWords *w) {
        answer_words_ssu(w, ANSWER_BODY_TOO_LARGE,
                         c->req->caller.tier ? "this key's tier" : "this proxy for clients without a key",
                         c->req->caller.tier ? "MaxBodySize=" : "AnonymousMaxBodySize=",
                         (unsigned long long)caller_body_limit(c));
}

/* The head's admission, the host checked: false when refused, in w */
static bool head_admitted(Client *c, bool open, bool access, bool lookup, AnswerWords *w) {
        if (open) {
                /* what modelgate answers itself reads no body: none is held for it */
                if (http_parser_limit_body(&c->parser, 0, /* why= */ NULL) >= 0)
                        return true;
                answer_words_0(w, ANSWER_BODY_NOT_TAKEN);
                return false;
        }
        if (access && (!client_admit(c, w) || !client_within_cap(c, w)))
                return false;
        uint64_t limit = access ? caller_body_limit(c) : 0;
        if (limit > 0 && http_parser_limit_body(&c->parser, limit, /* why= */ NULL) < 0) {
                refuse_body(c, w);
                return false;
        }
        return !lookup || client_stream_limit_lookup(c, w);
}

/* [Access] on the head of a request whose body is still to come: who asks is known before anything of the
 * body is read, so that a client without a (good) key cannot make modelgate hold its body. false: it was
 * answered (401, 413), and the connection closes without reading the body. */
bool client_admit_head(Client *c) {
        assert(c);
        HttpRequest *r = &c->parser.req;
        Span path = url_path(http_request_url(r));
        const PathRoute *route = c->req->route = path_route_lookup(path); /* the request's one lookup */
        bool open = path_route_open(route, r->method), close = c->close_after_response,
             access = manager_config(c->manager)->access.enabled,
             lookup = path_route_own(route, r->method) == PATH_OWN_STREAM_LOOKUP;
        AnswerWords w;

        if (!open && !lookup && !access)
                return true; /* rule:host-check: client_dispatch() checks it */
        /* an answer on the head is the request's answer: its access line names it, and the body that
         * follows is not read (the connection closes) */
        c->req->start = client_now(c);
        c->req->method = r->method;
        c->req->path = path;
        c->req->api = path_route_api(route);
        c->close_after_response = true;
        if (client_host_refused(c)) /* rule:host-check: before anything else */
                return false;
        if (!head_admitted(c, open, access, lookup, &w)) {
                client_answer_words(c, &w);
                return false;
        }
        /* admitted: the request is dispatched when its body is in */
        c->req->method = REQUEST_NO_METHOD;
        c->req->path = (Span){};
        c->close_after_response = close;
        return true;
}

/* What the phases learn of a request on its way to the host */
typedef struct Dispatch {
        HttpRequest *r;
        Span url, path;
        Span span, qspan; /* the model's value in the body, in the query */
        bool in_body, in_query;
        bool again; /* the request read again, to go on from a later phase */
        const char *body;
        size_t body_len, url_len;
        const char *model; /* as the client named it: the Request's copy */
        char *qmodel;      /* the query's, while it is compared with the body's */
        const char *key;   /* the model without its host */
        char *quoted;      /* the key, for the query (the body's is written straight into the request) */
        char *new_url;
        Host *host;
        ssize_t engine;      /* -1: a host without engines */
        AnswerWords *answer; /* written only by a phase that answers: not cleared for each request */
} Dispatch;

static void dispatch_done(Dispatch *d) {
        free(d->qmodel);
        free(d->quoted);
        free(d->new_url);
}

/* The request as the parser holds it (its body kept while an alias or Redis may need it again) */
static void dispatch_from_parser(Dispatch *d) {
        d->url = http_request_url(d->r);
        d->url_len = d->url.n;
        d->path = url_path(d->url);
        d->body = buffer_peek(&d->r->body);
        d->body_len = buffer_size(&d->r->body);
}

static PhaseEnd phase_begin(Client *c, Dispatch *d) {
        HttpRequest *r = d->r;

        c->req->start = client_now(c);
        c->req->method = r->method;
        c->req->path = d->path;
        c->req->user_agent = http_request_header(r, "User-Agent");
        if (!c->req->route) /* else looked up on the head, of the same path */
                c->req->route = path_route_lookup(d->path);
        c->req->api = path_route_api(c->req->route);
        c->req->head = r->method == HTTP_HEAD;
        c->req->http10 = r->http_major == 1 && r->http_minor == 0;
        if (!r->keep_alive || manager_stopping(c->manager))
                c->close_after_response = true;
        return PHASE_GOES_ON;
}

static PhaseEnd phase_host_check(Client *c, Dispatch *d) {
        return client_host_refused(c) ? PHASE_DONE : PHASE_GOES_ON;
}

/* modelgate's own answers, and admission before anything reaches a host */
static PhaseEnd phase_own(Client *c, Dispatch *d) {
        PathOwn own = path_route_own(c->req->route, d->r->method);

        if (d->url.n == 0 || d->url.p[0] != '/') {
                answer_words_0(d->answer, ANSWER_NOT_A_PATH);
                return PHASE_ANSWERS;
        }
        /* before admission and the daemon's own refusals (rule:websocket-426) */
        if (client_refuse_websocket(c))
                return PHASE_DONE;
        if (manager_refusal(c->manager)) {
                client_respond_refusal(c, own == PATH_OWN_HEALTH);
                return PHASE_DONE;
        }
        if (own != PATH_OWN_NONE && c->req->route->open) {
                client_dispatch_own(c, own, d->url, d->path);
                return PHASE_DONE;
        }
        if (manager_config(c->manager)->access.enabled) {
                if (!c->req->caller.admitted && !client_admit(c, d->answer))
                        return PHASE_ANSWERS;
                uint64_t limit = caller_body_limit(c);
                if (limit > 0 && buffer_size(&d->r->body) > limit) {
                        refuse_body(c, d->answer);
                        return PHASE_ANSWERS;
                }
        }
        if (own == PATH_OWN_NONE)
                return PHASE_GOES_ON;
        client_dispatch_own(c, own, d->url, d->path);
        return PHASE_DONE;
}

/* The model the request names, in its body or its query (rule:model-rewrite, rule:model-once) */
static PhaseEnd phase_read_model(Client *c, Dispatch *d) {
        _cleanup_free_ char *model = NULL; /* the body's */
        Answer a = _ANSWER_INVALID;
        int k;

        if (d->body_len > 0) {
                k = json_read_request(d->body, d->body_len, &d->span, &model, &c->req->ask);
                d->in_body = k == MODEL_FOUND;
                a = model_lookup_answer(k, /* query= */ false, /* absent_ok= */ true, /* any_body= */ true);
        }
        if (a < 0) {
                /* a model in the query too: the host reads both, so both must name the same one (else a
                 * tier's Models= would be checked against one and the host would load the other) */
                k = query_find_model(d->url, &d->qspan, &d->qmodel);
                d->in_query = k == MODEL_FOUND;
                a = model_lookup_answer(k, /* query= */ true, d->in_body, d->body_len > 0);
        }
        if (a < 0 && d->in_body && d->in_query && !streq(model, d->qmodel))
                a = ANSWER_MODEL_BODY_AND_QUERY;
        if (a < 0 && !d->in_body) {
                model = TAKE_PTR(d->qmodel);
                d->span = d->qspan;
        }
        /* control characters would go into log lines and the host's request as they are */
        for (const char *q = model; a < 0 && *q; q++)
                if ((unsigned char)*q < 0x20 || *q == 0x7f)
                        a = ANSWER_MODEL_CONTROL_CHARACTER;
        if (a >= 0) {
                answer_words_0(d->answer, a);
                return PHASE_ANSWERS;
        }
        free(c->req->model);
        d->model = c->req->model = TAKE_PTR(model);
        client_activity_model_read(c);
        return PHASE_GOES_ON;
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
                          who.session ? client_session_label(c) : "", a->targets[i], why);
        c->req->alias.tried |= UINT64_C(1) << i;
        c->req->alias.target = a->targets[i];
        manager_alias_used(c->manager, a, &who, (size_t)i);
        return true;
}

/* The engine of the host that serves the key, and what that engine's [Engine] says of budgets and the
 * fallback (d->engine: its index, -1 for a host without engines) */
static PhaseEnd phase_engine(Client *c, Dispatch *d) {
        Host *host = d->host;
        char k2[160];

        /* an alias's earlier target named its own: a host without engines names none */
        c->req->model_label = NULL;
        c->req->attempt.engine_conf = NULL;
        c->req->attempt.engine_name = NULL;
        d->engine = -1;
        if (!host_has_engines(host)) {
                int listed = catalog_lists(host_catalog(host), d->key);
                if (listed > 0) {
                        c->req->model_label = d->key; /* rule:usage-metrics: the host lists it */
                        client_activity_model_listed(c, host);
                }
                if (c->req->route->models_call || listed != 0)
                        return PHASE_GOES_ON;
                /* rule:unlisted-key-404: a key the host does not list (its list is known) is 404;
                 * /models/... calls (a download of a new model, say) are the host's to judge */
                log_escape(k2, sizeof(k2), d->key, strlen(d->key));
                answer_words_ss(d->answer, ANSWER_UNKNOWN_MODEL, c->req->host->name, k2);
                return PHASE_ANSWERS;
        }
        d->engine = host_find_engine(host, d->key, &c->req->model_label);
        if (d->engine < 0) {
                log_escape(k2, sizeof(k2), d->key, strlen(d->key));
                answer_words_ss(d->answer, ANSWER_NO_ENGINE, c->req->host->name, k2);
                return PHASE_ANSWERS;
        }
        /* rule:never-listed-404: no GPU moves for a name its engine is known not to have and the host never
         * listed (models-seen.json: what a list read while another engine shared its URL taught is not
         * trusted alone); /models/... calls are the host's to judge, as in rule:unlisted-key-404 */
        if (!c->req->route->models_call && host_key_known_absent(host, (size_t)d->engine, d->key) &&
            !model_memory_get(manager_model_memory(c->manager), c->req->host->name, d->key)) {
                const char *e = host_engine(host, (size_t)d->engine)->conf->name;
                log_escape(k2, sizeof(k2), d->key, strlen(d->key));
                answer_words_sssss(d->answer, ANSWER_NEVER_LISTED, c->req->host->name, e, k2,
                                   c->req->host->name, e);
                return PHASE_ANSWERS;
        }
        c->req->attempt.target = host_engine(host, (size_t)d->engine)->url;
        c->req->attempt.engine_conf = host_engine(host, (size_t)d->engine)->conf;
        c->req->attempt.engine_name = c->req->attempt.engine_conf->name;
        if (client_fallback_choose(c, d->r->method, d->in_body))
                c->req->attempt.awaiting_first_token = c->req->ask.stream && !c->req->head;
        if (c->req->ask.stream && c->req->attempt.engine_conf->first_token_budget_usec != 0)
                c->req->attempt.awaiting_first_token = !c->req->head;
        return PHASE_GOES_ON;
}

/* rule:probe: a probe for an engine that is not up never moves the GPU nor waits behind a switch; the
 * host says whether it goes (the alias's next target may have its engine up) */
static PhaseEnd phase_probe(Client *c, Dispatch *d) {
        HostRefusal refusal;

        if (d->engine < 0 || !path_route_probe(c->req->route, d->r->method) ||
            !host_refuses_probe(d->host, (size_t)d->engine, d->key, &refusal))
                return PHASE_GOES_ON;
        (void)client_attempt_failed(c, ATTEMPT_PROBE, refusal.status, refusal.message);
        return PHASE_DONE;
}

/* The caller's day and tier, and for an alias its target */
static PhaseEnd phase_route(Client *c, Dispatch *d) {
        /* a caller whose day is used up hears so first, as it does on a head with a body (the same answer
         * however the request came in pieces) */
        if (!client_within_cap(c, d->answer))
                return PHASE_ANSWERS;
        /* a tier's Models= limits routing as much as the list */
        if (c->req->caller.admitted && !access_model_allowed(&c->req->caller, d->model)) {
                answer_words_ss(d->answer, ANSWER_MODEL_NOT_ALLOWED, c->req->caller.tier->name,
                                c->req->model);
                return PHASE_ANSWERS;
        }
        if (!c->req->config)
                c->req->config = config_ref(manager_config(c->manager));
        client_read_session(c);
        c->req->alias.conf = config_find_alias(c->req->config, d->model);
        if (c->req->alias.conf && !dispatch_pick_target(c, NULL)) {
                answer_words_0(d->answer, ANSWER_OUT_OF_MEMORY);
                return PHASE_ANSWERS;
        }
        return PHASE_GOES_ON;
}

/* The host the model names, or none: never another host's copy (rule:no-substitute) */
static PhaseEnd phase_target(Client *c, Dispatch *d) {
        char m2[160];

        c->req->host = config_host_of_model(c->req->config, c->req->alias.target ?: d->model, &d->key);
        if (c->req->host)
                return PHASE_GOES_ON;
        if (d->again) /* routed before, under the configuration the request holds */
                answer_words_0(d->answer, ANSWER_ALIAS_TARGET_LOST);
        else {
                log_escape(m2, sizeof(m2), d->model, strlen(d->model));
                answer_words_s(d->answer, ANSWER_UNKNOWN_HOST, m2);
        }
        return PHASE_ANSWERS;
}

/* rule:shared-counts: Redis admitted the request (or refused it) */
static void client_admitted(AccessWait *w, int verdict, const AccessDenial *denial) {
        _cleanup_(client_unrefp) Client *c = client_ref(container_of(w, Request, access_wait)->client);
        AnswerWords a;

        if (verdict == ACCESS_OVER_CAP) {
                refuse_cap(&a, denial);
                client_answer_words(c, &a);
        } else
                dispatch_run(c, DISPATCH_REWRITE);
        client_flush(c);
        client_process(c);
}

/* Counted once it routes: a mistyped model name costs nobody a request of the day */
static PhaseEnd phase_admit(Client *c, Dispatch *d) {
        AccessDenial denial;
        Access *access = manager_access(c->manager);
        int k;

        if (!c->req->caller.admitted)
                return PHASE_GOES_ON;
        c->req->access_wait.fn = client_admitted;
        k = access ? access_admit(access, c->req->config, &c->req->caller, c->peer, &denial,
                                  &c->req->access_wait)
                   : -ENOMEM;
        if (k == ACCESS_PENDING)
                return PHASE_WAITS;
        if (k == ACCESS_OVER_CAP) {
                refuse_cap(d->answer, &denial);
                return PHASE_ANSWERS;
        }
        if (k < 0) {
                answer_words_0(d->answer, ANSWER_OUT_OF_MEMORY);
                return PHASE_ANSWERS;
        }
        return PHASE_GOES_ON;
}

/* The model renamed to its key where the client named it (the host sees "laguna-xs") */
static PhaseEnd phase_rewrite(Client *c, Dispatch *d) {
        if (!d->in_body)
                d->span = (Span){};
        if (d->in_query) {
                d->quoted = query_escape(d->key);
                d->new_url = d->quoted ? span_replace(d->url, d->qspan, d->quoted, &d->url_len) : NULL;
                d->url = (Span){d->new_url, d->url_len};
                if (!d->new_url) {
                        answer_words_0(d->answer, ANSWER_OUT_OF_MEMORY);
                        return PHASE_ANSWERS;
                }
        }
        return PHASE_GOES_ON;
}

static PhaseEnd phase_host(Client *c, Dispatch *d) {
        char msg[256];

        d->host = manager_host(c->manager, c->req->host);
        if (!d->host) {
                /* admitted (or moved on to this alias target) under a configuration that a reload has
                 * replaced since, and the host it named is gone and drained: the host's refusal, so
                 * that an alias moves on and the fallback may answer */
                (void)answer_format(msg, sizeof(msg), ANSWER_HOST_REMOVED, c->req->host->name);
                (void)client_attempt_failed(c, ATTEMPT_REFUSED, 503, msg);
                return PHASE_DONE;
        }
        c->req->attempt.target = &c->req->host->url;
        return PHASE_GOES_ON;
}

/* The request for the host, with its conversation id */
static PhaseEnd phase_build(Client *c, Dispatch *d) {
        if (!client_stream_remember(c, d->r, d->engine >= 0 ? c->req->attempt.engine_name : "")) {
                answer_words_0(d->answer, ANSWER_OUT_OF_MEMORY);
                return PHASE_ANSWERS;
        }
        /* rule:attribution-line: Claude Code's changing first line never reaches a llama.cpp host (the
         * fallback builds its request from the client's body as it was) */
        Span cut = c->req->api == API_ANTHROPIC && d->body && d->r->method == HTTP_POST
                           ? attribution_block(d->body, d->body_len)
                           : (Span){};
        if (client_build_request(c, c->req->attempt.target, d->url,
                                 (Span){d->body ?: "", d->body ? d->body_len : 0}, d->span, d->key, cut,
                                 &c->req->attempt.pending) < 0) {
                answer_words_0(d->answer, ANSWER_OUT_OF_MEMORY);
                return PHASE_ANSWERS;
        }
        /* the request's own copy of the body is not needed any more, unless a fallback or an alias's next
         * target may need it. Given back even when small: a client waiting for its engine (the request is
         * built before the wait) would hold its room for as long as it waits, 256 bytes each of 10,000 */
        if (!client_fallback_chosen(c) && !c->req->alias.conf)
                buffer_done(&d->r->body);
        return PHASE_GOES_ON;
}

/* The host's engine for the request, or the host itself for one without engines: at once, or when the
 * engine is up (client_engine_ready()) */
static PhaseEnd phase_acquire(Client *c, Dispatch *d) {
        HostRefusal refusal;
        HostAcquire k;

        client_activity_begin(c);
        k = d->engine >= 0
                    ? host_acquire(d->host, (size_t)d->engine, &c->req->attempt.waiter, client_engine_ready,
                                   client_host_went_down, c->req->alias.target ?: c->req->model, &refusal)
                    : host_attach(d->host, &c->req->attempt.waiter, client_host_went_down,
                                  c->req->alias.target ?: c->req->model, &refusal);
        if (k != HOST_REFUSED)
                c->req->attempt.waiter.id = client_request_id(c); /* for the switch and wait lines */
        switch (k) {
        case HOST_REFUSED:
                (void)client_attempt_failed(c, attempt_failure_of_refusal(refusal.status), refusal.status,
                                            refusal.message);
                return PHASE_DONE;
        case HOST_QUEUED:
                client_activity_queued(c);
                client_wait_for_engine(c);
                return PHASE_WAITS; /* client_engine_ready() goes on */
        case HOST_ACQUIRED:
                if (d->engine >= 0) {
                        metrics_wait(manager_metrics(c->manager), c->req->host->name, 0);
                        metrics_queued(manager_metrics(c->manager), c->req->host->name, 0);
                        client_wait_for_engine(c); /* its router may still have to load the model */
                }
                break;
        }
        return PHASE_GOES_ON;
}

static PhaseEnd phase_go(Client *c, Dispatch *d) {
        client_go(c);
        return PHASE_DONE;
}

/* The phases from 'from' on, until one answers or waits; the one answer a phase decides is written here.
 * When a phase that uses the Dispatch (those from READ_MODEL to ACQUIRE) goes on after a wait or for an
 * alias's next target, the request is read again through the phases before it that only read it (the
 * parser holds it: its body is kept for this), and nothing else before it runs again. The phases are
 * written out in a row, not called through a table: this runs for every request. */
static void dispatch_run(Client *c, DispatchPhase from) {
        AnswerWords answer;
        _cleanup_(dispatch_done)
                Dispatch d = {.r = &c->parser.req, .again = from > DISPATCH_BEGIN, .answer = &answer};
        bool again = from > DISPATCH_READ_MODEL && from < DISPATCH_GO;
        PhaseEnd e = PHASE_GOES_ON;

        dispatch_from_parser(&d);
#define DISPATCH_PHASE_RUN(name, fn, reads)                                                                 \
        if ((from <= DISPATCH_##name || (reads && again)) && (e = fn(c, &d)) != PHASE_GOES_ON)              \
                goto end;
        DISPATCH_PHASES(DISPATCH_PHASE_RUN)
#undef DISPATCH_PHASE_RUN
end:
        if (e == PHASE_ANSWERS)
                client_answer_words(c, &answer);
}

/* A complete request: modelgate's own answer, or on to its host (at once, or when its engine is up). */
void client_dispatch(Client *c) {
        assert(c);
        dispatch_run(c, DISPATCH_BEGIN);
}

/* An alias's target refused before any byte of its answer reached the client (host down, GPU busy,
 * engine failed, connection refused): the same request goes to the next target, each at most once, and
 * is exactly a request for that target from then on. false: none is left (the fallback is next). */
bool client_next_target(Client *c, const char *why) {
        assert(c);

        if (!c->req->alias.conf || c->req->attempt.via_fallback || c->req->answer.engine_bytes_sent ||
            !dispatch_pick_target(c, why))
                return false;
        metrics_alias_move(manager_metrics(c->manager), c->req->alias.conf->name);
        client_attempt_end(c);
        client_fallback_forget(c); /* the next target's engine names its own */
        dispatch_run(c, DISPATCH_REWRITE);
        return true;
}
