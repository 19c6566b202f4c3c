/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* rule:probe: which requests are probes, and the line between a probe that may start its engine and one
 * that is answered at once. */

#include <string.h>

#include "modelgated/api/path-table.h"
#include "modelgated/sched/probe.h"
#include "tests.h"

static Span S_(const char *s) {
        return (Span){s, strlen(s)};
}

/* the table of paths' probes: get, a GET (or HEAD); else a POST */
static bool probe_path(Span path, bool get) {
        return path_route_probe(path_route_lookup(path), get ? HTTP_GET : HTTP_POST) &&
               path_route_probe(path_route_lookup(path), get ? HTTP_HEAD : HTTP_PUT);
}

TEST(probe_paths_by_method) {
        const char *post[] = {"/v1/messages/count_tokens",
                              "/v1/responses/input_tokens",
                              "/responses/input_tokens",
                              "/v1/chat/completions/input_tokens",
                              "/chat/completions/input_tokens",
                              "/tokenize",
                              "/detokenize",
                              "/apply-template",
                              "/props"};
        for (size_t i = 0; i < ELEMENTSOF(post); i++)
                ASSERT_TRUE(probe_path(S_(post[i]), /* get= */ false));
        ASSERT_TRUE(probe_path(S_("/props"), true));
        ASSERT_TRUE(probe_path(S_("/slots"), true));
        ASSERT_TRUE(!probe_path(S_("/slots"), false)); /* POST /slots/… saves and restores: not a probe */
        ASSERT_TRUE(!probe_path(S_("/tokenize"), true));
        const char * not [] = {"/v1/messages",
                               "/v1/chat/completions",
                               "/v1/responses",
                               "/v1/messages/count_tokens/",
                               "/v1/messages/count_token",
                               "/completion",
                               "/v1/embeddings",
                               "/models/load",
                               ""};
        for (size_t i = 0; i < ELEMENTSOF(not ); i++)
                ASSERT_TRUE(!probe_path(S_(not [i]), false));
}

TEST(a_probe_goes_to_its_engine_only_when_up_and_staying) {
        ASSERT_EQ(probe_decide(&(ProbeView){.up = true, .running = true, .in_flight = 3}), PROBE_SERVE);
        /* a switch away from it is coming: the probe would wait behind it */
        ASSERT_EQ(probe_decide(&(ProbeView){.up = true, .running = true, .switch_pending = true}),
                  PROBE_REFUSE);
}

TEST(a_probe_starts_its_engine_only_on_a_gpu_nobody_uses) {
        ASSERT_EQ(probe_decide(&(ProbeView){}), PROBE_START);
        /* another engine runs, even idle: stopping it is the switch a probe must not make */
        ASSERT_EQ(probe_decide(&(ProbeView){.running = true}), PROBE_REFUSE);
        ASSERT_EQ(probe_decide(&(ProbeView){.running = true, .switch_pending = true}), PROBE_REFUSE);
        /* nothing runs, but a start is under way or requests wait: it would queue behind them */
        ASSERT_EQ(probe_decide(&(ProbeView){.switch_pending = true}), PROBE_REFUSE);
        ASSERT_EQ(probe_decide(&(ProbeView){.waiting = 1}), PROBE_REFUSE);
        ASSERT_EQ(probe_decide(&(ProbeView){.in_flight = 1}), PROBE_REFUSE);
}

TESTS_MAIN
