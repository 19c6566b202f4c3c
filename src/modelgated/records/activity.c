/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The live activity (rule:activity-feed): requests in flight, the ring of the last finished ones, the
 * hosts' last views, and the /activity subscribers. Events are rendered only while someone subscribes;
 * a request's end is a struct copy into the ring, rendered when a snapshot asks for it. Only names, ids
 * and numbers are ever written (rule:no-text-in-activity). */

#include <assert.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "modelgated/event/socket-watch.h"
#include "modelgated/records/activity.h"
#include "modelgated/api/request-id.h"
#include "modelgated/api/route.h"
#include "shared/macro.h"

/* A finished request in the ring: its record, whose names point at the slot's own copies */
typedef struct ActivitySlot {
        ActivityRequest r;
        char id[REQUEST_ID_MAX + 1], model[128], host[64], engine[64], key[80], fallback[64];
        char session[SESSION_LABEL_LEN + 1];
        char upstream_error[256];
} ActivitySlot;

struct Activity {
        sd_event *event;
        FeedHub *hub;
        ActivityRequest *inflight;
        ActivitySlot *ring; /* ACTIVITY_RECENT, oldest at ring_next once full */
        size_t ring_next, ring_n;
        ActivityHost *hosts; /* the last view of each host shown */
        size_t n_hosts;
        SessionTable *sessions;                 /* rule:sessions: made with the first request of a session */
        HistoryFile *history;                   /* rule:history: without a journal, the ring's file */
        usec_t realtime_offset, offset_read_at; /* realtime_offset() */
};

static const char *const phase_names[_ACTIVITY_PHASE_MAX] = {
        [ACTIVITY_ADMITTED] = "admitted",     [ACTIVITY_QUEUED] = "queued",
        [ACTIVITY_SWITCHING] = "switching",   [ACTIVITY_LOADING] = "loading",
        [ACTIVITY_FIRST_BYTE] = "first_byte", [ACTIVITY_DONE] = "done",
};

const char *activity_phase_to_string(ActivityPhase p) {
        return p >= 0 && p < _ACTIVITY_PHASE_MAX ? phase_names[p] : NULL;
}

int activity_new(sd_event *event, Activity **ret) {
        Activity *a = calloc(1, sizeof(Activity));

        if (!a)
                return -ENOMEM;
        a->event = sd_event_ref(event);
        int r = feed_hub_new(event, &a->hub);
        if (r < 0) {
                activity_free(a);
                return r;
        }
        *ret = a;
        return 0;
}

Activity *activity_free(Activity *a) {
        if (!a)
                return NULL;
        while (a->inflight)
                activity_request_forget(a->inflight);
        feed_hub_free(a->hub);
        session_table_free(a->sessions);
        free(a->ring);
        free(a->hosts);
        sd_event_unref(a->event);
        return mfree(a);
}

bool activity_watched(const Activity *a) {
        return a && feed_hub_count(a->hub) > 0;
}

FeedHub *activity_hub(Activity *a) {
        assert(a);
        return a->hub;
}

/* The loop's time of this iteration (no system call), on the clock a request's times are kept on: the
 * client's, which hands its own reading of it to each phase, so that a request costs no clock read here */
static usec_t activity_now(Activity *a, clockid_t clock) {
        usec_t t;

        if (clock == CLOCK_MONOTONIC)
                return socket_watch_loop_now(a->event);
        if (sd_event_now(a->event, clock, &t) < 0)
                return now_usec(clock);
        return t;
}

/* What to add to a CLOCK_MONOTONIC time (now, the caller's) to show it as CLOCK_REALTIME. It moves by
 * microseconds from one event loop iteration to the next, and by a step when the clock is set: a request
 * takes it once, so that its events and its ring copy agree, and it is read again after a second, so that
 * a step shows soon without two clock reads for every request. */
static usec_t realtime_offset(Activity *a, usec_t now) {
        if (a->offset_read_at == 0 || now - a->offset_read_at >= USEC_PER_SEC) {
                a->realtime_offset = activity_now(a, CLOCK_REALTIME) - activity_now(a, CLOCK_MONOTONIC);
                a->offset_read_at = now;
        }
        return a->realtime_offset;
}

/* Short copies, cut to the field: cheaper than snprintf() */
static void copy_span(char *dst, size_t size, Span s) {
        size_t n = MIN(s.n, size - 1);

        if (n > 0)
                memcpy(dst, s.p, n);
        dst[n] = 0;
}

