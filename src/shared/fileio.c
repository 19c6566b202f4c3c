/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "shared/fileio.h"
#include "shared/macro.h"

int read_full_file(const char *path, char **ret, size_t *ret_size) {
        _cleanup_close_ int fd = -1;
        _cleanup_free_ char *buf = NULL;
        size_t n = 0, a = 0;

        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        for (;;) {
                if (a - n < 4096) {
                        if (a > 16 * 1024 * 1024)
                                return -EFBIG;
                        a = a ? a * 2 : 8192;
                        char *nb = realloc(buf, a);
                        if (!nb)
                                return -ENOMEM;
                        buf = nb;
                }
                ssize_t k = read(fd, buf + n, a - n);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (k == 0)
                        break;
                n += (size_t)k;
        }
        buf[n] = 0; /* there is room: a read of 0 left at least 4096 bytes */
        *ret = TAKE_PTR(buf);
        *ret_size = n;
        return 0;
}
