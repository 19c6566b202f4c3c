/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* One Catalog per host, owned by its Host. Two upstream exchanges at most:
 * a /models read (one at a time; a refresh asked for meanwhile runs right
 * after it, so no change is missed) and the /models/sse feed (reconnected
 * with backoff). Both go to the running engine's URL for a host with engines,
 * else to the host's URL. */

#include <assert.h>
#include <json-c/json.h>
#include <stdio.h>
#include <string.h>

#include "modelgated/catalog-event.h"
#include "modelgated/catalog.h"
#include "modelgated/http-writer.h"
#include "modelgated/upstream.h"
#include "shared/log.h"
#include "shared/strv.h"

#define CATALOG_FETCH_TIMEOUT_USEC (5 * USEC_PER_SEC)
#define CATALOG_BODY_MAX (16 * 1024 * 1024)
#define CATALOG_FEED_REFRESH_USEC (2 * USEC_PER_SEC)
#define CATALOG_FEED_RETRY_MIN_USEC (1 * USEC_PER_SEC)
#define CATALOG_FEED_RETRY_MAX_USEC (30 * USEC_PER_SEC)
#define CATALOG_FEED_LINE_MAX (1024 * 1024)

struct Catalog {
        sd_event *event;
        UpstreamPool *pool;
        CatalogConf conf;
        const CatalogCallbacks *cb;
        void *userdata;

        char *body; /* the last good /models answer */
        size_t body_len;
        char **ids;          /* its ids and aliases: asked on every request, so parsed once */
        uint64_t generation; /* catalog_generation() */
        bool first_done;

        Upstream *fetch;
        Buffer fetch_body;
        int fetch_status;
        ssize_t fetch_engine; /* the engine that was up when the read began */
        bool again;
        bool changed;           /* an engine came up and its list is not read yet: merges wait for it */
        CatalogStatus *pending; /* status events applied while the read is under way, in order */
        size_t n_pending;
        json_object *loading; /* key → percent (-1: none said yet), for the models that load */
        sd_event_source *poll_timer, *refresh_timer;
        usec_t last_refresh;

        Upstream *feed;
        Buffer feed_line;
        sd_event_source *feed_retry;
        usec_t feed_backoff;

        ssize_t engine_up; /* -1: none */
        char ***keys;      /* per engine: learned keys */
};

static void catalog_fetch(Catalog *c);
static void feed_connect(Catalog *c);

/* The snapshot or the learned keys changed: one counter for all catalogs, so that no generation repeats */
static void catalog_changed(Catalog *c) {
        static uint64_t generations;
        c->generation = ++generations;
}

static const HttpUrl *catalog_url(const Catalog *c) {
        if (c->conf.n_engines == 0)
                return &c->conf.host->url;
        if (c->engine_up < 0)
                return NULL;
        return c->conf.engines[c->engine_up].url;
}

/* The time of the event being dispatched: one event, one "now". */
static usec_t catalog_now(const Catalog *c) {
        usec_t t;

        /* sd_event_now() fails only for a clock the loop does not keep, or in a forked child */
        if (sd_event_now(c->event, CLOCK_MONOTONIC, &t) < 0)
                return now_usec(CLOCK_MONOTONIC);
        return t;
}

static void catalog_ready_changed(Catalog *c) {
        if (c->cb->on_ready)
                c->cb->on_ready(c, c->userdata);
}

/* model: the client-visible name the text is about; NULL: the whole host */
static void catalog_feed(Catalog *c, const char *model, const char *p, size_t n) {
        FeedEvent e = {.host = c->conf.host->name, .model = model, .text = p, .size = n};

        if (c->cb->on_feed)
                c->cb->on_feed(c, &e, c->userdata);
}

static void catalog_report_http(Catalog *c, const char *reason) {
        if (c->cb->on_http)
                c->cb->on_http(c, reason, c->userdata);
}