static const char *copy_str(char *dst, size_t size, const char *s) {
        if (!s || !*s)
                return NULL;
        copy_span(dst, size, (Span){s, strnlen(s, size - 1)});
        return dst;
}

/* JSON writers: strings are quoted (names a client gave may hold anything), empty ones are null */
static void put_str(Buffer *b, const char *name, const char *v) {
        (void)buffer_printf(b, ",\"%s\":", name);
        if (!v || !*v)
                (void)buffer_append_str(b, "null");
        else
                (void)json_quote_append(b, v, json_quoted_len(v));
}

static void put_num(Buffer *b, const char *name, int64_t v) {
        if (v < 0)
                (void)buffer_printf(b, ",\"%s\":null", name);
        else
                (void)buffer_printf(b, ",\"%s\":%lld", name, (long long)v);
}

static void put_real(Buffer *b, const char *name, double v) {
        if (v < 0)
                (void)buffer_printf(b, ",\"%s\":null", name);
        else
                (void)buffer_printf(b, ",\"%s\":%.2f", name, v);
}

static void put_time(Buffer *b, const char *name, usec_t v) {
        put_num(b, name, v == 0 || v == USEC_INFINITY ? -1 : (int64_t)v);
}

static void render_host(Buffer *b, const ActivityHost *h, usec_t t) {
        (void)buffer_printf(b, "{\"t\":%llu", (unsigned long long)t);
        put_str(b, "host", h->name);
        put_str(b, "state", h->state);
        put_str(b, "engine", h->engine);
        put_str(b, "switching_to", h->switching_to);
        put_time(b, "engine_since", h->engine_since);
        (void)buffer_printf(b, ",\"adopted\":%s", h->adopted ? "true" : "false");
        put_str(b, "stopping", h->stopping);
        put_time(b, "hold_down_until", h->hold_down_until);
        put_time(b, "idle_stop_at", h->idle_stop_at);
        (void)buffer_printf(b, ",\"in_flight\":%u,\"waiting\":%u", h->in_flight, h->waiting);
        if (h->cache_step) {
                /* a name of ours: nothing to quote */
                (void)buffer_printf(b, ",\"prompt_cache\":{\"step\":\"%s\"", h->cache_step);
                put_str(b, "engine", h->cache_engine);
                put_time(b, "started", h->cache_started);
                put_time(b, "ended", h->cache_ended);
                put_num(b, "duration_ms",
                        h->cache_ended ? (int64_t)((h->cache_ended - MIN(h->cache_ended, h->cache_started)) /
                                                   USEC_PER_MSEC)
                                       : -1);
                (void)buffer_printf(b, ",\"slots\":%llu,\"tokens\":%llu,\"bytes\":%llu}",
                                    (unsigned long long)h->cache_slots, (unsigned long long)h->cache_tokens,
                                    (unsigned long long)h->cache_bytes);
        } else
                (void)buffer_append_str(b, ",\"prompt_cache\":null");
        (void)buffer_append_str(b, "}");
}

static void render_request(Buffer *b, const ActivityRequest *r) {
        char id[REQUEST_ID_MAX + 1];
        usec_t realtime = r->realtime;

        (void)buffer_printf(b, "{\"t\":%llu", (unsigned long long)(r->t + realtime));
        copy_span(id, sizeof(id), r->id);
        put_str(b, "id", id);
        put_str(b, "phase", activity_phase_to_string(r->phase));
        put_str(b, "model", r->model);
        put_str(b, "host", r->host);
        put_str(b, "engine", r->engine);
        put_str(b, "key", r->key);
        put_str(b, "session", r->session);
        put_str(b, "api", r->api ?: "other");
        (void)buffer_printf(b, ",\"stream\":%s,\"started\":%llu", r->stream ? "true" : "false",
                            (unsigned long long)(r->started + realtime));
        switch (r->phase) {
        case ACTIVITY_QUEUED:
                (void)buffer_printf(b, ",\"position\":%u", r->position);
                put_str(b, "waits_for", r->waits_for);
                put_real(b, "hold_down_left", r->hold_down_left);
                break;
        case ACTIVITY_LOADING:
                put_real(b, "progress", r->progress < 0 ? -1 : r->progress / 100.0);
                break;
        case ACTIVITY_FIRST_BYTE:
                put_num(b, "first_byte_ms", r->first_byte_ms);
                break;
        case ACTIVITY_DONE:
                (void)buffer_printf(b, ",\"status\":%d", r->status);
                put_num(b, "duration_ms", r->duration_ms);
                put_num(b, "first_byte_ms", r->first_byte_ms);
                put_num(b, "queued_ms", (int64_t)(r->queued_usec / USEC_PER_MSEC));
                put_num(b, "switch_ms", (int64_t)(r->switch_usec / USEC_PER_MSEC));
                put_num(b, "tokens_in", r->tokens_in);
                put_num(b, "tokens_cached", r->tokens_cached);
                put_num(b, "tokens_prefilled", r->tokens_prefilled);
                put_num(b, "tokens_out", r->tokens_out);
                put_real(b, "prefill_tps", r->prefill_tps);
                put_real(b, "decode_tps", r->decode_tps);
                (void)buffer_printf(b, ",\"cut\":%s", r->cut ? "true" : "false");
                put_str(b, "fallback", r->fallback);
                if (r->upstream_error_status > 0) {
                        (void)buffer_printf(b, ",\"upstream_status\":%d", r->upstream_error_status);
                        put_str(b, "upstream_error", r->upstream_error);
                }
                break;
        default:
                break;
        }
        (void)buffer_append_str(b, "}");
}

