/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* modelgated --check-config --hosts (rule:check-hosts): the configuration checked against the hosts it
 * names, not only its syntax. Each host's bus is connected as the daemon connects it, its engine units are
 * read and checked (rule:engine-unit-checks), the running engine's URL is asked for its list, and each
 * Models= glob is matched against what the host lists now or listed when its engines last ran
 * (models-seen.json). Read-only: no unit is started or stopped and no state file is written. */

#include <stdio.h>

#include "modelgated/conf/conf.h"

/* Writes the report to out and returns how many problems it found (0: none), or a negative errno when the
 * check itself could not run. */
int config_check_hosts(const Config *c, FILE *out);