/* The ids a /models answer lists; NULL when it is not a model list. */
static char **snapshot_ids(const char *body, size_t n, bool aliases) {
        json_tokener *tok = json_tokener_new();
        json_object *root, *list;
        char **ids = NULL;

        if (!tok)
                return NULL;
        root = json_tokener_parse_ex(tok, body, (int)MIN(n, (size_t)INT32_MAX));
        json_tokener_free(tok);
        if (!root || !json_object_object_get_ex(root, "data", &list) ||
            !json_object_is_type(list, json_type_array)) {
                json_object_put(root);
                return NULL;
        }
        if (!(ids = calloc(1, sizeof(char *))))
                goto out;
        for (size_t i = 0; i < json_object_array_length(list); i++) {
                json_object *e = json_object_array_get_idx(list, i), *id, *al;
                if (json_object_object_get_ex(e, "id", &id) && json_object_is_type(id, json_type_string))
                        (void)strv_extend(&ids, json_object_get_string(id));
                if (aliases && json_object_object_get_ex(e, "aliases", &al) &&
                    json_object_is_type(al, json_type_array))
                        for (size_t k = 0; k < json_object_array_length(al); k++) {
                                json_object *a = json_object_array_get_idx(al, k);
                                if (json_object_is_type(a, json_type_string))
                                        (void)strv_extend(&ids, json_object_get_string(a));
                        }
        }
out:
        json_object_put(root);
        return ids;
}

static void loading_note(Catalog *c, const char *key, const char *status, int percent) {
        json_object *p;

        if (!streq(status, "loading")) {
                json_object_object_del(c->loading, key);
                return;
        }
        /* a loading event without progress keeps what an earlier one said */
        if (percent < 0 && json_object_object_get_ex(c->loading, key, &p))
                return;
        json_object_object_add(c->loading, key, json_object_new_int(percent));
}

/* s applied to the snapshot; false when it changed nothing there */
static bool snapshot_apply(Catalog *c, const CatalogStatus *s) {
        json_tokener *tok;
        json_object *root;
        const char *text;
        size_t n;
        char *body;
        bool changed = false;

        if (!c->body || !(tok = json_tokener_new()))
                return false;
        root = json_tokener_parse_ex(tok, c->body, (int)MIN(c->body_len, (size_t)INT32_MAX));
        json_tokener_free(tok);
        if (root && catalog_status_apply(root, s) > 0 &&
            (text = json_object_to_json_string_length(
                     root, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &n)) &&
            (body = strndup(text, n))) {
                free(c->body);
                c->body = body;
                c->body_len = n;
                changed = true;
                catalog_changed(c);
        }
        json_object_put(root);
        return changed;
}

static void loading_clear(Catalog *c) {
        json_object_put(c->loading);
        c->loading = json_object_new_object();
}

static void pending_clear(Catalog *c) {
        for (size_t i = 0; i < c->n_pending; i++)
                catalog_status_done(&c->pending[i]);
        c->pending = mfree(c->pending);
        c->n_pending = 0;
}

/* A status change, from the feed or from a forwarded load's answer: in the snapshot at once, and again on
 * the answer of a read under way, which may be older. */
static void catalog_apply(Catalog *c, CatalogStatus *s) {
        bool applied = snapshot_apply(c, s);

        /* a load's answer counts only while the list still says unloaded: events may have overtaken it */
        if (!s->only_unloaded || applied)
                loading_note(c, s->key, s->status, s->percent);
        if (c->fetch) {
                CatalogStatus *p = reallocarray(c->pending, c->n_pending + 1, sizeof(CatalogStatus));
                if (p) {
                        c->pending = p;
                        c->pending[c->n_pending++] = *s;
                        *s = (CatalogStatus){};
                }
        }
}

/* The snapshot is the host's own answer again: loading progress is kept only for what it lists as
 * loading, and what it lists as loading is known to load. */
static void loading_sync(Catalog *c) {
        json_tokener *tok;
        json_object *root = NULL, *list;
        _cleanup_strv_free_ char **loading = NULL;

        if (c->body && (tok = json_tokener_new())) {
                root = json_tokener_parse_ex(tok, c->body, (int)MIN(c->body_len, (size_t)INT32_MAX));
                json_tokener_free(tok);
        }
        if (root && json_object_object_get_ex(root, "data", &list) &&
            json_object_is_type(list, json_type_array))
                for (size_t i = 0; i < json_object_array_length(list); i++) {
                        json_object *e = json_object_array_get_idx(list, i), *id, *st, *v;
                        if (json_object_object_get_ex(e, "id", &id) &&
                            json_object_is_type(id, json_type_string) &&
                            json_object_object_get_ex(e, "status", &st) &&
                            json_object_object_get_ex(st, "value", &v) &&
                            json_object_is_type(v, json_type_string) &&
                            streq(json_object_get_string(v), "loading"))
                                (void)strv_extend(&loading, json_object_get_string(id));
                }
        json_object_put(root);
        {
                _cleanup_strv_free_ char **gone = NULL;
                json_object_object_foreach(c->loading, k, v) {
                        (void)v;
                        if (!strv_contains(loading, k))
                                (void)strv_extend(&gone, k);
                }
                STRV_FOREACH (k, gone)
                        json_object_object_del(c->loading, *k);
        }
        STRV_FOREACH (k, loading)
                loading_note(c, *k, "loading", -1);
}

