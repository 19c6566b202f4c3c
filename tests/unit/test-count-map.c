/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "shared/count-map.h"
#include "tests.h"

static uint64_t add(CountMap **m, const char *name) {
        uint64_t *n = count_map_get(m, name, true);
        ASSERT_TRUE(n);
        return ++*n;
}

static void sub(CountMap *m, const char *name) {
        uint64_t *n = count_map_get(&m, name, false);
        if (n && --*n == 0)
                count_map_remove(m, name);
}

TEST(counts_come_and_go) {
        CountMap *m = NULL;
        char a[32];

        ASSERT_NULL(count_map_get(&m, "x", false));
        ASSERT_EQ(add(&m, "192.0.2.1"), 1);
        ASSERT_EQ(add(&m, "192.0.2.1"), 2);
        ASSERT_EQ(add(&m, "2001:db8::/64"), 1);
        sub(m, "192.0.2.1");
        ASSERT_EQ(add(&m, "192.0.2.1"), 2);
        /* many names, each gone again: the table stays usable (tombstones are swept) */
        for (int round = 0; round < 3; round++) {
                for (int i = 0; i < 5000; i++) {
                        snprintf(a, sizeof(a), "10.0.%d.%d", i / 256, i % 256);
                        ASSERT_EQ(add(&m, a), 1);
                }
                ASSERT_EQ(count_map_size(m), 5002);
                for (int i = 0; i < 5000; i++) {
                        snprintf(a, sizeof(a), "10.0.%d.%d", i / 256, i % 256);
                        sub(m, a);
                }
        }
        ASSERT_EQ(add(&m, "192.0.2.1"), 3);
        ASSERT_EQ(add(&m, "2001:db8::/64"), 2);
        sub(m, "not there");
        /* iteration sees each live name once */
        size_t i = 0, seen = 0;
        const char *name;
        uint64_t n, sum = 0;
        while (count_map_next(m, &i, &name, &n)) {
                seen++;
                sum += n;
        }
        ASSERT_EQ(seen, 2);
        ASSERT_EQ(sum, 5);
        count_map_free(m);
}

TESTS_MAIN
