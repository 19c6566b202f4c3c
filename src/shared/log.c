/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include "shared/log.h"

static int max_level = LOG_INFO;
static int use_prefix = -1; /* -1: decide on first use */

void log_set_max_level(int level) {
        max_level = level;
}

int log_get_max_level(void) {
        return max_level;
}

void log_set_prefix(bool on) {
        use_prefix = on;
}

int log_internal(int level, int error, const char *file, int line, const char *fmt, ...) {
        char buf[4096];
        va_list ap;

        (void)file;
        (void)line;

        if (use_prefix < 0)
                use_prefix = !isatty(STDERR_FILENO);

        /* %m must mean the error we were given, not whatever errno is now */
        errno = error;
        va_start(ap, fmt);
        (void)vsnprintf(buf, sizeof(buf), fmt, ap);
        va_end(ap);

        if (use_prefix)
                fprintf(stderr, "<%i>%s\n", LOG_PRI(level), buf);
        else
                fprintf(stderr, "%s\n", buf);

        return -error;
}
