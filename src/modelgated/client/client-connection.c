/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The client connection: reading, flushing, lingering after an error, its timers, pipelined requests
 * taken one at a time (the states are in client-internal.h), and the ClientSet that counts connections
 * per address. What a request is answered with is decided in the other client-*.c files. */

#include "modelgated/client/client-internal.h"
#include "shared/random-util.h"

static void client_io_cb(SocketWatch *w, int fd, uint32_t revents, void *userdata);
static int client_timer_cb(sd_event_source *s, uint64_t usec, void *userdata);
static void client_linger(Client *c);
static int client_read(Client *c);
static void client_read_failed(Client *c, int error);

/* The end of a request: the next one starts from an empty Request. */
static void request_reset(Client *c) {
        request_done(c->req);
        c->eof_probed = false;
        c->body_deadline = USEC_INFINITY;
        buffer_clear(&c->held_head);
}

static bool client_is_idle(const Client *c) {
        return c->idle_prev || c->set->idle == c;
}

/* A connection holds no admitted request (see ClientSet.idle). */
static void client_idle_enter(Client *c) {
        ClientSet *set = c->set;

        if (client_is_idle(c))
                return;
        LIST_PREPEND(idle, set->idle, c);
        if (!set->idle_oldest)
                set->idle_oldest = c;
        if (set->n_clients >= manager_config(c->manager)->max_connections && set->cb && set->cb->room)
                set->cb->room(set->userdata);
}

static void client_idle_leave(Client *c) {
        ClientSet *set = c->set;

        if (!client_is_idle(c))
                return;
        if (set->idle_oldest == c)
                set->idle_oldest = c->idle_prev;
        LIST_REMOVE(idle, set->idle, c);
}

/* The memory, once the connection is closed and the last pin is gone */
static void client_free(Client *c) {
        assert(client_is_closed(c));
        http_parser_done(&c->parser);
        buffer_done(&c->in);
        buffer_done(&c->out);
        blob_unref(c->tail);
        buffer_done(&c->held_head);
        buffer_done(&c->scratch);
        free(c);
}

Client *client_ref(Client *c) {
        assert(c);
        assert(c->n_ref > 0);
        c->n_ref++;
        return c;
}

Client *client_unref(Client *c) {
        if (!c)
                return NULL;
        assert(c->n_ref > 0);
        if (--c->n_ref == 0)
                client_free(c);
        return NULL;
}

void client_close(Client *c) {
        assert(c);
        if (client_is_closed(c))
                return;
        client_idle_leave(c);
        c->state = CLIENT_CLOSED;
        if (c->feed) {
                feed_hub_unsubscribe(c->activity_feed ? activity_hub(manager_activity(c->manager))
                                                      : manager_feed_hub(c->manager),
                                     &c->feed_sub);
                c->feed = c->activity_feed = false;
        }
        client_stream_drain(c); /* rule:resumable-streams: a session's stream is read on */
        request_done(c->req);   /* its upstream, its host wait, its budget and keepalive */
        ClientSet *set = c->set;
        LIST_REMOVE(clients, set->clients, c);
        set->n_clients--;
        uint64_t *same = c->address_counted ? count_map_get(&set->by_address, c->address, false) : NULL;
        if (same && --*same == 0)
                count_map_remove(set->by_address, c->address);
        c->address_counted = false;
        c->io = socket_watch_free(c->io);
        lazy_timer_done(&c->timer);
        c->fd = safe_close(c->fd);
        if (set->cb && set->cb->changed)
                set->cb->changed(set->userdata);
        client_unref(c); /* the set's */
}

/* rel from now, USEC_INFINITY: none. Each request moves it several times (its header timeout, none while
 * it is answered, the idle timeout after it): a lazy timer, which touches sd-event only for a sooner
 * deadline. While a body is read, each read pushes the idle timeout back, but never past the body's own
 * deadline: else a byte per IdleTimeoutSec= would hold the connection for as long as its length says. */
static void client_set_timer(Client *c, usec_t rel) {
        usec_t when = rel == USEC_INFINITY ? USEC_INFINITY : client_now(c) + rel;

        if (c->state == CLIENT_READING)
                when = MIN(when, c->body_deadline);
        (void)lazy_timer_set(&c->timer, when);
}

/* Whether the socket is read now: input is read while an answer is produced too (up to
 * CLIENT_READ_SIZE, for pipelined requests); a connection that closes reads nothing more, one that
 * lingers reads to drop */
