/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* rule:probe, as data and one decision (probe.h). */

#include <stddef.h>
#include <string.h>

#include "modelgated/rules/probe.h"

/* POST unless marked: llama-server's routes (tools/server/server.cpp) and the APIs' token counts */
static const struct {
        const char *path;
        bool get, post;
} probes[] = {
        {"/v1/messages/count_tokens", false, true},
        {"/v1/responses/input_tokens", false, true},
        {"/responses/input_tokens", false, true},
        {"/v1/chat/completions/input_tokens", false, true},
        {"/chat/completions/input_tokens", false, true},
        {"/tokenize", false, true},
        {"/detokenize", false, true},
        {"/apply-template", false, true},
        {"/props", true, true},
        {"/slots", true, false},
};

bool probe_path(Span path, bool get) {
        for (size_t i = 0; i < ELEMENTSOF(probes); i++)
                if (path.n == strlen(probes[i].path) && memcmp(path.p, probes[i].path, path.n) == 0)
                        return get ? probes[i].get : probes[i].post;
        return false;
}

/* The line: a probe never stops an engine, never waits behind a switch and never queues behind other
 * requests; it may start its engine only on a GPU that nothing runs on, waits for or is switching. */
ProbeDecision probe_decide(const ProbeView *v) {
        if (v->up && !v->switch_pending)
                return PROBE_SERVE;
        if (!v->up && !v->running && !v->switch_pending && v->in_flight == 0 && v->waiting == 0)
                return PROBE_START;
        return PROBE_REFUSE;
}
