/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* rule:refusal-words: text of someone else's (a host's gpu.owner line, a Host header) that goes into a
 * refusal is rid of the words that make agents retry it. */

#include <regex.h>
#include <string.h>

#include "modelgated/api/refusal-words.h"
#include "tests.h"

static char *strip(const char *in, size_t expect_n) {
        static char buf[512];

        snprintf(buf, sizeof(buf), "%s", in);
        ASSERT_EQ(refusal_words_strip(buf), expect_n);
        return buf;
}

TEST(the_words_of_an_owner_line_are_left_out) {
        ASSERT_STREQ(strip("bob: server error hunt, rate-limit 503 tests (Overloaded; TIMEOUT at 18:00)", 5),
                     "bob: … hunt, … … tests (…; … at 18:00)");
        ASSERT_STREQ(strip("alice's training run", 0), "alice's training run");
        /* pi's ".?": one character or none, a UTF-8 one whole */
        ASSERT_STREQ(strip("ratelimit rate limit rate—limit rate  limit", 3), "… … … rate  limit");
        ASSERT_STREQ(strip("service_unavailable, internal.error, connection refused", 3), "…, …, …");
        /* anywhere, as pi matches: inside numbers and words */
        ASSERT_STREQ(strip("room 15030, x-api-keys, determinated", 3), "room 1…0, …s, de…");
        ASSERT_STREQ(strip("", 0), "");
}

TEST(a_replacement_that_joins_two_words_is_caught_too) {
        /* "rate503limit": the number goes, and "rate…limit" is pi's "rate.?limit" */
        ASSERT_STREQ(strip("rate503limit", 2), "…");
        ASSERT_STREQ(strip("60429", 1), "60…");
}

/* pi's own pattern, as POSIX extended regex (the same here: ASCII, no look-around), finds nothing in
 * what was stripped */
TEST(pis_pattern_finds_nothing_after) {
        regex_t re;
        const char *samples[] = {
                "Overloaded_error: too many requests; SERVICE UNAVAILABLE",
                "terminated, other side closed, fetch failed, upstream_connect, reset before headers",
                "retry delay 5, 429 500 502 503 504, connection-error, prompt is too long",
                "ratelimitratelimit rate5033limit 5503504",
        };
        ASSERT_OK(
                regcomp(&re,
                        "overloaded|rate.?limit|too many requests|429|500|502|503|504|service.?unavailable|"
                        "server.?error|internal.?error|connection.?error|connection.?refused|other side "
                        "closed|fetch failed|upstream.?connect|reset before headers|terminated|retry delay|"
                        "timeout|x-api-key|prompt is too long",
                        REG_EXTENDED | REG_ICASE | REG_NOSUB));
        for (size_t i = 0; i < sizeof(samples) / sizeof(samples[0]); i++) {
                char buf[512];
                snprintf(buf, sizeof(buf), "%s", samples[i]);
                ASSERT_TRUE(regexec(&re, buf, 0, NULL, 0) == 0);
                ASSERT_TRUE(refusal_words_strip(buf) > 0);
                if (regexec(&re, buf, 0, NULL, 0) == 0)
                        FAIL("a retry word is left in '%s'", buf);
        }
        regfree(&re);
}

TESTS_MAIN
