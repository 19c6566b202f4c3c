/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The model memory (model-memory.h), kept as the JSON it is written as: {"version":1,"hosts":{host:{key:
 * record}}}, a record being {"engine":s,"meta":{…},"args":[…],"seen":usec}. json-c's objects are hash
 * tables, so a record is found by host and key at once, and the file is that tree written out. */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "modelgated/api/json-util.h"
#include "modelgated/sched/model-memory.h"
#include "shared/strv.h"

#define MEMORY_VERSION 1
#define JSON_FLAGS (JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE)

struct ModelMemory {
        json_object *hosts; /* host → key → record */
        uint64_t generation;
};

ModelMemory *model_memory_new(void) {
        ModelMemory *m = calloc(1, sizeof(ModelMemory));

        if (m && !(m->hosts = json_object_new_object()))
                return mfree(m);
        return m;
}

ModelMemory *model_memory_free(ModelMemory *m) {
        if (!m)
                return NULL;
        json_object_put(m->hosts);
        return mfree(m);
}

uint64_t model_memory_generation(const ModelMemory *m) {
        return m->generation;
}

static bool part_fits(json_object *o) {
        size_t n = 0;
        return json_object_to_json_string_length(o, JSON_FLAGS, &n) && n <= MODEL_MEMORY_PART_MAX;
}

static bool is_args(json_object *a) {
        if (!json_object_is_type(a, json_type_array))
                return false;
        for (size_t i = 0; i < json_object_array_length(a); i++)
                if (!json_object_is_type(json_object_array_get_idx(a, i), json_type_string))
                        return false;
        return true;
}

static int64_t meta_n_ctx(json_object *meta) {
        int64_t n;
        return json_object_is_type(meta, json_type_object) && json_get_int(meta, "n_ctx", &n) && n > 0 ? n
                                                                                                       : 0;
}

/* A record as a file or a learn may keep it: the parts that are well formed and small enough */
static json_object *record_clean(json_object *r) {
        json_object *c = json_object_new_object(), *x;
        const char *engine = json_get_string(r, "engine");
        int64_t seen;

        if (!c)
                return NULL;
        if (engine)
                json_object_object_add(c, "engine", json_object_new_string(engine));
        if (json_object_object_get_ex(r, "meta", &x) && meta_n_ctx(x) > 0 && part_fits(x))
                json_object_object_add(c, "meta", json_object_get(x));
        if (json_object_object_get_ex(r, "args", &x) && is_args(x) && part_fits(x))
                json_object_object_add(c, "args", json_object_get(x));
        json_object_object_add(c, "seen", json_object_new_int64(json_get_int(r, "seen", &seen) ? seen : 0));
        return c;
}

int model_memory_parse(ModelMemory *m, const char *text, size_t n) {
        _cleanup_(json_object_putp) json_object *root = NULL;
        json_object *hosts, *fresh;
        int64_t version;
        int r;

        r = json_parse(/* tok= */ NULL, text, n, &root);
        if (r < 0)
                return r;
        if (!json_object_is_type(root, json_type_object) || !json_get_int(root, "version", &version) ||
            version != MEMORY_VERSION || !json_object_object_get_ex(root, "hosts", &hosts) ||
            !json_object_is_type(hosts, json_type_object))
                return -EBADMSG;
        fresh = json_object_new_object();
        if (!fresh)
                return -ENOMEM;
        json_object_object_foreach(hosts, host, keys) {
                if (!json_object_is_type(keys, json_type_object))
                        continue;
                json_object *h = json_object_new_object();
                size_t k = 0;
                json_object_object_add(fresh, host, h);
                json_object_object_foreach(keys, key, rec) {
                        json_object *c;
                        if (k >= MODEL_MEMORY_KEYS_MAX || !json_object_is_type(rec, json_type_object))
                                continue;
                        if (!(c = record_clean(rec))) {
                                json_object_put(fresh);
                                return -ENOMEM;
                        }
                        json_object_object_add(h, key, c);
                        k++;
                }
        }
        json_object_put(m->hosts);
        m->hosts = fresh;
        m->generation++;
        return 0;
}

char *model_memory_format(const ModelMemory *m) {
        _cleanup_(json_object_putp) json_object *root = json_object_new_object();

        if (!root)
                return NULL;
        json_object_object_add(root, "version", json_object_new_int(MEMORY_VERSION));
        json_object_object_add(root, "hosts", json_object_get(m->hosts));
        return json_to_string_dup(root, JSON_FLAGS, NULL);
}

