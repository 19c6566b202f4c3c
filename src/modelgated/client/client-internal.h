/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Inside the client module: the connection (client-connection.c) and the parts of answering its requests,
 * each in a file of its own: writing answers (client-answer.c), admitting and routing a request
 * (client-dispatch.c), relaying a host's answer (client-relay.c), what may follow a failed attempt
 * (client-attempt.c, the table) and that table applied with the fallback and budgets (client-fallback.c),
 * modelgate's own endpoints (client-endpoints.c). Only those files include this; they call each other
 * freely, through the prototypes below, one block per file. */

/* A Client lives from accept() to close. States, each with its deadline (rule:deadlines):
 *   WAITING    between requests (keep-alive); idle timeout closes silently
 *   READING    a request has begun; header timeout → 408, and once its head is in, a body that stalls
 *              (IdleTimeoutSec=) or is not whole by body_deadline (BodyTimeoutSec=) → 408
 *   RESPONDING the request is complete; its response is being produced
 *   CLOSING    the last bytes are flushed, then the connection closes
 *   LINGERING  after an error that left request bytes unread: our side is shut down and input is
 *              drained for a moment, so that the client reads the error instead of a reset (a close
 *              with unread input makes the kernel send RST, which can destroy the answer in flight)
 *   CLOSED     client_close() ended it: only the memory is left, until the last reference goes
 * Pipelined requests wait in the socket and in 'in', and are parsed one at a time; the socket is read
 * while a response is produced (up to CLIENT_READ_SIZE of input), so that a client that goes away
 * cancels the host's work at once.
 * The socket is registered once, for EPOLLIN|EPOLLOUT|EPOLLRDHUP edge-triggered, as nginx does, and its
 * interest set never changes: an epoll_ctl() per change would be most of the system calls of a request.
 * What it waits for is in the flags instead: out_blocked (a send hit EAGAIN: the next EPOLLOUT edge goes
 * on), and, for input that is not read at once (the input buffer is full, or the connection closes),
 * read_pending (input may wait that no edge will announce: reading resumes with a read). */

/* The lifetime rule (systemd's, as resolved's dns_stream_complete() keeps it). The ClientSet holds one
 * reference to each open connection. Every callback by which the loop or another module enters the client
 * module (the socket, the timers, the keepalive, the budget, the upstream's callbacks, the host waiter's,
 * the feed's, the models merge's done) pins the Client first:
 *         _cleanup_(client_unrefp) Client *ref = client_ref(c);
 * and whatever it calls may then end the connection with client_close(): the Client leaves every list (the
 * set's, the idle list, the feed hub), its timers and event sources stop, its upstream is cancelled and its
 * host wait released (request_done()), its socket is closed, and the set's reference is dropped; the
 * memory lives until the last pin goes. Nothing calls into a closed Client any more, and no function
 * returns "it is gone": client_flush() and client_process() do nothing on a closed Client, and code that
 * goes on after a call that may close looks at client_is_closed() where it must (before it re-arms a
 * timer, or tells another module to go on).
 * Below the client the other discipline stays, for reasons of their own. An Upstream has one owner, which
 * may cancel it from inside its callbacks while llhttp is running on the Upstream's own memory and a pooled
 * connection may be handed to another owner: upstream_cancel() there only detaches and marks it
 * (in_parser, cancel_error), and the upstream ends it once the parser has returned; a reference count
 * would keep a socket alive that the pool must be able to reuse or close. A HostBus is replaced, not
 * shared, and its sd_bus must not be closed inside the bus's own dispatch: it is closed from a defer
 * source. A Host that a reload left draining says it is done from inside its own callbacks, so the manager
 * frees it from a defer source too. These are objects with one owner and one way out, where a deferred end
 * costs less than counting references from the many places a Client is entered. */

