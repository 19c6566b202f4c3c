/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* One request on a client connection, from the moment the previous one ended (or the connection opened) to
 * the end of its answer, split as nginx splits r from r->upstream:
 *
 *   Request  what the client asked and who asked, the route, the answer that goes back, and each feature's
 *            part of it (a sub-struct written by the file of that feature, named beside it);
 *   Attempt  one target tried (an engine of a host, a host without engines, or the fallback): the wait
 *            for its engine, the connection to it, its budget and how its answer is read. A failed
 *            attempt ends with attempt_done(), the one reset: the next target starts from an Attempt
 *            that holds nothing, and names its own target and engine (a host without engines: none).
 *
 * The connection holds one Request at a time and ends it with its answer, so nothing of one request can
 * leak into the next. */

#include <llhttp.h>
#include <stdbool.h>
#include <stdint.h>

#include "modelgated/conf/conf.h"
#include "modelgated/host/host.h"
#include "modelgated/access/access.h"
#include "modelgated/records/activity.h"
#include "modelgated/api/api-error.h"
#include "modelgated/api/path-table.h"
#include "modelgated/api/request-id.h"
#include "modelgated/api/route.h"
#include "modelgated/sched/session.h"
#include "modelgated/api/sse.h"
#include "modelgated/api/usage.h"
#include "shared/buffer.h"
#include "shared/time-util.h"

typedef struct Client Client;
typedef struct Upstream Upstream;
typedef struct ModelsMerge ModelsMerge;
typedef struct StreamLookup StreamLookup;

typedef enum ResponseMode {
        MODE_PASS, /* bytes go on as they are */
        MODE_SSE,  /* line filter for error events */
        MODE_HOLD, /* an error body, held whole to be reworded */
} ResponseMode;

/* Two values no method has: no request yet, and a request whose head was never parsed */
#define REQUEST_NO_METHOD ((llhttp_method_t)-1)
#define REQUEST_METHOD_UNPARSED ((llhttp_method_t)-2)

/* One target tried. client-dispatch.c starts it, client-relay.c reads its answer, client-fallback.c ends
 * it when it fails (attempt_done()). */
typedef struct Attempt {
        const HttpUrl *target;
        /* the engine's, in the request's config; NULL: a host without engines */
        const EngineConf *engine_conf;
        const char *engine_name; /* in config */
        bool via_fallback;       /* the target is the engine's fallback, which answers now */
        HostWaiter waiter;       /* for an engine of the host, or attached to a host without engines */
        Buffer pending;          /* the request for the target, while waiting for its engine */
        Upstream *upstream;
        sd_event_source *budget;   /* FirstTokenBudgetSec= or RequestBudgetSec= */
        bool awaiting_first_token; /* a stream's head and comments are held until its first data line */
        bool first_byte_seen;
        const char *held_framing;
        ResponseMode mode;
        SseFilter sse;
        Buffer held;      /* an error body, held whole to be reworded */
        int error_status; /* an error told inside an early 200, for the log */
} Attempt;

/* Ends whatever the attempt holds: its wait for an engine (the host may switch), its connection (the host
 * stops working on it), its budget, the answer it was reading; a is empty again afterwards. */
void attempt_done(Attempt *a);

/* client-answer.c: what has gone back to the client */
typedef struct RequestAnswer {
        int status;
        uint64_t bytes;
        bool complete;
        bool chunked;
        bool head_sent;
        bool engine_bytes_sent; /* a byte of the engine's answer went out: no other target may answer now */
        /* rule:keepalive: modelgate's own 200 went out while the request waited (early), and with it the
         * beginning of the API's answer (begun, rule:keepalive-events); the timer of its comments */
        bool early;
        bool begun;
        sd_event_source *keepalive;
} RequestAnswer;

/* client-dispatch.c: an [Alias] (rule:alias-at-admission, rule:alias-next-target): the target it picked, in
 * config; the ones tried (bit i: target i) */
typedef struct RequestAlias {
        const AliasConf *conf;
        const char *target;
        uint64_t tried;
} RequestAlias;

/* client-fallback.c: the fallback (rule:fallback-availability): it may answer until a byte of the engine's
 * answer reaches the client */
typedef struct RequestFallback {
        const FallbackConf *conf;
        const char *path; /* modelgate's own path for the fallback (inference only) */
} RequestFallback;

/* rule:queued-and-switch: what the host said of the request's waits (HostWaiter), summed over an alias's
 * targets */
typedef struct RequestWaited {
        usec_t queued, switched;
        bool caused_switch; /* an engine was switched to (or started) for it */
} RequestWaited;