json_object *model_memory_get(const ModelMemory *m, const char *host, const char *key) {
        json_object *h, *r;

        if (!m || !json_object_object_get_ex(m->hosts, host, &h) || !json_object_object_get_ex(h, key, &r))
                return NULL;
        return r;
}

int model_memory_keys(const ModelMemory *m, const char *host, const char *engine, char ***ret) {
        _cleanup_strv_free_ char **l = NULL;
        json_object *h, *e;

        if (!m || !json_object_object_get_ex(m->hosts, host, &h)) {
                *ret = NULL;
                return 0;
        }
        json_object_object_foreach(h, key, rec) {
                if (engine && (!json_object_object_get_ex(rec, "engine", &e) ||
                               !streq_ptr(json_object_get_string(e), engine)))
                        continue;
                if (strv_extend(&l, key) < 0)
                        return -ENOMEM;
        }
        *ret = TAKE_PTR(l);
        return 0;
}

/* Makes room for one more key in h: the one seen longest ago goes */
static void host_make_room(json_object *h) {
        const char *oldest = NULL;
        int64_t oldest_seen = INT64_MAX, s;

        if (json_object_object_length(h) < MODEL_MEMORY_KEYS_MAX)
                return;
        json_object_object_foreach(h, key, rec) {
                if (!json_get_int(rec, "seen", &s))
                        s = 0;
                if (s < oldest_seen) {
                        oldest_seen = s;
                        oldest = key;
                }
        }
        if (oldest)
                json_object_object_del(h, oldest);
}

static bool same(json_object *a, json_object *b) {
        return (!a && !b) || (a && b && json_object_equal(a, b));
}

static json_object *member(json_object *o, const char *key) {
        json_object *x;
        return json_object_object_get_ex(o, key, &x) ? x : NULL;
}

int model_memory_learn(ModelMemory *m, const char *host, const char *engine, json_object *entry,
                       usec_t now) {
        json_object *h, *old, *status = NULL, *meta = NULL, *args = NULL;
        const char *key = json_get_string(entry, "id");

        if (!key)
                return -EINVAL;
        if (!json_object_object_get_ex(m->hosts, host, &h)) {
                h = json_object_new_object();
                if (!h)
                        return -ENOMEM;
                json_object_object_add(m->hosts, host, h);
        }
        old = member(h, key);
        if (json_object_object_get_ex(entry, "status", &status))
                args = member(status, "args");
        if (!is_args(args) || !part_fits(args))
                args = NULL;
        meta = member(entry, "meta");
        if (meta_n_ctx(meta) <= 0 || !part_fits(meta))
                meta = NULL;
        /* an unloaded model says no meta: what it said when it last ran holds while it runs the same way */
        if (!meta && old && member(old, "meta") && args && member(old, "args") &&
            model_args_same(args, member(old, "args")))
                meta = member(old, "meta");

        bool changed = !old || !streq_ptr(json_get_string(old, "engine"), engine) ||
                       !same(meta, member(old, "meta")) ||
                       !(args && member(old, "args") ? model_args_same(args, member(old, "args"))
                                                     : same(args, member(old, "args")));
        json_object *rec = json_object_new_object();
        if (!rec)
                return -ENOMEM;
        if (engine)
                json_object_object_add(rec, "engine", json_object_new_string(engine));
        if (meta)
                json_object_object_add(rec, "meta", json_object_get(meta));
        if (args)
                json_object_object_add(rec, "args", json_object_get(args));
        json_object_object_add(rec, "seen", json_object_new_int64((int64_t)MIN(now, (usec_t)INT64_MAX)));
        if (!old)
                host_make_room(h);
        json_object_object_add(h, key, rec); /* frees old, and meta if it was old's: referenced above */
        m->generation++;
        return changed;
}

bool model_memory_touch(ModelMemory *m, const char *host, const char *key, usec_t now) {
        json_object *r = model_memory_get(m, host, key);

        if (!r)
                return false;
        /* no new generation: a listing made since shows the time of the change before, and a list that
         * is read again as it was costs no merge (rule:merged-list) */
        json_object_object_add(r, "seen", json_object_new_int64((int64_t)MIN(now, (usec_t)INT64_MAX)));
        return true;
}

/* Context from a command line */

static bool arg_is(const char *a, const char *shrt, const char *lng) {
        return streq(a, shrt) || streq(a, lng);
}

static int64_t arg_number(const char *s) {
        char *end;
        long long v;

        errno = 0;
        v = strtoll(s, &end, 10);
        return errno == 0 && end != s && *end == '\0' ? (int64_t)v : -1;
}

