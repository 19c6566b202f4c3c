/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Daily counts shared through Redis, on a connection of its own (redis-conn.h): see shared-counts.h. */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "modelgated/access/redis-conn.h"
#include "modelgated/access/shared-counts.h"
#include "shared/count-map.h"
#include "shared/log.h"
#include "shared/macro.h"
#include "shared/random-util.h"
#include "shared/state-file.h"
#include "shared/time-util.h"

#define RETRY_FIRST_USEC (100 * USEC_PER_MSEC)
#define RETRY_MAX_USEC (2 * USEC_PER_SEC)
/* a peer that broke the protocol (a reply to no command, one not understood) may do it again on every
 * connection: it is tried again after 2 s, then 4, … up to a minute, and not sooner until a connection of
 * it has served HEALTHY_USEC */
#define RETRY_BROKEN_MAX_USEC (60 * USEC_PER_SEC)
#define HEALTHY_USEC (60 * USEC_PER_SEC)
#define PENDING_SAVE_DELAY_USEC (2 * USEC_PER_SEC)

/* One change, atomically. KEYS: the caller's requests and tokens of the day, the day's markers of the
 * instance; ARGV: marker, requests, tokens, cap, tokens cap, expiry, admission. A marker seen already: the
 * change was applied before its answer was lost, and is not again (2). An admission passes only while the
 * requests stay within the cap and the tokens under theirs (0: refused, nothing counted). */
static const char SCRIPT[] =
        "local r = tonumber(redis.call('GET', KEYS[1]) or '0') "
        "local t = tonumber(redis.call('GET', KEYS[2]) or '0') "
        "if redis.call('SISMEMBER', KEYS[3], ARGV[1]) == 1 then return {2, r, t} end "
        "if ARGV[7] == '1' and (r + tonumber(ARGV[2]) > tonumber(ARGV[4]) or t >= tonumber(ARGV[5])) then "
        "return {0, r, t} end "
        "r = redis.call('INCRBY', KEYS[1], ARGV[2]) "
        "t = redis.call('INCRBY', KEYS[2], ARGV[3]) "
        "redis.call('SADD', KEYS[3], ARGV[1]) "
        "for i = 1, 3 do redis.call('EXPIREAT', KEYS[i], ARGV[6]) end "
        "return {1, r, t}";

struct SharedCounts {
        sd_event *event;
        char *target, *password;
        RedisConn *conn;
        sd_event_source *retry, *save_timer;
        bool up, said_down, freeing, dirty, saved_empty;
        usec_t backoff, up_since;
        char *warning;
        CountOutbox outbox;
        char cache_day[16];
        CountMap *cache_requests, *cache_tokens; /* the store's last answer, by caller, of cache_day */
        const SharedCountsCallbacks *cb;
        void *userdata;
};

static void pending_changed(SharedCounts *s) {
        if (s->dirty && sd_event_source_get_enabled(s->save_timer, NULL) > 0)
                return;
        s->dirty = true;
        (void)sd_event_source_set_time_relative(s->save_timer, PENDING_SAVE_DELAY_USEC);
        (void)sd_event_source_set_enabled(s->save_timer, SD_EVENT_ONESHOT);
}

static void pending_save(SharedCounts *s) {
        _cleanup_free_ char *path = state_file_path("redis-pending.json");
        json_object *root;
        int r;

        s->dirty = false;
        if (!path || (s->outbox.n_ops == 0 && s->saved_empty))
                return;
        root = count_outbox_to_json(&s->outbox);
        const char *t = root ? json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN) : NULL;
        r = t ? state_file_write(path, t, strlen(t)) : -ENOMEM;
        if (r < 0)
                log_warning_errno(r, "Cannot write %s, counts owed to Redis may be lost: %m", path);
        else
                s->saved_empty = s->outbox.n_ops == 0;
        json_object_put(root);
}

static int save_cb(sd_event_source *src, uint64_t usec, void *userdata) {
        pending_save(userdata);
        return 0;
}

