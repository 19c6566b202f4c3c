/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* API keys, tiers and daily caps: see access.h and modelgate.conf(5), [Access]. */

#include <assert.h>
#include <arpa/inet.h>
#include <fnmatch.h>
#include <json-c/json.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "modelgated/access/access.h"
#include "shared/keys-file.h"
#include "shared/log.h"
#include "shared/state-file.h"
#include "shared/time-util.h"

/* Anonymous clients are counted per address (IPv6 per /64, which is what one client has): at most
 * USAGE_ANONYMOUS_MAX a day. Past the cap, new anonymous addresses share one count (USAGE_OVERFLOW) with the
 * same daily cap, rather than an old count being forgotten (a fresh quota for its address) or every new
 * address being refused (a /48 has 65536 /64s: one user could shut everyone else out). Keys are bounded by
 * the keys file. */

struct Access {
        sd_event *event;
        KeyUsage *usage; /* today's counts, and the days before (key-usage.h) */
        bool dirty;
        sd_event_source *save_timer;
        SharedCounts *shared;     /* [Access] Redis=, rule:shared-counts */
        AccessWait *waits;        /* the requests Redis admits */
        sd_event_source *orphans; /* admits those whose store a reload let go of */
        void (*changed)(void *userdata);
        void *userdata;
};

static void today(char day[16], uint64_t *ret_seconds_left) {
        time_t now = time(NULL);
        struct tm tm;

        gmtime_r(&now, &tm);
        strftime(day, 16, "%Y-%m-%d", &tm);
        if (ret_seconds_left)
                *ret_seconds_left = (uint64_t)(86400 - (tm.tm_hour * 3600 + tm.tm_min * 60 + tm.tm_sec));
}

static void usage_save(Access *a) {
        _cleanup_free_ char *path = state_file_path("usage.json");
        json_object *root = key_usage_to_json(a->usage);
        int r;

        if (!root)
                log_warning("Out of memory: the request counts are not written now");
        else if (!path)
                log_warning("No state directory: daily request counts will not survive a restart");
        else {
                const char *s = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN);
                r = s ? state_file_write(path, s, strlen(s)) : -ENOMEM;
                if (r < 0)
                        log_warning_errno(r, "Cannot write %s, daily request counts may be lost: %m", path);
        }
        a->dirty = !root;
        json_object_put(root);
}

static void usage_load(Access *a) {
        _cleanup_free_ char *path = state_file_path("usage.json");
        json_object *root;
        char day[16];

        today(day, NULL);
        (void)key_usage_set_day(a->usage, day);
        if (!path)
                return;
        root = json_object_from_file(path);
        if (!root || !json_object_is_type(root, json_type_object)) {
                json_object_put(root);
                if (access(path, F_OK) < 0)
                        return; /* a first start: nothing counted yet */
                /* kept aside for a look, and said: every quota starts again */
                _cleanup_free_ char *aside = NULL;
                if (asprintf(&aside, "%s.corrupt", path) >= 0 && rename(path, aside) >= 0)
                        log_warning(
                                "%s cannot be read (%s); moved to %s, today's request counts start again",
                                path, json_util_get_last_err() ?: "not JSON", aside);
                else
                        log_warning("%s cannot be read (%s); today's request counts start again", path,
                                    json_util_get_last_err() ?: "not JSON");
                return;
        }
        /* rule:key-usage: an older file's "day" and "counts" load as they are, without tokens */
        if (key_usage_from_json(a->usage, root, day) < 0)
                log_warning("Out of memory: some of the request counts in %s are not read", path);
        json_object_put(root);
}

/* A count changed: written at most USAGE_SAVE_DELAY_USEC behind */
static void usage_changed(Access *a) {
        if (!a->dirty || sd_event_source_get_enabled(a->save_timer, NULL) <= 0) {
                a->dirty = true;
                (void)sd_event_source_set_time_relative(a->save_timer, USAGE_SAVE_DELAY_USEC);
                (void)sd_event_source_set_enabled(a->save_timer, SD_EVENT_ONESHOT);
        }
}

/* The day rolled over: everyone starts again (the day that ended is history) */
static void roll_over(Access *a, uint64_t *ret_seconds_left) {
        char day[16];

        today(day, ret_seconds_left);
        if (!streq(day, key_usage_day(a->usage)) && key_usage_set_day(a->usage, day) != 0)
                usage_changed(a);
}

