/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* rule:resumable-streams: the conversation map's memory and expiry, and the lookup bodies */
#include <string.h>

#include "modelgated/api/conversation.h"
#include "shared/strv.h"
#include "tests.h"

#define S(n) ((usec_t)(n)*USEC_PER_SEC)
#define SPAN(s) ((Span){s, strlen(s)})

TEST(ids_worth_remembering) {
        ASSERT_TRUE(conv_id_valid("c1", 2));
        ASSERT_TRUE(conv_id_valid("conv::org/repo-7B", 17));
        ASSERT_TRUE(!conv_id_valid("", 0));
        ASSERT_TRUE(!conv_id_valid(NULL, 0));
        ASSERT_TRUE(!conv_id_valid("a\nb", 3));
        ASSERT_TRUE(!conv_id_valid("a\x7f", 2));
        char big[CONV_ID_MAX + 1];
        memset(big, 'x', sizeof(big));
        ASSERT_TRUE(conv_id_valid(big, CONV_ID_MAX));
        ASSERT_TRUE(!conv_id_valid(big, CONV_ID_MAX + 1));
}

TEST(a_conversation_is_found_with_its_host_by_its_owner_alone_until_it_expires) {
        ConvMap m = {};
        const ConvEntry *e;

        ASSERT_TRUE(!conv_map_find(&m, "k:a", "c1", 0));
        ASSERT_OK(conv_map_remember(&m, "k:a", "c1", "3090", "mainline", S(10)));
        e = conv_map_find(&m, "k:a", "c1", S(11));
        ASSERT_TRUE(e);
        ASSERT_STREQ(e->host, "3090");
        ASSERT_STREQ(e->engine, "mainline");
        /* another key, of the same tier or not, and a client without one: as unknown as an id never seen */
        ASSERT_TRUE(!conv_map_find(&m, "k:b", "c1", S(11)));
        ASSERT_TRUE(!conv_map_find(&m, "ip:127.0.0.1", "c1", S(11)));
        /* started again elsewhere: the newer wins, as the engine replaces a session of the same id */
        ASSERT_OK(conv_map_remember(&m, "k:a", "c1", "a9", "fork", S(20)));
        ASSERT_EQ(m.n, 1u);
        ASSERT_STREQ(conv_map_find(&m, "k:a", "c1", S(20))->host, "a9");
        /* another owner's c1 is another conversation: neither replaces the other */
        ASSERT_OK(conv_map_remember(&m, "k:b", "c1", "3090", "mainline", S(20)));
        ASSERT_EQ(m.n, 2u);
        ASSERT_STREQ(conv_map_find(&m, "k:a", "c1", S(20))->host, "a9");
        ASSERT_STREQ(conv_map_find(&m, "k:b", "c1", S(20))->host, "3090");
        /* its time runs from its last use, its owner's use alone */
        conv_map_touch(&m, "k:b", "c1", S(20) + CONV_TTL_USEC - S(1));
        conv_map_touch(&m, "k:c", "c1", S(20) + CONV_TTL_USEC - S(1));
        ASSERT_TRUE(conv_map_find(&m, "k:b", "c1", S(20) + CONV_TTL_USEC + S(1)));
        ASSERT_TRUE(!conv_map_find(&m, "k:a", "c1", S(20) + CONV_TTL_USEC + S(1)));
        ASSERT_TRUE(!conv_map_find(&m, "k:b", "c1", S(20) + 2 * CONV_TTL_USEC));
        ASSERT_EQ(m.n, 0u); /* forgotten on the way */
        conv_map_done(&m);
}

