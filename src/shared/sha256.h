/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* SHA-256 (FIPS 180-4), for API keys: they are stored and compared as digests, so the keys file and the
 * usage counters never hold a key. */

#include <stddef.h>
#include <stdint.h>

#define SHA256_DIGEST_SIZE 32

void sha256(const void *data, size_t n, uint8_t out[SHA256_DIGEST_SIZE]);
/* 64 lowercase hex digits and a NUL */
void sha256_hex(const void *data, size_t n, char out[2 * SHA256_DIGEST_SIZE + 1]);