#include <arpa/inet.h>
#include <assert.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "modelgated/api/access-line.h"
#include "modelgated/access/access.h"
#include "modelgated/api/api-answer.h"
#include "modelgated/api/api-error.h"
#include "modelgated/api/early-answer.h"
#include "modelgated/catalog/catalog.h"
#include "modelgated/client/client-attempt.h"
#include "modelgated/client/client.h"
#include "modelgated/client/request.h"
#include "modelgated/event/feed-hub.h"
#include "modelgated/api/first-wait.h"
#include "modelgated/host/host.h"
#include "modelgated/http/http-writer.h"
#include "modelgated/http/http.h"
#include "modelgated/api/json-util.h"
#include "modelgated/event/lazy-timer.h"
#include "modelgated/event/socket-watch.h"
#include "modelgated/manager/manager.h"
#include "modelgated/records/metrics.h"
#include "modelgated/client/models.h"
#include "modelgated/api/route.h"
#include "modelgated/sched/session.h"
#include "modelgated/api/sse.h"
#include "modelgated/upstream/upstream.h"
#include "shared/count-map.h"
#include "shared/log.h"

typedef struct StreamDrain StreamDrain;

#define CLIENT_READ_SIZE (64 * 1024)
#define CLIENT_READ_BUDGET CLIENT_READ_SIZE /* read from one client in one turn of the loop: one read */
/* rule:bytes-flow: what is held for a client that does not read */
#define CLIENT_OUT_HIGH (256 * 1024)     /* above this, the host is not read until the client catches up */
#define CLIENT_HELD_MAX (1024 * 1024)    /* error bodies held back for rewording */
#define CLIENT_FEED_OUT_MAX (256 * 1024) /* a /models/sse subscriber this far behind is dropped */
/* rule:client-gone: how long a client whose input ended may have heard nothing before it is probed again */
#define CLIENT_PROBE_USEC (500 * USEC_PER_MSEC)
/* Subscribers kept for /activity alone (at most half of the feeds' room): the operator's view, which any
 * key's /models/sse subscribers could take otherwise */
#define FEED_ACTIVITY_ROOM 4

typedef enum ClientState {
        CLIENT_WAITING,
        CLIENT_READING,
        CLIENT_RESPONDING,
        CLIENT_CLOSING,
        CLIENT_LINGERING, /* our side is shut; what the client still sends is read and dropped */
        CLIENT_CLOSED,    /* client_close() ended it */
} ClientState;

struct ClientSet {
        Manager *manager;
        Client *clients;
        size_t n_clients;
        CountMap *by_address;  /* MaxConnectionsPerAddress= */
        ModelsCache *models;   /* the hosts' part of the last /models answer, for the next one */
        FirstWait health_wait; /* /health's, while a host is connecting (rule:host-connecting) */
        /* The connections that hold no admitted request: silent since accept, idle between requests, or
         * still sending a head. Oldest first: at MaxConnections= the first is closed to make room, so
         * that connections nobody uses can never keep out /health or a client with a key
         * (rule:connection-room). */
        Client *idle, *idle_oldest; /* newest first; the oldest is the list's tail */
        StreamDrain *drains;        /* streams read on after their clients left (client-stream.c) */
        bool closing;               /* client_set_free(): no stream is read on any more */
        RequestIdSeed id_seed;      /* rule:request-id: the ids made here */
        const ClientSetCallbacks *cb;
        void *userdata;
};

struct Client {
        unsigned n_ref; /* the set's while open, and each callback's pin (see above) */
        Manager *manager;
        LIST_FIELDS(Client, clients);
        ClientSet *set;
        FeedSubscriber feed_sub; /* in the manager's feed hub while it follows /models/sse */
        bool feed;
        bool activity_feed; /* the feed is /activity's (feed_sub in the activity's hub) */
        int fd;
        SocketWatch *io;
        LazyTimer timer; /* each state's deadline (client_set_timer()) */
        /* BodyTimeoutSec= after the head of the request being read: what no read of its body can push
         * back. USEC_INFINITY: none (no head yet, or no bound) */
        usec_t body_deadline;
        char peer[INET6_ADDRSTRLEN + 8];
        char address[INET6_ADDRSTRLEN + 8]; /* what MaxConnectionsPerAddress= counts (IPv6 per /64) */
        bool address_counted;
        LIST_FIELDS(Client, idle); /* in set->idle */
        ClientState state;
        bool in_process; /* client_process() is not re-entered: a callback inside it leaves the rest to it */
        bool close_after_response;
        bool answered_one; /* a response went out on this connection */
        bool read_eof;     /* the client shut its side: what it sent is answered, then the connection ends */
        bool eof_probed;   /* since then, something went out that a closed socket answers with a reset */
        bool out_blocked;  /* a send hit EAGAIN: nothing more is sent before the socket's EPOLLOUT edge */
        bool read_pending; /* input may be in the socket whose edge came (or was left) while not reading */
        bool peer_shut; /* its FIN (or an error) was seen: a short read does not mean the socket is empty */
        uint64_t read_turn;  /* the loop's iteration that read_in_turn counts for */
        size_t read_in_turn; /* bytes read from the socket in that turn (CLIENT_READ_BUDGET) */

