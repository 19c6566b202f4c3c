/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* llama-swap's control endpoints (rule:swap-running, rule:swap-unload): GET /running, and GET /unload,
 * POST /api/models/unload and POST /api/models/unload/<model>, which stop engines as StopEngine() does:
 * once nothing is in flight or waiting on the host, so that a running stream is never cut. */

#include <assert.h>

#include "modelgated/client/client-internal.h"
#include "modelgated/catalog/catalog-list.h"
#include "modelgated/sched/running.h"

/* The models host h's engine serves now: the entries of its list that need no load (a router's "loaded",
 * a plain server's one model), each a model the caller may use. Appended to *list (of *n). */
static int running_of_host(Client *c, Host *h, RunningModel **list, size_t *n) {
        ssize_t e = host_engine_up(h);
        const CatalogList *l = host_catalog(h) ? catalog_snapshot(host_catalog(h)) : NULL;

        if (e < 0 || !l)
                return 0;
        const HostEngine *engine = host_engine(h, (size_t)e);
        for (size_t i = 0; i < catalog_list_size(l); i++) {
                _cleanup_free_ char *model = NULL;
                const char *key = catalog_list_id(l, i);

                if (catalog_list_cold(l, i))
                        continue;
                if (asprintf(&model, "%s-%s", host_conf(h)->name, key) < 0)
                        return -ENOMEM;
                if (!client_model_visible(model, c))
                        continue;
                RunningModel *p = reallocarray(*list, *n + 1, sizeof(RunningModel));
                if (!p)
                        return -ENOMEM;
                *list = p;
                p[(*n)++] = (RunningModel){
                        .host = host_conf(h)->name,
                        .key = key,
                        .state = "ready",
                        .engine = engine->conf->name,
                        .unit = engine->conf->unit,
                        .url = engine->url->text,
                };
        }
        return 0;
}

/* GET /running: what llama-swap answers, {"running":[{"model":…,"state":"ready"}, …]}, from the hosts'
 * model lists as they are (no I/O): an engine that is up, and each model it serves without a load */
void client_respond_running(Client *c) {
        assert(c);
        Manager *m = c->manager;
        _cleanup_free_ RunningModel *list = NULL;
        _cleanup_free_ char *body = NULL;
        size_t n = 0, size = 0;

        for (size_t i = 0; i < manager_n_hosts(m); i++)
                if (running_of_host(c, manager_host_at(m, i), &list, &n) < 0) {
                        client_answer(c, ANSWER_OUT_OF_MEMORY);
                        return;
                }
        if (running_render(list, n, &body, &size) < 0) {
                client_answer(c, ANSWER_OUT_OF_MEMORY);
                return;
        }
        client_respond(c, 200, "application/json", body, size, NULL);
}

/* With [Access], only a key whose tier has Control=yes may stop engines (rule:swap-unload); without it,
 * whoever reaches the socket, who can move the GPU anyway by asking for another engine's model */
static bool client_may_control(Client *c) {
        if (!manager_config(c->manager)->access.enabled)
                return true;
        if (c->req->caller.tier && c->req->caller.tier->control)
                return true;
        client_answer(c, ANSWER_CONTROL_NOT_ALLOWED,
                      c->req->caller.tier ? c->req->caller.tier->name : "anonymous");
        return false;
}

/* host_request_stop() with the log line that says who asked and what follows. Its result. */
static int unload_host(Client *c, Host *h) {
        const char *name = host_conf(h)->name;
        ssize_t e = host_running(h);
        int r = host_request_stop(h);

        if (r > 0)
                log_notice("host %s: unload asked by %s, engine %s stops once nothing is in flight", name,
                           c->peer, e >= 0 ? host_engine(h, (size_t)e)->conf->name : "?");
        else if (r == -EBUSY)
                log_notice("host %s: unload asked by %s, left to the switch under way", name, c->peer);
        else if (r == -ENOTCONN)
                log_notice("host %s: unload asked by %s, the host is down", name, c->peer);
        return r;
}

/* GET /unload (llama-swap: "OK") and POST /api/models/unload (its {"msg":"ok"}): every engine the caller
 * may reach is asked to stop; a host that is down or switching is left as it is, as its own StopEngine()
 * would be refused */
void client_unload_all(Client *c, bool api) {
        assert(c);
        Manager *m = c->manager;

        if (!client_may_control(c))
                return;
        for (size_t i = 0; i < manager_n_hosts(m); i++) {
                Host *h = manager_host_at(m, i);
                if (host_has_engines(h) && access_host_allowed(&c->req->caller, host_conf(h)->name))
                        (void)unload_host(c, h);
        }
        if (api)
                client_respond(c, 200, "application/json", "{\"msg\":\"ok\"}", 12, NULL);
        else
                client_respond(c, 200, "text/plain; charset=utf-8", "OK", 2, NULL);
}

/* POST /api/models/unload/<host>-<key> (PATH_OWN_UNLOAD_MODEL): the engine that serves that model stops
 * if it is the one running (llama-swap: "OK", or 404 for a model it does not know) */
void client_unload_model(Client *c, Span path) {
        assert(c);
        const size_t p = sizeof(UNLOAD_MODEL_PREFIX) - 1;
        _cleanup_free_ char *model = NULL;
        const char *key = NULL;
        char m2[160];

        if (!client_may_control(c))
                return;
        model = strndup(path.p + p, path.n - p);
        if (!model) {
                client_answer(c, ANSWER_OUT_OF_MEMORY);
                return;
        }
        log_escape(m2, sizeof(m2), model, strlen(model));
        if (!access_model_allowed(&c->req->caller, model)) {
                client_answer(c, ANSWER_MODEL_NOT_ALLOWED, c->req->caller.tier->name, m2);
                return;
        }
        const HostConf *hc = config_host_of_model(manager_config(c->manager), model, &key);
        Host *h = hc ? manager_host(c->manager, hc) : NULL;
        if (!h) {
                client_answer(c, ANSWER_UNKNOWN_HOST, m2);
                return;
        }
        ssize_t e = host_has_engines(h) ? host_find_engine(h, key, NULL) : -1;
        if (e < 0) {
                log_escape(m2, sizeof(m2), key, strlen(key));
                client_answer(c, ANSWER_NO_ENGINE, hc->name, m2);
                return;
        }
        /* another engine runs (or none): this model's is stopped already */
        int r = host_running(h) == e ? unload_host(c, h) : 0;
        if (r == -ENOTCONN)
                client_answer(c, ANSWER_HOST_DOWN, hc->name, host_last_error(h) ?: "unreachable");
        else if (r == -EBUSY)
                client_answer(c, ANSWER_UNLOAD_SWITCHING, hc->name);
        else
                client_respond(c, 200, "text/plain; charset=utf-8", "OK", 2, NULL);
}
