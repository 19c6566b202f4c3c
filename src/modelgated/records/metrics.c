/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Prometheus metrics: see metrics.h and modelgated(8), METRICS. */

#include <stdio.h>
#include <stdlib.h>

#include "modelgated/records/metrics.h"
#include "shared/macro.h"

typedef enum Family {
        F_REQUESTS,
        F_SWITCHES,
        F_REFUSALS,
        F_BUDGET,
        F_FALLBACK,
        F_WAIT,
        F_FIRST_BYTE,
        F_ALIAS_REQUESTS,
        F_ALIAS_MOVES,
        _F_MAX,
} Family;

/* the first two labels are "host" and "engine" unless a family names them otherwise */
static const struct {
        const char *name, *type, *help;
        const char *label1, *label2;
} families[_F_MAX] = {
        [F_REQUESTS] = {"modelgate_requests_total", "counter",
                        "Answered requests by host, engine and status"},
        [F_SWITCHES] = {"modelgate_switches_total", "counter",
                        "Engine switches started, by the engine started"},
        [F_REFUSALS] = {"modelgate_busy_refusals_total", "counter",
                        "Switches refused because the GPU was busy (423)"},
        [F_BUDGET] = {"modelgate_wait_budget_expired_total", "counter",
                      "Requests answered 504 after WaitBudgetSec="},
        [F_FALLBACK] = {"modelgate_fallbacks_total", "counter",
                        "Requests sent to an engine's fallback, by host, engine and fallback"},
        [F_WAIT] = {"modelgate_wait_seconds", "histogram",
                    "Time a request waited for its engine (0 when it was up)"},
        [F_FIRST_BYTE] = {"modelgate_first_byte_seconds", "histogram",
                          "Time from a request to the first byte of the host's answer"},
        [F_ALIAS_REQUESTS] =
                {"modelgate_alias_requests_total", "counter",
                 "Answered requests for an alias, by alias, the target that served it and status", "alias",
                 "target"},
        [F_ALIAS_MOVES] = {"modelgate_alias_moves_total", "counter",
                           "Requests an alias moved to its next target after a refusal", "alias", NULL},
};

