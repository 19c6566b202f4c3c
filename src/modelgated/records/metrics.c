/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Prometheus metrics: see metrics.h and modelgated(8), METRICS. */

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

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
        F_TOKENS,
        F_PREFILL,
        F_DECODE,
        F_QUEUED,
        F_SWITCH_TIME,
        F_PC_SAVED, /* rule:prompt-cache: of a save, then of a restore: slots, bytes, time */
        F_PC_SAVED_BYTES,
        F_PC_SAVE_TIME,
        F_PC_RESTORED,
        F_PC_RESTORED_BYTES,
        F_PC_RESTORE_TIME,
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
        [F_TOKENS] = {"modelgate_tokens_total", "counter",
                      "Tokens the engines' answers said they cost, by host, engine, model and kind"},
        [F_PREFILL] = {"modelgate_prefill_tokens_per_second", "histogram",
                       "Prompt processing speed the engine reported, per answer"},
        [F_DECODE] = {"modelgate_decode_tokens_per_second", "histogram",
                      "Generation speed the engine reported, per answer"},
        [F_QUEUED] = {"modelgate_queued_seconds", "histogram",
                      "Time a request waited in its host's queue, not counting its own engine's switch"},
        [F_SWITCH_TIME] = {"modelgate_switch_seconds", "histogram",
                           "Time a switch took, from its start to its engine up, by the engine started"},
        [F_PC_SAVED] = {"modelgate_prompt_cache_saved_slots_total", "counter",
                        "Engine slots whose prompt cache was saved before the engine stopped"},
        [F_PC_SAVED_BYTES] = {"modelgate_prompt_cache_saved_bytes_total", "counter",
                              "Bytes of prompt cache the engine wrote when saving"},
        [F_PC_SAVE_TIME] = {"modelgate_prompt_cache_save_seconds", "histogram",
                            "Time the saving of an engine's prompt caches added to its stop"},
        [F_PC_RESTORED] = {"modelgate_prompt_cache_restored_slots_total", "counter",
                           "Engine slots whose saved prompt cache was restored when the engine was back"},
        [F_PC_RESTORED_BYTES] = {"modelgate_prompt_cache_restored_bytes_total", "counter",
                                 "Bytes of prompt cache the engine read when restoring"},
        [F_PC_RESTORE_TIME] = {"modelgate_prompt_cache_restore_seconds", "histogram",
                               "Time the restoring of an engine's prompt caches added to its start"},
};

/* rule:usage-metrics: the kinds of modelgate_tokens_total, kept in one series (value, buckets[0], [1], [2]):
 * of the prompt, "cached" is what the engine reused from its prompt cache, "prefilled" what it evaluated */
static const char *const token_kinds[] = {"prompt", "cached", "completion", "prefilled"};

