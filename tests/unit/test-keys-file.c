/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <stdlib.h>
#include <unistd.h>

#include "shared/fileio.h"
#include "shared/keys-file.h"
#include "tests.h"

#define HEX_X "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"

TEST(parse_keeps_every_line) {
        KeysFile f = {};
        char *error = NULL, hex[SHA256_HEX_SIZE];

        /* blank lines, comments, upper case, blanks around and a last line without '\n' */
        ASSERT_OK(keys_file_parse("keys",
                                  "# mine\n\n  " HEX_X "\tfree \r\n# x\n2D711642B726B04401627CA9FBAC32F5"
                                  "C8530FB1903CC4DB02258717921A4881 pro",
                                  &f, &error));
        ASSERT_NULL(error);
        ASSERT_EQ(f.n_lines, 5);
        ASSERT_EQ(f.n_keys, 2);
        sha256_to_hex(f.keys[1].digest, hex);
        ASSERT_STREQ(hex, HEX_X);
        ASSERT_STREQ(f.keys[0].tier, "free");
        ASSERT_EQ(f.keys[0].line, 2);
        ASSERT_STREQ(f.keys[1].tier, "pro");
        ASSERT_EQ(f.keys[1].line, 4);
        keys_file_done(&f);
}

TEST(parse_errors) {
        KeysFile f = {};
        char *error = NULL;

        ASSERT_EQ(keys_file_parse("k", "# ok\nzz free\n", &f, &error), -EBADMSG);
        ASSERT_STREQ(error, "k:2: not '<sha256 hex of a key> <tier>'");
        free(error);
        ASSERT_EQ(keys_file_parse("k", HEX_X "\n", &f, &error), -EBADMSG);
        ASSERT_STREQ(error, "k:1: not '<sha256 hex of a key> <tier>'");
        free(error);
        ASSERT_EQ(keys_file_parse("k",
                                  "gd711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881 free\n",
                                  &f, &error),
                  -EBADMSG);
        ASSERT_STREQ(error, "k:1: 'gd711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881' is not "
                            "a SHA-256 in hex");
        free(error);
        ASSERT_EQ(f.n_keys, 0);
}

TEST(add_remove_write) {
        char path[] = "/tmp/test-keys-file.XXXXXX", *error = NULL, *text = NULL;
        uint8_t d[SHA256_DIGEST_SIZE];
        KeysFile f = {};
        size_t n;
        int fd = mkstemp(path);

        ASSERT_TRUE(fd >= 0);
        ASSERT_TRUE(write(fd, "# a\n" HEX_X " free", 4 + 64 + 5) == 4 + 64 + 5);
        close(fd);
        ASSERT_OK(keys_file_read(path, &f, &error));
        ASSERT_OK(sha256("y", 1, d));
        ASSERT_OK(keys_file_add(&f, "added today", d, "pro"));
        keys_file_remove(&f, 0);
        ASSERT_EQ(f.n_keys, 1);
        ASSERT_EQ(f.keys[0].line, 2);
        ASSERT_OK(keys_file_write(&f, NULL));
        keys_file_done(&f);
        ASSERT_OK(read_full_file(path, &text, &n));
        ASSERT_STREQ(text, "# a\n# added today\n"
                           "a1fce4363854ff888cff4b8e7875d600c2682390412a8cf79b37d0b11148b0fa pro\n");
        free(text);
        unlink(path);
        ASSERT_EQ(keys_file_read(path, &f, &error), -ENOENT);
}

TEST(sha256_hex_vectors) {
        char h[SHA256_HEX_SIZE];

        ASSERT_OK(sha256_hex("", 0, h));
        ASSERT_STREQ(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        ASSERT_OK(sha256_hex("x", 1, h));
        ASSERT_STREQ(h, HEX_X);
}

TESTS_MAIN
