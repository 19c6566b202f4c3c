/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A Client lives from accept() to close. States:
 *   WAITING    between requests (keep-alive); idle timeout closes silently
 *   READING    a request has begun; header timeout → 408
 *   RESPONDING the request is complete; its response is being produced
 *   CLOSING    the last bytes are flushed, then the connection closes
 *   LINGERING  after an error that left request bytes unread: our side is shut down and input is
 *              drained for a moment, so that the client reads the error instead of a reset (a close
 *              with unread input makes the kernel send RST, which can destroy the answer in flight)
 * Reading from the socket stops while a response is produced, so pipelined
 * requests wait in the socket and in 'in', and are parsed one at a time.
 * While a response streams, the socket is watched for EPOLLRDHUP only: a
 * client that goes away cancels the host's work at once. */

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "modelgated/access.h"
#include "modelgated/api-error.h"
#include "modelgated/catalog.h"
#include "modelgated/client.h"
#include "modelgated/exchange.h"
#include "modelgated/feed-hub.h"
#include "modelgated/host.h"
#include "modelgated/http.h"
#include "modelgated/manager.h"
#include "modelgated/metrics.h"
#include "modelgated/models.h"
#include "modelgated/route.h"
#include "modelgated/sse.h"
#include "modelgated/upstream.h"
#include "shared/count-map.h"
#include "shared/log.h"

#define CLIENT_READ_SIZE (64 * 1024)
#define CLIENT_OUT_HIGH (256 * 1024)     /* above this, the host is not read until the client catches up */
#define CLIENT_HELD_MAX (1024 * 1024)    /* error bodies held back for rewording */
#define CLIENT_FEED_OUT_MAX (256 * 1024) /* a /models/sse subscriber this far behind is dropped */

typedef enum ClientState {
        CLIENT_WAITING,
        CLIENT_READING,
        CLIENT_RESPONDING,
        CLIENT_CLOSING,
        CLIENT_LINGERING, /* our side is shut; what the client still sends is read and dropped */
} ClientState;

struct ClientSet {
        Manager *manager;
        Client *clients;
        size_t n_clients;
        CountMap *by_address; /* MaxConnectionsPerAddress= */
        const ClientSetCallbacks *cb;
        void *userdata;
};

struct Client {
        Manager *manager;
        LIST_FIELDS(Client, clients);
        ClientSet *set;
        FeedSubscriber feed_sub; /* in the manager's feed hub while it follows /models/sse */
        bool feed;
        int fd;
        sd_event_source *io, *timer;
        char peer[INET6_ADDRSTRLEN + 8];
        char address[INET6_ADDRSTRLEN + 8]; /* what MaxConnectionsPerAddress= counts (IPv6 per /64) */
        bool address_counted;
        ClientState state;
        bool in_process;
        bool close_after_response;
        bool answered_one; /* a response went out on this connection */
        bool read_eof;     /* the client shut its side: what it sent is answered, then the connection ends */
        bool eof_probed;   /* since then, something went out that a closed socket answers with a reset */

        Buffer in;
        HttpParser parser;
        Buffer out;

        Exchange *x;               /* the request being answered; a new one for each */
        Buffer held_head, scratch; /* working space, kept across requests */
};

static int client_io_cb(sd_event_source *s, int fd, uint32_t revents, void *userdata);
static int client_timer_cb(sd_event_source *s, uint64_t usec, void *userdata);
static void client_process(Client *c);
static void client_linger(Client *c);

/* The end of a request: the next one gets a fresh Exchange. false: out of memory for it. */
static bool request_reset(Client *c) {
        c->x = exchange_free(c->x);
        c->eof_probed = false;
        buffer_clear(&c->held_head);
        c->x = exchange_new(c);
        return c->x;
}

static void client_free(Client *c) {
        if (!c)
                return;
        if (c->feed) {
                feed_hub_unsubscribe(manager_feed_hub(c->manager), &c->feed_sub);
                c->feed = false;
        }
        c->x = exchange_free(c->x);
        ClientSet *set = c->set;
        LIST_REMOVE(clients, set->clients, c);
        set->n_clients--;
        uint64_t *same = c->address_counted ? count_map_get(&set->by_address, c->address, false) : NULL;
        if (same && --*same == 0)
                count_map_remove(set->by_address, c->address);
        sd_event_source_disable_unref(c->io);
        sd_event_source_disable_unref(c->timer);
        safe_close(c->fd);
        http_parser_done(&c->parser);
        buffer_done(&c->in);
        buffer_done(&c->out);
        buffer_done(&c->held_head);
        buffer_done(&c->scratch);
        free(c);
        if (set->cb && set->cb->changed)
                set->cb->changed(set->userdata);
}

static void client_set_timer(Client *c, usec_t rel) {
        if (rel == USEC_INFINITY) {
                (void)sd_event_source_set_enabled(c->timer, SD_EVENT_OFF);
                return;
        }
        (void)sd_event_source_set_time_relative(c->timer, rel);
        (void)sd_event_source_set_enabled(c->timer, SD_EVENT_ONESHOT);
}

static void client_update_events(Client *c) {
        /* edge-triggered: with many clients ready at once, level-triggered sockets would be polled
         * again by every epoll_wait (one per event sd-event dispatches) until they are served */
        uint32_t ev = EPOLLRDHUP | EPOLLET;

        /* input is read while an answer is produced too (up to CLIENT_READ_SIZE, for pipelined
         * requests), so that the common keep-alive exchange needs no epoll change per request */
        if (((c->state == CLIENT_WAITING || c->state == CLIENT_READING || c->state == CLIENT_RESPONDING) &&
             buffer_size(&c->in) < CLIENT_READ_SIZE) ||
            c->state == CLIENT_LINGERING)
                ev |= EPOLLIN;
        if (!buffer_is_empty(&c->out))
                ev |= EPOLLOUT;
        (void)sd_event_source_set_io_events(c->io, ev);
}

/* Writes what can be written now. < 0: the client is gone (the caller frees it). */
static int client_flush(Client *c) {
        bool progress = false;

        while (!buffer_is_empty(&c->out)) {
                ssize_t k =
                        send(c->fd, buffer_peek(&c->out), buffer_size(&c->out), MSG_NOSIGNAL | MSG_DONTWAIT);
                if (k < 0) {
                        if (errno == EAGAIN || errno == EINTR)
                                break;
                        return -errno;
                }
                buffer_consume(&c->out, (size_t)k);
                progress = true;
        }
        if (buffer_is_empty(&c->out)) {
                if (c->x->upstream)
                        upstream_set_reading(c->x->upstream, true);
                if (c->state == CLIENT_RESPONDING && !c->x->response_complete)
                        client_set_timer(c, USEC_INFINITY);
        } else if (progress || c->state == CLIENT_RESPONDING || c->state == CLIENT_CLOSING)
                /* a client that stops reading is dropped after IdleTimeoutSec without progress (a last
                 * answer before a close included: every state has a deadline) */
                client_set_timer(c, manager_config(c->manager)->idle_timeout_usec);
        if (!buffer_is_empty(&c->out) && buffer_size(&c->out) > CLIENT_OUT_HIGH && c->x->upstream)
                upstream_set_reading(c->x->upstream, false);
        client_update_events(c);
        return 0;
}

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

