/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Writing an answer to the client: the status line and modelgate's headers, bodies framed as the
 * request allows (chunked, or up to the close for HTTP/1.0), errors in the client's API shape
 * (rule:error-shape, the rows of api-answer.h), the end of an answer, and the one access line each request
 * leaves in the log. */

#include "modelgated/client/client-internal.h"
#include "modelgated/records/history.h"
#include "shared/message-id.h"

Span client_request_id_first(Client *c) {
        assert(c);
        Request *req = c->req;

        if (req->method != REQUEST_NO_METHOD && req->method != REQUEST_METHOD_UNPARSED) {
                /* the first X-Request-Id, as the parser noted it */
                const HttpRequest *hr = &c->parser.req;
                if (hr->request_id_at > 0) {
                        Span h = http_header_value(hr, hr->request_id_at - 1);
                        if (request_id_sane(h))
                                return (req->id.span = h);
                }
        }
        request_id_next(&c->set->id_seed, req->id.made);
        return (req->id.span = (Span){req->id.made, REQUEST_ID_MADE_LEN});
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

/* every field the line can have reaches the journal: log_line_fields() keeps LOG_MAX_FIELDS, and a line
 * with more would lose its last ones without a word */
_Static_assert(ACCESS_LINE_MAX_FIELDS <= LOG_MAX_FIELDS, "the journal must keep every access line field");

/* rule:journal-fields: under the journal, the line with its fields. rule:history: with a history file (no
 * journal, or one modelgated may not read), the fields of a request of /activity's ring go to it too. */
static void log_access_line(Manager *m, const RequestRecord *l) {
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

/* The request's record (request-record.h), filled once here: everything that tells of the request reads it
 */
static void client_record(Client *c, const char *note, const Usage *u, bool cut, char key[static 80],
                          RequestRecord *rec) {
        Request *req = c->req;
        const char *fallback = client_fallback_name(c);
        bool left = note && streq(note, "cut=client");
        int upstream_status = req->attempt.mode == MODE_SSE ? req->attempt.sse.upstream_error_status : 0;

        *rec = (RequestRecord){
                .method = request_method_name(req),
                .path = req->path,
                .model = req->model,
                .user_agent = req->user_agent,
                .host = req->host ? req->host->name : NULL,
                .target = req->alias.target,
                .peer = c->peer,
                .status = left ? 499
                               : req->answer.status, /* nginx's: the client left before its answer ended */
                .bytes = req->answer.bytes,
                .duration = client_now(c) - req->start,
                .early = req->answer.early,
                .error_status = req->attempt.error_status,
                .upstream_error_status = upstream_status,
                .upstream_error = req->attempt.sse.upstream_error,
                .key = req->caller.admitted ? access_caller_id(&req->caller, key) : NULL,
                .session = client_session_label(c),
                .fallback = fallback,
                .note = note,
                .engine = fallback ? NULL : req->attempt.engine_name,
                .first_byte = req->first_byte,
                .queued = req->waited.queued,
                .switched = req->waited.switched,
                .usage = u,
                .cut = cut,
                .request_id = client_request_id(c),
                .request_id_made = req->id.span.p == req->id.made,
                .status_sent = req->answer.status,
                .engine_tried = req->attempt.engine_name,
                .alias = req->alias.conf ? req->alias.conf->name : NULL,
                .model_label = req->model_label,
                .caused_switch = req->waited.caused_switch,
        };
}

void client_log_access(Client *c, const char *note) {
        assert(c);
        char key[80];
        bool cut = false;
        Usage seen;
        const Usage *u = client_usage_for_record(c, &seen, &cut);
        RequestRecord rec;

        client_record(c, note, u, cut, key, &rec);
        /* rule:history: the ring's entry first, whose fields the line's carry */
        client_activity_done(c, &rec);
        log_access_line(c->manager, &rec);
        client_usage_count(c, &rec);
        metrics_record(manager_metrics(c->manager), &rec);
}

/* The response's last byte is queued. */
void client_response_complete(Client *c, const char *note) {
        assert(c);

        /* the engine is free for a switch as soon as the answer has fully arrived */
        host_release(&c->req->attempt.waiter);
        client_stream_touch(c); /* rule:resumable-streams: its time runs from the end of its stream */
        client_log_access(c, note);
        c->req->answer.complete = true;
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
        else if (c->req->http10)
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

        c->req->answer.status = status;
        snprintf(h, sizeof(h), "Content-Type: %s\r\nContent-Length: %zu\r\n%s", content_type, n,
                 extra_headers ?: "");
        if (client_queue_head(c, status, h) < 0 || (!c->req->head && buffer_append(&c->out, body, n) < 0))
                c->close_after_response = true; /* out of memory: what is queued will be cut */
        c->req->answer.bytes = c->req->head ? 0 : n;
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

        if (body->size <= CLIENT_OUT_HIGH || c->req->head || c->tail) {
                client_respond(c, status, content_type, body->data, body->size, NULL);
                return;
        }
        c->req->answer.status = status;
        snprintf(h, sizeof(h), "Content-Type: %s\r\nContent-Length: %zu\r\n", content_type, body->size);
        if (client_queue_head(c, status, h) < 0)
                c->close_after_response = true;
        c->tail = blob_ref(body);
        c->tail_sent = 0;
        client_refill_out(c);
        c->req->answer.bytes = body->size;
        client_response_complete(c, NULL);
}

/* After the early 200 the status line is gone: an error is an SSE error event in the API's shape,
 * and the response ends cleanly (rule:error-event). */
void client_end_early(Client *c, const Buffer *event) {
        assert(c);
        assert(event);

        if (client_frame_body(c, buffer_peek(event), buffer_size(event)) < 0 ||
            (c->req->answer.chunked && buffer_append_str(&c->out, "0\r\n\r\n") < 0) ||
            !c->req->answer.chunked)
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
        if (c->req->answer.early) {
                buffer_clear(&c->scratch);
                if (sse_error_event(c->req->api, status, row->code, message, &c->scratch) < 0)
                        c->close_after_response = true;
                c->req->attempt.error_status = status;
                client_end_early(c, &c->scratch);
                return;
        }

        j = api_error_json(c->req->api, status, row->code, message, &n);
        if (!j) {
                c->close_after_response = true;
                j = strdup("{}");
                n = 2;
        }
        int k = answer_headers(h, sizeof(h), a, retry_after);
        /* rule:ui-key: a browser asks its user for the key (the password of Basic credentials) */
        if (status == 401 && c->req->browser && k >= 0 && (size_t)k < sizeof(h))
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
        if (c->req->answer.chunked) {
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
        if (c->req->answer.chunked && buffer_append_str(&c->out, "\r\n") < 0)
                return -ENOMEM;
        c->req->answer.bytes += n;
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
        if (c->req->http10 && !c->close_after_response &&
            buffer_append_str(&c->out, "Connection: keep-alive\r\n") < 0)
                return -ENOMEM;
        if (buffer_append_str(&c->out, "\r\n") < 0)
                return -ENOMEM;
        c->req->answer.head_sent = true;
        c->req->answer.engine_bytes_sent =
                true; /* from here on, the answer is the engine's (or the fallback's) */
        buffer_clear(&c->held_head);
        return 0;
}

/* The head of an event stream of modelgate's own (the early 200, /models/sse): chunked, or for HTTP/1.0
 * up to the close. */
int client_queue_stream_head(Client *c) {
        assert(c);

        c->req->answer.status = 200;
        c->req->answer.chunked = !c->req->http10;
        if (!c->req->answer.chunked)
                c->close_after_response = true;
        return client_queue_head(c, 200,
                                 c->req->answer.chunked ? HTTP_SSE_HEADERS "Transfer-Encoding: chunked\r\n"
                                                        : HTTP_SSE_HEADERS);
}
