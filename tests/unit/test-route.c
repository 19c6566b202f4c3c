/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "modelgated/api/route.h"
#include "tests.h"

static char *rewrite(const char *body, int *ret) {
        Span span;
        char *model = NULL;
        *ret = json_find_model(body, strlen(body), &span, &model, NULL);
        if (*ret != MODEL_FOUND)
                return NULL;
        const char *dash = strchr(model, '-');
        _cleanup_free_ char *q = json_quote(dash ? dash + 1 : model);
        free(model);
        return span_replace((Span){body, strlen(body)}, span, q, NULL);
}

TEST(model_rewrite_keeps_every_other_byte) {
        static const struct {
                const char *in, *out;
        } cases[] = {
                {"{\"model\":\"h-k\"}", "{\"model\":\"k\"}"},
                {" {\n \"a\" : [1, {\"model\":\"x\"}] , \"model\" : \"h-k\\u00e9\" , \"z\":null} ",
                 " {\n \"a\" : [1, {\"model\":\"x\"}] , \"model\" : \"k\xc3\xa9\" , \"z\":null} "},
                {"{\"mo\\u0064el\":\"h-q\\\"uote\",\"n\":-1.5e+3}",
                 "{\"mo\\u0064el\":\"q\\\"uote\",\"n\":-1.5e+3}"},
                {"{\"nested\":{\"model\":\"no\"},\"model\":\"h-yes\"}",
                 "{\"nested\":{\"model\":\"no\"},\"model\":\"yes\"}"},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                int r;
                _cleanup_free_ char *o = rewrite(cases[i].in, &r);
                ASSERT_OK(r);
                ASSERT_STREQ(o, cases[i].out);
        }
}

TEST(model_errors) {
        static const struct {
                const char *in;
                int error;
        } cases[] = {
                {"", MODEL_NOT_JSON},
                {"[]", MODEL_NOT_JSON},
                {"{\"model\":\"a\"", MODEL_NOT_JSON},
                {"{\"model\":\"a\"} x", MODEL_NOT_JSON},
                {"{\"model\":'a'}", MODEL_NOT_JSON},
                {"{\"a\":01}", MODEL_NOT_JSON},
                {"{\"a\":\"\x01\"}", MODEL_NOT_JSON},
                {"{\"a\":tru}", MODEL_NOT_JSON},
                {"{\"a\":1}", MODEL_ABSENT},
                {"{\"model\":1}", MODEL_NOT_STRING},
                {"{\"model\":null}", MODEL_NOT_STRING},
                {"{\"model\":\"a\\u0000b\"}", MODEL_NOT_STRING},
                {"{\"model\":\"a\",\"model\":\"b\"}", MODEL_TWICE},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                int r;
                _cleanup_free_ char *o = rewrite(cases[i].in, &r);
                if (r != cases[i].error)
                        FAIL("'%s': %d != %d", cases[i].in, r, cases[i].error);
        }
        /* deep nesting is bounded, not a stack overflow */
        char deep[2000];
        memset(deep, '[', sizeof(deep));
        deep[0] = '{';
        int r;
        deep[sizeof(deep) - 1] = 0;
        free(rewrite(deep, &r));
        ASSERT_EQ(r, MODEL_NOT_JSON);
}

#define SPAN_OF(s) ((Span){(s), sizeof(s) - 1})

/* A string is scanned eight bytes at a time past its first eight: a quote, a backslash or a control
 * character is found wherever it is, in the first bytes, across the eight-byte steps and in the tail */
TEST(every_byte_of_a_long_string_is_checked) {
        char body[160], text[64];

        for (size_t len = 0; len < 40; len++)
                for (size_t at = 0; at < len; at++)
                        for (int kind = 0; kind < 5; kind++) {
                                Span span;
                                _cleanup_free_ char *model = NULL;
                                static const char *const what[] = {"\x01", "\x1f", "\\n", "\\\"",
                                                                   "\xc3\xa9"};
                                memset(text, 'a', len);
                                text[len] = 0;
                                snprintf(body, sizeof(body), "{\"model\":\"h-%.*s%s%s\",\"x\":\"%.*s%s%s\"}",
                                         (int)at, text, what[kind], text + at, (int)at, text, what[kind],
                                         text + at);
                                int r = json_find_model(body, strlen(body), &span, &model, NULL);
                                if (kind < 2) {
                                        /* a raw control character: not JSON */
                                        ASSERT_EQ(r, MODEL_NOT_JSON);
                                        continue;
                                }
                                ASSERT_OK(r);
                                ASSERT_EQ(strlen(model), 2 + len + (kind == 4 ? 2 : 1));
                                ASSERT_EQ(model[2 + at], kind == 2 ? '\n' : kind == 3 ? '"' : '\xc3');
                        }
}

