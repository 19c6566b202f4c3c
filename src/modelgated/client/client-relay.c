/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The host's answer, relayed to the client: passed on as it comes, filtered line by line when it is an
 * event stream (an error event is reworded), or held whole when it is an error body to reword; the
 * early 200 and its keepalive comments while a request waits for its engine (rule:keepalive); and what
 * a failed host connection becomes. */

#include "modelgated/client/client-internal.h"

/* What failed, in words: a connection error, or what the host's probe said when it found the host down */
static const char *failure_reason(const Client *c, int error) {
        Host *h = error == -EHOSTDOWN ? manager_host(c->manager, c->req->host) : NULL;
        return (h ? host_down_reason(h) : NULL) ?: upstream_strerror(error);
}

/* How the answer goes on (pass, SSE filter, hold) and its framing to the client: the framing header
 * (rule:own-framing) */
static const char *relay_choose_mode(Client *c, const UpstreamResponse *resp, bool sse, bool no_body) {
        c->req->answer.status = resp->status;
        if (!no_body && resp->status >= 400 && !sse)
                c->req->attempt.mode = MODE_HOLD;
        else if (!no_body && sse) {
                c->req->attempt.mode = MODE_SSE;
                sse_filter_init(&c->req->attempt.sse, c->req->api);
        } else
                c->req->attempt.mode = MODE_PASS;
        if (c->req->attempt.mode != MODE_SSE)
                c->req->attempt.awaiting_first_token = false;

        if (no_body || c->req->attempt.mode == MODE_HOLD)
                c->req->answer.chunked = false;
        else if (c->req->attempt.mode == MODE_PASS && resp->has_content_length && !resp->chunked)
                c->req->answer.chunked = false;
        else if (!c->req->http10) {
                c->req->answer.chunked = true;
                return "Transfer-Encoding: chunked\r\n";
        } else
                c->close_after_response = true;
        return "";
}

/* The head for the client, in held_head: the host's status and end-to-end headers, and where the
 * answer came from */
static int relay_build_head(Client *c, const UpstreamResponse *resp, bool no_body) {
        Span connection = upstream_response_header(resp, "Connection");
        Buffer *b = &c->held_head;

        buffer_clear(b);
        if (http_write_status_line(b, resp->status, http_status_reason(resp->status)) < 0)
                return -1;
        /* where the answer came from: host/engine, or fallback/name */
        if (buffer_append_str(b, "X-Modelgate-Served-By: ") < 0 ||
            buffer_append_str(b, c->req->attempt.via_fallback ? "fallback" : c->req->host->name) < 0 ||
            buffer_append_str(b, c->req->attempt.via_fallback || c->req->attempt.engine_name ? "/" : "") < 0 ||
            buffer_append_str(b, c->req->attempt.via_fallback ? client_fallback_name(c) : c->req->attempt.engine_name ?: "") < 0 ||
            buffer_append_str(b, "\r\n") < 0 || client_append_request_id(c, b) < 0)
                return -1;
        for (size_t i = 0; i < resp->n_headers; i++) {
                Span name = upstream_response_header_name(resp, i),
                     value = upstream_response_header_value(resp, i);
                if (http_header_is_hop_by_hop(name) || (connection.p && span_list_has(connection, name)) ||
                    http_header_is_request_id(name)) /* rule:request-id: ours, above */
                        continue;
                if (buffer_append(b, name.p, name.n) < 0 || buffer_append_str(b, ": ") < 0 ||
                    buffer_append(b, value.p, value.n) < 0 || buffer_append_str(b, "\r\n") < 0)
                        return -1;
        }
        if (no_body ||
            (!c->req->answer.chunked && c->req->attempt.mode == MODE_PASS && resp->has_content_length)) {
                /* Content-Length is framing, dropped above with the other hop-by-hop headers; when
                 * the body goes on unchanged it is still right (and a HEAD answer keeps the length
                 * the GET would have had, RFC 9110 §9.3.2) */
                /* ... but never on a 204 (RFC 9110 §8.6): a client would read the next answer as its body */
                if (resp->has_content_length && resp->status != 204 &&
                    http_write_content_length(b, resp->content_length) < 0)
                        return -1;
        }
        return 0;
}

