/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The keys file of [Access] KeysFile= (modelgate.conf(5)): "<sha256 hex of a key> <tier>" lines and '#'
 * comments. Keys are known by their SHA-256 only, so neither this file nor the usage counters ever hold
 * one. modelgated reads the file; modelgatectl key lists, adds and removes entries and keeps every other
 * line as it was. */

#include <stddef.h>
#include <stdint.h>

#include "shared/macro.h"

#define SHA256_DIGEST_SIZE 32
/* 64 lowercase hex digits and a NUL */
#define SHA256_HEX_SIZE (2 * SHA256_DIGEST_SIZE + 1)

/* 0, or -EIO when OpenSSL cannot (out of memory, in practice). */
int sha256(const void *data, size_t n, uint8_t ret[static SHA256_DIGEST_SIZE]);
void sha256_to_hex(const uint8_t digest[static SHA256_DIGEST_SIZE], char ret[static SHA256_HEX_SIZE]);
int sha256_hex(const void *data, size_t n, char ret[static SHA256_HEX_SIZE]);

typedef struct KeyEntry {
        uint8_t digest[SHA256_DIGEST_SIZE];
        char *tier;
        size_t line; /* its index in KeysFile.lines */
} KeyEntry;

typedef struct KeysFile {
        char *path;
        char **lines; /* every line as read, comments and blank ones too, without the '\n' */
        size_t n_lines;
        KeyEntry *keys;
        size_t n_keys;
} KeysFile;

void keys_file_done(KeysFile *f);
/* Reads path into *ret. -ENOENT when it does not exist; -EBADMSG for a line that is no entry, with what is
 * wrong ("path:line: …") in *ret_error; other errors are reading's. */
int keys_file_read(const char *path, KeysFile *ret, char **ret_error);
/* The same for text (up to its first NUL) read from path, which names it in errors. */
int keys_file_parse(const char *path, const char *text, KeysFile *ret, char **ret_error);
/* Appends "# note" (note NULL: none) and the entry. */
int keys_file_add(KeysFile *f, const char *note, const uint8_t digest[static SHA256_DIGEST_SIZE],
                  const char *tier);
/* Removes entry i and its line; other lines stay. */
void keys_file_remove(KeysFile *f, size_t i);
/* Replaces f->path atomically with the lines (state_file_write_full()); the caller holds
 * state_file_lock(). A file made new gets reader_group (unless NULL) as its group and mode 0640; -ESRCH:
 * no such group (the file is written, 0600). */
int keys_file_write(const KeysFile *f, const char *reader_group);
