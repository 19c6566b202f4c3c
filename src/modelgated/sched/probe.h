/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* rule:probe: a probe never moves a GPU. Which requests are probes (token counts, the tokenizer, the
 * chat template, /props, /slots: cheap questions clients ask by the dozen, at start-up and per model) is
 * the table of paths' (path-table.h); what a host may do with one for an engine is a pure function of
 * what the host is doing now. */

#include <stdbool.h>

#include "shared/macro.h"

/* What the host does now, as a probe for engine 'engine' sees it */
typedef struct ProbeView {
        bool up;             /* that engine is up (its /health answered) */
        bool switch_pending; /* a switch away from the running engine is coming, or one is under way */
        bool running;        /* any engine runs, is starting or is stopping */
        unsigned in_flight, waiting;
} ProbeView;

typedef enum ProbeDecision {
        PROBE_SERVE,  /* its engine is up and staying: it goes at once */
        PROBE_START,  /* the GPU is nobody's: it may start its engine as any request does */
        PROBE_REFUSE, /* anything else: answered at once, and nothing moves */
} ProbeDecision;

ProbeDecision probe_decide(const ProbeView *v);
