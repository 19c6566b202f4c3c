/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The switch scheduler's cost per event with many requests waiting (issue 26).
 * bench/schedcost.py builds it against src/modelgated/sched/sched.c of the tree and of an older commit: the
 * API it uses is the same.
 *
 * usage: sched N K    N requests waiting, then K events of each kind
 *
 * The host: engine A is up, past its hold-down, with one stream in flight, so the pending switch cannot
 * start; N requests wait for B, C and A in turn (A's behind the pending switch, until the client of its
 * first request leaves and those of A that came before the next one go). An event is what the
 * daemon does for it: the call, then schedule_cb()'s pass (sched_next() until it has nothing,
 * sched_next_timer()).
 *   arrive     a request arrives, and waits
 *   leave      the client of a waiting request goes away, one picked at random
 *   keepalive  a waiting client's keepalive comment says how many are ahead (sched_ahead())
 * Prints "KIND EVENTS NS_PER_EVENT" for each kind (the thread's CPU time over its K events). Under
 * callgrind (--instr-atstart=no) each kind's events are counted and dumped apart
 * (CALLGRIND_DUMP_STATS_AT("KIND")), the setup not at all. */

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "modelgated/sched/sched.h"

#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#else
#define CALLGRIND_START_INSTRUMENTATION
#define CALLGRIND_ZERO_STATS
#define CALLGRIND_DUMP_STATS_AT(s)
#endif

enum { A, B, C, N_ENGINES };

static Sched s;
static SchedRequest *reqs;
static size_t *waiting, n_waiting; /* indexes into reqs of the waiting ones, for picking one */
static size_t *pos;                /* of each request in waiting */
static size_t n_reqs;
static usec_t now;
static unsigned long long rnd = 88172645463325252ULL;
static volatile unsigned sink;

static size_t pick(size_t n) {
        rnd ^= rnd << 13;
        rnd ^= rnd >> 7;
        rnd ^= rnd << 17;
        return (size_t)(rnd % n);
}

static void unlist(size_t i) {
        size_t last = waiting[--n_waiting];

        waiting[pos[i]] = last;
        pos[last] = pos[i];
}

static void pass(void) {
        SchedAction a;

        while (sched_next(&s, now, &a))
                switch (a.type) {
                case SCHED_WAIT:
                case SCHED_ABANDON:
                        break;
                case SCHED_GO: /* the switch's first client left: A's older than the new first go */
                        unlist((size_t)(a.req - reqs));
                        break;
                default:
                        fprintf(stderr, "unexpected action %d: the setup is wrong\n", a.type);
                        exit(EXIT_FAILURE);
                }
        sink += (unsigned)sched_next_timer(&s, now);
}

static void arrive(void) {
        size_t i = n_reqs++;

        now += USEC_PER_MSEC;
        if (sched_add(&s, now, &reqs[i], (i + 1) % N_ENGINES)) {
                fprintf(stderr, "request %zu went at once: the setup is wrong\n", i);
                exit(EXIT_FAILURE);
        }
        pos[i] = n_waiting;
        waiting[n_waiting++] = i;
        pass();
}

static void leave(void) {
        size_t i = waiting[pick(n_waiting)];

        now += USEC_PER_MSEC;
        unlist(i);
        sched_remove(&s, now, &reqs[i]);
        pass();
}

static void keepalive(void) {
        sink += sched_ahead(&s, &reqs[waiting[pick(n_waiting)]]);
}

static double cpu_ns(void) {
        struct timespec ts;

        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void measure(const char *kind, void (*event)(void), size_t k) {
        double t0, t1;

        CALLGRIND_ZERO_STATS;
        t0 = cpu_ns();
        for (size_t j = 0; j < k; j++)
                event();
        t1 = cpu_ns();
        CALLGRIND_DUMP_STATS_AT(kind);
        printf("%s %zu %.0f\n", kind, k, (t1 - t0) / (double)k);
}

int main(int argc, char *argv[]) {
        SchedConfig config = {.hold_down = 30 * USEC_PER_SEC,
                              .idle_stop = USEC_INFINITY,
                              .wait_budget = 3600 * USEC_PER_SEC};
        SchedAction a;
        size_t n, k;

        if (argc != 3 || (n = strtoul(argv[1], NULL, 10)) == 0 || (k = strtoul(argv[2], NULL, 10)) == 0) {
                fprintf(stderr, "usage: %s N K\n", argv[0]);
                return EXIT_FAILURE;
        }
        reqs = calloc(n + 2 * k + 1, sizeof(SchedRequest));
        waiting = calloc(n + 2 * k + 1, sizeof(size_t));
        pos = calloc(n + 2 * k + 1, sizeof(size_t));
        if (!reqs || !waiting || !pos || sched_init(&s, &config, N_ENGINES) < 0)
                return EXIT_FAILURE;

        /* A comes up for request 0, which streams for the whole run */
        (void)sched_add(&s, now, &reqs[n_reqs++], A);
        if (!sched_next(&s, now, &a) || a.type != SCHED_START)
                return EXIT_FAILURE;
        sched_engine_up(&s, now, A);
        if (!sched_next(&s, now, &a) || a.type != SCHED_GO)
                return EXIT_FAILURE;
        now = 100 * USEC_PER_SEC; /* past the hold-down */
        for (size_t j = 0; j < n; j++)
                arrive();

        CALLGRIND_START_INSTRUMENTATION;
        measure("arrive", arrive, k);
        measure("leave", leave, k);
        measure("keepalive", keepalive, k);
        fprintf(stderr, "%zu waiting at the end\n", n_waiting);
        sched_done(&s);
        free(reqs);
        free(waiting);
        free(pos);
        return sink == 42 ? 2 : EXIT_SUCCESS;
}
