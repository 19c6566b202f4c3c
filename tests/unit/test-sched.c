/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The switch scheduler on a fake clock: one test per rule of SPEC §5, and the seed's two-client
 * timeline with every switch time as the rules predict. Actions are written as short words so a test
 * reads as the sequence it expects: "go:r0 start:B/r1 wait:B/r1 fail:r2:504 stop:A abandon:B". */

#include <stdio.h>

#include "modelgated/sched.h"
#include "tests.h"

#define S(x) ((usec_t)(x)*USEC_PER_SEC)
enum { A, B, C };

static SchedRequest req[32];
static const char *const engine_names[] = {"A", "B", "C"};

static void setup(Sched *s, usec_t hold, usec_t idle, usec_t budget) {
        SchedConfig c = {.hold_down = hold, .idle_stop = idle, .wait_budget = budget};
        ASSERT_OK(sched_init(s, &c, 3));
}

/* Every action sched_next() has now, as words. */
static const char *run(Sched *s, usec_t now) {
        static char out[512];
        size_t o = 0;
        SchedAction a;

        out[0] = 0;
        while (sched_next(s, now, &a)) {
                char w[64];
                int id = a.req ? (int)(a.req - req) : -1;
                switch (a.type) {
                case SCHED_GO:
                        snprintf(w, sizeof(w), "go:r%d", id);
                        break;
                case SCHED_FAIL:
                        snprintf(w, sizeof(w), "fail:r%d:%d", id, a.status);
                        break;
                case SCHED_START:
                        snprintf(w, sizeof(w), "start:%s/r%d", engine_names[a.engine], id);
                        break;
                case SCHED_STOP:
                        snprintf(w, sizeof(w), "stop:%s:%llus", engine_names[a.engine],
                                 (unsigned long long)(a.idle_for / USEC_PER_SEC));
                        break;
                case SCHED_WAIT:
                        snprintf(w, sizeof(w), "wait:%s/r%d", engine_names[a.engine], id);
                        break;
                case SCHED_ABANDON:
                        snprintf(w, sizeof(w), "abandon:%s", engine_names[a.engine]);
                        break;
                default:
                        FAIL("unexpected action %d", a.type);
                }
                o += (size_t)snprintf(out + o, sizeof(out) - o, "%s%s", o ? " " : "", w);
                ASSERT_TRUE(o < sizeof(out) - 1);
        }
        return out;
}

/* The usual start: engine A comes up at 0 for request r0, which is in flight. */
static void serving_r0_on_a(Sched *s, usec_t hold, usec_t idle, usec_t budget) {
        setup(s, hold, idle, budget);
        ASSERT_TRUE(!sched_add(s, 0, &req[0], A));
        ASSERT_STREQ(run(s, 0), "start:A/r0");
        sched_engine_up(s, 0, A);
        ASSERT_STREQ(run(s, 0), "go:r0");
}

/* A request arrives; "go" when it may go at once. */
static const char *add(Sched *s, usec_t now, int id, size_t engine) {
        return sched_add(s, now, &req[id], engine) ? "go" : "waits";
}

TEST(first_request_starts_its_engine_and_goes_when_up) {
        Sched s;
        setup(&s, S(30), S(900), S(900));
        ASSERT_STREQ(add(&s, 0, 0, A), "waits");
        ASSERT_STREQ(run(&s, 0), "start:A/r0");
        ASSERT_STREQ(add(&s, S(1), 1, A), "waits"); /* not up yet: joins the same start */
        ASSERT_STREQ(run(&s, S(1)), "");
        sched_engine_up(&s, S(3), A);
        ASSERT_STREQ(run(&s, S(3)), "go:r0 go:r1");
        ASSERT_STREQ(add(&s, S(4), 2, A), "go");
        sched_done(&s);
}

