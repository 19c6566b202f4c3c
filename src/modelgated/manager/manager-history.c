/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* rule:history at start: the ring of /activity made again from what the runs before this one left, in the
 * journal when the log goes there and this user may read it, else in the state directory's history file,
 * which is kept from now. */

#include <assert.h>

#include "modelgated/manager/manager.h"
#include "modelgated/records/history.h"
#include "shared/log.h"
#include "shared/state-file.h"

HistoryFile *manager_history_start(Manager *m) {
        assert(m);
        Activity *a = manager_activity(m);
        usec_t now = now_usec(CLOCK_REALTIME), since = now - MIN(now, HISTORY_MAX_AGE);
        _cleanup_free_ char *path = NULL;
        HistoryFile *f = NULL;
        int r;

        if (log_journal()) {
                r = history_journal_load(a, since);
                if (r >= 0) {
                        log_debug("%d recent request(s) read from the journal", r);
                        return NULL;
                }
                /* logged to a journal it cannot read back: the file is kept besides */
                log_notice_errno(r, "Cannot read the journal (%m): the recent requests are kept in the "
                                    "state directory's '" HISTORY_FILE "' too");
        }
        path = state_file_path(HISTORY_FILE);
        r = history_file_open(path, a, since, &f);
        if (r < 0)
                log_warning_errno(r, "Cannot keep the recent requests in '%s', ignoring: %m", strna(path));
        activity_set_history(a, f);
        return f;
}