TEST(the_host_knows_an_id_under_its_owners_mark) {
        char a[CONV_HOST_PREFIX_LEN + 1], b[CONV_HOST_PREFIX_LEN + 1];

        ASSERT_OK(conv_host_prefix("k:3f2a9c1e00112233", a));
        ASSERT_OK(conv_host_prefix("ip:127.0.0.1", b));
        ASSERT_EQ(strlen(a), (size_t)CONV_HOST_PREFIX_LEN);
        ASSERT_TRUE(strncmp(a, "mg-", 3) == 0 && a[CONV_HOST_PREFIX_LEN - 1] == '-');
        ASSERT_TRUE(!streq(a, b));
        /* the owner is not in it: no key digest, no address in the host's log */
        ASSERT_TRUE(!strstr(a, "3f2a9c1e") && !strstr(b, "127"));
        _cleanup_free_ char *h = conv_host_id("k:3f2a9c1e00112233", "c1::org/m");
        ASSERT_TRUE(startswith(h, a) && streq(h + CONV_HOST_PREFIX_LEN, "c1::org/m"));
        /* the same owner, the same mark: a restart does not lose it */
        ASSERT_OK(conv_host_prefix("ip:127.0.0.1", a));
        ASSERT_STREQ(a, b);
}

TEST(a_resume_sends_a_query_of_modelgates_own) {
        _cleanup_free_ char *u = conv_stream_url("mg-0123456789abcdef-c 1&model=x", "100");
        ASSERT_STREQ(u, "/v1/stream?conv_id=mg-0123456789abcdef-c%201%26model%3Dx&from=100");
        _cleanup_free_ char *d = conv_stream_url("c1", NULL);
        ASSERT_STREQ(d, "/v1/stream?conv_id=c1");
        ASSERT_TRUE(conv_from_valid("0"));
        ASSERT_TRUE(conv_from_valid("18446744073709551609"));
        ASSERT_TRUE(!conv_from_valid(""));
        ASSERT_TRUE(!conv_from_valid("-1"));
        ASSERT_TRUE(!conv_from_valid("+1"));
        ASSERT_TRUE(!conv_from_valid("1x"));
        ASSERT_TRUE(!conv_from_valid(" 1"));
        ASSERT_TRUE(!conv_from_valid("0&model=x"));
        ASSERT_TRUE(!conv_from_valid("99999999999999999999"));
        ASSERT_TRUE(!conv_from_valid("000000000000000000001"));
}

TEST(only_a_generating_request_makes_a_session) {
        ASSERT_TRUE(conv_path_keeps_stream(SPAN("/v1/chat/completions")));
        ASSERT_TRUE(conv_path_keeps_stream(SPAN("/v1/responses")));
        ASSERT_TRUE(conv_path_keeps_stream(SPAN("/v1/messages")));
        ASSERT_TRUE(conv_path_keeps_stream(SPAN("/completion")));
        ASSERT_TRUE(!conv_path_keeps_stream(SPAN("/v1/messages/count_tokens")));
        ASSERT_TRUE(!conv_path_keeps_stream(SPAN("/tokenize")));
        ASSERT_TRUE(!conv_path_keeps_stream(SPAN("/v1/embeddings")));
        ASSERT_TRUE(!conv_path_keeps_stream(SPAN("/v1/chat/completions/input_tokens")));
}

TEST(the_conversations_keep_the_daemon_until_the_newest_could_be_gone_from_its_host) {
        ConvMap m = {};

        ASSERT_EQ(conv_map_hold_until(&m), 0u);
        ASSERT_OK(conv_map_remember(&m, "k:a", "c1", "3090", "mainline", S(10)));
        ASSERT_OK(conv_map_remember(&m, "k:b", "c2", "3090", "mainline", S(20)));
        ASSERT_EQ(conv_map_hold_until(&m), S(20) + CONV_HOLD_USEC);
        conv_map_touch(&m, "k:a", "c1", S(30)); /* its stream ended */
        ASSERT_EQ(conv_map_hold_until(&m), S(30) + CONV_HOLD_USEC);
        /* the server drops a finished session 300-360 s after its end: the hold is past that, and the
         * memory past the hold */
        ASSERT_TRUE(CONV_HOLD_USEC >= S(360) && CONV_TTL_USEC > CONV_HOLD_USEC);
        conv_map_done(&m);
}

