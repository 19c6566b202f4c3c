/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The /models/sse hub: every subscriber is handed every host's relabelled event, with the host and model it
 * concerns, and a comment every 15 s while anyone follows, so that idle feeds stay open through
 * intermediaries. Which events a subscriber may see is its own business (a caller's tier): the hub knows
 * subscribers only through FeedSubscriberOps, and a connection embeds a FeedSubscriber and says how an
 * event reaches it, or that it does not. */

#include <stdbool.h>
#include <stddef.h>
#include <systemd/sd-event.h>

#include "shared/list.h"

typedef struct FeedHub FeedHub;
typedef struct FeedSubscriber FeedSubscriber;

/* A piece of the feed and whom it concerns: what it names is all a subscriber needs to decide whether its
 * caller may see it. */
typedef struct FeedEvent {
        const char *host;  /* the host it comes from; NULL: from none (the keepalive), for everyone */
        const char *model; /* the client-visible "<host>-<key>" it is about; NULL: the whole host */
        const char *text;  /* "data: …\n\n", or a comment */
        size_t size;
} FeedEvent;

typedef struct FeedSubscriberOps {
        /* Hands an event to the subscriber, which writes it, or not, if its caller may not see what it
         * concerns. One that cannot take it (too far behind, or gone) ends itself here, and leaves the hub
         * (feed_hub_unsubscribe()) before it is freed. */
        void (*send)(FeedSubscriber *s, const FeedEvent *e);
} FeedSubscriberOps;

struct FeedSubscriber {
        LIST_FIELDS(FeedSubscriber, subscribers);
        const FeedSubscriberOps *ops;
        bool subscribed;
};

/* In the open only so that feed_hub_count() is inline: /activity's record asks it at each phase of every
 * request. The rest of modelgate leaves its fields to feed-hub.c. */
struct FeedHub {
        sd_event *event;
        FeedSubscriber *subscribers;
        size_t n_subscribers;
        sd_event_source *keepalive;
};

int feed_hub_new(sd_event *event, FeedHub **ret);
FeedHub *feed_hub_free(FeedHub *h);
static inline size_t feed_hub_count(const FeedHub *h) {
        return h->n_subscribers;
}
void feed_hub_subscribe(FeedHub *h, FeedSubscriber *s, const FeedSubscriberOps *ops);
void feed_hub_unsubscribe(FeedHub *h, FeedSubscriber *s);
/* Hands an event (or comment) to every subscriber. */
void feed_hub_broadcast(FeedHub *h, const FeedEvent *e);
