/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What an answer says it cost (rule:usage), the request's RequestUsage: read as the answer passes (an event
 * stream's usage and timings through the SSE filter, a JSON body as it arrives), settled at the end (a cut
 * answer counts what arrived, rule:usage-charge charges what was not said), and counted for the caller's
 * day (rule:key-usage) and /metrics (rule:usage-metrics), once: at the access line, or by the drain that
 * reads a resumable stream on (client-stream.c). */

#include "modelgated/client/client-internal.h"

/* rule:usage: an answer that may say what it cost (a generation's 200, a stream or a JSON body) is read
 * for it as it passes */
void client_usage_start(Client *c, const UpstreamResponse *resp, Span ct, bool sse, bool no_body) {
        Request *req = c->req;

        req->usage.on = req->usage.body = false;
        if (no_body || req->method != HTTP_POST || resp->status != 200 || (req->answer.early && !sse))
                return;
        if (!sse &&
            !(ct.p && ct.n >= 16 &&
              (memcmp(ct.p, "application/json", 16) == 0 || strncasecmp(ct.p, "application/json", 16) == 0)))
                return;
        usage_init(&req->usage.tally, sse);
        req->usage.on = true;
        req->usage.body = !sse;
}

void client_usage_forget(Client *c) {
        c->req->usage.on = c->req->usage.body = false;
}

Usage *client_usage_of_answer(Client *c) {
        return c->req->usage.on ? &c->req->usage.tally : NULL;
}

void client_usage_body(Client *c, const char *p, size_t n) {
        if (c->req->usage.body)
                usage_body_feed(&c->req->usage.tally, p, n);
}

void client_usage_whole(Client *c) {
        c->req->usage.body = false; /* whole: not cut */
}

/* rule:key-usage, rule:usage-metrics: an answer's tokens, counted for its caller's day and (when its host
 * said them) for /metrics */
void client_count_usage(Manager *m, const Config *config, const AccessCaller *caller, const char *peer,
                        const char *host, const char *engine, const char *model_label, const Usage *u) {
        Access *access;

        if (!usage_known(u))
                return;
        if (host) /* the host's own work, not the cloud's */
                metrics_usage(manager_metrics(m), host, engine, model_label, u);
        if (caller->admitted && config && (access = manager_access(m)))
                access_record_usage(access, config, caller, peer, u->in, u->cached, u->out);
}

/* rule:usage: a stream that ended before its last event, or a body before its end, counts what arrived;
 * rule:usage-charge: a generation's answer is charged for what it did not say. Into u, the request's usage
 * or a copy of it; whether the answer was cut. */
static bool settle_usage(Client *c, Usage *u) {
        Request *req = c->req;
        bool cut = req->usage.body ||
                   (req->attempt.mode == MODE_SSE && !req->attempt.sse.saw_done && !req->usage.tally.ended);

        if (cut)
                usage_cut(u);
        /* a generation: a POST to a path that keeps its stream (the request's row of the path table) */
        if ((u->in < 0 || u->out < 0) &&
            path_route_keeps_stream(req->route ?: path_route_lookup(req->path), HTTP_POST))
                usage_charge(u, req->ask.bytes, req->ask.limited ? req->ask.max_out : -1);
        return cut;
}

/* The host whose work the answer was, for /metrics: none when the fallback answered */
static const char *worked(const Request *req) {
        return !req->attempt.via_fallback && req->host ? req->host->name : NULL;
}

void client_count_owed(Client *c) {
        assert(c);
        Request *req = c->req;
        Usage u;

        if (!req->usage.owed)
                return;
        req->usage.owed = false;
        u = req->usage.tally;
        (void)settle_usage(c, &u);
        client_count_usage(c->manager, req->config, &req->caller, c->peer, worked(req),
                           req->attempt.engine_name, req->model_label, &u);
}

const Usage *client_usage_for_record(Client *c, Usage *seen, bool *cut) {
        Request *req = c->req;
        Usage *u = req->usage.on ? &req->usage.tally : NULL;

        *cut = false;
        if (u && client_stream_drains(c)) {
                /* rule:resumable-streams: the rest is read on, and the answer counted whole at its end; the
                 * line says what it said so far */
                *seen = req->usage.tally;
                u = seen;
                req->usage.owed = true;
        }
        if (u)
                *cut = settle_usage(c, u);
        return u;
}

void client_usage_count(Client *c, const RequestRecord *rec) {
        Request *req = c->req;

        if (rec->usage && !req->usage.owed)
                client_count_usage(c->manager, req->config, &req->caller, c->peer,
                                   rec->fallback ? NULL : rec->host, rec->engine_tried, rec->model_label,
                                   rec->usage);
}

bool client_usage_hand_over(Client *c, Usage *to) {
        if (!c->req->usage.on)
                return false;
        *to = c->req->usage.tally;
        c->req->usage.owed = false;
        return true;
}
