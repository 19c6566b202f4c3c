/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Writing an answer to the client: the status line and modelgate's headers, bodies framed as the
 * request allows (chunked, or up to the close for HTTP/1.0), errors in the client's API shape
 * (SPEC §6), the end of an answer, and the one access line each request leaves in the log. */

#include "modelgated/client-internal.h"

/* The access line is built by hand: it is written for every request, and printf was a third of the
 * instructions a small request cost. */
typedef struct LineOut {
        char *p, *end;
} LineOut;

static void out_mem(LineOut *o, const char *s, size_t l) {
        l = MIN(l, (size_t)(o->end - o->p));
        memcpy(o->p, s, l);
        o->p += l;
}

static void out_str(LineOut *o, const char *s) {
        out_mem(o, s, strlen(s));
}

static void out_u64(LineOut *o, uint64_t v, int width) {
        char t[24], *e = t + sizeof(t), *q = e;
        do
                *--q = (char)('0' + v % 10);
        while ((v /= 10) || e - q < width);
        out_mem(o, q, (size_t)(e - q));
}

static void out_escaped(LineOut *o, const char *s) {
        char t[256];
        log_escape(t, sizeof(t), s ?: "", s ? strlen(s) : 0);
        out_str(o, t);
}

void client_log_access(Client *c, const char *note) {
        char line[2048];
        LineOut o = {line, line + sizeof(line)};
        usec_t d = now_usec(CLOCK_MONOTONIC) - c->x->start;

        out_str(&o, strna(c->x->method));
        out_str(&o, " ");
        out_escaped(&o, strna(c->x->path));
        out_str(&o, " model=\"");
        out_escaped(&o, c->x->model);
        out_str(&o, "\" host=");
        out_str(&o, c->x->host ? c->x->host->name : "-");
        out_str(&o, " status=");
        out_u64(&o, (uint64_t)c->x->status, 0);
        out_str(&o, " bytes=");
        out_u64(&o, c->x->bytes, 0);
        out_str(&o, " dur=");
        out_u64(&o, d / USEC_PER_SEC, 0);
        out_str(&o, ".");
        out_u64(&o, d % USEC_PER_SEC / USEC_PER_MSEC, 3);
        out_str(&o, "s from=");
        out_str(&o, c->peer);
        out_str(&o, " ua=\"");
        out_escaped(&o, c->x->user_agent);
        out_str(&o, "\"");
        if (c->x->early) {
                out_str(&o, " early=200");
                if (c->x->error_status) {
                        out_str(&o, " error=");
                        out_u64(&o, (uint64_t)c->x->error_status, 0);
                }
        }
        if (c->x->caller.admitted) {
                char id[80];
                out_str(&o, " key=");
                out_str(&o, access_caller_id(&c->x->caller, id));
        }
        if (c->x->via_fallback) {
                out_str(&o, " via=fallback/");
                out_str(&o, c->x->fallback ? c->x->fallback->name : "?");
        }
        if (note) {
                out_str(&o, " ");
                out_str(&o, note);
        }
        log_line(LOG_INFO, line, (size_t)(o.p - line));
        metrics_request(manager_metrics(c->manager), c->x->host ? c->x->host->name : "", c->x->engine_name,
                        c->x->error_status ?: c->x->status);
}

/* The response's last byte is queued. */
void client_response_complete(Client *c, const char *note) {
        /* the engine is free for a switch as soon as the answer has fully arrived */
        host_release(&c->x->waiter);
        client_log_access(c, note);
        c->x->response_complete = true;
        manager_count_request(c->manager);
        c->answered_one = true;
}

/* "HTTP/1.1 200 OK\r\n", without printf: every response writes one */
int client_append_status_line(Buffer *b, int status) {
        if (buffer_append_str(b, "HTTP/1.1 ") < 0 || buffer_append_u64(b, (uint64_t)status) < 0 ||
            buffer_append_str(b, " ") < 0 || buffer_append_str(b, http_status_reason(status)) < 0 ||
            buffer_append_str(b, "\r\n") < 0)
                return -ENOMEM;
        return 0;
}

int client_append_content_length(Buffer *b, uint64_t n) {
        if (buffer_append_str(b, "Content-Length: ") < 0 || buffer_append_u64(b, n) < 0 ||
            buffer_append_str(b, "\r\n") < 0)
                return -ENOMEM;
        return 0;
}

int client_queue_head(Client *c, int status, const char *extra) {
        int r = client_append_status_line(&c->out, status);
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

        c->x->status = status;
        snprintf(h, sizeof(h), "Content-Type: %s\r\nContent-Length: %zu\r\n%s", content_type, n,
                 extra_headers ?: "");
        if (client_queue_head(c, status, h) < 0 || (!c->x->head && buffer_append(&c->out, body, n) < 0))
                c->close_after_response = true; /* out of memory: what is queued will be cut */
        c->x->bytes = c->x->head ? 0 : n;
        client_response_complete(c, NULL);
}

/* After the early 200 the status line is gone: an error is an SSE error event in the API's shape,
 * and the response ends cleanly (SPEC §7). */
void client_end_early(Client *c, const Buffer *event) {
        if (client_frame_body(c, buffer_peek(event), buffer_size(event)) < 0 ||
            (c->x->chunked && buffer_append_str(&c->out, "0\r\n\r\n") < 0) || !c->x->chunked)
                c->close_after_response = true;
        client_response_complete(c, NULL);
}

void client_respond_error(Client *c, int status, const char *code, const char *message,
                          const char *extra_headers) {
        _cleanup_free_ char *j = NULL;
        size_t n = 0;

        if (c->x->early) {
                buffer_clear(&c->scratch);
                if (sse_error_event(c->x->api, status, code, message, &c->scratch) < 0)
                        c->close_after_response = true;
                c->x->error_status = status;
                return client_end_early(c, &c->scratch);
        }

        j = api_error_json(c->x->api, status, code, message, &n);
        if (!j) {
                c->close_after_response = true;
                j = strdup("{}");
                n = 2;
        }
        client_respond(c, status, "application/json", j ?: "", j ? n : 0, extra_headers);
}

int client_frame_body(Client *c, const char *p, size_t n) {
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
