/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "modelgated/access.h"
#include "tests.h"

TEST(anonymous_address) {
        char b[INET6_ADDRSTRLEN + 8];
        ASSERT_STREQ(access_client_address("192.0.2.7", b), "192.0.2.7");
        /* one IPv6 client has a /64: any address in it counts as one */
        ASSERT_STREQ(access_client_address("2001:db8:1:2:aaaa:bbbb:cccc:dddd", b), "2001:db8:1:2::/64");
        ASSERT_STREQ(access_client_address("2001:db8:1:2::1", b), "2001:db8:1:2::/64");
        ASSERT_STREQ(access_client_address("::ffff:192.0.2.7", b), "192.0.2.7");
        ASSERT_STREQ(access_client_address("::1", b), "::/64");
        ASSERT_STREQ(access_client_address("local", b), "local");
}

TESTS_MAIN
