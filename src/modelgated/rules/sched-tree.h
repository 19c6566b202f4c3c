/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The waiting requests of a Sched again, in a tree by arrival (seq) with subtree sizes: sched.c's, for
 * sched_ahead(). Each step taken counts in sched_steps. */

#include "modelgated/rules/sched.h"

void sched_tree_insert(Sched *s, SchedRequest *r);
void sched_tree_remove(Sched *s, SchedRequest *r);
/* How many waiting requests arrived before seq. */
unsigned sched_tree_count_before(const Sched *s, uint64_t seq);