TEST(query_model) {
        Span s;
        char *m = NULL;
        const char *url = "/props?autoload=false&model=3090-org%2Fmodel%3AQ4&x=1#frag";
        ASSERT_EQ(query_find_model((Span){url, strlen(url)}, &s, &m), MODEL_FOUND);
        ASSERT_STREQ(m, "3090-org/model:Q4");
        free(m);
        _cleanup_free_ char *e = query_escape("org/model:Q4");
        ASSERT_STREQ(e, "org%2Fmodel%3AQ4");
        _cleanup_free_ char *o = span_replace((Span){url, strlen(url)}, s, e, NULL);
        ASSERT_STREQ(o, "/props?autoload=false&model=org%2Fmodel%3AQ4&x=1#frag");
        ASSERT_EQ(query_find_model((Span){"/slots", 6}, &s, &m), MODEL_ABSENT);
        ASSERT_EQ(query_find_model((Span){"/s?model=a&model=b", 18}, &s, &m), MODEL_TWICE);
        ASSERT_EQ(query_find_model((Span){"/s?model=a%2", 12}, &s, &m), MODEL_BAD_ESCAPE);
        ASSERT_EQ(query_find_model((Span){"/s?model=a%zz", 13}, &s, &m), MODEL_BAD_ESCAPE);
        /* names compare after %-decoding, as the host reads them */
        ASSERT_EQ(query_find_model(SPAN_OF("/p?mod%65l=a&model=b"), &s, &m), MODEL_TWICE);
        ASSERT_EQ(query_find_model(SPAN_OF("/p?%6dodel=a&model=b"), &s, &m), MODEL_TWICE);
        ASSERT_EQ(query_find_model(SPAN_OF("/p?x=1&mod%65l=3090-a"), &s, &m), MODEL_FOUND);
        ASSERT_STREQ(m, "3090-a");
        ASSERT_TRUE(s.n == 6 && memcmp(s.p, "3090-a", 6) == 0);
        free(m);
}

TEST(longest_host_prefix) {
        Config c;
        const char *text = "[Host]\nName=gpu\nURL=http://a:1\n[Host]\nName=gpu.big\nURL=http://b:1\n"
                           "[Engine]\nHost=gpu\nName=e1\nUnit=e1.service\nModels=big-*\n";
        const char *key;
        config_init(&c);
        ASSERT_OK(config_parse_text(&c, "t", text, strlen(text)));
        ASSERT_STREQ(config_host_of_model(&c, "gpu.big-laguna", &key)->name, "gpu.big");
        ASSERT_STREQ(key, "laguna");
        ASSERT_STREQ(config_host_of_model(&c, "gpu-big-laguna", &key)->name, "gpu");
        ASSERT_STREQ(key, "big-laguna");
        ASSERT_TRUE(config_host_of_model(&c, "gpu-", &key) == NULL);
        ASSERT_TRUE(config_host_of_model(&c, "gpux-a", &key) == NULL);
        ASSERT_TRUE(config_host_of_model(&c, "laguna", &key) == NULL);
        ASSERT_STREQ(config_engine_of_key(&c, "gpu", "big-laguna")->name, "e1");
        ASSERT_TRUE(config_engine_of_key(&c, "gpu", "small") == NULL);
        config_done(&c);
}

TEST(stream_flag) {
        static const struct {
                const char *in;
                bool stream;
        } cases[] = {
                {"{\"model\":\"h-k\",\"stream\":true}", true},
                {"{\"stream\" :  true , \"model\":\"h-k\"}", true},
                {"{\"model\":\"h-k\",\"stream\":false}", false},
                {"{\"model\":\"h-k\"}", false},
                {"{\"model\":\"h-k\",\"o\":{\"stream\":true}}", false},          /* not top-level */
                {"{\"model\":\"h-k\",\"stream\":\"true\"}", false},              /* a string is not true */
                {"{\"stream\":true,\"model\":\"h-k\",\"stream\":false}", false}, /* the last wins */
                {"{\"model\":\"h-k\",\"str\\u0065am\":true}", true}, /* an escape spells it too */
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                Span span;
                char *model = NULL;
                bool stream = !cases[i].stream;
                ASSERT_EQ(json_find_model(cases[i].in, strlen(cases[i].in), &span, &model, &stream),
                          MODEL_FOUND);
                ASSERT_EQ(stream, cases[i].stream);
                free(model);
        }
        bool stream = false;
        char *model = NULL;
        Span span;
        ASSERT_EQ(json_find_model("{\"stream\":truex}", 15, &span, &model, &stream), MODEL_NOT_JSON);
}

