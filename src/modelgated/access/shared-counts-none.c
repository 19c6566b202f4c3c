/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A build without hiredis: no shared counts (config_verify() refuses [Access] Redis=), and nothing of
 * Redis linked. See shared-counts.h. */

#include <errno.h>

#include "modelgated/access/shared-counts.h"

int shared_counts_new(sd_event *event, const char *target, const char *password,
                      const SharedCountsCallbacks *cb, void *userdata, SharedCounts **ret) {
        return -EOPNOTSUPP;
}

SharedCounts *shared_counts_free(SharedCounts *s) {
        return NULL;
}

bool shared_counts_is(const SharedCounts *s, const char *target, const char *password) {
        return false;
}

bool shared_counts_up(const SharedCounts *s) {
        return false;
}

const char *shared_counts_warning(const SharedCounts *s) {
        return NULL;
}

void shared_counts_view(SharedCounts *s, const char *day, const char *caller, uint64_t *ret_requests,
                        uint64_t *ret_tokens) {
        *ret_requests = *ret_tokens = 0;
}

CountOp *shared_counts_admit(SharedCounts *s, const char *day, const char *caller, uint64_t cap,
                             uint64_t tokens_cap, void *waiter) {
        return NULL;
}

void shared_counts_forget_waiter(SharedCounts *s, CountOp *op) {
}

int shared_counts_add(SharedCounts *s, const char *day, const char *caller, uint64_t requests,
                      uint64_t tokens) {
        return -EOPNOTSUPP;
}
