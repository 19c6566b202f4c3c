/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The few systemd idioms modelgate uses everywhere: scope-bound cleanup,
 * ownership transfer, array sizes. Written from the public description in
 * systemd's docs/CODING_STYLE.md, not copied. */

#include <errno.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define _cleanup_(f) __attribute__((cleanup(f)))
#define _unused_ __attribute__((unused))
#define _printf_(a, b) __attribute__((format(printf, a, b)))
#define _noreturn_ __attribute__((noreturn))
#define _always_inline_ inline __attribute__((always_inline))
#define _likely_(x) (__builtin_expect(!!(x), 1))
#define _unlikely_(x) (__builtin_expect(!!(x), 0))

#define ELEMENTSOF(x) (sizeof(x) / sizeof((x)[0]))
/* each argument evaluated once, as systemd's: MAX(client_now(c) - start, 1) read the clock twice */
#define MIN(a, b)                                                                                           \
        ({                                                                                                  \
                __typeof__(a) _min_a = (a);                                                                 \
                __typeof__(b) _min_b = (b);                                                                 \
                _min_a < _min_b ? _min_a : _min_b;                                                          \
        })
#define MAX(a, b)                                                                                           \
        ({                                                                                                  \
                __typeof__(a) _max_a = (a);                                                                 \
                __typeof__(b) _max_b = (b);                                                                 \
                _max_a > _max_b ? _max_a : _max_b;                                                          \
        })

#define TAKE_PTR(p)                                                                                         \
        ({                                                                                                  \
                __typeof__(p) _p = (p);                                                                     \
                (p) = NULL;                                                                                 \
                _p;                                                                                         \
        })
#define TAKE_FD(fd)                                                                                         \
        ({                                                                                                  \
                int _fd = (fd);                                                                             \
                (fd) = -1;                                                                                  \
                _fd;                                                                                        \
        })

static inline void freep(void *p) {
        free(*(void **)p);
}
#define _cleanup_free_ _cleanup_(freep)

static inline void *mfree(void *p) {
        free(p);
        return NULL;
}

static inline int safe_close(int fd) {
        if (fd >= 0) {
                int saved = errno;
                (void)close(fd);
                errno = saved;
        }
        return -1;
}
static inline void closep(int *fd) {
        safe_close(*fd);
}
#define _cleanup_close_ _cleanup_(closep)

#define DEFINE_TRIVIAL_CLEANUP_FUNC(type, func)                                                             \
        static inline void func##p(type *p) {                                                               \
                if (*p)                                                                                     \
                        func(*p);                                                                           \
        }

static inline void strv_free(char **l) {
        if (!l)
                return;
        for (char **i = l; *i; i++)
                free(*i);
        free(l);
}
DEFINE_TRIVIAL_CLEANUP_FUNC(char **, strv_free);
#define _cleanup_strv_free_ _cleanup_(strv_freep)

static inline size_t strv_length(char *const *l) {
        size_t n = 0;
        if (l)
                while (l[n])
                        n++;
        return n;
}

#define STRV_FOREACH(s, l) for (char *const *s = (l); s && *s; s++)

#define streq(a, b) (strcmp((a), (b)) == 0)
#define strcaseeq(a, b) (strcasecmp((a), (b)) == 0)

static inline bool streq_ptr(const char *a, const char *b) {
        return a && b ? streq(a, b) : a == b;
}

static inline const char *startswith(const char *s, const char *prefix) {
        size_t l = strlen(prefix);
        return strncmp(s, prefix, l) == 0 ? s + l : NULL;
}

static inline void *memdup(const void *p, size_t n) {
        void *q = malloc(n ?: 1);
        return q ? memcpy(q, p, n) : NULL;
}

/* *p becomes a copy of s (NULL stays NULL); -ENOMEM leaves *p as it was. */
static inline int free_and_strdup(char **p, const char *s) {
        char *t = NULL;

        if (s && !(t = strdup(s)))
                return -ENOMEM;
        free(*p);
        *p = t;
        return 0;
}

static inline bool strv_isempty(char *const *l) {
        return !l || !*l;
}

static inline const char *strna(const char *s) {
        return s ?: "n/a";
}

/* A span of bytes that does not own its memory. */
typedef struct {
        const char *p;
        size_t n;
} Span;

#define container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))
