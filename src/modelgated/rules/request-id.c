/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* rule:request-id */

#include "modelgated/rules/request-id.h"

bool request_id_sane(Span id) {
        if (id.n == 0 || id.n > REQUEST_ID_MAX)
                return false;
        for (size_t i = 0; i < id.n; i++)
                if (id.p[i] <= 0x20 || id.p[i] >= 0x7f)
                        return false;
        return true;
}

/* splitmix64's finalizer: each bit of the input moves half the output's, so that consecutive counters
 * give unrelated ids, and the seed cannot be read back from one without work */
static uint64_t mix(uint64_t z) {
        z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
        return z ^ (z >> 31);
}

void request_id_make(const uint64_t seed[2], uint64_t n, char out[static REQUEST_ID_MADE_LEN + 1]) {
        static const char hex[] = "0123456789abcdef";
        uint64_t w[2] = {mix(seed[0] + n * UINT64_C(0x9e3779b97f4a7c15)),
                         mix(seed[1] ^ mix(n + UINT64_C(0x632be59bd9b4e019)))};

        for (size_t i = 0; i < 32; i++)
                out[i] = hex[(w[i / 16] >> (60 - 4 * (i % 16))) & 0xf];
        out[32] = 0;
}