        Buffer in;
        HttpParser parser;
        Buffer out;
        /* the rest of a big answer of modelgate's own, moved into out as it drains: out is empty only once
         * this is done (NULL) */
        Blob *tail;
        size_t tail_sent;

        Request request;           /* the request being answered, ended with it */
        Request *req;              /* &request */
        Buffer held_head, scratch; /* working space, kept across requests */
};

/* client-connection.c: the connection and its lifetime (the rule above) */
Client *client_ref(Client *c);
Client *client_unref(Client *c);
DEFINE_TRIVIAL_CLEANUP_FUNC(Client *, client_unref);
/* Ends the connection at once (see the rule above); a closed one stays closed. */
void client_close(Client *c);
static inline bool client_is_closed(const Client *c) {
        return c->state == CLIENT_CLOSED;
}
/* Writes what can be written now; a socket that failed closes the connection. */
void client_flush(Client *c);
/* An answer ended, or input waits: the connection goes on (the next request, the close). */
void client_process(Client *c);

/* client-answer.c: writing answers, and the access line */
void client_log_access(Client *c, const char *note);
void client_response_complete(Client *c, const char *note);
int client_queue_head(Client *c, int status, const char *extra);
/* rule:request-id: the request's id, the client's or made on the first call (out of line) */
Span client_request_id_first(Client *c);
static inline Span client_request_id(Client *c) {
        return c->req->id.span.n > 0 ? c->req->id.span : client_request_id_first(c);
}
/* The request's id escaped for a log line about it (rule:request-id: the id on every line about the
 * request), in buf */
static inline const char *client_log_id(Client *c, char buf[static REQUEST_ID_MAX * 4 + 1]) {
        Span id = client_request_id(c);
        log_escape(buf, REQUEST_ID_MAX * 4 + 1, id.p, id.n);
        return buf;
}
/* "X-Request-Id: …\r\n" appended. 0 or -ENOMEM. Inline for a made id where there is room, as a rule:
 * twice a request (to the host and back), a few moves of a fixed length rather than a call. */
int client_append_request_id_any(Client *c, Buffer *b);
static inline int client_append_request_id(Client *c, Buffer *b) {
        Span id = client_request_id(c);

        if (id.n != REQUEST_ID_MADE_LEN || b->alloc - b->end < 14 + REQUEST_ID_MADE_LEN + 2)
                return client_append_request_id_any(c, b);
        char *p = b->data + b->end;
        b->end += 14 + REQUEST_ID_MADE_LEN + 2;
        memcpy(p, "X-Request-Id: ", 14);
        memcpy(p + 14, id.p, REQUEST_ID_MADE_LEN);
        memcpy(p + 14 + REQUEST_ID_MADE_LEN, "\r\n", 2);
        return 0;
}
void client_respond(Client *c, int status, const char *content_type, const char *body, size_t n,
                    const char *extra_headers);
/* The same for a body modelgate made and may share with other connections (a /v1/models answer): a big
 * one goes out from the blob as the socket drains, never more than CLIENT_OUT_HIGH of it queued */
void client_respond_blob(Client *c, int status, const char *content_type, Blob *body);
/* Moves what fits under CLIENT_OUT_HIGH from the connection's tail to out */
void client_refill_out(Client *c);
void client_end_early(Client *c, const Buffer *event);
/* An error answer of modelgate's own (rule:error-shape, api-answer.h), in the request's API shape (an SSE
 * error event after the early 200): the row's status, code and headers, and its words formatted with the
 * arguments its enum comment names */
void client_answer(Client *c, Answer a, ...);
/* The same with the words written already (answer_format(), where the outcome was found: the host,
 * [Access]), and for a row without a status or Retry-After seconds of its own, those (0 otherwise) */