/* The /models read */

static void fetch_finished(Catalog *c, bool ok) {
        bool first = !c->first_done;

        c->fetch = NULL;
        c->first_done = true;
        if (ok) {
                _cleanup_free_ char *old = TAKE_PTR(c->body);
                size_t old_len = c->body_len;
                c->body_len = buffer_size(&c->fetch_body);
                c->body = strndup(buffer_peek(&c->fetch_body), c->body_len);
                /* a periodic read that brings the same bytes changes nothing */
                if (!old || !c->body || old_len != c->body_len || memcmp(old, c->body, old_len) != 0)
                        catalog_changed(c);
                /* the answer may be older than the events that came while it was under way */
                for (size_t i = 0; i < c->n_pending; i++)
                        (void)snapshot_apply(c, &c->pending[i]);
                loading_sync(c);
                strv_free(c->ids);
                c->ids = c->body ? snapshot_ids(c->body, c->body_len, true) : NULL;
                if (c->fetch_engine >= 0 && c->fetch_engine == c->engine_up) {
                        _cleanup_strv_free_ char **ids = snapshot_ids(c->body, c->body_len, false);
                        char ***slot = &c->keys[c->fetch_engine];
                        if (ids && !strv_equal(ids, *slot)) {
                                strv_free(*slot);
                                *slot = TAKE_PTR(ids);
                                catalog_changed(c);
                                if (c->cb->on_keys_learned)
                                        c->cb->on_keys_learned(c, (size_t)c->fetch_engine, c->userdata);
                        }
                }
        }
        pending_clear(c);
        buffer_done(&c->fetch_body);
        if (c->again) {
                c->again = false;
                catalog_fetch(c);
        }
        if (!c->fetch)
                c->changed = false;
        if (first || !c->changed)
                catalog_ready_changed(c);
}

static int fetch_on_headers(Upstream *u, const UpstreamResponse *resp, void *userdata) {
        Catalog *c = userdata;
        c->fetch_status = resp->status;
        return 0;
}

static int fetch_on_body(Upstream *u, const char *p, size_t n, void *userdata) {
        Catalog *c = userdata;
        if (buffer_size(&c->fetch_body) + n > CATALOG_BODY_MAX)
                return -1;
        return buffer_append(&c->fetch_body, p, n);
}

static void fetch_on_complete(Upstream *u, void *userdata) {
        Catalog *c = userdata;
        _cleanup_strv_free_ char **ids = NULL;
        bool ok = c->fetch_status == 200 &&
                  (ids = snapshot_ids(buffer_peek(&c->fetch_body), buffer_size(&c->fetch_body), false));

        if (!ok)
                log_debug("host %s: GET /models answered %d%s", c->conf.host->name, c->fetch_status,
                          c->fetch_status == 200 ? ", not a model list" : "");
        catalog_report_http(c, NULL);
        fetch_finished(c, ok);
}

static void fetch_on_error(Upstream *u, int error, bool started, void *userdata) {
        Catalog *c = userdata;

        log_debug("host %s: GET /models failed: %s", c->conf.host->name, upstream_strerror(error));
        /* an engine that runs but does not answer makes the host down (SPEC §6); so does a plain host */
        if (c->conf.n_engines == 0 || c->engine_up >= 0)
                catalog_report_http(c, upstream_strerror(error));
        fetch_finished(c, false);
}

static const UpstreamCallbacks fetch_callbacks = {
        .on_headers = fetch_on_headers,
        .on_body = fetch_on_body,
        .on_complete = fetch_on_complete,
        .on_error = fetch_on_error,
};

