/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* What each caller used, per UTC day (rule:daily-cap, rule:daily-tokens, rule:key-usage): requests and the
 * tokens of the engine's own usage (in, of them from the cache, out), for the current day by caller and for
 * the KEY_USAGE_DAYS - 1 days before it by key, and the usage.json text that keeps them. A caller is a key
 * ("k:" and the first 16 hex digits of its SHA-256, with its tier's name) or an anonymous address ("ip:"
 * and the address, "ip:*" for those past USAGE_ANONYMOUS_MAX). When the day rolls over, the day that ends
 * becomes history: its keys as they are, its anonymous addresses summed into one "anonymous" row (their
 * counts only mattered for that day's cap, and 65536 of them a day would make the file large), and days
 * older than the last KEY_USAGE_DAYS are dropped. No I/O, no clock: the caller says which day it is. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

/* the current UTC day and the 7 before it */
#define KEY_USAGE_DAYS 8
/* Anonymous addresses counted a day at most; past it, new ones share OVERFLOW's count (access.c) */
#define USAGE_ANONYMOUS_MAX 65536
#define USAGE_OVERFLOW "ip:*"
#define USAGE_ANONYMOUS "anonymous"

typedef struct UsageCount {
        uint64_t requests;
        uint64_t in, cached,
                out; /* tokens: the prompt's (with the cached ones), from the cache, generated */
} UsageCount;

/* What a tier's DailyTokens= counts (rule:daily-tokens): the tokens the engine worked on, the prompt's not
 * served from its cache and the generated ones */
static inline uint64_t usage_count_charged(const UsageCount *c) {
        return (c->in > c->cached ? c->in - c->cached : 0) + c->out;
}

typedef struct KeyUsage KeyUsage;

KeyUsage *key_usage_new(void);
KeyUsage *key_usage_free(KeyUsage *u);

/* The day the current counts are for ("2026-12-02"; "" before the first key_usage_set_day()) */
const char *key_usage_day(const KeyUsage *u);
/* Makes day the current one. A later day than the current: the current counts become history, and days
 * before the last KEY_USAGE_DAYS are dropped; an earlier one (the clock went back): the current counts
 * start again and history keeps only the days before day. true when anything changed; -ENOMEM. */
int key_usage_set_day(KeyUsage *u, const char *day);

/* The current day's count of name ("k:…", "ip:…"), made at zero with create (tier: a key's, copied; NULL
 * for an address). NULL with errno: not there (ENOENT), ENOMEM, or EDQUOT when an anonymous one would pass
 * USAGE_ANONYMOUS_MAX. The pointer holds until the next change of u. */
UsageCount *key_usage_get(KeyUsage *u, const char *name, const char *tier, bool create);
size_t key_usage_n_anonymous(const KeyUsage *u);

/* Every row: the current day's first, then the days before, newest first. fn's negative return stops. */
typedef int (*KeyUsageFn)(const char *day, const char *name, const char *tier, const UsageCount *c,
                          void *userdata);
int key_usage_foreach(const KeyUsage *u, KeyUsageFn fn, void *userdata);

/* usage.json (rule:key-usage): {"day": D, "counts": {name: requests}, "tokens": {name: [in, cached, out]},
 * "tiers": {name: tier}, "history": {day: {name: {"tier", "requests", "in", "cached", "out"}}}}. "day" and
 * "counts" are what an older modelgated wrote and reads; the other members are new, and each is optional.
 * NULL when out of memory. */
json_object *key_usage_to_json(const KeyUsage *u);
/* What root says, with today as the current day (a file of another day is history, or dropped): 0, or
 * -ENOMEM. What is not of the schema is skipped, and so are anonymous counts past USAGE_ANONYMOUS_MAX. */
int key_usage_from_json(KeyUsage *u, json_object *root, const char *today);
