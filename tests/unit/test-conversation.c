/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* rule:resumable-streams: the conversation map's memory and expiry, and the lookup bodies */
#include <string.h>

#include "modelgated/rules/conversation.h"
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

TEST(a_conversation_is_found_with_its_host_and_owner_until_it_expires) {
        ConvMap m = {};
        const ConvEntry *e;

        ASSERT_TRUE(!conv_map_find(&m, "c1", 0));
        ASSERT_OK(conv_map_remember(&m, "c1", "3090", "mainline", "free", S(10)));
        e = conv_map_find(&m, "c1", S(11));
        ASSERT_TRUE(e);
        ASSERT_STREQ(e->host, "3090");
        ASSERT_STREQ(e->engine, "mainline");
        ASSERT_TRUE(conv_owned_by(e, "free"));
        ASSERT_TRUE(!conv_owned_by(e, "pro"));
        ASSERT_TRUE(!conv_owned_by(e, NULL)); /* a client without a key is not the tier */
        /* started again elsewhere: the newer wins, as the engine replaces a session of the same id */
        ASSERT_OK(conv_map_remember(&m, "c1", "a9", "fork", "free", S(20)));
        ASSERT_EQ(m.n, 1u);
        ASSERT_STREQ(conv_map_find(&m, "c1", S(20))->host, "a9");
        /* another owner never takes it over, a client without a key included; its entry stays */
        ASSERT_EQ(conv_map_remember(&m, "c1", "3090", "mainline", "pro", S(20)), CONV_TAKEN);
        ASSERT_EQ(conv_map_remember(&m, "c1", "3090", "mainline", NULL, S(20)), CONV_TAKEN);
        ASSERT_STREQ(conv_map_find(&m, "c1", S(20))->host, "a9");
        ASSERT_TRUE(conv_owned_by(conv_map_find(&m, "c1", S(20)), "free"));
        /* its time runs from its last use */
        conv_map_touch(&m, "c1", S(20) + CONV_TTL_USEC - S(1));
        ASSERT_TRUE(conv_map_find(&m, "c1", S(20) + CONV_TTL_USEC + S(1)));
        ASSERT_TRUE(!conv_map_find(&m, "c1", S(20) + 2 * CONV_TTL_USEC));
        ASSERT_EQ(m.n, 0u); /* forgotten on the way */
        /* anonymous: owned by "" and NULL alike */
        ASSERT_OK(conv_map_remember(&m, "c2", "3090", "", NULL, 0));
        ASSERT_TRUE(conv_owned_by(conv_map_find(&m, "c2", 0), NULL));
        ASSERT_TRUE(conv_owned_by(conv_map_find(&m, "c2", 0), ""));
        conv_map_done(&m);
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
        ASSERT_OK(conv_map_remember(&m, "c1", "3090", "mainline", "", S(10)));
        ASSERT_OK(conv_map_remember(&m, "c2", "3090", "mainline", "", S(20)));
        ASSERT_EQ(conv_map_hold_until(&m), S(20) + CONV_HOLD_USEC);
        conv_map_touch(&m, "c1", S(30)); /* its stream ended */
        ASSERT_EQ(conv_map_hold_until(&m), S(30) + CONV_HOLD_USEC);
        /* the server drops a finished session 300-360 s after its end: the hold is past that, and the
         * memory past the hold */
        ASSERT_TRUE(CONV_HOLD_USEC >= S(360) && CONV_TTL_USEC > CONV_HOLD_USEC);
        conv_map_done(&m);
}

TEST(the_map_is_bounded_and_the_one_used_longest_ago_makes_room) {
        ConvMap m = {};
        char id[32];

        for (unsigned i = 0; i < CONV_MAP_MAX; i++) {
                snprintf(id, sizeof(id), "c%u", i);
                ASSERT_OK(conv_map_remember(&m, id, "3090", "mainline", "", S(1)));
        }
        conv_map_touch(&m, "c0", S(2)); /* used again: c1 is the oldest now */
        ASSERT_OK(conv_map_remember(&m, "new", "3090", "mainline", "", S(3)));
        ASSERT_EQ(m.n, (size_t)CONV_MAP_MAX);
        ASSERT_TRUE(conv_map_find(&m, "c0", S(3)));
        ASSERT_TRUE(!conv_map_find(&m, "c1", S(3)));
        ASSERT_TRUE(conv_map_find(&m, "c2", S(3)));
        ASSERT_TRUE(conv_map_find(&m, "new", S(3)));
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
                {"{\"conversation_ids\":[\"c2\",\"\",7,null,\"c1\",\"c2\"]}", "c2,c1"},
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
        /* at most CONV_LOOKUP_MAX */
        _cleanup_free_ char *big = malloc(16 * 1024);
        size_t n = (size_t)sprintf(big, "{\"conversation_ids\":[");
        for (int i = 0; i < CONV_LOOKUP_MAX + 10; i++)
                n += (size_t)sprintf(big + n, "%s\"c%d\"", i ? "," : "", i);
        sprintf(big + n, "]}");
        _cleanup_strv_free_ char **ids = NULL;
        ASSERT_OK(conv_lookup_ids(big, strlen(big), &ids));
        ASSERT_EQ(strv_length(ids), (size_t)CONV_LOOKUP_MAX);
}

TEST(a_hosts_lookup_body_and_its_answer_merged) {
        char *ids[] = {"c1", "c\"2", NULL};
        _cleanup_free_ char *body = conv_lookup_body(ids, NULL);
        ASSERT_STREQ(body, "{\"conversation_ids\":[\"c1\",\"c\\\"2\"]}");

        _cleanup_(json_object_putp) json_object *into = json_object_new_array();
        const char *answer = "[{\"conversation_id\":\"c1\",\"is_done\":false,\"total_bytes\":12},"
                             "{\"conversation_id\":\"c1::laguna-xs\",\"is_done\":true},"
                             "{\"conversation_id\":\"c10\"},{\"conversation_id\":\"c9\"},7,"
                             "{\"no_id\":1}]";
        ASSERT_OK(conv_lookup_merge(into, answer, strlen(answer), ids));
        ASSERT_EQ(json_object_array_length(into), 2u); /* c10 and c9 were not asked for */
        ASSERT_STREQ(json_object_to_json_string_ext(into, JSON_C_TO_STRING_PLAIN),
                     "[{\"conversation_id\":\"c1\",\"is_done\":false,\"total_bytes\":12},"
                     "{\"conversation_id\":\"c1::laguna-xs\",\"is_done\":true}]");
        ASSERT_EQ(conv_lookup_merge(into, "{\"error\":{}}", 12, ids), -EBADMSG);
        ASSERT_EQ(conv_lookup_merge(into, "[", 1, ids), -EBADMSG);
        ASSERT_EQ(json_object_array_length(into), 2u);
}

TESTS_MAIN
