/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* An attempt is one try at answering a request: one target (an engine of a host, a host without engines,
 * or the fallback) and the connection to it. When it fails, one table says what may come next, as nginx's
 * ngx_http_upstream_next() decides from its failure type: the alias's next target, the engine's fallback,
 * or an answer to the client; and whether the failure says anything about the host's health. One
 * request's failure is never the host's: only the host's probe marks a host down, and a failure of a
 * connection only asks the probe to look again soon. Pure: the table and the words that pick a row. */

#include <stdbool.h>

#include "modelgated/api/api-answer.h"

typedef enum AttemptFailure {
        ATTEMPT_REFUSED,       /* the host refused before the request was sent: it is down (503) */
        ATTEMPT_BUSY,          /* its GPU is someone else's: the switch was refused (423) */
        ATTEMPT_ENGINE_FAILED, /* its engine could not be started (or did not start a moment ago, and is
                                * held: rule:failed-start-hold), or not in WaitBudgetSec= (502, 504) */
        ATTEMPT_UNREACHABLE,   /* the connection never reached a server: refused, no route, no answer */
        ATTEMPT_BROKEN,        /* the connection failed before an answer: a reset, a close, bad bytes */
        ATTEMPT_HOST_DOWN,     /* the host's probe found it down while the request was in flight */
        ATTEMPT_STALLED,       /* the host sent nothing for UpstreamIdleTimeoutSec= before an answer */
        ATTEMPT_NOT_HERE,      /* the engine answered 404 or 503: the model is not loaded (yet) */
        ATTEMPT_INCOMPLETE,    /* the answer began, and its connection failed */
        ATTEMPT_BUDGET,        /* FirstTokenBudgetSec= or RequestBudgetSec= ran out */
        ATTEMPT_PROBE,         /* a probe whose engine is not up would move the GPU (rule:probe): 423 */
        _ATTEMPT_FAILURE_MAX,
} AttemptFailure;

typedef enum AttemptFallback {
        ATTEMPT_FALLBACK_NO,
        ATTEMPT_FALLBACK_YES,
        ATTEMPT_FALLBACK_ON_BUSY, /* unless the fallback says OnBusy=no */
} AttemptFallback;

/* How the client hears of a failure that nothing took over */
typedef enum AttemptAnswer {
        ATTEMPT_ANSWER_ERROR, /* an error of modelgate's (an error event after the early 200) */
        ATTEMPT_ANSWER_RELAY, /* the host's own answer goes on as it is */
        ATTEMPT_ANSWER_END,   /* the answer under way ends: an error event, or a cut, once bytes are out */
} AttemptAnswer;

typedef struct AttemptRule {
        bool next_target;         /* the alias's next target may take the request */
        AttemptFallback fallback; /* the engine's fallback may take it */
        bool reprobe;             /* the host's probe is asked to look again (never: the host is down) */
        AttemptAnswer answer;
        /* the row of the answer table (api-answer.h) the client hears, whose status is the one written;
         * _ANSWER_INVALID: the host's own answer goes on */
        Answer row;
} AttemptRule;
/* The status the client hears of f: its row's, 0 where that is the host's (its refusal's, or its own
 * answer's) */
int attempt_status(AttemptFailure f);

const AttemptRule *attempt_rule(AttemptFailure f);
const char *attempt_failure_to_string(AttemptFailure f);
/* The failure of a connection to the target: error is a negative errno, started whether the host's
 * status and headers had come */
AttemptFailure attempt_failure_of_error(int error, bool started);
/* The failure of a refusal by the host's engine side, by its status (423, 502, 503, 504) */
AttemptFailure attempt_failure_of_refusal(int status);
