/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Requests and tokens per caller and UTC day, and their usage.json text: see key-usage.h. */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "modelgated/access/key-usage.h"
#include "shared/count-map.h"
#include "shared/macro.h"
#include "shared/strv.h"

typedef struct UsageEntry {
        char *name;
        char *tier; /* NULL: anonymous */
        UsageCount count;
} UsageEntry;

typedef struct UsageDay {
        char day[16];
        UsageEntry *entries;
        size_t n, n_allocated;
} UsageDay;

struct KeyUsage {
        UsageDay today;
        CountMap *index; /* today's entries by name: their index + 1 */
        size_t n_anonymous;
        UsageDay *past; /* newest first */
        size_t n_past;
};

static void day_done(UsageDay *d) {
        for (size_t i = 0; i < d->n; i++) {
                free(d->entries[i].name);
                free(d->entries[i].tier);
        }
        free(d->entries);
        d->entries = NULL;
        d->n = d->n_allocated = 0;
}

static UsageEntry *day_add(UsageDay *d, const char *name, const char *tier) {
        if (d->n == d->n_allocated) {
                size_t n = MAX(d->n_allocated * 2, (size_t)8);
                UsageEntry *e = reallocarray(d->entries, n, sizeof(UsageEntry));
                if (!e)
                        return NULL;
                d->entries = e;
                d->n_allocated = n;
        }
        UsageEntry *e = &d->entries[d->n];
        *e = (UsageEntry){.name = strdup(name), .tier = tier ? strdup(tier) : NULL};
        if (!e->name || (tier && !e->tier)) {
                free(e->name);
                free(e->tier);
                return NULL;
        }
        d->n++;
        return e;
}

static UsageEntry *day_find(UsageDay *d, const char *name) {
        for (size_t i = 0; i < d->n; i++)
                if (streq(d->entries[i].name, name))
                        return &d->entries[i];
        return NULL;
}

static void count_add(UsageCount *to, const UsageCount *c) {
        to->requests += c->requests;
        to->in += c->in;
        to->cached += c->cached;
        to->out += c->out;
}

KeyUsage *key_usage_new(void) {
        return calloc(1, sizeof(KeyUsage));
}

static void today_clear(KeyUsage *u) {
        day_done(&u->today);
        u->index = count_map_free(u->index);
        u->n_anonymous = 0;
}

KeyUsage *key_usage_free(KeyUsage *u) {
        if (!u)
                return NULL;
        today_clear(u);
        for (size_t i = 0; i < u->n_past; i++)
                day_done(&u->past[i]);
        free(u->past);
        free(u);
        return NULL;
}

const char *key_usage_day(const KeyUsage *u) {
        return u->today.day;
}

size_t key_usage_n_anonymous(const KeyUsage *u) {
        return u->n_anonymous;
}

UsageCount *key_usage_get(KeyUsage *u, const char *name, const char *tier, bool create) {
        uint64_t *slot = count_map_get(&u->index, name, false);
        bool anonymous = !tier && startswith(name, "ip:") && !streq(name, USAGE_OVERFLOW);

        if (slot) {
                UsageEntry *e = &u->today.entries[*slot - 1];
                if (tier && *tier && e->tier && !*e->tier) { /* an older file's key: now its tier is known */
                        char *t = strdup(tier);
                        if (t) {
                                free(e->tier);
                                e->tier = t;
                        }
                }
                return &e->count;
        }
        if (!create) {
                errno = ENOENT;
                return NULL;
        }
        if (anonymous && u->n_anonymous >= USAGE_ANONYMOUS_MAX) {
                errno = EDQUOT;
                return NULL;
        }
        UsageEntry *e = day_add(&u->today, name, tier);
        slot = e ? count_map_get(&u->index, name, true) : NULL;
        if (!slot) {
                if (e) { /* taken back: the index has no room for it */
                        free(e->name);
                        free(e->tier);
                        u->today.n--;
                }
                errno = ENOMEM;
                return NULL;
        }
        *slot = u->today.n;
        u->n_anonymous += anonymous;
        return &e->count;
}

/* The day n days before day ("2026-12-02", 7: "2026-11-25"), or "" when day is not a date */
static void day_before(const char *day, int n, char ret[static 16]) {
        struct tm tm = {};
        const char *end = strptime(day, "%Y-%m-%d", &tm);

        ret[0] = 0;
        if (!end || *end)
                return;
        time_t t = timegm(&tm) - (time_t)n * 86400;
        gmtime_r(&t, &tm);
        strftime(ret, 16, "%Y-%m-%d", &tm);
}

