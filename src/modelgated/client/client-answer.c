/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Writing an answer to the client: the status line and modelgate's headers, bodies framed as the
 * request allows (chunked, or up to the close for HTTP/1.0), errors in the client's API shape
 * (rule:error-shape, the rows of api-answer.h), the end of an answer, and the one access line each request
 * leaves in the log. */

#include "modelgated/client/client-internal.h"
#include "modelgated/records/history.h"
#include "modelgated/rules/conversation.h"
#include "shared/message-id.h"

Span client_request_id_first(Client *c) {
        assert(c);
        Exchange *x = c->x;

        if (x->method != EXCHANGE_NO_METHOD && x->method != EXCHANGE_METHOD_UNPARSED) {
                /* the first X-Request-Id, as the parser noted it */
                const HttpRequest *req = &c->parser.req;
                if (req->request_id_at > 0) {
                        Span h = http_header_value(req, req->request_id_at - 1);
                        if (request_id_sane(h))
                                return (x->request_id = h);
                }
        }
        request_id_next(&c->set->id_seed, x->made_id);
        return (x->request_id = (Span){x->made_id, REQUEST_ID_MADE_LEN});
}

/* client_append_request_id() of any id, into any buffer */
int client_append_request_id_any(Client *c, Buffer *b) {
        static const char h[] = "X-Request-Id: ";
        Span id = client_request_id(c);
        char *p = buffer_append_space(b, sizeof(h) - 1 + id.n + 2);

        if (!p)
                return -ENOMEM;
        memcpy(p, h, sizeof(h) - 1);
        memcpy(p + sizeof(h) - 1, id.p, id.n);
        memcpy(p + sizeof(h) - 1 + id.n, "\r\n", 2);
        return 0;
}

/* rule:journal-fields: under the journal, the line with its fields. rule:history: with a history file (no
 * journal, or one modelgated may not read), the fields of a request of /activity's ring go to it too. */
