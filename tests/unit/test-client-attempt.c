/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What may follow a failed attempt (client-attempt.h): one case per row of the table (whether the alias's
 * next target and the fallback may take the request, whether the host's probe is asked to look again, how
 * the client hears of it), and the words that pick a row: a connection's errno, a host's refusal. */

#include <errno.h>
#include <string.h>

#include "modelgated/client/client-attempt.h"
#include "tests.h"

static void assert_rule(AttemptFailure f, bool next, AttemptFallback fallback, bool reprobe,
                        AttemptAnswer answer, int status) {
        const AttemptRule *r = attempt_rule(f);
        ASSERT_TRUE(r);
        ASSERT_EQ(r->next_target, next);
        ASSERT_EQ(r->fallback, fallback);
        ASSERT_EQ(r->reprobe, reprobe);
        ASSERT_EQ(r->answer, answer);
        ASSERT_EQ(attempt_status(f), status);
}

TEST(refused_host_down_moves_on_and_answers_503) {
        assert_rule(ATTEMPT_REFUSED, true, ATTEMPT_FALLBACK_YES, false, ATTEMPT_ANSWER_ERROR, 503);
}

TEST(busy_gpu_moves_an_alias_on_but_the_fallback_only_unless_on_busy_no) {
        assert_rule(ATTEMPT_BUSY, true, ATTEMPT_FALLBACK_ON_BUSY, false, ATTEMPT_ANSWER_ERROR, 423);
}

TEST(engine_failed_moves_on_and_answers_with_the_hosts_status) {
        assert_rule(ATTEMPT_ENGINE_FAILED, true, ATTEMPT_FALLBACK_YES, false, ATTEMPT_ANSWER_ERROR, 0);
}

TEST(unreachable_asks_the_probe_to_look_again_and_answers_503) {
        assert_rule(ATTEMPT_UNREACHABLE, true, ATTEMPT_FALLBACK_YES, true, ATTEMPT_ANSWER_ERROR, 503);
}

TEST(broken_connection_asks_the_probe_to_look_again_and_answers_502) {
        assert_rule(ATTEMPT_BROKEN, true, ATTEMPT_FALLBACK_YES, true, ATTEMPT_ANSWER_ERROR, 502);
}

TEST(host_down_by_its_probe_says_nothing_new_of_its_health) {
        assert_rule(ATTEMPT_HOST_DOWN, true, ATTEMPT_FALLBACK_YES, false, ATTEMPT_ANSWER_ERROR, 503);
}

TEST(stalled_is_stuck_not_down_and_answers_504) {
        assert_rule(ATTEMPT_STALLED, true, ATTEMPT_FALLBACK_YES, false, ATTEMPT_ANSWER_ERROR, 504);
}

TEST(not_here_moves_on_or_relays_the_hosts_own_answer) {
        assert_rule(ATTEMPT_NOT_HERE, true, ATTEMPT_FALLBACK_YES, false, ATTEMPT_ANSWER_RELAY, 0);
}

TEST(incomplete_moves_on_while_nothing_reached_the_client_else_ends_the_answer) {
        assert_rule(ATTEMPT_INCOMPLETE, true, ATTEMPT_FALLBACK_YES, false, ATTEMPT_ANSWER_END, 502);
}

TEST(budget_goes_to_the_fallback_only_never_to_the_next_target) {
        assert_rule(ATTEMPT_BUDGET, false, ATTEMPT_FALLBACK_YES, false, ATTEMPT_ANSWER_END, 504);
}

TEST(a_refused_probe_moves_to_the_next_target_never_to_the_fallback) {
        assert_rule(ATTEMPT_PROBE, true, ATTEMPT_FALLBACK_NO, false, ATTEMPT_ANSWER_ERROR, 423);
}

TEST(every_row_has_a_rule_and_a_name_of_its_own) {
        for (AttemptFailure f = 0; f < _ATTEMPT_FAILURE_MAX; f++) {
                ASSERT_TRUE(attempt_rule(f));
                ASSERT_TRUE(attempt_failure_to_string(f));
                for (AttemptFailure g = 0; g < f; g++)
                        ASSERT_TRUE(strcmp(attempt_failure_to_string(f), attempt_failure_to_string(g)) != 0);
        }
        ASSERT_TRUE(!attempt_rule(_ATTEMPT_FAILURE_MAX));
        ASSERT_TRUE(!attempt_failure_to_string(_ATTEMPT_FAILURE_MAX));
}

TEST(a_connections_errno_picks_its_row) {
        ASSERT_EQ(attempt_failure_of_error(-ECONNREFUSED, false), ATTEMPT_UNREACHABLE);
        ASSERT_EQ(attempt_failure_of_error(-EHOSTUNREACH, false), ATTEMPT_UNREACHABLE);
        ASSERT_EQ(attempt_failure_of_error(-ENETUNREACH, false), ATTEMPT_UNREACHABLE);
        ASSERT_EQ(attempt_failure_of_error(-ETIMEDOUT, false), ATTEMPT_UNREACHABLE);
        ASSERT_EQ(attempt_failure_of_error(-EHOSTDOWN, false), ATTEMPT_HOST_DOWN);
        ASSERT_EQ(attempt_failure_of_error(-ETIME, false), ATTEMPT_STALLED);
        ASSERT_EQ(attempt_failure_of_error(ETIME, false), ATTEMPT_STALLED);
        ASSERT_EQ(attempt_failure_of_error(-ECONNRESET, false), ATTEMPT_BROKEN);
        ASSERT_EQ(attempt_failure_of_error(-EPROTO, false), ATTEMPT_BROKEN);
        ASSERT_EQ(attempt_failure_of_error(-ENOMEM, false), ATTEMPT_BROKEN);
        /* once the host's status and headers came, whatever failed broke an answer */
        ASSERT_EQ(attempt_failure_of_error(-ETIME, true), ATTEMPT_INCOMPLETE);
        ASSERT_EQ(attempt_failure_of_error(-EHOSTDOWN, true), ATTEMPT_INCOMPLETE);
        ASSERT_EQ(attempt_failure_of_error(-ECONNREFUSED, true), ATTEMPT_INCOMPLETE);
}

TEST(a_hosts_refusal_picks_its_row_by_status) {
        ASSERT_EQ(attempt_failure_of_refusal(503), ATTEMPT_REFUSED);
        ASSERT_EQ(attempt_failure_of_refusal(423), ATTEMPT_BUSY);
        ASSERT_EQ(attempt_failure_of_refusal(502), ATTEMPT_ENGINE_FAILED);
        ASSERT_EQ(attempt_failure_of_refusal(504), ATTEMPT_ENGINE_FAILED);
}

TESTS_MAIN
