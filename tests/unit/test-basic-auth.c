/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* rule:ui-key: the key in a browser's Basic credentials */
#include <stdlib.h>
#include <string.h>

#include "modelgated/access/basic-auth.h"
#include "tests.h"

#define LIT(s) ((Span){"" s, sizeof(s) - 1})

static char *key_of(Span v) {
        char *k = NULL;
        int r = basic_auth_key(v, &k);
        ASSERT_TRUE(r >= 0);
        ASSERT_TRUE((r == 1) == (k != NULL));
        return k;
}

TEST(the_password_is_the_key_else_the_user_name) {
        char *k;
        /* "ops:mg-secret", "mg-secret:", ":mg-secret", "a:b:c" */
        ASSERT_STREQ(k = key_of(LIT("Basic b3BzOm1nLXNlY3JldA==")), "mg-secret");
        free(k);
        ASSERT_STREQ(k = key_of(LIT("Basic bWctc2VjcmV0Og==")), "mg-secret");
        free(k);
        ASSERT_STREQ(k = key_of(LIT("basic   Om1nLXNlY3JldA==  ")), "mg-secret");
        free(k);
        ASSERT_STREQ(k = key_of(LIT("Basic YTpiOmM=")), "b:c");
        free(k);
}

TEST(what_is_not_basic_credentials_gives_no_key) {
        ASSERT_TRUE(key_of(LIT("Bearer mg-secret")) == NULL);
        ASSERT_TRUE(key_of(LIT("Basic")) == NULL);
        ASSERT_TRUE(key_of(LIT("Basic ")) == NULL);
        ASSERT_TRUE(key_of(LIT("Basic Og==")) == NULL);                 /* ":" */
        ASSERT_TRUE(key_of(LIT("Basic bWctc2VjcmV0")) == NULL);         /* no ':' */
        ASSERT_TRUE(key_of(LIT("Basic b3BzOm1nLXNlY3JldA=")) == NULL);  /* bad length */
        ASSERT_TRUE(key_of(LIT("Basic b3Bz=m1nLXNlY3JldA==")) == NULL); /* '=' inside */
        ASSERT_TRUE(key_of(LIT("Basic b3BzOm1n*XNlY3JldA==")) == NULL); /* not base64 */
        ASSERT_TRUE(key_of(LIT("Basic YTpiAGM=")) == NULL);             /* "a:b\0c" */
        ASSERT_TRUE(key_of(LIT("Basic YToKYg==")) == NULL);             /* "a:\nb" */
        ASSERT_TRUE(key_of((Span){}) == NULL);
}

TESTS_MAIN