static void log_access_line(Manager *m, const AccessLine *l) {
        char line[LOG_MESSAGE_ROOM + 3072], fb[2560];
        struct iovec f[ACCESS_LINE_MAX_FIELDS];
        /* a byte left after the line, for log_line_in_place()'s newline */
        size_t n = access_line_format(line + LOG_MESSAGE_ROOM, sizeof(line) - LOG_MESSAGE_ROOM - 1, l),
               nf = 0;
        HistoryFile *history = l->api ? activity_history(manager_activity(m)) : NULL;

        if (log_journal() || history)
                nf = access_line_fields(fb, sizeof(fb), f, l);
        if (history)
                history_file_append(history, f, nf);
        if (!log_journal()) {
                log_line_in_place(LOG_INFO, line, n);
                return;
        }
        log_line_fields(LOG_INFO, MESSAGE_ID_ACCESS, line, n, f, nf);
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
 * rule:usage-charge: a generation's answer is charged for what it did not say. Into u, the exchange's usage
 * or a copy of it; whether the answer was cut. */
static bool settle_usage(Client *c, Usage *u) {
        Exchange *x = c->x;
        bool cut = x->usage_body || (x->mode == MODE_SSE && !x->sse.saw_done && !x->usage.ended);

        if (cut)
                usage_cut(u);
        if ((u->in < 0 || u->out < 0) && conv_path_keeps_stream(x->path))
                usage_charge(u, x->ask.bytes, x->ask.limited ? x->ask.max_out : -1);
        return cut;
}

/* The host whose work the answer was, for /metrics: none when the fallback answered */
static const char *worked(const Exchange *x) {
        return !x->via_fallback && x->host ? x->host->name : NULL;
}

void client_count_owed(Client *c) {
        assert(c);
        Exchange *x = c->x;
        Usage u;

        if (!x->usage_owed)
                return;
        x->usage_owed = false;
        u = x->usage;
        (void)settle_usage(c, &u);
        client_count_usage(c->manager, x->config, &x->caller, c->peer, worked(x), x->engine_name,
                           x->model_label, &u);
}

void client_log_access(Client *c, const char *note) {
        assert(c);
        char id[80];
        Exchange *x = c->x;
        bool left = note && streq(note, "cut=client"), cut = false;
        Usage *u = x->usage_on ? &x->usage : NULL, seen;

        if (u && client_stream_drains(c)) {
                /* rule:resumable-streams: the rest is read on, and the answer counted whole at its end; the
                 * line says what it said so far */
                seen = x->usage;
                u = &seen;
                x->usage_owed = true;
        }
        if (u)
                cut = settle_usage(c, u);
        AccessLine l = {
                .method = exchange_method_name(x),
                .path = x->path,
                .model = x->model,
                .user_agent = x->user_agent,
                .host = x->host ? x->host->name : NULL,
                .target = x->alias_target,
                .peer = c->peer,
                .status = left ? 499 : x->status, /* nginx's: the client left before its answer ended */
                .bytes = x->bytes,
                .duration = client_now(c) - x->start,
                .early = x->early,
                .error_status = x->error_status,
                .upstream_error_status = x->mode == MODE_SSE ? x->sse.upstream_error_status : 0,
                .upstream_error = x->sse.upstream_error,
                .key = x->caller.admitted ? access_caller_id(&x->caller, id) : NULL,
                .session = x->session_hash ? x->session_label : NULL,
                .fallback = x->via_fallback ? (x->fallback ? x->fallback->name : "?") : NULL,
                .note = note,
                .engine = x->via_fallback ? NULL : x->engine_name,
                .first_byte = x->first_byte,
                .queued = x->queued,
                .switched = x->switched,
                .usage = u,
                .cut = cut,
                .request_id = client_request_id(c),
                .request_id_made = x->request_id.p == x->made_id,
        };

        /* rule:history: the ring's entry first, whose fields the line's carry */
        if (x->activity.owner) {
                client_activity_done(c, l.status, l.duration, cut, u);
                l.api = x->activity.api;
                l.stream = x->activity.stream;
                l.model_hidden = !x->activity.model && x->model;
                l.done_at = x->activity.t + x->activity.realtime;
        }
        log_access_line(c->manager, &l);
        if (u && !x->usage_owed)
                client_count_usage(c->manager, x->config, &x->caller, c->peer, worked(x), x->engine_name,
                                   x->model_label, u);
        metrics_request(manager_metrics(c->manager), x->host ? x->host->name : "", x->engine_name,
                        x->error_status ?: x->status);
        if (x->alias)
                metrics_alias_request(manager_metrics(c->manager), x->alias->name, x->alias_target,
                                      x->error_status ?: x->status);
}

/* The response's last byte is queued. */
void client_response_complete(Client *c, const char *note) {
        assert(c);

        /* the engine is free for a switch as soon as the answer has fully arrived */
        host_release(&c->x->waiter);
        client_stream_touch(c); /* rule:resumable-streams: its time runs from the end of its stream */
        client_log_access(c, note);
        c->x->response_complete = true;
        c->answered_one = true;
}

int client_queue_head(Client *c, int status, const char *extra) {
        assert(c);
        int r = http_write_status_line(&c->out, status, http_status_reason(status));
        if (r >= 0)
                r = client_append_request_id(c, &c->out);
        if (r >= 0 && extra)
                r = buffer_append_str(&c->out, extra);
        if (r < 0)
                return r;
        if (c->close_after_response)
                r = buffer_append_str(&c->out, "Connection: close\r\n");
        else if (c->x->http10)
                r = buffer_append_str(&c->out, "Connection: keep-alive\r\n");
        if (r < 0)
                return r;
        return buffer_append_str(&c->out, "\r\n");
}

/* A whole response of modelgate's own. */
void client_respond(Client *c, int status, const char *content_type, const char *body, size_t n,
                    const char *extra_headers) {
        char h[1024];
        assert(c);

        c->x->status = status;
        snprintf(h, sizeof(h), "Content-Type: %s\r\nContent-Length: %zu\r\n%s", content_type, n,
                 extra_headers ?: "");
        if (client_queue_head(c, status, h) < 0 || (!c->x->head && buffer_append(&c->out, body, n) < 0))
                c->close_after_response = true; /* out of memory: what is queued will be cut */
        c->x->bytes = c->x->head ? 0 : n;
        client_response_complete(c, NULL);
}

void client_refill_out(Client *c) {
        assert(c);
        size_t room = CLIENT_OUT_HIGH - MIN(buffer_size(&c->out), (size_t)CLIENT_OUT_HIGH), n;

        if (!c->tail)
                return;
        n = MIN(c->tail->size - c->tail_sent, room);
        if (n > 0 && buffer_append(&c->out, c->tail->data + c->tail_sent, n) < 0) {
                /* out of memory: the answer ends short, which the client sees by its length */
                c->close_after_response = true;
                n = c->tail->size - c->tail_sent;
        }
        c->tail_sent += n;
        if (c->tail_sent == c->tail->size)
                c->tail = blob_unref(c->tail);
}

void client_respond_blob(Client *c, int status, const char *content_type, Blob *body) {
        char h[128];
        assert(c);
        assert(body);

        if (body->size <= CLIENT_OUT_HIGH || c->x->head || c->tail) {
                client_respond(c, status, content_type, body->data, body->size, NULL);
                return;
        }
        c->x->status = status;
        snprintf(h, sizeof(h), "Content-Type: %s\r\nContent-Length: %zu\r\n", content_type, body->size);
        if (client_queue_head(c, status, h) < 0)
                c->close_after_response = true;
        c->tail = blob_ref(body);
        c->tail_sent = 0;
        client_refill_out(c);
        c->x->bytes = body->size;
        client_response_complete(c, NULL);
}

/* After the early 200 the status line is gone: an error is an SSE error event in the API's shape,
 * and the response ends cleanly (rule:error-event). */
void client_end_early(Client *c, const Buffer *event) {
        assert(c);
        assert(event);

        if (client_frame_body(c, buffer_peek(event), buffer_size(event)) < 0 ||
            (c->x->chunked && buffer_append_str(&c->out, "0\r\n\r\n") < 0) || !c->x->chunked)
                c->close_after_response = true;
        client_response_complete(c, NULL);
}

void client_answer_message(Client *c, Answer a, int status, uint64_t retry_after, const char *message) {
        const AnswerRow *row = answer_row(a);
        _cleanup_free_ char *j = NULL;
        char h[256];
        size_t n = 0;
        assert(c);

        status = answer_status(a, status);
        if (c->x->early) {
                buffer_clear(&c->scratch);
                if (sse_error_event(c->x->api, status, row->code, message, &c->scratch) < 0)
                        c->close_after_response = true;
                c->x->error_status = status;
                client_end_early(c, &c->scratch);
                return;
        }

        j = api_error_json(c->x->api, status, row->code, message, &n);
        if (!j) {
                c->close_after_response = true;
                j = strdup("{}");
                n = 2;
        }
        int k = answer_headers(h, sizeof(h), a, retry_after);
        /* rule:ui-key: a browser asks its user for the key (the password of Basic credentials) */
        if (status == 401 && c->x->browser && k >= 0 && (size_t)k < sizeof(h))
                (void)snprintf(h + k, sizeof(h) - (size_t)k,
                               "WWW-Authenticate: Basic realm=\"modelgate\", charset=\"UTF-8\"\r\n");
        client_respond(c, status, "application/json", j ?: "", j ? n : 0, h);
}

void client_answer(Client *c, Answer a, ...) {
        char message[512];
        va_list ap;

        va_start(ap, a);
        (void)answer_vformat(message, sizeof(message), a, ap);
        va_end(ap);
        client_answer_message(c, a, /* status= */ 0, /* retry_after= */ 0, message);
}

int client_frame_body(Client *c, const char *p, size_t n) {
        assert(c);

        if (n == 0)
                return 0;
        if (c->x->chunked) {
                /* the chunk-size line, written by hand: this runs for every piece of every stream */
                char h[24], *e = h + sizeof(h), *q = e;
                *--q = '\n';
                *--q = '\r';
                size_t v = n;
                do
                        *--q = "0123456789abcdef"[v & 15];
                while (v >>= 4);
                if (buffer_append(&c->out, q, (size_t)(e - q)) < 0)
                        return -ENOMEM;
        }
        if (buffer_append(&c->out, p, n) < 0)
                return -ENOMEM;
        if (c->x->chunked && buffer_append_str(&c->out, "\r\n") < 0)
                return -ENOMEM;
        c->x->bytes += n;
        return 0;
}

/* The host's status line and headers, kept in held_head, with this hop's framing and connection lines. */
int client_send_held_head(Client *c, const char *framing) {
        assert(c);

        if (buffer_append(&c->out, buffer_peek(&c->held_head), buffer_size(&c->held_head)) < 0 ||
            buffer_append_str(&c->out, framing) < 0)
                return -ENOMEM;
        if (c->close_after_response && buffer_append_str(&c->out, "Connection: close\r\n") < 0)
                return -ENOMEM;
        if (c->x->http10 && !c->close_after_response &&
            buffer_append_str(&c->out, "Connection: keep-alive\r\n") < 0)
                return -ENOMEM;
        if (buffer_append_str(&c->out, "\r\n") < 0)
                return -ENOMEM;
        c->x->head_sent = true;
        c->x->engine_bytes_sent = true; /* from here on, the answer is the engine's (or the fallback's) */
        buffer_clear(&c->held_head);
        return 0;
}

/* The head of an event stream of modelgate's own (the early 200, /models/sse): chunked, or for HTTP/1.0
 * up to the close. */
int client_queue_stream_head(Client *c) {
        assert(c);

        c->x->status = 200;
        c->x->chunked = !c->x->http10;
        if (!c->x->chunked)
                c->close_after_response = true;
        return client_queue_head(c, 200,
                                 c->x->chunked ? HTTP_SSE_HEADERS "Transfer-Encoding: chunked\r\n"
                                               : HTTP_SSE_HEADERS);
}