static void catalog_fetch(Catalog *c) {
        const HttpUrl *url = catalog_url(c);
        Buffer req = {};
        int r;

        if (c->fetch) {
                c->again = true;
                return;
        }
        c->last_refresh = catalog_now(c);
        if (!url) {
                /* no engine runs: nothing to read, nothing listed but the learned keys */
                if (c->body)
                        catalog_changed(c);
                c->body = mfree(c->body);
                c->body_len = 0;
                strv_free(c->ids);
                c->ids = NULL;
                loading_clear(c);
                c->first_done = true;
                c->changed = false;
                catalog_ready_changed(c);
                return;
        }
        c->fetch_status = 0;
        c->fetch_engine = c->engine_up;
        pending_clear(c);
        if (http_write_request_head(&req, "GET", url->base_path, "/models", url->authority, "Accept",
                                    "application/json", NULL) < 0) {
                buffer_done(&req);
                return;
        }
        r = upstream_start(c->pool, url, &req, false, &fetch_callbacks, c, &c->fetch);
        buffer_done(&req);
        if (r < 0) {
                c->fetch = NULL;
                fetch_finished(c, false);
                return;
        }
        (void)upstream_set_deadline(c->fetch, CATALOG_FETCH_TIMEOUT_USEC);
}

static int poll_cb(sd_event_source *s, uint64_t usec, void *userdata) {
        Catalog *c = userdata;

        catalog_fetch(c);
        (void)sd_event_source_set_time_relative(s, c->conf.poll_interval);
        (void)sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
        return 0;
}

static int refresh_cb(sd_event_source *s, uint64_t usec, void *userdata) {
        catalog_fetch(userdata);
        return 0;
}

void catalog_refresh(Catalog *c) {
        catalog_fetch(c);
}

void catalog_model_call_done(Catalog *c, const char *model, bool load) {
        const char *key = model ? startswith(model, c->conf.host->name) : NULL;

        if (load && key && *key == '-' && key[1]) {
                CatalogStatus s = {.status = strdup("loading"),
                                   .key = strdup(key + 1),
                                   .percent = -1,
                                   .only_unloaded = true};
                if (s.key && s.status)
                        catalog_apply(c, &s);
                catalog_status_done(&s);
        }
        catalog_fetch(c);
}

/* A feed event said something changed: re-read, but at most once every 2 s. What a status event says is
 * in the snapshot already, so nobody waits for this read. */
static void refresh_from_feed(Catalog *c) {
        usec_t now = catalog_now(c), at = c->last_refresh + CATALOG_FEED_REFRESH_USEC;

        if (now >= at) {
                catalog_fetch(c);
                return;
        }
        if (sd_event_source_get_enabled(c->refresh_timer, NULL) > 0)
                return;
        (void)sd_event_source_set_time(c->refresh_timer, at);
        (void)sd_event_source_set_enabled(c->refresh_timer, SD_EVENT_ONESHOT);
}

void catalog_check_soon(Catalog *c) {
        refresh_from_feed(c);
}

/* The feed */

static void feed_line(Catalog *c, const char *p, size_t n) {
        Buffer out = {};
        _cleanup_free_ char *model = NULL;
        CatalogStatus st;
        bool changes = false;

        if (n > 0 && p[n - 1] == '\r')
                n--;
        if (n < 5 || memcmp(p, "data:", 5) != 0)
                return; /* blank separators, comments, other fields */
        p += 5;
        n -= 5;
        if (n > 0 && *p == ' ')
                p++, n--;
        if (catalog_relabel_event(c->conf.host->name, p, n, &out, &changes, &model) < 0) {
                log_debug("host %s: /models/sse sent something that is not an event, ignoring",
                          c->conf.host->name);
                buffer_done(&out);
                return;
        }
        catalog_feed(c, model, buffer_peek(&out), buffer_size(&out));
        buffer_done(&out);
        if (catalog_status_parse(p, n, &st) >= 0) {
                catalog_apply(c, &st);
                catalog_status_done(&st);
        }
        if (changes)
                refresh_from_feed(c);
}

static void feed_schedule(Catalog *c) {
        c->feed_backoff = c->feed_backoff ? MIN(c->feed_backoff * 2, CATALOG_FEED_RETRY_MAX_USEC)
                                          : CATALOG_FEED_RETRY_MIN_USEC;
        (void)sd_event_source_set_time_relative(c->feed_retry, c->feed_backoff);
        (void)sd_event_source_set_enabled(c->feed_retry, SD_EVENT_ONESHOT);
}

