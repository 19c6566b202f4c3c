/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The table of paths: each row against the classifiers it replaced, written out here as they were, over
 * every path of the table, its neighbours (one byte more or less, a slash more) and every method. */

#include <string.h>

#include "modelgated/api/path-table.h"
#include "tests.h"

static Span S_(const char *s) {
        return (Span){s, strlen(s)};
}

static bool eq(Span p, const char *s) {
        return p.n == strlen(s) && memcmp(p.p, s, p.n) == 0;
}

static bool is_or_below(Span p, const char *prefix) {
        size_t l = strlen(prefix);
        return p.n >= l && memcmp(p.p, prefix, l) == 0 && (p.n == l || p.p[l] == '/');
}

static bool get_(llhttp_method_t m) {
        return m == HTTP_GET || m == HTTP_HEAD;
}

static ApiKind old_api(Span p) {
        if (is_or_below(p, "/v1/messages"))
                return API_ANTHROPIC;
        if (is_or_below(p, "/v1/responses") || is_or_below(p, "/responses"))
                return API_RESPONSES;
        return API_OPENAI;
}

static bool old_probe(Span p, llhttp_method_t m) {
        static const char *const post[] = {"/v1/messages/count_tokens",
                                           "/v1/responses/input_tokens",
                                           "/responses/input_tokens",
                                           "/v1/chat/completions/input_tokens",
                                           "/chat/completions/input_tokens",
                                           "/tokenize",
                                           "/detokenize",
                                           "/apply-template",
                                           "/props"};
        if (get_(m))
                return eq(p, "/props") || eq(p, "/slots");
        for (size_t i = 0; i < ELEMENTSOF(post); i++)
                if (eq(p, post[i]))
                        return true;
        return false;
}

static const char *old_fallback(Span p, llhttp_method_t m) {
        static const char *const paths[] = {
                "/v1/chat/completions",      "/v1/completions", "/v1/messages",
                "/v1/messages/count_tokens", "/v1/responses",   "/v1/responses/input_tokens",
        };
        for (size_t i = 0; m == HTTP_POST && i < ELEMENTSOF(paths); i++)
                if (eq(p, paths[i]))
                        return paths[i];
        return NULL;
}

static bool old_keeps_stream(Span p) {
        static const char *const paths[] = {
                "/completion",
                "/completions",
                "/v1/completions",
                "/chat/completions",
                "/v1/chat/completions",
                "/v1/responses",
                "/responses",
                "/v1/messages",
                "/infill",
                "/v1/audio/transcriptions",
                "/audio/transcriptions",
        };
        for (size_t i = 0; i < ELEMENTSOF(paths); i++)
                if (eq(p, paths[i]))
                        return true;
        return false;
}

static PathOwn old_own(Span p, llhttp_method_t m) {
        bool g = get_(m);
        if (g && eq(p, "/"))
                return PATH_OWN_ROOT;
        if (g && eq(p, "/health"))
                return PATH_OWN_HEALTH;
        if (g && eq(p, "/metrics"))
                return PATH_OWN_METRICS;
        if (g && eq(p, "/ui"))
                return PATH_OWN_UI;
        if (g && eq(p, "/models/sse"))
                return PATH_OWN_FEED;
        if (g && eq(p, "/activity"))
                return PATH_OWN_ACTIVITY;
        if (g && eq(p, "/running"))
                return PATH_OWN_RUNNING;
        if (m == HTTP_GET && eq(p, "/unload"))
                return PATH_OWN_UNLOAD;
        if (m == HTTP_POST && eq(p, "/api/models/unload"))
                return PATH_OWN_UNLOAD_API;
        if (m == HTTP_POST && p.n > 19 && memcmp(p.p, "/api/models/unload/", 19) == 0)
                return PATH_OWN_UNLOAD_MODEL;
        if (g && (eq(p, "/models") || eq(p, "/v1/models")))
                return PATH_OWN_MODELS;
        if (eq(p, "/v1/stream") && (m == HTTP_GET || m == HTTP_DELETE))
                return PATH_OWN_STREAM;
        if (m == HTTP_POST && eq(p, "/v1/streams/lookup"))
                return PATH_OWN_STREAM_LOOKUP;
        return PATH_OWN_NONE;
}

/* the one change: /v1/messages is matched as the API kind matched it ("/v1/messagesx" is not it), and
 * /models as a path and what is below it */
static const char *old_activity(Span p) {
        if (eq(p, "/v1/chat/completions") || eq(p, "/chat/completions"))
                return "chat";
        if (eq(p, "/v1/completions") || eq(p, "/completions"))
                return "completions";
        if (is_or_below(p, "/v1/messages"))
                return "messages";
        if (is_or_below(p, "/v1/responses") || is_or_below(p, "/responses"))
                return "responses";
        return "other";
}

