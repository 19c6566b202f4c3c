/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* A request's id (rule:request-id): the client's X-Request-Id when it is sane, else one made here, from a
 * per-process random seed and a counter (no system call per request). Pure. */

#include <stdbool.h>
#include <stdint.h>

#include "shared/macro.h"

#define REQUEST_ID_MAX 128
#define REQUEST_ID_MADE_LEN 32 /* 16 bytes, in hex */

/* 1 to REQUEST_ID_MAX visible ASCII characters: nothing that could split a header or a log line */
bool request_id_sane(Span id);
/* A process's ids: the first half, the same for all of them, written once; and the next id's text,
 * counted up in place (as a rule its last digit only) rather than written anew for each request */
typedef struct RequestIdSeed {
        char first[16]; /* seed[0] in hex */
        uint64_t second;
        char next[REQUEST_ID_MADE_LEN]; /* request_id_make(s, n) of the n-th request_id_next() */
} RequestIdSeed;

void request_id_seed_init(RequestIdSeed *s, const uint64_t seed[2]);
/* The n-th id of a process whose seed is s: 32 lowercase hex digits and a NUL into out: seed[0], then
 * seed[1] + n (mod 2^64) */
void request_id_make(const RequestIdSeed *s, uint64_t n, char out[static REQUEST_ID_MADE_LEN + 1]);
/* The next id, the same as request_id_make() with the count of earlier calls as n */
void request_id_next(RequestIdSeed *s, char out[static REQUEST_ID_MADE_LEN + 1]);
