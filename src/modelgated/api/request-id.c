/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* rule:request-id */

#include <string.h>

#include "modelgated/api/request-id.h"

bool request_id_sane(Span id) {
        if (id.n == 0 || id.n > REQUEST_ID_MAX)
                return false;
        for (size_t i = 0; i < id.n; i++)
                if (id.p[i] <= 0x20 || id.p[i] >= 0x7f)
                        return false;
        return true;
}

static void hex64(uint64_t w, char *out) {
#define R(x) x "0" x "1" x "2" x "3" x "4" x "5" x "6" x "7" x "8" x "9" x "a" x "b" x "c" x "d" x "e" x "f"
        /* each byte's two digits */
        static const char hex2[] = R("0") R("1") R("2") R("3") R("4") R("5") R("6") R("7") R("8") R("9")
                R("a") R("b") R("c") R("d") R("e") R("f");
#undef R
        for (size_t i = 0; i < 8; i++)
                memcpy(out + 2 * i, hex2 + 2 * ((w >> (56 - 8 * i)) & 0xff), 2);
}

/* The process's random half, then its second random word plus the count: unique in the process, and
 * across processes as their seeds are. Not a secret, so no mixing: it is made for every request without
 * an id of its own. */
void request_id_seed_init(RequestIdSeed *s, const uint64_t seed[2]) {
        hex64(seed[0], s->first);
        s->second = seed[1];
        memcpy(s->next, s->first, sizeof(s->first));
        hex64(s->second, s->next + 16);
}

void request_id_make(const RequestIdSeed *s, uint64_t n, char out[static REQUEST_ID_MADE_LEN + 1]) {
        memcpy(out, s->first, sizeof(s->first));
        hex64(s->second + n, out + 16);
        out[32] = 0;
}

void request_id_next(RequestIdSeed *s, char out[static REQUEST_ID_MADE_LEN + 1]) {
        memcpy(out, s->next, REQUEST_ID_MADE_LEN);
        out[REQUEST_ID_MADE_LEN] = 0;
        /* the second half plus one, in hex: a carry past its first digit wraps, as the sum does */
        for (char *d = s->next + REQUEST_ID_MADE_LEN - 1; d >= s->next + 16; d--) {
                if (*d == 'f') {
                        *d = '0';
                        continue;
                }
                *d = *d == '9' ? 'a' : *d + 1;
                return;
        }
}
