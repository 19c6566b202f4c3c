/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The pure part of the catalog: how a host's /models/sse event is relabelled for the merged feed, and how a
 * status event is read and applied to the /models snapshot (rule:list-never-stale). */

#include "modelgated/catalog/catalog-event.h"
#include "tests.h"

/* model: what the event is about, as a tier's filter reads it ("-" for the whole host) */
static char *relabel_about(const char *in, bool *changes, int *r, char model[static 64]) {
        Buffer out = {};
        char *about = (char *)"unset";
        CatalogStatus st = {};
        *r = catalog_event_read(NULL, "3090", in, strlen(in), &out, changes, &about, &st);
        if (*r >= 0)
                catalog_status_done(&st);
        char *s = strndup(buffer_peek(&out) ?: "", buffer_size(&out));
        buffer_done(&out);
        if (*r >= 0) {
                snprintf(model, 64, "%s", about ?: "-");
                free(about);
        }
        return s;
}

static char *relabel(const char *in, bool *changes, int *r) {
        char model[64];
        return relabel_about(in, changes, r, model);
}

TEST(events_are_relabelled_with_a_proxy_field) {
        bool changes;
        int r;
        char model[64];
        char *s = relabel_about(
                "{\"model\":\"laguna-xs\",\"event\":\"status_change\",\"data\":{\"status\":\"loaded\"}}",
                &changes, &r, model);
        ASSERT_OK(r);
        ASSERT_STREQ(model, "3090-laguna-xs");
        ASSERT_STREQ(s,
                     "data: {\"model\":\"3090-laguna-xs\",\"event\":\"status_change\",\"data\":{\"status\":"
                     "\"loaded\"},\"proxy\":{\"host\":\"3090\",\"key\":\"laguna-xs\"}}\n\n");
        ASSERT_TRUE(changes);
        free(s);
}

