/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The lazy timer (lazy-timer.h) on a real sd-event loop: a deadline moved later runs its handler once,
 * not before the later deadline; one given up never runs it; one moved sooner runs it then. */

#include "modelgated/event/lazy-timer.h"
#include "tests.h"

#define MS USEC_PER_MSEC

typedef struct Run {
        sd_event *event;
        LazyTimer timer;
        unsigned fired;
        usec_t fired_at;
        bool done; /* the loop stops: the handler ran, or the bound came */
} Run;

static int handler(sd_event_source *s, uint64_t usec, void *userdata) {
        Run *run = userdata;
        run->fired++;
        ASSERT_TRUE(sd_event_now(run->event, CLOCK_MONOTONIC, &run->fired_at) >= 0);
        run->done = true;
        return 0;
}

/* the end of a run where the handler is not to run, or a bound on one where it is */
static int stop(sd_event_source *s, uint64_t usec, void *userdata) {
        Run *run = userdata;
        run->done = true;
        return 0;
}

static usec_t now_monotonic(Run *run) {
        usec_t t;
        ASSERT_TRUE(sd_event_now(run->event, CLOCK_MONOTONIC, &t) >= 0);
        return t;
}

static void run_until(Run *run, usec_t bound) {
        sd_event_source *s = NULL;
        ASSERT_OK(sd_event_add_time(run->event, &s, CLOCK_MONOTONIC, bound, 0, stop, run));
        /* turns of the loop, not sd_event_loop(): after sd_event_exit() no source could be set again */
        for (run->done = false; !run->done;)
                ASSERT_TRUE(sd_event_run(run->event, UINT64_MAX) >= 0);
        sd_event_source_disable_unref(s);
}

static void run_init(Run *run) {
        *run = (Run){};
        ASSERT_OK(sd_event_new(&run->event));
        ASSERT_OK(lazy_timer_init(&run->timer, run->event, handler, run));
}

static void run_done(Run *run) {
        lazy_timer_done(&run->timer);
        sd_event_unref(run->event);
}

TEST(a_deadline_moved_later_runs_once_at_the_later_one) {
        Run run;
        run_init(&run);
        usec_t t0 = now_monotonic(&run);

        ASSERT_OK(lazy_timer_set(&run.timer, t0 + 20 * MS));
        ASSERT_EQ(run.timer.armed, t0 + 20 * MS);
        /* later: only the field moves, the source fires at the first one and is set again */
        ASSERT_OK(lazy_timer_set(&run.timer, t0 + 300 * MS));
        ASSERT_EQ(run.timer.armed, t0 + 20 * MS);
        run_until(&run, t0 + 5 * USEC_PER_SEC);
        ASSERT_EQ(run.fired, 1u);
        ASSERT_TRUE(run.fired_at >= t0 + 300 * MS);
        ASSERT_EQ(run.timer.deadline, USEC_INFINITY);
        run_done(&run);
}

TEST(a_deadline_given_up_never_runs) {
        Run run;
        run_init(&run);
        usec_t t0 = now_monotonic(&run);

        ASSERT_OK(lazy_timer_set(&run.timer, t0 + 20 * MS));
        ASSERT_OK(lazy_timer_set(&run.timer, USEC_INFINITY));
        /* the source still fires at 20 ms (and up to sd-event's default accuracy, 250 ms, later) */
        run_until(&run, t0 + 600 * MS);
        ASSERT_EQ(run.fired, 0u);
        ASSERT_EQ(run.timer.armed, USEC_INFINITY);
        /* and it can be set again */
        t0 = now_monotonic(&run);
        ASSERT_OK(lazy_timer_set(&run.timer, t0 + 10 * MS));
        run_until(&run, t0 + 5 * USEC_PER_SEC);
        ASSERT_EQ(run.fired, 1u);
        run_done(&run);
}

TEST(a_deadline_moved_sooner_runs_then) {
        Run run;
        run_init(&run);
        usec_t t0 = now_monotonic(&run);

        ASSERT_OK(lazy_timer_set(&run.timer, t0 + 60 * USEC_PER_SEC));
        ASSERT_OK(lazy_timer_set(&run.timer, t0 + 10 * MS));
        ASSERT_EQ(run.timer.armed, t0 + 10 * MS);
        run_until(&run, t0 + 5 * USEC_PER_SEC);
        ASSERT_EQ(run.fired, 1u);
        ASSERT_TRUE(run.fired_at >= t0 + 10 * MS && run.fired_at < t0 + 5 * USEC_PER_SEC);
        run_done(&run);
}

TESTS_MAIN
