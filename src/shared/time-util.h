/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stddef.h>
#include <stdint.h>

typedef uint64_t usec_t;

#define USEC_INFINITY ((usec_t)UINT64_MAX)
#define USEC_PER_SEC ((usec_t)1000000ULL)
#define USEC_PER_MSEC ((usec_t)1000ULL)
#define USEC_PER_MINUTE ((usec_t)(60ULL * USEC_PER_SEC))
#define USEC_PER_HOUR ((usec_t)(60ULL * USEC_PER_MINUTE))
#define USEC_PER_DAY ((usec_t)(24ULL * USEC_PER_HOUR))

usec_t now_usec(int clock);

/* systemd.time(7) time spans: "30s", "15min", "1h 30min", "infinity"; a bare number is seconds.
 * Returns 0, or -EINVAL/-ERANGE. */
int parse_timespan(const char *s, usec_t *ret);

/* "15min", "1h 30min", "1.500s"… in the style of systemd's format_timespan(); NULL if buf too small. */
char *format_timespan(char *buf, size_t l, usec_t t);
#define FORMAT_TIMESPAN_MAX 64
