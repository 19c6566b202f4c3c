/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What follows a failed attempt: the table of client-attempt.c applied (the alias's next target, the
 * fallback, or the answer), and the end of the attempt that failed; the fallback itself and the budgets
 * (rule:fallback-availability, rule:answer-budget): an engine that cannot answer in time, or at all, hands
 * the request to [Fallback] while no byte of its answer has reached the client; inference only, with the
 * path modelgate builds and only the headers the API needs. */

#include "modelgated/client/client-internal.h"

static int client_budget_cb(sd_event_source *s, uint64_t usec, void *userdata);

/* What an attempt owns, given up when it ends: its connection, its place with the host, its budget, and
 * what was held of its answer. The request keeps the rest: the early 200 and its keepalive, which stays
 * silent once nothing waits (host_waiter_describe() of a released waiter), and the alias's memory of
 * the targets tried. */
void client_attempt_end(Client *c) {
        assert(c);
        attempt_done(&c->req->attempt);
        client_usage_forget(c); /* what the attempt's answer said it cost is not the next one's */
        buffer_clear(&c->held_head);
}

static bool attempt_may_fall_back(const Client *c, AttemptFallback fallback) {
        switch (fallback) {
        case ATTEMPT_FALLBACK_YES:
                return true;
        case ATTEMPT_FALLBACK_ON_BUSY:
                return c->req->fallback.conf && c->req->fallback.conf->on_busy != 0;
        default:
                return false;
        }
}

AttemptOutcome client_attempt_failed(Client *c, AttemptFailure failure, int error, const char *why) {
        const AttemptRule *rule = attempt_rule(failure);

        assert(c);
        assert(rule);
        /* the host's own probe looks again soon, and decides whether it is down */
        Host *h = rule->reprobe && !c->req->attempt.via_fallback ? manager_host(c->manager, c->req->host)
                                                                 : NULL;
        if (h)
                host_report_request_failed(h);
        if (rule->next_target && client_next_target(c, why))
                return ATTEMPT_MOVED_ON;
        if (attempt_may_fall_back(c, rule->fallback) && client_fall_back(c, why))
                return ATTEMPT_MOVED_ON;
        if (rule->answer == ATTEMPT_ANSWER_RELAY)
                return ATTEMPT_RELAYED;
        client_attempt_answer(c, failure, error, why);
        return ATTEMPT_ANSWERED;
}

bool client_fallback_choose(Client *c, llhttp_method_t method, bool in_body) {
        Request *req = c->req;

        /* the fallback spends the operator's cloud key: inference only, on a path of modelgate's own, and
         * only for a model in the body (the only place it can be renamed) */
        req->fallback.path = path_route_fallback(req->route, method);
        req->fallback.conf = req->fallback.path && in_body
                                     ? config_find_fallback(req->config, req->attempt.engine_conf->fallback)
                                     : NULL;
        return req->fallback.conf;
}

bool client_fallback_chosen(const Client *c) {
        return c->req->fallback.conf;
}

void client_fallback_forget(Client *c) {
        c->req->fallback.conf = NULL;
}

const char *client_fallback_name(const Client *c) {
        if (!c->req->attempt.via_fallback)
                return NULL;
        return c->req->fallback.conf ? c->req->fallback.conf->name : "?";
}

void client_fallback_failed(Client *c, const char *reason) {
        client_answer(c, ANSWER_FALLBACK_FAILED, c->req->fallback.conf->name,
                      c->req->fallback.conf->url.text, reason);
}

/* FirstTokenBudgetSec= (streaming) or RequestBudgetSec=, from the moment the engine gets the request */
void client_start_budget(Client *c) {
        usec_t b;
        assert(c);

        if (!c->req->attempt.engine_conf || c->req->attempt.via_fallback)
                return;
        b = c->req->ask.stream ? c->req->attempt.engine_conf->first_token_budget_usec
                               : c->req->attempt.engine_conf->request_budget_usec;
        if (b == 0 || b == USEC_INFINITY)
                return;
        if (!c->req->attempt.budget) {
                if (sd_event_add_time_relative(manager_event(c->manager), &c->req->attempt.budget,
                                               CLOCK_MONOTONIC, b, 0, client_budget_cb, c) < 0)
                        return;
        } else
                (void)sd_event_source_set_time_relative(c->req->attempt.budget, b);
        (void)sd_event_source_set_enabled(c->req->attempt.budget, SD_EVENT_ONESHOT);
}

/* The fallback's request is modelgate's: POST to its path under the fallback's URL, no query, and of the
 * client's headers only what the API needs to read the body and shape the answer. The client's vendor
 * and account headers (OpenAI-Organization, OpenAI-Project, anthropic-beta, ...) never go with the
 * operator's key. */