TEST(rule1_switch_waits_for_zero_in_flight) {
        Sched s;
        setup(&s, 0, USEC_INFINITY, USEC_INFINITY);
        add(&s, 0, 0, A);
        run(&s, 0);
        sched_engine_up(&s, S(1), A);
        ASSERT_STREQ(run(&s, S(1)), "go:r0");
        ASSERT_STREQ(add(&s, S(2), 1, A), "go");
        ASSERT_STREQ(add(&s, S(3), 2, B), "waits");
        ASSERT_STREQ(run(&s, S(3)), "wait:B/r2");
        sched_remove(&s, S(4), &req[0]);
        ASSERT_STREQ(run(&s, S(4)), ""); /* r1 still streams */
        sched_remove(&s, S(5), &req[1]);
        ASSERT_STREQ(run(&s, S(5)), "start:B/r2");
        sched_done(&s);
}

TEST(rule2_hold_down_keeps_a_fresh_engine) {
        Sched s;
        setup(&s, S(30), USEC_INFINITY, USEC_INFINITY);
        add(&s, 0, 0, A);
        run(&s, 0);
        sched_engine_up(&s, S(10), A);
        ASSERT_STREQ(run(&s, S(10)), "go:r0");
        sched_remove(&s, S(11), &req[0]);
        ASSERT_STREQ(add(&s, S(12), 1, B), "waits");
        ASSERT_STREQ(run(&s, S(12)), "wait:B/r1");
        ASSERT_EQ(sched_next_timer(&s, S(12)), S(40)); /* the end of A's hold-down */
        ASSERT_STREQ(run(&s, S(39)), "");
        ASSERT_STREQ(run(&s, S(40)), "start:B/r1");
        sched_done(&s);
}

TEST(rule3_running_engine_requests_queue_behind_a_pending_switch_except_in_hold_down) {
        Sched s;
        serving_r0_on_a(&s, S(30), USEC_INFINITY, USEC_INFINITY);
        ASSERT_STREQ(add(&s, S(1), 1, B), "waits");
        run(&s, S(1));
        /* inside A's hold-down: more for A are served at once */
        ASSERT_STREQ(add(&s, S(2), 2, A), "go");
        sched_remove(&s, S(3), &req[0]);
        sched_remove(&s, S(4), &req[2]);
        /* after it: a request for A queues behind the switch to B, which starts */
        ASSERT_STREQ(add(&s, S(31), 3, A), "waits");
        ASSERT_STREQ(run(&s, S(31)), "start:B/r1");
        sched_engine_up(&s, S(35), B);
        /* B is fresh: its own requests go; the one for A waits for B's hold-down */
        ASSERT_STREQ(run(&s, S(35)), "go:r1 wait:A/r3");
        sched_remove(&s, S(36), &req[1]);
        ASSERT_STREQ(run(&s, S(64)), "");
        ASSERT_STREQ(run(&s, S(65)), "start:A/r3");
        sched_done(&s);
}

TEST(rule3_a_trickle_for_the_running_engine_cannot_starve_a_switch) {
        Sched s;
        serving_r0_on_a(&s, S(30), USEC_INFINITY, USEC_INFINITY);
        sched_remove(&s, S(1), &req[0]);
        ASSERT_STREQ(add(&s, S(40), 1, B), "waits");
        /* past the hold-down nothing is in flight, so B starts at once ... */
        ASSERT_STREQ(run(&s, S(40)), "start:B/r1");
        sched_switch_failed(&s, S(41), 423, A); /* (refused, A still runs: undo for the next case) */
        ASSERT_STREQ(run(&s, S(41)), "fail:r1:423");
        /* ... and with A busy, a steady trickle for A after B arrived waits behind B */
        ASSERT_STREQ(add(&s, S(50), 2, A), "go");
        ASSERT_STREQ(add(&s, S(51), 3, B), "waits");
        for (int i = 4; i < 10; i++)
                ASSERT_STREQ(add(&s, S(51 + i), i, A), "waits");
        ASSERT_STREQ(run(&s, S(60)), "wait:B/r3");
        sched_remove(&s, S(61), &req[2]);
        ASSERT_STREQ(run(&s, S(61)), "start:B/r3");
        sched_engine_up(&s, S(62), B);
        ASSERT_STREQ(run(&s, S(62)), "go:r3 wait:A/r4");
        sched_done(&s);
}