static const double wait_buckets[] = {0.005, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900};
static const double first_byte_buckets[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
static const double speed_buckets[] = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000};
static const double switch_buckets[] = {0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600};
static const double cache_buckets[] = {0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
#define MAX_BUCKETS 13

static const struct {
        const double *b;
        size_t n;
} bucket_sets[_F_MAX] = {
        [F_WAIT] = {wait_buckets, ELEMENTSOF(wait_buckets)},
        [F_QUEUED] = {wait_buckets, ELEMENTSOF(wait_buckets)},
        [F_FIRST_BYTE] = {first_byte_buckets, ELEMENTSOF(first_byte_buckets)},
        [F_PREFILL] = {speed_buckets, ELEMENTSOF(speed_buckets)},
        [F_DECODE] = {speed_buckets, ELEMENTSOF(speed_buckets)},
        [F_SWITCH_TIME] = {switch_buckets, ELEMENTSOF(switch_buckets)},
        [F_PC_SAVE_TIME] = {cache_buckets, ELEMENTSOF(cache_buckets)},
        [F_PC_RESTORE_TIME] = {cache_buckets, ELEMENTSOF(cache_buckets)},
};

typedef struct Series {
        Family family;
        /* the labels, kept apart so that recording compares a few short strings and builds nothing; the
         * text (host="3090",engine="fork") is made when /metrics is rendered */
        char *host, *engine, *fallback; /* engine, fallback: NULL when not a label of the family */
        char *model;                    /* a name from the configuration (rule:usage-metrics), or NULL */
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
        usec_t start_realtime;
};

Metrics *metrics_new(void) {
        Metrics *m = calloc(1, sizeof(Metrics));
        if (m)
                m->start_realtime = now_usec(CLOCK_REALTIME);
        return m;
}

static void series_done(Series *s) {
        free(s->host);
        free(s->engine);
        free(s->fallback);
        free(s->model);
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
typedef struct Labels {
        const char *host, *engine, *fallback, *model;
        int status;
} Labels;

/* streq_ptr() without a call: labels are short names, and a record checks several of them */
static _always_inline_ bool label_eq(const char *a, const char *b) {
        if (!a || !b)
                return a == b;
        while (*a == *b) {
                if (!*a)
                        return true;
                a++, b++;
        }
        return false;
}

static _always_inline_ bool series_is(const Series *s, Family f, const Labels *l) {
        return s->family == f && s->status == l->status && label_eq(s->host, l->host) &&
               label_eq(s->engine, l->engine) && label_eq(s->fallback, l->fallback) &&
               label_eq(s->model, l->model);
}

/* series_find() when the family's last series is not it: the others, else a new one */
static Series *series_find_other(Metrics *m, Family f, const Labels *l) {
        const char *host = l->host, *engine = l->engine, *fallback = l->fallback, *model = l->model;
        Series *s;

        for (size_t i = 0; i < m->n_series; i++)
                if (series_is(&m->series[i], f, l)) {
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
                      .model = model ? strdup(model) : NULL,
                      .status = l->status};
        if (!s->host || (engine && !s->engine) || (fallback && !s->fallback) || (model && !s->model)) {
                series_done(s);
                return NULL;
        }
        m->last[f] = m->n_series++;
        return s;
}

/* Inline, with the family's last series checked first: as a rule that is the one, found with the labels
 * where the caller has them, rather than through a call and a copy of them */
static _always_inline_ Series *series_find(Metrics *m, Family f, const Labels *l) {
        if (!m)
                return NULL;
        if (m->last[f] < m->n_series && series_is(&m->series[m->last[f]], f, l))
                return &m->series[m->last[f]];
        return series_find_other(m, f, l);
}

static Series *series_get3(Metrics *m, Family f, const char *host, const char *engine, int status,
                           const char *fallback) {
        return series_find(m, f, &(Labels){host, engine, fallback, NULL, status});
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
        if (s->model)
                metrics_append_label(b, "model", s->model);
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

static void observe_in(Series *s, double v) {
        const double *bounds = bucket_sets[s->family].b;
        size_t i = 0, n = bucket_sets[s->family].n;

        while (i < n && v > bounds[i])
                i++;
        if (i < n)
                s->buckets[i]++;
        s->value++;
        s->sum += v;
}

static void observe(Metrics *m, Family f, const char *host, usec_t t) {
        Series *s = series_get(m, f, host, NULL, 0);
        if (s)
                observe_in(s, (double)t / USEC_PER_SEC);
}

void metrics_request(Metrics *m, const char *host, const char *engine, int status) {
        count(m, F_REQUESTS, host, engine ?: "", status);
}

void metrics_record(Metrics *m, const RequestRecord *rec) {
        int status = rec->error_status ?: rec->status_sent; /* an error told inside an early 200 counts */

        metrics_request(m, rec->host ?: "", rec->engine_tried, status);
        if (rec->alias)
                metrics_alias_request(m, rec->alias, rec->target, status);
}

void metrics_wait(Metrics *m, const char *host, usec_t waited) {
        observe(m, F_WAIT, host, waited);
}

void metrics_first_byte(Metrics *m, const char *host, usec_t t) {
        observe(m, F_FIRST_BYTE, host, t);
}

void metrics_queued(Metrics *m, const char *host, usec_t t) {
        observe(m, F_QUEUED, host, t);
}

void metrics_switch_time(Metrics *m, const char *host, const char *engine, usec_t t) {
        Series *s = series_get(m, F_SWITCH_TIME, host, engine, 0);
        if (s)
                observe_in(s, (double)t / USEC_PER_SEC);
}

void metrics_prompt_cache(Metrics *m, const char *host, const char *engine, bool restore, uint64_t slots,
                          uint64_t bytes, usec_t t) {
        Series *s;

        if ((s = series_get(m, restore ? F_PC_RESTORED : F_PC_SAVED, host, engine, 0)))
                s->value += slots;
        if ((s = series_get(m, restore ? F_PC_RESTORED_BYTES : F_PC_SAVED_BYTES, host, engine, 0)))
                s->value += bytes;
        if ((s = series_get(m, restore ? F_PC_RESTORE_TIME : F_PC_SAVE_TIME, host, engine, 0)))
                observe_in(s, (double)t / USEC_PER_SEC);
}

void metrics_usage(Metrics *m, const char *host, const char *engine, const char *model, const Usage *u) {
        if (!usage_known(u))
                return;
        Labels l = {host, engine ?: "", NULL, model ?: "", 0};
        double v;
        Series *s;

        if ((s = series_find(m, F_TOKENS, &l))) {
                /* rule:usage-charge's counts are not the engine's */
                s->value += u->in_charged ? 0 : (uint64_t)MAX(u->in, 0);
                s->buckets[0] += (uint64_t)MAX(u->cached, 0);
                s->buckets[1] += u->out_charged ? 0 : (uint64_t)MAX(u->out, 0);
                s->buckets[2] += (uint64_t)MAX(usage_prefilled(u), 0);
        }
        if ((v = usage_speed(u->prompt_n, u->prompt_ms)) >= 0 && (s = series_find(m, F_PREFILL, &l)))
                observe_in(s, v);
        if ((v = usage_speed(u->predicted_n, u->predicted_ms)) >= 0 && (s = series_find(m, F_DECODE, &l)))
                observe_in(s, v);
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

static void render_histogram(Buffer *b, const Series *s, const char *labels) {
        const char *name = families[s->family].name;
        const double *bounds = bucket_sets[s->family].b;
        uint64_t cumulative = 0;

        for (size_t i = 0; i < bucket_sets[s->family].n; i++) {
                cumulative += s->buckets[i];
                (void)buffer_printf(b, "%s_bucket{%s,le=\"%g\"} %llu\n", name, labels, bounds[i],
                                    (unsigned long long)cumulative);
        }
        (void)buffer_printf(b, "%s_bucket{%s,le=\"+Inf\"} %llu\n%s_sum{%s} %.6f\n%s_count{%s} %llu\n", name,
                            labels, (unsigned long long)s->value, name, labels, s->sum, name, labels,
                            (unsigned long long)s->value);
}

static void render_tokens(Buffer *b, const Series *s, const char *labels) {
        const uint64_t v[] = {s->value, s->buckets[0], s->buckets[1], s->buckets[2]};

        for (size_t i = 0; i < ELEMENTSOF(token_kinds); i++)
                (void)buffer_printf(b, "%s{%s,kind=\"%s\"} %llu\n", families[s->family].name, labels,
                                    token_kinds[i], (unsigned long long)v[i]);
}

int metrics_render(Metrics *m, Buffer *b) {
        for (Family f = 0; f < _F_MAX; f++) {
                metrics_render_header(b, families[f].name, families[f].type, families[f].help);
                for (size_t i = 0; m && i < m->n_series; i++) {
                        const Series *s = &m->series[i];
                        _cleanup_(buffer_done) Buffer l = {};
                        if (s->family != f || series_labels(s, &l) < 0)
                                continue;
                        if (bucket_sets[f].b)
                                render_histogram(b, s, buffer_peek(&l));
                        else if (f == F_TOKENS)
                                render_tokens(b, s, buffer_peek(&l));
                        else
                                (void)buffer_printf(b, "%s{%s} %llu\n", families[f].name, buffer_peek(&l),
                                                    (unsigned long long)s->value);
                }
        }
        /* rule:usage-metrics: counters start again at each start (an idle exit ends them): the start time
         * lets Prometheus tell */
        metrics_render_header(b, "modelgate_build_info", "gauge", "The running modelgated's version");
        (void)buffer_printf(b, "modelgate_build_info{version=\"%s\"} 1\n", MODELGATE_VERSION);
        metrics_render_header(b, "process_start_time_seconds", "gauge",
                              "Start time of the process since the Unix epoch, in seconds");
        (void)buffer_printf(b, "process_start_time_seconds %llu.%06llu\n",
                            (unsigned long long)((m ? m->start_realtime : 0) / USEC_PER_SEC),
                            (unsigned long long)((m ? m->start_realtime : 0) % USEC_PER_SEC));

        return buffer_terminate(b);
}
