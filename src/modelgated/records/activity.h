/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The live activity (rule:activity-feed, modelgated(8) ACTIVITY): the requests in flight, the ring of the
 * last ACTIVITY_RECENT finished ones, each host's last view, and the /activity subscribers (a FeedHub of
 * its own). A request's record is a fixed-size struct its owner embeds (the client's Request): the
 * phases change fields in it, and JSON is written only while someone subscribes; at its end its numbers
 * and copies of its names go into the ring. Nothing in it is ever prompt or answer text
 * (rule:no-text-in-activity): names, ids and numbers only. Times are CLOCK_REALTIME µs (the loop's, no
 * system call). The sessions (rule:sessions) are kept here too: a request of one counts in its row from its
 * begin to its done. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "modelgated/event/feed-hub.h"
#include "modelgated/api/request-record.h"
#include "modelgated/sched/session.h"
#include "shared/buffer.h"
#include "shared/list.h"
#include "shared/macro.h"
#include "shared/time-util.h"

#define ACTIVITY_RECENT 300

typedef struct Activity Activity;

typedef enum ActivityPhase {
        ACTIVITY_ADMITTED,
        ACTIVITY_QUEUED,
        ACTIVITY_SWITCHING,
        ACTIVITY_LOADING,
        ACTIVITY_FIRST_BYTE,
        ACTIVITY_DONE,
        _ACTIVITY_PHASE_MAX,
} ActivityPhase;

/* What a host shows, as the feed's "host" event has it; times CLOCK_REALTIME µs, 0: none */
typedef struct ActivityHost {
        char name[64];
        const char *state; /* the host's State (rule:state-words): "serving", "starting", "switching", … */
        char engine[64];   /* the engine whose unit runs (up or being checked); empty: none */
        char switching_to[64];
        usec_t engine_since;  /* when the engine came up (0: it is not up): its run on /ui starts there */
        bool adopted;         /* the engine up was found running, not started by this daemon */
        const char *stopping; /* "idle-stop", "stop" (StopEngine()): the engine's unit is being stopped */
        usec_t hold_down_until, idle_stop_at;
        unsigned in_flight, waiting;
        /* rule:prompt-cache: the save or restore under way or the last one ("save", "restore"; NULL: none),
         * whose engine, its start and end (0: under way), and the slots, tokens and bytes done */
        const char *cache_step;
        char cache_engine[64];
        usec_t cache_started, cache_ended;
        uint64_t cache_slots, cache_tokens, cache_bytes;
} ActivityHost;

typedef struct ActivityRequest {
        /* only while in flight (the ring's copy starts at phase) */
        LIST_FIELDS(struct ActivityRequest, inflight);
        Activity *owner;             /* set while in flight */
        usec_t queued_at, switch_at; /* CLOCK_MONOTONIC as t, 0: not (yet) */
        /* queued */
        unsigned position;
        const char *waits_for; /* "stream", "hold-down", "engine-start", "switch" */
        double hold_down_left;
        /* loading: 0–100, -1 unknown */
        int progress;
        /* rule:sessions: the session the request belongs to (session_who.session, its id's hash; 0: none),
         * its caller's names the owner's own strings; session_open: counted in its session's in_flight */
        AliasClient session_who;
        bool session_open;

        ActivityPhase phase;
        usec_t t, started; /* CLOCK_MONOTONIC, the caller's: the last phase's time, the request's start */
        usec_t realtime; /* what to add to those to show them as CLOCK_REALTIME: one for the request's life,
                          * so that its live events and its ring copy show the same times */
        uint64_t queued_usec, switch_usec; /* spent queued, spent while its engine was switched to */
        /* The names: while in flight the owner's own strings, which live as long as the request does (so
         * that a request that nobody watches costs no copy of them); in the ring, the ring's copies. NULL
         * or empty: none. */
        Span id;
        const char *model, *host, *engine, *key, *fallback;
        const char *api;     /* "chat", "completions", "messages", "responses", "other" */
        const char *session; /* its session's label, or NULL */
        bool stream;
        bool turn;          /* a generating request: a turn of its session */
        bool caused_switch; /* its engine was switched to (or started) for it */
        /* first_byte and done; -1: unknown */
        int64_t first_byte_ms;
        int status;
        int64_t duration_ms, tokens_in, tokens_cached, tokens_prefilled, tokens_out;
        double prefill_tps, decode_tps; /* < 0: unknown */
        bool cut;
        /* rule:upstream-error: the error the engine sent inside its 200 (0: none), and its message */
        int upstream_error_status;
        const char *upstream_error;
} ActivityRequest;