TEST(rule4_pending_switches_in_arrival_order) {
        Sched s;
        serving_r0_on_a(&s, 0, USEC_INFINITY, USEC_INFINITY);
        add(&s, S(1), 1, C);
        add(&s, S(2), 2, B);
        add(&s, S(3), 3, C);
        ASSERT_STREQ(run(&s, S(3)), "wait:C/r1");
        sched_remove(&s, S(4), &req[0]);
        ASSERT_STREQ(run(&s, S(4)), "start:C/r1");
        sched_engine_up(&s, S(5), C);
        ASSERT_STREQ(run(&s, S(5)), "go:r1 go:r3 wait:B/r2");
        sched_done(&s);
}

TEST(rule5_wait_budget_ends_a_wait_with_504) {
        Sched s;
        serving_r0_on_a(&s, 0, USEC_INFINITY, S(60));
        add(&s, S(10), 1, B);
        add(&s, S(20), 2, B);
        run(&s, S(20));
        ASSERT_EQ(sched_next_timer(&s, S(20)), S(70));
        ASSERT_STREQ(run(&s, S(69)), "");
        ASSERT_STREQ(run(&s, S(70)), "fail:r1:504");
        ASSERT_EQ(sched_next_timer(&s, S(70)), S(80));
        /* the last client of the pending switch is gone by budget: nobody waits, no switch */
        ASSERT_STREQ(run(&s, S(80)), "fail:r2:504 abandon:B");
        sched_remove(&s, S(81), &req[0]);
        ASSERT_STREQ(run(&s, S(81)), "");
        sched_done(&s);
}

TEST(rule6_abandoned_switch_is_dropped) {
        Sched s;
        serving_r0_on_a(&s, 0, USEC_INFINITY, USEC_INFINITY);
        add(&s, S(1), 1, B);
        add(&s, S(2), 2, B);
        ASSERT_STREQ(run(&s, S(2)), "wait:B/r1");
        sched_remove(&s, S(3), &req[1]);
        ASSERT_STREQ(run(&s, S(3)), ""); /* r2 still waits */
        sched_remove(&s, S(4), &req[2]);
        ASSERT_STREQ(run(&s, S(4)), "abandon:B");
        sched_remove(&s, S(5), &req[0]);
        ASSERT_STREQ(run(&s, S(5)), ""); /* the GPU does not move for nobody */
        /* a client that re-sends joins the same wait: one switch for both */
        add(&s, S(6), 3, A);
        ASSERT_STREQ(run(&s, S(6)), "");
        sched_done(&s);
}

TEST(resend_joins_the_same_switch) {
        Sched s;
        serving_r0_on_a(&s, 0, USEC_INFINITY, USEC_INFINITY);
        add(&s, S(1), 1, B);
        run(&s, S(1));
        sched_remove(&s, S(2), &req[1]); /* the client gave up (a stall, an in-band error) ... */
        add(&s, S(2), 2, B);             /* ... and re-sent the same turn at once */
        ASSERT_STREQ(run(&s, S(2)), "");
        sched_remove(&s, S(3), &req[0]);
        ASSERT_STREQ(run(&s, S(3)), "start:B/r2");
        ASSERT_STREQ(add(&s, S(4), 3, B), "waits"); /* a third copy joins the start in progress */
        sched_engine_up(&s, S(5), B);
        ASSERT_STREQ(run(&s, S(5)), "go:r2 go:r3");
        sched_done(&s);
}

