/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* rule:probe: one decision (probe.h). */

#include "modelgated/sched/probe.h"

/* The line: a probe never stops an engine, never waits behind a switch and never queues behind other
 * requests; it may start its engine only on a GPU that nothing runs on, waits for or is switching. */
ProbeDecision probe_decide(const ProbeView *v) {
        if (v->up && !v->switch_pending)
                return PROBE_SERVE;
        if (!v->up && !v->running && !v->switch_pending && v->in_flight == 0 && v->waiting == 0)
                return PROBE_START;
        return PROBE_REFUSE;
}
