/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A host's /models answer as the catalog keeps it (catalog-list.h): read entry by entry at every split
 * point, refused as soon as it is too long or is not a model list, and changed by a status event in the
 * one entry the event names, whatever the list's length (rule:fair-share: no host's list or feed takes more
 * than its share of a turn). */

#include <json-c/json.h>

#include "modelgated/catalog/catalog-list.h"
#include "shared/buffer.h"
#include "shared/strv.h"
#include "tests.h"

static const char LIST[] =
        "{\"data\":[{\"id\":\"laguna-xs\",\"aliases\":[\"lx\"],\"object\":\"model\",\"status\":{\"value\":"
        "\"loaded\",\"args\":[\"llama-server\"]},\"meta\":{\"n_ctx\":512}}, 7, null, "
        "{\"object\":\"model\"},\n"
        "  "
        "{\"id\":\"qwen3-8b\",\"object\":\"model\",\"status\":{\"value\":\"loading\",\"args\":[\"a\\\"]\"]}}"
        ","
        "{\"id\":\"laguna-xs\",\"object\":\"model\"}],\"object\":\"list\",\"n\":[1.5,{\"x\":true}]}\n";

static CatalogList *parse(const char *body, int *r) {
        CatalogList *l = NULL;
        *r = catalog_list_parse(body, strlen(body), SIZE_MAX, SIZE_MAX, &l);
        return l;
}

static char *entry(const CatalogList *l, size_t i) {
        size_t n;
        const char *p = catalog_list_entry(l, i, &n);
        return strndup(p, n);
}

static CatalogStatus status(const char *key, const char *value) {
        return (CatalogStatus){.key = (char *)key, .status = (char *)value, .percent = -1};
}

TEST(a_list_is_its_entries_with_an_id_and_their_names) {
        int r;
        CatalogList *l = parse(LIST, &r);

        ASSERT_OK(r);
        /* 7, null and the entry without an id are left out, as a listing leaves them out */
        ASSERT_EQ(catalog_list_size(l), 3u);
        ASSERT_STREQ(catalog_list_id(l, 1), "qwen3-8b");
        char *e = entry(l, 1);
        ASSERT_STREQ(e,
                     "{\"id\":\"qwen3-8b\",\"object\":\"model\",\"status\":{\"value\":\"loading\",\"args\":"
                     "[\"a\\\"]\"]}}");
        free(e);
        ASSERT_TRUE(!catalog_list_loading(l, 0));
        ASSERT_TRUE(catalog_list_loading(l, 1));
        ASSERT_TRUE(catalog_list_has(l, "lx"));
        ASSERT_TRUE(catalog_list_has(l, "qwen3-8b"));
        ASSERT_TRUE(!catalog_list_has(l, "list"));
        /* an id listed twice: the first one is the one found */
        ASSERT_EQ(catalog_list_find(l, "laguna-xs"), 0);
        ASSERT_EQ(catalog_list_find(l, "nope"), -1);
        char **ids = catalog_list_ids(l);
        ASSERT_EQ(strv_length(ids), 3u);
        ASSERT_STREQ(ids[2], "laguna-xs");
        strv_free(ids);
        catalog_list_free(l);
}

TEST(every_split_point_reads_the_same_list) {
        size_t n = strlen(LIST);
        int r;
        CatalogList *whole = parse(LIST, &r);

        ASSERT_OK(r);
        for (size_t k = 0; k <= n; k++) {
                CatalogList *l;
                ASSERT_OK(catalog_list_new(SIZE_MAX, SIZE_MAX, &l));
                ASSERT_OK(catalog_list_read(l, LIST, k));
                ASSERT_OK(catalog_list_read(l, LIST + k, n - k));
                ASSERT_OK(catalog_list_read_end(l));
                if (!catalog_list_equal(l, whole))
                        FAIL("split at %zu reads another list", k);
                ASSERT_TRUE(catalog_list_has(l, "lx"));
                catalog_list_free(l);
        }
        catalog_list_free(whole);

        /* a byte at a time too */
        CatalogList *l;
        ASSERT_OK(catalog_list_new(SIZE_MAX, SIZE_MAX, &l));
        for (size_t k = 0; k < n; k++)
                ASSERT_OK(catalog_list_read(l, LIST + k, 1));
        ASSERT_OK(catalog_list_read_end(l));
        ASSERT_EQ(catalog_list_size(l), 3u);
        catalog_list_free(l);
}