TEST(rule9_idle_stop_counted_from_up_or_the_last_request) {
        Sched s;
        setup(&s, S(30), S(900), USEC_INFINITY);
        ASSERT_EQ(sched_next_timer(&s, 0), USEC_INFINITY); /* nothing ever came up: no idle clock */
        add(&s, 0, 0, A);
        run(&s, 0);
        sched_engine_up(&s, S(10), A);
        run(&s, S(10));
        ASSERT_EQ(sched_next_timer(&s, S(10)), USEC_INFINITY); /* in flight */
        sched_remove(&s, S(100), &req[0]);
        ASSERT_EQ(sched_next_timer(&s, S(100)), S(1000));
        ASSERT_STREQ(run(&s, S(999)), "");
        ASSERT_STREQ(run(&s, S(1000)), "stop:A:900s");
        ASSERT_STREQ(add(&s, S(1001), 1, A), "waits"); /* the stop runs: it waits, then starts A again */
        ASSERT_STREQ(run(&s, S(1001)), "");
        sched_engine_down(&s, S(1002));
        ASSERT_STREQ(run(&s, S(1002)), "start:A/r1");
        sched_done(&s);

        /* a host that is down is skipped */
        serving_r0_on_a(&s, 0, S(60), USEC_INFINITY);
        sched_remove(&s, S(1), &req[0]);
        sched_host_down(&s, true);
        ASSERT_STREQ(run(&s, S(100)), "");
        ASSERT_EQ(sched_next_timer(&s, S(100)), USEC_INFINITY);
        sched_done(&s);
}

TEST(rule8_busy_fails_everyone_waiting_for_that_switch) {
        Sched s;
        setup(&s, 0, USEC_INFINITY, USEC_INFINITY);
        add(&s, 0, 0, B);
        add(&s, S(1), 1, B);
        add(&s, S(2), 2, C);
        ASSERT_STREQ(run(&s, S(2)), "start:B/r0");
        sched_switch_failed(&s, S(3), 423, -1);
        ASSERT_STREQ(run(&s, S(3)), "fail:r0:423 fail:r1:423 start:C/r2");
        sched_done(&s);
}

TEST(host_down_fails_the_waiting_and_an_engine_crash_restarts_on_demand) {
        Sched s;
        setup(&s, 0, USEC_INFINITY, USEC_INFINITY);
        add(&s, 0, 0, A);
        add(&s, 0, 1, B);
        run(&s, 0);
        sched_host_down(&s, true);
        ASSERT_STREQ(run(&s, S(1)), "fail:r0:503 fail:r1:503");
        sched_host_down(&s, false);
        add(&s, S(2), 2, A);
        ASSERT_STREQ(run(&s, S(2)), "start:A/r2");
        sched_engine_up(&s, S(3), A);
        ASSERT_STREQ(run(&s, S(3)), "go:r2");
        sched_engine_down(&s, S(4)); /* it crashed; r2's answer ends with an error */
        add(&s, S(4), 3, A);
        ASSERT_STREQ(run(&s, S(4)), ""); /* r2 is still in flight until its error reaches it */
        sched_remove(&s, S(4), &req[2]);
        ASSERT_STREQ(run(&s, S(4)), "start:A/r3");
        ASSERT_EQ(sched_ahead(&s, &req[3]), 0);
        sched_done(&s);
}

/* StopEngine(): inside the hold-down and long before IdleStopSec=, but only once the stream in flight has
 * ended; a request arriving meanwhile is served first. */
TEST(requested_stop_waits_for_in_flight_and_ignores_hold_down) {
        Sched s;
        serving_r0_on_a(&s, S(30), S(900), S(900));
        ASSERT_EQ(sched_hold_down_until(&s, S(1)), S(30));
        sched_request_stop(&s);
        ASSERT_STREQ(run(&s, S(2)), ""); /* r0 streams */
        ASSERT_EQ(sched_idle_stop_at(&s), USEC_INFINITY);
        ASSERT_STREQ(add(&s, S(3), 1, A), "go");
        sched_remove(&s, S(4), &req[0]);
        ASSERT_STREQ(run(&s, S(4)), "");
        sched_remove(&s, S(5), &req[1]);
        ASSERT_EQ(sched_idle_stop_at(&s), 0);
        ASSERT_STREQ(run(&s, S(5)), "stop:A:0s");
        sched_engine_down(&s, S(6));
        sched_request_stop(&s); /* nothing runs: nothing to do */
        ASSERT_EQ(s.stop_requested, false);
        ASSERT_EQ(sched_hold_down_until(&s, S(6)), 0);
        sched_done(&s);
}