static void check(const char *path) {
        static const llhttp_method_t methods[] = {HTTP_GET,    HTTP_HEAD, HTTP_POST,
                                                  HTTP_DELETE, HTTP_PUT,  HTTP_OPTIONS};
        Span p = S_(path);
        const PathRoute *r = path_route_lookup(p);

        ASSERT_TRUE(r);
        ASSERT_EQ(path_route_api(r), old_api(p));
        ASSERT_EQ(r->websocket_426, eq(p, "/v1/responses") || eq(p, "/responses"));
        ASSERT_EQ(r->models_call, is_or_below(p, "/models"));
        ASSERT_STREQ(path_route_activity(r), old_activity(p));
        ASSERT_EQ(r->catalog_call, eq(p, "/models/load")     ? PATH_CATALOG_LOAD
                                   : eq(p, "/models/unload") ? PATH_CATALOG_UNLOAD
                                                             : PATH_CATALOG_NONE);
        for (size_t i = 0; i < ELEMENTSOF(methods); i++) {
                llhttp_method_t m = methods[i];
                bool g = get_(m);
                ASSERT_EQ(path_route_own(r, m), old_own(p, m));
                ASSERT_EQ(path_route_open(r, m), g && (eq(p, "/") || eq(p, "/health") || eq(p, "/metrics")));
                ASSERT_EQ(path_route_browser(r, m), g && (eq(p, "/ui") || eq(p, "/activity")));
                ASSERT_EQ(path_route_probe(r, m), old_probe(p, m));
                const char *f = path_route_fallback(r, m), *of = old_fallback(p, m);
                ASSERT_TRUE(f == of || (f && of && streq(f, of)));
                ASSERT_EQ(path_route_keeps_stream(r, m), m == HTTP_POST && old_keeps_stream(p));
        }
}

TEST(every_row_as_the_classifiers_it_replaced_said) {
        static const char *const more[] = {"",
                                           "x",
                                           "/v1/messagesx",
                                           "/v1/messages/",
                                           "/v1/messages/count_tokens/",
                                           "/v1/messages/batches",
                                           "/v1/responsesx",
                                           "/v1/responses/abc/cancel",
                                           "/responses/x",
                                           "/v1/respons",
                                           "/api/models/unload/",
                                           "/api/models/unload/b-m",
                                           "/api/models/unloadx",
                                           "/models/",
                                           "/models/x/y",
                                           "/v1/embeddings",
                                           "/v1/realtime",
                                           "//",
                                           "/healthz"};
        for (size_t i = 0; i < ELEMENTSOF(more); i++)
                check(more[i]);
}

/* every path a row names, and one byte less, one more and a slash more */
TEST(every_named_path_and_its_neighbours) {
        static const char *const named[] = {"/v1/chat/completions",
                                            "/v1/messages",
                                            "/v1/responses",
                                            "/v1/completions",
                                            "/v1/messages/count_tokens",
                                            "/v1/responses/input_tokens",
                                            "/chat/completions",
                                            "/completions",
                                            "/responses",
                                            "/completion",
                                            "/infill",
                                            "/v1/audio/transcriptions",
                                            "/audio/transcriptions",
                                            "/responses/input_tokens",
                                            "/v1/chat/completions/input_tokens",
                                            "/chat/completions/input_tokens",
                                            "/tokenize",
                                            "/detokenize",
                                            "/apply-template",
                                            "/props",
                                            "/slots",
                                            "/",
                                            "/health",
                                            "/metrics",
                                            "/ui",
                                            "/activity",
                                            "/models",
                                            "/v1/models",
                                            "/models/sse",
                                            "/running",
                                            "/unload",
                                            "/api/models/unload",
                                            "/v1/stream",
                                            "/v1/streams/lookup",
                                            "/models/load",
                                            "/models/unload"};
        for (size_t i = 0; i < ELEMENTSOF(named); i++) {
                char b[64];
                size_t n = strlen(named[i]);
                check(named[i]);
                snprintf(b, sizeof(b), "%.*s", (int)(n - 1), named[i]);
                check(b);
                snprintf(b, sizeof(b), "%sx", named[i]);
                check(b);
                snprintf(b, sizeof(b), "%s/", named[i]);
                check(b);
        }
}

TEST(the_fallback_sends_the_tables_string) {
        char path[] = "/v1/messages";
        const char *f = path_route_fallback(path_route_lookup(S_(path)), HTTP_POST);
        ASSERT_TRUE(f && f != path);
        ASSERT_STREQ(f, "/v1/messages");
}

TEST(no_path_no_row) {
        ASSERT_TRUE(path_route_lookup((Span){}) == path_route_none());
        ASSERT_EQ(path_route_own(path_route_none(), HTTP_GET), PATH_OWN_NONE);
        ASSERT_STREQ(path_route_activity(path_route_none()), "other");
}

TESTS_MAIN