static int client_upstream_headers(Upstream *u, const UpstreamResponse *resp, void *userdata) {
        _cleanup_(client_unrefp) Client *c = client_ref(userdata);
        Span ct = upstream_response_header(resp, "Content-Type");
        bool sse = ct.p && ct.n >= 17 && strncasecmp(ct.p, "text/event-stream", 17) == 0;
        bool no_body = c->req->head || resp->status == 204 || resp->status == 304;

        /* "not here (yet)": a host that has not registered the model, or is loading */
        if ((resp->status == 404 || resp->status == 503) && !c->req->head) {
                char why[64];
                snprintf(why, sizeof(why), "the engine answered %d", resp->status);
                if (client_attempt_failed(c, ATTEMPT_NOT_HERE, resp->status, why) == ATTEMPT_MOVED_ON)
                        return 0;
        }
        if (!c->req->attempt.first_byte_seen) {
                c->req->attempt.first_byte_seen = true;
                c->req->first_byte = MAX(client_now(c) - c->req->start, (usec_t)1);
                metrics_first_byte(manager_metrics(c->manager), c->req->host->name, c->req->first_byte);
                client_activity_first_byte(c);
        }
        if (c->req->answer.early) {
                /* the 200 and its framing are out: a stream continues it, anything else becomes an error
                 * event when it is complete */
                client_usage_start(c, resp, ct, sse, no_body);
                if (sse && resp->status == 200) {
                        c->req->attempt.mode = MODE_SSE;
                        sse_filter_init(&c->req->attempt.sse, c->req->api);
                        c->req->attempt.sse.usage = client_usage_of_answer(c);
                        c->req->attempt.sse.begun =
                                c->req->answer.begun; /* its own beginning is spliced in */
                } else {
                        c->req->attempt.mode = MODE_HOLD;
                        c->req->attempt.error_status = resp->status;
                }
                return 0;
        }
        client_usage_start(c, resp, ct, sse, no_body);
        const char *framing = relay_choose_mode(c, resp, sse, no_body);
        if (c->req->attempt.mode == MODE_SSE)
                c->req->attempt.sse.usage = client_usage_of_answer(c);
        if (relay_build_head(c, resp, no_body) < 0)
                return -1;
        if (c->req->attempt.mode == MODE_HOLD)
                return 0;
        if (c->req->attempt.awaiting_first_token) {
                /* held with the comments before it until the first data line: until then the fallback may
                 * still answer instead */
                c->req->attempt.held_framing = framing;
                return 0;
        }

        /* written with the body bytes of the same read (client_upstream_read_end) */
        return client_send_held_head(c, framing) < 0 ? -1 : 0;
}

static void release_held(Client *c) {
        /* too big to reword: pass it on as it is */
        c->req->answer.chunked = !c->req->http10;
        if (!c->req->answer.chunked)
                c->close_after_response = true;
        (void)client_send_held_head(c, c->req->answer.chunked ? "Transfer-Encoding: chunked\r\n" : "");
        c->req->attempt.mode = MODE_PASS;
        (void)client_frame_body(c, buffer_peek(&c->req->attempt.held), buffer_size(&c->req->attempt.held));
        buffer_done(&c->req->attempt.held);
}

/* A data line (a token, or an error event) in what a stream has sent so far. */
static bool has_data_line(const Buffer *b) {
        const char *p = buffer_peek(b);
        size_t n = buffer_size(b);
        return (n >= 5 && memcmp(p, "data:", 5) == 0) || memmem(p, n, "\ndata:", 6);
}

/* The first token is here: the engine answers after all, and what was held goes out. */
static int release_first_token(Client *c) {
        c->req->attempt.awaiting_first_token = false;
        (void)sd_event_source_set_enabled(c->req->attempt.budget, SD_EVENT_OFF);
        if (!c->req->answer.early && client_send_held_head(c, c->req->attempt.held_framing ?: "") < 0)
                return -ENOMEM;
        int r = client_frame_body(c, buffer_peek(&c->req->attempt.held), buffer_size(&c->req->attempt.held));
        buffer_done(&c->req->attempt.held);
        return r;
}

