/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* rule:attribution-line: only Claude Code's block, only in its shape, only as the first element of the
 * top-level "system" array */
#include "modelgated/api/attribution.h"
#include "tests.h"

#define LINE                                                                                                \
        "{\"type\":\"text\",\"text\":\"x-anthropic-billing-header: cc_version=2.1.197.0df; "                \
        "cc_entrypoint=sdk-cli;\"}"

/* the body with the block's bytes cut, or NULL when there is no block */
static char *cut(const char *body) {
        Span s = attribution_block(body, strlen(body));
        if (!s.p)
                return NULL;
        ASSERT_TRUE(s.p >= body && s.p + s.n <= body + strlen(body));
        char *o = malloc(strlen(body) + 1);
        size_t pre = (size_t)(s.p - body);
        memcpy(o, body, pre);
        strcpy(o + pre, s.p + s.n);
        return o;
}

TEST(first_element_with_comma) {
        _cleanup_free_ char *o =
                cut("{\"model\":\"m\",\"system\":[" LINE ",{\"type\":\"text\",\"text\":\"You\"}],\"x\":1}");
        ASSERT_STREQ(o, "{\"model\":\"m\",\"system\":[{\"type\":\"text\",\"text\":\"You\"}],\"x\":1}");
        _cleanup_free_ char *w = cut("{ \"system\" : [ " LINE " ,\n {\"type\":\"text\",\"text\":\"You\"}]}");
        ASSERT_STREQ(w, "{ \"system\" : [ {\"type\":\"text\",\"text\":\"You\"}]}");
}

TEST(only_element) {
        _cleanup_free_ char *o = cut("{\"system\":[" LINE "],\"model\":\"m\"}");
        ASSERT_STREQ(o, "{\"system\":[],\"model\":\"m\"}");
}

TEST(left_alone) {
        /* not first */
        ASSERT_TRUE(!cut("{\"system\":[{\"type\":\"text\",\"text\":\"a\"}," LINE "]}"));
        /* not the top level's */
        ASSERT_TRUE(!cut("{\"tools\":[{\"system\":[" LINE ",1]}],\"system\":\"s\"}"));
        ASSERT_TRUE(!cut("{\"messages\":{\"system\":[" LINE ",1]}}"));
        /* a value "system", not a member's name */
        ASSERT_TRUE(!cut("{\"a\":\"system\",\"b\":[" LINE ",1]}"));
        /* quoted in a string */
        ASSERT_TRUE(!cut("{\"messages\":\"\\\"system\\\":["
                         "x-anthropic-billing-header: a;"
                         "\",\"system\":[]}"));
        /* another shape: more members, escapes, other characters */
        ASSERT_TRUE(!cut("{\"system\":[{\"type\":\"text\",\"text\":\"x-anthropic-billing-header: "
                         "a;\",\"cache_control\":"
                         "{}},1]}"));
        ASSERT_TRUE(!cut(
                "{\"system\":[{\"type\":\"text\",\"text\":\"x-anthropic-billing-header: a\\nb;\"},1]}"));
        ASSERT_TRUE(
                !cut("{\"system\":[{\"type\":\"text\",\"text\":\"x-anthropic-billing-header: <a>\"},1]}"));
        ASSERT_TRUE(!cut("{\"system\":[{\"text\":\"x-anthropic-billing-header: a\",\"type\":\"text\"},1]}"));
        /* a string system prompt, no system, not JSON, cut short */
        ASSERT_TRUE(!cut("{\"system\":\"x-anthropic-billing-header: a;\"}"));
        ASSERT_TRUE(!cut("{\"model\":\"x-anthropic-billing-header: a;\"}"));
        ASSERT_TRUE(!cut("x-anthropic-billing-header: {\"system\":[" LINE ",1]}"));
        ASSERT_TRUE(!cut("{\"system\":[{\"type\":\"text\",\"text\":\"x-anthropic-billing-header: a;"));
        ASSERT_TRUE(!cut("{\"system\":[" LINE));
}

TEST(every_prefix_is_safe) {
        const char *body = "{\"model\":\"m\",\"system\":[" LINE ",{\"type\":\"text\",\"text\":\"You\"}]}";
        for (size_t n = 0; n < strlen(body); n++) {
                Span s = attribution_block(body, n);
                ASSERT_TRUE(!s.p || (s.p >= body && s.p + s.n <= body + n));
        }
}

TESTS_MAIN
