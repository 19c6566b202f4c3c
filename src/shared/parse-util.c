/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <string.h>
#include <strings.h>

#include "shared/macro.h"
#include "shared/parse-util.h"

int safe_atou64(const char *s, uint64_t *ret) {
        uint64_t v = 0;

        if (!s || !isdigit((unsigned char)*s))
                return -EINVAL;
        for (; *s; s++) {
                if (!isdigit((unsigned char)*s))
                        return -EINVAL;
                if (v > (UINT64_MAX - 9) / 10)
                        return -ERANGE;
                v = v * 10 + (uint64_t)(*s - '0');
        }
        *ret = v;
        return 0;
}

int parse_size(const char *s, uint64_t *ret) {
        uint64_t v = 0, mult = 1;
        const char *p = s;

        if (!s)
                return -EINVAL;
        while (isspace((unsigned char)*p))
                p++;
        if (!isdigit((unsigned char)*p))
                return -EINVAL;
        for (; isdigit((unsigned char)*p); p++) {
                if (v > (UINT64_MAX - 9) / 10)
                        return -ERANGE;
                v = v * 10 + (uint64_t)(*p - '0');
        }
        switch (*p) {
        case 'K':
                mult = 1024ULL, p++;
                break;
        case 'M':
                mult = 1024ULL * 1024, p++;
                break;
        case 'G':
                mult = 1024ULL * 1024 * 1024, p++;
                break;
        case 'T':
                mult = 1024ULL * 1024 * 1024 * 1024, p++;
                break;
        }
        if (*p == 'B')
                p++;
        while (isspace((unsigned char)*p))
                p++;
        if (*p)
                return -EINVAL;
        if (v > UINT64_MAX / mult)
                return -ERANGE;
        *ret = v * mult;
        return 0;
}

int parse_boolean(const char *s) {
        assert(s);
        static const char *const yes[] = {"1", "yes", "y", "true", "t", "on"};
        static const char *const no[] = {"0", "no", "n", "false", "f", "off"};

        for (size_t i = 0; i < ELEMENTSOF(yes); i++)
                if (strcasecmp(s, yes[i]) == 0)
                        return 1;
        for (size_t i = 0; i < ELEMENTSOF(no); i++)
                if (strcasecmp(s, no[i]) == 0)
                        return 0;
        return -EINVAL;
}