/* rule:usage-charge: the most tokens a request lets the engine generate, read with its model */
TEST(request_limits) {
        static const struct {
                const char *in;
                bool limited;
                int64_t max_out;
        } cases[] = {
                {"{\"model\":\"h-k\"}", false, 0},
                {"{\"model\":\"h-k\",\"n_predict\":64}", true, 64},
                {"{\"max_tokens\":8,\"model\":\"h-k\"}", true, 8},
                {"{\"model\":\"h-k\",\"max_completion_tokens\":0}", true, 0},
                {"{\"model\":\"h-k\",\"max_output_tokens\":100,\"max_tokens\":5}", true,
                 100},                                                               /* the largest */
                {"{\"model\":\"h-k\",\"max_tokens\":5,\"n_predict\":-1}", false, 0}, /* llama.cpp's none */
                {"{\"model\":\"h-k\",\"max_tokens\":5.5}", false, 0},
                {"{\"model\":\"h-k\",\"max_tokens\":\"5\"}", false, 0},
                {"{\"model\":\"h-k\",\"max_tokens\":null}", false, 0},
                {"{\"model\":\"h-k\",\"max_tokens\":99999999999999999999}", false, 0},
                {"{\"model\":\"h-k\",\"\\u006e_predict\":-1,\"max_tokens\":5}", false, 0}, /* escaped */
                {"{\"model\":\"h-k\",\"o\":{\"max_tokens\":5}}", false, 0}, /* not top-level */
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                RequestAsk ask = {};
                Span span;
                char *model = NULL;
                ASSERT_EQ(json_read_request(cases[i].in, strlen(cases[i].in), &span, &model, &ask),
                          MODEL_FOUND);
                ASSERT_EQ(ask.bytes, strlen(cases[i].in));
                ASSERT_EQ(ask.limited, cases[i].limited);
                if (ask.limited)
                        ASSERT_EQ(ask.max_out, cases[i].max_out);
                free(model);
        }
}

/* rule:responses-api: a Responses API body has "model" and "stream" at the top level as well; the ones in
 * its input, instructions and tools' schemas are not the request's */
TEST(responses_body) {
        static const char body[] =
                "{\"model\":\"h-k\",\"instructions\":\"say \\\"model\\\":\\\"x\\\"\",\"input\":[{\"type\":"
                "\"message\",\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"hi\"}]}],"
                "\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"parameters\":{\"type\":\"object\","
                "\"properties\":{\"model\":{\"type\":\"string\"},\"stream\":{\"type\":\"boolean\"}}}}],"
                "\"tool_choice\":\"auto\",\"parallel_tool_calls\":false,\"reasoning\":null,\"store\":false,"
                "\"stream\":true,\"include\":[],\"prompt_cache_key\":\"c\"}";
        Span span;
        char *model = NULL;
        bool stream = false;
        int r;

        ASSERT_EQ(json_find_model(body, strlen(body), &span, &model, &stream), MODEL_FOUND);
        ASSERT_STREQ(model, "h-k");
        ASSERT_TRUE(stream);
        free(model);
        _cleanup_free_ char *out = rewrite(body, &r);
        ASSERT_TRUE(out && startswith(out, "{\"model\":\"k\",\"instructions\":"));
        ASSERT_STREQ(out + 13, body + 15);
}

#define SPAN(s) ((Span){(s), sizeof(s) - 1})

TEST(query_flags) {
        ASSERT_TRUE(query_flag(SPAN("/health?strict=1"), "strict"));
        ASSERT_TRUE(query_flag(SPAN("/health?x=2&strict"), "strict"));
        ASSERT_TRUE(query_flag(SPAN("/health?strict=true&x"), "strict"));
        ASSERT_TRUE(!query_flag(SPAN("/health?strict=0"), "strict"));
        ASSERT_TRUE(!query_flag(SPAN("/health?strictly=1"), "strict"));
        ASSERT_TRUE(!query_flag(SPAN("/health?nostrict=1"), "strict"));
        ASSERT_TRUE(!query_flag(SPAN("/health"), "strict"));
        ASSERT_TRUE(!query_flag(SPAN("/health?"), "strict"));
}

TESTS_MAIN
