/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Deadlines kept in a field, the sd-event source moved only when one comes sooner: see lazy-timer.h. */

#include <assert.h>

#include "modelgated/event/lazy-timer.h"

static int arm(LazyTimer *t, usec_t when) {
        int r = sd_event_source_set_time(t->source, when);
        if (r >= 0)
                r = sd_event_source_set_enabled(t->source, SD_EVENT_ONESHOT);
        if (r < 0)
                return r;
        t->armed = when;
        return 0;
}

static int lazy_timer_cb(sd_event_source *s, uint64_t usec, void *userdata) {
        LazyTimer *t = userdata;

        t->armed = USEC_INFINITY; /* a ONESHOT source is off once it fired */
        if (t->deadline == USEC_INFINITY)
                return 0;
        /* usec is the time the source was set for: the deadline moved on since */
        if (t->deadline > usec) {
                (void)arm(t, t->deadline);
                return 0;
        }
        t->deadline = USEC_INFINITY;
        return t->handler(s, usec, t->userdata);
}

int lazy_timer_init(LazyTimer *t, sd_event *event, sd_event_time_handler_t handler, void *userdata) {
        assert(t);
        *t = (LazyTimer){
                .deadline = USEC_INFINITY, .armed = USEC_INFINITY, .handler = handler, .userdata = userdata};
        int r = sd_event_add_time(event, &t->source, CLOCK_MONOTONIC, USEC_INFINITY, 0, lazy_timer_cb, t);
        if (r < 0)
                return r;
        return sd_event_source_set_enabled(t->source, SD_EVENT_OFF);
}

void lazy_timer_done(LazyTimer *t) {
        t->source = sd_event_source_disable_unref(t->source);
        t->deadline = t->armed = USEC_INFINITY;
}

int lazy_timer_set(LazyTimer *t, usec_t deadline) {
        assert(t);
        t->deadline = deadline;
        /* a source set for sooner fires first, and looks again */
        if (deadline >= t->armed)
                return 0;
        return arm(t, deadline);
}