static void pending_load(SharedCounts *s) {
        _cleanup_free_ char *path = state_file_path("redis-pending.json");
        json_object *root = path ? json_object_from_file(path) : NULL;

        if (root && json_object_is_type(root, json_type_object) &&
            count_outbox_from_json(&s->outbox, root) < 0)
                log_warning("Out of memory: some of the counts owed to Redis in %s are not read", path);
        else if (!root && path && access(path, F_OK) >= 0)
                log_warning("%s cannot be read (%s): the counts it owed Redis are not sent", path,
                            json_util_get_last_err() ?: "not JSON");
        if (s->outbox.n_ops > 0)
                log_info("%zu change(s) of the daily counts owed to Redis, from %s", s->outbox.n_ops, path);
        s->saved_empty = s->outbox.n_ops == 0;
        json_object_put(root);
}

static void cache_set(SharedCounts *s, const char *day, const char *caller, uint64_t requests,
                      uint64_t tokens) {
        if (!streq(s->cache_day, day)) {
                if (strcmp(day, s->cache_day) < 0)
                        return; /* an answer for a day that has ended */
                s->cache_requests = count_map_free(s->cache_requests);
                s->cache_tokens = count_map_free(s->cache_tokens);
                snprintf(s->cache_day, sizeof(s->cache_day), "%s", day);
        }
        uint64_t *r = count_map_get(&s->cache_requests, caller, true),
                 *t = count_map_get(&s->cache_tokens, caller, true);
        if (r)
                *r = requests;
        if (t)
                *t = tokens;
}

void shared_counts_view(SharedCounts *s, const char *day, const char *caller, uint64_t *ret_requests,
                        uint64_t *ret_tokens) {
        uint64_t r = 0, t = 0, *p;

        count_outbox_owed(&s->outbox, day, caller, ret_requests, ret_tokens);
        if (streq(s->cache_day, day)) {
                if ((p = count_map_get(&s->cache_requests, caller, false)))
                        r = *p;
                if ((p = count_map_get(&s->cache_tokens, caller, false)))
                        t = *p;
        }
        *ret_requests += r;
        *ret_tokens += t;
}

static void say_down(SharedCounts *s, const char *why) {
        s->up = false;
        if (s->said_down)
                return;
        s->said_down = true;
        free(s->warning);
        if (asprintf(&s->warning, "Redis at %s is unreachable (%s): daily counts are counted locally",
                     s->target, why) < 0)
                s->warning = NULL;
        log_warning("Redis at %s is unreachable (%s): counting locally; what is counted meanwhile is sent "
                    "when it answers",
                    s->target, why);
        if (!s->freeing)
                s->cb->state_changed(s->userdata);
}

static void retry_later(SharedCounts *s, bool broken) {
        usec_t now = now_usec(CLOCK_MONOTONIC);

        if (s->freeing || sd_event_source_get_enabled(s->retry, NULL) > 0)
                return;
        if (s->up_since > 0 && now - s->up_since >= HEALTHY_USEC)
                s->backoff = 0; /* it served a while: this is a failure of its own */
        s->up_since = 0;
        if (broken)
                s->backoff = MIN(MAX(s->backoff * 2, (usec_t)RETRY_MAX_USEC), (usec_t)RETRY_BROKEN_MAX_USEC);
        else
                s->backoff = s->backoff ? MIN(s->backoff * 2, (usec_t)RETRY_MAX_USEC) : RETRY_FIRST_USEC;
        (void)sd_event_source_set_time_relative(s->retry, s->backoff);
        (void)sd_event_source_set_enabled(s->retry, SD_EVENT_ONESHOT);
}

static const char *op_reply(const redisReply *reply, void *conn_userdata, void *userdata);

