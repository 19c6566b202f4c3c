/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The one log line each request leaves (rule:access-line, rule:log-escaped, modelgated(8) LOGS), as a pure
 * function of what the request was and how it ended: every client-supplied string in it is escaped, so no
 * request can forge a line or a priority. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "modelgated/rules/usage.h"
#include "shared/macro.h"
#include "shared/time-util.h"

typedef struct AccessLine {
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
} AccessLine;

/* Writes the line into buf (cut at size, never NUL-terminated) and returns its length. */
size_t access_line_format(char *buf, size_t size, const AccessLine *l);

/* rule:journal-fields: the line's MODELGATE_* fields for the journal, "NAME=value" each, written into buf
 * (size bytes) and pointed at by fields (room for ACCESS_LINE_MAX_FIELDS); only those known. Strings of the
 * client's are escaped as in the line. Returns how many. */
#define ACCESS_LINE_MAX_FIELDS 27
struct iovec;
size_t access_line_fields(char *buf, size_t size, struct iovec *fields, const AccessLine *l);