static int client_upstream_body(Upstream *u, const char *p, size_t n, void *userdata) {
        _cleanup_(client_unrefp) Client *c = client_ref(userdata);
        int r = 0;

        switch (c->req->attempt.mode) {
        case MODE_HOLD:
                if (buffer_size(&c->req->attempt.held) + n <= CLIENT_HELD_MAX)
                        return buffer_append(&c->req->attempt.held, p, n) < 0 ? -1 : 0;
                if (c->req->answer.early) {
                        /* an error answer of more than 1 MiB after an early 200: its start will do */
                        return 0;
                }
                release_held(c);
                r = client_frame_body(c, p, n);
                break;
        case MODE_SSE:
                buffer_clear(&c->scratch);
                r = sse_filter_feed(&c->req->attempt.sse, p, n, &c->scratch);
                if (r >= 0 && c->req->attempt.awaiting_first_token) {
                        r = buffer_append(&c->req->attempt.held, buffer_peek(&c->scratch),
                                          buffer_size(&c->scratch));
                        /* a data line, or more comments than are worth holding: the engine's answer it is */
                        if (r >= 0 && (has_data_line(&c->req->attempt.held) ||
                                       buffer_size(&c->req->attempt.held) > CLIENT_HELD_MAX))
                                r = release_first_token(c);
                        break;
                }
                if (r >= 0)
                        r = client_frame_body(c, buffer_peek(&c->scratch), buffer_size(&c->scratch));
                break;
        case MODE_PASS:
                client_usage_body(c, p, n);
                r = client_frame_body(c, p, n);
                break;
        }
        if (!c->req->attempt.awaiting_first_token && c->req->attempt.mode != MODE_HOLD)
                c->req->answer.engine_bytes_sent = true;
        if (r < 0) {
                client_close(c); /* cancels u, which the upstream ends once this returns */
                return -1;
        }
        /* a slow reader: stop reading the host before the end of this read (backpressure) */
        if (buffer_size(&c->out) > CLIENT_OUT_HIGH)
                client_flush(c);
        return client_is_closed(c) ? -1 : 0;
}

static void client_upstream_read_end(Upstream *u, void *userdata) {
        _cleanup_(client_unrefp) Client *c = client_ref(userdata);

        client_flush(c); /* a close cancels u, which the upstream ends once this returns */
}

static void client_upstream_complete(Upstream *u, void *userdata) {
        _cleanup_(client_unrefp) Client *c = client_ref(userdata);

        c->req->attempt.upstream = NULL;
        (void)sd_event_source_set_enabled(c->req->attempt.budget, SD_EVENT_OFF);
        if (c->req->attempt.awaiting_first_token && c->req->attempt.mode == MODE_SSE)
                (void)release_first_token(c); /* a stream that ended without a data line, as it is */
        if (c->req->attempt.mode == MODE_HOLD && c->req->answer.early) {
                buffer_clear(&c->scratch);
                if (sse_error_event_from_answer(c->req->api, c->req->attempt.error_status,
                                                buffer_peek(&c->req->attempt.held),
                                                buffer_size(&c->req->attempt.held), &c->scratch) < 0)
                        c->close_after_response = true;
                client_end_early(c, &c->scratch);
                client_flush(c);
                client_process(c);
                return;
        }
        if (c->req->attempt.mode == MODE_HOLD) {
                _cleanup_free_ char *n = NULL;
                size_t nl = 0;
                char framing[64];
                const char *body = buffer_peek(&c->req->attempt.held);
                size_t bl = buffer_size(&c->req->attempt.held);

                if (api_error_reword(c->req->api, body, bl, &n, &nl) > 0) {
                        body = n;
                        bl = nl;
                }
                snprintf(framing, sizeof(framing), "Content-Length: %zu\r\n", bl);
                (void)client_send_held_head(c, framing);
                (void)buffer_append(&c->out, body, bl);
                c->req->answer.bytes = bl;
        } else {
                if (c->req->attempt.mode == MODE_SSE) {
                        buffer_clear(&c->scratch);
                        (void)sse_filter_finish(&c->req->attempt.sse, &c->scratch);
                        (void)client_frame_body(c, buffer_peek(&c->scratch), buffer_size(&c->scratch));
                }
                if (c->req->answer.chunked)
                        (void)buffer_append_str(&c->out, "0\r\n\r\n");
        }
        client_usage_whole(c);
        /* rule:list-never-stale: the list is re-read after every load or unload that worked */
        if (c->req->answer.status >= 200 && c->req->answer.status < 300 &&
            c->req->route->catalog_call != PATH_CATALOG_NONE) {
                Host *h = manager_host(c->manager, c->req->host);
                if (h)
                        catalog_model_call_done(host_catalog(h), c->req->model,
                                                c->req->route->catalog_call == PATH_CATALOG_LOAD);
        }
        client_response_complete(c, NULL);
        client_flush(c);
        client_process(c);
}