int activity_new(sd_event *event, Activity **ret);
Activity *activity_free(Activity *a);
/* Someone follows /activity: only then are events written (the cheap check of every phase) */
bool activity_watched(const Activity *a);
FeedHub *activity_hub(Activity *a);
const char *activity_phase_to_string(ActivityPhase p);

/* A request reached its host: r (its fields filled by the caller: id, model, host, engine, key, api,
 * stream, session_who, session and turn; owner NULL, and nothing else needs to be set, or cleared, before)
 * is in flight from now, "admitted", and so in its session's row. Each later phase's own fields (queued:
 * position, waits_for, hold_down_left; loading: progress; first_byte: first_byte_ms) are set by the caller
 * before that phase, and all of done's (caused_switch too) before activity_request_done(). Again for the
 * same r (an alias's next target): the new host and engine, "admitted" again. */
void activity_request_begin(Activity *a, ActivityRequest *r, usec_t now);
/* A new phase of a request in flight (the phase's own fields set first by the caller). Each call's now
 * is CLOCK_MONOTONIC, the event loop's of this iteration, as the caller already read it: events show it
 * as CLOCK_REALTIME. */
void activity_request_phase(ActivityRequest *r, ActivityPhase p, usec_t now);
/* Its engine is up and it goes: the time queued and switching ends here (no event: first_byte is next) */
void activity_request_ready(ActivityRequest *r, usec_t now);
/* The request ended (status and the numbers set by the caller): copied into the ring, no longer in
 * flight. Nothing for a request never begun or already done. */
/* Its end, with the record's figures (what the access line says: the two never disagree), at start +
 * its duration: activity_request_done() */
void activity_request_ended(ActivityRequest *r, const RequestRecord *rec, usec_t start);
void activity_request_done(ActivityRequest *r, usec_t now);
/* rule:history: the file the finished requests are kept in when there is no journal (records/history.h),
 * which the access line appends each one's fields to; NULL: none. Borrowed: its owner frees it after the
 * last request (after activity_free()). */
typedef struct HistoryFile HistoryFile;
void activity_set_history(Activity *a, HistoryFile *f);
HistoryFile *activity_history(Activity *a);
/* rule:history: a request of an earlier run, finished (phase ACTIVITY_DONE, its times CLOCK_REALTIME and
 * realtime 0, api one of /activity's names), into the ring as if it had just ended; oldest first */
void activity_restore(Activity *a, const ActivityRequest *r);
/* The request is gone without a done (its record's memory is reused): out of the in-flight list */
void activity_request_forget(ActivityRequest *r);

/* What a host shows now: a "host" event when it differs from what was last shown, and the requests
 * queued for the engine it switches to are "switching" from now. Called while someone watches, and
 * during a switch whether or not (so that a request's switch_ms is right in the ring). */
void activity_host_changed(Activity *a, const ActivityHost *h);

/* rule:sessions: the label of the session (who, id) for the access line and the record: the known
 * session's, else the id's own (session_label()), so that a known session costs no hash */
void activity_session_label(Activity *a, const AliasClient *who, Span id,
                            char ret[static SESSION_LABEL_LEN + 1], usec_t now);

/* The snapshot's JSON (the "snapshot" event's data, GetActivity()'s answer) with these hosts */
int activity_render_snapshot(Activity *a, const ActivityHost *hosts, size_t n_hosts, Buffer *out);
/* "event: snapshot\ndata: …\n\n" */
int activity_render_snapshot_event(Activity *a, const ActivityHost *hosts, size_t n_hosts, Buffer *out);
