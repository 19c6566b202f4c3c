/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* One request on a client connection, from the moment the previous one ended (or the connection
 * opened) to the end of its answer: what was asked, where it went, what has been sent back. The
 * connection holds one Exchange at a time and ends it with its request, so nothing of one request can
 * leak into the next. */

#include <llhttp.h>
#include <stdbool.h>
#include <stdint.h>

#include "modelgated/records/access.h"
#include "modelgated/records/activity.h"
#include "modelgated/rules/api-error.h"
#include "modelgated/rules/path-table.h"
#include "modelgated/conf/conf.h"
#include "modelgated/host/host.h"
#include "modelgated/rules/request-id.h"
#include "modelgated/rules/route.h"
#include "modelgated/rules/sse.h"
#include "modelgated/rules/usage.h"
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
#define EXCHANGE_NO_METHOD ((llhttp_method_t)-1)
#define EXCHANGE_METHOD_UNPARSED ((llhttp_method_t)-2)

typedef struct Exchange {
        Client *client;
        usec_t start;
        /* the request's method, as llhttp read it from the head; EXCHANGE_NO_METHOD before there is a
         * request, EXCHANGE_METHOD_UNPARSED for one answered without a method (exchange_method_name()) */
        llhttp_method_t method;
        /* in the parser's request head, which stays as it is until the exchange ends: the parser is fed
         * again only for the next request */
        Span path, user_agent;
        char *model;
        const HostConf *host;
        Config *config;          /* host's: a reload meanwhile must not free it */
        const char *engine_name; /* in config */
        const EngineConf *engine_conf;
        bool first_byte_seen;
        AccessCaller caller;    /* with [Access]: who asks */
        AccessWait access_wait; /* rule:shared-counts: while Redis admits the request */
        const PathRoute *route; /* what the path means (path-table.h): looked up once, on the head */

        /* an [Alias] (rule:alias-at-admission, rule:alias-next-target): the target it picked, in config; the
         * ones tried (bit i: target i) */
        const AliasConf *alias;
        const char *alias_target;
        uint64_t alias_tried;

        /* the fallback (rule:fallback-availability): it may answer until a byte of the engine's answer
         * reaches the client */
        const FallbackConf *fallback;
        bool via_fallback;
        bool engine_bytes_sent;
        const char *fb_path;       /* modelgate's own path for the fallback (inference only) */
        sd_event_source *budget;   /* FirstTokenBudgetSec= or RequestBudgetSec= */
        bool awaiting_first_token; /* a stream's head and comments are held until its first data line */
        const char *held_framing;
        ApiKind api;
        bool head;
        bool browser; /* GET /ui or /activity: Basic credentials count, and a 401 asks for them (rule:ui-key)
                       */
        /* what the body asks: "stream": true (ask.stream; a resume's GET streams too), and for
         * rule:usage-charge its length and its limit of the tokens to generate (all 0 without a JSON body)
         */
        RequestAsk ask;
        bool http10;
        bool response_complete;
        int status;
        int error_status; /* an error told inside an early 200, for the log */
        uint64_t bytes;

        HostWaiter waiter; /* for an engine of the host, or attached to a host without engines */
        sd_event_source *keepalive;
        bool early;     /* modelgate's own 200 went out while the request waited (rule:keepalive) */
        bool begun;     /* ... and with it the beginning of the API's answer (rule:keepalive-events) */
        Buffer pending; /* the upstream request, while waiting for the engine */
        const HttpUrl *target;

        Upstream *upstream;
        ModelsMerge *merge;
        sd_event_source *health_wait; /* GET /health, waiting for the hosts' first probes */
        bool health_strict;
        StreamLookup *lookup; /* POST /v1/streams/lookup, asking the hosts */
        /* X-Conversation-Id of a request remembered with its host (rule:resumable-streams): its stream
         * outlives a client that leaves, and so does the engine's request in flight */
        char *conv_id;
        /* the X-Conversation-Id the host gets, the client's under its owner's mark; NULL: none goes */
        char *conv_host_id;
        ResponseMode mode;
        bool chunked;
        bool head_sent;
        SseFilter sse;
        Buffer held; /* an error body, held whole to be reworded */

        /* rule:usage: what the answer says it cost (usage_on: usage below), read from an event stream
         * (sse.usage) or from a whole JSON body as it arrives (usage_body until its end) */
        bool usage_on, usage_body;
        /* the line did not count them: a drain reads the rest of the answer and counts it whole, or the
         * drain could not be and client_stream_drain() counts them */
        bool usage_owed;
        usec_t first_byte; /* from start to the host's answer head; 0: none yet */
        /* rule:queued-and-switch: what the host said of the request's wait (HostWaiter) */
        usec_t queued, switched;
        /* rule:usage-metrics: the model's name for /metrics (a Models= glob in config, or the key where
         * the host lists it, in model or alias_target), or NULL */
        const char *model_label;
        /* rule:request-id: the client's X-Request-Id (in the request's head) or made_id; empty until
         * client_request_id() first asks */
        Span request_id;
        /* rule:sessions: the id of the session the request names (in the request's head), and its hash (0:
         * none; session_label holds its label then); its engine was switched to for it (HostWaiter) */
        Span session_id;
        uint64_t session_hash;
        bool caused_switch;

        /* From here on, nothing is emptied when a request starts (exchange_init()): each field is written
         * where it is first used, before anything reads it, so that a request does not pay for clearing
         * the bytes of what it may never use (they were a good part of its accounting). */
        Usage usage;                               /* when usage_on is set: usage_init() */
        char made_id[REQUEST_ID_MADE_LEN + 1];     /* when request_id points at it */
        char session_label[SESSION_LABEL_LEN + 1]; /* when session_hash is set */
        /* rule:activity-feed: the request as /activity shows it, in its in-flight list from its host on;
         * only activity.owner is set by exchange_init(), the rest by client_activity_begin() */
        ActivityRequest activity;
        char activity_key[80]; /* the caller's id as activity.key shows it */
} Exchange;

/* A new, empty request of client. */
void exchange_init(Exchange *x, Client *client);
/* Ends whatever the request still holds: its wait for an engine, its upstream connection (the host
 * stops working on it), its timers; x is empty again afterwards. */
void exchange_done(Exchange *x);
/* The method's name for the log: llhttp's, "-" for a request never parsed, NULL before a request */
const char *exchange_method_name(const Exchange *x);
