/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* rule:request-id */
#include <string.h>

#include "modelgated/api/request-id.h"
#include "tests.h"

#define LIT(s) ((Span){"" s, sizeof(s) - 1})

TEST(sane_ids) {
        char l[REQUEST_ID_MAX + 2];
        ASSERT_TRUE(request_id_sane(LIT("a")));
        ASSERT_TRUE(request_id_sane(LIT("req_01HZX-9f/aa:b=c")));
        ASSERT_TRUE(!request_id_sane(LIT("")));
        ASSERT_TRUE(!request_id_sane(LIT("a b")));
        ASSERT_TRUE(!request_id_sane(LIT("a\tb")));
        ASSERT_TRUE(!request_id_sane(LIT("a\x7f")));
        ASSERT_TRUE(!request_id_sane(LIT("caf\xc3\xa9")));
        memset(l, 'x', sizeof(l));
        ASSERT_TRUE(request_id_sane((Span){l, REQUEST_ID_MAX}));
        ASSERT_TRUE(!request_id_sane((Span){l, REQUEST_ID_MAX + 1}));
}

TEST(made_ids_are_hex_distinct_and_sane) {
        uint64_t seed[2] = {0x1234, 0x5678};
        char a[REQUEST_ID_MADE_LEN + 1], b[REQUEST_ID_MADE_LEN + 1];
        RequestIdSeed s;

        request_id_seed_init(&s, seed);
        request_id_make(&s, 0, a);
        ASSERT_STREQ(a, "00000000000012340000000000005678");
        request_id_make(&s, 1, b);
        ASSERT_STREQ(b, "00000000000012340000000000005679");
        ASSERT_EQ(strlen(a), (size_t)REQUEST_ID_MADE_LEN);
        ASSERT_EQ(strspn(a, "0123456789abcdef"), (size_t)REQUEST_ID_MADE_LEN);
        ASSERT_TRUE(strcmp(a, b) != 0);
        ASSERT_TRUE(request_id_sane((Span){a, strlen(a)}));
        /* another process's seed gives another id for the same count */
        seed[1]++;
        request_id_seed_init(&s, seed);
        request_id_make(&s, 0, b);
        ASSERT_TRUE(strcmp(a, b) != 0);
}

/* the ids counted up in place are the ones made from the count, across a carry and the wrap of 2^64 */
TEST(next_ids_are_the_made_ones) {
        uint64_t seeds[][2] = {{0x1234, 0x5678},
                               {7, 0xfe},
                               {0xffffffffffffffffULL, 0xfffffffffffffffdULL},
                               {1, 0x0fffffffffffffffULL},
                               {2, 0x99}};
        char a[REQUEST_ID_MADE_LEN + 1], b[REQUEST_ID_MADE_LEN + 1];
        RequestIdSeed s;

        for (size_t k = 0; k < sizeof(seeds) / sizeof(seeds[0]); k++) {
                request_id_seed_init(&s, seeds[k]);
                for (uint64_t n = 0; n < 300; n++) {
                        request_id_make(&s, n, a);
                        request_id_next(&s, b);
                        ASSERT_STREQ(a, b);
                }
        }
}

TESTS_MAIN
