/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* A timer whose deadline moves with every request and is seldom reached: a connection's idle and header
 * timeouts, an upstream connection's. Setting an sd-event timer costs several hundred instructions (two
 * priority queues reshuffled, the clock's timerfd re-armed on the next turn of the loop), and a
 * keep-alive connection moved its timers five times a request. Here the deadline is a field: the
 * sd-event source is moved only when the deadline comes before the time the source is set for, and when
 * the source fires before the deadline its callback sets it for the deadline and returns (nginx keeps
 * its timers the same way). A deadline given up (USEC_INFINITY) leaves the source as it is: it fires
 * once more for nothing. */

#include <systemd/sd-event.h>

#include "shared/time-util.h"

typedef struct LazyTimer {
        sd_event_source *source; /* CLOCK_MONOTONIC, ONESHOT while set */
        usec_t deadline;         /* when the handler runs; USEC_INFINITY: never */
        usec_t armed;            /* what the source is set for; USEC_INFINITY: off */
        sd_event_time_handler_t handler;
        void *userdata;
} LazyTimer;

/* Makes the source, off. The handler gets the timer's source, the deadline and userdata. */
int lazy_timer_init(LazyTimer *t, sd_event *event, sd_event_time_handler_t handler, void *userdata);
void lazy_timer_done(LazyTimer *t);
/* A new deadline (CLOCK_MONOTONIC), or USEC_INFINITY for none. < 0 when the source could not be moved
 * (it then fires when it was set to, and sets itself again). */
int lazy_timer_set(LazyTimer *t, usec_t deadline);
