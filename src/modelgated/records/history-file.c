/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* rule:history without a journal: each finished request of the ring appended to HISTORY_FILE in the state
 * directory as its fields, one "NAME=value" a line and an empty line after them (the journal's export
 * format, without binary fields), by one writev() at its end, so that a kill -9 loses nothing that ended.
 * Bounded: after ACTIVITY_RECENT records the file becomes HISTORY_FILE_OLD and a new one starts; a start
 * reads both. A record without its empty line (a write the machine cut) is cut off at open. */

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "modelgated/records/history.h"
#include "modelgated/api/access-line.h"
#include "shared/fileio.h"
#include "shared/log.h"
#include "shared/state-file.h"

struct HistoryFile {
        char *path, *old_path;
        int fd;
        size_t n; /* records in the file */
};

/* The records of text into a, oldest first; the length of its whole records, their count in *ret_n */
static size_t load_records(const char *text, size_t size, Activity *a, usec_t since, size_t *ret_n) {
        Span fields[ACCESS_LINE_MAX_FIELDS];
        const char *p = text, *end = text + size;
        size_t nf = 0, whole = 0, n = 0;

        for (const char *nl; p < end && (nl = memchr(p, '\n', (size_t)(end - p))); p = nl + 1) {
                HistoryEntry e;
                if (nl > p) {
                        if (nf < ELEMENTSOF(fields))
                                fields[nf++] = (Span){p, (size_t)(nl - p)};
                        continue;
                }
                if (nf > 0 && history_entry_parse(fields, nf, 0, &e) >= 0 && e.r.t >= since)
                        activity_restore(a, &e.r);
                n += nf > 0;
                nf = 0;
                whole = (size_t)(nl + 1 - text);
        }
        *ret_n = n;
        return whole;
}

static size_t load_file(const char *path, Activity *a, usec_t since, size_t *ret_n, size_t *ret_size) {
        _cleanup_free_ char *text = NULL;
        size_t size = 0;
        int r = read_full_file(path, &text, &size);

        *ret_n = *ret_size = 0;
        if (r < 0) {
                if (r != -ENOENT)
                        log_warning_errno(r, "Cannot read '%s', ignoring: %m", path);
                return 0;
        }
        *ret_size = size;
        return load_records(text, size, a, since, ret_n);
}

static int open_append(HistoryFile *f, bool truncate) {
        int flags = O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW | (truncate ? O_TRUNC : 0);

        f->fd = open(f->path, flags, 0600);
        if (f->fd < 0 && errno == ENOENT) {
                /* its directory made, as for every state file */
                int r = state_file_write(f->path, "", 0);
                if (r < 0)
                        return r;
                f->fd = open(f->path, flags, 0600);
        }
        return f->fd < 0 ? -errno : 0;
}

int history_file_open(const char *path, Activity *a, usec_t since, HistoryFile **ret) {
        _cleanup_(history_file_freep) HistoryFile *f = NULL;
        size_t n_old, size_old, whole, size;
        int r;

        assert(a && ret);
        *ret = NULL;
        if (!path)
                return 0;
        f = calloc(1, sizeof(HistoryFile));
        if (!f || !(f->path = strdup(path)) || asprintf(&f->old_path, "%s.old", path) < 0)
                return -ENOMEM;
        f->fd = -EBADF;
        (void)load_file(f->old_path, a, since, &n_old, &size_old);
        whole = load_file(f->path, a, since, &f->n, &size);
        r = open_append(f, /* truncate= */ false);
        if (r < 0)
                return r;
        /* a record the machine cut halfway would swallow the next one's first fields */
        if (whole < size && ftruncate(f->fd, (off_t)whole) < 0)
                return -errno;
        *ret = TAKE_PTR(f);
        return 0;
}

/* The file full: it becomes the old one, whose records a start still reads, and a new one starts */
static void rotate(HistoryFile *f) {
        if (rename(f->path, f->old_path) < 0) {
                log_warning_errno(errno, "Cannot rename '%s', ignoring: %m", f->path);
                return;
        }
        f->fd = safe_close(f->fd);
        f->n = 0;
        if (open_append(f, /* truncate= */ true) < 0)
                log_warning_errno(errno, "Cannot open '%s', the recent requests are no longer kept: %m",
                                  f->path);
}

void history_file_append(HistoryFile *f, const struct iovec *fields, size_t n) {
        struct iovec iov[2 * ACCESS_LINE_MAX_FIELDS + 1];
        size_t k = 0;

        if (!f || f->fd < 0)
                return;
        n = MIN(n, (size_t)ACCESS_LINE_MAX_FIELDS);
        /* a line a value would break is no record: the request is not kept. access_line_fields() writes
         * its fields back to back: then they are looked through at once */
        bool adjacent = n > 0;
        for (size_t i = 1; i < n && adjacent; i++)
                adjacent = (const char *)fields[i].iov_base ==
                           (const char *)fields[i - 1].iov_base + fields[i - 1].iov_len;
        if (adjacent && memchr(fields[0].iov_base, '\n',
                               (size_t)((const char *)fields[n - 1].iov_base + fields[n - 1].iov_len -
                                        (const char *)fields[0].iov_base)))
                return;
        for (size_t i = 0; i < n; i++) {
                if (!adjacent && memchr(fields[i].iov_base, '\n', fields[i].iov_len))
                        return;
                iov[k++] = fields[i];
                iov[k++] = (struct iovec){(char *)"\n", 1};
        }
        iov[k++] = (struct iovec){(char *)"\n", 1};
        if (writev(f->fd, iov, (int)k) < 0) {
                log_warning_errno(errno, "Cannot write '%s', the recent requests are no longer kept: %m",
                                  f->path);
                f->fd = safe_close(f->fd);
                return;
        }
        if (++f->n >= ACTIVITY_RECENT)
                rotate(f);
}

HistoryFile *history_file_free(HistoryFile *f) {
        if (!f)
                return NULL;
        safe_close(f->fd);
        free(f->path);
        free(f->old_path);
        return mfree(f);
}
