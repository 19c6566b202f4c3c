/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "modelgated/records/run-record.h"
#include "shared/fileio.h"
#include "shared/time-util.h"
#include "tests.h"

#define WINDOW (5 * USEC_PER_MINUTE)

static char dir[] = "/tmp/test-run-record.XXXXXX";

/* the state directory of these runs: a fresh one, made by the first test */
static void state_directory(void) {
        static bool made = false; /* (the name mkdtemp() picks may have an 'X' of its own) */

        if (!made) {
                ASSERT_TRUE(mkdtemp(dir) != NULL);
                ASSERT_OK(setenv("STATE_DIRECTORY", dir, 1));
                made = true;
        }
}

static unsigned start_at(RunRecord *r, uint64_t now) {
        unsigned unclean = 99;
        state_directory();
        ASSERT_OK(run_record_start(r, now, WINDOW, &unclean));
        return unclean;
}

static char *file_text(void) {
        char *text = NULL, path[64];
        size_t n;
        snprintf(path, sizeof(path), "%s/unclean-runs", dir);
        return read_full_file(path, &text, &n) < 0 ? NULL : text;
}

TEST(runs_that_end_cleanly_never_count) {
        /* idle exits and re-activations, as many as the 50 of the start-limit test, and more */
        for (unsigned i = 0; i < 200; i++) {
                RunRecord r;
                ASSERT_EQ(start_at(&r, 1000 * USEC_PER_SEC + i), 0);
                run_record_clean(&r);
                run_record_done(&r);
        }
        ASSERT_NULL(file_text());
}

TEST(runs_that_crash_count_within_the_window) {
        RunRecord r;
        uint64_t t = 5000 * USEC_PER_SEC;

        for (unsigned i = 0; i < 5; i++) {
                ASSERT_EQ(start_at(&r, t + i * USEC_PER_SEC), i); /* each run before it crashed */
                run_record_done(&r);                              /* a crash: no clean exit */
        }
        /* a clean run between them takes out only its own line */
        ASSERT_EQ(start_at(&r, t + 10 * USEC_PER_SEC), 5);
        run_record_clean(&r);
        run_record_done(&r);
        ASSERT_EQ(start_at(&r, t + 11 * USEC_PER_SEC), 5);
        run_record_done(&r);
        /* past the window, the old crashes are dropped: the one of t+11s still counts */
        ASSERT_EQ(start_at(&r, t + 11 * USEC_PER_SEC + WINDOW - 1), 1);
        /* a clock set back: the starts after now are not counted, and are gone */
        run_record_done(&r);
        ASSERT_EQ(start_at(&r, t), 0);
        run_record_done(&r);
        ASSERT_EQ(start_at(&r, t + USEC_PER_SEC), 1);
        /* a reload after a crash loop: only this run is left */
        run_record_forget(&r);
        run_record_done(&r);
        char *text = file_text();
        ASSERT_TRUE(text != NULL);
        ASSERT_EQ(strchr(text, '\n') - text + 1, (long)strlen(text)); /* one line */
        free(text);
}

TEST(a_torn_file_costs_only_its_memory) {
        RunRecord r;
        char path[64];

        state_directory();
        snprintf(path, sizeof(path), "%s/unclean-runs", dir);
        FILE *f = fopen(path, "we");
        ASSERT_TRUE(f != NULL);
        fputs("12x\n\n999999999999999999999999\n7000000000", f);
        fclose(f);
        ASSERT_EQ(start_at(&r, 7000 * USEC_PER_SEC + 1), 1); /* only the last line is a start */
        run_record_clean(&r);
        run_record_done(&r);
        unlink(path);
}

TEST(cleanup) {
        ASSERT_OK(rmdir(dir));
}

TESTS_MAIN