static void client_log_access(Client *c, const char *note) {
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
static void client_response_complete(Client *c, const char *note) {
        /* the engine is free for a switch as soon as the answer has fully arrived */
        host_release(&c->x->waiter);
        client_log_access(c, note);
        c->x->response_complete = true;
        manager_count_request(c->manager);
        c->answered_one = true;
}

/* "HTTP/1.1 200 OK\r\n", without printf: every response writes one */
static int append_status_line(Buffer *b, int status) {
        if (buffer_append_str(b, "HTTP/1.1 ") < 0 || buffer_append_u64(b, (uint64_t)status) < 0 ||
            buffer_append_str(b, " ") < 0 || buffer_append_str(b, http_status_reason(status)) < 0 ||
            buffer_append_str(b, "\r\n") < 0)
                return -ENOMEM;
        return 0;
}

static int append_content_length(Buffer *b, uint64_t n) {
        if (buffer_append_str(b, "Content-Length: ") < 0 || buffer_append_u64(b, n) < 0 ||
            buffer_append_str(b, "\r\n") < 0)
                return -ENOMEM;
        return 0;
}

static int queue_head(Client *c, int status, const char *extra) {
        int r = append_status_line(&c->out, status);
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
static void client_respond(Client *c, int status, const char *content_type, const char *body, size_t n,
                           const char *extra_headers) {
        char h[1024];

        c->x->status = status;
        snprintf(h, sizeof(h), "Content-Type: %s\r\nContent-Length: %zu\r\n%s", content_type, n,
                 extra_headers ?: "");
        if (queue_head(c, status, h) < 0 || (!c->x->head && buffer_append(&c->out, body, n) < 0))
                c->close_after_response = true; /* out of memory: what is queued will be cut */
        c->x->bytes = c->x->head ? 0 : n;
        client_response_complete(c, NULL);
}

static int frame_body(Client *c, const char *p, size_t n);

/* After the early 200 the status line is gone: an error is an SSE error event in the API's shape,
 * and the response ends cleanly (SPEC §7). */
static void client_end_early(Client *c, const Buffer *event) {
        if (frame_body(c, buffer_peek(event), buffer_size(event)) < 0 ||
            (c->x->chunked && buffer_append_str(&c->out, "0\r\n\r\n") < 0) || !c->x->chunked)
                c->close_after_response = true;
        client_response_complete(c, NULL);
}

static void client_respond_error(Client *c, int status, const char *code, const char *message,
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

static bool client_fall_back(Client *c, const char *why);

static void client_host_down(Client *c, int error) {
        char msg[512];
        const char *reason = upstream_strerror(error);

        if (c->x->via_fallback) {
                /* not chained, and not the host's fault: the fallback's own failure, as it is */
                snprintf(msg, sizeof(msg), "fallback '%s' (%s) failed: %s", c->x->fallback->name,
                         c->x->fallback->url.text, reason);
                return client_respond_error(c, 502, "fallback_failed", msg, NULL);
        }
        if (client_fall_back(c, reason))
                return;
        Host *h = manager_host(c->manager, c->x->host);
        if (h)
                host_report_http(h, reason);
        snprintf(msg, sizeof(msg), "host '%s' is down: %s (%s); modelgate keeps trying it, retry in 30 s",
                 c->x->host->name, reason, c->x->host->url.text);
        client_respond_error(c, 503, "host_down", msg, "Retry-After: 30\r\nretry-after-ms: 30000\r\n");
}

/* The request for a host: the body is the client's with the bytes of 'span' (the model's value; empty:
 * none) replaced by 'with', written straight into the request, so that no rewritten copy of it is made. */
static int build_upstream_request(Client *c, const HttpUrl *target, Span url, Span body, Span span,
                                  const char *with, Buffer *out) {
        HttpRequest *r = &c->parser.req;
        size_t pre = span.p ? (size_t)(span.p - body.p) : body.n, wl = span.p ? strlen(with) : 0;
        size_t body_len = body.n - span.n + wl;
        int k;

        k = buffer_append_str(out, llhttp_method_name(r->method));
        if (k >= 0)
                k = buffer_append_str(out, " ");
        if (k >= 0)
                k = buffer_append_str(out, target->base_path);
        if (k >= 0)
                k = buffer_append(out, url.p, url.n);
        if (k >= 0)
                k = buffer_append_str(out, " HTTP/1.1\r\nHost: ");
        if (k >= 0)
                k = buffer_append_str(out, target->authority);
        if (k >= 0)
                k = buffer_append_str(out, "\r\n");
        if (k < 0)
                return k;
        if (http_request_append_forwarded_headers(r, out) < 0)
                return -ENOMEM;
        if (body_len > 0 || r->method == HTTP_POST || r->method == HTTP_PUT || r->method == HTTP_PATCH)
                if (append_content_length(out, body_len) < 0)
                        return -ENOMEM;
        if (buffer_append_str(out, "\r\n") < 0 || buffer_append(out, body.p, pre) < 0 ||
            buffer_append(out, with, wl) < 0 ||
            (span.p && buffer_append(out, span.p + span.n, body.n - pre - span.n) < 0))
                return -ENOMEM;
        return 0;
}

/* Upstream callbacks: the host's answer, streamed */

static int frame_body(Client *c, const char *p, size_t n) {
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
static int send_held_head(Client *c, const char *framing) {
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

static int client_upstream_headers(Upstream *u, const UpstreamResponse *resp, void *userdata) {
        Client *c = userdata;
        Span ct = upstream_response_header(resp, "Content-Type");
        Span connection = upstream_response_header(resp, "Connection");
        bool sse = ct.p && ct.n >= 17 && strncasecmp(ct.p, "text/event-stream", 17) == 0;
        bool no_body = c->x->head || resp->status == 204 || resp->status == 304;
        const char *framing = "";

        if (!c->x->via_fallback) {
                Host *h = manager_host(c->manager, c->x->host);
                if (h)
                        host_report_http(h, NULL);
                /* "not here (yet)": a host that has not registered the model, or is loading */
                if ((resp->status == 404 || resp->status == 503) && !c->x->head) {
                        char why[64];
                        snprintf(why, sizeof(why), "the engine answered %d", resp->status);
                        if (client_fall_back(c, why))
                                return 0;
                }
        }
        if (!c->x->first_byte_seen) {
                c->x->first_byte_seen = true;
                metrics_first_byte(manager_metrics(c->manager), c->x->host->name,
                                   now_usec(CLOCK_MONOTONIC) - c->x->start);
        }
        if (c->x->early) {
                /* the 200 and its framing are out: a stream continues it, anything else becomes an error
                 * event when it is complete */
                if (sse && resp->status == 200) {
                        c->x->mode = MODE_SSE;
                        sse_filter_init(&c->x->sse, c->x->api);
                } else {
                        c->x->mode = MODE_HOLD;
                        c->x->error_status = resp->status;
                }
                return 0;
        }
        c->x->status = resp->status;
        if (!no_body && resp->status >= 400 && !sse)
                c->x->mode = MODE_HOLD;
        else if (!no_body && sse) {
                c->x->mode = MODE_SSE;
                sse_filter_init(&c->x->sse, c->x->api);
        } else
                c->x->mode = MODE_PASS;
        if (c->x->mode != MODE_SSE)
                c->x->awaiting_first_token = false;

        if (no_body || c->x->mode == MODE_HOLD)
                c->x->chunked = false;
        else if (c->x->mode == MODE_PASS && resp->has_content_length && !resp->chunked)
                c->x->chunked = false;
        else if (!c->x->http10) {
                c->x->chunked = true;
                framing = "Transfer-Encoding: chunked\r\n";
        } else
                c->close_after_response = true;

        buffer_clear(&c->held_head);
        if (append_status_line(&c->held_head, resp->status) < 0)
                return -1;
        /* where the answer came from: host/engine, or fallback/name */
        if (buffer_append_str(&c->held_head, "X-Modelgate-Served-By: ") < 0 ||
            buffer_append_str(&c->held_head, c->x->via_fallback ? "fallback" : c->x->host->name) < 0 ||
            buffer_append_str(&c->held_head, c->x->via_fallback || c->x->engine_name ? "/" : "") < 0 ||
            buffer_append_str(&c->held_head, c->x->via_fallback ? c->x->fallback->name : c->x->engine_name ?: "") < 0 ||
            buffer_append_str(&c->held_head, "\r\n") < 0)
                return -1;
        for (size_t i = 0; i < resp->n_headers; i++) {
                Span name = upstream_response_header_name(resp, i),
                     value = upstream_response_header_value(resp, i);
                if (http_header_is_hop_by_hop(name) || (connection.p && span_list_has(connection, name)))
                        continue;
                if (buffer_append(&c->held_head, name.p, name.n) < 0 ||
                    buffer_append_str(&c->held_head, ": ") < 0 ||
                    buffer_append(&c->held_head, value.p, value.n) < 0 ||
                    buffer_append_str(&c->held_head, "\r\n") < 0)
                        return -1;
        }
        if (no_body || (!c->x->chunked && c->x->mode == MODE_PASS && resp->has_content_length)) {
                /* Content-Length is framing, dropped above with the other hop-by-hop headers; when
                 * the body goes on unchanged it is still right (and a HEAD answer keeps the length
                 * the GET would have had, RFC 9110 §9.3.2) */
                if (resp->has_content_length &&
                    append_content_length(&c->held_head, resp->content_length) < 0)
                        return -1;
        }
        if (c->x->mode == MODE_HOLD)
                return 0;
        if (c->x->awaiting_first_token) {
                /* held with the comments before it until the first data line: until then the fallback may
                 * still answer instead */
                c->x->held_framing = framing;
                return 0;
        }

        /* written with the body bytes of the same read (client_upstream_read_end) */
        return send_held_head(c, framing) < 0 ? -1 : 0;
}

static void release_held(Client *c) {
        /* too big to reword: pass it on as it is */
        c->x->chunked = !c->x->http10;
        if (!c->x->chunked)
                c->close_after_response = true;
        (void)send_held_head(c, c->x->chunked ? "Transfer-Encoding: chunked\r\n" : "");
        c->x->mode = MODE_PASS;
        (void)frame_body(c, buffer_peek(&c->x->held), buffer_size(&c->x->held));
        buffer_done(&c->x->held);
}

/* A data line (a token, or an error event) in what a stream has sent so far. */
static bool has_data_line(const Buffer *b) {
        const char *p = buffer_peek(b);
        size_t n = buffer_size(b);
        return (n >= 5 && memcmp(p, "data:", 5) == 0) || memmem(p, n, "\ndata:", 6);
}

/* The first token is here: the engine answers after all, and what was held goes out. */
static int release_first_token(Client *c) {
        c->x->awaiting_first_token = false;
        (void)sd_event_source_set_enabled(c->x->budget, SD_EVENT_OFF);
        if (!c->x->early && send_held_head(c, c->x->held_framing ?: "") < 0)
                return -ENOMEM;
        int r = frame_body(c, buffer_peek(&c->x->held), buffer_size(&c->x->held));
        buffer_done(&c->x->held);
        return r;
}

static int client_upstream_body(Upstream *u, const char *p, size_t n, void *userdata) {
        Client *c = userdata;
        int r = 0;

        switch (c->x->mode) {
        case MODE_HOLD:
                if (buffer_size(&c->x->held) + n <= CLIENT_HELD_MAX)
                        return buffer_append(&c->x->held, p, n) < 0 ? -1 : 0;
                if (c->x->early) {
                        /* an error answer of more than 1 MiB after an early 200: its start will do */
                        return 0;
                }
                release_held(c);
                r = frame_body(c, p, n);
                break;
        case MODE_SSE:
                buffer_clear(&c->scratch);
                r = sse_filter_feed(&c->x->sse, p, n, &c->scratch);
                if (r >= 0 && c->x->awaiting_first_token) {
                        r = buffer_append(&c->x->held, buffer_peek(&c->scratch), buffer_size(&c->scratch));
                        /* a data line, or more comments than are worth holding: the engine's answer it is */
                        if (r >= 0 &&
                            (has_data_line(&c->x->held) || buffer_size(&c->x->held) > CLIENT_HELD_MAX))
                                r = release_first_token(c);
                        break;
                }
                if (r >= 0)
                        r = frame_body(c, buffer_peek(&c->scratch), buffer_size(&c->scratch));
                break;
        case MODE_PASS:
                r = frame_body(c, p, n);
                break;
        }
        if (!c->x->awaiting_first_token && c->x->mode != MODE_HOLD)
                c->x->engine_bytes_sent = true;
        if (r < 0) {
                client_free(c);
                return -1;
        }
        /* a slow reader: stop reading the host before the end of this read (backpressure) */
        if (buffer_size(&c->out) > CLIENT_OUT_HIGH && client_flush(c) < 0) {
                client_free(c);
                return -1;
        }
        return 0;
}

static void client_upstream_read_end(Upstream *u, void *userdata) {
        Client *c = userdata;

        if (client_flush(c) < 0)
                client_free(c); /* cancels u, which the upstream handles after this returns */
}

static void client_upstream_complete(Upstream *u, void *userdata) {
        Client *c = userdata;

        c->x->upstream = NULL;
        (void)sd_event_source_set_enabled(c->x->budget, SD_EVENT_OFF);
        if (c->x->awaiting_first_token && c->x->mode == MODE_SSE)
                (void)release_first_token(c); /* a stream that ended without a data line, as it is */
        if (c->x->mode == MODE_HOLD && c->x->early) {
                buffer_clear(&c->scratch);
                if (sse_error_event_from_answer(c->x->api, c->x->error_status, buffer_peek(&c->x->held),
                                                buffer_size(&c->x->held), &c->scratch) < 0)
                        c->close_after_response = true;
                client_end_early(c, &c->scratch);
                if (client_flush(c) < 0) {
                        client_free(c);
                        return;
                }
                client_process(c);
                return;
        }
        if (c->x->mode == MODE_HOLD) {
                _cleanup_free_ char *n = NULL;
                size_t nl = 0;
                char framing[64];
                const char *body = buffer_peek(&c->x->held);
                size_t bl = buffer_size(&c->x->held);

                if (api_error_reword(c->x->api, body, bl, &n, &nl) > 0) {
                        body = n;
                        bl = nl;
                }
                snprintf(framing, sizeof(framing), "Content-Length: %zu\r\n", bl);
                (void)send_held_head(c, framing);
                (void)buffer_append(&c->out, body, bl);
                c->x->bytes = bl;
        } else {
                if (c->x->mode == MODE_SSE) {
                        buffer_clear(&c->scratch);
                        (void)sse_filter_finish(&c->x->sse, &c->scratch);
                        (void)frame_body(c, buffer_peek(&c->scratch), buffer_size(&c->scratch));
                }
                if (c->x->chunked)
                        (void)buffer_append_str(&c->out, "0\r\n\r\n");
        }
        /* SPEC §4: the list is re-read after every load or unload that worked */
        if (c->x->status >= 200 && c->x->status < 300 && c->x->path &&
            (streq(c->x->path, "/models/load") || streq(c->x->path, "/models/unload"))) {
                Host *h = manager_host(c->manager, c->x->host);
                if (h)
                        catalog_model_call_done(host_catalog(h), c->x->model,
                                                streq(c->x->path, "/models/load"));
        }
        client_response_complete(c, NULL);
        if (client_flush(c) < 0) {
                client_free(c);
                return;
        }
        client_process(c);
}

/* An answer that cannot be finished and has no way to say so in-band: the connection ends without the last
 * chunk (or before Content-Length is reached), so the client sees an incomplete answer, not a short one. */
static void client_cut(Client *c, const char *note) {
        c->close_after_response = true;
        c->state = CLIENT_CLOSING;
        client_response_complete(c, note);
}

static void client_upstream_error(Upstream *u, int error, bool started, void *userdata) {
        Client *c = userdata;
        char msg[512];

        c->x->upstream = NULL;
        (void)sd_event_source_set_enabled(c->x->budget, SD_EVENT_OFF);
        if (client_fall_back(c, upstream_strerror(error))) {
                /* the engine failed before any of its answer reached the client */
                if (client_flush(c) < 0)
                        client_free(c);
                return;
        }
        if (c->x->awaiting_first_token && c->x->mode == MODE_SSE)
                (void)release_first_token(c);
        c->x->awaiting_first_token = false;
        if (!started && (error == ETIME || error == -ETIME)) {
                /* stuck, not down: the connection is closed (so the GPU stops working on it) */
                char t[FORMAT_TIMESPAN_MAX];
                snprintf(
                        msg, sizeof(msg),
                        "host '%s' sent nothing for %s (UpstreamIdleTimeoutSec=), so modelgate cancelled "
                        "the "
                        "request",
                        c->x->host->name,
                        format_timespan(t, sizeof(t), manager_config(c->manager)->upstream_idle_timeout_usec)
                                ?: "?");
                client_respond_error(c, 504, "upstream_timeout", msg, NULL);
        } else if (c->x->early && (!started || c->x->mode == MODE_HOLD)) {
                if (!started)
                        client_host_down(c, error);
                else {
                        snprintf(msg, sizeof(msg), "host '%s' ended its answer early (%s)", c->x->host->name,
                                 upstream_strerror(error));
                        client_respond_error(c, 502, "upstream_incomplete", msg, NULL);
                }
        } else if (!started || (c->x->mode == MODE_HOLD && !c->x->head_sent)) {
                if (!started) {
                        log_debug("host %s: %s %s failed before an answer: %s", c->x->host->name,
                                  c->x->method, c->x->path, upstream_strerror(error));
                        client_host_down(c, error);
                } else {
                        snprintf(msg, sizeof(msg), "host '%s' ended its answer early (%s)", c->x->host->name,
                                 upstream_strerror(error));
                        client_respond_error(c, 502, "upstream_incomplete", msg, NULL);
                }
        } else if (c->x->mode == MODE_SSE) {
                buffer_clear(&c->scratch);
                (void)sse_filter_finish(&c->x->sse, &c->scratch);
                if (!c->x->sse.saw_done) {
                        snprintf(msg, sizeof(msg),
                                 "host '%s' stopped the stream before it ended (%s); the answer is "
                                 "incomplete",
                                 c->x->host->name, upstream_strerror(error));
                        (void)sse_error_event(c->x->api, 502, "upstream_incomplete", msg, &c->scratch);
                }
                (void)frame_body(c, buffer_peek(&c->scratch), buffer_size(&c->scratch));
                if (c->x->chunked)
                        (void)buffer_append_str(&c->out, "0\r\n\r\n");
                else
                        c->close_after_response = true;
                client_response_complete(c, c->x->sse.saw_done ? NULL : "cut=host");
        } else
                client_cut(c, "cut=host");
        if (client_flush(c) < 0) {
                client_free(c);
                return;
        }
        client_process(c);
}

static const UpstreamCallbacks client_upstream_callbacks = {
        .on_headers = client_upstream_headers,
        .on_body = client_upstream_body,
        .on_read_end = client_upstream_read_end,
        .on_complete = client_upstream_complete,
        .on_error = client_upstream_error,
};

/* Only what the caller's tier may use (SPEC §3, [Tier] Models=). */
static char *filter_models(const AccessCaller *caller, const char *json, size_t *n) {
        json_object *root = json_tokener_parse(json), *data, *kept = json_object_new_array();
        char *out = NULL;

        if (root && json_object_object_get_ex(root, "data", &data) &&
            json_object_is_type(data, json_type_array)) {
                for (size_t i = 0; i < json_object_array_length(data); i++) {
                        json_object *e = json_object_array_get_idx(data, i), *id;
                        if (json_object_object_get_ex(e, "id", &id) &&
                            access_model_allowed(caller, json_object_get_string(id)))
                                json_object_array_add(kept, json_object_get(e));
                }
                json_object_object_add(root, "data", kept);
                kept = NULL;
                out = strdup(json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN |
                                                                          JSON_C_TO_STRING_NOSLASHESCAPE));
                if (out)
                        *n = strlen(out);
        }
        json_object_put(kept);
        json_object_put(root);
        return out;
}

static void client_models_done(ModelsMerge *mm, const char *json, size_t n, void *userdata) {
        Client *c = userdata;
        _cleanup_free_ char *filtered = NULL;

        c->x->merge = models_merge_free(mm);
        if (json && c->x->caller.tier && !strv_isempty(c->x->caller.tier->models)) {
                filtered = filter_models(&c->x->caller, json, &n);
                json = filtered;
        }
        if (!json)
                client_respond_error(c, 500, NULL, "out of memory", NULL);
        else
                client_respond(c, 200, "application/json", json, n, NULL);
        if (client_flush(c) < 0) {
                client_free(c);
                return;
        }
        client_process(c);
}

/* GET /health: cheap (no I/O, the hosts' states as they are) and true: "ok" while at least one host can
 * serve (is not down), "degraded" when none can; ?strict=1 makes the latter a 503, for load balancers. */
static void client_respond_health(Client *c, bool strict) {
        Manager *m = c->manager;
        _cleanup_(buffer_done) Buffer b = {};
        size_t up = 0;

        size_t n = manager_n_hosts(m);

        for (size_t i = 0; i < n; i++)
                up += host_state(manager_host_at(m, i)) != HOST_DOWN;
        bool ok = up > 0 || n == 0;
        (void)buffer_printf(&b,
                            "{\"status\":\"%s\",\"version\":\"%s\",\"hosts\":%zu,\"hosts_up\":%zu,"
                            "\"connections\":%zu,\"host_states\":{",
                            ok ? "ok" : "degraded", MODELGATE_VERSION, n, up, c->set->n_clients);
        for (size_t i = 0; i < n; i++)
                /* host names are letters, digits, '_' and '.': nothing to escape */
                (void)buffer_printf(&b, "%s\"%s\":\"%s\"", i ? "," : "", manager_config(m)->hosts[i].name,
                                    host_state_to_string(host_state(manager_host_at(m, i))));
        if (buffer_append_str(&b, "}}") < 0)
                return client_respond_error(c, 500, NULL, "out of memory", NULL);
        client_respond(c, strict && !ok ? 503 : 200, "application/json", buffer_peek(&b), buffer_size(&b),
                       strict && !ok ? "Retry-After: 30\r\n" : NULL);
}

/* The configuration has errors (manager.h): every request gets them at once, and no host hears of it. A
 * person has to fix the file, so the SDKs are told not to retry (x-should-retry, as for 423): the agent
 * shows the message instead of retrying for minutes. */
static void client_respond_refusal(Client *c, bool health) {
        const char *refusal = manager_refusal(c->manager);
        _cleanup_free_ char *body = NULL;

        if (!health)
                return client_respond_error(c, 503, "config_error", refusal, "x-should-retry: false\r\n");
        json_object *o = json_object_new_object();
        if (o) {
                json_object_object_add(o, "status", json_object_new_string("config-error"));
                json_object_object_add(o, "version", json_object_new_string(MODELGATE_VERSION));
                json_object_object_add(o, "message", json_object_new_string(refusal));
                body = strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
                                                                        JSON_C_TO_STRING_NOSLASHESCAPE));
                json_object_put(o);
        }
        if (!body)
                return client_respond_error(c, 500, NULL, "out of memory", NULL);
        client_respond(c, 503, "application/json", body, strlen(body), NULL);
}

/* Gauges of what the daemon holds now, after the counters */
static int render_gauges(Client *c, Buffer *b) {
        Manager *m = c->manager;
        usec_t now;
        static const struct {
                const char *name, *help;
                unsigned (*get)(const Host *h);
        } per_host[] = {
                {"modelgate_in_flight", "Requests sent to a host and not yet answered", host_in_flight},
                {"modelgate_waiting", "Requests waiting for their engine", host_waiting},
        };

        (void)sd_event_now(manager_event(m), CLOCK_MONOTONIC, &now);
        metrics_render_header(b, "modelgate_connections", "gauge", "Open client connections");
        (void)buffer_printf(b, "modelgate_connections %zu\n", c->set->n_clients);
        for (size_t g = 0; g < ELEMENTSOF(per_host); g++) {
                metrics_render_header(b, per_host[g].name, "gauge", per_host[g].help);
                for (size_t i = 0; i < manager_n_hosts(m); i++) {
                        _cleanup_(buffer_done) Buffer l = {};
                        metrics_append_label(&l, "host", host_conf(manager_host_at(m, i))->name);
                        (void)buffer_terminate(&l);
                        (void)buffer_printf(b, "%s{%s} %u\n", per_host[g].name, buffer_peek(&l),
                                            per_host[g].get(manager_host_at(m, i)));
                }
        }
        metrics_render_header(b, "modelgate_host_state", "gauge",
                              "1 for the state each host is in (org.modelgate1(5))");
        for (size_t i = 0; i < manager_n_hosts(m); i++)
                for (HostState st = 0; st < _HOST_STATE_MAX; st++) {
                        _cleanup_(buffer_done) Buffer l = {};
                        metrics_append_label(&l, "host", host_conf(manager_host_at(m, i))->name);
                        metrics_append_label(&l, "state", host_state_to_string(st));
                        (void)buffer_terminate(&l);
                        (void)buffer_printf(b, "modelgate_host_state{%s} %d\n", buffer_peek(&l),
                                            host_state(manager_host_at(m, i)) == st);
                }
        metrics_render_header(b, "modelgate_engine_up_seconds", "gauge",
                              "How long the running engine has been up");
        for (size_t i = 0; i < manager_n_hosts(m); i++) {
                Host *h = manager_host_at(m, i);
                ssize_t e = host_engine_up(h);
                if (e < 0)
                        continue;
                _cleanup_(buffer_done) Buffer l = {};
                metrics_append_label(&l, "host", host_conf(h)->name);
                metrics_append_label(&l, "engine", host_engine(h, (size_t)e)->conf->name);
                (void)buffer_terminate(&l);
                (void)buffer_printf(b, "modelgate_engine_up_seconds{%s} %.3f\n", buffer_peek(&l),
                                    (double)(now - host_up_since(h)) / USEC_PER_SEC);
        }
        return buffer_terminate(b);
}

static void client_respond_metrics(Client *c) {
        _cleanup_(buffer_done) Buffer b = {};

        if (metrics_render(manager_metrics(c->manager), &b) < 0 || render_gauges(c, &b) < 0)
                return client_respond_error(c, 500, NULL, "out of memory", NULL);
        client_respond(c, 200, "text/plain; version=0.0.4; charset=utf-8", buffer_peek(&b), buffer_size(&b),
                       NULL);
}

static void client_feed_send(FeedSubscriber *s, const char *p, size_t n);

static const FeedSubscriberOps client_feed_ops = {
        .send = client_feed_send,
};

/* GET /models/sse: every host's feed, relabelled, until the client goes */
static void client_start_feed(Client *c) {
        Manager *m = c->manager;
        FeedHub *hub = manager_feed_hub(m);
        Config *config = manager_config(m);
        char hello[128];
        int n;

        /* subscribers hold their connection for good: they may not take more than half of MaxConnections=,
         * so that /health and requests always find one */
        uint64_t max = MIN(config->max_feed_subscribers, config->max_connections / 2);
        if (feed_hub_count(hub) >= max) {
                char msg[160];
                snprintf(msg, sizeof(msg),
                         "/models/sse has %zu subscribers, as many as this proxy takes "
                         "(MaxFeedSubscribers=%llu, "
                         "at most half of MaxConnections=)",
                         feed_hub_count(hub), (unsigned long long)max);
                return client_respond_error(c, 503, "too_many_subscribers", msg, "Retry-After: 30\r\n");
        }

        c->x->status = 200;
        c->x->chunked = !c->x->http10;
        if (!c->x->chunked)
                c->close_after_response = true;
        if (queue_head(c, 200,
                       c->x->chunked ? "Content-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                                       "Transfer-Encoding: chunked\r\n"
                                     : "Content-Type: text/event-stream\r\nCache-Control: no-cache\r\n") < 0)
                return client_respond_error(c, 500, NULL, "out of memory", NULL);
        c->x->head_sent = true;
        if (c->x->head) {
                c->x->bytes = 0;
                return client_response_complete(c, NULL);
        }
        /* a feed is a trickle: a small kernel buffer lets a subscriber that stopped reading be seen (and
         * dropped) after a few hundred KiB instead of after megabytes */
        (void)setsockopt(c->fd, SOL_SOCKET, SO_SNDBUF, &(int){64 * 1024}, sizeof(int));
        c->feed = true;
        n = snprintf(hello, sizeof(hello), ": modelgate model events from %zu host(s)\n\n", config->n_hosts);
        (void)frame_body(c, hello, (size_t)n);
        feed_hub_subscribe(hub, &c->feed_sub, &client_feed_ops);
}

static void client_feed_send(FeedSubscriber *s, const char *p, size_t n) {
        Client *c = container_of(s, Client, feed_sub);

        if (buffer_size(&c->out) > CLIENT_FEED_OUT_MAX) {
                /* bounded: a subscriber that does not read is dropped, not buffered for ever */
                log_info("Client %s does not read /models/sse, dropping it", c->peer);
                client_log_access(c, "cut=slow-client");
                client_free(c);
                return;
        }
        if (frame_body(c, p, n) < 0 || client_flush(c) < 0)
                client_free(c);
}

static char *span_dup(Span s) {
        return s.p ? strndup(s.p, s.n) : NULL;
}

static int client_budget_cb(sd_event_source *s, uint64_t usec, void *userdata);

/* FirstTokenBudgetSec= (streaming) or RequestBudgetSec=, from the moment the engine gets the request */
static void client_start_budget(Client *c) {
        usec_t b;

        if (!c->x->engine_conf || c->x->via_fallback)
                return;
        b = c->x->streaming ? c->x->engine_conf->first_token_budget_usec
                            : c->x->engine_conf->request_budget_usec;
        if (b == 0 || b == USEC_INFINITY)
                return;
        if (!c->x->budget) {
                if (sd_event_add_time_relative(manager_event(c->manager), &c->x->budget, CLOCK_MONOTONIC, b,
                                               0, client_budget_cb, c) < 0)
                        return;
        } else
                (void)sd_event_source_set_time_relative(c->x->budget, b);
        (void)sd_event_source_set_enabled(c->x->budget, SD_EVENT_ONESHOT);
}

static void client_send_upstream(Client *c) {
        int k = upstream_start(manager_pool(c->manager), c->x->target, &c->x->pending, c->x->head,
                               &client_upstream_callbacks, c, &c->x->upstream);
        buffer_done(&c->x->pending);
        if (k < 0)
                return client_host_down(c, k);
        (void)upstream_set_idle_timeout(c->x->upstream,
                                        manager_config(c->manager)->upstream_idle_timeout_usec);
        client_start_budget(c);
}

/* The paths a fallback serves: inference, nothing that reads or changes the cloud account. The path
 * sent is this table's string, never the client's bytes. */
static const char *fallback_path(llhttp_method_t method, Span path) {
        static const char *const paths[] = {
                "/v1/chat/completions",
                "/v1/completions",
                "/v1/messages",
                "/v1/messages/count_tokens",
        };
        if (method != HTTP_POST)
                return NULL;
        for (size_t i = 0; i < ELEMENTSOF(paths); i++)
                if (span_eq(path, paths[i]))
                        return paths[i];
        return NULL;
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

        if (buffer_append_str(out, "POST ") < 0 || buffer_append_str(out, f->url.base_path) < 0 ||
            buffer_append_str(out, c->x->fb_path) < 0 || buffer_append_str(out, " HTTP/1.1\r\nHost: ") < 0 ||
            buffer_append_str(out, f->url.authority) < 0 ||
            buffer_append_str(out, "\r\nUser-Agent: modelgate/" MODELGATE_VERSION
                                   "\r\nContent-Type: application/json\r\n") < 0)
                return -ENOMEM;
        if (accept.p && (buffer_append_str(out, "Accept: ") < 0 ||
                         buffer_append(out, accept.p, accept.n) < 0 || buffer_append_str(out, "\r\n") < 0))
                return -ENOMEM;
        if (c->x->api == API_ANTHROPIC && (buffer_append_str(out, "anthropic-version: ") < 0 ||
                                           (version.p ? buffer_append(out, version.p, version.n)
                                                      : buffer_append_str(out, "2023-06-01")) < 0 ||
                                           buffer_append_str(out, "\r\n") < 0))
                return -ENOMEM;
        if ((key_header && buffer_append_str(out, key_header) < 0) ||
            append_content_length(out, body_len) < 0 || buffer_append_str(out, "\r\n") < 0 ||
            buffer_append(out, body, body_len) < 0)
                return -ENOMEM;
        return 0;
}

/* SPEC §3: an availability failure of the engine, before any byte of its answer reached the client (an early
 * 200 with keepalive comments still counts as before), sends the request to the engine's fallback instead,
 * once. true: it went there, and the request is the fallback's now. */
static bool client_fall_back(Client *c, const char *why) {
        const FallbackConf *f = c->x->fallback;
        _cleanup_free_ char *quoted = NULL, *body = NULL, *model = NULL;
        _cleanup_free_ char *key_header = NULL;
        size_t n;
        Span span;

        /* the client's body is still the parser's (kept for this; the one copy besides the request sent) */
        const Buffer *b = &c->parser.req.body;
        if (!f || c->x->via_fallback || c->x->engine_bytes_sent || buffer_is_empty(b))
                return false;
        if (json_find_model(buffer_peek(b), buffer_size(b), &span, &model, NULL) < 0)
                return false;
        quoted = json_quote(f->model);
        body = quoted ? span_replace((Span){buffer_peek(b), buffer_size(b)}, span, quoted, &n) : NULL;
        if (f->key &&
            asprintf(&key_header,
                     c->x->api == API_ANTHROPIC ? "x-api-key: %s\r\n" : "Authorization: Bearer %s\r\n",
                     f->key) < 0)
                return false;
        if (!body)
                return false;

        _cleanup_free_ char *m = log_escape_dup(c->x->model);
        log_notice("host %s: %s goes to fallback %s: %s", c->x->host->name, strna(m), f->name, why);
        metrics_fallback(manager_metrics(c->manager), c->x->host->name, c->x->engine_name, f->name);
        c->x->via_fallback = true;
        /* the engine's request is cancelled (its connection closed, so the GPU stops), and the engine is
         * free */
        c->x->upstream = upstream_cancel(c->x->upstream);
        host_release(&c->x->waiter);
        (void)sd_event_source_set_enabled(c->x->budget, SD_EVENT_OFF);
        (void)sd_event_source_set_enabled(c->x->keepalive, SD_EVENT_OFF);
        sse_filter_done(&c->x->sse);
        c->x->mode = MODE_PASS;
        c->x->awaiting_first_token = false;
        buffer_clear(&c->held_head);
        buffer_done(&c->x->held);
        c->x->error_status = 0;
        c->x->target = &f->url;
        buffer_done(&c->x->pending);
        if (build_fallback_request(c, f, body, n, key_header, &c->x->pending) < 0) {
                client_respond_error(c, 500, NULL, "out of memory", NULL);
                return true;
        }
        client_send_upstream(c);
        return true;
}

static int client_budget_cb(sd_event_source *s, uint64_t usec, void *userdata) {
        Client *c = userdata;
        char why[256], t[FORMAT_TIMESPAN_MAX];
        bool stream = c->x->streaming;

        snprintf(why, sizeof(why), "%s not within %s (%s)", stream ? "no first token" : "no whole answer",
                 format_timespan(t, sizeof(t),
                                 stream ? c->x->engine_conf->first_token_budget_usec
                                        : c->x->engine_conf->request_budget_usec)
                         ?: "?",
                 stream ? "FirstTokenBudgetSec=" : "RequestBudgetSec=");
        if (client_fall_back(c, why)) {
                if (client_flush(c) < 0)
                        client_free(c);
                return 0;
        }
        /* no fallback: the request is cancelled all the same, so that the GPU stops working on it */
        c->x->upstream = upstream_cancel(c->x->upstream);
        if (!c->x->engine_bytes_sent) {
                char msg[512];
                snprintf(msg, sizeof(msg), "engine '%s' of host '%s': %s; the request was cancelled",
                         strna(c->x->engine_name), c->x->host->name, why);
                client_respond_error(c, 504, "budget_exceeded", msg, NULL);
        } else
                client_cut(c, "cut=budget");
        if (client_flush(c) < 0) {
                client_free(c);
                return 0;
        }
        client_process(c);
        return 0;
}

/* A refusal from the host's engine side: SPEC §7 statuses, with the headers that steer retrying clients;
 * or the fallback, for the availability failures (a busy GPU unless OnBusy=no). */
static void client_respond_host_error(Client *c, int status, const char *message) {
        if ((status != 423 || (c->x->fallback && c->x->fallback->on_busy != 0)) &&
            client_fall_back(c, message))
                return;
        switch (status) {
        case 503:
                return client_respond_error(c, 503, "host_down", message,
                                            "Retry-After: 30\r\nretry-after-ms: 30000\r\n");
        case 423:
                return client_respond_error(c, 423, "gpu_busy", message, "x-should-retry: false\r\n");
        default:
                return client_respond_error(c, status, "engine_failed", message, NULL);
        }
}

/* SPEC §5 rule 5: a streaming request that waits gets modelgate's own 200 after KeepaliveAfterSec=, then
 * an SSE comment every KeepaliveIntervalSec= saying what it waits for; comments are ignored by every SSE
 * parser and keep clients' idle watchdogs and "waiting" banners quiet. */
static int client_keepalive_cb(sd_event_source *s, uint64_t usec, void *userdata) {
        Client *c = userdata;
        char what[256], line[320];
        int n, k;

        /* the engine's answer has begun: it speaks for itself */
        if (c->x->first_byte_seen || c->x->response_complete)
                return 0;
        /* waiting for the engine, or for the model its router loads; in flight otherwise, and then no early
         * 200 for an answer that is merely slow */
        k = host_waiter_describe(&c->x->waiter, what, sizeof(what));
        if (k < 0)
                return 0;
        if (k == 0 && !c->x->early) {
                /* looked at again soon: a load that begins now gets its early 200 in time */
                (void)sd_event_source_set_time_relative(
                        s, MIN(manager_config(c->manager)->keepalive_interval_usec, USEC_PER_SEC));
                (void)sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
                return 0;
        }
        if (!c->x->early) {
                c->x->chunked = !c->x->http10;
                if (!c->x->chunked)
                        c->close_after_response = true;
                c->x->status = 200;
                if (queue_head(c, 200,
                               c->x->chunked
                                       ? "Content-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                                         "Transfer-Encoding: chunked\r\n"
                                       : "Content-Type: text/event-stream\r\nCache-Control: no-cache\r\n") <
                    0) {
                        client_free(c);
                        return 0;
                }
                c->x->early = c->x->head_sent = true;
        }
        n = snprintf(line, sizeof(line), ": %s\n\n", what);
        if (frame_body(c, line, (size_t)MIN((size_t)n, sizeof(line) - 1)) < 0 || client_flush(c) < 0) {
                client_free(c);
                return 0;
        }
        (void)sd_event_source_set_time_relative(s, manager_config(c->manager)->keepalive_interval_usec);
        (void)sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
        return 0;
}

static void client_wait_for_engine(Client *c) {
        const Config *cf = manager_config(c->manager);

        if (!c->x->streaming || c->x->head || cf->keepalive_after_usec == USEC_INFINITY)
                return;
        if (!c->x->keepalive) {
                if (sd_event_add_time_relative(manager_event(c->manager), &c->x->keepalive, CLOCK_MONOTONIC,
                                               cf->keepalive_after_usec, 0, client_keepalive_cb, c) < 0)
                        return; /* no keepalives: the client waits in silence */
        } else
                (void)sd_event_source_set_time_relative(c->x->keepalive, cf->keepalive_after_usec);
        (void)sd_event_source_set_enabled(c->x->keepalive, SD_EVENT_ONESHOT);
}

static void client_engine_ready(HostWaiter *w, int status, const char *message) {
        Client *c = container_of(w, Exchange, waiter)->client;

        /* on success the comments go on while the engine's router loads the model */
        if (status != 0) {
                (void)sd_event_source_set_enabled(c->x->keepalive, SD_EVENT_OFF);
                client_respond_host_error(c, status, message);
        } else {
                metrics_wait(manager_metrics(c->manager), c->x->host->name,
                             now_usec(CLOCK_MONOTONIC) - c->x->start);
                client_send_upstream(c);
        }
        if (client_flush(c) < 0) {
                client_free(c);
                return;
        }
        client_process(c);
}

/* [Access]: who the client is. false: answered already (401). */
static bool client_admit(Client *c) {
        HttpRequest *r = &c->parser.req;
        Span auth = http_request_header(r, "Authorization"), xkey = http_request_header(r, "X-Api-Key");
        _cleanup_free_ char *key = NULL;
        AccessDenial d;

        if (auth.p && auth.n > 7 && strncasecmp(auth.p, "Bearer ", 7) == 0)
                key = strndup(auth.p + 7, auth.n - 7);
        else if (xkey.p)
                key = strndup(xkey.p, xkey.n);
        if (access_identify(manager_config(c->manager), key, c->peer, &c->x->caller, &d) < 0) {
                client_respond_error(c, d.status, d.code, d.message, "WWW-Authenticate: Bearer\r\n");
                c->x->caller.admitted = false;
                return false;
        }
        return true;
}

/* What modelgate answers itself, for anyone: no admission. */
static bool request_is_open(const HttpRequest *r, Span path) {
        return (r->method == HTTP_GET || r->method == HTTP_HEAD) &&
               (span_eq(path, "/") || span_eq(path, "/health") || span_eq(path, "/metrics"));
}

/* The body limit of the caller: its tier's MaxBodySize=, or AnonymousMaxBodySize=; 0: MaxBodySize=. */
static uint64_t caller_body_limit(const Client *c) {
        const AccessConf *a = &manager_config(c->manager)->access;
        return c->x->caller.tier ? c->x->caller.tier->max_body_size : a->anonymous_max_body_size;
}

static void client_refuse_body(Client *c) {
        char msg[192];
        snprintf(msg, sizeof(msg), "request body is larger than %s allows (%s %llu bytes)",
                 c->x->caller.tier ? "this key's tier" : "this proxy for clients without a key",
                 c->x->caller.tier ? "MaxBodySize=" : "AnonymousMaxBodySize=",
                 (unsigned long long)caller_body_limit(c));
        client_respond_error(c, 413, "request_too_large", msg, NULL);
}

/* [Access] on the head of a request whose body is still to come: who asks is known before anything of the
 * body is read, so that a client without a (good) key cannot make modelgate hold its body. false: it was
 * answered (401, 413), and the connection closes without reading the body. */
static bool client_admit_head(Client *c) {
        HttpRequest *r = &c->parser.req;
        Span path = url_path(http_request_url(r));
        bool open = request_is_open(r, path), close = c->close_after_response;

        if (!open && !manager_config(c->manager)->access.enabled)
                return true;
        /* an answer on the head is the request's answer: its access line names it, and the body that
         * follows is not read (the connection closes) */
        c->x->start = now_usec(CLOCK_MONOTONIC);
        c->x->method = strdup(llhttp_method_name(r->method));
        c->x->path = span_dup(path);
        c->x->api = api_kind_for_path(path);
        c->close_after_response = true;
        if (open) {
                /* what modelgate answers itself reads no body: none is held for it */
                if (http_parser_limit_body(&c->parser, 0) < 0) {
                        client_respond_error(c, 413, "request_too_large", "this request takes no body",
                                             NULL);
                        return false;
                }
        } else {
                if (!client_admit(c))
                        return false;
                uint64_t limit = caller_body_limit(c);
                if (limit > 0 && http_parser_limit_body(&c->parser, limit) < 0) {
                        client_refuse_body(c);
                        return false;
                }
        }
        /* admitted: the request is dispatched when its body is in */
        c->x->method = mfree(c->x->method);
        c->x->path = mfree(c->x->path);
        c->close_after_response = close;
        return true;
}

/* Finds the model, the host and the key, rewrites, and sends the request on. */
static void client_dispatch(Client *c) {
        HttpRequest *r = &c->parser.req;
        Span url = http_request_url(r), path = url_path(url), span = {}, qspan = {};
        _cleanup_free_ char *model = NULL, *qmodel = NULL, *quoted = NULL, *quoted_body = NULL,
                            *new_url = NULL;
        const char *key, *body = buffer_peek(&r->body);
        size_t body_len = buffer_size(&r->body), url_len = url.n;
        bool in_body = false;
        char msg[512];
        int k;

        c->x->start = now_usec(CLOCK_MONOTONIC);
        c->x->method = strdup(llhttp_method_name(r->method));
        c->x->path = span_dup(path);
        c->x->user_agent = span_dup(http_request_header(r, "User-Agent"));
        c->x->api = api_kind_for_path(path);
        c->x->head = r->method == HTTP_HEAD;
        c->x->http10 = r->http_major == 1 && r->http_minor == 0;
        if (!r->keep_alive || manager_stopping(c->manager))
                c->close_after_response = true;

        if (url.n == 0 || url.p[0] != '/')
                return client_respond_error(
                        c, 400, "invalid_request",
                        "the request target must be a path (modelgate is not a forward proxy)", NULL);

        bool get = r->method == HTTP_GET || r->method == HTTP_HEAD;
        if (manager_refusal(c->manager))
                return client_respond_refusal(c, get && span_eq(path, "/health"));
        if (get && span_eq(path, "/")) {
                /* clients (Claude Code among them) probe the root before their first request */
                static const char root[] = "{\"name\":\"modelgate\",\"version\":\"" MODELGATE_VERSION
                                           "\",\"models\":\"/v1/models\",\"health\":\"/health\"}";
                return client_respond(c, 200, "application/json", root, sizeof(root) - 1, NULL);
        }
        if (get && span_eq(path, "/health"))
                return client_respond_health(c, query_flag(url, "strict"));
        if (get && span_eq(path, "/metrics"))
                return client_respond_metrics(c);
        if (manager_config(c->manager)->access.enabled) {
                if (!c->x->caller.admitted && !client_admit(c))
                        return;
                uint64_t limit = caller_body_limit(c);
                if (limit > 0 && buffer_size(&r->body) > limit)
                        return client_refuse_body(c);
        }
        /* a subscriber holds a connection for good: with [Access], only an admitted one */
        if (get && span_eq(path, "/models/sse"))
                return client_start_feed(c);
        if (get && (span_eq(path, "/models") || span_eq(path, "/v1/models"))) {
                k = models_merge_start(c->manager, client_models_done, c, &c->x->merge);
                if (k < 0)
                        client_respond_error(c, 500, NULL, "out of memory", NULL);
                return;
        }

        if (body_len > 0) {
                k = json_find_model(body, body_len, &span, &model, &c->x->streaming);
                if (k == 0)
                        in_body = true;
                else if (k == -EBADMSG)
                        return client_respond_error(
                                c, 400, "invalid_json",
                                "the request body is not valid JSON (or not a JSON object)", NULL);
                else if (k == -EMEDIUMTYPE)
                        return client_respond_error(c, 400, "invalid_model",
                                                    "\"model\" in the request body must be a string", NULL);
                else if (k == -ENOTUNIQ)
                        return client_respond_error(c, 400, "invalid_model",
                                                    "\"model\" appears more than once in the request body",
                                                    NULL);
                else if (k != -ENOENT)
                        return client_respond_error(c, 500, NULL, "out of memory", NULL);
        }
        /* a model in the query too: the host reads both, so both must name the same one (else a tier's
         * Models= would be checked against one and the host would load the other) */
        k = query_find_model(url, &qspan, &qmodel);
        bool in_query = k == 0;
        if (k == -ENOENT && !in_body)
                return client_respond_error(
                        c, 400, "missing_model",
                        body_len > 0 ? "the request body has no \"model\"; name one as \"<host>-<key>\" "
                                       "(GET /v1/models lists them)"
                                     : "the request names no model; send \"model\" in a JSON body or "
                                       "?model=<host>-<key> in the query (GET /v1/models lists them)",
                        NULL);
        if (k == -EBADMSG)
                return client_respond_error(c, 400, "invalid_model",
                                            "the query has a bad %-escape in its model parameter or in a "
                                            "parameter name",
                                            NULL);
        if (k == -ENOTUNIQ)
                return client_respond_error(c, 400, "invalid_model", "the query names model more than once",
                                            NULL);
        if (k < 0 && k != -ENOENT)
                return client_respond_error(c, 500, NULL, "out of memory", NULL);
        if (in_body && in_query && !streq(model, qmodel))
                return client_respond_error(c, 400, "invalid_model",
                                            "the request names one model in its body and another in its "
                                            "query; name it once",
                                            NULL);
        if (!in_body) {
                model = TAKE_PTR(qmodel);
                span = qspan;
        }
        /* control characters would go into log lines and the host's request as they are */
        for (const char *q = model; *q; q++)
                if ((unsigned char)*q < 0x20 || *q == 0x7f)
                        return client_respond_error(c, 400, "invalid_model",
                                                    "the model name holds a control character", NULL);
        c->x->model = strdup(model);

        /* a tier's Models= limits routing as much as the list */
        if (c->x->caller.admitted && !access_model_allowed(&c->x->caller, model)) {
                snprintf(msg, sizeof(msg),
                         "this key (tier '%s') may not use model '%s'; GET /v1/models lists "
                         "the ones it may",
                         c->x->caller.tier->name, c->x->model);
                return client_respond_error(c, 403, "model_not_allowed", msg, NULL);
        }
        c->x->config = config_ref(manager_config(c->manager));
        c->x->host = route_find_host(c->x->config, model, &key);
        if (!c->x->host) {
                char m2[160];
                log_escape(m2, sizeof(m2), model, strlen(model));
                snprintf(msg, sizeof(msg),
                         "model '%s' does not start with a configured host name and '-'; GET /v1/models "
                         "lists "
                         "the models this proxy serves",
                         m2);
                return client_respond_error(c, 404, "model_not_found", msg, NULL);
        }
        /* counted once it routes: a mistyped model name costs nobody a request of the day */
        if (c->x->caller.admitted) {
                AccessDenial d;
                Access *access = manager_access(c->manager);
                k = access ? access_count(access, manager_config(c->manager), &c->x->caller, c->peer, &d)
                           : -ENOMEM;
                if (k == -EDQUOT) {
                        char h[96];
                        snprintf(h, sizeof(h), "Retry-After: %llu\r\n", (unsigned long long)d.retry_after);
                        return client_respond_error(c, 429, d.code, d.message, h);
                }
                if (k < 0)
                        return client_respond_error(c, 500, NULL, "out of memory", NULL);
        }

        if (in_body) {
                quoted_body = json_quote(key);
                if (!quoted_body)
                        return client_respond_error(c, 500, NULL, "out of memory", NULL);
        } else
                span = (Span){};
        if (in_query) {
                quoted = query_escape(key);
                new_url = quoted ? span_replace(url, qspan, quoted, &url_len) : NULL;
                url = (Span){new_url, url_len};
                if (!new_url)
                        return client_respond_error(c, 500, NULL, "out of memory", NULL);
        }

        Host *host = manager_host(c->manager, c->x->host);
        ssize_t engine = -1;
        c->x->target = &c->x->host->url;
        if (host_has_engines(host)) {
                engine = host_find_engine(host, key);
                if (engine < 0) {
                        char k2[160];
                        log_escape(k2, sizeof(k2), key, strlen(key));
                        snprintf(msg, sizeof(msg),
                                 "no engine of host '%s' serves '%s': no [Engine] of that host lists it in "
                                 "Models=, and no engine runs there now; GET /v1/models lists the models "
                                 "this "
                                 "proxy serves",
                                 c->x->host->name, k2);
                        return client_respond_error(c, 404, "model_not_found", msg, NULL);
                }
                c->x->target = host_engine(host, (size_t)engine)->url;
                c->x->engine_conf = host_engine(host, (size_t)engine)->conf;
                c->x->engine_name = c->x->engine_conf->name;
                /* the fallback spends the operator's cloud key: inference only, on a path of modelgate's
                 * own, and only for a model in the body (the only place it can be renamed) */
                c->x->fb_path = fallback_path(r->method, path);
                c->x->fallback = c->x->fb_path && in_body
                                         ? config_find_fallback(c->x->config, c->x->engine_conf->fallback)
                                         : NULL;
                if (c->x->fallback) {
                        c->x->awaiting_first_token = c->x->streaming && !c->x->head;
                }
                if (c->x->streaming && c->x->engine_conf->first_token_budget_usec != 0)
                        c->x->awaiting_first_token = !c->x->head;
        } else if (!span_startswith(path, "/models") && catalog_lists(host_catalog(host), key) == 0) {
                /* SPEC §4: a key the host does not list (its list is known) is 404; /models/... calls
                 * (a download of a new model, say) are the host's to judge */
                char k2[160];
                log_escape(k2, sizeof(k2), key, strlen(key));
                snprintf(msg, sizeof(msg),
                         "host '%s' does not list a model '%s'; GET /v1/models lists the models this proxy "
                         "serves",
                         c->x->host->name, k2);
                return client_respond_error(c, 404, "model_not_found", msg, NULL);
        }
        if (build_upstream_request(c, c->x->target, url, (Span){body ?: "", body ? body_len : 0}, span,
                                   quoted_body, &c->x->pending) < 0)
                return client_respond_error(c, 500, NULL, "out of memory", NULL);
        /* the request's own copy of the body is not needed any more, unless a fallback may need it */
        if (!c->x->fallback)
                buffer_done(&r->body);
        if (engine >= 0) {
                HostRefusal refusal;
                k = host_acquire(host, (size_t)engine, &c->x->waiter, client_engine_ready, c->x->model,
                                 &refusal);
                if (k < 0)
                        return client_respond_host_error(c, refusal.status, refusal.message);
                if (k > 0) {
                        client_wait_for_engine(c);
                        return; /* client_engine_ready() goes on */
                }
                metrics_wait(manager_metrics(c->manager), c->x->host->name, 0);
                client_wait_for_engine(c); /* its router may still have to load the model */
        }
        client_send_upstream(c);
}

static void client_parse_error(Client *c) {
        int status = c->parser.error_status;
        const char *msg = c->parser.error_message ?: "malformed request";
        char m[256];

        if (!c->x->method) {
                c->x->start = now_usec(CLOCK_MONOTONIC);
                c->x->method = strdup("-");
        }
        snprintf(m, sizeof(m), "%s", msg);
        c->close_after_response = true;
        c->x->api = API_OPENAI;
        client_respond_error(c, status, status == 400 ? "invalid_request" : NULL, m, NULL);
        c->state = CLIENT_CLOSING;
}

/* The one loop over the input: parses requests and starts their answers, one at a time. */
static void client_process(Client *c) {
        if (c->in_process)
                return;
        c->in_process = true;

        for (;;) {
                if (c->read_eof && c->state == CLIENT_RESPONDING && !c->x->response_complete &&
                    !c->eof_probed) {
                        /* The end of the client's input while its answer is produced: a half-close (it
                         * waits for the answer) or a close (it went away, and must not keep a GPU busy or
                         * a switch waiting). They look the same until something is written: a closed
                         * socket answers it with a reset (EPOLLERR/EPOLLHUP, then the cut). Before the
                         * answer's head, an interim "100 Continue" is that probe (RFC 9110 §15.2: a
                         * client takes 1xx at any time); after it, the answer's next bytes are. HTTP/1.0
                         * has no 1xx, and a feed no end: those are cut at once, as before. */
                        c->eof_probed = true;
                        if (c->feed || (c->x->http10 && !c->x->head_sent && !c->x->early)) {
                                client_log_access(c, c->feed ? "feed" : "cut=client");
                                client_free(c);
                                return;
                        }
                        if (!c->x->head_sent && !c->x->early)
                                (void)buffer_append_str(&c->out, "HTTP/1.1 100 Continue\r\n\r\n");
                }
                if (c->state == CLIENT_RESPONDING) {
                        if (!c->x->response_complete || !buffer_is_empty(&c->out))
                                break;
                        if (!request_reset(c)) {
                                log_oom();
                                client_free(c);
                                return;
                        }
                        if (c->close_after_response || (c->read_eof && buffer_is_empty(&c->in))) {
                                c->state = CLIENT_CLOSING;
                                continue;
                        }
                        http_parser_next(&c->parser);
                        c->state = CLIENT_WAITING;
                        client_set_timer(c, manager_config(c->manager)->idle_timeout_usec);
                }
                if (c->state == CLIENT_CLOSING) {
                        if (buffer_is_empty(&c->out)) {
                                client_linger(c);
                                return;
                        }
                        break;
                }
                if (c->state == CLIENT_LINGERING)
                        break;
                if (buffer_is_empty(&c->in)) {
                        if (c->read_eof && (c->state == CLIENT_WAITING || c->state == CLIENT_READING)) {
                                if (c->state == CLIENT_READING)
                                        log_debug("Client %s closed in the middle of a request", c->peer);
                                client_free(c);
                                return;
                        }
                        break;
                }

                size_t consumed = 0;
                int r = http_parser_feed(&c->parser, buffer_peek(&c->in), buffer_size(&c->in), &consumed);
                buffer_consume(&c->in, consumed);
                if (r < 0) {
                        client_parse_error(c);
                        continue;
                }
                if (c->state == CLIENT_WAITING && c->parser.started) {
                        c->state = CLIENT_READING;
                        client_set_timer(c, manager_config(c->manager)->header_timeout_usec);
                }
                if (r == HTTP_PARSE_HEADERS) {
                        if (!client_admit_head(c)) {
                                c->state = CLIENT_CLOSING;
                                continue;
                        }
                        /* the body follows; a client that waits for "100 Continue" gets it now */
                        if (c->parser.req.expect_continue && c->parser.req.has_body &&
                            c->parser.req.http_minor >= 1)
                                (void)buffer_append_str(&c->out, "HTTP/1.1 100 Continue\r\n\r\n");
                        client_set_timer(c, manager_config(c->manager)->idle_timeout_usec);
                        continue;
                }
                if (r == HTTP_PARSE_DONE) {
                        c->state = CLIENT_RESPONDING;
                        client_set_timer(c, USEC_INFINITY);
                        client_dispatch(c);
                        if (client_flush(c) < 0) {
                                client_free(c);
                                return;
                        }
                        continue;
                }
                break;
        }

        c->in_process = false;
        if (client_flush(c) < 0) {
                client_free(c);
                return;
        }
        /* the flush may have finished a response: close, or pick up pipelined requests */
        if (buffer_is_empty(&c->out) &&
            (c->state == CLIENT_CLOSING || (c->state == CLIENT_RESPONDING && c->x->response_complete)))
                client_process(c);
}

#define CLIENT_LINGER_USEC (2 * USEC_PER_SEC)

/* The end of a connection we close: at once when nothing of the client's is left unread, else after
 * shutting our side and draining what still comes, for at most CLIENT_LINGER_USEC. */
static void client_linger(Client *c) {
        int unread = 0;

        if (buffer_is_empty(&c->in) && (ioctl(c->fd, FIONREAD, &unread) < 0 || unread == 0) &&
            c->parser.error_status == 0) {
                client_free(c);
                return;
        }
        if (shutdown(c->fd, SHUT_WR) < 0) {
                client_free(c);
                return;
        }
        c->state = CLIENT_LINGERING;
        buffer_clear(&c->in);
        client_set_timer(c, CLIENT_LINGER_USEC);
        (void)sd_event_source_set_io_events(c->io, EPOLLIN | EPOLLRDHUP | EPOLLET);
}

/* The socket is edge-triggered: read until it is empty (or the input buffer is full; then EPOLLIN is
 * dropped, and taking it back re-arms the edge). */
static int client_read(Client *c) {
        char buf[CLIENT_READ_SIZE];
        bool got = false;

        while (c->state == CLIENT_LINGERING || buffer_size(&c->in) < CLIENT_READ_SIZE) {
                ssize_t k = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN)
                                break;
                        return -errno;
                }
                if (k == 0) {
                        if (c->state == CLIENT_LINGERING)
                                return -ECONNRESET;
                        /* a half-close (or a close) after whole requests: they are answered first */
                        c->read_eof = true;
                        return 1;
                }
                got = true;
                if (c->state == CLIENT_LINGERING)
                        continue; /* dropped */
                if (buffer_append(&c->in, buf, (size_t)k) < 0)
                        return -ENOMEM;
        }
        if (got && c->state == CLIENT_READING && c->parser.headers_complete)
                client_set_timer(
                        c, manager_config(c->manager)->idle_timeout_usec); /* the body makes progress */
        return got;
}

