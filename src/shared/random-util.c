/* SPDX-License-Identifier: LGPL-2.1-or-later */

#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "shared/macro.h"
#include "shared/random-util.h"
#include "shared/time-util.h"

void random_seed(void *p, size_t n) {
        uint64_t w;

        if (getrandom(p, n, GRND_NONBLOCK) == (ssize_t)n)
                return;
        memset(p, 0, n);
        w = now_usec(CLOCK_REALTIME) ^ ((uint64_t)getpid() << 32);
        memcpy(p, &w, MIN(n, sizeof(w)));
}
