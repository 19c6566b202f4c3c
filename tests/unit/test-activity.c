/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* rule:activity-feed: a request's live events and its copy in the ring show the same times; rule:sessions:
 * a session's requests add up in its row, which the snapshot and a "session" event show, by label only */
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
        char all[16384]; /* every event since it was last emptied, as far as they fit */
} Catcher;

static void catch_send(FeedSubscriber *s, const FeedEvent *e) {
        Catcher *c = (Catcher *)s;
        size_t n = e->size < sizeof(c->last) ? e->size : sizeof(c->last) - 1, l = strlen(c->all);

        memcpy(c->last, e->text, n);
        c->last[n] = 0;
        if (l + n < sizeof(c->all)) {
                memcpy(c->all + l, e->text, n);
                c->all[l + n] = 0;
        }
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

/* A request of session id under caller who, from begin to done with these numbers */
static void turn(Activity *a, ActivityRequest *r, AliasClient who, const char *label, bool generating,
                 usec_t now, uint64_t waited, bool caused_switch, int64_t in, int64_t out) {
        *r = (ActivityRequest){.id = {"t-2", 3},
                               .model = "laguna",
                               .host = "3090",
                               .engine = "mainline",
                               .key = streq(who.key, "aaaa") ? "ops:aaaa" : "ops:bbbb",
                               .api = "messages",
                               .session_who = who,
                               .session = label,
                               .turn = generating};
        activity_request_begin(a, r, now);
        r->status = 200;
        r->queued_usec = waited;
        r->switch_usec = 0;
        r->caused_switch = caused_switch;
        r->tokens_in = in;
        r->tokens_cached = -1;
        r->tokens_out = out;
        r->first_byte_ms = r->duration_ms = 1;
        r->prefill_tps = r->decode_tps = -1;
        r->queued_at = r->switch_at = 0;
        activity_request_done(r, now + 1000);
}

TEST(a_sessions_requests_add_up_in_its_row_and_two_keys_are_two_rows) {
        _cleanup_(sd_event_unrefp) sd_event *e = NULL;
        _cleanup_(buffer_done) Buffer snap = {};
        Activity *a = NULL;
        Catcher c = {};
        ActivityRequest r = {}, held = {};
        AliasClient one = {.key = "aaaa", .session = 11}, other = {.key = "bbbb", .session = 11};
        uint64_t now;

        ASSERT_OK(sd_event_new(&e));
        ASSERT_OK(activity_new(e, &a));
        ASSERT_TRUE(sd_event_now(e, CLOCK_MONOTONIC, &now) >= 0);
        /* three requests of one session: two turns (one waited 2 s and switched), one token count */
        turn(a, &r, one, "0123456789ab", true, now, 2 * USEC_PER_SEC, true, 100, 7);
        turn(a, &r, one, "0123456789ab", true, now + 10000, 0, false, 120, 9);
        turn(a, &r, one, "0123456789ab", false, now + 20000, 0, false, -1, -1);
        /* the same id under another key: a session of its own */
        turn(a, &r, other, "0123456789ab", true, now + 30000, 0, false, 5, 1);
        /* one of the first session in flight, seen live */
        feed_hub_subscribe(activity_hub(a), &c.s, &catch_ops);
        held = (ActivityRequest){.id = {"t-3", 3},
                                 .model = "laguna",
                                 .host = "a9",
                                 .engine = "mainline",
                                 .key = "ops:aaaa",
                                 .api = "messages",
                                 .session_who = one,
                                 .session = "0123456789ab",
                                 .turn = true};
        activity_request_begin(a, &held, now + 40000);
        ASSERT_TRUE(strstr(c.last, "event: request\n"));
        /* the request's event names its session */
        ASSERT_TRUE(strstr(c.last, "\"session\":\"0123456789ab\""));

        ASSERT_OK(activity_render_snapshot(a, NULL, 0, &snap));
        ASSERT_OK(buffer_append_str(&snap, ""));
        char *s = strndup(buffer_peek(&snap), buffer_size(&snap));
        ASSERT_TRUE(s);
        char *rows = strstr(s, "\"sessions\":[");
        ASSERT_TRUE(rows);
        /* the most recently active first: the one in flight, on a9 now */
        char *first = strstr(rows, "{"), *second = strstr(first + 1, "},{");
        ASSERT_TRUE(first && second);
        *second = 0;
        ASSERT_TRUE(strstr(first, "\"session\":\"0123456789ab\",\"key\":\"ops:aaaa\",\"host\":\"a9\""));
        ASSERT_TRUE(strstr(first, "\"turns\":2,\"in_flight\":1,\"waits\":1,\"wait_ms\":2000,\"switches\":1,"
                                  "\"tokens_in\":220,\"tokens_cached\":0,\"tokens_out\":16"));
        ASSERT_TRUE(strstr(second + 2,
                           "\"turns\":1,\"in_flight\":0,\"waits\":0,\"wait_ms\":0,\"switches\":0,"
                           "\"tokens_in\":5,"));
        free(s);

        /* its end: the row's event, the request no longer in flight */
        held.status = 200;
        held.tokens_in = held.tokens_cached = held.tokens_out = -1;
        held.prefill_tps = held.decode_tps = -1;
        c.all[0] = 0;
        activity_request_done(&held, now + 50000);
        char *row = strstr(c.all, "event: session\n");
        ASSERT_TRUE(row && strstr(row, "\"turns\":3,\"in_flight\":0,"));
        /* a request forgotten without its end leaves its row too */
        held = (ActivityRequest){
                .id = {"t-4", 3}, .session_who = one, .session = "0123456789ab", .turn = true};
        c.all[0] = 0;
        activity_request_begin(a, &held, now + 60000);
        row = strstr(c.all, "event: session\n");
        ASSERT_TRUE(row && strstr(row, "\"in_flight\":1,"));
        /* the row shows the latest request's host and engine: none, not the one before */
        row[strcspn(row, "\n") + 1 + strcspn(row + strcspn(row, "\n") + 1, "\n")] = 0;
        ASSERT_TRUE(strstr(row, "\"key\":null,\"host\":null,\"engine\":null,"));
        activity_request_forget(&held);
        buffer_clear(&snap);
        ASSERT_OK(activity_render_snapshot(a, NULL, 0, &snap));
        ASSERT_OK(buffer_terminate(&snap)); /* strstr() reads to a NUL */
        ASSERT_TRUE(!strstr(buffer_peek(&snap), "\"in_flight\":1,"));

        feed_hub_unsubscribe(activity_hub(a), &c.s);
        activity_free(a);
}

/* rule:ui-timeline: a host event says when its engine came up, whether it was adopted and why it stops, so
 * that /ui draws the run from there; a change of any of them is an event */
TEST(a_host_event_says_when_its_engine_came_up_and_why_it_stops) {
        _cleanup_(sd_event_unrefp) sd_event *e = NULL;
        Activity *a = NULL;
        Catcher c = {};
        ActivityHost h = {.name = "3090",
                          .state = "serving",
                          .engine = "mainline",
                          .engine_since = 1796000000000000ULL,
                          .adopted = true};

        ASSERT_OK(sd_event_new(&e));
        ASSERT_OK(activity_new(e, &a));
        feed_hub_subscribe(activity_hub(a), &c.s, &catch_ops);
        activity_host_changed(a, &h);
        ASSERT_TRUE(strstr(c.last, "\"state\":\"serving\",\"engine\":\"mainline\",\"switching_to\":null,"
                                   "\"engine_since\":1796000000000000,\"adopted\":true,\"stopping\":null,"));
        c.last[0] = 0;
        activity_host_changed(a, &h); /* the same view: no event */
        ASSERT_STREQ(c.last, "");
        h.stopping = "idle-stop";
        activity_host_changed(a, &h);
        ASSERT_TRUE(strstr(c.last, "\"adopted\":true,\"stopping\":\"idle-stop\","));
        h = (ActivityHost){.name = "3090", .state = "idle"};
        activity_host_changed(a, &h);
        ASSERT_TRUE(strstr(c.last, "\"engine\":null,\"switching_to\":null,\"engine_since\":null,"
                                   "\"adopted\":false,\"stopping\":null,"));
        feed_hub_unsubscribe(activity_hub(a), &c.s);
        activity_free(a);
}

TESTS_MAIN