static void op_send(SharedCounts *s, CountOp *op) {
        _cleanup_free_ char *k1 = count_key(op->day, op->caller, "requests", NULL),
                            *k2 = count_key(op->day, op->caller, "tokens", NULL),
                            *k3 = count_key(op->day, NULL, NULL, op->instance);
        char seq[32], requests[32], tokens[32], cap[32], tokens_cap[32], expiry[32];

        if (!k1 || !k2 || !k3)
                return; /* out of memory: sent with the next flush */
        snprintf(seq, sizeof(seq), "%llu", (unsigned long long)op->seq);
        snprintf(requests, sizeof(requests), "%llu", (unsigned long long)op->requests);
        snprintf(tokens, sizeof(tokens), "%llu", (unsigned long long)op->tokens);
        /* no cap: a number no count reaches, as Lua's numbers are doubles */
        snprintf(cap, sizeof(cap), op->cap == UINT64_MAX ? "1e300" : "%llu", (unsigned long long)op->cap);
        snprintf(tokens_cap, sizeof(tokens_cap), op->tokens_cap == UINT64_MAX ? "1e300" : "%llu",
                 (unsigned long long)op->tokens_cap);
        snprintf(expiry, sizeof(expiry), "%lld", (long long)count_day_expiry(op->day));
        const char *argv[] = {"EVAL",
                              SCRIPT,
                              "3",
                              k1,
                              k2,
                              k3,
                              seq,
                              requests,
                              tokens,
                              cap,
                              tokens_cap,
                              expiry,
                              op->admission ? "1" : "0"};
        if (redis_conn_send(s->conn, (int)ELEMENTSOF(argv), argv, op_reply, op) >= 0)
                op->sent = true;
}

static void flush(SharedCounts *s) {
        size_t n = 0;

        LIST_FOREACH (ops, op, s->outbox.ops)
                if (!op->sent && redis_conn_ready(s->conn)) {
                        op_send(s, op);
                        n++;
                }
        if (s->said_down) {
                s->said_down = false;
                s->warning = mfree(s->warning);
                log_notice("Redis at %s answers again: %zu change(s) of the daily counts sent", s->target,
                           n);
        } else if (n > 0)
                log_info("Redis at %s answers: %zu change(s) of the daily counts owed from before sent",
                         s->target, n);
        s->cb->state_changed(s->userdata);
}

/* A change's answer, or NULL when the connection went first. A wrong one is the connection's error (the
 * peer's words are input like a host's), never the process's: redis-conn.h */
static const char *op_reply(const redisReply *reply, void *conn_userdata, void *userdata) {
        SharedCounts *s = conn_userdata;
        CountOp *op = userdata;
        void *waiter = op->userdata;
        bool admission = op->admission;
        uint64_t requests, tokens;
        const char *why = NULL;

        if (reply && (reply->type != REDIS_REPLY_ARRAY || reply->elements != 3 ||
                      reply->element[0]->type != REDIS_REPLY_INTEGER ||
                      reply->element[1]->type != REDIS_REPLY_INTEGER ||
                      reply->element[2]->type != REDIS_REPLY_INTEGER))
                /* an error (LOADING while a restarted Redis reads its file) is said once, as the store being
                 * away; it ends the connection, and an error of the moment passes with the next one */
                why = reply->type == REDIS_REPLY_ERROR ? reply->str : "an answer not understood";
        if (!reply || why) {
                /* not known applied: sent again with its marker, and never merged into */
                if (why)
                        say_down(s, why);
                count_outbox_lost(&s->outbox, op);
                pending_changed(s);
                if (admission && waiter && !s->freeing) {
                        shared_counts_view(s, op->day, op->caller, &requests, &tokens);
                        s->cb->admitted(waiter, SHARED_LOST, requests, tokens, s->userdata);
                }
                return why;
        }
        long long applied = reply->element[0]->integer;
        requests = (uint64_t)MAX(reply->element[1]->integer, 0LL);
        tokens = (uint64_t)MAX(reply->element[2]->integer, 0LL);
        cache_set(s, op->day, op->caller, requests, tokens);
        count_outbox_drop(&s->outbox, op);
        pending_changed(s);
        if (admission && waiter)
                s->cb->admitted(waiter, applied ? SHARED_ADMITTED : SHARED_REFUSED, requests, tokens,
                                s->userdata);
        return NULL;
}

static void conn_ready(void *userdata) {
        SharedCounts *s = userdata;

        s->up = true;
        s->up_since = now_usec(CLOCK_MONOTONIC);
        flush(s);
}

