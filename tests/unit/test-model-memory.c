/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What a listing remembers of each model and the context window it gives (model-memory.h,
 * rule:model-context, rule:remembered-context), on the router's own entries: a loaded model's (meta, args
 * with its own port), the same model unloaded (no meta, port 0), and one that never ran. */

#include <string.h>

#include "modelgated/api/json-util.h"
#include "modelgated/sched/model-memory.h"
#include "tests.h"

#define LOADED                                                                                              \
        "{\"id\":\"tiny\",\"status\":{\"value\":\"loaded\",\"args\":[\"llama-server\",\"--port\","          \
        "\"57993\","                                                                                        \
        "\"--ctx-size\",\"512\"]},\"meta\":{\"n_ctx\":512,\"n_ctx_train\":4096}}"
#define UNLOADED                                                                                            \
        "{\"id\":\"tiny\",\"status\":{\"value\":\"unloaded\",\"args\":[\"llama-server\",\"--port\",\"0\","  \
        "\"--ctx-size\",\"512\"]}}"

static json_object *parse(const char *s) {
        json_object *o = json_tokener_parse(s);
        ASSERT_TRUE(o != NULL);
        return o;
}

static int64_t get_int(json_object *o, const char *a, const char *b) {
        json_object *x;
        int64_t n = -1;
        ASSERT_TRUE(json_object_object_get_ex(o, a, &x));
        if (b)
                ASSERT_TRUE(json_get_int(x, b, &n));
        else
                n = json_object_get_int64(x);
        return n;
}

static int64_t args_ctx(const char *s) {
        _cleanup_(json_object_putp) json_object *a = parse(s);
        return model_args_n_ctx(a);
}

TEST(the_window_of_a_command_line) {
        ASSERT_EQ(args_ctx("[\"s\",\"--ctx-size\",\"512\"]"), 512);
        ASSERT_EQ(args_ctx("[\"s\",\"-c\",\"8192\",\"-np\",\"1\"]"), 8192);
        /* the router's default: slots share a unified cache */
        ASSERT_EQ(args_ctx("[\"s\",\"-c\",\"8192\",\"-np\",\"4\",\"-kvu\"]"), 8192);
        /* each slot gets its share: not said */
        ASSERT_EQ(args_ctx("[\"s\",\"-c\",\"8192\",\"--parallel\",\"4\"]"), 0);
        ASSERT_EQ(args_ctx("[\"s\",\"-c\",\"8192\",\"--kv-unified-per-slot\",\"1024\"]"), 0);
        /* 0: the model's own, unknown here; no -c; junk */
        ASSERT_EQ(args_ctx("[\"s\",\"-c\",\"0\"]"), 0);
        ASSERT_EQ(args_ctx("[\"s\"]"), 0);
        ASSERT_EQ(args_ctx("[\"s\",\"-c\",\"12x\"]"), 0);
        ASSERT_EQ(args_ctx("[\"s\",\"-c\"]"), 0);
        ASSERT_EQ(args_ctx("[\"s\",7]"), 0);
        ASSERT_EQ(args_ctx("{}"), 0);
}

TEST(command_lines_are_the_same_but_for_the_port) {
        _cleanup_(json_object_putp) json_object *a = parse("[\"s\",\"--port\",\"0\",\"-c\",\"512\"]");
        _cleanup_(json_object_putp) json_object *b = parse("[\"s\",\"--port\",\"41000\",\"-c\",\"512\"]");
        _cleanup_(json_object_putp) json_object *c = parse("[\"s\",\"--port\",\"0\",\"-c\",\"1024\"]");
        ASSERT_TRUE(model_args_same(a, b));
        ASSERT_TRUE(!model_args_same(a, c));
        ASSERT_TRUE(!model_args_same(a, NULL));
}

TEST(a_loaded_entry_keeps_its_own_window_and_gets_the_other_names) {
        _cleanup_(json_object_putp) json_object *e = parse(LOADED);
        _cleanup_(json_object_putp) json_object *r = parse("{\"meta\":{\"n_ctx\":99}}");
        ASSERT_EQ(model_context_apply(e, r), 0); /* the entry's own wins */
        ASSERT_EQ(get_int(e, "meta", "n_ctx"), 512);
        ASSERT_EQ(get_int(e, "context_length", NULL), 512);
        ASSERT_EQ(get_int(e, "max_model_len", NULL), 512);
}

TEST(remembered_meta_fills_an_unloaded_entry_while_its_args_are_the_same) {
        _cleanup_(model_memory_freep) ModelMemory *m = model_memory_new();
        _cleanup_(json_object_putp) json_object *loaded = parse(LOADED), *unloaded = parse(UNLOADED);
        _cleanup_(json_object_putp) json_object *other =
                parse("{\"id\":\"tiny\",\"status\":{\"args\":[\"llama-server\",\"--port\",\"0\",\"-c\","
                      "\"2048\"]}}");
        char seen[32];

        ASSERT_EQ(model_memory_learn(m, "3090", "mainline", loaded, 1700000000 * USEC_PER_SEC), 1);
        ASSERT_EQ(model_memory_learn(m, "3090", "mainline", loaded, 1700000001 * USEC_PER_SEC), 0);
        /* unloaded, the same command line: what it said while it ran holds, nothing to write */
        ASSERT_EQ(model_memory_learn(m, "3090", "mainline", unloaded, 1700000002 * USEC_PER_SEC), 0);
        json_object *rec = model_memory_get(m, "3090", "tiny");
        ASSERT_TRUE(rec != NULL);
        ASSERT_EQ(get_int(rec, "meta", "n_ctx_train"), 4096);
        ASSERT_TRUE(model_record_seen(rec, seen));
        ASSERT_STREQ(seen, "2023-11-14T22:13:22Z");
        ASSERT_EQ(model_context_apply(unloaded, rec), 1);
        ASSERT_EQ(get_int(unloaded, "meta", "n_ctx_train"), 4096);
        ASSERT_EQ(get_int(unloaded, "context_length", NULL), 512);
        /* run another way since: the remembered meta is not its, its own args say the window */
        ASSERT_EQ(model_context_apply(other, rec), 0);
        ASSERT_EQ(get_int(other, "meta", "n_ctx"), 2048);
        ASSERT_TRUE(!json_object_object_get_ex(json_object_object_get(other, "meta"), "n_ctx_train", NULL));
        /* and learning it forgets the meta of the old command line */
        _cleanup_(json_object_putp) json_object *fresh =
                parse("{\"id\":\"tiny\",\"status\":{\"args\":[\"llama-server\",\"--port\",\"0\",\"-c\","
                      "\"2048\"]}}");
        ASSERT_EQ(model_memory_learn(m, "3090", "mainline", fresh, 1700000003 * USEC_PER_SEC), 1);
        ASSERT_TRUE(!json_object_object_get_ex(model_memory_get(m, "3090", "tiny"), "meta", NULL));
}

