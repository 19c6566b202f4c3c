/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "modelgated/records/run-record.h"
#include "shared/fileio.h"
#include "shared/log.h"
#include "shared/macro.h"
#include "shared/parse-util.h"
#include "shared/state-file.h"

#define RUN_RECORD_FILE "unclean-runs"
#define RUN_RECORD_MAX 64 /* lines kept: far more than any crash-loop bound needs */

/* The file's starts within [lo, hi] but skip, at most RUN_RECORD_MAX of the newest; a line that is not a
 * number is dropped (a torn or foreign file costs only its memory of crashes). */
static size_t read_starts(const char *path, uint64_t *starts, uint64_t lo, uint64_t hi, uint64_t skip) {
        _cleanup_free_ char *text = NULL;
        size_t n = 0, size;

        if (read_full_file(path, &text, &size) < 0)
                return 0;
        for (char *line = text, *next; line && *line; line = next) {
                next = strchr(line, '\n');
                if (next)
                        *next++ = 0;
                uint64_t t;
                if (safe_atou64(line, &t) < 0 || t < lo || t > hi || t == skip)
                        continue;
                if (n == RUN_RECORD_MAX) {
                        memmove(starts, starts + 1, (n - 1) * sizeof(uint64_t));
                        n--;
                }
                starts[n++] = t;
        }
        return n;
}

static int write_starts(const char *path, const uint64_t *starts, size_t n) {
        char text[RUN_RECORD_MAX * 24 + 24];
        size_t len = 0;

        for (size_t i = 0; i < n; i++)
                len += (size_t)snprintf(text + len, sizeof(text) - len, "%" PRIu64 "\n", starts[i]);
        /* no fsync() on every start and clean exit: what it guards against is the daemon's own end, which
         * leaves the page cache; a machine that goes down forgets a crash loop, which costs nothing */
        return state_file_write_full(path, text, len, (gid_t)-1, 0, /* sync= */ false);
}

int run_record_start(RunRecord *r, uint64_t now, uint64_t window, unsigned *ret_unclean) {
        assert(r);
        uint64_t starts[RUN_RECORD_MAX + 1];
        size_t n;
        int k;

        *r = (RunRecord){.path = state_file_path(RUN_RECORD_FILE), .start = now};
        *ret_unclean = 0;
        if (!r->path)
                return 0;
        /* a start after now is of a clock that was set back since: it says nothing of the last window */
        n = read_starts(r->path, starts, now > window ? now - window : 0, now, /* skip= */ UINT64_MAX);
        *ret_unclean = (unsigned)n;
        starts[n++] = now;
        k = write_starts(r->path, starts, n);
        if (k < 0)
                log_warning_errno(k, "Cannot write %s, a crash loop may go unnoticed: %m", r->path);
        return 0;
}

void run_record_clean(RunRecord *r) {
        assert(r);
        uint64_t starts[RUN_RECORD_MAX];
        size_t n;

        if (!r->path)
                return;
        n = read_starts(r->path, starts, 0, UINT64_MAX, r->start);
        if (n == 0)
                (void)unlink(r->path);
        else
                (void)write_starts(r->path, starts, n);
}

void run_record_forget(RunRecord *r) {
        assert(r);
        if (r->path)
                (void)write_starts(r->path, &r->start, 1);
}

void run_record_done(RunRecord *r) {
        r->path = mfree(r->path);
}