static bool client_may_read(const Client *c) {
        if (c->state == CLIENT_LINGERING)
                return true;
        return c->state != CLIENT_CLOSING && c->state != CLIENT_CLOSED &&
               buffer_size(&c->in) < CLIENT_READ_SIZE;
}

/* The client went away while its answer was produced: its line says so (499, cut=client) */
static void client_log_left(Client *c) {
        if (c->state == CLIENT_RESPONDING && !c->req->answer.complete) {
                if (c->feed)
                        client_log_access(c, "feed");
                else if (c->req->attempt.mode == MODE_SSE && c->req->attempt.sse.saw_done &&
                         buffer_is_empty(&c->out))
                        /* it had the whole stream, its end event written out, and left before the
                         * last chunk: a complete answer (Codex closes at response.completed) */
                        client_log_access(c, NULL);
                else if (c->req->model || c->req->method != REQUEST_NO_METHOD)
                        client_log_access(c, "cut=client");
        }
}

void client_flush(Client *c) {
        bool progress = false;

        assert(c);
        if (client_is_closed(c))
                return;
        /* after an EAGAIN the socket is full: the EPOLLOUT edge that comes when it drains goes on */
        for (;;) {
                if (buffer_is_empty(&c->out) && c->tail)
                        client_refill_out(c);
                if (buffer_is_empty(&c->out) || c->out_blocked)
                        break;
                ssize_t k =
                        send(c->fd, buffer_peek(&c->out), buffer_size(&c->out), MSG_NOSIGNAL | MSG_DONTWAIT);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno != EAGAIN) {
                                /* a reset or a broken pipe: found by a send before any read saw it */
                                client_log_left(c);
                                client_close(c);
                                return;
                        }
                        c->out_blocked = true;
                        break;
                }
                buffer_consume(&c->out, (size_t)k);
                progress = true;
        }
        if (buffer_is_empty(&c->out)) {
                if (c->req->attempt.upstream)
                        upstream_set_reading(c->req->attempt.upstream, true);
                /* a client whose input ended is probed again after a silence (client_probe_eof()) */
                if (c->state == CLIENT_RESPONDING && !c->req->answer.complete)
                        client_set_timer(c, c->read_eof ? CLIENT_PROBE_USEC : USEC_INFINITY);
        } else if (progress || c->state == CLIENT_RESPONDING || c->state == CLIENT_CLOSING)
                /* a client that stops reading is dropped after IdleTimeoutSec without progress (a last
                 * answer before a close included: every state has a deadline) */
                client_set_timer(c, manager_config(c->manager)->idle_timeout_usec);
        /* rule:bytes-flow: a client that does not read stops the reads from its host */
        if (!buffer_is_empty(&c->out) && buffer_size(&c->out) > CLIENT_OUT_HIGH && c->req->attempt.upstream)
                upstream_set_reading(c->req->attempt.upstream, false);
}

static void client_parse_error(Client *c) {
        client_idle_leave(c); /* its answer goes out before the connection may be closed to make room */
        int status = c->parser.error_status;
        const char *msg = c->parser.error_message ?: "malformed request";
        char m[256];

        if (c->req->method == REQUEST_NO_METHOD) {
                c->req->start = client_now(c);
                c->req->method = REQUEST_METHOD_UNPARSED;
        }
        snprintf(m, sizeof(m), "%s", msg);
        c->close_after_response = true;
        c->req->api = API_OPENAI;
        client_answer_message(c, status == 400 ? ANSWER_BAD_REQUEST : ANSWER_MALFORMED_REQUEST, status,
                              /* retry_after= */ 0, m);
        c->state = CLIENT_CLOSING;
}

/* What one turn of client_process() leaves to the loop */
typedef enum Step {
        STEP_AGAIN, /* the state moved on: look again */
        STEP_PARSE, /* input waits for the parser */
        STEP_WAIT,  /* nothing to do until the socket or the host has more (or the connection is closed) */
} Step;