static int save_cb(sd_event_source *s, uint64_t usec, void *userdata) {
        usage_save(userdata);
        return 0;
}

Access *access_new(sd_event *event) {
        Access *a = calloc(1, sizeof(Access));

        if (!a)
                return NULL;
        a->event = sd_event_ref(event);
        a->usage = key_usage_new();
        if (!a->usage)
                return access_free(a);
        usage_load(a);
        if (sd_event_add_time_relative(event, &a->save_timer, CLOCK_MONOTONIC, USAGE_SAVE_DELAY_USEC, 0,
                                       save_cb, a) < 0)
                return access_free(a);
        (void)sd_event_source_set_enabled(a->save_timer, SD_EVENT_OFF);
        return a;
}

Access *access_free(Access *a) {
        if (!a)
                return NULL;
        if (a->dirty)
                usage_save(a);
        LIST_FOREACH_SAFE (waits, w, n, a->waits) { /* the requests went first: none is left */
                w->waiting = false;
                w->op = NULL;
                LIST_REMOVE(waits, a->waits, w);
        }
        shared_counts_free(a->shared);
        sd_event_source_disable_unref(a->orphans);
        sd_event_unref(a->event);
        sd_event_source_disable_unref(a->save_timer);
        key_usage_free(a->usage);
        free(a);
        return NULL;
}

int access_identify(const Config *c, const char *key, const char *peer, AccessCaller *ret, AccessDenial *d) {
        assert(c);
        *ret = (AccessCaller){};
        if (key && *key) {
                uint8_t h[SHA256_DIGEST_SIZE];
                char hex[2 * SHA256_DIGEST_SIZE + 1];

                if (sha256(key, strlen(key), h) < 0) {
                        *d = (AccessDenial){.answer = ANSWER_ADMISSION_OUT_OF_MEMORY};
                        (void)answer_format(d->message, sizeof(d->message), d->answer);
                        return -ENOMEM;
                }
                sha256_to_hex(h, hex);
                for (size_t i = 0; i < c->access.n_keys; i++)
                        if (memcmp(c->access.key_hashes[i], h, sizeof(h)) == 0) {
                                ret->tier = &c->tiers[c->access.key_tiers[i]];
                                ret->admitted = true;
                                memcpy(ret->digest, hex, 16);
                                ret->digest[16] = 0;
                                return ACCESS_ALLOWED;
                        }
                *d = (AccessDenial){.answer = ANSWER_INVALID_API_KEY};
                (void)answer_format(d->message, sizeof(d->message), d->answer, hex);
                return ACCESS_REFUSED;
        }
        if (c->access.anonymous_daily_requests == 0) {
                *d = (AccessDenial){.answer = ANSWER_MISSING_API_KEY};
                (void)answer_format(d->message, sizeof(d->message), d->answer);
                return ACCESS_REFUSED;
        }
        ret->admitted = true;
        return ACCESS_ALLOWED;
}

const char *access_caller_id(const AccessCaller *caller, char buf[static 80]) {
        assert(caller);
        if (!caller->tier)
                return "anonymous";
        snprintf(buf, 80, "%s:%.8s", caller->tier->name, caller->digest);
        return buf;
}

bool access_model_allowed(const AccessCaller *caller, const char *model) {
        assert(caller);
        if (!caller->tier || strv_isempty(caller->tier->models))
                return true;
        STRV_FOREACH (g, caller->tier->models)
                if (fnmatch(*g, model, 0) == 0)
                        return true;
        return false;
}

bool access_host_allowed(const AccessCaller *caller, const char *host) {
        assert(caller);
        size_t h = strlen(host);

        if (!caller->tier || strv_isempty(caller->tier->models))
                return true;
        STRV_FOREACH (g, caller->tier->models) {
                /* up to its first special character a glob matches only itself: a name of the host must
                 * agree with that much ("<host>-" as far as both go), and a glob without one must begin
                 * with "<host>-" */
                size_t fixed = strcspn(*g, "*?[\\");
                size_t k = MIN(fixed, h);
                if (strncmp(*g, host, k) != 0)
                        continue;
                if (fixed > h ? (*g)[h] == '-' : (*g)[fixed] != '\0')
                        return true;
        }
        return false;
}

