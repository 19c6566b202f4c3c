/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The switch scheduler on a fake clock: one test per rule of switching (rule:switch-waits, rule:hold-down,
 * rule:no-starvation, rule:arrival-order, rule:wait-budget, rule:abandon-switch and rule:idle-stop,
 * rule:busy-gpu), and the seed's two-client timeline with every switch time as the rules predict. Actions
 * are written as short words so a test reads as the sequence it expects: "go:r0 start:B/r1 wait:B/r1
 * fail:r2:504 stop:A abandon:B". Then 10 000 waiting requests through the rules, with the steps each call
 * takes counted, and random events given to the scheduler and to the one before issue 26
 * (sched-reference.c), which must answer alike. */

#include <stdio.h>

#include "modelgated/sched/sched.h"
#include "tests.h"
#include "unit/sched-reference.h"

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
                case SCHED_UNHOLD:
                        snprintf(w, sizeof(w), "unhold:%s", engine_names[a.engine]);
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

/* rule:resumable-streams: a resume joins the engine up, ahead of a pending switch, which waits for it; it
 * never starts an engine, nor joins one that is not up */
TEST(a_joining_request_holds_a_pending_switch_and_never_starts_one) {
        Sched s;
        setup(&s, 0, USEC_INFINITY, USEC_INFINITY);
        ASSERT_TRUE(!sched_join(&s, 0, &req[9], A)); /* nothing runs */
        ASSERT_EQ(s.n_in_flight, 0u);
        ASSERT_STREQ(run(&s, 0), "");
        add(&s, 0, 0, A);
        run(&s, 0);
        ASSERT_TRUE(!sched_join(&s, 0, &req[9], A)); /* starting, not up */
        sched_engine_up(&s, S(1), A);
        ASSERT_STREQ(run(&s, S(1)), "go:r0");
        ASSERT_TRUE(!sched_join(&s, S(1), &req[9], B)); /* not the engine up */
        ASSERT_STREQ(add(&s, S(2), 1, B), "waits");
        ASSERT_STREQ(run(&s, S(2)), "wait:B/r1");
        ASSERT_TRUE(sched_join(&s, S(3), &req[2], A)); /* ahead of the pending switch */
        sched_remove(&s, S(4), &req[0]);
        ASSERT_STREQ(run(&s, S(4)), ""); /* the resume still streams */
        sched_remove(&s, S(5), &req[2]);
        ASSERT_STREQ(run(&s, S(5)), "start:B/r1");
        ASSERT_TRUE(!sched_join(&s, S(5), &req[2], A)); /* a switch has begun */
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

/* rule:foreign-switch: while another instance holds the host's lease, new requests for the running engine
 * wait behind its switch (those in flight and those already going are its to wait for), except inside the
 * hold-down; once it ends they go. No idle stop meanwhile. */
TEST(foreign_switch_queues_new_requests_for_the_running_engine) {
        Sched s;
        serving_r0_on_a(&s, S(30), S(100), USEC_INFINITY);
        sched_foreign_switch(&s, S(5), true);
        ASSERT_STREQ(add(&s, S(6), 1, A), "go"); /* inside A's hold-down */
        ASSERT_STREQ(add(&s, S(31), 2, A), "waits");
        ASSERT_STREQ(run(&s, S(31)), "");
        sched_remove(&s, S(32), &req[0]);
        sched_remove(&s, S(32), &req[1]);
        ASSERT_STREQ(add(&s, S(33), 3, A), "waits");
        ASSERT_EQ(sched_next_timer(&s, S(500)), USEC_INFINITY); /* no idle stop during the other's switch */
        ASSERT_STREQ(run(&s, S(500)), "");
        sched_foreign_switch(&s, S(501), false);
        ASSERT_STREQ(run(&s, S(501)), "go:r2 go:r3");
        sched_done(&s);
}

/* rule:hold-down-from-host: the hold-down counts from when the host's manager says the unit became active,
 * so an instance that saw the engine later counts the same end; a later time is ignored */
TEST(hold_down_counts_from_the_hosts_clock) {
        Sched s;
        setup(&s, S(30), USEC_INFINITY, USEC_INFINITY);
        add(&s, 0, 0, A);
        run(&s, 0);
        sched_engine_up(&s, S(20), A);
        sched_set_up_at(&s, S(12));
        sched_set_up_at(&s, S(25)); /* later than up: not the host's clock */
        ASSERT_STREQ(run(&s, S(20)), "go:r0");
        sched_remove(&s, S(21), &req[0]);
        ASSERT_STREQ(add(&s, S(22), 1, B), "waits");
        ASSERT_STREQ(run(&s, S(22)), "wait:B/r1");
        ASSERT_EQ(sched_hold_down_until(&s, S(22)), S(42));
        ASSERT_STREQ(run(&s, S(41)), "");
        ASSERT_STREQ(run(&s, S(42)), "start:B/r1");
        sched_done(&s);
}

/* rule:several-instances: with Shared=, the idle stop is the host's timer's, which every instance renews;
 * this instance's clock only says when (for that timer), and a requested stop still happens */
TEST(shared_host_leaves_the_idle_stop_to_the_hosts_timer) {
        Sched s;
        SchedConfig c = {.hold_down = 0, .idle_stop = S(60), .wait_budget = USEC_INFINITY, .shared = true};
        ASSERT_OK(sched_init(&s, &c, 3));
        add(&s, 0, 0, A);
        run(&s, 0);
        sched_engine_up(&s, S(1), A);
        ASSERT_STREQ(run(&s, S(1)), "go:r0");
        sched_remove(&s, S(2), &req[0]);
        ASSERT_EQ(sched_idle_stop_at(&s), S(62));
        ASSERT_EQ(sched_next_timer(&s, S(2)), USEC_INFINITY);
        ASSERT_STREQ(run(&s, S(100)), "");
        sched_request_stop(&s);
        ASSERT_STREQ(run(&s, S(101)), "stop:A:99s");
        sched_done(&s);
}

/* rule:bus-gone: the bus of the host is lost while A serves: A goes on serving whatever the hold-down, a
 * request waiting for B fails with 503 at once and a new one is refused (sched_refusal()), no idle stop
 * comes meanwhile; with the bus back, the switch and the idle stop are the rules' again */
TEST(bus_gone_keeps_the_running_engine_serving_and_refuses_what_needs_the_bus) {
        Sched s;
        serving_r0_on_a(&s, S(30), S(100), USEC_INFINITY);
        ASSERT_STREQ(add(&s, S(40), 1, B), "waits");
        ASSERT_STREQ(run(&s, S(40)), "wait:B/r1");   /* r0 is in flight */
        ASSERT_STREQ(add(&s, S(41), 2, A), "waits"); /* behind the pending switch */
        sched_bus_gone(&s, true);
        ASSERT_STREQ(run(&s, S(42)), "fail:r1:503 go:r2");
        ASSERT_EQ(sched_refusal(&s, B), 503);
        ASSERT_EQ(sched_refusal(&s, A), 0);
        ASSERT_STREQ(add(&s, S(43), 3, A), "go");
        sched_remove(&s, S(44), &req[0]);
        sched_remove(&s, S(44), &req[2]);
        sched_remove(&s, S(44), &req[3]);
        ASSERT_EQ(sched_idle_stop_at(&s), USEC_INFINITY); /* stopping A needs the bus */
        ASSERT_EQ(sched_next_timer(&s, S(44)), USEC_INFINITY);
        ASSERT_STREQ(run(&s, S(500)), "");
        sched_bus_gone(&s, false);
        ASSERT_EQ(sched_refusal(&s, B), 0);
        ASSERT_STREQ(run(&s, S(500)), "stop:A:456s");
        sched_done(&s);
}

/* rule:busy-followed: a BusyUnits= unit active refuses a switch when it is asked for, not when it is due:
 * the request waiting for B (in A's hold-down) fails with 423 when the unit becomes active, a new one is
 * refused, A's own requests go on; the start under way and its waiters are the switch's to end */
TEST(busy_units_refuse_a_switch_at_once) {
        Sched s;
        serving_r0_on_a(&s, S(30), USEC_INFINITY, USEC_INFINITY);
        ASSERT_STREQ(add(&s, S(5), 1, B), "waits");
        ASSERT_STREQ(run(&s, S(5)), "wait:B/r1");
        sched_gpu_busy(&s, true);
        ASSERT_STREQ(run(&s, S(6)), "fail:r1:423");
        ASSERT_EQ(sched_refusal(&s, B), 423);
        ASSERT_EQ(sched_refusal(&s, C), 423);
        ASSERT_EQ(sched_refusal(&s, A), 0);
        ASSERT_STREQ(add(&s, S(7), 2, A), "go");
        sched_gpu_busy(&s, false);
        ASSERT_EQ(sched_refusal(&s, B), 0);
        sched_done(&s);

        setup(&s, 0, USEC_INFINITY, USEC_INFINITY);
        add(&s, 0, 0, B);
        ASSERT_STREQ(run(&s, 0), "start:B/r0");
        add(&s, S(1), 1, B);
        sched_gpu_busy(&s, true); /* B's start is under way: its own check decides */
        ASSERT_STREQ(run(&s, S(1)), "");
        ASSERT_EQ(sched_refusal(&s, B), 0);
        ASSERT_EQ(sched_refusal(&s, A), 423); /* nothing up: a start is a switch too */
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

/* rule:failed-start-hold: a failed start of B holds B for FailedStartHoldSec=: the host refuses its
 * requests meanwhile (sched_held_until()); the hold's end is a timer and an action of its own; a reload
 * shortens it; an operator's reset or B coming up without a START ends it early; 0 holds nothing. */
TEST(failed_start_hold_refuses_for_its_time_and_ends_three_ways) {
        Sched s;
        SchedConfig c = {
                .idle_stop = USEC_INFINITY, .wait_budget = USEC_INFINITY, .failed_start_hold = S(60)};
        ASSERT_OK(sched_init(&s, &c, 3));
        add(&s, 0, 0, B);
        ASSERT_STREQ(run(&s, 0), "start:B/r0");
        sched_start_failed(&s, S(2), B);
        sched_switch_failed(&s, S(2), 502, -1);
        ASSERT_STREQ(run(&s, S(2)), "fail:r0:502");
        ASSERT_EQ(sched_held_until(&s, S(2), B), S(62));
        ASSERT_EQ(sched_held_until(&s, S(2), A), 0); /* only B */
        ASSERT_EQ(sched_next_timer(&s, S(2)), S(62));
        ASSERT_STREQ(run(&s, S(61)), "");
        ASSERT_EQ(sched_held_until(&s, S(61), B), S(62));
        ASSERT_EQ(sched_held_until(&s, S(62), B), 0);
        ASSERT_STREQ(run(&s, S(62)), "unhold:B");
        ASSERT_STREQ(run(&s, S(63)), ""); /* once */
        ASSERT_EQ(sched_next_timer(&s, S(63)), USEC_INFINITY);

        /* an operator's reset: true once, no unhold action after it */
        sched_start_failed(&s, S(70), B);
        ASSERT_TRUE(sched_unhold(&s, S(71), B));
        ASSERT_TRUE(!sched_unhold(&s, S(71), B));
        ASSERT_EQ(sched_held_until(&s, S(71), B), 0);
        ASSERT_STREQ(run(&s, S(200)), "");

        /* the engine came up without modelgate: nothing is held */
        sched_start_failed(&s, S(300), B);
        sched_engine_up(&s, S(301), B);
        ASSERT_EQ(sched_held_until(&s, S(301), B), 0);
        ASSERT_STREQ(run(&s, S(400)), "");
        sched_engine_down(&s, S(401));

        /* a reload to 10 s ends a hold begun 20 s ago at once; to 0, every hold */
        sched_start_failed(&s, S(500), B);
        s.config.failed_start_hold = S(10);
        ASSERT_EQ(sched_held_until(&s, S(520), B), 0);
        ASSERT_STREQ(run(&s, S(520)), "unhold:B");
        sched_start_failed(&s, S(600), C);
        s.config.failed_start_hold = 0;
        ASSERT_STREQ(run(&s, S(600)), "unhold:C");
        sched_start_failed(&s, S(700), C); /* 0: nothing is held */
        ASSERT_EQ(sched_held_until(&s, S(700), C), 0);
        ASSERT_STREQ(run(&s, S(700)), "");
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

/* 10 000 waiting requests, as many as bench/run keeps waiting for an engine. The steps of every call are
 * counted: the scheduler before issue 26 walked all the requests in each, 10 000 steps and more. */
#define MANY 10000
/* a call's steps: the tree's depth (about 2 ln 10 000 = 18 on average) twice, the engines a few times */
#define MAX_STEPS 100
static SchedRequest many[MANY + 1];
static uint64_t max_steps, steps_before;

static void step_start(void) {
        steps_before = sched_steps;
}

static void step_end(void) {
        max_steps = MAX(max_steps, sched_steps - steps_before);
}

/* One sched_next(), its steps counted. */
static bool next_many(Sched *s, usec_t now, SchedAction *a) {
        bool r;

        step_start();
        r = sched_next(s, now, a);
        step_end();
        return r;
}

static int id_of(const SchedAction *a) {
        return a->req ? (int)(a->req - many) : -1;
}

/* The next action is type for engine and request id (-1: any). */
static void expect_many(Sched *s, usec_t now, SchedActionType type, ssize_t engine, int id) {
        SchedAction a;

        if (!next_many(s, now, &a))
                FAIL("no action, expected %d:%zd/r%d", type, engine, id);
        if (a.type != type || a.engine != engine || (id >= 0 && id_of(&a) != id))
                FAIL("action %d:%zd/r%d, expected %d:%zd/r%d", a.type, a.engine, id_of(&a), type, engine,
                     id);
}

static void expect_nothing(Sched *s, usec_t now) {
        SchedAction a;

        if (next_many(s, now, &a))
                FAIL("unexpected action %d:%zd/r%d", a.type, a.engine, id_of(&a));
}

static size_t engine_of(int i) {
        return (size_t)i % 3; /* 1 B, 2 C, 3 A, 4 B, ... */
}

static bool gone(int i) {
        return i % 10 == 0; /* their clients went away while they waited */
}

/* The ones for engine go, in arrival order, then they end. */
static void serve_all(Sched *s, usec_t now, size_t engine) {
        for (int i = 1; i <= MANY; i++)
                if (engine_of(i) == engine && !gone(i))
                        expect_many(s, now, SCHED_GO, (ssize_t)engine, i);
        for (int i = 1; i <= MANY; i++)
                if (engine_of(i) == engine && !gone(i)) {
                        step_start();
                        sched_remove(s, now + S(1), &many[i]);
                        step_end();
                        ASSERT_EQ(sched_ahead(s, &many[i]), s->n_in_flight + s->n_waiting);
                }
}

TEST(ten_thousand_waiting_take_turns_by_the_rules) {
        Sched s;
        usec_t t0 = S(100), t;
        unsigned ahead;

        max_steps = 0;
        setup(&s, S(30), S(60), S(900));
        ASSERT_TRUE(!sched_add(&s, 0, &many[0], A));
        expect_many(&s, 0, SCHED_START, A, 0);
        sched_engine_up(&s, 0, A);
        expect_many(&s, 0, SCHED_GO, A, 0);

        /* past A's hold-down, with many[0] streaming: B, C, A, B, ... all wait, A's behind B's switch */
        for (int i = 1; i <= MANY; i++) {
                step_start();
                ASSERT_TRUE(!sched_add(&s, t0 + (usec_t)i * USEC_PER_MSEC, &many[i], engine_of(i)));
                step_end();
                if (i == 1)
                        expect_many(&s, t0 + USEC_PER_MSEC, SCHED_WAIT, B, 1);
                expect_nothing(&s, t0 + (usec_t)i * USEC_PER_MSEC);
        }
        ASSERT_EQ(s.n_waiting, MANY);
        ASSERT_TRUE(sched_switch_pending(&s));
        step_start(); /* the first to spend its budget is the first to come */
        ASSERT_EQ(sched_next_timer(&s, t0 + S(10)), t0 + USEC_PER_MSEC + S(900));
        step_end();

        /* each has the one in flight and every earlier arrival ahead; then some leave, from the middle */
        for (int i = 1; i <= MANY; i++) {
                step_start();
                ASSERT_EQ(sched_ahead(&s, &many[i]), (unsigned)i);
                step_end();
        }
        for (int i = 1; i <= MANY; i++)
                if (gone(i)) {
                        step_start();
                        sched_remove(&s, t0 + S(15), &many[i]);
                        step_end();
                }
        expect_nothing(&s, t0 + S(15));
        ahead = 1;
        for (int i = 1; i <= MANY; i++) {
                step_start();
                ASSERT_EQ(sched_ahead(&s, &many[i]), gone(i) ? 1 + s.n_waiting : ahead);
                step_end();
                ahead += !gone(i);
        }

        /* rule:switch-waits: the stream ends, B starts; B up serves its own in order, C's switch waits
         * (rule:arrival-order) */
        t = t0 + S(20);
        sched_remove(&s, t, &many[0]);
        expect_many(&s, t, SCHED_START, B, 1);
        expect_nothing(&s, t);
        sched_engine_up(&s, t + S(2), B);
        serve_all(&s, t + S(2), B);
        expect_many(&s, t + S(2), SCHED_WAIT, C, 2);
        expect_nothing(&s, t + S(3));
        /* rule:hold-down: C's switch once B's hold-down is over, then A's once C's is */
        ASSERT_EQ(sched_next_timer(&s, t + S(3)), t + S(32));
        expect_nothing(&s, t + S(32) - 1);
        expect_many(&s, t + S(32), SCHED_START, C, 2);
        sched_engine_up(&s, t + S(34), C);
        serve_all(&s, t + S(34), C);
        expect_many(&s, t + S(34), SCHED_WAIT, A, 3);
        expect_many(&s, t + S(64), SCHED_START, A, 3);
        sched_engine_up(&s, t + S(66), A);
        serve_all(&s, t + S(66), A);
        expect_nothing(&s, t + S(67));
        ASSERT_EQ(s.n_waiting, 0);
        ASSERT_TRUE(!sched_switch_pending(&s));
        /* rule:idle-stop: A idle for IdleStopSec= after its last request */
        ASSERT_EQ(sched_next_timer(&s, t + S(67)), t + S(67) + S(60));
        expect_nothing(&s, t + S(126));
        expect_many(&s, t + S(127), SCHED_STOP, A, -1);
        sched_done(&s);
        ASSERT_TRUE(max_steps <= MAX_STEPS);
}

TEST(ten_thousand_budgets_end_in_arrival_order) {
        Sched s;
        usec_t t0 = S(100);

        max_steps = 0;
        setup(&s, S(30), USEC_INFINITY, S(900));
        ASSERT_TRUE(!sched_add(&s, 0, &many[0], A));
        expect_many(&s, 0, SCHED_START, A, 0);
        sched_engine_up(&s, 0, A);
        expect_many(&s, 0, SCHED_GO, A, 0);
        for (int i = 1; i <= MANY; i++) {
                step_start();
                ASSERT_TRUE(!sched_add(&s, t0 + (usec_t)(i / 2) * USEC_PER_MSEC, &many[i], B + i % 2));
                step_end();
        }
        expect_many(&s, t0, SCHED_WAIT, C, 1);
        /* the stream never ends: rule:wait-budget answers each at its budget, two at a time (they came in
         * pairs), and rule:abandon-switch drops a switch whose last client that was */
        for (int i = 1; i <= MANY; i++) {
                usec_t deadline = t0 + (usec_t)(i / 2) * USEC_PER_MSEC + S(900);

                step_start();
                ASSERT_EQ(sched_next_timer(&s, deadline - 1), deadline);
                step_end();
                if (i % 2 == 0 || i == 1)
                        expect_nothing(&s, deadline - 1);
                expect_many(&s, deadline, SCHED_FAIL, B + i % 2, i);
                if (i == 1) /* the next switch pending is B's now */
                        expect_many(&s, deadline, SCHED_WAIT, B, 2);
                if (i >= MANY - 1)
                        expect_many(&s, deadline, SCHED_ABANDON, B + i % 2, -1);
        }
        expect_nothing(&s, t0 + S(2000));
        ASSERT_EQ(s.n_waiting, 0);
        ASSERT_EQ(sched_next_timer(&s, t0 + S(2000)), USEC_INFINITY);
        sched_done(&s);
        ASSERT_TRUE(max_steps <= MAX_STEPS);
}

/* Random events, the same to both schedulers, and after each the same answers from both: every action
 * sched_next() has, the timer, ahead and state of every request, the counts. Times often repeat (arrivals
 * at the same microsecond), and the events need not make sense (an engine up that nobody started): the
 * two must agree on anything. */
#define SLOTS 48
static SchedRequest fast[SLOTS];
static RefRequest slow[SLOTS];
static bool used[SLOTS], held[SLOTS]; /* ever added; the scheduler's (not answered or removed) */
static uint64_t seed;

static unsigned rnd(unsigned n) {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        return (unsigned)(seed % n);
}

static usec_t rnd_config(void) {
        static const usec_t values[] = {0, S(5), S(30), S(120), USEC_INFINITY};
        return values[rnd(ELEMENTSOF(values))];
}

static void compare_state(Sched *s, RefSched *r, usec_t now, const char *what) {
        if (sched_next_timer(s, now) != ref_sched_next_timer(r, now))
                FAIL("%s: timer %llu != %llu", what, (unsigned long long)sched_next_timer(s, now),
                     (unsigned long long)ref_sched_next_timer(r, now));
        ASSERT_EQ(s->n_waiting, r->n_waiting);
        ASSERT_EQ(s->n_in_flight, r->n_in_flight);
        ASSERT_EQ(sched_switch_pending(s), ref_sched_switch_pending(r));
        ASSERT_EQ(sched_hold_down_until(s, now), ref_sched_hold_down_until(r, now));
        ASSERT_EQ(sched_idle_stop_at(s), ref_sched_idle_stop_at(r));
        for (int i = 0; i < SLOTS; i++)
                if (used[i]) {
                        ASSERT_EQ(fast[i].state, slow[i].state);
                        if (sched_ahead(s, &fast[i]) != ref_sched_ahead(r, &slow[i]))
                                FAIL("%s: r%d ahead %u != %u", what, i, sched_ahead(s, &fast[i]),
                                     ref_sched_ahead(r, &slow[i]));
                }
}

/* Both schedulers' actions until they have none, one by one alike; whatever is answered is let go. */
static void compare_run(Sched *s, RefSched *r, usec_t now, ssize_t *target) {
        SchedAction a;
        RefAction b;

        for (;;) {
                bool more = sched_next(s, now, &a);
                int ia = a.req ? (int)(a.req - fast) : -1;

                ASSERT_EQ(more, ref_sched_next(r, now, &b));
                if (!more)
                        break;
                if (a.type != b.type || ia != (b.req ? (int)(b.req - slow) : -1) || a.engine != b.engine ||
                    a.status != b.status || a.idle_for != b.idle_for || a.requested != b.requested)
                        FAIL("action %d:%zd/r%d:%d, reference %d:%zd/r%td:%d", a.type, a.engine, ia,
                             a.status, b.type, b.engine, b.req ? b.req - slow : -1, b.status);
                if (a.type == SCHED_FAIL)
                        held[ia] = false;
                if (a.type == SCHED_START)
                        *target = a.engine;
        }
}

static void random_events(uint64_t run, size_t n_engines, unsigned n_events) {
        SchedConfig c = {.hold_down = rnd_config(), .idle_stop = rnd_config(), .wait_budget = rnd_config()};
        Sched s;
        RefSched r;
        usec_t now = 0;
        ssize_t target = -1;
        char what[64];

        ASSERT_OK(sched_init(&s, &c, n_engines));
        ASSERT_OK(ref_sched_init(&r, &c, n_engines));
        memset(used, 0, sizeof(used));
        memset(held, 0, sizeof(held));
        for (unsigned e = 0; e < n_events; e++) {
                unsigned op = rnd(100), i = rnd(SLOTS);
                size_t engine = rnd((unsigned)n_engines);

                snprintf(what, sizeof(what), "run %llu event %u op %u", (unsigned long long)run, e, op);
                if (rnd(3) > 0)
                        now += rnd(4) == 0 ? rnd(200) * USEC_PER_SEC : rnd(3) * USEC_PER_SEC;
                if (op < 40) { /* a request arrives, in a slot that is free */
                        if (held[i])
                                continue;
                        ASSERT_EQ(sched_add(&s, now, &fast[i], engine),
                                  ref_sched_add(&r, now, &slow[i], engine));
                        used[i] = held[i] = true;
                        if (fast[i].state == SCHED_IN_FLIGHT && rnd(8) == 0)
                                fast[i].background = slow[i].background = true;
                } else if (op < 65) { /* one ends: answered, or its client went away */
                        if (!held[i] && !(used[i] && rnd(4) == 0)) /* now and then one removed twice */
                                continue;
                        sched_remove(&s, now, &fast[i]);
                        ref_sched_remove(&r, now, &slow[i]);
                        held[i] = false;
                } else if (op < 75) { /* the started engine is up, mostly; sometimes another */
                        size_t up = target >= 0 && rnd(4) > 0 ? (size_t)target : engine;
                        sched_engine_up(&s, now, up);
                        ref_sched_engine_up(&r, now, up);
                        target = -1;
                } else if (op < 79) {
                        sched_engine_down(&s, now);
                        ref_sched_engine_down(&r, now);
                } else if (op < 83) {
                        int status = rnd(2) ? 423 : 502;
                        ssize_t still = rnd(2) ? -1 : (ssize_t)engine;
                        sched_switch_failed(&s, now, status, still);
                        ref_sched_switch_failed(&r, now, status, still);
                        target = -1;
                } else if (op < 86) {
                        bool down = rnd(2);
                        sched_host_down(&s, down);
                        ref_sched_host_down(&r, down);
                } else if (op < 88) {
                        sched_engine_starting(&s, engine);
                        ref_sched_engine_starting(&r, engine);
                } else if (op < 89) {
                        sched_engine_stopping(&s);
                        ref_sched_engine_stopping(&r);
                } else if (op < 92) {
                        sched_request_stop(&s);
                        ref_sched_request_stop(&r);
                } else if (op < 94) { /* a reload */
                        c = (SchedConfig){.hold_down = rnd_config(),
                                          .idle_stop = rnd_config(),
                                          .wait_budget = rnd_config()};
                        s.config = r.config = c;
                }
                /* the daemon's schedule_cb() runs after most events, not after every one */
                if (rnd(4) > 0)
                        compare_run(&s, &r, now, &target);
                compare_state(&s, &r, now, what);
        }
        sched_done(&s);
        ref_sched_done(&r);
}

TEST(random_events_get_the_answers_of_the_scheduler_before_issue_26) {
        for (uint64_t run = 1; run <= 400; run++) {
                seed = run * UINT64_C(0x9e3779b97f4a7c15);
                random_events(run, 2 + run % 3, 1500);
        }
}

TESTS_MAIN
