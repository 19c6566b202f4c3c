/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <assert.h>
#include <string.h>

#include "shared/strv.h"

int strv_push(char ***l, char *s) {
        assert(l);
        size_t n = strv_length(*l);
        char **nl = realloc(*l, sizeof(char *) * (n + 2));

        if (!nl)
                return -ENOMEM;
        nl[n] = s;
        nl[n + 1] = NULL;
        *l = nl;
        return 0;
}

int strv_extend(char ***l, const char *s) {
        char *d = strdup(s);

        if (!d)
                return -ENOMEM;
        if (strv_push(l, d) < 0) {
                free(d);
                return -ENOMEM;
        }
        return 0;
}

bool strv_contains(char *const *l, const char *s) {
        STRV_FOREACH (i, l)
                if (streq(*i, s))
                        return true;
        return false;
}

int strv_split_words(const char *s, char ***ret) {
        assert(s);
        _cleanup_strv_free_ char **l = NULL;
        _cleanup_free_ char *w = malloc(strlen(s) + 1);
        size_t n = 0;
        bool in_word = false;
        char quote = 0;

        if (!w)
                return -ENOMEM;
        for (const char *p = s;; p++) {
                char ch = *p;
                if (!ch) {
                        if (quote)
                                return -EINVAL;
                        break;
                }
                if (quote) {
                        if (ch == quote)
                                quote = 0;
                        else if (ch == '\\' && quote == '"' && p[1]) {
                                w[n++] = *++p;
                        } else
                                w[n++] = ch;
                        continue;
                }
                if (ch == ' ' || ch == '\t' || ch == '\n') {
                        if (in_word) {
                                w[n] = 0;
                                if (strv_extend(&l, w) < 0)
                                        return -ENOMEM;
                                n = 0;
                                in_word = false;
                        }
                        continue;
                }
                in_word = true;
                if (ch == '\'' || ch == '"')
                        quote = ch;
                else if (ch == '\\') {
                        if (!p[1])
                                return -EINVAL;
                        w[n++] = *++p;
                } else
                        w[n++] = ch;
        }
        if (in_word) {
                w[n] = 0;
                if (strv_extend(&l, w) < 0)
                        return -ENOMEM;
        }
        if (!l && !(l = calloc(1, sizeof(char *))))
                return -ENOMEM;
        *ret = TAKE_PTR(l);
        return 0;
}

char *strv_join(char *const *l, const char *sep) {
        size_t n = 1, k = strlen(sep);
        char *r, *p;

        STRV_FOREACH (i, l)
                n += strlen(*i) + k;
        r = p = malloc(n);
        if (!r)
                return NULL;
        *p = 0;
        STRV_FOREACH (i, l) {
                if (i != l)
                        p = stpcpy(p, sep);
                p = stpcpy(p, *i);
        }
        return r;
}

bool strv_equal(char *const *a, char *const *b) {
        size_t i = 0;

        for (; a && a[i] && b && b[i]; i++)
                if (!streq(a[i], b[i]))
                        return false;
        return !(a && a[i]) && !(b && b[i]);
}

char **strv_copy(char *const *l) {
        _cleanup_strv_free_ char **c = NULL;

        STRV_FOREACH (i, l)
                if (strv_extend(&c, *i) < 0)
                        return NULL;
        return c ? TAKE_PTR(c) : calloc(1, sizeof(char *));
}
