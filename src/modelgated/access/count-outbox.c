/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The changes of the daily counts owed to the shared store: see count-outbox.h. */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "modelgated/access/count-outbox.h"
#include "shared/macro.h"

void count_outbox_init(CountOutbox *o, const char instance[static 17]) {
        *o = (CountOutbox){.next_seq = 1};
        memcpy(o->instance, instance, 16);
        o->instance[16] = 0;
}

static void op_free(CountOp *op) {
        free(op->caller);
        free(op);
}

void count_outbox_done(CountOutbox *o) {
        LIST_FOREACH_SAFE (ops, op, n, o->ops)
                op_free(op);
        o->ops = NULL;
        o->n_ops = 0;
}

static CountOp *op_new(CountOutbox *o, const char *instance, uint64_t seq, const char *day,
                       const char *caller) {
        CountOp *op = calloc(1, sizeof(CountOp));

        if (!op || !(op->caller = strdup(caller))) {
                free(op);
                return NULL;
        }
        snprintf(op->instance, sizeof(op->instance), "%s", instance);
        snprintf(op->day, sizeof(op->day), "%s", day);
        op->seq = seq;
        op->cap = op->tokens_cap = UINT64_MAX;
        LIST_APPEND(ops, o->ops, op);
        o->n_ops++;
        return op;
}

CountOp *count_outbox_add(CountOutbox *o, const char *day, const char *caller, uint64_t requests,
                          uint64_t tokens) {
        CountOp *last = NULL;

        /* the newest of the caller's: merging into an older one would put a change before one that is
         * already queued after it, which is harmless for sums but makes the order of the file a lie */
        LIST_FOREACH (ops, op, o->ops)
                if (streq(op->day, day) && streq(op->caller, caller))
                        last = op;
        if (!last || last->sent || last->fixed || last->admission) {
                last = op_new(o, o->instance, o->next_seq, day, caller);
                if (!last)
                        return NULL;
                o->next_seq++;
        }
        last->requests += requests;
        last->tokens += tokens;
        return last;
}

CountOp *count_outbox_admit(CountOutbox *o, const char *day, const char *caller, uint64_t cap,
                            uint64_t tokens_cap) {
        CountOp *op = op_new(o, o->instance, o->next_seq, day, caller);

        if (!op)
                return NULL;
        o->next_seq++;
        op->admission = true;
        op->requests = 1;
        op->cap = cap;
        op->tokens_cap = tokens_cap;
        return op;
}

void count_outbox_drop(CountOutbox *o, CountOp *op) {
        LIST_REMOVE(ops, o->ops, op);
        o->n_ops--;
        op_free(op);
}

void count_outbox_lost(CountOutbox *o, CountOp *op) {
        op->sent = false;
        op->fixed = true;
        op->admission = false;
        op->cap = op->tokens_cap = UINT64_MAX;
        op->userdata = NULL;
}

void count_outbox_owed(const CountOutbox *o, const char *day, const char *caller, uint64_t *ret_requests,
                       uint64_t *ret_tokens) {
        uint64_t r = 0, t = 0;

        LIST_FOREACH (ops, op, o->ops)
                if (streq(op->day, day) && streq(op->caller, caller)) {
                        r += op->requests;
                        t += op->tokens;
                }
        *ret_requests = r;
        *ret_tokens = t;
}

char *count_key(const char *day, const char *caller, const char *what, const char *instance) {
        char *k = NULL;

        if ((caller ? asprintf(&k, "modelgate:%s:%s:%s", day, caller, what)
                    : asprintf(&k, "modelgate:%s:ops:%s", day, instance)) < 0)
                return NULL;
        return k;
}

time_t count_day_expiry(const char *day) {
        struct tm tm = {};
        const char *end = strptime(day, "%Y-%m-%d", &tm);

        if (!end || *end)
                return -1;
        return timegm(&tm) + 86400 + COUNT_KEYS_MARGIN;
}

json_object *count_outbox_to_json(const CountOutbox *o) {
        json_object *root = json_object_new_object(), *ops = json_object_new_array();

        if (!root || !ops) {
                json_object_put(root);
                json_object_put(ops);
                return NULL;
        }
        json_object_object_add(root, "ops", ops);
        LIST_FOREACH (ops, op, o->ops) {
                json_object *j = json_object_new_object();
                if (!j || json_object_array_add(ops, j) < 0) {
                        json_object_put(j);
                        json_object_put(root);
                        return NULL;
                }
                json_object_object_add(j, "instance", json_object_new_string(op->instance));
                json_object_object_add(j, "seq", json_object_new_uint64(op->seq));
                json_object_object_add(j, "day", json_object_new_string(op->day));
                json_object_object_add(j, "caller", json_object_new_string(op->caller));
                json_object_object_add(j, "requests", json_object_new_uint64(op->requests));
                json_object_object_add(j, "tokens", json_object_new_uint64(op->tokens));
        }
        return root;
}

static const char *member_string(json_object *o, const char *name) {
        json_object *v;
        return json_object_object_get_ex(o, name, &v) && json_object_is_type(v, json_type_string)
                       ? json_object_get_string(v)
                       : NULL;
}

static bool member_u64(json_object *o, const char *name, uint64_t *ret) {
        json_object *v;
        if (!json_object_object_get_ex(o, name, &v) || !json_object_is_type(v, json_type_int))
                return false;
        *ret = json_object_get_uint64(v);
        return true;
}

int count_outbox_from_json(CountOutbox *o, json_object *root) {
        json_object *ops;

        if (!json_object_object_get_ex(root, "ops", &ops) || !json_object_is_type(ops, json_type_array))
                return 0;
        for (size_t i = 0; i < json_object_array_length(ops); i++) {
                json_object *j = json_object_array_get_idx(ops, i);
                const char *instance = member_string(j, "instance"), *day = member_string(j, "day"),
                           *caller = member_string(j, "caller");
                uint64_t seq, requests, tokens;
                if (!instance || strlen(instance) != 16 || !day || count_day_expiry(day) < 0 || !caller ||
                    !member_u64(j, "seq", &seq) || !member_u64(j, "requests", &requests) ||
                    !member_u64(j, "tokens", &tokens))
                        continue;
                CountOp *op = op_new(o, instance, seq, day, caller);
                if (!op)
                        return -ENOMEM;
                op->requests = requests;
                op->tokens = tokens;
                op->fixed = true;
        }
        return 0;
}
