/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Eight bytes of a string looked at as one 64-bit word: the scans that look for the first byte of a kind
 * in request heads, hosts' answers, bodies and log fields. */

#include <stdint.h>

/* c in each byte of a word */
#define WORD_BYTES(c) (UINT64_C(0x0101010101010101) * (c))
/* The bytes of v below n (n <= 0x80), as their high bit. Whether there is one is exact, and so is the
 * lowest one flagged (a borrow flags only bytes above one that is): the first, on a little-endian
 * machine; bytes above it may be flagged when they are not. */
#define WORD_BELOW(v, n) (((v)-WORD_BYTES(n)) & ~(v)&WORD_BYTES(0x80))
/* The bytes of v that are c, as their high bit (as exact as WORD_BELOW()) */
#define WORD_IS(v, c) WORD_BELOW((v) ^ WORD_BYTES(c), 1)
