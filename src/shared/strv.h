/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* NULL-terminated string arrays, as systemd's strv.h, only what modelgate needs. */

#include <stdarg.h>
#include <stdbool.h>

#include "shared/macro.h"

/* Appends a copy of s. 0 or -ENOMEM (l is unchanged then). */
int strv_extend(char ***l, const char *s);
/* Appends s itself (taken on success). */
int strv_push(char ***l, char *s);
bool strv_contains(char *const *l, const char *s);
bool strv_equal(char *const *a, char *const *b);
/* NULL: out of memory (an empty list copies to an empty one) */
char **strv_copy(char *const *l);
#define STRV_MAKE(...) ((char *[]){__VA_ARGS__, NULL})
#define STR_IN_SET(x, ...) strv_contains(STRV_MAKE(__VA_ARGS__), (x))
/* Splits like a POSIX shell word list without expansion: blanks separate words, '…' and "…" quote,
 * a backslash escapes the next character. -EINVAL on an open quote or a trailing backslash. */
int strv_split_words(const char *s, char ***ret);
/* "a b c" for logs; NULL on ENOMEM. */
char *strv_join(char *const *l, const char *sep);
