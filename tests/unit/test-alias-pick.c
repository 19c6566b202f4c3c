/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Which target of an alias a request goes to (rule:alias-order): each policy against the states its rule
 * names, the refusal order (each target once), the spread memory on a fake clock, and the scheduler's
 * "a switch is pending" that keeps an alias off a host about to switch away; the memory bounded, and fair to
 * an agent that keeps coming back, whatever other addresses and one /64 send. A state list reads as one
 * letter per target: W warm, F free (can start), O other (waits for a switch), D down. */

#include <arpa/inet.h>
#include <string.h>

#include "modelgated/access/access.h"
#include "modelgated/sched/alias-pick.h"
#include "modelgated/sched/sched.h"
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

/* An anonymous client as the server sees it: its address, counted against what [Access] counts (its /64) */
static ssize_t recall(AliasMemory *m, const char *alias, const char *address, usec_t now) {
        char prefix[INET6_ADDRSTRLEN + 8];
        AliasClient c = {.address = address, .prefix = access_client_address(address, prefix)};
        return alias_memory_recall(m, alias, &c, now);
}

static void store(AliasMemory *m, const char *alias, const char *address, size_t target, usec_t now) {
        char prefix[INET6_ADDRSTRLEN + 8];
        AliasClient c = {.address = address, .prefix = access_client_address(address, prefix)};
        alias_memory_store(m, alias, &c, target, now);
}

static ssize_t recall_key(AliasMemory *m, const char *alias, const char *digest, usec_t now) {
        return alias_memory_recall(m, alias, &(AliasClient){.key = digest}, now);
}

static void store_key(AliasMemory *m, const char *alias, const char *digest, size_t target, usec_t now) {
        alias_memory_store(m, alias, &(AliasClient){.key = digest}, target, now);
}

/* The i-th of many IPv4 addresses, none of them 10.0.0.1–10.0.0.9 */
static const char *ipv4(char buf[static INET6_ADDRSTRLEN], unsigned i) {
        snprintf(buf, INET6_ADDRSTRLEN, "10.%u.%u.%u", 1 + (i >> 16) % 200, (i >> 8) & 0xff, i & 0xff);
        return buf;
}

DEFINE_TRIVIAL_CLEANUP_FUNC(AliasMemory *, alias_memory_free);

TEST(memory_recalls_per_alias_and_client_and_forgets_after_an_hour) {
        _cleanup_(alias_memory_freep) AliasMemory *m = alias_memory_new();

        ASSERT_TRUE(m);
        ASSERT_EQ(recall(m, "laguna", "10.0.0.1", S(1)), -1);
        store(m, "laguna", "10.0.0.1", 1, S(1));
        store(m, "laguna", "10.0.0.2", 0, S(1));
        ASSERT_EQ(recall(m, "laguna", "10.0.0.1", S(2)), 1);
        ASSERT_EQ(recall(m, "laguna", "10.0.0.2", S(2)), 0);
        ASSERT_EQ(recall(m, "flint", "10.0.0.1", S(2)), -1);
        /* "a" + "b" and "ab" + "" are different clients of different aliases */
        store(m, "a", "b", 1, S(1));
        ASSERT_EQ(recall(m, "ab", "", S(2)), -1);
        /* a key and an address that read alike are different clients */
        ASSERT_EQ(recall_key(m, "laguna", "10.0.0.1", S(2)), -1);
        ASSERT_EQ(recall(m, "laguna", "10.0.0.1", S(1) + ALIAS_MEMORY_USEC - 1), 1);
        ASSERT_EQ(recall(m, "laguna", "10.0.0.1", S(1) + ALIAS_MEMORY_USEC), -1);
        /* two addresses of one /64 are two clients */
        store(m, "laguna", "2001:db8:1:2::10", 1, S(1));
        store(m, "laguna", "2001:db8:1:2::11", 0, S(1));
        ASSERT_EQ(recall(m, "laguna", "2001:db8:1:2::10", S(2)), 1);
        ASSERT_EQ(recall(m, "laguna", "2001:db8:1:2::11", S(2)), 0);
        alias_memory_clear(m);
        ASSERT_EQ(recall(m, "laguna", "10.0.0.2", S(2)), -1);
        ASSERT_EQ(alias_memory_size(m), 0u);
}