TEST(an_entry_made_from_a_record_takes_its_args_and_meta) {
        _cleanup_(model_memory_freep) ModelMemory *m = model_memory_new();
        _cleanup_(json_object_putp) json_object *loaded = parse(LOADED);
        _cleanup_(json_object_putp) json_object *e =
                parse("{\"id\":\"3090-tiny\",\"status\":{\"value\":\"unloaded\"}}");
        _cleanup_(json_object_putp) json_object *bare =
                parse("{\"id\":\"3090-x\",\"status\":{\"value\":\"unloaded\"}}");

        ASSERT_EQ(model_memory_learn(m, "3090", "mainline", loaded, 1), 1);
        ASSERT_EQ(model_context_apply(e, model_memory_get(m, "3090", "tiny")), 1);
        ASSERT_EQ(json_object_array_length(
                          json_object_object_get(json_object_object_get(e, "status"), "args")),
                  5);
        ASSERT_EQ(get_int(e, "meta", "n_ctx"), 512);
        /* nothing known: no window at all, not a guess */
        ASSERT_EQ(model_context_apply(bare, NULL), 0);
        ASSERT_TRUE(!json_object_object_get_ex(bare, "meta", NULL) &&
                    !json_object_object_get_ex(bare, "context_length", NULL));
}

TEST(the_memory_survives_its_text_and_refuses_what_is_not_one) {
        _cleanup_(model_memory_freep) ModelMemory *m = model_memory_new(), *m2 = model_memory_new();
        _cleanup_(json_object_putp) json_object *loaded = parse(LOADED);
        _cleanup_free_ char *text = NULL, *again = NULL;

        ASSERT_EQ(model_memory_learn(m, "3090", "mainline", loaded, 5 * USEC_PER_SEC), 1);
        text = model_memory_format(m);
        ASSERT_TRUE(text != NULL);
        ASSERT_OK(model_memory_parse(m2, text, strlen(text)));
        again = model_memory_format(m2);
        ASSERT_STREQ(text, again);
        ASSERT_EQ(get_int(model_memory_get(m2, "3090", "tiny"), "meta", "n_ctx"), 512);
        ASSERT_EQ(model_memory_parse(m2, "{not json", 9), -EBADMSG);
        ASSERT_EQ(model_memory_parse(m2, "{\"version\":2,\"hosts\":{}}", 24), -EBADMSG);
        ASSERT_EQ(model_memory_parse(m2, "[]", 2), -EBADMSG);
        /* a record not well formed loses the parts that are not */
        const char *odd =
                "{\"version\":1,\"hosts\":{\"h\":{\"k\":{\"engine\":\"e\",\"meta\":{\"n_ctx\":\"x\"},"
                "\"args\":[1]},\"j\":7}}}";
        ASSERT_OK(model_memory_parse(m2, odd, strlen(odd)));
        json_object *r = model_memory_get(m2, "h", "k");
        ASSERT_TRUE(r && !json_object_object_get_ex(r, "meta", NULL) &&
                    !json_object_object_get_ex(r, "args", NULL));
        ASSERT_NULL(model_memory_get(m2, "h", "j"));
        ASSERT_NULL(model_memory_get(m2, "3090", "tiny"));
}

TEST(a_host_keeps_at_most_its_bound_the_oldest_going_first) {
        _cleanup_(model_memory_freep) ModelMemory *m = model_memory_new();
        char buf[128];

        for (int i = 0; i <= MODEL_MEMORY_KEYS_MAX; i++) {
                snprintf(buf, sizeof(buf), "{\"id\":\"m%d\",\"status\":{\"args\":[\"-c\",\"%d\"]}}", i,
                         i + 1);
                _cleanup_(json_object_putp) json_object *e = parse(buf);
                ASSERT_EQ(model_memory_learn(m, "h", "e", e, (usec_t)(i + 1) * USEC_PER_SEC), 1);
        }
        ASSERT_NULL(model_memory_get(m, "h", "m0"));
        ASSERT_TRUE(model_memory_get(m, "h", "m1") != NULL);
        ASSERT_TRUE(model_memory_get(m, "h", "m2048") != NULL);
        /* a read that brings the same list again: the time only, and no new generation */
        uint64_t g = model_memory_generation(m);
        ASSERT_TRUE(model_memory_touch(m, "h", "m1", 99999 * USEC_PER_SEC));
        ASSERT_TRUE(!model_memory_touch(m, "h", "m0", 1));
        ASSERT_EQ(model_memory_generation(m), g);
}

TESTS_MAIN
