/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* One Catalog per host, owned by its Host. Two upstream exchanges at most:
 * a /models read (one at a time; a refresh asked for meanwhile runs right
 * after it, so no change is missed) and the /models/sse feed (reconnected
 * with backoff). Both go to the running engine's URL for a host with engines,
 * else to the host's URL. Both are bounded in what they may cost the loop
 * (rule:fair-share: no host's feed or list takes more than its share of a turn): each
 * reads its budget a turn (CATALOG_*_BUDGET), the list is read entry by entry
 * as it arrives (catalog-list.h) up to CATALOG_MODELS_MAX models, and a feed
 * event re-reads and re-writes the one entry it names. */

#include <assert.h>
#include <json-c/json.h>
#include <stdio.h>
#include <string.h>

#include "modelgated/catalog/catalog-event.h"
#include "modelgated/catalog/catalog-list.h"
#include "modelgated/catalog/catalog.h"
#include "modelgated/http/http-writer.h"
#include "modelgated/upstream/upstream.h"
#include "shared/log.h"
#include "shared/strv.h"

#define CATALOG_FETCH_TIMEOUT_USEC (5 * USEC_PER_SEC)
/* A host's /models list is read up to this many models and bytes: a listing merges it whole, and
 * llama.cpp's entries are a few hundred bytes to a few KiB each */
#define CATALOG_MODELS_MAX 2048
#define CATALOG_BODY_MAX (4 * 1024 * 1024)
#define CATALOG_FEED_REFRESH_USEC (2 * USEC_PER_SEC)
#define CATALOG_FEED_RETRY_MIN_USEC (1 * USEC_PER_SEC)
#define CATALOG_FEED_RETRY_MAX_USEC (30 * USEC_PER_SEC)
/* one event is one line; llama.cpp's largest is a loaded model's own entry */
#define CATALOG_FEED_LINE_MAX (64 * 1024)
/* Read from the list or the feed in one turn of the loop: their bytes are JSON to parse, where a relayed
 * answer's are only copied. An event costs more than its bytes of list (two parses and two writes, about
 * 10 µs for 130 bytes here), and a feed may never stop, where a list is read now and then: 2 KiB of feed
 * is about 150 µs of a turn under a flood. */
#define CATALOG_LIST_BUDGET (16 * 1024)
#define CATALOG_FEED_BUDGET (2 * 1024)

struct Catalog {
        sd_event *event;
        UpstreamPool *pool;
        CatalogConf conf;
        const CatalogCallbacks *cb;
        void *userdata;

        CatalogList *list;   /* the last good /models answer, with what the feed said since */
        uint64_t generation; /* catalog_generation() */
        bool first_done;

        Upstream *fetch;
        CatalogList *reading; /* the answer of the read under way, as far as it came */
        int fetch_status;
        int fetch_refused;    /* the read was stopped for what its answer is: -E2BIG, -EBADMSG */
        ssize_t fetch_engine; /* the engine that was up when the read began */
        bool again;
        bool changed;         /* an engine came up and its list is not read yet: merges wait for it */
        bool too_long;        /* the host's list was refused as too long (and that was said, once) */
        json_object *loading; /* key → percent (-1: none said yet), for the models that load */
        sd_event_source *poll_timer, *refresh_timer;
        usec_t last_refresh;

        Upstream *feed;
        Buffer feed_line;
        json_tokener *tok; /* for its events, one after another */
        bool feed_skip;    /* the rest of a line too long to keep */
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

static void loading_clear(Catalog *c) {
        json_object_put(c->loading);
        c->loading = json_object_new_object();
}

/* A status change, from the feed or from a forwarded load's answer: in the snapshot at once, and in the
 * answer of a read under way, which may be older (its entry now, or when it comes). */
static void catalog_apply(Catalog *c, CatalogStatus *s) {
        bool applied = c->list && catalog_list_apply(c->list, s) > 0;

        if (applied)
                catalog_changed(c);
        /* a load's answer counts only while the list still says unloaded: events may have overtaken it */
        if (!s->only_unloaded || applied)
                loading_note(c, s->key, s->status, s->percent);
        /* more models changed during the read than its answer has room for: read once more after it */
        if (c->reading && catalog_list_apply(c->reading, s) == -ENOBUFS)
                c->again = true;
}

/* The snapshot is the host's own answer again: loading progress is kept only for what it lists as
 * loading, and what it lists as loading is known to load. */
static void loading_sync(Catalog *c) {
        _cleanup_strv_free_ char **gone = NULL;

        json_object_object_foreach(c->loading, k, v) {
                (void)v;
                ssize_t i = c->list ? catalog_list_find(c->list, k) : -1;
                if (i < 0 || !catalog_list_loading(c->list, (size_t)i))
                        (void)strv_extend(&gone, k);
        }
        STRV_FOREACH (k, gone)
                json_object_object_del(c->loading, *k);
        for (size_t i = 0; c->list && i < catalog_list_size(c->list); i++)
                if (catalog_list_loading(c->list, i))
                        loading_note(c, catalog_list_id(c->list, i), "loading", -1);
}

/* The /models read */

static void fetch_finished(Catalog *c, bool ok) {
        _cleanup_(catalog_list_freep) CatalogList *read = TAKE_PTR(c->reading);
        bool first = !c->first_done;

        c->fetch = NULL;
        c->first_done = true;
        if (ok) {
                /* a periodic read that brings the same list changes nothing; the events that came while it
                 * was under way are in it already */
                bool changed = !c->list || !catalog_list_equal(c->list, read);
                if (changed)
                        catalog_changed(c);
                catalog_list_free(c->list);
                c->list = TAKE_PTR(read);
                loading_sync(c);
                if (c->too_long)
                        log_info("host %s: /models lists %zu models, no more than the %u modelgate reads; "
                                 "they "
                                 "are listed again",
                                 c->conf.host->name, catalog_list_size(c->list), CATALOG_MODELS_MAX);
                c->too_long = false;
                if (c->fetch_engine >= 0 && c->fetch_engine == c->engine_up) {
                        _cleanup_strv_free_ char **ids = catalog_list_ids(c->list);
                        char ***slot = &c->keys[c->fetch_engine];
                        if (ids && !strv_equal(ids, *slot)) {
                                strv_free(*slot);
                                *slot = TAKE_PTR(ids);
                                catalog_changed(c);
                                if (c->cb->on_keys_learned)
                                        c->cb->on_keys_learned(c, (size_t)c->fetch_engine, c->userdata);
                        }
                        if (c->cb->on_listed)
                                c->cb->on_listed(c, (size_t)c->fetch_engine, changed, c->userdata);
                }
        }
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
        if (resp->status != 200) {
                /* nothing in such an answer is read: it is not the list */
                c->fetch_refused = -EBADMSG;
                return -1;
        }
        return 0;
}

static int fetch_on_body(Upstream *u, const char *p, size_t n, void *userdata) {
        Catalog *c = userdata;
        int r = catalog_list_read(c->reading, p, n);

        /* a list that is too long, or that is not one (or not one we can keep), is not read to its end */
        if (r < 0)
                c->fetch_refused = r == -E2BIG ? r : -EBADMSG;
        return r < 0 ? -1 : 0;
}

/* The host answered, with something that is not a list we keep: a list that is too long is left out as
 * a whole (a part of it would be a guess, rule:down-left-out), and said once; anything else that is not a
 * list keeps the last good one, as before. */
static void fetch_refuse(Catalog *c, int error) {
        if (error == -E2BIG) {
                if (!c->too_long)
                        log_warning("host %s: /models lists more than %u models (or %u MiB), more than "
                                    "modelgate reads of one host; its models are left out of /v1/models "
                                    "until it lists fewer (requests for them are still forwarded)",
                                    c->conf.host->name, CATALOG_MODELS_MAX,
                                    CATALOG_BODY_MAX / (1024 * 1024));
                c->too_long = true;
                if (c->list) {
                        c->list = catalog_list_free(c->list);
                        catalog_changed(c);
                }
        } else
                log_debug("host %s: GET /models answered %d%s", c->conf.host->name, c->fetch_status,
                          c->fetch_status == 200 ? ", not a model list" : "");
        catalog_report_http(c, NULL);
        fetch_finished(c, false);
}

static void fetch_on_complete(Upstream *u, void *userdata) {
        Catalog *c = userdata;
        int r = catalog_list_read_end(c->reading);

        if (r < 0) {
                fetch_refuse(c, r == -ENOMEM ? -EBADMSG : r);
                return;
        }
        catalog_report_http(c, NULL);
        fetch_finished(c, true);
}

static void fetch_on_error(Upstream *u, int error, bool started, void *userdata) {
        Catalog *c = userdata;

        if (c->fetch_refused) {
                fetch_refuse(c, c->fetch_refused);
                return;
        }
        log_debug("host %s: GET /models failed: %s", c->conf.host->name, upstream_strerror(error));
        /* rule:host-down: a running engine that does not answer makes the host down; so does a plain host */
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
                if (c->list)
                        catalog_changed(c);
                c->list = catalog_list_free(c->list);
                loading_clear(c);
                c->first_done = true;
                c->changed = false;
                catalog_ready_changed(c);
                return;
        }
        c->fetch_status = 0;
        c->fetch_refused = 0;
        c->fetch_engine = c->engine_up;
        if (http_write_request_head(&req, "GET", url->base_path, "/models", url->authority, "Accept",
                                    "application/json", NULL) < 0) {
                buffer_done(&req);
                return;
        }
        r = catalog_list_new(CATALOG_MODELS_MAX, CATALOG_BODY_MAX, &c->reading);
        if (r >= 0)
                r = upstream_start(c->pool, url, &req, false, &fetch_callbacks, c, &c->fetch);
        buffer_done(&req);
        if (r < 0) {
                c->fetch = NULL;
                /* a connection that fails at once (a unix socket that is not there) is the host's answer */
                if (r != -ENOMEM && (c->conf.n_engines == 0 || c->engine_up >= 0))
                        catalog_report_http(c, upstream_strerror(r));
                fetch_finished(c, false);
                return;
        }
        upstream_set_read_budget(c->fetch, CATALOG_LIST_BUDGET);
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
        CatalogStatus st = {};
        bool changes = false;

        if (n > 0 && p[n - 1] == '\r')
                n--;
        if (n < 5 || memcmp(p, "data:", 5) != 0)
                return; /* blank separators, comments, other fields */
        p += 5;
        n -= 5;
        if (n > 0 && *p == ' ')
                p++, n--;
        if (catalog_event_read(c->tok, c->conf.host->name, p, n, &out, &changes, &model, &st) < 0) {
                log_debug("host %s: /models/sse sent something that is not an event, ignoring",
                          c->conf.host->name);
                buffer_done(&out);
                return;
        }
        catalog_feed(c, model, buffer_peek(&out), buffer_size(&out));
        buffer_done(&out);
        if (st.key)
                catalog_apply(c, &st);
        catalog_status_done(&st);
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
                if (!c->feed_skip && buffer_size(&c->feed_line) + k > CATALOG_FEED_LINE_MAX) {
                        /* an absurd line: dropped to its end, and said once for this connection */
                        log_warning("host %s: /models/sse sent a line longer than %u KiB, dropping it",
                                    c->conf.host->name, CATALOG_FEED_LINE_MAX / 1024);
                        buffer_clear(&c->feed_line);
                        c->feed_skip = true;
                } else if (!c->feed_skip && buffer_append(&c->feed_line, p, k) < 0)
                        return -1;
                if (!nl)
                        break;
                if (!c->feed_skip)
                        feed_line(c, buffer_peek(&c->feed_line), buffer_size(&c->feed_line));
                c->feed_skip = false;
                buffer_clear(&c->feed_line);
                p += k + 1;
                n -= k + 1;
        }
        return 0;
}

