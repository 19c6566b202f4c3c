/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* A spell of first waits (rule:first-wait): while something of every host is not known yet after a start
 * (a catalog's first read, a host's first probe), the answers that need it wait, bounded. Every wait of
 * one spell shares the first one's bound, so that a host whose first probe hangs (a blackholed one takes
 * seconds to fail) costs one answer FIRST_WAIT_USEC, not each; once what they wait for is known, the spell
 * ends, and the next one (a reload's new host) gets its own bound. Pure: the caller keeps the clock. */

#include <stdbool.h>

#include "shared/time-util.h"

#define FIRST_WAIT_USEC (2 * USEC_PER_SEC)

typedef struct FirstWait {
        usec_t until; /* the spell's bound; 0: no spell */
} FirstWait;

/* When a wait that begins at now ends: the spell's bound, set by its first wait; 0 when the spell has had
 * its wait already (answer with what is known). */
static inline usec_t first_wait_begin(FirstWait *w, usec_t now) {
        if (w->until == 0)
                w->until = now + FIRST_WAIT_USEC;
        return now >= w->until ? 0 : w->until;
}

/* What the spell waited for is known: the next one gets its own bound. */
static inline void first_wait_end(FirstWait *w) {
        w->until = 0;
}