const char *access_client_address(const char *peer, char buf[static INET6_ADDRSTRLEN + 8]) {
        assert(peer);
        struct in6_addr a6;

        if (inet_pton(AF_INET6, peer, &a6) != 1)
                return peer; /* IPv4 (or "local") */
        if (IN6_IS_ADDR_V4MAPPED(&a6)) {
                /* a dual-stack listener's IPv4 client is that IPv4 address */
                inet_ntop(AF_INET, &a6.s6_addr[12], buf, INET6_ADDRSTRLEN + 8);
                return buf;
        }
        memset(&a6.s6_addr[8], 0, 8);
        inet_ntop(AF_INET6, &a6, buf, INET6_ADDRSTRLEN);
        strcat(buf, "/64");
        return buf;
}

const char *access_caller_name(const AccessCaller *caller, const char *peer, char name[static 80]) {
        char address[INET6_ADDRSTRLEN + 8];

        assert(caller);
        snprintf(name, 80, caller->tier ? "k:%s" : "ip:%s",
                 caller->tier ? caller->digest : access_client_address(peer ?: "local", address));
        return name;
}

/* The caller's count of the day; with take, made. NULL: none (a check creates no counter: a caller not
 * counted yet has used nothing), or out of memory when taking. Past the cap of anonymous addresses, one
 * not counted yet is counted as all the others are (key_usage_get()'s EDQUOT). */
static UsageCount *caller_count(Access *a, const AccessCaller *caller, const char *peer, bool take,
                                bool *ret_overflow, char name[static 80]) {
        const char *tier = caller->tier ? caller->tier->name : NULL;
        UsageCount *n = key_usage_get(a->usage, access_caller_name(caller, peer, name), tier, take);

        *ret_overflow = !n && !caller->tier && key_usage_n_anonymous(a->usage) >= USAGE_ANONYMOUS_MAX;
        if (*ret_overflow) {
                n = key_usage_get(a->usage, USAGE_OVERFLOW, NULL, take);
                snprintf(name, 80, "%s", USAGE_OVERFLOW);
        }
        return n;
}

static void shared_admit_cb(void *waiter, SharedVerdict v, uint64_t requests, uint64_t tokens,
                            void *userdata);

static void shared_state_changed(void *userdata) {
        Access *a = userdata;
        if (a->changed)
                a->changed(a->userdata);
}

static const SharedCountsCallbacks shared_callbacks = {
        .admitted = shared_admit_cb,
        .state_changed = shared_state_changed,
};

void access_set_changed(Access *a, void (*changed)(void *userdata), void *userdata) {
        assert(a);
        a->changed = changed;
        a->userdata = userdata;
}

/* A request Redis admitted, or whose answer was lost: this instance's own count too */
static void count_served(Access *a, AccessWait *w) {
        char name[80];
        bool overflow;
        UsageCount *n = caller_count(a, w->caller, w->peer, true, &overflow, name);

        if (n) {
                n->requests++;
                usage_changed(a);
        }
}

/* Requests whose admission was in flight to a store that a reload let go of: served, as with a lost
 * answer (the store wrote their change as owed, and the next one sends it). From the loop, not from
 * inside the reload. */
static int orphans_cb(sd_event_source *s, void *userdata) {
        Access *a = userdata;

        for (;;) { /* from the head again each time: a request's going on may end others */
                AccessWait *w = a->waits;
                while (w && w->op)
                        w = w->waits_next;
                if (!w)
                        return 0;
                LIST_REMOVE(waits, a->waits, w);
                w->waiting = false;
                count_served(a, w);
                w->fn(w, ACCESS_ALLOWED, NULL);
        }
}

static void shared_let_go(Access *a) {
        LIST_FOREACH (waits, w, a->waits)
                w->op = NULL;
        a->shared = shared_counts_free(a->shared); /* what it owed is written, and read again */
        if (a->waits && (a->orphans || sd_event_add_defer(a->event, &a->orphans, orphans_cb, a) >= 0))
                (void)sd_event_source_set_enabled(a->orphans, SD_EVENT_ONESHOT);
}

/* The shared store of the configuration, (re)connected when Redis= names another; NULL: none */
static SharedCounts *shared_for(Access *a, const Config *c) {
        if (a->shared &&
            (!c->access.redis || !shared_counts_is(a->shared, c->access.redis, c->access.redis_password)))
                shared_let_go(a);
        if (!a->shared && c->access.redis) {
                int r = shared_counts_new(a->event, c->access.redis, c->access.redis_password,
                                          &shared_callbacks, a, &a->shared);
                if (r < 0)
                        log_warning_errno(r, "Cannot share the daily counts through Redis at %s: %m",
                                          c->access.redis);
        }
        return a->shared;
}

