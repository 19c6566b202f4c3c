/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* rule:swap-running: GET /running in llama-swap's shape */
#include <json-c/json.h>
#include <string.h>

#include "modelgated/sched/running.h"
#include "shared/macro.h"
#include "tests.h"

TEST(nothing_running_is_an_empty_list) {
        _cleanup_free_ char *body = NULL;
        size_t n = 0;

        ASSERT_EQ(running_render(NULL, 0, &body, &n), 0);
        ASSERT_STREQ(body, "{\"running\":[]}");
        ASSERT_EQ(n, strlen(body));
}

TEST(models_are_host_prefixed_in_llama_swap_keys) {
        const RunningModel m[] = {
                {"3090", "laguna-xs", "ready", "main", "llama-main.service", "http://192.0.2.20:8080/"},
                {"a9", "qwen3-8b/Q4", "ready", "fork", "llama-fork.service", "http://192.0.2.21:8081/"},
        };
        _cleanup_free_ char *body = NULL;
        size_t n = 0;

        ASSERT_EQ(running_render(m, ELEMENTSOF(m), &body, &n), 0);
        /* the first keys are llama-swap's, in its order; a '/' is not escaped */
        ASSERT_TRUE(strncmp(body, "{\"running\":[{\"model\":\"3090-laguna-xs\",\"state\":\"ready\",", 52) ==
                    0);
        json_object *o = json_tokener_parse(body);
        ASSERT_TRUE(o);
        json_object *list = json_object_object_get(o, "running");
        ASSERT_EQ(json_object_array_length(list), (size_t)2);
        json_object *e = json_object_array_get_idx(list, 1);
        ASSERT_STREQ(json_object_get_string(json_object_object_get(e, "model")), "a9-qwen3-8b/Q4");
        ASSERT_STREQ(json_object_get_string(json_object_object_get(e, "state")), "ready");
        ASSERT_STREQ(json_object_get_string(json_object_object_get(e, "proxy")), "http://192.0.2.21:8081/");
        ASSERT_STREQ(json_object_get_string(json_object_object_get(e, "host")), "a9");
        ASSERT_STREQ(json_object_get_string(json_object_object_get(e, "engine")), "fork");
        ASSERT_STREQ(json_object_get_string(json_object_object_get(e, "unit")), "llama-fork.service");
        ASSERT_TRUE(strstr(body, "qwen3-8b/Q4"));
        json_object_put(o);
}

TEST(names_are_escaped) {
        const RunningModel m[] = {{"h", "a\"b\\c", "ready", "e", "u.service", "http://x/"}};
        _cleanup_free_ char *body = NULL;
        size_t n = 0;

        ASSERT_EQ(running_render(m, 1, &body, &n), 0);
        json_object *o = json_tokener_parse(body);
        ASSERT_TRUE(o);
        json_object *e = json_object_array_get_idx(json_object_object_get(o, "running"), 0);
        ASSERT_STREQ(json_object_get_string(json_object_object_get(e, "model")), "h-a\"b\\c");
        json_object_put(o);
}

TESTS_MAIN