bool client_in_event_stream_line_end(const Client *c) {
        assert(c);

        if (c->req->answer.complete || (!c->req->answer.head_sent && !c->req->answer.early))
                return false;
        /* modelgate's own early 200: only its comments went out so far (the host's are held, if any) */
        if (c->req->answer.early &&
            (c->req->attempt.mode != MODE_SSE || c->req->attempt.awaiting_first_token))
                return true;
        /* the host's stream: the filter passes on complete lines only, and holds the one not yet ended */
        return c->req->attempt.mode == MODE_SSE && buffer_is_empty(&c->req->attempt.sse.line) &&
               !c->req->attempt.sse.raw_until_newline;
}

/* An answer that cannot be finished and has no way to say so in-band: the connection ends without the last
 * chunk (or before Content-Length is reached), so the client sees an incomplete answer, not a short one. */
void client_cut(Client *c, const char *note) {
        assert(c);

        c->close_after_response = true;
        c->state = CLIENT_CLOSING;
        client_response_complete(c, note);
}

/* A connection that failed before the host's answer (ATTEMPT_UNREACHABLE, _BROKEN, _HOST_DOWN) */
static void answer_not_reached(Client *c, AttemptFailure failure, int error) {
        char why[512];
        const char *reason = failure_reason(c, error);

        if (!c->req->answer.early)
                log_debug("host %s: %s %.*s failed before an answer: %s", c->req->host->name,
                          request_method_name(c->req), (int)c->req->path.n, c->req->path.p ?: "",
                          upstream_strerror(error));
        if (c->req->attempt.via_fallback) {
                /* not chained, and not the host's fault: the fallback's own failure, as it is */
                client_fallback_failed(c, reason);
                return;
        }
        if (failure == ATTEMPT_BROKEN) {
                /* rule:one-request-failure: one request's failure is not the host's (its probe says whether
                 * it is down) */
                client_answer(c, ANSWER_UPSTREAM_FAILED, c->req->host->name, reason, c->req->host->url.text);
                return;
        }
        snprintf(why, sizeof(why), "%s (%s)", reason, c->req->host->url.text);
        client_answer(c, ANSWER_HOST_DOWN, c->req->host->name, why);
}

/* Stuck, not down: the connection is closed (so the GPU stops working on it) */
static void answer_stalled(Client *c) {
        char t[FORMAT_TIMESPAN_MAX];

        client_answer(c, ANSWER_UPSTREAM_TIMEOUT, c->req->host->name,
                      format_timespan(t, sizeof(t), manager_config(c->manager)->upstream_idle_timeout_usec)
                              ?: "?");
}

/* The answer had begun: an error body still held is answered as an error, a stream ends with an error
 * event, anything else is cut */