static int feed_on_headers(Upstream *u, const UpstreamResponse *resp, void *userdata) {
        Catalog *c = userdata;

        if (resp->status != 200)
                return -1; /* a host without a feed (an old build): no events, the polls remain */
        c->feed_backoff = 0;
        /* events may have been missed while the feed was away */
        catalog_fetch(c);
        return 0;
}

static int feed_on_body(Upstream *u, const char *p, size_t n, void *userdata) {
        Catalog *c = userdata;

        while (n > 0) {
                const char *nl = memchr(p, '\n', n);
                size_t k = nl ? (size_t)(nl - p) : n;
                if (buffer_size(&c->feed_line) + k > CATALOG_FEED_LINE_MAX)
                        buffer_clear(&c->feed_line); /* an absurd line: dropped */
                else if (buffer_append(&c->feed_line, p, k) < 0)
                        return -1;
                if (!nl)
                        break;
                feed_line(c, buffer_peek(&c->feed_line), buffer_size(&c->feed_line));
                buffer_clear(&c->feed_line);
                p += k + 1;
                n -= k + 1;
        }
        return 0;
}

static void feed_ended(Catalog *c) {
        c->feed = NULL;
        buffer_clear(&c->feed_line);
        if (catalog_url(c))
                feed_schedule(c);
}

static void feed_on_complete(Upstream *u, void *userdata) {
        feed_ended(userdata);
}

static void feed_on_error(Upstream *u, int error, bool started, void *userdata) {
        Catalog *c = userdata;
        log_debug("host %s: /models/sse ended: %s", c->conf.host->name, upstream_strerror(error));
        feed_ended(c);
}

static const UpstreamCallbacks feed_callbacks = {
        .on_headers = feed_on_headers,
        .on_body = feed_on_body,
        .on_complete = feed_on_complete,
        .on_error = feed_on_error,
};

static void feed_connect(Catalog *c) {
        const HttpUrl *url = catalog_url(c);
        Buffer req = {};

        if (c->feed || !url)
                return;
        if (http_write_request_head(&req, "GET", url->base_path, "/models/sse", url->authority, "Accept",
                                    "text/event-stream", NULL) < 0 ||
            upstream_start(c->pool, url, &req, false, &feed_callbacks, c, &c->feed) < 0) {
                c->feed = NULL;
                feed_schedule(c);
        }
        buffer_done(&req);
}

static void feed_stop(Catalog *c) {
        loading_clear(c);
        c->feed = upstream_cancel(c->feed);
        c->feed_backoff = 0;
        buffer_clear(&c->feed_line);
        (void)sd_event_source_set_enabled(c->feed_retry, SD_EVENT_OFF);
}

static int feed_retry_cb(sd_event_source *s, uint64_t usec, void *userdata) {
        feed_connect(userdata);
        return 0;
}

/* Life */

int catalog_new(sd_event *event, UpstreamPool *pool, const CatalogConf *conf, const CatalogCallbacks *cb,
                void *userdata, Catalog **ret) {
        _cleanup_(catalog_freep) Catalog *c = NULL;
        int r;

        c = calloc(1, sizeof(Catalog));
        if (!c)
                return -ENOMEM;
        c->event = event;
        c->pool = pool;
        c->conf = *conf;
        c->cb = cb;
        c->userdata = userdata;
        c->engine_up = -1;
        catalog_changed(c);
        c->keys = calloc(MAX(conf->n_engines, 1u), sizeof(char **));
        c->loading = json_object_new_object();
        if (!c->keys || !c->loading)
                return -ENOMEM;
        r = sd_event_add_time_relative(event, &c->poll_timer, CLOCK_MONOTONIC, 0, 0, poll_cb, c);
        if (r < 0)
                return r;
        r = sd_event_add_time(event, &c->refresh_timer, CLOCK_MONOTONIC, 0, 0, refresh_cb, c);
        if (r < 0)
                return r;
        r = sd_event_add_time(event, &c->feed_retry, CLOCK_MONOTONIC, 0, 0, feed_retry_cb, c);
        if (r < 0)
                return r;
        (void)sd_event_source_set_enabled(c->poll_timer, SD_EVENT_OFF);
        (void)sd_event_source_set_enabled(c->refresh_timer, SD_EVENT_OFF);
        (void)sd_event_source_set_enabled(c->feed_retry, SD_EVENT_OFF);
        *ret = TAKE_PTR(c);
        return 0;
}