/* rule:sessions: a session's row; its times as its last request showed them */
static void render_session(Buffer *b, const Session *s, usec_t t) {
        (void)buffer_printf(b, "{\"t\":%llu", (unsigned long long)t);
        put_str(b, "session", s->label);
        put_str(b, "key", s->key);
        put_str(b, "host", s->host);
        put_str(b, "engine", s->engine);
        put_str(b, "model", s->model);
        (void)buffer_printf(b,
                            ",\"first\":%llu,\"last\":%llu,\"turns\":%u,\"in_flight\":%u,\"waits\":%u,"
                            "\"wait_ms\":%llu,\"switches\":%u,\"tokens_in\":%llu,\"tokens_cached\":%llu,"
                            "\"tokens_out\":%llu}",
                            (unsigned long long)(s->first + s->realtime),
                            (unsigned long long)(s->last + s->realtime), s->turns, s->in_flight, s->waits,
                            (unsigned long long)(s->wait_usec / USEC_PER_MSEC), s->switches,
                            (unsigned long long)s->tokens_in, (unsigned long long)s->tokens_cached,
                            (unsigned long long)s->tokens_out);
}

/* One event to every subscriber (of a request, a host or a session): the hub's subscribers drop themselves
 * when they fall behind */
static void broadcast(Activity *a, const char *type, const ActivityRequest *r, const ActivityHost *h,
                      const Session *s) {
        /* its own buffer: a subscriber's send may close a connection, whose news may be an event too */
        _cleanup_(buffer_done) Buffer event = {};
        Buffer *b = &event;

        (void)buffer_printf(b, "event: %s\ndata: ", type);
        if (r)
                render_request(b, r);
        else if (s)
                render_session(b, s, activity_now(a, CLOCK_REALTIME));
        else
                render_host(b, h, activity_now(a, CLOCK_REALTIME));
        if (buffer_append_str(b, "\n\n") < 0)
                return; /* out of memory: this event is not shown */
        feed_hub_broadcast(a->hub, &(const FeedEvent){.text = buffer_peek(b), .size = buffer_size(b)});
}

/* The time spent in the phase that ends at now */
static void close_phase(ActivityRequest *r, usec_t now) {
        if (r->queued_at) {
                r->queued_usec += now - MIN(now, r->queued_at);
                r->queued_at = 0;
        }
        if (r->switch_at) {
                r->switch_usec += now - MIN(now, r->switch_at);
                r->switch_at = 0;
        }
}

/* A name of the row, the request's now (none: empty, where copy_str() would leave the old one) */
static void set_str(char *dst, size_t size, const char *s) {
        s = s ?: "";
        copy_span(dst, size, (Span){s, strnlen(s, size - 1)});
}

/* What the session's row says of its latest request */
static void session_note(Session *s, const ActivityRequest *r, usec_t now) {
        s->last = MAX(s->last, now);
        s->realtime = r->realtime;
        set_str(s->key, sizeof(s->key), r->key);
        set_str(s->host, sizeof(s->host), r->host);
        set_str(s->engine, sizeof(s->engine), r->engine);
        set_str(s->model, sizeof(s->model), r->model);
}