/* A prime (modelgate's own request) is in flight like any other, so a switch waits for it, but it is not
 * traffic: the idle stop still counts from the last client request. A (after r0 at 1 s) primed at 5 s: */
static void primed_at_5s(Sched *s) {
        serving_r0_on_a(s, 0, S(10), S(900));
        sched_remove(s, S(1), &req[0]);
        ASSERT_EQ(sched_idle_stop_at(s), S(11));
        ASSERT_STREQ(add(s, S(5), 1, A), "go");
        req[1].background = true;
}

TEST(background_request_is_in_flight) {
        Sched s;
        primed_at_5s(&s);
        ASSERT_STREQ(add(&s, S(6), 2, B), "waits");
        ASSERT_STREQ(run(&s, S(6)), "wait:B/r2"); /* the prime is in flight: the switch waits for it */
        sched_remove(&s, S(7), &req[1]);
        ASSERT_STREQ(run(&s, S(7)), "start:B/r2");
        sched_done(&s);
}

TEST(background_request_is_not_traffic) {
        Sched s;
        primed_at_5s(&s);
        sched_remove(&s, S(6), &req[1]);
        ASSERT_EQ(sched_idle_stop_at(&s), S(11)); /* not S(16) */
        sched_done(&s);
}

/* The seed's timeline: client 1 streams on A; client 2 asks for B during it and waits for the
 * stream to end and for A's hold-down; B comes up; client 1's next turn (for A) arrives as B comes
 * up and waits out B's hold-down. With HoldDownSec=30s every switch time follows from the rules. */
TEST(seed_timeline_two_clients_take_turns) {
        Sched s;
        setup(&s, S(30), S(900), S(900));
        ASSERT_STREQ(add(&s, 0, 0, A), "waits");
        ASSERT_STREQ(run(&s, 0), "start:A/r0");
        sched_engine_up(&s, S(2), A); /* A up at 2 s: hold-down until 32 s */
        ASSERT_STREQ(run(&s, S(2)), "go:r0");
        ASSERT_STREQ(add(&s, S(10), 1, B), "waits");
        ASSERT_STREQ(run(&s, S(10)), "wait:B/r1");
        ASSERT_EQ(sched_ahead(&s, &req[1]), 1);
        sched_remove(&s, S(20), &req[0]); /* client 1's stream ends at 20 s */
        ASSERT_STREQ(run(&s, S(20)), "");
        ASSERT_EQ(sched_next_timer(&s, S(20)), S(32));
        ASSERT_STREQ(run(&s, S(32)), "start:B/r1");  /* the switch to B: 32 s, the end of A's hold-down */
        ASSERT_STREQ(add(&s, S(40), 2, A), "waits"); /* client 1's next turn, as B comes up */
        sched_engine_up(&s, S(40), B);               /* B up at 40 s: hold-down until 70 s */
        ASSERT_STREQ(run(&s, S(40)), "go:r1 wait:A/r2");
        sched_remove(&s, S(45), &req[1]); /* client 2's answer ends at 45 s */
        ASSERT_EQ(sched_next_timer(&s, S(45)), S(70));
        ASSERT_STREQ(run(&s, S(69)), "");
        ASSERT_STREQ(run(&s, S(70)), "start:A/r2"); /* the switch back: 70 s, the end of B's hold-down */
        sched_engine_up(&s, S(72), A);
        ASSERT_STREQ(run(&s, S(72)), "go:r2");
        sched_done(&s);
}

TESTS_MAIN
