/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "modelgated/address-count.h"
#include "tests.h"

TEST(counts_come_and_go) {
        AddressCount *t = NULL;
        char a[32];

        ASSERT_EQ(address_count_add(&t, "192.0.2.1"), 1);
        ASSERT_EQ(address_count_add(&t, "192.0.2.1"), 2);
        ASSERT_EQ(address_count_add(&t, "2001:db8::/64"), 1);
        address_count_remove(t, "192.0.2.1");
        ASSERT_EQ(address_count_add(&t, "192.0.2.1"), 2);
        /* many addresses, each gone again: the table stays usable (tombstones are swept) */
        for (int round = 0; round < 3; round++) {
                for (int i = 0; i < 5000; i++) {
                        snprintf(a, sizeof(a), "10.0.%d.%d", i / 256, i % 256);
                        ASSERT_EQ(address_count_add(&t, a), 1);
                }
                for (int i = 0; i < 5000; i++) {
                        snprintf(a, sizeof(a), "10.0.%d.%d", i / 256, i % 256);
                        address_count_remove(t, a);
                }
        }
        ASSERT_EQ(address_count_add(&t, "192.0.2.1"), 3);
        ASSERT_EQ(address_count_add(&t, "2001:db8::/64"), 2);
        address_count_remove(t, "not there");
        address_count_free(t);
}

TESTS_MAIN