static int build_fallback_request(Client *c, const FallbackConf *f, const char *body, size_t body_len,
                                  const char *key_header, Buffer *out) {
        HttpRequest *r = &c->parser.req;
        Span accept = http_request_header(r, "Accept"),
             version = http_request_header(r, "anthropic-version");

        if (http_write_request_line(out, "POST", f->url.base_path, c->req->fallback.path,
                                    strlen(c->req->fallback.path), f->url.authority) < 0 ||
            buffer_append_str(out, "User-Agent: modelgate/" MODELGATE_VERSION
                                   "\r\nContent-Type: application/json\r\n") < 0)
                return -ENOMEM;
        if (accept.p && (buffer_append_str(out, "Accept: ") < 0 ||
                         buffer_append(out, accept.p, accept.n) < 0 || buffer_append_str(out, "\r\n") < 0))
                return -ENOMEM;
        if (c->req->api == API_ANTHROPIC && (buffer_append_str(out, "anthropic-version: ") < 0 ||
                                             (version.p ? buffer_append(out, version.p, version.n)
                                                        : buffer_append_str(out, "2023-06-01")) < 0 ||
                                             buffer_append_str(out, "\r\n") < 0))
                return -ENOMEM;
        if ((key_header && buffer_append_str(out, key_header) < 0) ||
            http_write_content_length(out, body_len) < 0 || buffer_append_str(out, "\r\n") < 0 ||
            buffer_append(out, body, body_len) < 0)
                return -ENOMEM;
        return 0;
}

/* rule:fallback-availability: an availability failure of the engine, before any byte of its answer reached
 * the client (an early 200 with keepalive comments still counts as before), sends the request to the
 * engine's fallback instead, once. true: it went there, and the request is the fallback's now. */
bool client_fall_back(Client *c, const char *why) {
        assert(c);
        const FallbackConf *f = c->req->fallback.conf;
        _cleanup_free_ char *quoted = NULL, *body = NULL, *model = NULL;
        _cleanup_free_ char *key_header = NULL;
        size_t n;
        Span span;

        /* the client's body is still the parser's (kept for this; the one copy besides the request sent) */
        const Buffer *b = &c->parser.req.body;
        if (!f || c->req->attempt.via_fallback || c->req->answer.engine_bytes_sent || buffer_is_empty(b))
                return false;
        if (json_find_model(buffer_peek(b), buffer_size(b), &span, &model, NULL) != MODEL_FOUND)
                return false;
        quoted = json_quote(f->model);
        body = quoted ? span_replace((Span){buffer_peek(b), buffer_size(b)}, span, quoted, &n) : NULL;
        if (f->key &&
            asprintf(&key_header,
                     c->req->api == API_ANTHROPIC ? "x-api-key: %s\r\n" : "Authorization: Bearer %s\r\n",
                     f->key) < 0)
                return false;
        if (!body)
                return false;

        _cleanup_free_ char *m = log_escape_dup(c->req->model);
        char id[REQUEST_ID_MAX * 4 + 1];
        log_notice("host %s: %s goes to fallback %s: %s id=%s", c->req->host->name, strna(m), f->name, why,
                   client_log_id(c, id));
        metrics_fallback(manager_metrics(c->manager), c->req->host->name, c->req->attempt.engine_name,
                         f->name);
        c->req->attempt.via_fallback = true;
        /* the engine's request is cancelled (its connection closed, so the GPU stops), and the engine is
         * free */
        client_attempt_end(c);
        c->req->attempt.target = &f->url;
        if (build_fallback_request(c, f, body, n, key_header, &c->req->attempt.pending) < 0) {
                client_answer(c, ANSWER_OUT_OF_MEMORY);
                return true;
        }
        (void)client_send_upstream(c); /* no budget for a fallback's answer */
        return true;
}

static int client_budget_cb(sd_event_source *s, uint64_t usec, void *userdata) {
        _cleanup_(client_unrefp) Client *c = client_ref(userdata);
        char why[256], t[FORMAT_TIMESPAN_MAX];
        bool stream = c->req->ask.stream;

        snprintf(why, sizeof(why), "%s not within %s (%s)", stream ? "no first token" : "no whole answer",
                 format_timespan(t, sizeof(t),
                                 stream ? c->req->attempt.engine_conf->first_token_budget_usec
                                        : c->req->attempt.engine_conf->request_budget_usec)
                         ?: "?",
                 stream ? "FirstTokenBudgetSec=" : "RequestBudgetSec=");
        if (client_attempt_failed(c, ATTEMPT_BUDGET, -ETIMEDOUT, why) == ATTEMPT_MOVED_ON) {
                client_flush(c);
                return 0;
        }
        client_flush(c);
        client_process(c);
        return 0;
}