/* The end of the client's input while its answer is produced: a half-close (it waits for the answer) or
 * a close (it went away, and must not keep a GPU busy or a switch waiting). They look the same until
 * something is written: a closed socket answers it with a reset (EPOLLERR/EPOLLHUP, then the cut).
 * Before the answer's head, an interim "100 Continue" is that probe (RFC 9110 §15.2: a client takes 1xx
 * at any time); after it, in an event stream, a comment line (ignored by every SSE parser, between any two
 * lines); else the answer's next bytes. HTTP/1.0 has no 1xx, and a feed no end: those are cut at once,
 * as before (rule:client-gone). A half-close is answered by the probe, and the client may close for good
 * later, with nothing unread: its side sends nothing then, and only bytes written to it find out. So the
 * probe is written again after every CLIENT_PROBE_USEC in which nothing went out (client_timer_cb()): a
 * host that prefills in silence for minutes keeps no GPU busy for a client that left a second ago. */
static Step client_probe_eof(Client *c) {
        if (!c->read_eof || c->state != CLIENT_RESPONDING || c->req->answer.complete || c->eof_probed)
                return STEP_PARSE;
        c->eof_probed = true;
        if (c->feed || (c->req->http10 && !c->req->answer.head_sent && !c->req->answer.early)) {
                client_log_access(c, c->feed ? "feed" : "cut=client");
                client_close(c);
                return STEP_WAIT;
        }
        if (!c->req->answer.head_sent && !c->req->answer.early)
                (void)buffer_append_str(&c->out, "HTTP/1.1 100 Continue\r\n\r\n");
        else if (client_in_event_stream_line_end(c))
                /* an event stream whose host is silent (a long prefill) would write nothing for minutes:
                 * a comment line costs a reading client nothing, and a closed socket answers it */
                (void)client_frame_body(c, ":\n", 2);
        else
                c->eof_probed = false; /* its next bytes probe it; or a comment, once a line has ended */
        return STEP_PARSE;
}

/* Everything but parsing: the end of an answer, the close, and the end of the input */
static Step client_advance(Client *c) {
        if (c->state == CLIENT_RESPONDING) {
                if (!c->req->answer.complete || !buffer_is_empty(&c->out))
                        return STEP_WAIT;
                request_reset(c);
                if (c->close_after_response || (c->read_eof && buffer_is_empty(&c->in))) {
                        c->state = CLIENT_CLOSING;
                        return STEP_AGAIN;
                }
                http_parser_next(&c->parser);
                c->state = CLIENT_WAITING;
                client_set_timer(c, manager_config(c->manager)->idle_timeout_usec);
                client_idle_enter(c);
        }
        if (c->state == CLIENT_CLOSING) {
                if (!buffer_is_empty(&c->out))
                        return STEP_WAIT;
                client_linger(c);
                return STEP_WAIT;
        }
        if (c->state == CLIENT_LINGERING)
                return STEP_WAIT;
        if (buffer_is_empty(&c->in)) {
                if (c->read_eof && (c->state == CLIENT_WAITING || c->state == CLIENT_READING)) {
                        if (c->state == CLIENT_READING)
                                log_debug("Client %s closed in the middle of a request", c->peer);
                        client_close(c);
                        return STEP_WAIT;
                }
                return STEP_WAIT;
        }
        return STEP_PARSE;
}

/* Feeds what was read to the parser: a head is admitted as soon as it is complete, a whole request is
 * dispatched */
static Step client_parse(Client *c) {
        size_t consumed = 0;
        int r = http_parser_feed(&c->parser, buffer_peek(&c->in), buffer_size(&c->in), &consumed);

        buffer_consume(&c->in, consumed);
        if (r < 0) {
                client_parse_error(c);
                return STEP_AGAIN;
        }
        if (c->state == CLIENT_WAITING && c->parser.started) {
                c->state = CLIENT_READING;
                /* a new connection's first head keeps the deadline it got at accept */
                if (c->answered_one)
                        client_set_timer(c, manager_config(c->manager)->header_timeout_usec);
        }
        if (r == HTTP_PARSE_HEADERS) {
                /* admitted, or refused with an answer that must go out (as in client_parse_error()) */
                client_idle_leave(c);
                if (!client_admit_head(c)) {
                        c->state = CLIENT_CLOSING;
                        return STEP_AGAIN;
                }
                /* the body follows; a client that waits for "100 Continue" gets it now */
                if (c->parser.req.expect_continue && c->parser.req.has_body && c->parser.req.http_minor >= 1)
                        (void)buffer_append_str(&c->out, "HTTP/1.1 100 Continue\r\n\r\n");
                usec_t body = manager_config(c->manager)->body_timeout_usec;
                c->body_deadline = body == USEC_INFINITY ? USEC_INFINITY : client_now(c) + body;
                client_set_timer(c, manager_config(c->manager)->idle_timeout_usec);
                return STEP_AGAIN;
        }
        if (r == HTTP_PARSE_DONE) {
                c->state = CLIENT_RESPONDING;
                client_set_timer(c, USEC_INFINITY);
                client_idle_leave(c);
                client_dispatch(c);
                client_flush(c);
                return STEP_AGAIN;
        }
        return STEP_WAIT;
}