static void feed_ended(Catalog *c) {
        c->feed = NULL;
        buffer_clear(&c->feed_line);
        c->feed_skip = false;
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
        } else
                upstream_set_read_budget(c->feed, CATALOG_FEED_BUDGET);
        buffer_done(&req);
}

static void feed_stop(Catalog *c) {
        loading_clear(c);
        c->feed = upstream_cancel(c->feed);
        c->feed_backoff = 0;
        buffer_clear(&c->feed_line);
        c->feed_skip = false;
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
        c->tok = json_tokener_new();
        if (!c->keys || !c->loading || !c->tok)
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
        catalog_list_free(c->reading);
        buffer_done(&c->feed_line);
        sd_event_source_disable_unref(c->poll_timer);
        sd_event_source_disable_unref(c->refresh_timer);
        sd_event_source_disable_unref(c->feed_retry);
        for (size_t i = 0; c->keys && i < c->conf.n_engines; i++)
                strv_free(c->keys[i]);
        free(c->keys);
        catalog_list_free(c->list);
        json_object_put(c->loading);
        if (c->tok)
                json_tokener_free(c->tok);
        free(c);
        return NULL;
}

void catalog_start(Catalog *c, bool host_down) {
        assert(c);
        /* a host with engines is read once its bus says which engine runs */
        if (c->conf.n_engines > 0) {
                if (host_down)
                        return;
        } else
                feed_connect(c);
        (void)sd_event_source_set_enabled(c->poll_timer, SD_EVENT_ONESHOT);
}

