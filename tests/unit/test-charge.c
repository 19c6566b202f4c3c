/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* rule:usage, rule:usage-charge, rule:resumable-streams through modelgate in one process (relay-harness.h),
 * looked at where they end: the key's day of usage.json (rule:key-usage). llama.cpp's native answer is
 * counted whatever the order of its members; one that says nothing (response_fields) is charged by the
 * rule, never as nothing; a resumable stream whose client left after its first token is read on, and
 * counted whole, once. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "modelgated/manager/manager.h"
#include "modelgated/access/access.h"
#include "shared/keys-file.h"
#include "unit/relay-harness.h"
#include "tests.h"

#define KEY "sk-charge-test"
#define AUTH "Authorization: Bearer " KEY "\r\n"
#define JSON_HEAD "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"

static char dir[64], keys[96];

/* [Access] with one key of tier free */
static Harness *keyed_harness(void) {
        char hex[SHA256_HEX_SIZE], extra[256];
        FILE *f;

        snprintf(dir, sizeof(dir), "/tmp/test-charge-XXXXXX");
        ASSERT_TRUE(mkdtemp(dir));
        snprintf(keys, sizeof(keys), "%s/keys", dir);
        ASSERT_OK(sha256_hex(KEY, strlen(KEY), hex));
        ASSERT_TRUE((f = fopen(keys, "we")));
        fprintf(f, "%s free\n", hex);
        ASSERT_OK(fclose(f));
        snprintf(extra, sizeof(extra), "[Access]\nKeysFile=%s\n[Tier]\nName=free\n", keys);
        return harness_new(extra);
}

static void keyed_harness_free(Harness *h) {
        harness_free(h);
        (void)unlink(keys);
        (void)rmdir(dir);
}

typedef struct Day {
        Harness *h;
        UsageCount c;
        uint64_t want_out; /* harness_run_until(): until the day counts this many generated tokens */
} Day;

static int day_row(const char *day, const char *name, const char *tier, const UsageCount *c,
                   void *userdata) {
        Day *d = userdata;
        if (tier && strcmp(tier, "free") == 0)
                d->c = *c;
        return -1; /* the current day's first row is the only one */
}

static UsageCount key_day(Harness *h) {
        Day d = {};
        (void)access_usage_foreach(manager_access(harness_manager(h)), day_row, &d);
        return d.c;
}

static bool day_counts_out(void *arg) {
        Day *d = arg;
        d->c = key_day(d->h);
        return d->c.out >= d->want_out;
}

#define ASSERT_DAY(h, in_, cached_, out_)                                                                   \
        do {                                                                                                \
                UsageCount _c = key_day(h);                                                                 \
                ASSERT_EQ(_c.in, in_);                                                                      \
                ASSERT_EQ(_c.cached, cached_);                                                              \
                ASSERT_EQ(_c.out, out_);                                                                    \
        } while (0)

#define TIMINGS                                                                                             \
        "\"timings\":{\"cache_n\":640,\"prompt_n\":172,\"prompt_ms\":86.0,\"predicted_n\":95,"              \
        "\"predicted_ms\":2000.0}"

static bool peer_has(Peer *p, const char *text) {
        return memmem(buffer_peek(&p->in), buffer_size(&p->in), text, strlen(text)) != NULL;
}

static bool peer_has_first_token(void *arg) {
        return peer_has(arg, "{\"content\":\"a\"}");
}

TEST(a_native_answer_is_counted_whatever_its_members_order) {
        Harness *h = keyed_harness();
        Peer *p = peer_new(h);

        /* n_probs: completion_probabilities after timings, as llama-server writes it */
        peer_send_request(p, "POST", "/completion", "1.1", AUTH,
                          "{\"model\":\"h-m1\",\"prompt\":\"hi\",\"n_predict\":95,\"n_probs\":1}");
        FakeConn *f = fake_take_request(h);
        fake_send_with_length(
                f, JSON_HEAD,
                "{\"content\":\"x\",\"stop\":true,\"tokens_predicted\":95,\"tokens_evaluated\":812," TIMINGS
                ",\"completion_probabilities\":[{\"id\":1,\"token\":\"}}\",\"logprob\":-0.5,"
                "\"top_logprobs\":[]}]}");
        Day d = {.h = h, .want_out = 95};
        harness_run_until(HERE, h, day_counts_out, &d, "the answer's tokens counted for the key");
        ASSERT_DAY(h, 812, 640, 95);
        peer_free(p);
        keyed_harness_free(h);
}

