/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The pure part of the catalog: how a host's /models/sse event is relabelled for the merged feed. */

#include "modelgated/catalog.h"
#include "tests.h"

static char *relabel(const char *in, bool *changes, int *r) {
        Buffer out = {};
        *r = catalog_relabel_event("3090", in, strlen(in), &out, changes);
        char *s = strndup(buffer_peek(&out) ?: "", buffer_size(&out));
        buffer_done(&out);
        return s;
}

TEST(events_are_relabelled_with_a_proxy_field) {
        bool changes;
        int r;
        char *s = relabel(
                "{\"model\":\"laguna-xs\",\"event\":\"status_change\",\"data\":{\"status\":\"loaded\"}}",
                &changes, &r);
        ASSERT_OK(r);
        ASSERT_STREQ(s,
                     "data: {\"model\":\"3090-laguna-xs\",\"event\":\"status_change\",\"data\":{\"status\":"
                     "\"loaded\"},\"proxy\":{\"host\":\"3090\",\"key\":\"laguna-xs\"}}\n\n");
        ASSERT_TRUE(changes);
        free(s);
}

TEST(star_and_empty_models_become_host_star) {
        bool changes;
        int r;
        char *s = relabel("{\"model\":\"*\",\"event\":\"models_reload\"}", &changes, &r);
        ASSERT_OK(r);
        ASSERT_STREQ(s,
                     "data: {\"model\":\"3090-*\",\"event\":\"models_reload\",\"proxy\":{\"host\":\"3090\","
                     "\"key\":\"*\"}}\n\n");
        free(s);
        s = relabel("{\"event\":\"models_reload\"}", &changes, &r);
        ASSERT_OK(r);
        ASSERT_TRUE(strstr(s, "\"model\":\"3090-*\"") != NULL);
        free(s);
}

TEST(download_progress_is_not_a_change_and_junk_is_refused) {
        bool changes = true;
        int r;
        char *s = relabel("{\"model\":\"m\",\"event\":\"download_progress\",\"data\":{\"progress\":{}}}",
                          &changes, &r);
        ASSERT_OK(r);
        ASSERT_TRUE(!changes);
        free(s);
        s = relabel("not json", &changes, &r);
        ASSERT_EQ(r, -EBADMSG);
        free(s);
        s = relabel("[1,2]", &changes, &r);
        ASSERT_EQ(r, -EBADMSG);
        free(s);
}

TESTS_MAIN