TEST(what_is_not_a_model_list_is_refused) {
        static const char *const bad[] = {
                "[1,2]",
                "{\"data\":",
                "{\"data\":5}",
                "{\"object\":\"list\"}",
                "{\"data\":[],\"data\":[]}",     /* which of the two would be the host's? */
                "{\"data\":[{\"id\":\"a\"}]} x", /* something after it */
                "{\"data\":[{\"id\":\"a\"} {\"id\":\"b\"}]}",
                "{\"data\":[{\"id\":\"a\"},]}",
                "{\"x\":tru,\"data\":[]}",
                "{\"data\":[{\"id\":\"a\"]}",
                "{data:[]}",
                "",
        };
        int r;

        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                CatalogList *l = parse(bad[i], &r);
                if (r != -EBADMSG)
                        FAIL("'%s' gave %d", bad[i], r);
                ASSERT_NULL(l);
        }
        /* the key may be spelled with escapes; other members are checked, and dropped */
        CatalogList *l =
                parse(" {\"x\":{\"a\":[1,{\"b\":\"]\"}]}, \"d\\u0061ta\" : [ {\"id\":\"a\"} ] } ", &r);
        ASSERT_OK(r);
        ASSERT_EQ(catalog_list_size(l), 1u);
        catalog_list_free(l);
        l = parse("{\"data\":[]}", &r);
        ASSERT_OK(r);
        ASSERT_EQ(catalog_list_size(l), 0u);
        catalog_list_free(l);
}

static void big_list(Buffer *b, size_t n) {
        ASSERT_OK(buffer_append_str(b, "{\"object\":\"list\",\"data\":["));
        for (size_t i = 0; i < n; i++)
                ASSERT_OK(buffer_printf(
                        b,
                        "%s{\"id\":\"m%zu\",\"aliases\":[],\"object\":\"model\",\"status\":"
                        "{\"value\":\"unloaded\",\"args\":[\"llama-server\",\"-m\",\"m%zu.gguf\"]}}",
                        i ? "," : "", i, i));
        ASSERT_OK(buffer_append_str(b, "]}"));
}

TEST(a_list_too_long_is_refused_as_soon_as_it_is) {
        _cleanup_(buffer_done) Buffer b = {};
        CatalogList *l;
        int r;

        big_list(&b, 100);
        ASSERT_OK(catalog_list_parse(buffer_peek(&b), buffer_size(&b), 100, SIZE_MAX, &l));
        catalog_list_free(l);
        ASSERT_EQ(catalog_list_parse(buffer_peek(&b), buffer_size(&b), 99, SIZE_MAX, &l), -E2BIG);
        ASSERT_EQ(catalog_list_parse(buffer_peek(&b), buffer_size(&b), 100, buffer_size(&b) - 1, &l),
                  -E2BIG);

        /* the 100th entry's first byte says it: what follows is not read */
        const char *at = strstr(buffer_peek(&b), "{\"id\":\"m99\"");
        ASSERT_OK(catalog_list_new(99, SIZE_MAX, &l));
        ASSERT_OK(catalog_list_read(l, buffer_peek(&b), (size_t)(at - buffer_peek(&b))));
        ASSERT_EQ(catalog_list_read(l, at, 1), -E2BIG);
        ASSERT_EQ(catalog_list_read(l, at + 1, 1), -E2BIG);
        ASSERT_EQ(catalog_list_read_end(l), -E2BIG);
        catalog_list_free(l);
        (void)r;
}