TEST(an_answer_that_says_nothing_is_charged_by_the_rule) {
        static const char request[] = "{\"model\":\"h-m1\",\"prompt\":\"hi there\",\"n_predict\":32,"
                                      "\"response_fields\":[\"content\"]}";
        Harness *h = keyed_harness();
        Peer *p = peer_new(h);

        /* response_fields ["content"]: the prompt at 4 bytes a token of the request's body, the output at
         * its n_predict */
        peer_send_request(p, "POST", "/completion", "1.1", AUTH, request);
        FakeConn *f = fake_take_request(h);
        fake_send_with_length(f, JSON_HEAD, "{\"content\":\"hello\"}");
        Day d = {.h = h, .want_out = 32};
        harness_run_until(HERE, h, day_counts_out, &d, "the answer charged to the key");
        ASSERT_DAY(h, (sizeof(request) - 1 + 3) / 4, 0, 32);
        peer_free(p);
        keyed_harness_free(h);
}

TEST(a_resumable_stream_left_after_its_first_token_is_counted_whole_once) {
        Harness *h = keyed_harness();
        Peer *p = peer_new(h);

        peer_send_request(p, "POST", CHAT, "1.1", AUTH "X-Conversation-Id: c1\r\n", STREAM_BODY);
        FakeConn *f = fake_take_request(h);
        fake_send(f, SSE_HEAD);
        fake_send_chunk(f,
                        "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":null}}]}\n\n");
        fake_send_chunk(f, "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n");
        harness_run_until(HERE, h, peer_has_first_token, p, "the client's first token");
        /* the client leaves; the engine goes on producing into the session, and ends the stream */
        peer_free(p);
        fake_send_chunk(f, "data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\n");
        fake_send_chunk(f,
                        "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"length\"}]," TIMINGS "}\n\n");
        fake_send_chunk(f, "data: {\"choices\":[],\"usage\":{\"completion_tokens\":95,\"prompt_tokens\":812,"
                           "\"prompt_tokens_details\":{\"cached_tokens\":640}}," TIMINGS "}\n\n");
        fake_send_chunk(f, "data: [DONE]\n\n");
        fake_send(f, "0\r\n\r\n");
        /* counted once, whole: the line of the request its client left counted nothing of it */
        Day d = {.h = h, .want_out = 95};
        harness_run_until(HERE, h, day_counts_out, &d, "the stream's tokens counted for the key");
        ASSERT_DAY(h, 812, 640, 95);
        keyed_harness_free(h);
}

/* The same stream, not resumable: the engine's request is cut when its client leaves, and what arrived is
 * counted then, with the prompt it never said charged by the rule (never "in:?", never 0) */
TEST(a_stream_left_after_its_first_token_keeps_its_prompt) {
        Harness *h = keyed_harness();
        Peer *p = peer_new(h);

        peer_send_request(p, "POST", CHAT, "1.1", AUTH, STREAM_BODY);
        FakeConn *f = fake_take_request(h);
        fake_send(f, SSE_HEAD);
        fake_send_chunk(f,
                        "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":null}}]}\n\n");
        fake_send_chunk(f, "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n");
        harness_run_until(HERE, h, peer_has_first_token, p, "the client's first token");
        peer_free(p);
        fake_send_chunk(f, "data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\n");
        fake_expect_eof(f);
        Day d = {.h = h, .want_out = 1};
        harness_run_until(HERE, h, day_counts_out, &d, "the cut stream's tokens counted for the key");
        UsageCount c = key_day(h);
        ASSERT_EQ(c.in, (strlen(STREAM_BODY) + 3) / 4);
        ASSERT_TRUE(c.out >= 1 && c.out <= 2);
        keyed_harness_free(h);
}

TESTS_MAIN
