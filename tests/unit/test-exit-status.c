/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* rule:exit-status-words: systemd's own exit codes of an engine unit in words; an engine's own status as
 * the number it is. */

#include "modelgated/sched/exit-status.h"
#include "tests.h"

static const char *describe(int status) {
        static char buf[512];
        exit_status_describe(status, buf, sizeof(buf));
        return buf;
}

TEST(a_missing_binary_is_said_in_words) {
        ASSERT_STREQ(
                describe(203),
                ", exit status 203/EXEC: the engine's ExecStart= binary was not found or not executable");
        ASSERT_STREQ(exit_status_name(203), "EXEC");
}

TEST(the_codes_that_matter_have_their_names) {
        ASSERT_STREQ(exit_status_name(200), "CHDIR");
        ASSERT_STREQ(exit_status_name(217), "USER");
        ASSERT_STREQ(exit_status_name(226), "NAMESPACE");
        ASSERT_STREQ(exit_status_name(233), "RUNTIME_DIRECTORY");
        ASSERT_TRUE(exit_status_words(200) != NULL);
        ASSERT_TRUE(exit_status_words(217) != NULL);
        ASSERT_TRUE(exit_status_words(226) != NULL);
}

TEST(an_engines_own_status_stays_a_number) {
        ASSERT_STREQ(describe(1), ", exit status 1");
        ASSERT_STREQ(describe(127), ", exit status 127");
        ASSERT_STREQ(describe(255), ", exit status 255");
        /* systemd leaves gaps: 223, 234 and 244 are not its codes */
        ASSERT_TRUE(exit_status_name(223) == NULL);
        ASSERT_TRUE(exit_status_name(234) == NULL);
        ASSERT_STREQ(describe(234), ", exit status 234");
}

TEST(a_small_buffer_is_cut_and_terminated) {
        char buf[16];
        exit_status_describe(203, buf, sizeof(buf));
        ASSERT_STREQ(buf, ", exit status 2");
}

TESTS_MAIN
