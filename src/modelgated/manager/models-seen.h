/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* models-seen.json in the state directory: what every host last said of each of its models
 * (model-memory.h), so that a listing after a restart or an idle exit still gives a stopped engine's
 * models their context window, marked as remembered (rule:remembered-context). One file for every host,
 * so it belongs to whoever holds every host: read once at start, written whole when what a listing would
 * show of a model changed (a load brings its meta, the engine that lists it changed), and at exit when
 * only the times did. */

#include <stdbool.h>
#include <stddef.h>

typedef struct Host Host;
typedef struct ModelMemory ModelMemory;

/* Fills mem from the file. A missing file is no error; one that cannot be read as a memory is moved
 * aside (".corrupt") with a warning, and the memory starts empty. */
void models_seen_load(ModelMemory *mem);
/* Writes mem; a failure is logged, and what it holds is remembered until the daemon exits. */
void models_seen_save(ModelMemory *mem);
/* Learns h's snapshot, read while its engine i ran (changed: other bytes than the read before). true:
 * what a listing shows changed, and mem should be written now; false: at most the times did. */
bool models_seen_learn(ModelMemory *mem, Host *h, size_t i, bool changed);