/* Input left unread while reading was paused has no edge of its own to come: it is read as soon as the
 * parser has made room (or the state lets reading go on) */
static Step client_resume_read(Client *c) {
        if (!c->read_pending || c->read_eof || !client_may_read(c))
                return STEP_WAIT;
        int r = client_read(c);
        if (r < 0) {
                client_read_failed(c, r);
                return STEP_WAIT;
        }
        return r > 0 ? STEP_AGAIN : STEP_WAIT;
}

/* The one loop over the input: parses requests and starts their answers, one at a time. */
void client_process(Client *c) {
        Step step = STEP_AGAIN;

        assert(c);
        if (c->in_process || client_is_closed(c))
                return;
        c->in_process = true;
        while (step == STEP_AGAIN && !client_is_closed(c)) {
                /* each step either goes on to the next (STEP_PARSE) or ends this turn */
                step = client_probe_eof(c);
                if (step == STEP_PARSE)
                        step = client_advance(c);
                if (step == STEP_PARSE)
                        step = client_parse(c);
                if (step == STEP_WAIT)
                        step = client_resume_read(c);
        }
        c->in_process = false;
        client_flush(c);
        /* the flush may have finished a response: close, or pick up pipelined requests */
        if (buffer_is_empty(&c->out) &&
            (c->state == CLIENT_CLOSING || (c->state == CLIENT_RESPONDING && c->req->answer.complete)))
                client_process(c);
}

#define CLIENT_LINGER_USEC (2 * USEC_PER_SEC)

/* The end of a connection we close: at once when nothing of the client's is left unread, else after
 * shutting our side and draining what still comes, for at most CLIENT_LINGER_USEC (rule:lingering-close). */
static void client_linger(Client *c) {
        int unread = 0;

        if (buffer_is_empty(&c->in) && (ioctl(c->fd, FIONREAD, &unread) < 0 || unread == 0) &&
            c->parser.error_status == 0) {
                client_close(c);
                return;
        }
        if (shutdown(c->fd, SHUT_WR) < 0) {
                client_close(c);
                return;
        }
        c->state = CLIENT_LINGERING;
        buffer_clear(&c->in);
        client_set_timer(c, CLIENT_LINGER_USEC);
        /* what is in the socket now came while it was not read: its edge has passed */
        if ((unread > 0 || c->read_pending) && client_read(c) < 0)
                client_close(c);
}

/* The socket is edge-triggered: it is read until a read comes back short (it was empty then, and what
 * comes later raises an edge of its own: no read that ends in EAGAIN), or until reading must stop (the
 * input buffer is full; read_pending then tells that input may be left), or until this turn of the loop
 * has had CLIENT_READ_BUDGET of it: a client that sends as fast as we parse (a long upload, pipelined
 * requests) then waits for the next turn, behind every other socket that is ready, and the re-armed edge
 * brings it back. The budget is per turn, not per call: parsing makes room and reads again
 * (client_resume_read()) from the same dispatch. Once the client's FIN was seen, its edge has come and
 * gone: the socket is read up to the end. */
static int client_read(Client *c) {
        char buf[CLIENT_READ_SIZE];
        bool got = false;
        uint64_t turn = 0;

        (void)sd_event_get_iteration(manager_event(c->manager), &turn);
        if (turn != c->read_turn) {
                c->read_turn = turn;
                c->read_in_turn = 0;
        }
        c->read_pending = false;
        for (;;) {
                if (!client_may_read(c)) {
                        c->read_pending = true;
                        break;
                }
                if (c->read_in_turn >= CLIENT_READ_BUDGET) {
                        c->read_pending = true;
                        (void)socket_watch_rearm(c->io);
                        break;
                }
                size_t want = MIN(sizeof(buf), CLIENT_READ_BUDGET - c->read_in_turn);
                ssize_t k = recv(c->fd, buf, want, MSG_DONTWAIT);
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
                        /* a half-close (or a close) after whole requests: they are answered first
                         * (rule:half-close) */
                        c->read_eof = true;
                        return 1;
                }
                got = true;
                c->read_in_turn += (size_t)k;
                /* lingering, it is dropped */
                if (c->state != CLIENT_LINGERING && buffer_append(&c->in, buf, (size_t)k) < 0)
                        return -ENOMEM;
                if ((size_t)k < want && !c->peer_shut)
                        break;
        }
        if (got && c->state == CLIENT_READING && c->parser.headers_complete)
                client_set_timer(
                        c, manager_config(c->manager)->idle_timeout_usec); /* the body makes progress */
        return got;
}

