/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The pure part of the /v1/models merge (models.h): a list whose entries are serialized once and found
 * by id through a hash gives, byte for byte, what the plain merge gave (one json-c tree, ids searched
 * linearly, the whole answer parsed again for a tier's filter), for hosts' snapshots, a stopped engine's
 * learned keys, aliases and their picks, and a tier's Models=. The plain merge is kept below as the
 * reference. */

#include <fnmatch.h>

#include "modelgated/client/models.h"
#include "tests.h"

#define FLAGS (JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE)

static char *fork_globs[] = {(char *)"q*", NULL}, *mainline_globs[] = {(char *)"laguna*", NULL};
static HostConf hosts[] = {{.name = (char *)"3090"}, {.name = (char *)"a9"}};
static EngineConf engines[] = {
        {.host = (char *)"3090", .name = (char *)"mainline", .models = mainline_globs},
        {.host = (char *)"3090", .name = (char *)"fork", .models = fork_globs},
};
static Config conf = {.hosts = hosts, .n_hosts = 2, .engines = engines, .n_engines = 2};

/* One host as the merge sees it: its snapshot (NULL: none), the engine that runs, a stopped engine's
 * learned keys */
typedef struct Input {
        const HostConf *host;
        const char *engine, *body, *stopped;
        char **learned;
} Input;

typedef struct Alias {
        AliasConf conf;
        ssize_t pick;
} Alias;

static const AliasTarget states[ALIAS_TARGETS_MAX] = {{ALIAS_TARGET_WARM, 0}, {ALIAS_TARGET_OTHER, 2}};

/* The reference: the merge as it was, over one tree */

static json_object *plain_find(json_object *data, const char *id) {
        for (size_t i = 0; i < json_object_array_length(data); i++) {
                json_object *x = json_object_array_get_idx(data, i), *xid;
                if (json_object_object_get_ex(x, "id", &xid) && streq(json_object_get_string(xid), id))
                        return x;
        }
        return NULL;
}

static void plain_learned(const Input *in, json_object *data) {
        STRV_FOREACH (k, in->learned) {
                char *id;
                ASSERT_TRUE(asprintf(&id, "%s-%s", in->host->name, *k) > 0);
                if (!plain_find(data, id)) {
                        json_object *o = json_object_new_object(), *st = json_object_new_object(),
                                    *proxy = json_object_new_object();
                        json_object_object_add(o, "id", json_object_new_string(id));
                        json_object_object_add(o, "object", json_object_new_string("model"));
                        json_object_object_add(o, "owned_by", json_object_new_string("llamacpp"));
                        json_object_object_add(st, "value", json_object_new_string("unloaded"));
                        json_object_object_add(o, "status", st);
                        json_object_object_add(proxy, "host", json_object_new_string(in->host->name));
                        json_object_object_add(proxy, "key", json_object_new_string(*k));
                        json_object_object_add(proxy, "engine", json_object_new_string(in->stopped));
                        json_object_object_add(o, "proxy", proxy);
                        json_object_array_add(data, o);
                }
                free(id);
        }
}

static void plain_alias(const Alias *al, json_object *data) {
        const AliasConf *a = &al->conf;
        json_object *o = json_object_new_object(), *alias = json_object_new_object(),
                    *targets = json_object_new_array(), *proxy = json_object_new_object(), *st;

        for (size_t k = 0; a->targets[k]; k++) {
                json_object *x = json_object_new_object();
                json_object_object_add(x, "id", json_object_new_string(a->targets[k]));
                json_object_object_add(
                        x, "state", json_object_new_string(alias_target_state_to_string(states[k].state)));
                json_object_array_add(targets, x);
        }
        json_object_object_add(o, "id", json_object_new_string(a->name));
        json_object_object_add(o, "object", json_object_new_string("model"));
        json_object_object_add(o, "owned_by", json_object_new_string("modelgate"));
        json_object *target = al->pick >= 0 ? plain_find(data, a->targets[al->pick]) : NULL;
        if (target && json_object_object_get_ex(target, "status", &st))
                json_object_object_add(o, "status", json_object_get(st));
        json_object_object_add(alias, "policy", json_object_new_string(alias_policy_to_string(a->policy)));
        json_object_object_add(alias, "targets", targets);
        json_object_object_add(alias, "pick",
                               al->pick >= 0 ? json_object_new_string(a->targets[al->pick]) : NULL);
        json_object_object_add(alias, "why", json_object_new_string("engine up"));
        json_object_object_add(proxy, "alias", alias);
        json_object_object_add(o, "proxy", proxy);
        json_object_array_add(data, o);
}

static char *plain_filter(const char *json, ModelsAllowed allowed) {
        json_object *root = json_tokener_parse(json), *data, *kept = json_object_new_array();
        char *out;

        ASSERT_TRUE(root && json_object_object_get_ex(root, "data", &data));
        for (size_t i = 0; i < json_object_array_length(data); i++) {
                json_object *e = json_object_array_get_idx(data, i), *id, *proxy, *alias, *targets, *st,
                            *value;
                if (!json_object_object_get_ex(e, "id", &id) || !allowed(json_object_get_string(id), NULL))
                        continue;
                /* an alias whose targets the caller may not each use: its policy only, and a status by its
                 * value */
                if (json_object_object_get_ex(e, "proxy", &proxy) &&
                    json_object_object_get_ex(proxy, "alias", &alias) &&
                    json_object_object_get_ex(alias, "targets", &targets)) {
                        bool all = true;
                        for (size_t k = 0; k < json_object_array_length(targets); k++) {
                                json_object *t = json_object_array_get_idx(targets, k), *tid;
                                ASSERT_TRUE(json_object_object_get_ex(t, "id", &tid));
                                all = all && allowed(json_object_get_string(tid), NULL);
                        }
                        if (!all) {
                                json_object_object_del(alias, "targets");
                                json_object_object_del(alias, "pick");
                                json_object_object_del(alias, "why");
                                if (json_object_object_get_ex(e, "status", &st) &&
                                    json_object_object_get_ex(st, "value", &value)) {
                                        json_object *v = json_object_new_object();
                                        json_object_object_add(v, "value", json_object_get(value));
                                        json_object_object_add(e, "status", v);
                                }
                        }
                }
                json_object_array_add(kept, json_object_get(e));
        }
        json_object_object_add(root, "data", kept);
        out = strdup(json_object_to_json_string_ext(root, FLAGS));
        json_object_put(root);
        return out;
}

static char *plain_merge(const Input *in, size_t n, const Alias *aliases, size_t n_aliases,
                         ModelsAllowed allowed) {
        json_object *root = json_object_new_object(), *data = json_object_new_array();
        char *out;

        for (size_t i = 0; i < n; i++) {
                if (in[i].body)
                        (void)models_merge_host(&conf, in[i].host, in[i].engine, in[i].body,
                                                strlen(in[i].body), data);
                plain_learned(&in[i], data);
        }
        for (size_t i = 0; i < n_aliases; i++)
                plain_alias(&aliases[i], data);
        json_object_object_add(root, "object", json_object_new_string("list"));
        json_object_object_add(root, "data", data);
        out = strdup(json_object_to_json_string_ext(root, FLAGS));
        json_object_put(root);
        if (allowed) {
                char *f = plain_filter(out, allowed);
                free(out);
                out = f;
        }
        return out;
}

/* The merge as it is now: the hosts' part (what the cache keeps), then the aliases' */
static char *listed(const Input *in, size_t n, const Alias *aliases, size_t n_aliases,
                    ModelsAllowed allowed) {
        ModelsList *l = models_list_new(), *al = models_list_new();
        Buffer out = {};

        ASSERT_TRUE(l && al);
        for (size_t i = 0; i < n; i++) {
                if (in[i].body) {
                        int r = models_list_add_host(l, &conf, in[i].host, in[i].engine, in[i].body,
                                                     strlen(in[i].body));
                        ASSERT_TRUE(r == 0 || r == -EBADMSG);
                }
                if (in[i].stopped)
                        ASSERT_OK(
                                models_list_add_learned(l, in[i].host->name, in[i].stopped, in[i].learned));
        }
        for (size_t i = 0; i < n_aliases; i++)
                ASSERT_OK(models_list_add_alias(al, l, &aliases[i].conf, states, aliases[i].pick,
                                                "engine up"));
        ASSERT_OK(models_list_render(l, al, allowed, NULL, &out));
        models_list_free(l);
        models_list_free(al);
        return buffer_steal(&out, NULL);
}

/* A host's snapshot with what a merge must keep as it is: an id listed twice (an alias shows the first's
 * status), a null status, none at all, escapes, '/', UTF-8, a double as the host wrote it, entries that
 * are not models */
static const char SNAPSHOT_3090[] =
        "{\"object\":\"list\",\"data\":["
        "{\"id\":\"laguna-xs\",\"object\":\"model\",\"status\":{\"value\":\"loaded\",\"args\":[\"llama-"
        "server\","
        "\"--port\",\"8080\"]},\"meta\":{\"n_ctx\":512,\"ratio\":1.50,\"path\":\"/models/a.gguf\"}},"
        "{\"id\":\"laguna-xs\",\"status\":{\"value\":\"unloaded\"}},"
        "{\"id\":\"od\\\"d/\\u00e9\\u0001\",\"status\":null,\"x\":\"\\t\xc3\xa9\"},"
        "{\"id\":\"plain\"},"
        "{\"id\":42},\"junk\",[1],"
        "{\"id\":\"qwen3-8b\",\"status\":{\"value\":\"loading\",\"progress\":{\"value\":0.25}}}]}";
static const char SNAPSHOT_A9[] = "{\"data\":[{\"id\":\"flint-40b\",\"status\":{\"value\":\"unloaded\"}}]}";

static char *fork_keys[] = {(char *)"qwen3-8b", (char *)"qwen3-32b", (char *)"laguna-xs", NULL};
static char *t_laguna[] = {(char *)"3090-laguna-xs", (char *)"a9-flint-40b", NULL};
static char *t_odd[] = {(char *)"3090-od\"d/\xc3\xa9\x01", NULL};
static char *t_plain[] = {(char *)"3090-plain", (char *)"a9-flint-40b", NULL};
static char *t_learned[] = {(char *)"a9-flint-40b", (char *)"3090-qwen3-32b", NULL};
static char *t_gone[] = {(char *)"a9-gone", NULL};

static const Alias ALIASES[] = {
        {{.name = (char *)"laguna", .targets = t_laguna, .policy = ALIAS_POLICY_WARM}, 0},
        {{.name = (char *)"odd", .targets = t_odd, .policy = ALIAS_POLICY_ORDERED}, 0},
        {{.name = (char *)"plain", .targets = t_plain, .policy = ALIAS_POLICY_SPREAD}, 0},
        {{.name = (char *)"learned", .targets = t_learned}, 1},
        {{.name = (char *)"nopick", .targets = t_laguna}, -1},
        {{.name = (char *)"gone", .targets = t_gone}, 0},
};

static const Input INPUTS[] = {
        /* mainline runs; fork's learned keys, one of which the snapshot lists already */
        {&hosts[0], "mainline", SNAPSHOT_3090, "fork", fork_keys},
        {&hosts[1], NULL, SNAPSHOT_A9, NULL, NULL},
};

static void assert_same(char *plain, char *now) {
        ASSERT_STREQ(now, plain);
        free(plain);
        free(now);
}

TEST(hosts_learned_keys_and_aliases_give_the_bytes_of_the_plain_merge) {
        assert_same(plain_merge(INPUTS, 2, ALIASES, ELEMENTSOF(ALIASES), NULL),
                    listed(INPUTS, 2, ALIASES, ELEMENTSOF(ALIASES), NULL));
        /* no host, no alias */
        assert_same(plain_merge(NULL, 0, NULL, 0, NULL), listed(NULL, 0, NULL, 0, NULL));
        /* a host without a snapshot (its engine stopped): only its learned keys */
        Input stopped = {&hosts[0], NULL, NULL, "fork", fork_keys};
        assert_same(plain_merge(&stopped, 1, ALIASES, 1, NULL), listed(&stopped, 1, ALIASES, 1, NULL));
}

static bool tier(const char *id, void *userdata) {
        return fnmatch("3090-*", id, 0) == 0 || streq(id, "laguna") || streq(id, "gone");
}

static bool nothing(const char *id, void *userdata) {
        return false;
}

TEST(a_tiers_models_give_the_bytes_of_the_plain_filter) {
        assert_same(plain_merge(INPUTS, 2, ALIASES, ELEMENTSOF(ALIASES), tier),
                    listed(INPUTS, 2, ALIASES, ELEMENTSOF(ALIASES), tier));
        assert_same(plain_merge(INPUTS, 2, ALIASES, ELEMENTSOF(ALIASES), nothing),
                    listed(INPUTS, 2, ALIASES, ELEMENTSOF(ALIASES), nothing));
}

TEST(one_host_one_learned_key_one_alias_as_written) {
        static char *keys[] = {(char *)"qwen3-8b", NULL};
        static char *targets[] = {(char *)"3090-qwen3-8b", NULL};
        Input in = {&hosts[0], "mainline",
                    "{\"data\":[{\"id\":\"laguna-xs\",\"status\":{\"value\":\"loaded\"}}]}", "fork", keys};
        Alias a = {{.name = (char *)"q", .targets = targets}, 0};
        char *s = listed(&in, 1, &a, 1, NULL);

        ASSERT_STREQ(s, "{\"object\":\"list\",\"data\":["
                        "{\"id\":\"3090-laguna-xs\",\"status\":{\"value\":\"loaded\"},"
                        "\"proxy\":{\"host\":\"3090\",\"key\":\"laguna-xs\",\"engine\":\"mainline\"}},"
                        "{\"id\":\"3090-qwen3-8b\",\"object\":\"model\",\"owned_by\":\"llamacpp\","
                        "\"status\":{\"value\":\"unloaded\"},"
                        "\"proxy\":{\"host\":\"3090\",\"key\":\"qwen3-8b\",\"engine\":\"fork\"}},"
                        "{\"id\":\"q\",\"object\":\"model\",\"owned_by\":\"modelgate\","
                        "\"status\":{\"value\":\"unloaded\"},"
                        "\"proxy\":{\"alias\":{\"policy\":\"warm\",\"targets\":[{\"id\":\"3090-qwen3-8b\","
                        "\"state\":\"warm\"}],\"pick\":\"3090-qwen3-8b\",\"why\":\"engine up\"}}}]}");
        free(s);
}

TEST(a_body_that_is_not_a_model_list_adds_nothing) {
        ModelsList *l = models_list_new();
        Buffer out = {};

        ASSERT_EQ(models_list_add_host(l, &conf, &hosts[1], NULL, "[1,2]", 5), -EBADMSG);
        ASSERT_EQ(models_list_add_host(l, &conf, &hosts[1], NULL, "{\"data\":", 8), -EBADMSG);
        ASSERT_OK(models_list_render(l, NULL, NULL, NULL, &out));
        ASSERT_OK(buffer_terminate(&out));
        ASSERT_STREQ(buffer_peek(&out), "{\"object\":\"list\",\"data\":[]}");
        buffer_done(&out);
        models_list_free(l);
}

/* Thousands of entries and learned keys, half of them listed already: each found through the hash as the
 * plain merge found it by scanning */
TEST(many_entries_give_the_bytes_of_the_plain_merge) {
        Buffer body = {};
        char **keys = calloc(4001, sizeof(char *));

        ASSERT_TRUE(keys);
        ASSERT_OK(buffer_append_str(&body, "{\"data\":["));
        for (size_t i = 0; i < 4000; i++) {
                ASSERT_OK(buffer_printf(&body, "%s{\"id\":\"laguna-%zu\",\"status\":{\"value\":\"loaded\"}}",
                                        i ? "," : "", i));
                ASSERT_TRUE(asprintf(&keys[i], "laguna-%zu", 2 * i) > 0);
        }
        ASSERT_OK(buffer_append_str(&body, "]}"));
        ASSERT_OK(buffer_terminate(&body));
        Input in = {&hosts[0], NULL, buffer_peek(&body), "fork", keys};
        assert_same(plain_merge(&in, 1, ALIASES, 1, NULL), listed(&in, 1, ALIASES, 1, NULL));
        strv_free(keys);
        buffer_done(&body);
}

TESTS_MAIN