/* rule:sessions: the request is in flight in its session (again, on an alias's next target: its host) */
static void session_begin(Activity *a, ActivityRequest *r, usec_t now) {
        Session *s;

        if (!r->session_who.session || !r->session)
                return;
        if (!a->sessions && !(a->sessions = session_table_new()))
                return; /* out of memory: the request has no row, and goes on */
        s = session_table_get(a->sessions, &r->session_who, r->session_who.session, r->session, now);
        if (!r->session_open) {
                s->in_flight++;
                r->session_open = true;
        }
        session_note(s, r, now);
        if (activity_watched(a))
                broadcast(a, "session", NULL, NULL, s);
}

/* The request ended (done: with its numbers; else it is forgotten, and only leaves the row's in_flight).
 * A row pushed out meanwhile is made again: its numbers start from this request's. */
static void session_end(Activity *a, ActivityRequest *r, usec_t now, bool done) {
        Session *s;

        if (!r->session_open)
                return;
        r->session_open = false;
        if (!done) {
                s = session_table_find(a->sessions, &r->session_who, r->session_who.session, now);
                if (s && s->in_flight > 0)
                        s->in_flight--;
                return;
        }
        s = session_table_get(a->sessions, &r->session_who, r->session_who.session, r->session, now);
        if (s->in_flight > 0)
                s->in_flight--;
        s->turns += r->turn;
        s->switches += r->caused_switch;
        /* rule:queued-and-switch: a wait under the access line's millisecond is none */
        if (r->queued_usec + r->switch_usec >= USEC_PER_MSEC) {
                s->waits++;
                s->wait_usec += r->queued_usec + r->switch_usec;
        }
        s->tokens_in += (uint64_t)MAX(r->tokens_in, 0);
        s->tokens_cached += (uint64_t)MAX(r->tokens_cached, 0);
        s->tokens_out += (uint64_t)MAX(r->tokens_out, 0);
        session_note(s, r, now);
        if (activity_watched(a))
                broadcast(a, "session", NULL, NULL, s);
}

void activity_session_label(Activity *a, const AliasClient *who, Span id,
                            char ret[static SESSION_LABEL_LEN + 1], usec_t now) {
        assert(a && who);
        Session *s = a->sessions ? session_table_find(a->sessions, who, who->session, now) : NULL;

        if (s)
                memcpy(ret, s->label, sizeof(s->label));
        else
                (void)session_label(id, ret);
}

void activity_request_begin(Activity *a, ActivityRequest *r, usec_t now) {
        assert(a && r);

        if (!r->owner) {
                /* its memory was not cleared (the owner's is reused from request to request, and clearing
                 * it cost more than these stores): what the phases add up, and the times. A phase's own
                 * fields are set by the caller with that phase, before it is shown, and the numbers of
                 * "done" with the end, so none of them is written here. */
                r->owner = a;
                r->started = now;
                r->realtime = realtime_offset(a, now);
                r->queued_at = r->switch_at = r->queued_usec = r->switch_usec = 0;
                r->session_open = false;
                LIST_PREPEND(inflight, a->inflight, r);
        } else
                close_phase(r, now);
        r->t = now;
        r->phase = ACTIVITY_ADMITTED;
        session_begin(a, r, now);
        if (activity_watched(a))
                broadcast(a, "request", r, NULL, NULL);
}

void activity_request_phase(ActivityRequest *r, ActivityPhase p, usec_t now) {
        assert(r);
        Activity *a = r->owner;

        if (!a || (r->phase == p && p != ACTIVITY_QUEUED && p != ACTIVITY_LOADING))
                return;
        if (p != ACTIVITY_LOADING && p != r->phase)
                close_phase(r, now);
        if (p == ACTIVITY_QUEUED && !r->queued_at)
                r->queued_at = now;
        if (p == ACTIVITY_SWITCHING)
                r->switch_at = now;
        r->t = now;
        r->phase = p;
        if (activity_watched(a))
                broadcast(a, "request", r, NULL, NULL);
}

void activity_request_ready(ActivityRequest *r, usec_t now) {
        assert(r);
        if (r->owner)
                close_phase(r, now);
}

void activity_request_forget(ActivityRequest *r) {
        assert(r);
        if (!r->owner)
                return;
        session_end(r->owner, r, activity_now(r->owner, CLOCK_MONOTONIC), /* done= */ false);
        LIST_REMOVE(inflight, r->owner->inflight, r);
        r->owner = NULL;
}