TEST(star_and_empty_models_become_host_star) {
        bool changes;
        int r;
        char model[64];
        char *s = relabel_about("{\"model\":\"*\",\"event\":\"models_reload\"}", &changes, &r, model);
        ASSERT_OK(r);
        ASSERT_STREQ(model, "-"); /* the whole host's */
        ASSERT_STREQ(s,
                     "data: {\"model\":\"3090-*\",\"event\":\"models_reload\",\"proxy\":{\"host\":\"3090\","
                     "\"key\":\"*\"}}\n\n");
        free(s);
        s = relabel_about("{\"event\":\"models_reload\"}", &changes, &r, model);
        ASSERT_OK(r);
        ASSERT_TRUE(strstr(s, "\"model\":\"3090-*\"") != NULL);
        ASSERT_STREQ(model, "-");
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

static const char LIST[] =
        "{\"data\":[{\"id\":\"laguna-xs\",\"aliases\":[],\"object\":\"model\",\"status\":{\"value\":"
        "\"loaded\","
        "\"args\":[\"llama-server\"]},\"meta\":{\"n_ctx\":512}},{\"id\":\"qwen3-8b\",\"object\":\"model\","
        "\"status\":{\"value\":\"unloaded\",\"args\":[\"llama-server\"]}}],\"object\":\"list\"}";

/* What an event says about a model's status, read as the catalog reads it (its relabelled text
 * dropped): 0 with s->key set; -ENOMSG: a well-formed event that sets no status; < 0 otherwise */
static int status_parse(const char *ev, CatalogStatus *s) {
        Buffer out = {};
        int r = catalog_event_read(NULL, "3090", ev, strlen(ev), &out, NULL, NULL, s);

        buffer_done(&out);
        if (r == 0 && !s->key) {
                catalog_status_done(s);
                return -ENOMSG;
        }
        return r;
}

static json_object *list_apply(const char *event, int *r) {
        CatalogStatus s;
        json_object *l = json_tokener_parse(LIST);
        ASSERT_TRUE(l != NULL);
        ASSERT_OK(status_parse(event, &s));
        *r = catalog_status_apply(l, &s);
        catalog_status_done(&s);
        return l;
}

static const char *status_of(json_object *l, size_t i, const char *field) {
        json_object *d, *st, *v;
        ASSERT_TRUE(json_object_object_get_ex(l, "data", &d));
        ASSERT_TRUE(json_object_object_get_ex(json_object_array_get_idx(d, i), "status", &st));
        return json_object_object_get_ex(st, field, &v) ? json_object_to_json_string(v) : NULL;
}

TEST(status_events_are_read_with_their_progress) {
        CatalogStatus s;
        const char *ev =
                "{\"model\":\"m\",\"event\":\"status_change\",\"data\":{\"status\":\"loading\",\"progress\":"
                "{\"stages\":[\"text_model\"],\"current\":\"text_model\",\"value\":0.4231}}}";
        ASSERT_OK(status_parse(ev, &s));
        ASSERT_STREQ(s.key, "m");
        ASSERT_STREQ(s.status, "loading");
        ASSERT_EQ(s.percent, 42);
        catalog_status_done(&s);
        /* the first loading event of a load has no progress; early builds said {"stage","value"} */
        ev = "{\"model\":\"m\",\"event\":\"model_status\",\"data\":{\"status\":\"loading\"}}";
        ASSERT_OK(status_parse(ev, &s));
        ASSERT_EQ(s.percent, -1);
        catalog_status_done(&s);
        ev = "{\"model\":\"m\",\"event\":\"status_change\",\"data\":{\"status\":\"loading\",\"progress\":"
             "{\"stage\":\"text_model\",\"value\":1}}}";
        ASSERT_OK(status_parse(ev, &s));
        ASSERT_EQ(s.percent, 100);
        catalog_status_done(&s);
        /* events that set no status, and junk */
        ev = "{\"model\":\"*\",\"event\":\"models_reload\"}";
        ASSERT_EQ(status_parse(ev, &s), -ENOMSG);
        ev = "{\"model\":\"m\",\"event\":\"download_progress\",\"data\":{\"progress\":{}}}";
        ASSERT_EQ(status_parse(ev, &s), -ENOMSG);
        ASSERT_EQ(status_parse("[]", &s), -EBADMSG);
        ASSERT_EQ(status_parse("{", &s), -EBADMSG);
}

TEST(a_status_event_changes_only_its_model_in_the_list) {
        int r;
        json_object *l = list_apply(
                "{\"model\":\"qwen3-8b\",\"event\":\"model_status\",\"data\":{\"status\":\"loading\"}}", &r);
        ASSERT_EQ(r, 1);
        ASSERT_STREQ(status_of(l, 1, "value"), "\"loading\"");
        ASSERT_STREQ(status_of(l, 0, "value"), "\"loaded\"");
        /* what llama.cpp lists besides the value stays */
        ASSERT_TRUE(status_of(l, 1, "args") != NULL);
        json_object_put(l);

        /* a model the list does not have, or a status it has already: nothing changes */
        l = list_apply("{\"model\":\"nope\",\"event\":\"status_change\",\"data\":{\"status\":\"loaded\"}}",
                       &r);
        ASSERT_EQ(r, 0);
        json_object_put(l);
        l = list_apply(
                "{\"model\":\"laguna-xs\",\"event\":\"status_change\",\"data\":{\"status\":\"loaded\"}}",
                &r);
        ASSERT_EQ(r, 0);
        json_object_put(l);
}

TEST(a_failed_load_is_listed_as_llama_cpp_lists_it) {
        int r;
        json_object *l =
                list_apply("{\"model\":\"laguna-xs\",\"event\":\"status_change\",\"data\":{\"status\":"
                           "\"unloaded\",\"exit_code\":1}}",
                           &r);
        ASSERT_EQ(r, 1);
        ASSERT_STREQ(status_of(l, 0, "value"), "\"unloaded\"");
        ASSERT_STREQ(status_of(l, 0, "exit_code"), "1");
        ASSERT_STREQ(status_of(l, 0, "failed"), "true");
        /* a running model's own facts go with it */
        json_object *d, *meta;
        ASSERT_TRUE(json_object_object_get_ex(l, "data", &d));
        ASSERT_TRUE(!json_object_object_get_ex(json_object_array_get_idx(d, 0), "meta", &meta));
        json_object_put(l);

        /* a clean unload has neither */
        l = list_apply(
                "{\"model\":\"laguna-xs\",\"event\":\"status_change\",\"data\":{\"status\":\"unloaded\","
                "\"exit_code\":0}}",
                &r);
        ASSERT_EQ(r, 1);
        ASSERT_TRUE(status_of(l, 0, "failed") == NULL);
        ASSERT_TRUE(status_of(l, 0, "exit_code") == NULL);
        json_object_put(l);
}

TEST(a_loaded_event_brings_the_models_own_entry) {
        int r;
        json_object *l = list_apply("{\"model\":\"qwen3-8b\",\"event\":\"status_change\",\"data\":{"
                                    "\"status\":\"loaded\",\"info\":"
                                    "{\"id\":\"qwen3-8b\",\"object\":\"model\",\"meta\":{\"n_ctx\":4096}}}}",
                                    &r);
        ASSERT_EQ(r, 1);
        ASSERT_STREQ(status_of(l, 1, "value"), "\"loaded\"");
        json_object *d, *meta;
        ASSERT_TRUE(json_object_object_get_ex(l, "data", &d));
        ASSERT_TRUE(json_object_object_get_ex(json_object_array_get_idx(d, 1), "meta", &meta));
        ASSERT_STREQ(json_object_to_json_string_ext(meta, JSON_C_TO_STRING_PLAIN), "{\"n_ctx\":4096}");
        json_object_put(l);
}

TEST(a_loads_answer_applies_only_to_a_model_still_unloaded) {
        CatalogStatus s = {.key = (char *)"laguna-xs",
                           .status = (char *)"loading",
                           .percent = -1,
                           .only_unloaded = true};
        json_object *l = json_tokener_parse(LIST);
        ASSERT_EQ(catalog_status_apply(l, &s), 0);
        ASSERT_STREQ(status_of(l, 0, "value"), "\"loaded\"");
        s.key = (char *)"qwen3-8b";
        ASSERT_EQ(catalog_status_apply(l, &s), 1);
        ASSERT_STREQ(status_of(l, 1, "value"), "\"loading\"");
        json_object_put(l);
        l = json_tokener_parse("{\"object\":\"list\"}");
        ASSERT_EQ(catalog_status_apply(l, &s), -EBADMSG);
        json_object_put(l);
}

TEST(an_event_read_with_a_kept_tokener_reads_as_with_a_fresh_one) {
        static const char *const events[] = {
                "{\"model\":\"m\",\"event\":\"status_change\",\"data\":{\"status\":\"loading\",\"progress\":"
                "{\"value\":0.5}}}",
                "not json",
                "{\"model\":\"*\",\"event\":\"models_reload\"}",
                "{\"model\":\"m\",\"event\":\"status_change\",\"data\":{\"status\":\"loaded\",\"info\":"
                "{\"id\":\"m\",\"meta\":{\"n_ctx\":1}}}}",
                "{\"model\":\"q\",\"event\":\"model_status\",\"data\":{\"status\":\"unloaded\",\"exit_"
                "code\":3}}",
                "[1]",
                "{\"model\":\"m\",\"event\":\"download_progress\",\"data\":{\"progress\":{}}}",
        };
        /* one tokener for all of them, a refused one among them */
        json_tokener *tok = json_tokener_new();

        for (size_t i = 0; i < ELEMENTSOF(events); i++) {
                Buffer a = {}, b = {};
                CatalogStatus x = {}, y = {};
                bool ca = false, cb = false;
                const char *e = events[i];
                _cleanup_free_ char *ma = NULL, *mb = NULL;
                int ra = catalog_event_read(tok, "3090", e, strlen(e), &a, &ca, &ma, &x);
                int rb = catalog_event_read(NULL, "3090", e, strlen(e), &b, &cb, &mb, &y);

                ASSERT_EQ(ra, rb);
                if (ra == 0) {
                        ASSERT_EQ(buffer_size(&a), buffer_size(&b));
                        ASSERT_TRUE(memcmp(buffer_peek(&a), buffer_peek(&b), buffer_size(&a)) == 0);
                        ASSERT_EQ(ca, cb);
                        ASSERT_TRUE(streq_ptr(ma, mb));
                        ASSERT_TRUE(streq_ptr(x.key, y.key));
                        ASSERT_TRUE(streq_ptr(x.status, y.status));
                        ASSERT_EQ(x.percent, y.percent);
                        ASSERT_EQ(x.exit_code, y.exit_code);
                        ASSERT_EQ(x.info != NULL, y.info != NULL);
                } else {
                        ASSERT_NULL(x.key);
                        ASSERT_NULL(y.key);
                }
                catalog_status_done(&x);
                catalog_status_done(&y);
                buffer_done(&a);
                buffer_done(&b);
        }
        json_tokener_free(tok);
}

TESTS_MAIN
