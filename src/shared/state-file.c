/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

int state_file_write(const char *path, const char *data, size_t n) {
        _cleanup_free_ char *tmp = NULL, *dir = strdup(path);
        _cleanup_close_ int fd = -1;

        if (!dir || asprintf(&tmp, "%s.tmp", path) < 0)
                return -ENOMEM;
        for (char *slash = strchr(dir + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
                *slash = 0;
                (void)mkdir(dir, 0755);
                *slash = '/';
        }
        fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0)
                return -errno;
        for (size_t o = 0; o < n;) {
                ssize_t k = write(fd, data + o, n - o);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        int r = -errno;
                        (void)unlink(tmp);
                        return r;
                }
                o += (size_t)k;
        }
        if (fsync(fd) < 0 || rename(tmp, path) < 0) {
                int r = -errno;
                (void)unlink(tmp);
                return r;
        }
        return 0;
}
