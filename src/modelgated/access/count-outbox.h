/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The daily counts an instance owes the shared store ([Access] Redis=, rule:shared-counts): each a change
 * of one caller's requests and tokens of one UTC day, with a marker (this instance's id and a sequence
 * number) that the store remembers for the day once it applied it, so that a change sent again after a
 * lost answer is applied once. A change that was never sent takes in the next ones of its caller and day;
 * one that was sent keeps what it had, since the store may have applied it already. No I/O, no clock. */

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include <json-c/json.h>

#include "shared/list.h"

/* What the store keeps: "modelgate:<day>:<caller>:requests" and ":tokens", the markers applied that day in
 * "modelgate:<day>:ops:<instance>"; all of the day's keys expire COUNT_KEYS_MARGIN after it ends. */
#define COUNT_KEYS_MARGIN (24 * 3600)

typedef struct CountOp CountOp;
struct CountOp {
        char instance[17];
        uint64_t seq;
        char day[16];
        char *caller;
        uint64_t requests, tokens; /* added; tokens: what DailyTokens= counts */
        bool admission;            /* applied only while the caps hold (requests is 1) */
        uint64_t cap, tokens_cap;  /* an admission's: UINT64_MAX is none */
        bool sent;                 /* on the wire now */
        bool fixed;                /* sent once: nothing is merged into it any more */
        void *userdata;            /* an admission's waiter */
        LIST_FIELDS(CountOp, ops);
};

typedef struct CountOutbox {
        char instance[17]; /* this process's: markers of another start never collide with its own */
        uint64_t next_seq;
        CountOp *ops; /* oldest first */
        size_t n_ops;
} CountOutbox;

void count_outbox_init(CountOutbox *o, const char instance[static 17]);
void count_outbox_done(CountOutbox *o);

/* Adds requests and tokens to what is owed for caller on day: into the newest change of theirs not sent
 * yet, else a new one. NULL when out of memory. */
CountOp *count_outbox_add(CountOutbox *o, const char *day, const char *caller, uint64_t requests,
                          uint64_t tokens);
/* A request to be counted only if the caps hold, last in the queue. NULL when out of memory. */
CountOp *count_outbox_admit(CountOutbox *o, const char *day, const char *caller, uint64_t cap,
                            uint64_t tokens_cap);
/* Applied (or refused, for an admission): gone from the queue, and freed. */
void count_outbox_drop(CountOutbox *o, CountOp *op);
/* The answer was lost with the connection: to be sent again as it is, an admission as a plain count (the
 * request was served), never merged into. */
void count_outbox_lost(CountOutbox *o, CountOp *op);
/* The requests and tokens owed for caller on day, sent or not. */
void count_outbox_owed(const CountOutbox *o, const char *day, const char *caller, uint64_t *ret_requests,
                       uint64_t *ret_tokens);

/* The store's key of caller's count on day ("requests", "tokens") or, caller NULL, of the day's markers of
 * instance; NULL when out of memory. */
char *count_key(const char *day, const char *caller, const char *what, const char *instance);
/* When the keys of day expire: its end (UTC) and COUNT_KEYS_MARGIN; -1 when day is not a date. */
time_t count_day_expiry(const char *day);

/* redis-pending.json: {"ops": [{"instance", "seq", "day", "caller", "requests", "tokens"}]}, every change
 * not known applied, admissions as plain counts (a request in flight is served). NULL: out of memory. */
json_object *count_outbox_to_json(const CountOutbox *o);
/* Appends what root says, each change fixed (it may have been sent before); rows not of the schema are
 * skipped. 0, or -ENOMEM. */
int count_outbox_from_json(CountOutbox *o, json_object *root);
