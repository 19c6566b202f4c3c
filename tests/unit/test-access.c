/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "modelgated/records/access.h"
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

/* A tier sees a host's host-wide feed events ("<host>-*", its going down and coming back) when some
 * model of that host may be one of its own: judged by each glob's fixed beginning. */
TEST(host_allowed_by_a_globs_fixed_beginning) {
        char *models[] = {(char *)"3090-*", (char *)"a9-qwen-?", (char *)"laguna", (char *)"b*", NULL};
        TierConf tier = {.name = (char *)"t", .models = models};
        AccessCaller caller = {.tier = &tier};

        ASSERT_TRUE(access_host_allowed(&caller, "3090"));
        ASSERT_TRUE(access_host_allowed(&caller, "a9"));
        ASSERT_TRUE(access_host_allowed(&caller, "b"));       /* "b*" may match "b-x" */
        ASSERT_TRUE(access_host_allowed(&caller, "box.2"));   /* and "box.2-x" */
        ASSERT_TRUE(!access_host_allowed(&caller, "309"));    /* "3090-*" never matches "309-…" */
        ASSERT_TRUE(!access_host_allowed(&caller, "a"));      /* nor "a9-qwen-?" "a-…" */
        ASSERT_TRUE(!access_host_allowed(&caller, "lag"));    /* an alias's exact name is no host's model */
        ASSERT_TRUE(!access_host_allowed(&caller, "laguna")); /* not even of a host of its own name */
        ASSERT_TRUE(!access_host_allowed(&caller, "c"));

        char *escaped[] = {(char *)"\\3090-x", (char *)"[a]9-*", NULL};
        tier.models = escaped; /* a glob that begins with a special character may match any host */
        ASSERT_TRUE(access_host_allowed(&caller, "3090"));
        ASSERT_TRUE(access_host_allowed(&caller, "zz"));

        /* no tier, or one without Models=: every host */
        tier.models = NULL;
        ASSERT_TRUE(access_host_allowed(&caller, "c"));
        ASSERT_TRUE(access_host_allowed(&(AccessCaller){}, "c"));
}

TESTS_MAIN
