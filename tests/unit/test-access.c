/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "modelgated/access/access.h"
#include "modelgated/access/key-usage.h"
#include "shared/fileio.h"
#include "tests.h"

TEST(anonymous_address) {
        char b[INET6_ADDRSTRLEN + 8];
        ASSERT_STREQ(access_client_address("192.0.2.7", b), "192.0.2.7");
        /* one IPv6 client has a /64: any address in it counts as one */
        ASSERT_STREQ(access_client_address("2001:db8:1:2:aaaa:bbbb:cccc:dddd", b), "2001:db8:1:2::/64");
        ASSERT_STREQ(access_client_address("2001:db8:1:2::1", b), "2001:db8:1:2::/64");
        ASSERT_STREQ(access_client_address("::ffff:192.0.2.7", b), "192.0.2.7");
        ASSERT_STREQ(access_client_address("::1", b), "::/64");
        ASSERT_STREQ(access_client_address("local", b), "local");
}

/* A tier sees a host's host-wide feed events ("<host>-*", its going down and coming back) when some
 * model of that host may be one of its own: judged by each glob's fixed beginning. */
TEST(host_allowed_by_a_globs_fixed_beginning) {
        char *models[] = {(char *)"3090-*", (char *)"a9-qwen-?", (char *)"laguna", (char *)"b*", NULL};
        TierConf tier = {.name = (char *)"t", .models = models};
        AccessCaller caller = {.tier = &tier};

        ASSERT_TRUE(access_host_allowed(&caller, "3090"));
        ASSERT_TRUE(access_host_allowed(&caller, "a9"));
        ASSERT_TRUE(access_host_allowed(&caller, "b"));       /* "b*" may match "b-x" */
        ASSERT_TRUE(access_host_allowed(&caller, "box.2"));   /* and "box.2-x" */
        ASSERT_TRUE(!access_host_allowed(&caller, "309"));    /* "3090-*" never matches "309-…" */
        ASSERT_TRUE(!access_host_allowed(&caller, "a"));      /* nor "a9-qwen-?" "a-…" */
        ASSERT_TRUE(!access_host_allowed(&caller, "lag"));    /* an alias's exact name is no host's model */
        ASSERT_TRUE(!access_host_allowed(&caller, "laguna")); /* not even of a host of its own name */
        ASSERT_TRUE(!access_host_allowed(&caller, "c"));

        char *escaped[] = {(char *)"\\3090-x", (char *)"[a]9-*", NULL};
        tier.models = escaped; /* a glob that begins with a special character may match any host */
        ASSERT_TRUE(access_host_allowed(&caller, "3090"));
        ASSERT_TRUE(access_host_allowed(&caller, "zz"));

        /* no tier, or one without Models=: every host */
        tier.models = NULL;
        ASSERT_TRUE(access_host_allowed(&caller, "c"));
        ASSERT_TRUE(access_host_allowed(&(AccessCaller){}, "c"));
}

static void count(KeyUsage *u, const char *name, const char *tier, uint64_t requests, uint64_t in,
                  uint64_t cached, uint64_t out) {
        UsageCount *c = key_usage_get(u, name, tier, true);
        ASSERT_TRUE(c);
        c->requests += requests;
        c->in += in;
        c->cached += cached;
        c->out += out;
}

/* the rows as one text, "day name tier requests/in/cached/out;" each */
static int row_text(const char *day, const char *name, const char *tier, const UsageCount *c,
                    void *userdata) {
        char *s = userdata;
        size_t n = strlen(s);
        snprintf(s + n, 1024 - n, "%s %s %s %llu/%llu/%llu/%llu;", day, name, tier ?: "-",
                 (unsigned long long)c->requests, (unsigned long long)c->in, (unsigned long long)c->cached,
                 (unsigned long long)c->out);
        return 0;
}