int64_t model_args_n_ctx(json_object *args) {
        int64_t ctx = 0, parallel = -1;
        bool unified = false, per_slot = false;
        size_t n;

        if (!is_args(args))
                return 0;
        n = json_object_array_length(args);
        for (size_t i = 0; i < n; i++) {
                const char *a = json_object_get_string(json_object_array_get_idx(args, i));
                const char *v =
                        i + 1 < n ? json_object_get_string(json_object_array_get_idx(args, i + 1)) : NULL;
                if (arg_is(a, "-c", "--ctx-size") && v)
                        ctx = arg_number(v), i++;
                else if (arg_is(a, "-np", "--parallel") && v)
                        parallel = arg_number(v), i++;
                else if (arg_is(a, "-kvu", "--kv-unified"))
                        unified = true;
                else if (arg_is(a, "-no-kvu", "--no-kv-unified"))
                        unified = false;
                else if (streq(a, "--kv-unified-per-slot"))
                        per_slot = true;
        }
        /* llama-server's slots each get n_ctx / parallel of their own unless the cache is unified (its
         * default when --parallel is not given); what a loaded model reports is the slot's */
        if (ctx <= 0 || per_slot || (parallel > 1 && !unified))
                return 0;
        return ctx;
}

bool model_args_same(json_object *a, json_object *b) {
        size_t n;

        if (!is_args(a) || !is_args(b) || (n = json_object_array_length(a)) != json_object_array_length(b))
                return false;
        for (size_t i = 0; i < n; i++) {
                const char *x = json_object_get_string(json_object_array_get_idx(a, i));
                const char *y = json_object_get_string(json_object_array_get_idx(b, i));
                if (!streq(x, y))
                        return false;
                if (streq(x, "--port"))
                        i++; /* the router gives each run a port of its own */
        }
        return true;
}

/* The listing's fields */

static int set_window(json_object *entry, int64_t n) {
        json_object *meta;

        if (!json_object_object_get_ex(entry, "meta", &meta) ||
            !json_object_is_type(meta, json_type_object)) {
                meta = json_object_new_object();
                if (!meta)
                        return -ENOMEM;
                json_object_object_add(entry, "meta", meta);
        }
        if (!json_object_object_get_ex(meta, "n_ctx", NULL))
                json_object_object_add(meta, "n_ctx", json_object_new_int64(n));
        /* the names other clients read it by: llama-swap's and OpenRouter's, vLLM's */
        if (!json_object_object_get_ex(entry, "context_length", NULL))
                json_object_object_add(entry, "context_length", json_object_new_int64(n));
        if (!json_object_object_get_ex(entry, "max_model_len", NULL))
                json_object_object_add(entry, "max_model_len", json_object_new_int64(n));
        return 0;
}

int model_context_apply(json_object *entry, json_object *record) {
        json_object *status = NULL, *args = NULL, *rmeta = record ? member(record, "meta") : NULL;
        int64_t n = meta_n_ctx(member(entry, "meta"));
        int used = 0;

        if (!json_object_is_type(entry, json_type_object))
                return 0;
        if (json_object_object_get_ex(entry, "status", &status) &&
            json_object_is_type(status, json_type_object))
                args = member(status, "args");
        if (record && !args && member(record, "args") && json_object_is_type(status, json_type_object)) {
                /* an entry made from the record: the command line it last ran with */
                args = member(record, "args");
                json_object_object_add(status, "args", json_object_get(args));
                used = 1;
        }
        if (n <= 0 && meta_n_ctx(rmeta) > 0 &&
            (!args || (member(record, "args") && model_args_same(args, member(record, "args"))))) {
                json_object *meta = member(entry, "meta");
                if (!json_object_is_type(meta, json_type_object)) {
                        if (!(meta = json_object_new_object()))
                                return -ENOMEM;
                        json_object_object_add(entry, "meta", meta);
                }
                json_object_object_foreach(rmeta, k, v) {
                        if (!json_object_object_get_ex(meta, k, NULL))
                                json_object_object_add(meta, k, json_object_get(v));
                }
                n = meta_n_ctx(rmeta);
                used = 1;
        }
        if (n <= 0)
                n = model_args_n_ctx(args);
        if (n > 0 && set_window(entry, n) < 0)
                return -ENOMEM;
        return used;
}

bool model_record_seen(json_object *record, char buf[static 32]) {
        int64_t seen;
        struct tm tm;
        time_t t;

        if (!record || !json_get_int(record, "seen", &seen) || seen <= 0)
                return false;
        t = (time_t)(seen / (int64_t)USEC_PER_SEC);
        if (!gmtime_r(&t, &tm))
                return false;
        return strftime(buf, 32, "%Y-%m-%dT%H:%M:%SZ", &tm) > 0;
}