/* The past days kept with day current: from KEY_USAGE_DAYS - 1 days before it, up to the day before it
 * (ISO dates compare as strings) */
static void past_prune(KeyUsage *u, const char *day) {
        char oldest[16];
        size_t k = 0;

        day_before(day, KEY_USAGE_DAYS - 1, oldest);
        for (size_t i = 0; i < u->n_past; i++) {
                if (strcmp(u->past[i].day, day) < 0 && strcmp(u->past[i].day, oldest) >= 0)
                        u->past[k++] = u->past[i];
                else
                        day_done(&u->past[i]);
        }
        u->n_past = k;
}

/* A past day, kept newest first: the one there, or a new one */
static UsageDay *past_get(KeyUsage *u, const char *day) {
        size_t at = 0;

        for (; at < u->n_past; at++) {
                int c = strcmp(u->past[at].day, day);
                if (c == 0)
                        return &u->past[at];
                if (c < 0)
                        break;
        }
        UsageDay *p = reallocarray(u->past, u->n_past + 1, sizeof(UsageDay));
        if (!p)
                return NULL;
        u->past = p;
        memmove(&p[at + 1], &p[at], (u->n_past - at) * sizeof(UsageDay));
        u->n_past++;
        p[at] = (UsageDay){};
        snprintf(p[at].day, sizeof(p[at].day), "%s", day);
        return &p[at];
}

/* One row into a past day: a key's as it is, an address's summed into USAGE_ANONYMOUS */
static int past_add(UsageDay *d, const char *name, const char *tier, const UsageCount *c) {
        const char *as = tier ? name : USAGE_ANONYMOUS;
        UsageEntry *e = day_find(d, as);

        if (!e)
                e = day_add(d, as, tier);
        if (!e)
                return -ENOMEM;
        count_add(&e->count, c);
        return 0;
}

int key_usage_set_day(KeyUsage *u, const char *day) {
        if (streq(u->today.day, day))
                return false;
        if (u->today.day[0] && strcmp(u->today.day, day) < 0 && u->today.n > 0) {
                UsageDay *d = past_get(u, u->today.day);
                if (!d)
                        return -ENOMEM;
                for (size_t i = 0; i < u->today.n; i++) {
                        UsageEntry *e = &u->today.entries[i];
                        if (past_add(d, e->name, e->tier, &e->count) < 0)
                                return -ENOMEM;
                }
        }
        today_clear(u);
        snprintf(u->today.day, sizeof(u->today.day), "%s", day);
        past_prune(u, day);
        return true;
}

int key_usage_foreach(const KeyUsage *u, KeyUsageFn fn, void *userdata) {
        int r;

        for (ssize_t k = -1; k < (ssize_t)u->n_past; k++) {
                const UsageDay *d = k < 0 ? &u->today : &u->past[k];
                for (size_t i = 0; i < d->n; i++) {
                        r = fn(d->day, d->entries[i].name, d->entries[i].tier, &d->entries[i].count,
                               userdata);
                        if (r < 0)
                                return r;
                }
        }
        return 0;
}

static json_object *count_to_json(const UsageEntry *e) {
        json_object *o = json_object_new_object();

        if (!o)
                return NULL;
        if (e->tier)
                json_object_object_add(o, "tier", json_object_new_string(e->tier));
        json_object_object_add(o, "requests", json_object_new_uint64(e->count.requests));
        json_object_object_add(o, "in", json_object_new_uint64(e->count.in));
        json_object_object_add(o, "cached", json_object_new_uint64(e->count.cached));
        json_object_object_add(o, "out", json_object_new_uint64(e->count.out));
        return o;
}

json_object *key_usage_to_json(const KeyUsage *u) {
        json_object *root = json_object_new_object(), *counts = json_object_new_object(),
                    *tokens = json_object_new_object(), *tiers = json_object_new_object(),
                    *history = json_object_new_object();

        if (!root || !counts || !tokens || !tiers || !history)
                goto fail;
        json_object_object_add(root, "day", json_object_new_string(u->today.day));
        json_object_object_add(root, "counts", counts);
        json_object_object_add(root, "tokens", tokens);
        json_object_object_add(root, "tiers", tiers);
        json_object_object_add(root, "history", history);
        for (size_t i = 0; i < u->today.n; i++) {
                const UsageEntry *e = &u->today.entries[i];
                json_object_object_add(counts, e->name, json_object_new_uint64(e->count.requests));
                if (e->count.in || e->count.cached || e->count.out) {
                        json_object *t = json_object_new_array_ext(3);
                        json_object_array_add(t, json_object_new_uint64(e->count.in));
                        json_object_array_add(t, json_object_new_uint64(e->count.cached));
                        json_object_array_add(t, json_object_new_uint64(e->count.out));
                        json_object_object_add(tokens, e->name, t);
                }
                if (e->tier)
                        json_object_object_add(tiers, e->name, json_object_new_string(e->tier));
        }
        for (size_t k = 0; k < u->n_past; k++) {
                json_object *day = json_object_new_object();
                if (!day)
                        goto fail;
                json_object_object_add(history, u->past[k].day, day);
                for (size_t i = 0; i < u->past[k].n; i++)
                        json_object_object_add(day, u->past[k].entries[i].name,
                                               count_to_json(&u->past[k].entries[i]));
        }
        return root;
fail:
        if (root)
                json_object_put(root);
        else {
                json_object_put(counts);
                json_object_put(tokens);
                json_object_put(tiers);
                json_object_put(history);
        }
        return NULL;
}