void access_configure(Access *a, const Config *c) {
        if (a) /* else out of memory: the requests count locally, and the next reload tries again */
                (void)shared_for(a, c);
}

const char *access_shared_state(Access *a) {
        assert(a);
        if (!a->shared)
                return NULL;
        return shared_counts_up(a->shared) ? "connected" : "unreachable";
}

const char *access_shared_warning(Access *a) {
        assert(a);
        return a->shared ? shared_counts_warning(a->shared) : NULL;
}

/* Whether requests and charged tokens of the day leave the caller a request: ACCESS_ALLOWED, or
 * ACCESS_OVER_CAP with the denial */
static int over_cap(Access *a, const Config *c, const AccessCaller *caller, bool overflow, uint64_t requests,
                    uint64_t charged, uint64_t left, AccessDenial *d) {
        uint64_t cap = caller->tier ? caller->tier->daily_requests : c->access.anonymous_daily_requests;
        uint64_t tokens_cap = caller->tier ? caller->tier->daily_tokens : UINT64_MAX;
        char span[FORMAT_TIMESPAN_MAX];

        if (cap != UINT64_MAX && requests >= cap) {
                *d = (AccessDenial){.answer = ANSWER_DAILY_LIMIT, .retry_after = left};
                (void)answer_format(
                        d->message, sizeof(d->message), d->answer,
                        caller->tier ? "this key"
                        : overflow   ? "this proxy has counted its most anonymous addresses today, and the "
                                       "rest, sharing one count,"
                                     : "this address",
                        (unsigned long long)cap, key_usage_day(a->usage),
                        answer_time_left(span, sizeof(span), left) ?: "?");
                return ACCESS_OVER_CAP;
        }
        /* rule:daily-tokens: a request in flight when the cap is crossed finishes; the next is refused */
        if (tokens_cap != UINT64_MAX && charged >= tokens_cap) {
                *d = (AccessDenial){.answer = ANSWER_DAILY_TOKENS, .retry_after = left};
                (void)answer_format(d->message, sizeof(d->message), d->answer, (unsigned long long)charged,
                                    key_usage_day(a->usage), (unsigned long long)tokens_cap,
                                    answer_time_left(span, sizeof(span), left) ?: "?");
                return ACCESS_OVER_CAP;
        }
        return ACCESS_ALLOWED;
}

static int access_cap(Access *a, const Config *c, const AccessCaller *caller, const char *peer, bool take,
                      AccessDenial *d, AccessWait *w) {
        uint64_t cap = caller->tier ? caller->tier->daily_requests : c->access.anonymous_daily_requests;
        uint64_t tokens_cap = caller->tier ? caller->tier->daily_tokens : UINT64_MAX;
        uint64_t left, requests, charged, shared_requests, shared_tokens;
        /* the store of the configuration in force (access_configure()): a request admitted under an
         * older one, ending after a reload, must not take it back */
        SharedCounts *shared = a->shared;
        const UsageCount zero = {};
        char name[80];
        bool overflow;
        UsageCount *n;
        int k;

        roll_over(a, &left);
        /* an anonymous client without a cap costs nothing to count, and is not */
        if (!caller->tier && cap == UINT64_MAX)
                return ACCESS_ALLOWED;
        n = caller_count(a, caller, peer, take, &overflow, name);
        if (!n && take)
                return -ENOMEM;
        requests = (n ?: &zero)->requests;
        charged = usage_count_charged(n ?: &zero);
        /* rule:shared-counts: every instance's, as far as this one knows: no wait on the store */
        if (shared) {
                shared_counts_view(shared, key_usage_day(a->usage), name, &shared_requests, &shared_tokens);
                requests = MAX(requests, shared_requests);
                charged = MAX(charged, shared_tokens);
        }
        k = over_cap(a, c, caller, overflow, requests, charged, left, d);
        if (k != ACCESS_ALLOWED || !take)
                return k;
        /* the store decides, atomically for every instance: the request waits for its answer */
        if (shared && w && shared_counts_up(shared)) {
                w->access = a;
                w->config = c;
                w->caller = caller;
                w->peer = peer;
                w->op = shared_counts_admit(shared, key_usage_day(a->usage), name, cap, tokens_cap, w);
                if (w->op) {
                        w->waiting = true;
                        LIST_PREPEND(waits, a->waits, w);
                        return ACCESS_PENDING;
                }
        }
        n->requests++;
        usage_changed(a);
        /* counted locally, owed to the store */
        if (shared && shared_counts_add(shared, key_usage_day(a->usage), name, 1, 0) < 0)
                log_warning("Out of memory: a request is not counted in Redis");
        return ACCESS_ALLOWED;
}

