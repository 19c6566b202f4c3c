/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A request's life as /activity shows it (rule:activity-feed), and the /activity subscribers. The record
 * is the Request's (records/activity.h): it points at the Request's names, and events are written only
 * while someone follows. Only names, ids and numbers go into it, never a prompt or an answer
 * (rule:no-text-in-activity). */

#include <assert.h>

#include "modelgated/client/client-internal.h"
#include "shared/strv.h"

static void client_activity_send(FeedSubscriber *s, const FeedEvent *e);

static const FeedSubscriberOps client_activity_ops = {
        .send = client_activity_send,
};

/* rule:no-text-in-activity: the model as the client named it, when it is a name of the configuration (an
 * alias's, or an engine's Models= entry as written) or of the host's own list; NULL, shown as unknown, for
 * anything else, which is the client's text alone (a glob, or a host that passes /models/... calls on,
 * takes any words). Asked again at each phase: an engine that a switch starts lists its models then. */
static bool model_listed(Client *c, Host *h) {
        Request *req = c->req;
        const char *key = NULL;

        if (!config_host_of_model(req->config ?: manager_config(c->manager), req->model, &key))
                return false;
        if (catalog_lists(host_catalog(h), key) > 0 || catalog_engine_for_key(host_catalog(h), key) >= 0)
                return true;
        for (size_t i = 0; i < host_n_engines(h); i++)
                if (strv_contains(host_engine(h, i)->conf->models, key))
                        return true;
        return false;
}

static const char *shown_model(Client *c) {
        Request *req = c->req;
        RequestActivity *a = &req->activity;
        Host *h;

        if (!req->model || req->alias.conf)
                return req->model;
        if (!req->host || !(h = manager_host(c->manager, req->host)))
                return NULL;
        /* the same answer while the catalog is the same (its generation is never another catalog's), for
         * a request that holds its configuration */
        uint64_t g = catalog_generation(host_catalog(h));
        if (!req->config || a->shown_host != h || a->shown_generation != g || a->shown_of != req->model) {
                a->shown = model_listed(c, h);
                a->shown_host = req->config ? h : NULL;
                a->shown_generation = g;
                a->shown_of = req->model;
        }
        return a->shown ? req->model : NULL;
}

void client_activity_model_listed(Client *c, Host *h) {
        Request *req = c->req;

        /* what model_listed() would find: the same host, key and catalog, for the model as named */
        if (req->alias.conf || !req->config)
                return;
        req->activity.shown = true;
        req->activity.shown_host = h;
        req->activity.shown_generation = catalog_generation(host_catalog(h));
        req->activity.shown_of = req->model;
}

/* The request reached its host (again, for an alias's next target) */
void client_activity_begin(Client *c) {
        assert(c);
        Request *req = c->req;
        ActivityRequest *r = &req->activity.entry;

        /* the Request's own strings, which live as long as it does: the record copies them only at the
         * end, into its ring */
        r->id = client_request_id(c);
        r->model = shown_model(c);
        r->host = req->host ? req->host->name : NULL;
        r->engine = req->attempt.engine_name;
        r->key = req->caller.admitted ? access_caller_id(&req->caller, req->activity.key) : NULL;
        r->api = path_route_activity(req->route ?: path_route_none());
        r->stream = req->ask.stream;
        /* rule:sessions: a turn is a generation, not a token count or a template */
        r->session_who = client_identity(c);
        r->session = client_session_label(c);
        r->turn = r->session && path_route_keeps_stream(req->route ?: path_route_none(), req->method);
        /* the first time, the request's own start (the same reading of the loop's clock, as a rule, and
         * no other); an alias's next target begins now */
        activity_request_begin(manager_activity(c->manager), r, r->owner ? client_now(c) : req->start);
}

/* Its engine is up: it goes to the engine now */
void client_activity_ready(Client *c, usec_t now) {
        activity_request_ready(&c->req->activity.entry, now);
}

/* The model was read again (an alias's next target): the entry points at the Request's string, and would
 * point at the freed one until the next host's activity begin (which a host removed by a reload never
 * reaches) */