static void answer_incomplete(Client *c, int error) {
        char msg[512];

        if (c->req->attempt.awaiting_first_token && c->req->attempt.mode == MODE_SSE)
                (void)release_first_token(c);
        c->req->attempt.awaiting_first_token = false;
        if (c->req->attempt.mode == MODE_HOLD && (c->req->answer.early || !c->req->answer.head_sent)) {
                client_answer(c, ANSWER_UPSTREAM_ENDED_EARLY, c->req->host->name, failure_reason(c, error));
        } else if (c->req->attempt.mode == MODE_SSE) {
                buffer_clear(&c->scratch);
                (void)sse_filter_finish(&c->req->attempt.sse, &c->scratch);
                if (!c->req->attempt.sse.saw_done) {
                        Answer a = ANSWER_UPSTREAM_STREAM_CUT;
                        (void)answer_format(msg, sizeof(msg), a, c->req->host->name,
                                            failure_reason(c, error));
                        (void)sse_error_event(c->req->api, answer_status(a, 0), answer_row(a)->code, msg,
                                              &c->scratch);
                }
                (void)client_frame_body(c, buffer_peek(&c->scratch), buffer_size(&c->scratch));
                if (c->req->answer.chunked)
                        (void)buffer_append_str(&c->out, "0\r\n\r\n");
                else
                        c->close_after_response = true;
                client_response_complete(c, c->req->attempt.sse.saw_done ? NULL : "cut=host");
        } else
                client_cut(c, "cut=host");
}

/* The budget ran out and no fallback took the request: it is cancelled all the same, so that the GPU stops
 * working on it */
static void answer_budget(Client *c, const char *why) {
        c->req->attempt.upstream = upstream_cancel(c->req->attempt.upstream);
        if (!c->req->answer.engine_bytes_sent)
                client_answer(c, ANSWER_BUDGET_EXCEEDED, strna(c->req->attempt.engine_name),
                              c->req->host->name, why);
        else
                client_cut(c, "cut=budget");
}

void client_attempt_answer(Client *c, AttemptFailure failure, int error, const char *why) {
        assert(c);
        switch (failure) {
        case ATTEMPT_UNREACHABLE:
        case ATTEMPT_BROKEN:
        case ATTEMPT_HOST_DOWN:
                answer_not_reached(c, failure, error);
                break;
        case ATTEMPT_STALLED:
                answer_stalled(c);
                break;
        case ATTEMPT_INCOMPLETE:
                answer_incomplete(c, error);
                break;
        case ATTEMPT_BUDGET:
                answer_budget(c, why);
                break;
        case ATTEMPT_NOT_HERE: /* the host's own answer goes on */
                break;
        default: {
                /* a refusal from the host's engine side, in the host's words, as the table's row says it
                 * (its status, or the host's: rule:error-status), with the headers that steer retrying
                 * clients (rule:busy-423, rule:retry-after). rule:bus-backoff: a 503 the host's lost bus
                 * caused names when the bus is tried again, and Retry-After is that same time (0: the
                 * row's) */
                Host *h = failure == ATTEMPT_REFUSED && c->req->host && !c->req->attempt.via_fallback
                                  ? manager_host(c->manager, c->req->host)
                                  : NULL;
                client_answer_message(c, attempt_rule(failure)->row, error, h ? host_retry_after(h) : 0,
                                      why);
                break;
        }
        }
}

static void client_upstream_error(Upstream *u, int error, bool started, void *userdata) {
        _cleanup_(client_unrefp) Client *c = client_ref(userdata);

        c->req->attempt.upstream = NULL;
        (void)sd_event_source_set_enabled(c->req->attempt.budget, SD_EVENT_OFF);
        if (client_attempt_failed(c, attempt_failure_of_error(error, started), error,
                                  failure_reason(c, error)) == ATTEMPT_MOVED_ON) {
                /* the engine failed before any of its answer reached the client */
                client_flush(c);
                return;
        }
        client_flush(c);
        client_process(c);
}

/* rule:down-fails-fast: the host's probe found it down while this request was in flight. With no byte of the
 * host's answer yet, the request fails now (503 naming the host, or the next target or the fallback); a
 * stream is cut as the host's failure. Without this it would wait for UpstreamIdleTimeoutSec=. */
void client_host_went_down(HostWaiter *w) {
        assert(w);
        _cleanup_(client_unrefp) Client *c = client_ref(container_of(w, Request, attempt.waiter)->client);

        if (!c->req->attempt.upstream)
                return; /* not sent yet (its router may load the model), or its answer is whole */
        bool started = upstream_answer_started(c->req->attempt.upstream);
        c->req->attempt.upstream = upstream_cancel(c->req->attempt.upstream);
        client_upstream_error(NULL, -EHOSTDOWN, started, c);
}