static uint64_t member_u64(json_object *o, const char *name) {
        json_object *v;
        return json_object_object_get_ex(o, name, &v) ? json_object_get_uint64(v) : 0;
}

static const char *member_string(json_object *o, const char *name) {
        json_object *v;
        return json_object_object_get_ex(o, name, &v) && json_object_is_type(v, json_type_string)
                       ? json_object_get_string(v)
                       : NULL;
}

static json_object *member_object(json_object *o, const char *name) {
        json_object *v;
        return json_object_object_get_ex(o, name, &v) && json_object_is_type(v, json_type_object) ? v : NULL;
}

/* The file's own current day, as the current one (rolled over by the caller) */
static int load_current(KeyUsage *u, json_object *root) {
        json_object *counts = member_object(root, "counts"), *tokens = member_object(root, "tokens"),
                    *tiers = member_object(root, "tiers");

        if (!counts)
                return 0;
        /* linear in the entries: a hash table, and nothing past the anonymous cap is kept */
        json_object_object_foreach(counts, name, v) {
                const char *tier = tiers ? member_string(tiers, name) : NULL;
                if (!tier && !startswith(name, "ip:")) /* an older file's key: its tier is not known */
                        tier = "";
                UsageCount *c = key_usage_get(u, name, tier, true);
                json_object *t;
                if (!c) {
                        if (errno == ENOMEM)
                                return -ENOMEM;
                        continue;
                }
                c->requests = json_object_get_uint64(v);
                if (tokens && json_object_object_get_ex(tokens, name, &t) &&
                    json_object_is_type(t, json_type_array) && json_object_array_length(t) == 3) {
                        c->in = json_object_get_uint64(json_object_array_get_idx(t, 0));
                        c->cached = json_object_get_uint64(json_object_array_get_idx(t, 1));
                        c->out = json_object_get_uint64(json_object_array_get_idx(t, 2));
                }
        }
        return 0;
}

static int load_history(KeyUsage *u, json_object *root) {
        json_object *history = member_object(root, "history");
        char check[16];

        if (!history)
                return 0;
        json_object_object_foreach(history, day, rows) {
                day_before(day, 0, check);
                if (!streq(check, day) || !json_object_is_type(rows, json_type_object))
                        continue; /* not a date */
                UsageDay *d = past_get(u, day);
                if (!d)
                        return -ENOMEM;
                json_object_object_foreach(rows, name, row) {
                        if (!json_object_is_type(row, json_type_object))
                                continue;
                        const char *tier = member_string(row, "tier");
                        UsageCount c = {
                                .requests = member_u64(row, "requests"),
                                .in = member_u64(row, "in"),
                                .cached = member_u64(row, "cached"),
                                .out = member_u64(row, "out"),
                        };
                        if (past_add(d, name, tier ?: (startswith(name, "k:") ? "" : NULL), &c) < 0)
                                return -ENOMEM;
                }
        }
        return 0;
}

int key_usage_from_json(KeyUsage *u, json_object *root, const char *today) {
        const char *day = member_string(root, "day");
        char check[16] = "";
        int r;

        if (day)
                day_before(day, 0, check);
        if (check[0] && streq(check, day)) {
                /* the file's day first, so that a day that ended since becomes history */
                today_clear(u);
                snprintf(u->today.day, sizeof(u->today.day), "%s", day);
                r = load_current(u, root);
                if (r < 0)
                        return r;
        }
        r = load_history(u, root);
        if (r < 0)
                return r;
        if (!u->today.day[0]) {
                snprintf(u->today.day, sizeof(u->today.day), "%s", today);
                past_prune(u, today);
                return 0;
        }
        r = key_usage_set_day(u, today);
        if (r == 0) /* the same day: the history is pruned all the same */
                past_prune(u, today);
        return r < 0 ? r : 0;
}
