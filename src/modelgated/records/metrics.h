/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* GET /metrics (rule:metrics; Prometheus text format 0.0.4). Counters and histograms are
 * kept here by label set, under host and engine *names*, so that a reload
 * that replaces a Host object does not reset them; gauges (in flight,
 * waiting, state, engine up time) are read from the hosts when rendered.
 * Recording is a short linear search over a few dozen series: hosts and
 * engines are few. */

#include <stdint.h>

#include "modelgated/api/request-record.h"
#include "modelgated/api/usage.h"
#include "shared/buffer.h"
#include "shared/time-util.h"

typedef struct Metrics Metrics;

Metrics *metrics_new(void);
Metrics *metrics_free(Metrics *m);

/* One answered request: host "" for modelgate's own endpoints, engine "" for hosts without engines. */
void metrics_request(Metrics *m, const char *host, const char *engine, int status);
/* A request's end, from its record: its count by host, engine and status, and by alias and target */
void metrics_record(Metrics *m, const RequestRecord *rec);
/* A request's wait for its engine (0 when it went at once), and its time to the first response byte. */
void metrics_wait(Metrics *m, const char *host, usec_t waited);
void metrics_first_byte(Metrics *m, const char *host, usec_t t);
/* rule:queued-and-switch: the part of a request's wait spent in its host's queue; a switch's time, from its
 * start to its engine up */
void metrics_queued(Metrics *m, const char *host, usec_t t);
void metrics_switch_time(Metrics *m, const char *host, const char *engine, usec_t t);
/* rule:usage-metrics: what an engine's answer said it cost; model is a name of the configuration or of the
 * host's own list, never a client's string ("" when it is not known to be one) */
void metrics_usage(Metrics *m, const char *host, const char *engine, const char *model, const Usage *u);
void metrics_switch(Metrics *m, const char *host, const char *engine);
/* rule:prompt-cache: one save (restore false) or restore of an engine's prompt caches: the slots done,
 * the bytes the engine wrote or read, the time it added to the stop or the start */
void metrics_prompt_cache(Metrics *m, const char *host, const char *engine, bool restore, uint64_t slots,
                          uint64_t bytes, usec_t t);
void metrics_refusal(Metrics *m, const char *host);
void metrics_budget_expired(Metrics *m, const char *host);
void metrics_fallback(Metrics *m, const char *host, const char *engine, const char *fallback);

/* A request for an alias answered, and the target that served it; a move to the next target. */
void metrics_alias_request(Metrics *m, const char *alias, const char *target, int status);
void metrics_alias_move(Metrics *m, const char *alias);

/* The counters and histograms; gauges of what the daemon holds now are rendered by their owners with
 * the two helpers below. */
int metrics_render(Metrics *m, Buffer *out);
void metrics_render_header(Buffer *b, const char *name, const char *type, const char *help);
/* Appends name="value" (escaped) to a label list, with a comma when it is not the first. */
void metrics_append_label(Buffer *l, const char *name, const char *value);
