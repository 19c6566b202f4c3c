/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What may follow a failed attempt, as a table (client-attempt.h); client-fallback.c applies it. */

#include <errno.h>
#include <stddef.h>

#include "modelgated/client/client-attempt.h"
#include "shared/errno-util.h"

/* Before any byte of the engine's answer has reached the client (an early 200 and its comments are
 * modelgate's, not the engine's), a failure may move on: to the alias's next target, each at most once,
 * then to the fallback, once (client_next_target() and client_fall_back() check that). The budget moves
 * only to the fallback: a target that is slow is not a target that refused. Only a failed connection
 * asks the host's probe to look again; a stall, a refusal or an answer says nothing about the host's
 * health, and the probe's own "down" it knows already. */
static const AttemptRule rules[_ATTEMPT_FAILURE_MAX] = {
        [ATTEMPT_REFUSED] = {true, ATTEMPT_FALLBACK_YES, false, ATTEMPT_ANSWER_ERROR, ANSWER_HOST_DOWN},
        [ATTEMPT_BUSY] = {true, ATTEMPT_FALLBACK_ON_BUSY, false, ATTEMPT_ANSWER_ERROR, ANSWER_GPU_BUSY},
        [ATTEMPT_ENGINE_FAILED] = {true, ATTEMPT_FALLBACK_YES, false, ATTEMPT_ANSWER_ERROR,
                                   ANSWER_ENGINE_FAILED},
        [ATTEMPT_UNREACHABLE] = {true, ATTEMPT_FALLBACK_YES, true, ATTEMPT_ANSWER_ERROR, ANSWER_HOST_DOWN},
        [ATTEMPT_BROKEN] = {true, ATTEMPT_FALLBACK_YES, true, ATTEMPT_ANSWER_ERROR, ANSWER_UPSTREAM_FAILED},
        [ATTEMPT_HOST_DOWN] = {true, ATTEMPT_FALLBACK_YES, false, ATTEMPT_ANSWER_ERROR, ANSWER_HOST_DOWN},
        [ATTEMPT_STALLED] = {true, ATTEMPT_FALLBACK_YES, false, ATTEMPT_ANSWER_ERROR,
                             ANSWER_UPSTREAM_TIMEOUT},
        [ATTEMPT_NOT_HERE] = {true, ATTEMPT_FALLBACK_YES, false, ATTEMPT_ANSWER_RELAY, _ANSWER_INVALID},
        [ATTEMPT_INCOMPLETE] = {true, ATTEMPT_FALLBACK_YES, false, ATTEMPT_ANSWER_END,
                                ANSWER_UPSTREAM_ENDED_EARLY},
        [ATTEMPT_BUDGET] = {false, ATTEMPT_FALLBACK_YES, false, ATTEMPT_ANSWER_END, ANSWER_BUDGET_EXCEEDED},
        /* rule:probe: another target may have its engine up; the cloud is not asked for a count */
        [ATTEMPT_PROBE] = {true, ATTEMPT_FALLBACK_NO, false, ATTEMPT_ANSWER_ERROR,
                           ANSWER_PROBE_NOT_SWITCHED},
};

static const char *const names[_ATTEMPT_FAILURE_MAX] = {
        [ATTEMPT_REFUSED] = "refused",
        [ATTEMPT_BUSY] = "busy",
        [ATTEMPT_ENGINE_FAILED] = "engine-failed",
        [ATTEMPT_UNREACHABLE] = "unreachable",
        [ATTEMPT_BROKEN] = "broken",
        [ATTEMPT_HOST_DOWN] = "host-down",
        [ATTEMPT_STALLED] = "stalled",
        [ATTEMPT_NOT_HERE] = "not-here",
        [ATTEMPT_INCOMPLETE] = "incomplete",
        [ATTEMPT_BUDGET] = "budget",
        [ATTEMPT_PROBE] = "probe",
};

const AttemptRule *attempt_rule(AttemptFailure f) {
        return f >= 0 && f < _ATTEMPT_FAILURE_MAX ? &rules[f] : NULL;
}

int attempt_status(AttemptFailure f) {
        const AttemptRule *r = attempt_rule(f);
        return r && r->row != _ANSWER_INVALID ? answer_status(r->row, 0) : 0;
}

const char *attempt_failure_to_string(AttemptFailure f) {
        return f >= 0 && f < _ATTEMPT_FAILURE_MAX ? names[f] : NULL;
}

AttemptFailure attempt_failure_of_error(int error, bool started) {
        if (started)
                return ATTEMPT_INCOMPLETE;
        error = error < 0 ? -error : error;
        /* before the unreachable set, which holds EHOSTDOWN too: the probe's own word that the host is down
         */
        if (error == ETIME)
                return ATTEMPT_STALLED;
        if (error == EHOSTDOWN)
                return ATTEMPT_HOST_DOWN;
        return ERRNO_IS_UNREACHABLE(error) ? ATTEMPT_UNREACHABLE : ATTEMPT_BROKEN;
}

AttemptFailure attempt_failure_of_refusal(int status) {
        switch (status) {
        case 503:
                return ATTEMPT_REFUSED;
        case 423:
                return ATTEMPT_BUSY;
        default:
                return ATTEMPT_ENGINE_FAILED;
        }
}