void client_answer_message(Client *c, Answer a, int status, uint64_t retry_after, const char *message);
int client_frame_body(Client *c, const char *p, size_t n);
int client_send_held_head(Client *c, const char *framing);
int client_queue_stream_head(Client *c);

/* client-usage.c: what the answer says it cost (rule:usage) */
/* The answer's head came: whether it is read for its cost (a generation's 200, a stream or a JSON body) */
void client_usage_start(Client *c, const UpstreamResponse *resp, Span ct, bool sse, bool no_body);
/* The attempt that was read for its cost failed: the next one's answer is read anew */
void client_usage_forget(Client *c);
/* The tally an event stream's filter reads the usage into, or NULL */
Usage *client_usage_of_answer(Client *c);
/* A piece of a whole JSON body, and its end */
void client_usage_body(Client *c, const char *p, size_t n);
void client_usage_whole(Client *c);
/* What the record says it cost, settled (seen: a copy, when a drain reads the rest on and counts it),
 * NULL for an answer not read; cut: it ended before its last event */
const Usage *client_usage_for_record(Client *c, Usage *seen, bool *cut);
/* The record's tokens, for the caller's day and /metrics, unless the drain counts them */
void client_usage_count(Client *c, const RequestRecord *rec);
/* rule:key-usage, rule:usage-metrics: an answer's tokens, for its caller's day and (host: NULL for the
 * fallback's) for /metrics */
void client_count_usage(Manager *m, const Config *config, const AccessCaller *caller, const char *peer,
                        const char *host, const char *engine, const char *model_label, const Usage *u);
/* The answer's tokens that the access line left to a drain (usage.owed), counted now: there is none */
void client_count_owed(Client *c);
/* The drain takes the tally over (to), and counts it: false when the answer is not read */
bool client_usage_hand_over(Client *c, Usage *to);

/* client-request.c: the request for a host */
/* The request for a host: the client's, with the body's bytes of span (empty: none) replaced by key and
 * those of cut (empty: none) left out */
int client_build_request(Client *c, const HttpUrl *target, Span url, Span body, Span span, const char *key,
                         Span cut, Buffer *out);

/* client-dispatch.c: admitting and routing a request */
bool client_admit_head(Client *c);
void client_dispatch(Client *c);
bool client_next_target(Client *c, const char *why);
/* The request goes to its engine, and the budget for its answer starts (rule:answer-budget) */
void client_go(Client *c);

/* client-host-check.c: rule:host-check */
/* A web page's request whose Host is not a name modelgate answers for: answered 403, true */
bool client_host_refused(Client *c);

/* client-stream.c: resumable streams (rule:resumable-streams) */
/* GET and DELETE /v1/stream (PATH_OWN_STREAM), POST /v1/streams/lookup (PATH_OWN_STREAM_LOOKUP): answered,
 * or on its way to the host that holds the conversation */
void client_dispatch_stream(Client *c, Span url);
/* X-Conversation-Id of a request routed to its host, engine the one that serves it ("" for none): the id
 * the host gets, under the caller's mark, and, for a request that makes a session there, remembered as
 * the caller's. false: out of memory (not answered). */
bool client_stream_remember(Client *c, const HttpRequest *r, const char *engine);
/* The request's remembered conversation was used now (its stream ended): its time starts again */
void client_stream_touch(Client *c);
/* On the head of POST /v1/streams/lookup, its body's bound set: false when it is refused (413, in w),
 * whoever sends it */
bool client_stream_limit_lookup(Client *c, AnswerWords *w);
/* The client is closing mid-stream: a stream of a remembered conversation is read on to its end, in
 * flight on its engine, instead of being cancelled */
void client_stream_drain(Client *c);
/* Whether client_stream_drain() would read the rest of this client's answer on, were it to close now */
bool client_stream_drains(const Client *c);
void client_stream_drains_free(ClientSet *set);

/* client-relay.c: relaying a host's answer, and what a failed one becomes */
/* The answer to a failure that nothing took over (the table's ATTEMPT_ANSWER_ERROR and _END): error is
 * the connection's negative errno, or for a refusal the host's status; why is the failure in words */
void client_attempt_answer(Client *c, AttemptFailure failure, int error, const char *why);
/* The answer under way is an event stream whose bytes so far end with a whole line: a comment line may go
 * out here without changing any event */