/* client-endpoints.c: modelgate's own answers that wait for something */
typedef struct RequestOwn {
        ModelsMerge *merge;           /* GET /v1/models, merging the hosts' lists */
        sd_event_source *health_wait; /* GET /health, waiting for the hosts' first probes */
        bool health_strict;
} RequestOwn;

/* client-stream.c: resumable streams (rule:resumable-streams) */
typedef struct RequestStream {
        /* X-Conversation-Id of a request remembered with its host: its stream outlives a client that
         * leaves, and so does the engine's request in flight */
        char *conv_id;
        /* the X-Conversation-Id the host gets, the client's under its owner's mark; NULL: none goes */
        char *conv_host_id;
        StreamLookup *lookup; /* POST /v1/streams/lookup, asking the hosts */
} RequestStream;

/* The parts below are not emptied whole when a request starts (request_init()): their flags are, and the
 * rest is written where it is first used, before anything reads it, so that a request does not pay for
 * clearing the bytes of what it may never use (they were a good part of its accounting). */

/* client-usage.c (rule:usage): what the answer says it cost (on:
 * tally below), read from an event stream (sse.usage) or from a whole JSON body as it arrives (body
 * until its end) */
typedef struct RequestUsage {
        bool on, body;
        /* the access line did not count them: a drain reads the rest of the answer and counts it whole,
         * or the drain could not be and client_stream_drain() counts them */
        bool owed;
        Usage tally; /* when on: usage_init() */
} RequestUsage;

/* client-answer.c: rule:request-id: the client's X-Request-Id (in the request's head) or made, empty
 * until client_request_id() first asks */
typedef struct RequestId {
        Span span;
        char made[REQUEST_ID_MADE_LEN + 1]; /* when span points at it */
} RequestId;

/* client-session.c: rule:sessions: the id of the session the request names (in the request's head), and its
 * hash (0: none; label holds its label then) */
typedef struct RequestSession {
        Span id;
        uint64_t hash;
        char label[SESSION_LABEL_LEN + 1];
} RequestSession;

/* client-activity.c: rule:activity-feed: the request as /activity shows it, in its in-flight list from its
 * host on; only entry.owner is emptied by request_init(), the rest is client_activity_begin()'s */
typedef struct RequestActivity {
        ActivityRequest entry;
        char key[80]; /* the caller's id as entry.key shows it */
        /* shown_model()'s last answer and what it was of (the host, its catalog's generation, the model;
         * shown_host NULL: none): each phase asks again, and the answer changes only with the catalog */
        const void *shown_host;
        uint64_t shown_generation;
        const char *shown_of;
        bool shown;
} RequestActivity;

typedef struct Request {
        Client *client;
        usec_t start;
        /* the request's method, as llhttp read it from the head; REQUEST_NO_METHOD before there is a
         * request, REQUEST_METHOD_UNPARSED for one answered without a method (request_method_name()) */
        llhttp_method_t method;
        /* in the parser's request head, which stays as it is until the request ends: the parser is fed
         * again only for the next request */
        Span path, user_agent;
        const PathRoute *route; /* what the path means (path-table.h): looked up once, on the head */
        ApiKind api;
        bool head;
        bool http10;
        bool browser; /* GET /ui or /activity: Basic credentials count, and a 401 asks for them (rule:ui-key)
                       */
        /* what the body asks: "stream": true (ask.stream; a resume's GET streams too), and for
         * rule:usage-charge its length and its limit of the tokens to generate (all 0 without a JSON body)
         */
        RequestAsk ask;
        AccessCaller caller;    /* with [Access]: who asks */
        AccessWait access_wait; /* rule:shared-counts: while Redis admits the request */
        char *model;            /* as the client named it */
        const HostConf *host;
        Config *config;    /* the one it was admitted under: a reload meanwhile must not free it */
        usec_t first_byte; /* from start to the host's answer head; 0: none yet */
        /* rule:usage-metrics: the model's name for /metrics (a Models= glob in config, or the key where the
         * host lists it, in model or alias.target), or NULL */
        const char *model_label;

        Attempt attempt;
        RequestAnswer answer;
        RequestAlias alias;
        RequestFallback fallback;
        RequestWaited waited;
        RequestOwn own;
        RequestStream stream;

        /* not emptied whole: see above */
        RequestUsage usage;
        RequestId id;
        RequestSession session;
        RequestActivity activity;
} Request;

/* A new, empty request of client. */
void request_init(Request *req, Client *client);
/* Ends whatever the request still holds: its attempt, its own answer's waits, its timers; req is empty
 * again afterwards. */
void request_done(Request *req);
/* The method's name for the log: llhttp's, "-" for a request never parsed, NULL before a request */
const char *request_method_name(const Request *req);
