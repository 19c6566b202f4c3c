/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The scheduler's tree of waiting requests by arrival, counted: how many wait ahead of one (sched_ahead())
 * without walking them (issue 26). The scheduler's own; nothing else calls it. */

#include "modelgated/sched/sched.h"

/* The tree of waiting requests keyed by seq, with subtree sizes: a treap whose heap order is a hash of
 * seq, not a random number, so that it stays about 2 ln n deep although its keys only grow, and every run
 * is the same. New keys are the largest: they go down the right spine. */

static unsigned tree_size(const SchedRequest *x) {
        return x ? x->tree_size : 0;
}

static uint64_t tree_priority(const SchedRequest *x) {
        uint64_t z = x->seq + UINT64_C(0x9e3779b97f4a7c15); /* splitmix64's finaliser */

        z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
        return z ^ (z >> 31);
}

/* x takes its parent's place, the parent becomes its child */
static void tree_rotate_up(Sched *s, SchedRequest *x) {
        SchedRequest *p = x->tree_parent, *g = p->tree_parent;

        if (p->tree_left == x) {
                if ((p->tree_left = x->tree_right))
                        p->tree_left->tree_parent = p;
                x->tree_right = p;
        } else {
                if ((p->tree_right = x->tree_left))
                        p->tree_right->tree_parent = p;
                x->tree_left = p;
        }
        p->tree_parent = x;
        x->tree_parent = g;
        if (!g)
                s->tree = x;
        else if (g->tree_left == p)
                g->tree_left = x;
        else
                g->tree_right = x;
        x->tree_size = p->tree_size;
        p->tree_size = tree_size(p->tree_left) + tree_size(p->tree_right) + 1;
}

void sched_tree_insert(Sched *s, SchedRequest *r) {
        SchedRequest *p = NULL;

        r->tree_left = r->tree_right = NULL;
        r->tree_size = 1;
        for (SchedRequest *x = s->tree; x; x = x->tree_right) {
                sched_steps++;
                x->tree_size++;
                p = x;
        }
        r->tree_parent = p;
        if (p)
                p->tree_right = r;
        else
                s->tree = r;
        while (r->tree_parent && tree_priority(r) > tree_priority(r->tree_parent)) {
                sched_steps++;
                tree_rotate_up(s, r);
        }
}

void sched_tree_remove(Sched *s, SchedRequest *r) {
        SchedRequest *p;

        /* down to a leaf, the child with the higher priority taking its place each time */
        for (;;) {
                SchedRequest *c = r->tree_left ?: r->tree_right;

                if (r->tree_left && r->tree_right &&
                    tree_priority(r->tree_right) > tree_priority(r->tree_left))
                        c = r->tree_right;
                if (!c)
                        break;
                sched_steps++;
                tree_rotate_up(s, c);
        }
        p = r->tree_parent;
        if (!p)
                s->tree = NULL;
        else if (p->tree_left == r)
                p->tree_left = NULL;
        else
                p->tree_right = NULL;
        for (; p; p = p->tree_parent) {
                sched_steps++;
                p->tree_size--;
        }
        r->tree_parent = NULL;
}

/* How many waiting requests arrived before seq. */
unsigned sched_tree_count_before(const Sched *s, uint64_t seq) {
        unsigned n = 0;

        for (const SchedRequest *x = s->tree; x;) {
                sched_steps++;
                if (x->seq < seq) {
                        n += tree_size(x->tree_left) + 1;
                        x = x->tree_right;
                } else
                        x = x->tree_left;
        }
        return n;
}
