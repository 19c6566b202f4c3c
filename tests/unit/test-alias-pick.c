/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Which target of an alias a request goes to (SPEC §4, aliases): each policy against the states its rule
 * names, the refusal order (each target once), the spread memory on a fake clock, and the scheduler's
 * "a switch is pending" that keeps an alias off a host about to switch away. A state list reads as one
 * letter per target: W warm, F free (can start), O other (waits for a switch), D down. */

#include <string.h>

#include "modelgated/alias-pick.h"
#include "modelgated/sched.h"
#include "tests.h"

#define S(x) ((usec_t)(x)*USEC_PER_SEC)

static size_t targets(const char *states, const unsigned *load, AliasTarget *t) {
        size_t n = strlen(states);
        for (size_t i = 0; i < n; i++)
                t[i] = (AliasTarget){
                        .state = states[i] == 'W'   ? ALIAS_TARGET_WARM
                                 : states[i] == 'F' ? ALIAS_TARGET_FREE
                                 : states[i] == 'O' ? ALIAS_TARGET_OTHER
                                                    : ALIAS_TARGET_DOWN,
                        .load = load ? load[i] : 0,
                };
        return n;
}

static ssize_t pick(AliasPolicy p, const char *states, const unsigned *load, uint64_t tried, ssize_t last,
                    const char **why) {
        AliasTarget t[ALIAS_TARGETS_MAX];
        size_t n = targets(states, load, t);
        return alias_pick(p, t, n, tried, last, why);
}

TEST(warm_prefers_an_engine_that_is_up_then_one_that_can_start_then_any_host_up) {
        const char *why;
        ASSERT_EQ(pick(ALIAS_POLICY_WARM, "OFW", NULL, 0, -1, &why), 2);
        ASSERT_STREQ(why, "engine up");
        ASSERT_EQ(pick(ALIAS_POLICY_WARM, "OWW", NULL, 0, -1, &why), 1); /* the first warm one */
        ASSERT_EQ(pick(ALIAS_POLICY_WARM, "DOF", NULL, 0, -1, &why), 2);
        ASSERT_STREQ(why, "can start its engine without stopping another");
        ASSERT_EQ(pick(ALIAS_POLICY_WARM, "DOO", NULL, 0, -1, &why), 1);
        ASSERT_STREQ(why, "host up, waits for a switch");
        /* every host down: the first, whose refusal moves the request on */
        ASSERT_EQ(pick(ALIAS_POLICY_WARM, "DD", NULL, 0, -1, &why), 0);
        ASSERT_STREQ(why, "every target left is down");
}

TEST(ordered_takes_the_first_host_that_is_up_whatever_runs_there) {
        const char *why;
        ASSERT_EQ(pick(ALIAS_POLICY_ORDERED, "DOW", NULL, 0, -1, &why), 1);
        ASSERT_STREQ(why, "first whose host is up");
        ASSERT_EQ(pick(ALIAS_POLICY_ORDERED, "FW", NULL, 0, -1, &why), 0);
}

TEST(a_refusal_moves_on_each_target_at_most_once) {
        const char *why;
        uint64_t tried = 0;
        ssize_t i;

        /* warm order: W(2), F(0), O(1); then nothing */
        i = pick(ALIAS_POLICY_WARM, "FOW", NULL, tried, -1, &why);
        ASSERT_EQ(i, 2);
        tried |= UINT64_C(1) << i;
        i = pick(ALIAS_POLICY_WARM, "FOW", NULL, tried, -1, &why);
        ASSERT_EQ(i, 0);
        tried |= UINT64_C(1) << i;
        i = pick(ALIAS_POLICY_WARM, "FOW", NULL, tried, -1, &why);
        ASSERT_EQ(i, 1);
        tried |= UINT64_C(1) << i;
        ASSERT_EQ(pick(ALIAS_POLICY_WARM, "FOW", NULL, tried, -1, &why), -1);
        ASSERT_STREQ(why, "every target was tried");
        /* a tried down target is not tried again either */
        ASSERT_EQ(pick(ALIAS_POLICY_ORDERED, "DD", NULL, 1, -1, &why), 1);
        ASSERT_EQ(pick(ALIAS_POLICY_ORDERED, "DD", NULL, 3, -1, &why), -1);
}

