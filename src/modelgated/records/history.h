/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* rule:history (modelgated(8) HISTORY): the ring of /activity's finished requests outlives the process.
 * Each finished request's access line carries the fields that make its ring entry again (the MODELGATE_*
 * fields of rule:journal-fields); at start modelgated reads back the last HISTORY_MAX_AGE of them, at most
 * ACTIVITY_RECENT: from the journal when its log goes there and it may read it (its own unit's
 * MESSAGE_ID_ACCESS entries), else from a bounded file in the state directory that each request's fields
 * are appended to. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "modelgated/records/activity.h"
#include "modelgated/api/request-id.h"
#include "shared/macro.h"
#include "shared/time-util.h"

/* How far back a start looks */
#define HISTORY_MAX_AGE (1 * USEC_PER_HOUR)
/* The state file (no journal), and the one it was before its last rotation */
#define HISTORY_FILE "history"
#define HISTORY_FILE_OLD "history.old"

/* A finished request made again from its fields: r's names point at the entry's own copies, its times
 * are CLOCK_REALTIME (r.realtime is 0) */
typedef struct HistoryEntry {
        ActivityRequest r;
        char id[REQUEST_ID_MAX + 1], model[128], host[64], engine[64], key[80], fallback[64];
        char session[SESSION_LABEL_LEN + 1];
        char upstream_error[256];
} HistoryEntry;

/* Pure: the entry of the fields ("NAME=value" each, as access_line_fields() writes them; others are
 * ignored). received: when the journal got it, for an entry without MODELGATE_DONE_REALTIME_USEC.
 * -EBADMSG: no request of the ring (no MODELGATE_API=, or a field that is not what it should be). */
int history_entry_parse(const Span *fields, size_t n, usec_t received, HistoryEntry *ret);

/* The last entries of this unit's journal that the ring shows, oldest first, into a: how many, or a
 * negative errno (-EACCES: no journal file this user may read). */
int history_journal_load(Activity *a, usec_t since);

typedef struct HistoryFile HistoryFile;
/* Reads the file at path (and its rotated one) into a, cuts what a kill left half written, and opens it
 * for appends. NULL path: no state directory, nothing kept. */
int history_file_open(const char *path, Activity *a, usec_t since, HistoryFile **ret);
/* One request's fields, as one write(): a kill leaves it whole or not at all */
void history_file_append(HistoryFile *f, const struct iovec *fields, size_t n);
HistoryFile *history_file_free(HistoryFile *f);
DEFINE_TRIVIAL_CLEANUP_FUNC(HistoryFile *, history_file_free);
