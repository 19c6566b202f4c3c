/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What an instance owes the shared store (rule:shared-counts): key names, the day's expiry, which changes
 * take in the next ones, and redis-pending.json. */
#include <stdlib.h>

#include "modelgated/access/count-outbox.h"
#include "tests.h"

static const char ID[17] = "0123456789abcdef";

TEST(keys_and_expiry) {
        char *k = count_key("2026-12-03", "k:3f2a9c1e00000000", "requests", NULL);
        ASSERT_STREQ(k, "modelgate:2026-12-03:k:3f2a9c1e00000000:requests");
        free(k);
        k = count_key("2026-12-03", "ip:2001:db8:1:2::/64", "tokens", NULL);
        ASSERT_STREQ(k, "modelgate:2026-12-03:ip:2001:db8:1:2::/64:tokens");
        free(k);
        k = count_key("2026-12-03", NULL, NULL, ID);
        ASSERT_STREQ(k, "modelgate:2026-12-03:ops:0123456789abcdef");
        free(k);
        /* 2026-12-04T00:00:00Z, and the margin */
        ASSERT_EQ(count_day_expiry("2026-12-03"), 1796342400 + COUNT_KEYS_MARGIN);
        ASSERT_EQ(count_day_expiry("2026-12-31") - count_day_expiry("2026-12-30"), 86400);
        ASSERT_EQ(count_day_expiry("yesterday"), -1);
        ASSERT_EQ(count_day_expiry("2026-12-03x"), -1);
}

TEST(changes_merge_until_sent) {
        CountOutbox o;
        uint64_t r, t;

        count_outbox_init(&o, ID);
        CountOp *a = count_outbox_add(&o, "2026-12-03", "k:a", 1, 0);
        ASSERT_TRUE(a);
        ASSERT_TRUE(count_outbox_add(&o, "2026-12-03", "k:a", 0, 40) == a); /* not sent: one change */
        ASSERT_TRUE(count_outbox_add(&o, "2026-12-02", "k:a", 1, 0) != a);  /* another day */
        ASSERT_TRUE(count_outbox_add(&o, "2026-12-03", "k:b", 1, 0) != a);  /* another caller */
        ASSERT_EQ(o.n_ops, 3);
        ASSERT_EQ(a->requests, 1);
        ASSERT_EQ(a->tokens, 40);

        /* sent: its marker is on the wire, nothing goes into it */
        a->sent = true;
        CountOp *b = count_outbox_add(&o, "2026-12-03", "k:a", 0, 5);
        ASSERT_TRUE(b != a);
        ASSERT_TRUE(b->seq != a->seq);
        count_outbox_owed(&o, "2026-12-03", "k:a", &r, &t);
        ASSERT_EQ(r, 1);
        ASSERT_EQ(t, 45);

        /* its answer lost: sent again as it is, never merged into */
        count_outbox_lost(&o, a);
        ASSERT_TRUE(!a->sent && a->fixed);
        count_outbox_drop(&o, b);
        CountOp *c = count_outbox_add(&o, "2026-12-03", "k:a", 0, 7);
        ASSERT_TRUE(c != a);
        ASSERT_EQ(a->tokens, 40);

        /* applied: owed no more */
        count_outbox_drop(&o, a);
        count_outbox_owed(&o, "2026-12-03", "k:a", &r, &t);
        ASSERT_EQ(r, 0);
        ASSERT_EQ(t, 7);
        count_outbox_done(&o);
}

TEST(admissions) {
        CountOutbox o;
        uint64_t r, t;

        count_outbox_init(&o, ID);
        CountOp *a = count_outbox_admit(&o, "2026-12-03", "k:a", 5, UINT64_MAX);
        ASSERT_TRUE(a && a->admission && a->requests == 1 && a->cap == 5);
        /* an admission is applied or refused whole: tokens go into a change of their own */
        CountOp *b = count_outbox_add(&o, "2026-12-03", "k:a", 0, 3);
        ASSERT_TRUE(b != a);
        count_outbox_owed(&o, "2026-12-03", "k:a", &r, &t);
        ASSERT_EQ(r, 1);
        /* lost with the connection: the request was served, and is owed as a plain count */
        count_outbox_lost(&o, a);
        ASSERT_TRUE(!a->admission && a->cap == UINT64_MAX && a->requests == 1 && a->fixed);
        count_outbox_done(&o);
}

TEST(pending_file) {
        CountOutbox o, back;

        count_outbox_init(&o, ID);
        ASSERT_TRUE(count_outbox_add(&o, "2026-12-03", "k:a", 3, 120));
        CountOp *a = count_outbox_admit(&o, "2026-12-03", "ip:192.0.2.1", 10, UINT64_MAX);
        ASSERT_TRUE(a);
        json_object *j = count_outbox_to_json(&o);
        ASSERT_TRUE(j);
        /* a row not of the schema is skipped, the others read */
        json_object *ops;
        ASSERT_TRUE(json_object_object_get_ex(j, "ops", &ops));
        json_object_array_add(ops, json_object_new_string("nonsense"));

        count_outbox_init(&back, "fedcba9876543210");
        ASSERT_OK(count_outbox_from_json(&back, j));
        ASSERT_EQ(back.n_ops, 2);
        CountOp *x = back.ops, *y = x->ops_next;
        /* each keeps the marker it had: the store knows it if it applied it before */
        ASSERT_STREQ(x->instance, ID);
        ASSERT_EQ(x->seq, 1);
        ASSERT_STREQ(x->caller, "k:a");
        ASSERT_EQ(x->requests, 3);
        ASSERT_EQ(x->tokens, 120);
        ASSERT_TRUE(x->fixed && !x->admission);
        ASSERT_EQ(y->seq, 2);
        ASSERT_STREQ(y->caller, "ip:192.0.2.1");
        ASSERT_EQ(y->requests, 1);
        /* what this start adds is a change of its own, with its own marker */
        CountOp *z = count_outbox_add(&back, "2026-12-03", "k:a", 1, 0);
        ASSERT_TRUE(z != x);
        ASSERT_STREQ(z->instance, "fedcba9876543210");
        json_object_put(j);
        count_outbox_done(&o);
        count_outbox_done(&back);
}

TESTS_MAIN