/* The client's socket failed, or it went away: the connection ends */
static void client_read_failed(Client *c, int error) {
        /* EOF between requests is the normal end of a keep-alive connection */
        if (c->state == CLIENT_READING && error == -ECONNRESET)
                log_debug("Client %s closed in the middle of a request", c->peer);
        client_log_left(c);
        client_close(c);
}

static void client_io_cb(SocketWatch *w, int fd, uint32_t revents, void *userdata) {
        _cleanup_(client_unrefp) Client *c = client_ref(userdata);
        int r = 0;

        if (revents & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))
                c->peer_shut = true;
        if (c->read_eof || !(revents & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)))
                r = 0; /* its input has ended, or the socket only became writable */
        else if (client_may_read(c))
                r = client_read(c);
        else if (revents & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))
                r = -ECONNRESET; /* not reading (the input buffer is full): the end shows here */
        else
                c->read_pending = true; /* read when reading resumes */
        /* after the end of its input, a socket shut both ways is a client gone (a reset): whatever is
         * still answered has nowhere to go. This edge may be the one that brought the end. */
        if (r >= 0 && c->read_eof && (revents & (EPOLLHUP | EPOLLERR)))
                r = -ECONNRESET;
        if (r < 0) {
                client_read_failed(c, r);
                return;
        }
        if ((revents & EPOLLOUT) && c->out_blocked) {
                c->out_blocked = false;
                client_flush(c);
        }
        client_process(c);
}

static int client_timer_cb(sd_event_source *s, uint64_t usec, void *userdata) {
        _cleanup_(client_unrefp) Client *c = client_ref(userdata);

        switch (c->state) {
        case CLIENT_READING: {
                const Config *config = manager_config(c->manager);
                char t[FORMAT_TIMESPAN_MAX];

                c->close_after_response = true;
                c->req->start = client_now(c);
                if (c->req->method == REQUEST_NO_METHOD)
                        c->req->method = REQUEST_METHOD_UNPARSED;
                if (!c->parser.headers_complete)
                        client_answer(c, ANSWER_HEADERS_TIMEOUT);
                else if (c->req->start >= c->body_deadline)
                        client_answer(c, ANSWER_BODY_TIMEOUT,
                                      format_timespan(t, sizeof(t), config->body_timeout_usec));
                else
                        client_answer(c, ANSWER_BODY_TOO_SLOW,
                                      format_timespan(t, sizeof(t), config->idle_timeout_usec));
                c->state = CLIENT_CLOSING;
                client_flush(c);
                client_process(c);
                return 0;
        }
        case CLIENT_RESPONDING:
                if (c->read_eof && buffer_is_empty(&c->out) && !c->req->answer.complete) {
                        /* not a slow reader: a silence after the end of its input (client_probe_eof()) */
                        c->eof_probed = false;
                        client_process(c);
                        return 0;
                }
                log_info("Client %s does not read its answer, dropping the connection", c->peer);
                if (!c->req->answer.complete)
                        client_log_access(c, "cut=slow-client");
                client_close(c);
                return 0;
        default:
                client_close(c);
                return 0;
        }
}

static void client_stop(Client *c) {
        _cleanup_(client_unrefp) Client *ref = client_ref(c);

        c->close_after_response = true;
        if (c->feed) {
                /* a feed has no end of its own: it ends cleanly with the daemon */
                feed_hub_unsubscribe(c->activity_feed ? activity_hub(manager_activity(c->manager))
                                                      : manager_feed_hub(c->manager),
                                     &c->feed_sub);
                c->feed = c->activity_feed = false;
                if (c->req->answer.chunked)
                        (void)buffer_append_str(&c->out, "0\r\n\r\n");
                client_response_complete(c, "feed");
                c->state = CLIENT_CLOSING;
                client_flush(c);
                client_process(c);
                return;
        }
        /* an idle keep-alive connection goes now; a fresh one (accepted as the stop began) has its request
         * on the way: it is answered, then closed */
        if (c->state == CLIENT_WAITING && buffer_is_empty(&c->out) && buffer_is_empty(&c->in) &&
            c->answered_one)
                client_close(c);
}