TEST(a_keyed_agent_keeps_its_target_however_many_addresses_ask_after_it) {
        _cleanup_(alias_memory_freep) AliasMemory *m = alias_memory_new();
        char a[INET6_ADDRSTRLEN];

        ASSERT_TRUE(m);
        store_key(m, "laguna", "3f2a9c1e00000000", 1, S(1));
        for (unsigned i = 0; i < 5500; i++)
                store(m, "laguna", ipv4(a, i), i % 2, S(2));
        ASSERT_EQ(recall_key(m, "laguna", "3f2a9c1e00000000", S(3)), 1);
        /* nor do far more, coming back as often as they like */
        for (unsigned i = 0; i < 50000; i++) {
                store(m, "laguna", ipv4(a, i), 0, S(4));
                store(m, "laguna", ipv4(a, i), 0, S(4));
        }
        ASSERT_EQ(recall_key(m, "laguna", "3f2a9c1e00000000", S(5)), 1);
}

TEST(an_anonymous_agent_that_comes_back_outlasts_any_flood_of_addresses_seen_once) {
        _cleanup_(alias_memory_freep) AliasMemory *m = alias_memory_new();
        char a[INET6_ADDRSTRLEN];

        ASSERT_TRUE(m);
        /* two requests: protected */
        store(m, "laguna", "10.0.0.1", 1, S(1));
        store(m, "laguna", "10.0.0.1", 1, S(2));
        for (unsigned i = 0; i < 5500; i++)
                store(m, "laguna", ipv4(a, i), 0, S(3));
        ASSERT_EQ(recall(m, "laguna", "10.0.0.1", S(4)), 1);
        for (unsigned i = 5500; i < 100000; i++)
                store(m, "laguna", ipv4(a, i), 0, S(4));
        ASSERT_EQ(recall(m, "laguna", "10.0.0.1", S(5)), 1);

        /* a client seen once is on probation: pushed out by as many newer ones as the memory holds */
        alias_memory_clear(m);
        store(m, "laguna", "10.0.0.2", 1, S(1));
        for (unsigned i = 0; i < ALIAS_MEMORY_ENTRIES - 1; i++)
                store(m, "laguna", ipv4(a, i), 0, S(2));
        ASSERT_EQ(recall(m, "laguna", "10.0.0.2", S(3)), 1);
        store(m, "laguna", ipv4(a, ALIAS_MEMORY_ENTRIES), 0, S(3));
        ASSERT_EQ(recall(m, "laguna", "10.0.0.2", S(3)), -1);

        /* and the protected are a bounded share too: as many others that come back push an agent that
         * stopped out */
        alias_memory_clear(m);
        store(m, "laguna", "10.0.0.3", 1, S(1));
        store(m, "laguna", "10.0.0.3", 1, S(1));
        for (unsigned i = 0; i < ALIAS_MEMORY_ENTRIES; i++) {
                store(m, "laguna", ipv4(a, i), 0, S(2));
                store(m, "laguna", ipv4(a, i), 0, S(2));
        }
        ASSERT_EQ(recall(m, "laguna", "10.0.0.3", S(3)), -1);
        /* one that keeps sending among them keeps its target */
        alias_memory_clear(m);
        for (unsigned i = 0; i < 20 * ALIAS_MEMORY_ENTRIES; i++) {
                if (i % 1000 == 0)
                        store(m, "laguna", "10.0.0.4", 1, S(2));
                store(m, "laguna", ipv4(a, i), 0, S(2));
                store(m, "laguna", ipv4(a, i), 0, S(2));
        }
        ASSERT_EQ(recall(m, "laguna", "10.0.0.4", S(3)), 1);
}

