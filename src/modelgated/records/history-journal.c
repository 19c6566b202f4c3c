/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* rule:history: at start, the ring of /activity made again from the journal: this unit's access entries
 * (MESSAGE_ID_ACCESS, of _SYSTEMD_USER_UNIT= or _SYSTEMD_UNIT= of the unit modelgated runs in), newest
 * first from the tail, until ACTIVITY_RECENT of them or one older than the start's HISTORY_MAX_AGE. Read
 * once, before the first request: a few hundred entries, found by the journal's own indexes. */

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-journal.h>
#include <systemd/sd-login.h>
#include <unistd.h>

#include "modelgated/records/history.h"
#include "modelgated/api/access-line.h"
#include "shared/log.h"
#include "shared/message-id.h"

/* The unit's entries of MESSAGE_ID_ACCESS, of this user: a user unit's, else a system unit's (a user
 * manager of its own, as in a container, has its units' entries under _SYSTEMD_UNIT=) */
static int add_matches(sd_journal *j) {
        _cleanup_free_ char *unit = NULL, *m = NULL, *uid = NULL;
        const char *field = "_SYSTEMD_USER_UNIT";
        int r;

        if (sd_pid_get_user_unit(0, &unit) < 0) {
                field = "_SYSTEMD_UNIT";
                r = sd_pid_get_unit(0, &unit);
                if (r < 0)
                        return r; /* not a unit's: no entries of ours to tell from others */
        }
        if (asprintf(&m, "%s=%s", field, unit) < 0 || asprintf(&uid, "_UID=%u", (unsigned)getuid()) < 0)
                return -ENOMEM;
        r = sd_journal_add_match(j, "MESSAGE_ID=" MESSAGE_ID_ACCESS, 0);
        if (r >= 0)
                r = sd_journal_add_match(j, m, 0);
        /* another user's unit of the same name, in a journal this one may read (the adm group's) */
        if (r >= 0)
                r = sd_journal_add_match(j, uid, 0);
        return r;
}

/* The entry's MODELGATE_* fields, copied (the journal's pointers last only until its next field) */
static size_t entry_fields(sd_journal *j, char *buf, size_t size, Span *fields, size_t max) {
        const void *d;
        size_t l, used = 0, n = 0;

        SD_JOURNAL_FOREACH_DATA(j, d, l) {
                if (l < 10 || memcmp(d, "MODELGATE_", 10) != 0 || n == max || l > size - used)
                        continue;
                memcpy(buf + used, d, l);
                fields[n++] = (Span){buf + used, l};
                used += l;
        }
        return n;
}

int history_journal_load(Activity *a, usec_t since) {
        _cleanup_(sd_journal_closep) sd_journal *j = NULL;
        _cleanup_free_ HistoryEntry *entries = NULL;
        Span fields[ACCESS_LINE_MAX_FIELDS];
        char buf[4096];
        size_t n = 0;
        int r;

        r = sd_journal_open(&j, SD_JOURNAL_LOCAL_ONLY);
        if (r < 0)
                return r;
        /* a journal this user may not read (a volatile one, or the system service's user outside the
         * journal's groups) opens, with no file: the caller keeps the history file instead */
        if (sd_journal_has_runtime_files(j) <= 0 && sd_journal_has_persistent_files(j) <= 0)
                return -EACCES;
        r = add_matches(j);
        if (r < 0)
                return r;
        entries = calloc(ACTIVITY_RECENT, sizeof(HistoryEntry));
        if (!entries)
                return -ENOMEM;
        r = sd_journal_seek_tail(j);
        while (r >= 0 && n < ACTIVITY_RECENT && (r = sd_journal_previous(j)) > 0) {
                usec_t t;
                size_t k;
                if (sd_journal_get_realtime_usec(j, &t) < 0)
                        continue;
                if (t < since)
                        break;
                k = entry_fields(j, buf, sizeof(buf), fields, ELEMENTSOF(fields));
                if (history_entry_parse(fields, k, t, &entries[n]) >= 0 && entries[n].r.t >= since)
                        n++;
        }
        if (r < 0)
                log_warning_errno(r, "Cannot read the journal for the recent requests, ignoring: %m");
        /* oldest first, as they ended */
        for (size_t i = n; i > 0; i--)
                activity_restore(a, &entries[i - 1].r);
        return (int)n;
}
