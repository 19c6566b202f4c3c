/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The daemon's runs that did not end cleanly (rule:crash-loop), in the state directory ("unclean-runs"): a
 * line per run, its start (CLOCK_REALTIME µs). A run adds its line as it starts and takes it out at a clean
 * exit (an idle exit, a stop); a crash, a watchdog kill or an out-of-memory kill leaves it. So the next run
 * knows how many runs before it ended badly, and when: what the units' start limit cannot tell apart from
 * idle exits and re-activations, which are starts too (modelgated(8), UNIT SETTINGS). */

#include <stdint.h>

typedef struct RunRecord {
        char *path; /* NULL: no state directory, nothing is recorded */
        uint64_t start;
} RunRecord;

/* Adds this run, started at now. *ret_unclean: the earlier runs that did not end cleanly and started
 * within window before now (older ones are dropped from the file). */
int run_record_start(RunRecord *r, uint64_t now, uint64_t window, unsigned *ret_unclean);
/* A clean exit: this run's line goes; the earlier ones stay until they are older than the window. */
void run_record_clean(RunRecord *r);
/* Forgets every earlier run (an operator's reload after a crash loop); this run's line stays. */
void run_record_forget(RunRecord *r);
void run_record_done(RunRecord *r);