void client_activity_model_read(Client *c) {
        c->req->activity.entry.model = c->req->model;
}

/* It waits for its engine: why, and behind how many */
void client_activity_queued(Client *c) {
        ActivityRequest *r = &c->req->activity.entry;
        usec_t hold_left;

        HostWait w = host_waiter_wait(&c->req->attempt.waiter, &r->position, &hold_left);
        r->waits_for = host_wait_to_string(w);
        r->hold_down_left = w == HOST_WAIT_HOLD_DOWN && hold_left != USEC_INFINITY
                                    ? (double)hold_left / USEC_PER_SEC
                                    : -1;
        r->model = shown_model(c);
        activity_request_phase(r, ACTIVITY_QUEUED, client_now(c));
}

/* Its engine's router loads its model (seen at the keepalives of a waiting stream) */
void client_activity_loading(Client *c) {
        ActivityRequest *r = &c->req->activity.entry;
        int p = host_waiter_loading(&c->req->attempt.waiter);

        if ((p < 0 && p != -ENODATA) || (r->phase == ACTIVITY_LOADING && r->progress == p))
                return;
        r->progress = p >= 0 ? p : -1;
        r->model = shown_model(c);
        activity_request_phase(r, ACTIVITY_LOADING, client_now(c));
}

void client_activity_first_byte(Client *c) {
        ActivityRequest *r = &c->req->activity.entry;

        r->first_byte_ms = (int64_t)(c->req->first_byte / USEC_PER_MSEC);
        r->model = shown_model(c);
        activity_request_phase(r, ACTIVITY_FIRST_BYTE, c->req->start + c->req->first_byte);
}

/* Its end, from the request's record: a struct copy into the ring. The record learns from the entry what
 * the journal's fields carry of it (rule:history). */
void client_activity_done(Client *c, RequestRecord *rec) {
        Request *req = c->req;
        ActivityRequest *r = &req->activity.entry;

        if (!r->owner)
                return;
        r->model = shown_model(c);
        rec->api = r->api;
        rec->stream = r->stream;
        rec->model_hidden = !r->model && req->model;
        activity_request_ended(r, rec, req->start);
        rec->done_at = r->t + r->realtime;
}

/* rule:activity-feed: without [Access] anyone on the socket; with it, a tier with Activity=yes */
bool client_may_watch(Client *c) {
        if (!manager_config(c->manager)->access.enabled)
                return true;
        if (c->req->caller.tier && c->req->caller.tier->activity)
                return true;
        client_answer(c, ANSWER_ACTIVITY_NOT_ALLOWED,
                      c->req->caller.tier ? c->req->caller.tier->name : "anonymous");
        return false;
}

/* GET /activity: the snapshot, then every host's and request's news, until the client goes */
void client_start_activity(Client *c) {
        assert(c);
        Manager *m = c->manager;
        FeedHub *hub = activity_hub(manager_activity(m));
        _cleanup_(buffer_done) Buffer snap = {};

        if (!client_may_watch(c) || !client_feed_open(c, "/activity"))
                return;
        c->activity_feed = true;
        if (manager_activity_snapshot(m, /* event= */ true, &snap) < 0 ||
            client_frame_body(c, buffer_peek(&snap), buffer_size(&snap)) < 0) {
                client_close(c);
                return;
        }
        feed_hub_subscribe(hub, &c->feed_sub, &client_activity_ops);
        client_flush(c);
}

static void client_activity_send(FeedSubscriber *s, const FeedEvent *e) {
        _cleanup_(client_unrefp) Client *c = client_ref(container_of(s, Client, feed_sub));

        if (buffer_size(&c->out) > CLIENT_FEED_OUT_MAX) {
                /* bounded: a subscriber that does not read is dropped, not buffered for ever */
                log_info("Client %s does not read /activity, dropping it", c->peer);
                client_log_access(c, "cut=slow-client");
                client_close(c);
                return;
        }
        if (client_frame_body(c, e->text, e->size) < 0)
                client_close(c);
        else
                client_flush(c);
}
