/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shared/macro.h"
#include "shared/state-file.h"

char *state_file_path(const char *name) {
        const char *d = getenv("STATE_DIRECTORY"), *x = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
        char *p = NULL;

        if (d && *d) {
                size_t l = strcspn(d, ":");
                return asprintf(&p, "%.*s/%s", (int)l, d, name) < 0 ? NULL : p;
        }
        if (x && *x)
                return asprintf(&p, "%s/modelgate/%s", x, name) < 0 ? NULL : p;
        if (home && *home)
                return asprintf(&p, "%s/.local/state/modelgate/%s", home, name) < 0 ? NULL : p;
        return NULL;
}

/* "dir/.base" + suffix, for the files that go beside path */
static char *beside(const char *path, const char *suffix) {
        const char *slash = strrchr(path, '/');
        char *p = NULL;
        size_t dl = slash ? (size_t)(slash - path + 1) : 0;
        return asprintf(&p, "%.*s.%s%s", (int)dl, path, path + dl, suffix) < 0 ? NULL : p;
}

static void make_parents(const char *path) {
        _cleanup_free_ char *dir = strdup(path);
        for (char *slash = dir ? strchr(dir + 1, '/') : NULL; slash; slash = strchr(slash + 1, '/')) {
                *slash = 0;
                (void)mkdir(dir, 0755);
                *slash = '/';
        }
}

int state_file_lock(const char *path) {
        _cleanup_free_ char *lock = beside(path, ".lock");
        int fd;

        if (!lock)
                return -ENOMEM;
        make_parents(path);
        /* read-only and 0644: whoever may rewrite the file may take the lock, whoever made it first */
        fd = open(lock, O_RDONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0)
                return -errno;
        if (flock(fd, LOCK_EX) < 0) {
                int r = -errno;
                close(fd);
                return r;
        }
        return fd;
}

int state_file_write(const char *path, const char *data, size_t n) {
        return state_file_write_full(path, data, n, (gid_t)-1, 0, /* sync= */ true);
}

int state_file_write_full(const char *path, const char *data, size_t n, gid_t new_gid, mode_t new_mode,
                          bool sync) {
        _cleanup_free_ char *tmp = beside(path, ".XXXXXX");
        _cleanup_close_ int fd = -1;
        struct stat st;
        int r;

        if (!tmp)
                return -ENOMEM;
        make_parents(path);
        /* a new name of our own (O_EXCL): a link planted at a fixed temporary name cannot redirect it */
        fd = mkostemp(tmp, O_CLOEXEC);
        if (fd < 0)
                return -errno;
        /* the file stays whose it was and as readable as it was (a keys file root writes for the system
         * service's user, say) */
        if (stat(path, &st) >= 0) {
                if ((st.st_uid != geteuid() || st.st_gid != getegid()) &&
                    fchown(fd, st.st_uid, st.st_gid) < 0)
                        goto fail;
                if (fchmod(fd, st.st_mode & 07777) < 0)
                        goto fail;
        } else if (errno != ENOENT)
                goto fail;
        else if ((new_gid != (gid_t)-1 && fchown(fd, (uid_t)-1, new_gid) < 0) ||
                 (new_mode != 0 && fchmod(fd, new_mode) < 0))
                goto fail; /* set on the file before it has its name: nothing to follow or swap */
        for (size_t o = 0; o < n;) {
                ssize_t k = write(fd, data + o, n - o);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        goto fail;
                }
                o += (size_t)k;
        }
        if ((sync && fsync(fd) < 0) || rename(tmp, path) < 0)
                goto fail;
        return 0;

fail:
        r = -errno;
        (void)unlink(tmp);
        return r;
}