TEST(a_status_change_rewrites_its_one_entry_and_reads_no_other) {
        _cleanup_(buffer_done) Buffer b = {};
        CatalogList *l, *before;
        const size_t n = 12000; /* the list of the review: 2.6 MB */
        CatalogStatus s = status("m5000", "loading");

        big_list(&b, n);
        ASSERT_OK(catalog_list_parse(buffer_peek(&b), buffer_size(&b), SIZE_MAX, SIZE_MAX, &l));
        ASSERT_OK(catalog_list_parse(buffer_peek(&b), buffer_size(&b), SIZE_MAX, SIZE_MAX, &before));
        ASSERT_EQ(catalog_list_apply(l, &s), 1);
        /* one entry read and written, not 2.6 MB */
        ASSERT_EQ(catalog_list_entry_parses(l), 1u);
        char *e = entry(l, 5000);
        ASSERT_STREQ(
                e, "{\"id\":\"m5000\",\"aliases\":[],\"object\":\"model\",\"status\":{\"value\":\"loading\","
                   "\"args\":[\"llama-server\",\"-m\",\"m5000.gguf\"]}}");
        free(e);
        ASSERT_TRUE(catalog_list_loading(l, 5000));
        for (size_t i = 0; i < n; i++) {
                size_t x, y;
                const char *p = catalog_list_entry(l, i, &x), *q = catalog_list_entry(before, i, &y);
                if (i != 5000 && (x != y || memcmp(p, q, x) != 0))
                        FAIL("entry %zu changed", i);
        }
        ASSERT_TRUE(!catalog_list_equal(l, before));

        /* the same status again changes nothing; one that is not listed reads nothing */
        ASSERT_EQ(catalog_list_apply(l, &s), 0);
        s = status("nope", "loaded");
        ASSERT_EQ(catalog_list_apply(l, &s), 0);
        ASSERT_EQ(catalog_list_entry_parses(l), 2u);

        /* a thousand changes of one model: each reads one entry, and the list stays that list */
        for (size_t i = 0; i < 1000; i++) {
                s = status("m7", i % 2 ? "loading" : "loaded");
                ASSERT_EQ(catalog_list_apply(l, &s), 1);
        }
        ASSERT_EQ(catalog_list_entry_parses(l), 1002u);
        e = entry(l, 7);
        ASSERT_TRUE(strstr(e, "\"value\":\"loading\"") != NULL);
        free(e);
        e = entry(l, 5000);
        ASSERT_TRUE(strstr(e, "\"value\":\"loading\"") != NULL);
        free(e);
        catalog_list_free(before);
        catalog_list_free(l);
}

TEST(an_event_during_the_read_reaches_its_entry_whether_it_came_before_or_after) {
        static const char body[] = "{\"data\":[{\"id\":\"a\",\"status\":{\"value\":\"unloaded\"}},"
                                   "{\"id\":\"b\",\"status\":{\"value\":\"unloaded\"}}]}";
        const char *mid = strstr(body, "{\"id\":\"b\"");
        CatalogList *l;
        CatalogStatus s;

        ASSERT_OK(catalog_list_new(2, SIZE_MAX, &l));
        ASSERT_OK(catalog_list_read(l, body, (size_t)(mid - body)));
        /* a's entry is read: changed now */
        s = status("a", "loaded");
        ASSERT_EQ(catalog_list_apply(l, &s), 1);
        /* b's is not: kept, the last per model, and a load's answer does not undo an event */
        s = status("b", "loading");
        ASSERT_EQ(catalog_list_apply(l, &s), 0);
        s = status("b", "loaded");
        ASSERT_EQ(catalog_list_apply(l, &s), 0);
        s = (CatalogStatus){
                .key = (char *)"b", .status = (char *)"loading", .percent = -1, .only_unloaded = true};
        ASSERT_EQ(catalog_list_apply(l, &s), 0);
        /* room for as many models as the list may have */
        s = status("c", "loaded");
        ASSERT_EQ(catalog_list_apply(l, &s), 0);
        s = status("d", "loaded");
        ASSERT_EQ(catalog_list_apply(l, &s), -ENOBUFS);
        ASSERT_OK(catalog_list_read(l, mid, strlen(mid)));
        ASSERT_OK(catalog_list_read_end(l));
        char *e = entry(l, 0);
        ASSERT_STREQ(e, "{\"id\":\"a\",\"status\":{\"value\":\"loaded\"}}");
        free(e);
        e = entry(l, 1);
        ASSERT_STREQ(e, "{\"id\":\"b\",\"status\":{\"value\":\"loaded\"}}");
        free(e);
        /* b's event was applied to the entry as it was read: no parse of its own */
        ASSERT_EQ(catalog_list_entry_parses(l), 1u);
        /* once read, an event for a model it does not list is nothing */
        s = status("c", "loaded");
        ASSERT_EQ(catalog_list_apply(l, &s), 0);
        catalog_list_free(l);
}

TEST(a_loaded_models_own_entry_brings_its_aliases) {
        CatalogList *l;
        CatalogStatus s = status("a", "loaded");
        int r;

        l = parse("{\"data\":[{\"id\":\"a\",\"status\":{\"value\":\"loading\"}}]}", &r);
        ASSERT_OK(r);
        s.info = json_tokener_parse("{\"id\":\"a\",\"aliases\":[\"al\"],\"meta\":{\"n_ctx\":4096}}");
        ASSERT_TRUE(!catalog_list_has(l, "al"));
        ASSERT_EQ(catalog_list_apply(l, &s), 1);
        ASSERT_TRUE(catalog_list_has(l, "al"));
        ASSERT_TRUE(!catalog_list_loading(l, 0));
        json_object_put(s.info);
        catalog_list_free(l);
}

TESTS_MAIN