static const char *rows(const KeyUsage *u, char buf[static 1024]) {
        buf[0] = 0;
        ASSERT_OK(key_usage_foreach(u, row_text, buf));
        return buf;
}

/* rule:key-usage: a day that ends is history, its addresses summed; 8 days are kept in all */
TEST(key_usage_days_roll_over_and_are_pruned) {
        KeyUsage *u = key_usage_new();
        char b[1024];

        ASSERT_TRUE(u);
        ASSERT_EQ(key_usage_set_day(u, "2026-11-20"), 1);
        ASSERT_EQ(key_usage_set_day(u, "2026-11-20"), 0);
        count(u, "k:aaaa", "free", 3, 100, 40, 10);
        count(u, "ip:192.0.2.1", NULL, 1, 5, 0, 1);
        count(u, "ip:192.0.2.2", NULL, 2, 7, 1, 2);
        ASSERT_EQ(key_usage_n_anonymous(u), 2);
        count(u, "k:aaaa", "free", 1, 1, 0, 1); /* the same row again */
        ASSERT_STREQ(rows(u, b), "2026-11-20 k:aaaa free 4/101/40/11;2026-11-20 ip:192.0.2.1 - 1/5/0/1;"
                                 "2026-11-20 ip:192.0.2.2 - 2/7/1/2;");
        ASSERT_EQ(usage_count_charged(key_usage_get(u, "k:aaaa", "free", false)), 101 - 40 + 11);

        ASSERT_EQ(key_usage_set_day(u, "2026-11-21"), 1);
        ASSERT_EQ(key_usage_n_anonymous(u), 0);
        ASSERT_TRUE(!key_usage_get(u, "k:aaaa", "free", false) && errno == ENOENT);
        count(u, "k:bbbb", "pro", 1, 2, 0, 3);
        ASSERT_STREQ(rows(u, b), "2026-11-21 k:bbbb pro 1/2/0/3;2026-11-20 k:aaaa free 4/101/40/11;"
                                 "2026-11-20 anonymous - 3/12/1/3;");

        /* a week later the 20th is 8 days back: dropped; the 21st is the oldest kept */
        ASSERT_EQ(key_usage_set_day(u, "2026-11-28"), 1);
        ASSERT_STREQ(rows(u, b), "2026-11-21 k:bbbb pro 1/2/0/3;");
        ASSERT_EQ(key_usage_set_day(u, "2026-11-29"), 1);
        ASSERT_STREQ(rows(u, b), "");

        /* the clock went back: the current day starts again, no history of the days after it */
        count(u, "k:cccc", "free", 1, 0, 0, 0);
        ASSERT_EQ(key_usage_set_day(u, "2026-11-30"), 1);
        ASSERT_EQ(key_usage_set_day(u, "2026-11-29"), 1);
        ASSERT_STREQ(rows(u, b), "");
        key_usage_free(u);
}

TEST(key_usage_anonymous_addresses_are_bounded) {
        KeyUsage *u = key_usage_new();
        char name[32];

        ASSERT_EQ(key_usage_set_day(u, "2026-11-20"), 1);
        for (unsigned i = 0; i < USAGE_ANONYMOUS_MAX; i++) {
                snprintf(name, sizeof(name), "ip:10.%u.%u.1", i >> 8, i & 255);
                ASSERT_TRUE(key_usage_get(u, name, NULL, true));
        }
        ASSERT_TRUE(!key_usage_get(u, "ip:192.0.2.1", NULL, true) && errno == EDQUOT);
        ASSERT_TRUE(key_usage_get(u, USAGE_OVERFLOW, NULL, true)); /* the shared count */
        ASSERT_TRUE(key_usage_get(u, "k:aaaa", "free", true));     /* keys are not bounded here */
        key_usage_free(u);
}

static KeyUsage *from_text(const char *text, const char *today) {
        json_object *root = json_tokener_parse(text);
        KeyUsage *u = key_usage_new();
        ASSERT_TRUE(root && u);
        ASSERT_OK(key_usage_from_json(u, root, today));
        json_object_put(root);
        return u;
}