static int client_io_cb(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        Client *c = userdata;
        int r;

        if (c->read_eof)
                r = revents & (EPOLLHUP | EPOLLERR) ? -ECONNRESET : 0;
        else if (revents & EPOLLIN)
                r = client_read(c);
        else if (revents & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))
                r = -ECONNRESET; /* not reading (the input buffer is full): the end shows here */
        else
                r = 0;
        if (r < 0) {
                /* EOF between requests is the normal end of a keep-alive connection */
                if (c->state == CLIENT_READING && r == -ECONNRESET)
                        log_debug("Client %s closed in the middle of a request", c->peer);
                /* the client went away while its answer was produced */
                if (c->state == CLIENT_RESPONDING && !c->x->response_complete) {
                        if (c->feed)
                                client_log_access(c, "feed");
                        else if (c->x->model || c->x->method)
                                client_log_access(c, "cut=client");
                }
                client_free(c);
                return 0;
        }
        if (revents & EPOLLOUT) {
                if (client_flush(c) < 0) {
                        client_free(c);
                        return 0;
                }
        }
        client_process(c);
        return 0;
}

static int client_timer_cb(sd_event_source *s, uint64_t usec, void *userdata) {
        Client *c = userdata;

        switch (c->state) {
        case CLIENT_READING:
                c->close_after_response = true;
                c->x->start = now_usec(CLOCK_MONOTONIC);
                c->x->method = c->x->method ?: strdup("-");
                client_respond_error(c, 408, "request_timeout",
                                     c->parser.headers_complete
                                             ? "the client sent its request body too slowly"
                                             : "the client did not send its request headers in time",
                                     NULL);
                c->state = CLIENT_CLOSING;
                if (client_flush(c) < 0) {
                        client_free(c);
                        return 0;
                }
                client_process(c);
                return 0;
        case CLIENT_RESPONDING:
                log_info("Client %s does not read its answer, dropping the connection", c->peer);
                if (!c->x->response_complete)
                        client_log_access(c, "cut=slow-client");
                client_free(c);
                return 0;
        default:
                client_free(c);
                return 0;
        }
}