bool client_in_event_stream_line_end(const Client *c);
void client_cut(Client *c, const char *note);
void client_host_went_down(HostWaiter *w);
extern const UpstreamCallbacks client_upstream_callbacks;
int client_keepalive_cb(sd_event_source *s, uint64_t usec, void *userdata);
int client_send_upstream(Client *c);

/* client-fallback.c: what follows a failed attempt, the fallback and the budgets */
typedef enum AttemptOutcome {
        ATTEMPT_MOVED_ON, /* the alias's next target or the fallback has the request now */
        ATTEMPT_ANSWERED, /* the client has its answer (or the end of the answer under way) */
        ATTEMPT_RELAYED,  /* the host's own answer goes on as it is (ATTEMPT_NOT_HERE) */
} AttemptOutcome;
/* The table's decision for a failed attempt, applied: the host's probe asked to look again, the next
 * target, the fallback, or client_attempt_answer() */
AttemptOutcome client_attempt_failed(Client *c, AttemptFailure failure, int error, const char *why);
/* The attempt is over: what it owned is given up, for the next target or the fallback */
void client_attempt_end(Client *c);
void client_start_budget(Client *c);
bool client_fall_back(Client *c, const char *why);
/* The engine's fallback for this request (its [Engine]'s Fallback=, for an inference path and a model in
 * the body): whether there is one; whether one was chosen; none (an alias's next target names its own) */
bool client_fallback_choose(Client *c, llhttp_method_t method, bool in_body);
bool client_fallback_chosen(const Client *c);
void client_fallback_forget(Client *c);
/* The fallback that answered, for the record; NULL: none did */
const char *client_fallback_name(const Client *c);
/* The fallback's own failure, as it is: not chained, and not the host's fault */
void client_fallback_failed(Client *c, const char *reason);

/* client-endpoints.c: modelgate's own endpoints */
bool client_model_visible(const char *id, void *userdata);
/* Every host's catalog has been read once: a GET /v1/models that waits for them answers now */
void client_models_catalogs_ready(Client *c);
void client_models_done(ModelsMerge *mm, Blob *json, void *userdata);
bool client_refuse_websocket(Client *c);
/* modelgate's own endpoint (path-table.h), answered, or on its way */
void client_dispatch_own(Client *c, PathOwn own, Span url, Span path);
void client_respond_health(Client *c, bool strict);
void client_respond_refusal(Client *c, bool health);
void client_respond_metrics(Client *c);
void client_respond_ui(Client *c);
void client_start_ui(Client *c);

/* client-control.c: llama-swap's GET /running and its unload endpoints (rule:swap-running,
 * rule:swap-unload) */
void client_respond_running(Client *c);
/* GET /unload (api: false) or POST /api/models/unload (api: true) */
void client_unload_all(Client *c, bool api);
/* POST /api/models/unload/<model> (PATH_OWN_UNLOAD_MODEL) */
#define UNLOAD_MODEL_PREFIX "/api/models/unload/"
void client_unload_model(Client *c, Span path);
void client_start_feed(Client *c);

/* client-activity.c: a request as /activity shows it (rule:activity-feed), and its subscribers */
void client_activity_begin(Client *c);
/* The dispatch found the request's model in h's list (catalog_lists() > 0): the model is shown, and its
 * first phase need not look it up again */
void client_activity_model_listed(Client *c, Host *h);
void client_activity_queued(Client *c);
void client_activity_ready(Client *c, usec_t now);
void client_activity_model_read(Client *c);
void client_activity_first_byte(Client *c);
void client_activity_loading(Client *c);
void client_activity_done(Client *c, RequestRecord *rec);
bool client_feed_open(Client *c, const char *path);
void client_start_activity(Client *c);
bool client_may_watch(Client *c);
/* client-session.c: who the client is to the spread memory and the sessions (its key, else its address,
 * and the session it names: rule:sessions); the session its request names, once it is admitted */
AliasClient client_identity(const Client *c);
void client_read_session(Client *c);
/* Its label (hex digits), or NULL: it names none */
const char *client_session_label(const Client *c);

/* The loop's time: everything that one event dispatch decides about a request uses one "now" (every
 * caller runs inside an event callback of the loop). */
static inline usec_t client_now(Client *c) {
        return socket_watch_loop_now(manager_event(c->manager));
}