TEST(key_usage_file_round_trip_and_an_older_file) {
        KeyUsage *u = key_usage_new(), *v;
        char b[1024], b2[1024];

        ASSERT_EQ(key_usage_set_day(u, "2026-11-20"), 1);
        count(u, "k:aaaa", "free", 4, 101, 40, 11);
        count(u, "ip:192.0.2.1", NULL, 1, 0, 0, 0);
        ASSERT_EQ(key_usage_set_day(u, "2026-11-21"), 1);
        count(u, "k:aaaa", "free", 2, 10, 0, 5);
        json_object *root = key_usage_to_json(u);
        ASSERT_TRUE(root);
        const char *text = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN);
        /* what an older modelgated reads is where it was */
        ASSERT_TRUE(strstr(text, "\"day\":\"2026-11-21\",\"counts\":{\"k:aaaa\":2}"));
        v = from_text(text, "2026-11-21");
        ASSERT_STREQ(rows(v, b), rows(u, b2));
        key_usage_free(v);
        /* read a day later: the file's day is history */
        v = from_text(text, "2026-11-22");
        ASSERT_STREQ(rows(v, b), "2026-11-21 k:aaaa free 2/10/0/5;2026-11-20 k:aaaa free 4/101/40/11;"
                                 "2026-11-20 anonymous - 1/0/0/0;");
        key_usage_free(v);
        /* and 8 days later, nothing is left */
        v = from_text(text, "2026-11-29");
        ASSERT_STREQ(rows(v, b), "");
        key_usage_free(v);
        json_object_put(root);
        key_usage_free(u);

        /* an older modelgated's file: requests only, keys without their tier until they are counted */
        v = from_text("{\"day\":\"2026-11-20\",\"counts\":{\"k:aaaa\":3,\"ip:192.0.2.1\":1}}", "2026-11-20");
        ASSERT_STREQ(rows(v, b), "2026-11-20 k:aaaa  3/0/0/0;2026-11-20 ip:192.0.2.1 - 1/0/0/0;");
        ASSERT_EQ(key_usage_n_anonymous(v), 1);
        ASSERT_TRUE(key_usage_get(v, "k:aaaa", "free", true));
        ASSERT_STREQ(rows(v, b), "2026-11-20 k:aaaa free 3/0/0/0;2026-11-20 ip:192.0.2.1 - 1/0/0/0;");
        key_usage_free(v);
        /* what is not of the schema is skipped */
        v = from_text("{\"day\":7,\"counts\":[],\"history\":{\"nope\":{},\"2026-11-19\":{\"k:b\":5}}}",
                      "2026-11-20");
        ASSERT_STREQ(rows(v, b), "");
        key_usage_free(v);
}

static char dir[] = "/tmp/test-access.XXXXXX";

static char *usage_path(void) {
        static bool made = false;
        char *p;
        if (!made) {
                ASSERT_TRUE(mkdtemp(dir) != NULL);
                ASSERT_OK(setenv("STATE_DIRECTORY", dir, 1));
                made = true;
        }
        ASSERT_TRUE(asprintf(&p, "%s/usage.json", dir) > 0);
        return p;
}

static void write_text(const char *path, const char *text) {
        FILE *f = fopen(path, "we");
        ASSERT_TRUE(f);
        ASSERT_TRUE(fputs(text, f) >= 0);
        ASSERT_OK(fclose(f));
}

/* rule:daily-cap, rule:daily-tokens: an older usage.json's counts hold; tokens are kept in it; a corrupt one
 * is moved aside */