/* A finished request into the ring: the one copy of its names (the owner's strings go with the request) */
static void ring_push(Activity *a, const ActivityRequest *r) {
        if (!a->ring)
                a->ring = malloc(ACTIVITY_RECENT * sizeof(ActivitySlot));
        if (a->ring) {
                ActivitySlot *slot = &a->ring[a->ring_next];
                /* from phase on: what only an in-flight record has is never read in the ring */
                memcpy(&slot->r.phase, &r->phase, sizeof(*r) - offsetof(ActivityRequest, phase));
                if (r->id.n == REQUEST_ID_MADE_LEN) { /* as a rule one of ours: a fixed-size copy */
                        memcpy(slot->id, r->id.p, REQUEST_ID_MADE_LEN);
                        slot->id[REQUEST_ID_MADE_LEN] = 0;
                } else
                        copy_span(slot->id, sizeof(slot->id), r->id);
                slot->r.id = (Span){slot->id, MIN(r->id.n, sizeof(slot->id) - 1)};
                slot->r.model = copy_str(slot->model, sizeof(slot->model), r->model);
                slot->r.host = copy_str(slot->host, sizeof(slot->host), r->host);
                slot->r.engine = copy_str(slot->engine, sizeof(slot->engine), r->engine);
                slot->r.key = copy_str(slot->key, sizeof(slot->key), r->key);
                slot->r.fallback = copy_str(slot->fallback, sizeof(slot->fallback), r->fallback);
                slot->r.session = copy_str(slot->session, sizeof(slot->session), r->session);
                slot->r.upstream_error =
                        copy_str(slot->upstream_error, sizeof(slot->upstream_error), r->upstream_error);
                if (++a->ring_next == ACTIVITY_RECENT)
                        a->ring_next = 0;
                a->ring_n = MIN(a->ring_n + 1, (size_t)ACTIVITY_RECENT);
        }
}

void activity_request_done(ActivityRequest *r, usec_t now) {
        assert(r);
        Activity *a = r->owner;

        if (!a)
                return;
        close_phase(r, now);
        r->t = now;
        r->phase = ACTIVITY_DONE;
        session_end(a, r, now, /* done= */ true);
        activity_request_forget(r);
        ring_push(a, r);
        if (activity_watched(a))
                broadcast(a, "request", r, NULL, NULL);
}

void activity_request_ended(ActivityRequest *r, const RequestRecord *rec, usec_t start) {
        const Usage *u = rec->usage;

        assert(r && rec);
        r->status = rec->status;
        /* rule:queued-and-switch: the access line's own figures, so that the two never disagree */
        r->queued_usec = rec->queued;
        r->switch_usec = rec->switched;
        r->duration_ms = (int64_t)(rec->duration / USEC_PER_MSEC);
        r->first_byte_ms = rec->first_byte ? (int64_t)(rec->first_byte / USEC_PER_MSEC) : -1;
        r->tokens_in = u ? u->in : -1;
        r->tokens_cached = u ? u->cached : -1;
        r->tokens_prefilled = u ? usage_prefilled(u) : -1;
        r->tokens_out = u ? u->out : -1;
        r->prefill_tps = u ? usage_speed(u->prompt_n, u->prompt_ms) : -1;
        r->decode_tps = u ? usage_speed(u->predicted_n, u->predicted_ms) : -1;
        r->cut = rec->cut;
        r->upstream_error_status = rec->upstream_error_status;
        r->upstream_error = rec->upstream_error_status ? rec->upstream_error : NULL;
        r->caused_switch = rec->caused_switch;
        r->fallback = rec->fallback;
        if (rec->fallback)
                r->engine = NULL;
        activity_request_done(r, start + rec->duration);
}

void activity_set_history(Activity *a, HistoryFile *f) {
        assert(a);
        a->history = f;
}

HistoryFile *activity_history(Activity *a) {
        return a ? a->history : NULL;
}

void activity_restore(Activity *a, const ActivityRequest *r) {
        assert(a && r && r->phase == ACTIVITY_DONE);
        ring_push(a, r);
}

