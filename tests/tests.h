/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* A tiny test harness: TEST(name) registers a case, ASSERT_* print file:line and the values. */

#undef NDEBUG
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shared/log.h"

typedef struct TestCase {
        const char *name;
        void (*fn)(void);
} TestCase;

#define MAX_TESTS 256
extern TestCase tests_table[MAX_TESTS];
extern size_t tests_n;

#define TEST(n)                                                                                             \
        static void test_##n(void);                                                                         \
        __attribute__((constructor)) static void register_##n(void) {                                       \
                tests_table[tests_n++] = (TestCase){#n, test_##n};                                          \
        }                                                                                                   \
        static void test_##n(void)

#define FAIL(...)                                                                                           \
        do {                                                                                                \
                fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                             \
                fprintf(stderr, __VA_ARGS__);                                                               \
                fputc('\n', stderr);                                                                        \
                abort();                                                                                    \
        } while (0)

#define ASSERT_TRUE(x)                                                                                      \
        do {                                                                                                \
                if (!(x))                                                                                   \
                        FAIL("expected: %s", #x);                                                           \
        } while (0)
#define ASSERT_EQ(a, b)                                                                                     \
        do {                                                                                                \
                long long _a = (long long)(a), _b = (long long)(b);                                         \
                if (_a != _b)                                                                               \
                        FAIL("%s == %s: %lld != %lld", #a, #b, _a, _b);                                     \
        } while (0)
#define ASSERT_OK(a) ASSERT_EQ(a, 0)
#define ASSERT_NULL(x)                                                                                      \
        do {                                                                                                \
                __typeof__(x) _x = (x);                                                                     \
                if (_x) {                                                                                   \
                        free(_x);                                                                           \
                        FAIL("expected NULL: %s", #x);                                                      \
                }                                                                                           \
        } while (0)
#define ASSERT_STREQ(a, b)                                                                                  \
        do {                                                                                                \
                const char *_a = (a), *_b = (b);                                                            \
                if (!_a || !_b || strcmp(_a, _b) != 0)                                                      \
                        FAIL("%s == %s: '%s' != '%s'", #a, #b, _a ?: "(null)", _b ?: "(null)");             \
        } while (0)

#define TESTS_MAIN                                                                                          \
        TestCase tests_table[MAX_TESTS];                                                                    \
        size_t tests_n;                                                                                     \
        int main(void) {                                                                                    \
                log_set_max_level(getenv("TEST_VERBOSE") ? LOG_DEBUG : LOG_CRIT);                           \
                for (size_t i = 0; i < tests_n; i++) {                                                      \
                        printf("%s... ", tests_table[i].name);                                              \
                        fflush(stdout);                                                                     \
                        tests_table[i].fn();                                                                \
                        printf("ok\n");                                                                     \
                }                                                                                           \
                return tests_n > 0 ? 0 : 1;                                                                 \
        }
