/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "shared/macro.h"
#include "shared/time-util.h"

usec_t now_usec(int clock) {
        struct timespec ts;

        if (clock_gettime(clock, &ts) < 0)
                abort();
        return (usec_t)ts.tv_sec * USEC_PER_SEC + (usec_t)ts.tv_nsec / 1000;
}

static const struct {
        const char *suffix;
        usec_t usec;
} time_units[] = {
        /* longest first, so that "min" is not read as "m" + garbage */
        {"seconds", USEC_PER_SEC},
        {"second", USEC_PER_SEC},
        {"minutes", USEC_PER_MINUTE},
        {"minute", USEC_PER_MINUTE},
        {"months", 2629800ULL * USEC_PER_SEC},
        {"month", 2629800ULL * USEC_PER_SEC},
        {"hours", USEC_PER_HOUR},
        {"hour", USEC_PER_HOUR},
        {"years", 31557600ULL * USEC_PER_SEC},
        {"year", 31557600ULL * USEC_PER_SEC},
        {"weeks", 7 * USEC_PER_DAY},
        {"week", 7 * USEC_PER_DAY},
        {"days", USEC_PER_DAY},
        {"day", USEC_PER_DAY},
        {"usec", 1},
        {"msec", USEC_PER_MSEC},
        {"sec", USEC_PER_SEC},
        {"min", USEC_PER_MINUTE},
        {"hr", USEC_PER_HOUR},
        {"us", 1},
        {"µs", 1},
        {"ms", USEC_PER_MSEC},
        {"s", USEC_PER_SEC},
        {"m", USEC_PER_MINUTE},
        {"h", USEC_PER_HOUR},
        {"d", USEC_PER_DAY},
        {"w", 7 * USEC_PER_DAY},
        {"M", 2629800ULL * USEC_PER_SEC},
        {"y", 31557600ULL * USEC_PER_SEC},
};

int parse_timespan(const char *s, usec_t *ret) {
        usec_t total = 0;
        bool any = false;

        if (!s)
                return -EINVAL;
        while (isspace((unsigned char)*s))
                s++;
        if (streq(s, "infinity")) {
                *ret = USEC_INFINITY;
                return 0;
        }

        for (;;) {
                unsigned long long whole = 0, frac = 0, frac_div = 1;
                bool digits = false;
                usec_t mult = USEC_PER_SEC;
                size_t n;

                while (isspace((unsigned char)*s))
                        s++;
                if (*s == 0)
                        break;
                if (*s == '-' || *s == '+')
                        return -EINVAL;

                while (isdigit((unsigned char)*s)) {
                        if (whole > (UINT64_MAX - 9) / 10)
                                return -ERANGE;
                        whole = whole * 10 + (unsigned)(*s - '0');
                        digits = true;
                        s++;
                }
                if (*s == '.') {
                        s++;
                        while (isdigit((unsigned char)*s)) {
                                if (frac_div < 1000000000ULL) {
                                        frac = frac * 10 + (unsigned)(*s - '0');
                                        frac_div *= 10;
                                }
                                digits = true;
                                s++;
                        }
                }
                if (!digits)
                        return -EINVAL;

                while (isspace((unsigned char)*s))
                        s++;
                n = 0;
                for (size_t i = 0; i < ELEMENTSOF(time_units); i++) {
                        size_t l = strlen(time_units[i].suffix);
                        if (strncmp(s, time_units[i].suffix, l) == 0 && !isalpha((unsigned char)s[l])) {
                                mult = time_units[i].usec;
                                n = l;
                                break;
                        }
                }
                if (n == 0 && isalpha((unsigned char)*s))
                        return -EINVAL;
                s += n;

                if (whole > UINT64_MAX / mult)
                        return -ERANGE;
                usec_t v = whole * mult + (usec_t)((long double)frac * mult / frac_div);
                if (total > UINT64_MAX - 1 - v)
                        return -ERANGE;
                total += v;
                any = true;
        }

        if (!any)
                return -EINVAL;
        *ret = total;
        return 0;
}

char *format_timespan(char *buf, size_t l, usec_t t) {
        static const struct {
                const char *suffix;
                usec_t usec;
        } table[] = {
                {"d", USEC_PER_DAY}, {"h", USEC_PER_HOUR},  {"min", USEC_PER_MINUTE},
                {"s", USEC_PER_SEC}, {"ms", USEC_PER_MSEC}, {"us", 1},
        };
        char *p = buf;
        bool something = false;

        if (l < 2)
                return NULL;
        if (t == USEC_INFINITY)
                return snprintf(buf, l, "infinity") < (int)l ? buf : NULL;
        if (t == 0)
                return snprintf(buf, l, "0") < (int)l ? buf : NULL;

        for (size_t i = 0; i < ELEMENTSOF(table) && t > 0; i++) {
                if (t < table[i].usec)
                        continue;
                usec_t a = t / table[i].usec;
                int k = snprintf(p, l, "%s%llu%s", something ? " " : "", (unsigned long long)a,
                                 table[i].suffix);
                if (k < 0 || (size_t)k >= l)
                        return NULL;
                p += k;
                l -= (size_t)k;
                t -= a * table[i].usec;
                something = true;
        }
        return buf;
}