static bool host_view_eq(const ActivityHost *x, const ActivityHost *y) {
        return streq(x->state, y->state) && streq(x->engine, y->engine) &&
               streq(x->switching_to, y->switching_to) && x->engine_since == y->engine_since &&
               x->adopted == y->adopted && streq_ptr(x->stopping, y->stopping) &&
               x->hold_down_until == y->hold_down_until && x->idle_stop_at == y->idle_stop_at &&
               x->in_flight == y->in_flight && x->waiting == y->waiting &&
               streq_ptr(x->cache_step, y->cache_step) && streq(x->cache_engine, y->cache_engine) &&
               x->cache_started == y->cache_started && x->cache_ended == y->cache_ended &&
               x->cache_slots == y->cache_slots && x->cache_bytes == y->cache_bytes;
}

/* The host's last view, made when it is first shown; NULL: out of memory */
static ActivityHost *host_slot(Activity *a, const char *name) {
        for (size_t i = 0; i < a->n_hosts; i++)
                if (streq(a->hosts[i].name, name))
                        return &a->hosts[i];
        ActivityHost *n = reallocarray(a->hosts, a->n_hosts + 1, sizeof(ActivityHost));
        if (!n)
                return NULL;
        a->hosts = n;
        n[a->n_hosts] = (ActivityHost){.state = ""};
        snprintf(n[a->n_hosts].name, sizeof(n->name), "%s", name);
        return &n[a->n_hosts++];
}

/* The requests queued on h for the engine it switches to now wait for that switch (again for each change
 * of the host's view while it switches: only those still queued move) */
static void promote_switching(Activity *a, const ActivityHost *h) {
        LIST_FOREACH_SAFE (inflight, r, next, a->inflight)
                if (r->phase == ACTIVITY_QUEUED && streq_ptr(r->host, h->name) &&
                    streq_ptr(r->engine, h->switching_to))
                        activity_request_phase(r, ACTIVITY_SWITCHING, activity_now(a, CLOCK_MONOTONIC));
}

void activity_host_changed(Activity *a, const ActivityHost *h) {
        assert(a && h);
        ActivityHost *last = host_slot(a, h->name);

        if (last && host_view_eq(last, h))
                return;
        if (last)
                *last = *h;
        if (activity_watched(a))
                broadcast(a, "host", NULL, h, NULL);
        if (h->switching_to[0])
                promote_switching(a, h);
}

/* rule:sessions: the sessions not forgotten, the most recently active first */
static void render_sessions(Activity *a, Buffer *out, usec_t t) {
        const Session *list[2 * SESSION_TABLE_ENTRIES];
        size_t n;

        if (!a->sessions)
                return;
        n = session_table_list(a->sessions, activity_now(a, CLOCK_MONOTONIC), list, ELEMENTSOF(list));
        for (size_t i = 0; i < n; i++) {
                if (i > 0)
                        (void)buffer_append_str(out, ",");
                render_session(out, list[i], t);
        }
}

int activity_render_snapshot(Activity *a, const ActivityHost *hosts, size_t n_hosts, Buffer *out) {
        assert(a && out);
        usec_t now = activity_now(a, CLOCK_REALTIME);

        (void)buffer_printf(out, "{\"t\":%llu,\"hosts\":[", (unsigned long long)now);
        for (size_t i = 0; i < n_hosts; i++) {
                if (i > 0)
                        (void)buffer_append_str(out, ",");
                render_host(out, &hosts[i], now);
        }
        (void)buffer_append_str(out, "],\"inflight\":[");
        /* oldest first: the list is newest first */
        ActivityRequest *last = a->inflight;
        while (last && last->inflight_next)
                last = last->inflight_next;
        for (ActivityRequest *r = last; r; r = r->inflight_prev) {
                render_request(out, r);
                if (r->inflight_prev)
                        (void)buffer_append_str(out, ",");
        }
        (void)buffer_append_str(out, "],\"recent\":[");
        for (size_t k = 0; k < a->ring_n; k++) {
                size_t i = (a->ring_next + ACTIVITY_RECENT - a->ring_n + k) % ACTIVITY_RECENT;
                if (k > 0)
                        (void)buffer_append_str(out, ",");
                render_request(out, &a->ring[i].r);
        }
        (void)buffer_append_str(out, "],\"sessions\":[");
        render_sessions(a, out, now);
        return buffer_append_str(out, "]}");
}

int activity_render_snapshot_event(Activity *a, const ActivityHost *hosts, size_t n_hosts, Buffer *out) {
        (void)buffer_append_str(out, "event: snapshot\ndata: ");
        (void)activity_render_snapshot(a, hosts, n_hosts, out);
        return buffer_append_str(out, "\n\n");
}