TEST(access_usage_file) {
        _cleanup_free_ char *path = usage_path(), *text = NULL, *aside = NULL;
        sd_event *event = NULL;
        char day[16], file[256];
        time_t now = time(NULL);
        struct tm tm;
        size_t n;

        gmtime_r(&now, &tm);
        strftime(day, sizeof(day), "%Y-%m-%d", &tm);
        snprintf(file, sizeof(file), "{\"day\":\"%s\",\"counts\":{\"k:0123456789abcdef\":2}}", day);
        write_text(path, file);
        ASSERT_OK(sd_event_new(&event));

        Config c = {.access.anonymous_daily_requests = UINT64_MAX};
        TierConf tier = {.name = (char *)"free", .daily_requests = 3, .daily_tokens = 100};
        AccessCaller caller = {.tier = &tier, .admitted = true, .digest = "0123456789abcdef"};
        AccessDenial d;
        Access *a = access_new(event);
        ASSERT_TRUE(a);
        ASSERT_EQ(access_check(a, &c, &caller, "192.0.2.1", &d), ACCESS_ALLOWED);
        ASSERT_EQ(access_count(a, &c, &caller, "192.0.2.1", &d), ACCESS_ALLOWED);
        /* 60 in, 20 of them cached, 30 out: 70 of DailyTokens=100 */
        access_record_usage(a, &c, &caller, "192.0.2.1", 60, 20, 30);
        tier.daily_requests = 10;
        ASSERT_EQ(access_check(a, &c, &caller, "192.0.2.1", &d), ACCESS_ALLOWED);
        access_record_usage(a, &c, &caller, "192.0.2.1", 10, -1, 20); /* -1: not known */
        ASSERT_EQ(access_check(a, &c, &caller, "192.0.2.1", &d), ACCESS_OVER_CAP);
        ASSERT_EQ(d.answer, ANSWER_DAILY_TOKENS);
        ASSERT_TRUE(d.retry_after > 0 && d.retry_after <= 86400);
        ASSERT_TRUE(strstr(d.message, "has used 100 tokens today"));
        /* an anonymous client without a cap is not counted, its tokens neither */
        AccessCaller anonymous = {.admitted = true};
        access_record_usage(a, &c, &anonymous, "192.0.2.1", 10, 0, 10);
        access_free(a);

        ASSERT_OK(read_full_file(path, &text, &n));
        json_object *root = json_tokener_parse(text);
        ASSERT_TRUE(root);
        json_object *counts = json_object_object_get(root, "counts"),
                    *tokens = json_object_object_get(root, "tokens");
        ASSERT_EQ(json_object_get_uint64(json_object_object_get(counts, "k:0123456789abcdef")), 3);
        ASSERT_EQ(json_object_object_length(counts), 1);
        json_object *t = json_object_object_get(tokens, "k:0123456789abcdef");
        ASSERT_EQ(json_object_get_uint64(json_object_array_get_idx(t, 0)), 70);
        ASSERT_EQ(json_object_get_uint64(json_object_array_get_idx(t, 1)), 20);
        ASSERT_EQ(json_object_get_uint64(json_object_array_get_idx(t, 2)), 50);
        ASSERT_STREQ(json_object_get_string(json_object_object_get(json_object_object_get(root, "tiers"),
                                                                   "k:0123456789abcdef")),
                     "free");
        json_object_put(root);

        /* a restart: the tokens hold */
        a = access_new(event);
        ASSERT_EQ(access_check(a, &c, &caller, "192.0.2.1", &d), ACCESS_OVER_CAP);
        ASSERT_EQ(d.answer, ANSWER_DAILY_TOKENS);
        access_free(a);

        /* a corrupt file is kept aside, and everyone starts again */
        write_text(path, "{\"day\": \"2026-");
        a = access_new(event);
        ASSERT_EQ(access_check(a, &c, &caller, "192.0.2.1", &d), ACCESS_ALLOWED);
        access_free(a);
        ASSERT_TRUE(asprintf(&aside, "%s.corrupt", path) > 0);
        ASSERT_OK(access(aside, F_OK));
        sd_event_unref(event);
}

TESTS_MAIN
