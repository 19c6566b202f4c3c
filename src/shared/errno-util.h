/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Named sets of errno values, as systemd's errno-util.h has them, so that a caller says which kind of
 * failure it handles rather than listing numbers. Each takes an errno value either way round (errno,
 * or a negative return code). */

#include <errno.h>
#include <stdbool.h>

/* Nothing is wrong: try again now (EINTR) or at the next event (EAGAIN). */
static inline bool ERRNO_IS_TRANSIENT(int r) {
        r = r < 0 ? -r : r;
        return r == EAGAIN || r == EINTR;
}

/* The process ran out of something (file descriptors, kernel buffers, memory): what failed may succeed
 * once something is freed, so a listener waits rather than spins. */
static inline bool ERRNO_IS_RESOURCE(int r) {
        r = r < 0 ? -r : r;
        return r == EMFILE || r == ENFILE || r == ENOBUFS || r == ENOMEM;
}

/* The connection is gone: the other end closed or reset it, or it was shut down. */
static inline bool ERRNO_IS_DISCONNECT(int r) {
        r = r < 0 ? -r : r;
        return r == ENOTCONN || r == ECONNRESET || r == EPIPE || r == ESHUTDOWN;
}

/* A connection that never reached a server: nothing listens there, no route, no answer to the connect
 * (ETIMEDOUT), or modelgate's own probe found the host down (EHOSTDOWN). */
static inline bool ERRNO_IS_UNREACHABLE(int r) {
        r = r < 0 ? -r : r;
        return r == ECONNREFUSED || r == EHOSTUNREACH || r == ENETUNREACH || r == ETIMEDOUT ||
               r == EHOSTDOWN;
}