static const double wait_buckets[] = {0.005, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900};
static const double first_byte_buckets[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
#define MAX_BUCKETS 13

typedef struct Series {
        Family family;
        /* the labels, kept apart so that recording compares a few short strings and builds nothing; the
         * text (host="3090",engine="fork") is made when /metrics is rendered */
        char *host, *engine, *fallback; /* engine, fallback: NULL when not a label of the family */
        int status;                     /* 0: not a label */
        uint64_t value;
        uint64_t buckets[MAX_BUCKETS]; /* histograms: counts per upper bound, not cumulative */
        double sum;
} Series;

struct Metrics {
        Series *series;
        size_t n_series;
        /* the series each family found last: requests come in runs for the same one, and each records
         * in several families (its wait, its first byte, its end) */
        size_t last[_F_MAX];
};

Metrics *metrics_new(void) {
        return calloc(1, sizeof(Metrics));
}

static void series_done(Series *s) {
        free(s->host);
        free(s->engine);
        free(s->fallback);
}

Metrics *metrics_free(Metrics *m) {
        if (!m)
                return NULL;
        for (size_t i = 0; i < m->n_series; i++)
                series_done(&m->series[i]);
        free(m->series);
        free(m);
        return NULL;
}

/* label values: \, " and newline escaped (the text format's rules) */
void metrics_append_label(Buffer *b, const char *name, const char *value) {
        if (!buffer_is_empty(b))
                (void)buffer_append_str(b, ",");
        (void)buffer_append_str(b, name);
        (void)buffer_append_str(b, "=\"");
        for (const char *p = value ?: ""; *p; p++) {
                if (*p == '\\' || *p == '"')
                        (void)buffer_append(b, "\\", 1);
                if (*p == '\n')
                        (void)buffer_append_str(b, "\\n");
                else
                        (void)buffer_append(b, p, 1);
        }
        (void)buffer_append_str(b, "\"");
}

/* always inline: the remembered series is checked with it on every record, which then costs no call */
static _always_inline_ bool series_is(const Series *s, Family f, const char *host, const char *engine,
                                      int status, const char *fallback) {
        return s->family == f && s->status == status && streq_ptr(s->host, host) &&
               streq_ptr(s->engine, engine) && streq_ptr(s->fallback, fallback);
}

static Series *series_get3(Metrics *m, Family f, const char *host, const char *engine, int status,
                           const char *fallback) {
        Series *s;

        if (!m)
                return NULL;
        if (m->last[f] < m->n_series && series_is(&m->series[m->last[f]], f, host, engine, status, fallback))
                return &m->series[m->last[f]];
        for (size_t i = 0; i < m->n_series; i++)
                if (series_is(&m->series[i], f, host, engine, status, fallback)) {
                        m->last[f] = i;
                        return &m->series[i];
                }
        s = reallocarray(m->series, m->n_series + 1, sizeof(Series));
        if (!s)
                return NULL;
        m->series = s;
        s = &m->series[m->n_series];
        *s = (Series){.family = f,
                      .host = strdup(host ?: ""),
                      .engine = engine ? strdup(engine) : NULL,
                      .fallback = fallback ? strdup(fallback) : NULL,
                      .status = status};
        if (!s->host || (engine && !s->engine) || (fallback && !s->fallback)) {
                series_done(s);
                return NULL;
        }
        m->last[f] = m->n_series++;
        return s;
}

static Series *series_get(Metrics *m, Family f, const char *host, const char *engine, int status) {
        return series_get3(m, f, host, engine, status, NULL);
}

/* host="3090",engine="fork",… for the text format */
static int series_labels(const Series *s, Buffer *b) {
        metrics_append_label(b, families[s->family].label1 ?: "host", s->host);
        if (s->engine)
                metrics_append_label(b, families[s->family].label2 ?: "engine", s->engine);
        if (s->fallback)
                metrics_append_label(b, "fallback", s->fallback);
        if (s->status > 0) {
                char st[16];
                snprintf(st, sizeof(st), "%d", s->status);
                metrics_append_label(b, "status", st);
        }
        return buffer_terminate(b);
}

static void count(Metrics *m, Family f, const char *host, const char *engine, int status) {
        Series *s = series_get(m, f, host, engine, status);
        if (s)
                s->value++;
}

static void observe(Metrics *m, Family f, const char *host, usec_t t, const double *bounds, size_t n) {
        Series *s = series_get(m, f, host, NULL, 0);
        double v = (double)t / USEC_PER_SEC;
        size_t i = 0;

        if (!s)
                return;
        while (i < n && v > bounds[i])
                i++;
        if (i < n)
                s->buckets[i]++;
        s->value++;
        s->sum += v;
}

void metrics_request(Metrics *m, const char *host, const char *engine, int status) {
        count(m, F_REQUESTS, host, engine ?: "", status);
}

void metrics_wait(Metrics *m, const char *host, usec_t waited) {
        observe(m, F_WAIT, host, waited, wait_buckets, ELEMENTSOF(wait_buckets));
}

void metrics_first_byte(Metrics *m, const char *host, usec_t t) {
        observe(m, F_FIRST_BYTE, host, t, first_byte_buckets, ELEMENTSOF(first_byte_buckets));
}

void metrics_alias_request(Metrics *m, const char *alias, const char *target, int status) {
        count(m, F_ALIAS_REQUESTS, alias, target, status);
}

void metrics_alias_move(Metrics *m, const char *alias) {
        count(m, F_ALIAS_MOVES, alias, NULL, 0);
}

void metrics_switch(Metrics *m, const char *host, const char *engine) {
        count(m, F_SWITCHES, host, engine, 0);
}

void metrics_fallback(Metrics *m, const char *host, const char *engine, const char *fallback) {
        Series *s = series_get3(m, F_FALLBACK, host, engine ?: "", 0, fallback);
        if (s)
                s->value++;
}

void metrics_refusal(Metrics *m, const char *host) {
        count(m, F_REFUSALS, host, NULL, 0);
}

void metrics_budget_expired(Metrics *m, const char *host) {
        count(m, F_BUDGET, host, NULL, 0);
}

void metrics_render_header(Buffer *b, const char *name, const char *type, const char *help) {
        (void)buffer_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void render_histogram(Buffer *b, const Series *s, const char *labels, const double *bounds,
                             size_t n) {
        const char *name = families[s->family].name;
        uint64_t cumulative = 0;

        for (size_t i = 0; i < n; i++) {
                cumulative += s->buckets[i];
                (void)buffer_printf(b, "%s_bucket{%s,le=\"%g\"} %llu\n", name, labels, bounds[i],
                                    (unsigned long long)cumulative);
        }
        (void)buffer_printf(b, "%s_bucket{%s,le=\"+Inf\"} %llu\n%s_sum{%s} %.6f\n%s_count{%s} %llu\n", name,
                            labels, (unsigned long long)s->value, name, labels, s->sum, name, labels,
                            (unsigned long long)s->value);
}

int metrics_render(Metrics *m, Buffer *b) {
        for (Family f = 0; f < _F_MAX; f++) {
                metrics_render_header(b, families[f].name, families[f].type, families[f].help);
                for (size_t i = 0; m && i < m->n_series; i++) {
                        const Series *s = &m->series[i];
                        _cleanup_(buffer_done) Buffer l = {};
                        if (s->family != f || series_labels(s, &l) < 0)
                                continue;
                        if (f == F_WAIT)
                                render_histogram(b, s, buffer_peek(&l), wait_buckets,
                                                 ELEMENTSOF(wait_buckets));
                        else if (f == F_FIRST_BYTE)
                                render_histogram(b, s, buffer_peek(&l), first_byte_buckets,
                                                 ELEMENTSOF(first_byte_buckets));
                        else
                                (void)buffer_printf(b, "%s{%s} %llu\n", families[f].name, buffer_peek(&l),
                                                    (unsigned long long)s->value);
                }
        }

        return buffer_terminate(b);
}