/* One address cannot take every connection slot: told at once, before anything is read (out of memory to
 * count it, it is refused the same way). */
static void client_refuse_address(Client *c, uint64_t same) {
        c->req->start = client_now(c);
        c->req->method = REQUEST_METHOD_UNPARSED;
        c->close_after_response = true;
        c->state = CLIENT_RESPONDING;
        c->req->api = API_OPENAI;
        client_answer(c, ANSWER_TOO_MANY_CONNECTIONS, (unsigned long long)same,
                      (unsigned long long)manager_config(c->manager)->max_connections_per_address);
        c->state = CLIENT_CLOSING;
        client_flush(c);
        client_process(c);
}

int client_new(ClientSet *set, int fd, const struct sockaddr *peer, socklen_t peer_len) {
        assert(set);
        assert(peer);
        Manager *m = set->manager;
        Config *config = manager_config(m);
        sd_event *event = manager_event(m);
        Client *c;
        int r;

        c = calloc(1, sizeof(Client));
        if (!c) {
                safe_close(fd);
                return -ENOMEM;
        }
        c->n_ref = 1; /* the set's, dropped by client_close() */
        c->req = &c->request;
        request_init(c->req, c);
        c->manager = m;
        c->set = set;
        c->fd = fd;
        c->body_deadline = USEC_INFINITY;
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

        /* the one registration of the socket (see client-internal.h) */
        r = socket_watch_add(manager_sockets(m), fd, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, client_io_cb,
                             c, &c->io);
        if (r >= 0)
                r = lazy_timer_init(&c->timer, event, client_timer_cb, c);
        if (r >= 0)
                /* a connection that was never used gets the head's deadline, not the idle one: silent
                 * connections cannot hold slots for long */
                client_set_timer(c, config->header_timeout_usec);
        if (r < 0) {
                client_close(c);
                return r;
        }
        /* the refusal may close it: pinned as a callback would pin it */
        _cleanup_(client_unrefp) Client *ref = client_ref(c);
        if (same == 0 || same > config->max_connections_per_address)
                client_refuse_address(c, same);
        else {
                /* past MaxConnections=: room is made before c is idle itself, so that it is never c, and
                 * only for a connection that is served (one refused above closes at once anyway) */
                Client *oldest = set->idle_oldest;
                if (set->n_clients > config->max_connections && oldest) {
                        log_debug("MaxConnections=%llu reached: closing %s, which holds no admitted request",
                                  (unsigned long long)config->max_connections, oldest->peer);
                        client_close(oldest);
                }
                client_idle_enter(c);
        }
        return 0;
}

int client_set_new(Manager *m, const ClientSetCallbacks *cb, void *userdata, ClientSet **ret) {
        ClientSet *set = calloc(1, sizeof(ClientSet));
        assert(m);

        if (!set)
                return -ENOMEM;
        set->models = models_cache_new();
        if (!set->models) {
                free(set);
                return -ENOMEM;
        }
        /* rule:request-id: one system call per process; without it the ids are still unique in it */
        uint64_t seed[2];
        random_seed(seed, sizeof(seed));
        request_id_seed_init(&set->id_seed, seed);
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
        set->closing = true;
        while (set->clients)
                client_close(set->clients);
        client_stream_drains_free(set);
        count_map_free(set->by_address);
        models_cache_free(set->models);
        return mfree(set);
}

size_t client_set_count(const ClientSet *set) {
        assert(set);

        return set->n_clients;
}

bool client_set_full(const ClientSet *set) {
        assert(set);

        return set->n_clients >= manager_config(set->manager)->max_connections && !set->idle_oldest;
}

void client_set_stop(ClientSet *set) {
        assert(set);

        LIST_FOREACH_SAFE (clients, c, n, set->clients)
                client_stop(c);
}

void client_set_catalogs_ready(ClientSet *set) {
        assert(set);

        models_cache_catalogs_ready(set->models, set->manager);
        LIST_FOREACH (clients, c, set->clients)
                client_models_catalogs_ready(c);
}