static void client_stop(Client *c) {
        c->close_after_response = true;
        if (c->feed) {
                /* a feed has no end of its own: it ends cleanly with the daemon */
                feed_hub_unsubscribe(manager_feed_hub(c->manager), &c->feed_sub);
                c->feed = false;
                if (c->x->chunked)
                        (void)buffer_append_str(&c->out, "0\r\n\r\n");
                client_response_complete(c, "feed");
                c->state = CLIENT_CLOSING;
                if (client_flush(c) < 0) {
                        client_free(c);
                        return;
                }
                client_process(c);
                return;
        }
        /* an idle keep-alive connection goes now; a fresh one (accepted as the stop began) has its request
         * on the way: it is answered, then closed */
        if (c->state == CLIENT_WAITING && buffer_is_empty(&c->out) && buffer_is_empty(&c->in) &&
            c->answered_one)
                client_free(c);
}

int client_new(ClientSet *set, int fd, const struct sockaddr *peer, socklen_t peer_len) {
        Manager *m = set->manager;
        Config *config = manager_config(m);
        sd_event *event = manager_event(m);
        Client *c;
        int r;

        c = calloc(1, sizeof(Client));
        if (c)
                c->x = exchange_new(c);
        if (!c || !c->x) {
                free(c);
                safe_close(fd);
                return -ENOMEM;
        }
        c->manager = m;
        c->set = set;
        c->fd = fd;
        http_parser_init(&c->parser, config->max_header_size, config->max_body_size);
        if (peer->sa_family == AF_INET) {
                const struct sockaddr_in *a = (const struct sockaddr_in *)peer;
                inet_ntop(AF_INET, &a->sin_addr, c->peer, sizeof(c->peer));
        } else if (peer->sa_family == AF_INET6) {
                const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)peer;
                inet_ntop(AF_INET6, &a->sin6_addr, c->peer, sizeof(c->peer));
        } else
                snprintf(c->peer, sizeof(c->peer), "local");
        (void)peer_len;
        char address[INET6_ADDRSTRLEN + 8];
        snprintf(c->address, sizeof(c->address), "%s", access_client_address(c->peer, address));

        LIST_PREPEND(clients, set->clients, c);
        set->n_clients++;
        if (set->cb && set->cb->changed)
                set->cb->changed(set->userdata);
        uint64_t *counted = count_map_get(&set->by_address, c->address, true);
        uint64_t same = counted ? ++*counted : 0;
        c->address_counted = counted;

        r = sd_event_add_io(event, &c->io, fd, EPOLLIN | EPOLLRDHUP | EPOLLET, client_io_cb, c);
        if (r >= 0)
                r = sd_event_add_time_relative(event, &c->timer, CLOCK_MONOTONIC, config->idle_timeout_usec,
                                               0, client_timer_cb, c);
        if (r < 0) {
                client_free(c);
                return r;
        }
        if (same == 0 || same > config->max_connections_per_address) {
                /* one address cannot take every connection slot: told at once, before anything is read
                 * (out of memory to count it, it is refused the same way) */
                char msg[160];
                snprintf(msg, sizeof(msg),
                         "this address has %llu connections open to modelgate, more than "
                         "MaxConnectionsPerAddress=%llu; close some and retry",
                         (unsigned long long)same, (unsigned long long)config->max_connections_per_address);
                c->x->start = now_usec(CLOCK_MONOTONIC);
                c->x->method = strdup("-");
                c->close_after_response = true;
                c->state = CLIENT_RESPONDING;
                c->x->api = API_OPENAI;
                client_respond_error(c, 503, "too_many_connections", msg, "Retry-After: 5\r\n");
                c->state = CLIENT_CLOSING;
                if (client_flush(c) < 0) {
                        client_free(c);
                        return 0;
                }
                client_process(c);
        }
        return 0;
}

int client_set_new(Manager *m, const ClientSetCallbacks *cb, void *userdata, ClientSet **ret) {
        ClientSet *set = calloc(1, sizeof(ClientSet));

        if (!set)
                return -ENOMEM;
        set->manager = m;
        set->cb = cb;
        set->userdata = userdata;
        *ret = set;
        return 0;
}

ClientSet *client_set_free(ClientSet *set) {
        if (!set)
                return NULL;
        set->cb = NULL; /* nobody to tell any more */
        while (set->clients)
                client_free(set->clients);
        count_map_free(set->by_address);
        return mfree(set);
}

size_t client_set_count(const ClientSet *set) {
        return set->n_clients;
}

void client_set_stop(ClientSet *set) {
        LIST_FOREACH_SAFE (clients, c, n, set->clients)
                client_stop(c);
}

void client_set_catalogs_ready(ClientSet *set) {
        LIST_FOREACH (clients, c, set->clients)
                models_merge_catalogs_ready(c->x->merge);
}
