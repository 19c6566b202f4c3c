/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The /models/sse subscribers and their keepalive. A subscriber that cannot take an event (too far
 * behind, or gone) leaves the hub from inside its send, so a broadcast never touches it again. Every
 * subscriber is handed every event: which ones it shows is its own decision. */

#include <assert.h>
#include <stdlib.h>

#include "modelgated/event/feed-hub.h"
#include "shared/macro.h"
#include "shared/time-util.h"

#define FEED_KEEPALIVE_USEC (15 * USEC_PER_SEC)

int feed_hub_new(sd_event *event, FeedHub **ret) {
        FeedHub *h = calloc(1, sizeof(FeedHub));

        if (!h)
                return -ENOMEM;
        h->event = sd_event_ref(event);
        *ret = h;
        return 0;
}

FeedHub *feed_hub_free(FeedHub *h) {
        if (!h)
                return NULL;
        while (h->subscribers)
                feed_hub_unsubscribe(h, h->subscribers);
        sd_event_source_disable_unref(h->keepalive);
        sd_event_unref(h->event);
        return mfree(h);
}

/* An SSE comment every 15 s keeps idle /models/sse feeds alive through intermediaries. */
static int keepalive_cb(sd_event_source *s, uint64_t usec, void *userdata) {
        FeedHub *h = userdata;
        static const char comment[] = ": keepalive\n\n";

        if (h->n_subscribers == 0)
                return 0;
        feed_hub_broadcast(h, &(const FeedEvent){.text = comment, .size = sizeof(comment) - 1});
        (void)sd_event_source_set_time_relative(s, FEED_KEEPALIVE_USEC);
        (void)sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
        return 0;
}

static void keepalive_arm(FeedHub *h) {
        if (!h->keepalive) {
                if (sd_event_add_time_relative(h->event, &h->keepalive, CLOCK_MONOTONIC, FEED_KEEPALIVE_USEC,
                                               0, keepalive_cb, h) < 0)
                        return;
        } else if (sd_event_source_get_enabled(h->keepalive, NULL) > 0)
                return;
        else
                (void)sd_event_source_set_time_relative(h->keepalive, FEED_KEEPALIVE_USEC);
        (void)sd_event_source_set_enabled(h->keepalive, SD_EVENT_ONESHOT);
}

void feed_hub_subscribe(FeedHub *h, FeedSubscriber *s, const FeedSubscriberOps *ops) {
        assert(h);
        if (s->subscribed)
                return;
        s->ops = ops;
        s->subscribed = true;
        LIST_PREPEND(subscribers, h->subscribers, s);
        h->n_subscribers++;
        keepalive_arm(h);
}

void feed_hub_unsubscribe(FeedHub *h, FeedSubscriber *s) {
        assert(h);
        if (!s->subscribed)
                return;
        LIST_REMOVE(subscribers, h->subscribers, s);
        h->n_subscribers--;
        s->subscribed = false;
}

void feed_hub_broadcast(FeedHub *h, const FeedEvent *e) {
        assert(h);
        LIST_FOREACH_SAFE (subscribers, s, next, h->subscribers)
                s->ops->send(s, e);
}