TEST(an_owner_makes_room_from_its_own_ids) {
        ConvMap m = {};
        char id[32];

        ASSERT_OK(conv_map_remember(&m, "k:victim", "mine", "3090", "mainline", S(1)));
        /* one owner at its bound: its own oldest makes room, never another's */
        for (unsigned i = 0; i < 10 * CONV_OWNER_MAX; i++) {
                snprintf(id, sizeof(id), "c%u", i);
                ASSERT_OK(conv_map_remember(&m, "k:flood", id, "3090", "mainline", S(2)));
        }
        ASSERT_EQ(m.n, (size_t)CONV_OWNER_MAX + 1);
        ASSERT_TRUE(conv_map_find(&m, "k:victim", "mine", S(3)));
        ASSERT_TRUE(!conv_map_find(&m, "k:flood", "c0", S(3)));
        snprintf(id, sizeof(id), "c%u", 10 * CONV_OWNER_MAX - 1);
        ASSERT_TRUE(conv_map_find(&m, "k:flood", id, S(3)));
        conv_map_done(&m);
}

TEST(the_map_is_bounded_and_an_owner_at_it_makes_room_from_its_own_first) {
        ConvMap m = {};
        char id[32], owner[32];

        ASSERT_OK(conv_map_remember(&m, "k:victim", "mine", "3090", "mainline", S(1)));
        /* the map filled by many owners, none past its own bound */
        for (unsigned i = 0; m.n < CONV_MAP_MAX; i++) {
                snprintf(owner, sizeof(owner), "ip:10.0.0.%u", i / CONV_OWNER_MAX);
                snprintf(id, sizeof(id), "c%u", i);
                ASSERT_OK(conv_map_remember(&m, owner, id, "3090", "mainline", S(2)));
        }
        /* one of them goes on: its own oldest make room, the victim's id (the oldest of all) stays */
        for (unsigned i = 0; i < 100; i++) {
                snprintf(id, sizeof(id), "more%u", i);
                ASSERT_OK(conv_map_remember(&m, "ip:10.0.0.0", id, "3090", "mainline", S(3)));
        }
        ASSERT_EQ(m.n, (size_t)CONV_MAP_MAX);
        ASSERT_TRUE(conv_map_find(&m, "k:victim", "mine", S(3)));
        ASSERT_TRUE(!conv_map_find(&m, "ip:10.0.0.0", "c0", S(3)));
        ASSERT_TRUE(conv_map_find(&m, "ip:10.0.0.1", "c256", S(3)));
        /* an owner with none of its own there: the one used longest ago makes room */
        conv_map_touch(&m, "k:victim", "mine", S(4));
        ASSERT_OK(conv_map_remember(&m, "k:new", "first", "3090", "mainline", S(5)));
        ASSERT_EQ(m.n, (size_t)CONV_MAP_MAX);
        ASSERT_TRUE(conv_map_find(&m, "k:new", "first", S(5)));
        ASSERT_TRUE(conv_map_find(&m, "k:victim", "mine", S(5)));
        ASSERT_TRUE(!conv_map_find(&m, "ip:10.0.0.0", "c100", S(5)));
        conv_map_done(&m);
}

static char *joined(const char *body) {
        _cleanup_strv_free_ char **ids = NULL;
        ASSERT_OK(conv_lookup_ids(body, strlen(body), &ids));
        return ids ? strv_join(ids, ",") : strdup("-");
}