TEST(spread_takes_the_least_loaded_warm_target_and_keeps_a_client_where_it_was) {
        const char *why;
        unsigned load[] = {1, 0, 0};

        ASSERT_EQ(pick(ALIAS_POLICY_SPREAD, "WWF", load, 0, -1, &why), 1);
        ASSERT_STREQ(why, "fewest requests");
        /* its last target, as busy as another: kept */
        unsigned even[] = {1, 1, 0};
        ASSERT_EQ(pick(ALIAS_POLICY_SPREAD, "WWF", even, 0, 0, &why), 0);
        ASSERT_STREQ(why, "this client's last target");
        /* its last target is the busiest: moved */
        ASSERT_EQ(pick(ALIAS_POLICY_SPREAD, "WWF", load, 0, 0, &why), 1);
        /* its last target is not warm any more: moved */
        ASSERT_EQ(pick(ALIAS_POLICY_SPREAD, "OWF", even, 0, 0, &why), 1);
        /* no warm target: as warm */
        ASSERT_EQ(pick(ALIAS_POLICY_SPREAD, "OF", NULL, 0, -1, &why), 1);
        ASSERT_STREQ(why, "can start its engine without stopping another");
        /* the only warm one, however busy */
        unsigned busy[] = {5, 0};
        ASSERT_EQ(pick(ALIAS_POLICY_SPREAD, "WO", busy, 0, 0, &why), 0);
}

TEST(memory_recalls_per_alias_and_client_and_forgets_after_an_hour) {
        static AliasMemory m;

        alias_memory_clear(&m);
        ASSERT_EQ(alias_memory_recall(&m, "laguna", "10.0.0.1", S(1)), -1);
        alias_memory_store(&m, "laguna", "10.0.0.1", 1, S(1));
        alias_memory_store(&m, "laguna", "10.0.0.2", 0, S(1));
        ASSERT_EQ(alias_memory_recall(&m, "laguna", "10.0.0.1", S(2)), 1);
        ASSERT_EQ(alias_memory_recall(&m, "laguna", "10.0.0.2", S(2)), 0);
        ASSERT_EQ(alias_memory_recall(&m, "flint", "10.0.0.1", S(2)), -1);
        /* "a" + "b\0…" and "ab" + "…" are different clients of different aliases */
        alias_memory_store(&m, "a", "b", 1, S(1));
        ASSERT_EQ(alias_memory_recall(&m, "ab", "", S(2)), -1);
        ASSERT_EQ(alias_memory_recall(&m, "laguna", "10.0.0.1", S(1) + ALIAS_MEMORY_USEC - 1), 1);
        ASSERT_EQ(alias_memory_recall(&m, "laguna", "10.0.0.1", S(1) + ALIAS_MEMORY_USEC), -1);
        alias_memory_clear(&m);
        ASSERT_EQ(alias_memory_recall(&m, "laguna", "10.0.0.2", S(2)), -1);
}

TEST(a_switch_is_pending_while_a_request_waits_for_another_engine) {
        SchedConfig c = {.hold_down = S(30), .idle_stop = S(900), .wait_budget = S(900)};
        SchedRequest r[2] = {};
        SchedAction a;
        Sched s;

        ASSERT_OK(sched_init(&s, &c, 2));
        ASSERT_TRUE(!sched_add(&s, 0, &r[0], 0));
        ASSERT_TRUE(sched_next(&s, 0, &a) && a.type == SCHED_START);
        ASSERT_TRUE(!sched_switch_pending(&s)); /* starting engine 0 with nothing running: no switch away */
        sched_engine_up(&s, S(1), 0);
        ASSERT_TRUE(sched_next(&s, S(1), &a) && a.type == SCHED_GO);
        ASSERT_TRUE(!sched_switch_pending(&s));
        ASSERT_TRUE(!sched_add(&s, S(2), &r[1], 1)); /* waits for engine 1: engine 0 will go */
        ASSERT_TRUE(sched_switch_pending(&s));
        sched_remove(&s, S(3), &r[1]);
        ASSERT_TRUE(!sched_switch_pending(&s));
        sched_remove(&s, S(3), &r[0]);
        sched_done(&s);
}

TESTS_MAIN