void catalog_engine_up(Catalog *c, size_t i) {
        assert(c);
        feed_stop(c);
        c->engine_up = (ssize_t)i;
        c->changed = true;
        catalog_fetch(c);
        feed_connect(c);
        (void)sd_event_source_set_time_relative(c->poll_timer, c->conf.poll_interval);
        (void)sd_event_source_set_enabled(c->poll_timer, SD_EVENT_ONESHOT);
}

void catalog_engine_down(Catalog *c) {
        assert(c);
        if (c->engine_up < 0 && c->first_done)
                return;
        feed_stop(c);
        c->engine_up = -1;
        catalog_fetch(c); /* clears the snapshot: nothing runs */
}

void catalog_host_state(Catalog *c, const char *down_reason) {
        assert(c);
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
        assert(c);
        return c->first_done && !c->changed;
}

int catalog_load_progress(const Catalog *c, const char *key) {
        assert(c);
        json_object *p;

        if (!key || !json_object_object_get_ex(c->loading, key, &p))
                return -ENOENT;
        return json_object_get_int(p) >= 0 ? json_object_get_int(p) : -ENODATA;
}

const CatalogList *catalog_snapshot(const Catalog *c) {
        assert(c);
        return c->list;
}

int catalog_lists(const Catalog *c, const char *key) {
        assert(c);
        if (!c->list)
                return -ENODATA;
        return catalog_list_has(c->list, key);
}

ssize_t catalog_engine_for_key(const Catalog *c, const char *key) {
        assert(c);
        for (size_t i = 0; i < c->conf.n_engines; i++)
                if (strv_contains(c->keys[i], key))
                        return (ssize_t)i;
        return -1;
}

char *const *catalog_engine_keys(const Catalog *c, size_t i) {
        assert(c);
        return i < c->conf.n_engines ? c->keys[i] : NULL;
}

void catalog_set_engine_keys(Catalog *c, size_t i, char **keys) {
        assert(c);
        assert(i < c->conf.n_engines);
        strv_free(c->keys[i]);
        c->keys[i] = keys;
        catalog_changed(c);
}

void catalog_set_conf(Catalog *c, const CatalogConf *conf) {
        assert(c);
        /* the learned keys are per engine: a reload that keeps the host keeps its engines, in order */
        assert(conf->n_engines == c->conf.n_engines);
        c->conf = *conf;
}

uint64_t catalog_generation(const Catalog *c) {
        assert(c);
        return c->generation;
}