Catalog *catalog_free(Catalog *c) {
        if (!c)
                return NULL;
        upstream_cancel(c->fetch);
        upstream_cancel(c->feed);
        buffer_done(&c->fetch_body);
        buffer_done(&c->feed_line);
        sd_event_source_disable_unref(c->poll_timer);
        sd_event_source_disable_unref(c->refresh_timer);
        sd_event_source_disable_unref(c->feed_retry);
        for (size_t i = 0; c->keys && i < c->conf.n_engines; i++)
                strv_free(c->keys[i]);
        free(c->keys);
        free(c->body);
        strv_free(c->ids);
        pending_clear(c);
        json_object_put(c->loading);
        free(c);
        return NULL;
}

void catalog_start(Catalog *c, bool host_down) {
        /* a host with engines is read once its bus says which engine runs */
        if (c->conf.n_engines > 0) {
                if (host_down)
                        return;
        } else
                feed_connect(c);
        (void)sd_event_source_set_enabled(c->poll_timer, SD_EVENT_ONESHOT);
}

void catalog_engine_up(Catalog *c, size_t i) {
        feed_stop(c);
        pending_clear(c); /* another engine's events */
        c->engine_up = (ssize_t)i;
        c->changed = true;
        catalog_fetch(c);
        feed_connect(c);
        (void)sd_event_source_set_time_relative(c->poll_timer, c->conf.poll_interval);
        (void)sd_event_source_set_enabled(c->poll_timer, SD_EVENT_ONESHOT);
}

void catalog_engine_down(Catalog *c) {
        if (c->engine_up < 0 && c->first_done)
                return;
        feed_stop(c);
        c->engine_up = -1;
        catalog_fetch(c); /* clears the snapshot: nothing runs */
}

void catalog_host_state(Catalog *c, const char *down_reason) {
        char line[512];
        int n;

        if (down_reason)
                n = snprintf(line, sizeof(line), ": host %s down: %s\n\n", c->conf.host->name, down_reason);
        else
                n = snprintf(line, sizeof(line), ": host %s up\n\n", c->conf.host->name);
        catalog_feed(c, /* model= */ NULL, line, (size_t)MIN((size_t)n, sizeof(line) - 1));
        if (!down_reason && c->conf.n_engines == 0) {
                catalog_fetch(c);
                feed_connect(c);
        }
        if (down_reason && !c->first_done) {
                c->first_done = true;
                catalog_ready_changed(c);
        }
}

bool catalog_ready(const Catalog *c) {
        return c->first_done && !c->changed;
}

int catalog_load_progress(const Catalog *c, const char *key) {
        json_object *p;

        if (!key || !json_object_object_get_ex(c->loading, key, &p))
                return -ENOENT;
        return json_object_get_int(p) >= 0 ? json_object_get_int(p) : -ENODATA;
}

const char *catalog_snapshot(const Catalog *c, size_t *ret_size) {
        *ret_size = c->body_len;
        return c->body;
}

int catalog_lists(const Catalog *c, const char *key) {
        if (!c->ids)
                return -ENODATA;
        return strv_contains(c->ids, key);
}

ssize_t catalog_engine_for_key(const Catalog *c, const char *key) {
        for (size_t i = 0; i < c->conf.n_engines; i++)
                if (strv_contains(c->keys[i], key))
                        return (ssize_t)i;
        return -1;
}

char *const *catalog_engine_keys(const Catalog *c, size_t i) {
        return i < c->conf.n_engines ? c->keys[i] : NULL;
}

void catalog_set_engine_keys(Catalog *c, size_t i, char **keys) {
        assert(i < c->conf.n_engines);
        strv_free(c->keys[i]);
        c->keys[i] = keys;
        catalog_changed(c);
}

void catalog_set_conf(Catalog *c, const CatalogConf *conf) {
        /* the learned keys are per engine: a reload that keeps the host keeps its engines, in order */
        assert(conf->n_engines == c->conf.n_engines);
        c->conf = *conf;
}

uint64_t catalog_generation(const Catalog *c) {
        return c->generation;
}