static void conn_failed(const char *why, bool broken, void *userdata) {
        SharedCounts *s = userdata;

        s->up = false;
        if (s->freeing)
                return;
        say_down(s, why);
        retry_later(s, broken);
}

static const RedisConnCallbacks conn_callbacks = {
        .ready = conn_ready,
        .failed = conn_failed,
};

static int retry_cb(sd_event_source *src, uint64_t usec, void *userdata) {
        SharedCounts *s = userdata;
        redis_conn_connect(s->conn);
        return 0;
}

int shared_counts_new(sd_event *event, const char *target, const char *password,
                      const SharedCountsCallbacks *cb, void *userdata, SharedCounts **ret) {
        SharedCounts *s = calloc(1, sizeof(SharedCounts));
        uint8_t id[8];

        if (!s)
                return -ENOMEM;
        random_seed(id, sizeof(id));
        char instance[17];
        for (size_t i = 0; i < sizeof(id); i++)
                snprintf(instance + 2 * i, 3, "%02x", id[i]);
        count_outbox_init(&s->outbox, instance);
        s->event = sd_event_ref(event);
        s->cb = cb;
        s->userdata = userdata;
        s->target = strdup(target);
        s->password = password ? strdup(password) : NULL;
        if (!s->target || (password && !s->password) ||
            redis_conn_new(event, target, password, &conn_callbacks, s, &s->conn) < 0 ||
            sd_event_add_time_relative(event, &s->retry, CLOCK_MONOTONIC, 0, 0, retry_cb, s) < 0 ||
            sd_event_add_time_relative(event, &s->save_timer, CLOCK_MONOTONIC, 0, 0, save_cb, s) < 0) {
                shared_counts_free(s);
                return -ENOMEM;
        }
        (void)sd_event_source_set_enabled(s->retry, SD_EVENT_OFF);
        (void)sd_event_source_set_enabled(s->save_timer, SD_EVENT_OFF);
        pending_load(s);
        redis_conn_connect(s->conn);
        *ret = s;
        return 0;
}

SharedCounts *shared_counts_free(SharedCounts *s) {
        if (!s)
                return NULL;
        s->freeing = true;
        redis_conn_free(s->conn); /* what is in flight is lost: owed, and written */
        if (s->save_timer)
                pending_save(s);
        sd_event_source_disable_unref(s->retry);
        sd_event_source_disable_unref(s->save_timer);
        sd_event_unref(s->event);
        count_outbox_done(&s->outbox);
        count_map_free(s->cache_requests);
        count_map_free(s->cache_tokens);
        free(s->target);
        if (s->password)
                explicit_bzero(s->password, strlen(s->password));
        free(s->password);
        free(s->warning);
        free(s);
        return NULL;
}

bool shared_counts_is(const SharedCounts *s, const char *target, const char *password) {
        return streq(s->target, target) && streq_ptr(s->password, password);
}

bool shared_counts_up(const SharedCounts *s) {
        return s->up;
}

const char *shared_counts_warning(const SharedCounts *s) {
        return s->warning;
}

CountOp *shared_counts_admit(SharedCounts *s, const char *day, const char *caller, uint64_t cap,
                             uint64_t tokens_cap, void *waiter) {
        CountOp *op = count_outbox_admit(&s->outbox, day, caller, cap, tokens_cap);

        if (!op)
                return NULL;
        if (s->up && redis_conn_ready(s->conn))
                op_send(s, op);
        if (!op->sent) { /* out of memory: the caller decides alone */
                count_outbox_drop(&s->outbox, op);
                return NULL;
        }
        op->userdata = waiter;
        pending_changed(s);
        return op;
}

void shared_counts_forget_waiter(SharedCounts *s, CountOp *op) {
        op->userdata = NULL;
}

int shared_counts_add(SharedCounts *s, const char *day, const char *caller, uint64_t requests,
                      uint64_t tokens) {
        CountOp *op = count_outbox_add(&s->outbox, day, caller, requests, tokens);

        if (!op)
                return -ENOMEM;
        if (s->up && redis_conn_ready(s->conn) && !op->sent)
                op_send(s, op);
        pending_changed(s);
        return 0;
}