TEST(one_ipv6_64_sending_from_ten_thousand_addresses_evicts_no_one_else) {
        _cleanup_(alias_memory_freep) AliasMemory *m = alias_memory_new();
        char a[INET6_ADDRSTRLEN];
        size_t before;

        ASSERT_TRUE(m);
        /* others, each seen once: on probation, the easiest to push out */
        for (unsigned i = 0; i < 100; i++) {
                store(m, "laguna", ipv4(a, i), i % 2, S(1));
                snprintf(a, sizeof(a), "2001:db8:%x::1", i);
                store(m, "laguna", a, i % 2, S(1));
        }
        store_key(m, "laguna", "3f2a9c1e00000000", 1, S(1));
        before = alias_memory_size(m);
        /* each address twice, to look like agents that come back */
        for (unsigned i = 0; i < 10000; i++) {
                snprintf(a, sizeof(a), "2001:db8:bad:1:%x:%x::%x", i >> 8, i & 0xff, i);
                store(m, "laguna", a, 0, S(2));
                store(m, "laguna", a, 0, S(2));
        }
        for (unsigned i = 0; i < 100; i++) {
                ASSERT_EQ(recall(m, "laguna", ipv4(a, i), S(3)), (ssize_t)(i % 2));
                snprintf(a, sizeof(a), "2001:db8:%x::1", i);
                ASSERT_EQ(recall(m, "laguna", a, S(3)), (ssize_t)(i % 2));
        }
        ASSERT_EQ(recall_key(m, "laguna", "3f2a9c1e00000000", S(3)), 1);
        /* it holds its own few, its latest */
        ASSERT_EQ(alias_memory_size(m), before + ALIAS_MEMORY_PER_PREFIX);
        snprintf(a, sizeof(a), "2001:db8:bad:1:%x:%x::%x", 9999 >> 8, 9999 & 0xff, 9999);
        ASSERT_EQ(recall(m, "laguna", a, S(3)), 0);
        ASSERT_EQ(recall(m, "laguna", "2001:db8:bad:1:0:0::0", S(3)), -1);

        /* in a full memory it takes the place of no more than its own few */
        alias_memory_clear(m);
        for (unsigned i = 0; i < ALIAS_MEMORY_ENTRIES; i++)
                store(m, "laguna", ipv4(a, i), 1, S(1));
        for (unsigned i = 0; i < 10000; i++) {
                snprintf(a, sizeof(a), "2001:db8:bad:1::%x", i);
                store(m, "laguna", a, 0, S(2));
        }
        unsigned kept = 0;
        for (unsigned i = 0; i < ALIAS_MEMORY_ENTRIES; i++)
                kept += recall(m, "laguna", ipv4(a, i), S(3)) == 1;
        ASSERT_EQ(kept, ALIAS_MEMORY_ENTRIES - ALIAS_MEMORY_PER_PREFIX);
}

TEST(the_memory_stays_bounded_and_one_client_holds_a_few_aliases_at_most) {
        _cleanup_(alias_memory_freep) AliasMemory *m = alias_memory_new();
        char a[INET6_ADDRSTRLEN], alias[16], key[17];

        ASSERT_TRUE(m);
        for (unsigned i = 0; i < 200000; i++) {
                snprintf(alias, sizeof(alias), "alias%u", i % 8);
                switch (i % 4) {
                case 0:
                        store(m, alias, ipv4(a, i), 0, S(1) + i);
                        break;
                case 1:
                        snprintf(a, sizeof(a), "2001:db8:%x:%x::1", i >> 16, i & 0xffff);
                        store(m, alias, a, 0, S(1) + i);
                        break;
                default:
                        snprintf(key, sizeof(key), "%016x", i);
                        store_key(m, alias, key, 0, S(1) + i);
                }
                ASSERT_TRUE(alias_memory_size(m) <= 2 * ALIAS_MEMORY_ENTRIES);
        }
        ASSERT_EQ(alias_memory_size(m), 2 * ALIAS_MEMORY_ENTRIES);
        /* a client on more aliases than its share replaces its own oldest */
        alias_memory_clear(m);
        for (unsigned i = 0; i < 100; i++) {
                snprintf(alias, sizeof(alias), "alias%u", i);
                store(m, alias, "10.0.0.1", 1, S(1));
                store_key(m, alias, "3f2a9c1e00000000", 1, S(1));
        }
        ASSERT_EQ(alias_memory_size(m), 2 * ALIAS_MEMORY_PER_PREFIX);
        ASSERT_EQ(recall(m, "alias99", "10.0.0.1", S(2)), 1);
        ASSERT_EQ(recall_key(m, "alias99", "3f2a9c1e00000000", S(2)), 1);
        ASSERT_EQ(recall(m, "alias0", "10.0.0.1", S(2)), -1);
        /* an hour on, what was kept is forgotten, and its place taken first */
        for (unsigned i = 0; i < ALIAS_MEMORY_ENTRIES; i++)
                store(m, "laguna", ipv4(a, i), 1, S(1) + ALIAS_MEMORY_USEC);
        ASSERT_EQ(alias_memory_size(m), ALIAS_MEMORY_ENTRIES + ALIAS_MEMORY_PER_PREFIX);
        ASSERT_EQ(recall(m, "laguna", ipv4(a, 0), S(1) + ALIAS_MEMORY_USEC), 1);
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
