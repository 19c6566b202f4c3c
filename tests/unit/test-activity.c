/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* rule:activity-feed: a request's live events and its copy in the ring show the same times */
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-event.h>

#include "modelgated/records/activity.h"
#include "shared/buffer.h"
#include "shared/time-util.h"
#include "tests.h"

typedef struct Catcher {
        FeedSubscriber s;
        char last[4096];
} Catcher;

static void catch_send(FeedSubscriber *s, const FeedEvent *e) {
        Catcher *c = (Catcher *)s;
        size_t n = e->size < sizeof(c->last) ? e->size : sizeof(c->last) - 1;

        memcpy(c->last, e->text, n);
        c->last[n] = 0;
}

static const FeedSubscriberOps catch_ops = {.send = catch_send};

static int nothing(sd_event_source *s, void *userdata) {
        return 0;
}

/* The loop's CLOCK_REALTIME minus its CLOCK_MONOTONIC, as this iteration read them */
static usec_t loop_offset(sd_event *e) {
        uint64_t rt, mono;

        ASSERT_OK(sd_event_now(e, CLOCK_REALTIME, &rt));
        ASSERT_OK(sd_event_now(e, CLOCK_MONOTONIC, &mono));
        return rt - mono;
}

/* Iterations of the loop until its two clocks' difference is not what it was: they are read one after the
 * other, so it moves by a microsecond or more from one iteration to another; a bounded number of tries */
static void run_until_offset_moves(sd_event *e, sd_event_source *kick) {
        usec_t before = loop_offset(e);

        for (unsigned i = 0; i < 100000; i++) {
                ASSERT_OK(sd_event_source_set_enabled(kick, SD_EVENT_ONESHOT));
                ASSERT_TRUE(sd_event_run(e, 0) >= 0);
                if (loop_offset(e) != before)
                        return;
        }
        FAIL("the loop's clocks kept the same difference for 100000 iterations: this test shows nothing "
             "here");
}

TEST(the_ring_shows_a_request_with_the_times_its_live_events_showed) {
        _cleanup_(sd_event_unrefp) sd_event *e = NULL;
        sd_event_source *kick = NULL;
        Activity *a = NULL;
        Catcher c = {};
        ActivityRequest r = {.id = {"t-1", 3},
                             .model = "3090-laguna-xs",
                             .host = "3090",
                             .engine = "mainline",
                             .api = "chat"};
        _cleanup_(buffer_done) Buffer snap = {};
        uint64_t now;

        ASSERT_OK(sd_event_new(&e));
        ASSERT_OK(sd_event_add_defer(e, &kick, nothing, NULL));
        ASSERT_OK(activity_new(e, &a));
        feed_hub_subscribe(activity_hub(a), &c.s, &catch_ops);
        ASSERT_TRUE(sd_event_run(e, 0) >= 0);

        ASSERT_OK(sd_event_now(e, CLOCK_MONOTONIC, &now));
        activity_request_begin(a, &r, now);
        run_until_offset_moves(e, kick);
        ASSERT_OK(sd_event_now(e, CLOCK_MONOTONIC, &now));
        r.status = 200;
        activity_request_done(&r, now);
        /* "event: request\ndata: {…}\n\n": the object */
        char *live = strstr(c.last, "data: ");
        ASSERT_TRUE(live && strstr(live, "\"phase\":\"done\""));
        live += strlen("data: ");
        live[strcspn(live, "\n")] = 0;

        run_until_offset_moves(e, kick);
        ASSERT_OK(activity_render_snapshot(a, NULL, 0, &snap));
        ASSERT_OK(buffer_append_str(&snap, ""));
        char *s = strndup(buffer_peek(&snap), buffer_size(&snap));
        ASSERT_TRUE(s);
        if (!strstr(s, live)) {
                fprintf(stderr, "live:     %s\nsnapshot: %s\n", live, s);
                FAIL("the ring's copy differs from the live done event");
        }
        free(s);

        feed_hub_unsubscribe(activity_hub(a), &c.s);
        activity_free(a);
        sd_event_source_unref(kick);
}

TESTS_MAIN
