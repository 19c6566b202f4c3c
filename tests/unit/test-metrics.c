/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <time.h>

#include "modelgated/records/metrics.h"
#include "tests.h"

static char *render(Metrics *m) {
        _cleanup_(buffer_done) Buffer b = {};
        ASSERT_TRUE(metrics_render(m, &b) >= 0);
        return strdup(buffer_peek(&b) ?: "");
}

TEST(tokens_by_host_engine_model_and_kind) {
        Metrics *m = metrics_new();
        Usage u = {.in = 812,
                   .cached = 640,
                   .out = 95,
                   .prompt_n = 172,
                   .prompt_ms = 113.9,
                   .predicted_n = 95,
                   .predicted_ms = 2305.8};
        char *t;

        metrics_usage(m, "3090", "fork", "flint-*", &u);
        u = (Usage){.in = 10, .cached = -1, .out = 5, .prompt_n = -1, .predicted_n = -1};
        metrics_usage(m, "3090", "fork", "flint-*", &u);
        /* an answer that said nothing makes no series */
        u = (Usage){.in = -1, .cached = -1, .out = -1, .prompt_n = -1, .predicted_n = -1};
        metrics_usage(m, "a9", "main", "x", &u);
        t = render(m);
        ASSERT_TRUE(strstr(t, "modelgate_tokens_total{host=\"3090\",engine=\"fork\",model=\"flint-*\",kind="
                              "\"prompt\"} 822\n"));
        ASSERT_TRUE(strstr(t, "modelgate_tokens_total{host=\"3090\",engine=\"fork\",model=\"flint-*\",kind="
                              "\"cached\"} 640\n"));
        ASSERT_TRUE(strstr(t, "modelgate_tokens_total{host=\"3090\",engine=\"fork\",model=\"flint-*\",kind="
                              "\"completion\"} 100\n"));
        /* rule:usage-metrics: prefilled is the timings' prompt_n (172); an answer without them nor a cached
         * count says nothing of it */
        ASSERT_TRUE(strstr(t, "modelgate_tokens_total{host=\"3090\",engine=\"fork\",model=\"flint-*\",kind="
                              "\"prefilled\"} 172\n"));
        ASSERT_TRUE(!strstr(t, "host=\"a9\""));
        /* one answer with timings: 1510 t/s prefill (le 2000), 41 t/s decode (le 50) */
        ASSERT_TRUE(strstr(t, "modelgate_prefill_tokens_per_second_bucket{host=\"3090\",engine=\"fork\","
                              "model=\"flint-*\",le=\"1000\"} 0\n"));
        ASSERT_TRUE(strstr(t, "modelgate_prefill_tokens_per_second_bucket{host=\"3090\",engine=\"fork\","
                              "model=\"flint-*\",le=\"2000\"} 1\n"));
        ASSERT_TRUE(strstr(t, "modelgate_decode_tokens_per_second_bucket{host=\"3090\",engine=\"fork\","
                              "model=\"flint-*\",le=\"50\"} 1\n"));
        ASSERT_TRUE(strstr(t, "modelgate_decode_tokens_per_second_count{host=\"3090\",engine=\"fork\",model="
                              "\"flint-*\"} 1\n"));
        free(t);
        metrics_free(m);
}

TEST(queue_switch_build_and_start) {
        Metrics *m = metrics_new();
        usec_t before = now_usec(CLOCK_REALTIME);
        char *t, *p;

        metrics_queued(m, "3090", 0);
        metrics_queued(m, "3090", 7 * USEC_PER_SEC);
        metrics_switch_time(m, "3090", "fork", 4 * USEC_PER_SEC);
        /* rule:prompt-cache: two slots saved (28 MiB in 30 ms), one restored */
        metrics_prompt_cache(m, "3090", "fork", false, 2, 28 << 20, 30 * USEC_PER_MSEC);
        metrics_prompt_cache(m, "3090", "fork", true, 1, 14 << 20, 20 * USEC_PER_MSEC);
        t = render(m);
        ASSERT_TRUE(
                strstr(t, "modelgate_prompt_cache_saved_slots_total{host=\"3090\",engine=\"fork\"} 2\n"));
        ASSERT_TRUE(strstr(
                t, "modelgate_prompt_cache_saved_bytes_total{host=\"3090\",engine=\"fork\"} 29360128\n"));
        ASSERT_TRUE(
                strstr(t, "modelgate_prompt_cache_restored_slots_total{host=\"3090\",engine=\"fork\"} 1\n"));
        ASSERT_TRUE(strstr(t, "modelgate_prompt_cache_restore_seconds_bucket{host=\"3090\",engine=\"fork\","
                              "le=\"0.05\"} 1\n"));
        ASSERT_TRUE(strstr(t, "modelgate_prompt_cache_save_seconds_bucket{host=\"3090\",engine=\"fork\",le="
                              "\"0.01\"} 0\n"));
        ASSERT_TRUE(strstr(t, "modelgate_queued_seconds_bucket{host=\"3090\",le=\"0.005\"} 1\n"));
        ASSERT_TRUE(strstr(t, "modelgate_queued_seconds_bucket{host=\"3090\",le=\"10\"} 2\n"));
        ASSERT_TRUE(strstr(t, "modelgate_queued_seconds_sum{host=\"3090\"} 7.000000\n"));
        ASSERT_TRUE(
                strstr(t, "modelgate_switch_seconds_bucket{host=\"3090\",engine=\"fork\",le=\"2.5\"} 0\n"));
        ASSERT_TRUE(
                strstr(t, "modelgate_switch_seconds_bucket{host=\"3090\",engine=\"fork\",le=\"5\"} 1\n"));
        ASSERT_TRUE(strstr(
                t, "# TYPE modelgate_build_info gauge\nmodelgate_build_info{version=\"" MODELGATE_VERSION
                   "\"} 1\n"));
        ASSERT_TRUE((p = strstr(t, "\nprocess_start_time_seconds ")));
        double started = strtod(p + strlen("\nprocess_start_time_seconds "), NULL);
        ASSERT_TRUE(started <= (double)before / USEC_PER_SEC + 0.001 &&
                    started > (double)before / USEC_PER_SEC - 60);
        free(t);
        metrics_free(m);
}

TESTS_MAIN
