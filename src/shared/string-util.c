/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <ctype.h>
#include <string.h>

#include "shared/string-util.h"

char *strstrip(char *s) {
        while (isspace((unsigned char)*s))
                s++;
        size_t l = strlen(s);
        while (l > 0 && isspace((unsigned char)s[l - 1]))
                s[--l] = 0;
        return s;
}
