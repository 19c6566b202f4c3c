/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The /models/sse hub: every subscriber gets every host's relabelled event, and a comment every 15 s
 * while anyone follows, so that idle feeds stay open through intermediaries. The hub knows subscribers
 * only through FeedSubscriberOps: a connection embeds a FeedSubscriber and says how bytes reach it. */

#include <stdbool.h>
#include <stddef.h>
#include <systemd/sd-event.h>

#include "shared/list.h"

typedef struct FeedHub FeedHub;
typedef struct FeedSubscriber FeedSubscriber;

typedef struct FeedSubscriberOps {
        /* Writes bytes to the subscriber. One that cannot take them (too far behind, or gone) ends
         * itself here, and leaves the hub (feed_hub_unsubscribe()) before it is freed. */
        void (*send)(FeedSubscriber *s, const char *p, size_t n);
} FeedSubscriberOps;

struct FeedSubscriber {
        LIST_FIELDS(FeedSubscriber, subscribers);
        const FeedSubscriberOps *ops;
        bool subscribed;
};

int feed_hub_new(sd_event *event, FeedHub **ret);
FeedHub *feed_hub_free(FeedHub *h);
size_t feed_hub_count(const FeedHub *h);
void feed_hub_subscribe(FeedHub *h, FeedSubscriber *s, const FeedSubscriberOps *ops);
void feed_hub_unsubscribe(FeedHub *h, FeedSubscriber *s);
/* Sends an event (or comment) to every subscriber. */
void feed_hub_broadcast(FeedHub *h, const char *p, size_t n);