const UpstreamCallbacks client_upstream_callbacks = {
        .on_headers = client_upstream_headers,
        .on_body = client_upstream_body,
        .on_read_end = client_upstream_read_end,
        .on_complete = client_upstream_complete,
        .on_error = client_upstream_error,
};

/* rule:keepalive: a streaming request that waits gets modelgate's own 200 after KeepaliveAfterSec=, then
 * every KeepaliveIntervalSec= a keepalive saying what it waits for: a comment, and where the API's clients
 * count only events, the answer begun and a harmless event of it (rule:keepalive-events). */
int client_keepalive_cb(sd_event_source *s, uint64_t usec, void *userdata) {
        _cleanup_(client_unrefp) Client *c = client_ref(userdata);
        char what[640];
        int k, r = 0;

        EarlyAnswer kind = early_answer_of(c->req->route ?: path_route_none());
        if (c->req->answer.complete)
                return 0;
        if (c->req->attempt.first_byte_seen) {
                /* The engine's head is here and it reads the prompt in silence (seconds to minutes for an
                 * agent's context): where clients count only events, they keep coming until its first data
                 * line, at the boundary between events where nothing of the engine's has been sent yet.
                 * Otherwise the engine's answer speaks for itself. */
                if (!c->req->answer.early || kind == EARLY_COMMENT || c->req->attempt.mode != MODE_SSE ||
                    c->req->attempt.sse.saw_data || !buffer_is_empty(&c->req->attempt.sse.line) ||
                    c->req->attempt.sse.in_begin_event || c->req->attempt.sse.event_named)
                        return 0;
                snprintf(what, sizeof(what), "engine %s is reading the prompt",
                         strna(c->req->attempt.engine_name));
                k = 1;
        } else
                /* waiting for the engine, or for the model its router loads; in flight otherwise, and then
                 * no early 200 for an answer that is merely slow */
                k = host_waiter_describe(&c->req->attempt.waiter, what, sizeof(what));
        if (k < 0)
                return 0;
        client_activity_loading(c); /* rule:activity-feed: the router's load, when it is one */
        if (k == 0 && !c->req->answer.early) {
                /* looked at again soon: a load that begins now gets its early 200 in time */
                (void)sd_event_source_set_time_relative(
                        s, MIN(manager_config(c->manager)->keepalive_interval_usec, USEC_PER_SEC));
                (void)sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
                return 0;
        }
        buffer_clear(&c->scratch);
        uint64_t created = (uint64_t)(now_usec(CLOCK_REALTIME) / USEC_PER_SEC);
        if (!c->req->answer.early) {
                if (client_queue_stream_head(c) < 0) {
                        client_close(c);
                        return 0;
                }
                c->req->answer.early = c->req->answer.head_sent = true;
                c->req->answer.begun = early_answer_begins(kind);
                r = early_answer_begin(kind, c->req->model, client_request_id(c), created, &c->scratch);
        }
        if (r >= 0)
                r = early_answer_keepalive(kind, c->req->answer.begun, c->req->model, client_request_id(c),
                                           created, what, &c->scratch);
        if (r < 0 || client_frame_body(c, buffer_peek(&c->scratch), buffer_size(&c->scratch)) < 0)
                client_close(c);
        else
                client_flush(c);
        if (client_is_closed(c))
                return 0; /* its source went with it */
        (void)sd_event_source_set_time_relative(s, manager_config(c->manager)->keepalive_interval_usec);
        (void)sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
        return 0;
}

/* Sends the request to its target, the relay's callbacks taking the answer. < 0: the connection failed
 * at once, and the client has its answer (or the fallback took over). */
int client_send_upstream(Client *c) {
        assert(c);
        int k = upstream_start(manager_pool(c->manager), c->req->attempt.target, &c->req->attempt.pending,
                               c->req->head, &client_upstream_callbacks, c, &c->req->attempt.upstream);
        buffer_done(&c->req->attempt.pending);
        if (k < 0) {
                (void)client_attempt_failed(c, attempt_failure_of_error(k, false), k, failure_reason(c, k));
                return k;
        }
        (void)upstream_set_idle_timeout(c->req->attempt.upstream,
                                        manager_config(c->manager)->upstream_idle_timeout_usec);
        return 0;
}