static void shared_admit_cb(void *waiter, SharedVerdict v, uint64_t requests, uint64_t tokens,
                            void *userdata) {
        AccessWait *w = waiter;
        Access *a = w->access;
        AccessDenial d;
        uint64_t left;
        char day[16], name[80];
        bool overflow;

        w->op = NULL;
        w->waiting = false;
        LIST_REMOVE(waits, a->waits, w);
        today(day, &left);
        if (v == SHARED_REFUSED) {
                /* the store's counts of every instance: over a cap, as it judged (the script's test is
                 * over_cap()'s; a reload that raised the cap meanwhile is told as the request cap) */
                (void)caller_count(a, w->caller, w->peer, false, &overflow, name);
                if (over_cap(a, w->config, w->caller, overflow, requests, tokens, left, &d) !=
                    ACCESS_OVER_CAP)
                        (void)over_cap(a, w->config, w->caller, overflow, UINT64_MAX - 1, 0, left, &d);
                w->fn(w, ACCESS_OVER_CAP, &d);
                return;
        }
        /* admitted by the store, or its answer lost with the connection: served, counted once (a lost one
         * is owed as a plain count, count_outbox_lost()) */
        count_served(a, w);
        w->fn(w, ACCESS_ALLOWED, NULL);
}

void access_wait_cancel(AccessWait *w) {
        if (!w || !w->waiting)
                return;
        if (w->op)
                shared_counts_forget_waiter(w->access->shared, w->op);
        LIST_REMOVE(waits, w->access->waits, w);
        w->op = NULL;
        w->waiting = false;
}

int access_admit(Access *a, const Config *c, const AccessCaller *caller, const char *peer, AccessDenial *d,
                 AccessWait *w) {
        return access_cap(a, c, caller, peer, true, d, w);
}

int access_count(Access *a, const Config *c, const AccessCaller *caller, const char *peer, AccessDenial *d) {
        return access_cap(a, c, caller, peer, true, d, NULL);
}

int access_check(Access *a, const Config *c, const AccessCaller *caller, const char *peer, AccessDenial *d) {
        return access_cap(a, c, caller, peer, false, d, NULL);
}

void access_record_usage(Access *a, const Config *c, const AccessCaller *caller, const char *peer,
                         int64_t in, int64_t cached, int64_t out) {
        SharedCounts *shared = a->shared;
        char name[80];
        bool overflow;
        UsageCount *n;

        assert(a);
        /* only who is counted: a key, or an anonymous client under a cap */
        if (!caller->admitted || (!caller->tier && c->access.anonymous_daily_requests == UINT64_MAX))
                return;
        if (in <= 0 && cached <= 0 && out <= 0)
                return;
        /* in the day the counts are for, with no clock read: the next request's check rolls the day over.
         * A key's count is made if need be (its day rolled over while it was in flight) */
        n = caller_count(a, caller, peer, caller->tier != NULL, &overflow, name);
        if (!n)
                return;
        n->in += MAX(in, (int64_t)0);
        n->cached += MAX(cached, (int64_t)0);
        n->out += MAX(out, (int64_t)0);
        usage_changed(a);
        /* rule:shared-counts: what DailyTokens= counts, for every instance */
        UsageCount delta = {
                .in = MAX(in, (int64_t)0), .cached = MAX(cached, (int64_t)0), .out = MAX(out, (int64_t)0)};
        if (shared && usage_count_charged(&delta) > 0 &&
            shared_counts_add(shared, key_usage_day(a->usage), name, 0, usage_count_charged(&delta)) < 0)
                log_warning("Out of memory: a request's tokens are not counted in Redis");
}

int access_usage_foreach(Access *a, KeyUsageFn fn, void *userdata) {
        assert(a);
        roll_over(a, NULL);
        return key_usage_foreach(a->usage, fn, userdata);
}
