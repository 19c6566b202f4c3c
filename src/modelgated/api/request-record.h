/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* What one request was and how it ended, filled once when it ends (client_record()) and read by everything
 * that tells of it: the access line and its journal fields (access-line.h), the history file, /activity's
 * ring (activity_request_ended()), /metrics (metrics_record()), and the caller's day in key usage and the
 * shared counts (access_record_usage()). A new figure of a request is one field here, written where the
 * record is filled, and read by the formatters that show it (docs/request-record.md walks one through). */

#include <stdbool.h>
#include <stdint.h>

#include "modelgated/api/usage.h"
#include "shared/macro.h"
#include "shared/time-util.h"

typedef struct RequestRecord {
        /* as the client sent them: escaped here (path and user agent are the request's own bytes) */
        const char *method, *model;
        Span path, user_agent;
        const char *host;   /* NULL: the request reached no host */
        const char *target; /* an alias's target, else NULL */
        const char *peer;
        int status;
        uint64_t bytes;
        usec_t duration;
        bool early;       /* modelgate's own 200 went out while the request waited */
        int error_status; /* an error told inside that early 200 */
        /* rule:upstream-error: an error the engine sent inside its own 200 (status 0: none), its message
         * as the engine wrote it (escaped here) */
        int upstream_error_status;
        const char *upstream_error;
        const char *key;      /* the caller's key id with [Access], else NULL */
        const char *session;  /* rule:sessions: the session's label (hex digits), else NULL */
        const char *fallback; /* the fallback that answered, else NULL */
        const char *note;     /* "cut=client", "feed", …, or NULL */
        /* rule:usage */
        const char *engine;   /* the host's engine that answered, else NULL */
        usec_t first_byte;    /* from the start to the answer's head, 0: no answer from a host */
        usec_t queued;        /* rule:queued-and-switch: in the host's queue (0: not at all) */
        usec_t switched;      /* waiting for its own engine's switch or start (0: none) */
        const Usage *usage;   /* what the answer said it cost, or NULL */
        bool cut;             /* the stream ended before its last event: usage counts what arrived */
        Span request_id;      /* rule:request-id: the client's (escaped here) or one made here */
        bool request_id_made; /* it is modelgate's own (hex): nothing in it to escape */
        /* rule:history: what /activity's ring keeps of the request besides the above, for the fields only */
        const char *api;   /* its API as /activity names it; NULL: the request is not in the ring */
        bool stream;       /* it asked for a stream */
        bool model_hidden; /* /activity shows its model as unknown (rule:no-text-in-activity) */
        usec_t done_at;    /* its end as /activity shows it, CLOCK_REALTIME */
        /* for /metrics and the counts only */
        int status_sent;          /* as it went out (status says 499 for a client that left) */
        const char *engine_tried; /* the engine of the last target tried, also when the fallback answered */
        const char *alias;        /* the [Alias] the model named, else NULL */
        const char *model_label;  /* rule:usage-metrics: the model's name for /metrics, or NULL */
        bool caused_switch;       /* rule:sessions: an engine was switched to (or started) for it */
} RequestRecord;