TEST(the_ids_a_lookup_asks_for) {
        static const struct {
                const char *body, *ids;
        } cases[] = {
                {"{\"conversation_ids\":[\"c1\",\"c2\"]}", "c1,c2"},
                {"{\"conversation_ids\":[\"c2\",\"\",7,null,\"c1\",\"c2\",\"a\\nb\"]}", "c2,c1"},
                {"{\"conversation_ids\":\"c1\"}", "-"},
                {"{\"other\":[\"c1\"]}", "-"},
                {"[\"c1\"]", "-"},
                {"not json", "-"},
                {"", "-"},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_free_ char *j = joined(cases[i].body);
                ASSERT_STREQ(j, cases[i].ids);
        }
        /* at most CONV_LOOKUP_MAX entries are looked at, whatever they are: empty or repeated ones count */
        _cleanup_free_ char *big = malloc(16 * 1024);
        static const char *const fillers[] = {"\"c%d\"", "\"\"", "\"same\"", "7"};
        for (size_t f = 0; f < ELEMENTSOF(fillers); f++) {
                size_t n = (size_t)sprintf(big, "{\"conversation_ids\":[");
                for (int i = 0; i < CONV_LOOKUP_MAX; i++) {
                        if (i > 0)
                                big[n++] = ',';
                        n += (size_t)sprintf(big + n, fillers[f], i);
                }
                sprintf(big + n, ",\"past\"]}");
                _cleanup_strv_free_ char **ids = NULL;
                ASSERT_OK(conv_lookup_ids(big, strlen(big), &ids));
                ASSERT_EQ(strv_length(ids), f == 0 ? (size_t)CONV_LOOKUP_MAX : f == 2 ? 1u : 0u);
                ASSERT_TRUE(!strv_contains(ids, "past"));
        }
        /* 256 ids of the longest kind fit the body's bound */
        ASSERT_TRUE(CONV_LOOKUP_BODY_MAX >= 20 + CONV_LOOKUP_MAX * (CONV_ID_MAX + 3));
}

TEST(a_hosts_lookup_body_and_its_answer_merged) {
        char *ids[] = {"c1", "c\"2", NULL};
        const char *mine = "mg-0000000000000001-";
        _cleanup_free_ char *body = conv_lookup_body(mine, ids, NULL);
        ASSERT_STREQ(body,
                     "{\"conversation_ids\":[\"mg-0000000000000001-c1\",\"mg-0000000000000001-c\\\"2\"]}");

        _cleanup_(json_object_putp) json_object *into = json_object_new_array();
        /* the host matches "<id>" and "<id>::<model>"; another owner's sessions of the same ids bear its
         * mark, and an id without a mark is nobody's here */
        const char *answer = "[{\"conversation_id\":\"mg-0000000000000001-c1\",\"is_done\":false,"
                             "\"total_bytes\":12},"
                             "{\"conversation_id\":\"mg-0000000000000001-c1::laguna-xs\",\"is_done\":true},"
                             "{\"conversation_id\":\"mg-0000000000000002-c1\"},"
                             "{\"conversation_id\":\"mg-0000000000000002-c1::laguna-xs\"},"
                             "{\"conversation_id\":\"c1\"},{\"conversation_id\":\"c1::laguna-xs\"},"
                             "{\"conversation_id\":\"mg-0000000000000001-c10\"},"
                             "{\"conversation_id\":\"mg-0000000000000001-c9\"},7,"
                             "{\"no_id\":1}]";
        ASSERT_OK(conv_lookup_merge(into, answer, strlen(answer), mine, ids));
        ASSERT_EQ(json_object_array_length(into), 2u); /* c10 and c9 were not asked for */
        /* shown as the owner knows them */
        ASSERT_STREQ(json_object_to_json_string_ext(into, JSON_C_TO_STRING_PLAIN),
                     "[{\"conversation_id\":\"c1\",\"is_done\":false,\"total_bytes\":12},"
                     "{\"conversation_id\":\"c1::laguna-xs\",\"is_done\":true}]");
        ASSERT_EQ(conv_lookup_merge(into, "{\"error\":{}}", 12, mine, ids), -EBADMSG);
        ASSERT_EQ(conv_lookup_merge(into, "[", 1, mine, ids), -EBADMSG);
        ASSERT_EQ(json_object_array_length(into), 2u);
}

TESTS_MAIN
