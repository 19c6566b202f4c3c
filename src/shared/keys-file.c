/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <assert.h>
#include <errno.h>
#include <grp.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shared/fileio.h"
#include "shared/keys-file.h"
#include "shared/state-file.h"
#include "shared/string-util.h"
#include "shared/strv.h"

int sha256(const void *data, size_t n, uint8_t ret[static SHA256_DIGEST_SIZE]) {
        unsigned len = 0;

        if (EVP_Digest(data, n, ret, &len, EVP_sha256(), /* impl= */ NULL) != 1 || len != SHA256_DIGEST_SIZE)
                return -EIO;
        return 0;
}

void sha256_to_hex(const uint8_t digest[static SHA256_DIGEST_SIZE], char ret[static SHA256_HEX_SIZE]) {
        static const char hex[] = "0123456789abcdef";

        for (size_t i = 0; i < SHA256_DIGEST_SIZE; i++) {
                ret[2 * i] = hex[digest[i] >> 4];
                ret[2 * i + 1] = hex[digest[i] & 15];
        }
        ret[2 * SHA256_DIGEST_SIZE] = 0;
}

int sha256_hex(const void *data, size_t n, char ret[static SHA256_HEX_SIZE]) {
        uint8_t digest[SHA256_DIGEST_SIZE];
        int r;

        r = sha256(data, n, digest);
        if (r < 0)
                return r;
        sha256_to_hex(digest, ret);
        return 0;
}

void keys_file_done(KeysFile *f) {
        for (size_t i = 0; i < f->n_keys; i++)
                free(f->keys[i].tier);
        free(f->keys);
        strv_free(f->lines);
        free(f->path);
        *f = (KeysFile){};
}

static int hex_digit(char c) {
        return c >= '0' && c <= '9'   ? c - '0'
               : c >= 'a' && c <= 'f' ? c - 'a' + 10
               : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                      : -1;
}

static int keys_file_push_line(KeysFile *f, const char *line, size_t n) {
        char **l = reallocarray(f->lines, f->n_lines + 2, sizeof(char *));

        if (!l)
                return -ENOMEM;
        f->lines = l;
        l[f->n_lines] = strndup(line, n);
        if (!l[f->n_lines])
                return -ENOMEM;
        l[++f->n_lines] = NULL;
        return 0;
}

static int keys_file_push_key(KeysFile *f, const uint8_t digest[static SHA256_DIGEST_SIZE], const char *tier,
                              size_t line) {
        KeyEntry *k = reallocarray(f->keys, f->n_keys + 1, sizeof(KeyEntry));

        if (!k)
                return -ENOMEM;
        f->keys = k;
        k[f->n_keys] = (KeyEntry){.tier = strdup(tier), .line = line};
        if (!k[f->n_keys].tier)
                return -ENOMEM;
        memcpy(k[f->n_keys++].digest, digest, SHA256_DIGEST_SIZE);
        return 0;
}

_printf_(2, 3) static int keys_file_error(char **ret_error, const char *fmt, ...) {
        va_list ap;
        char *s;
        int k;

        va_start(ap, fmt);
        k = vasprintf(&s, fmt, ap);
        va_end(ap);
        if (k < 0)
                return -ENOMEM;
        *ret_error = s;
        return -EBADMSG;
}

/* Line i of f as an entry, if it is one (1), a comment or blank (0), or -EBADMSG. */
static int keys_file_parse_line(KeysFile *f, size_t i, char **ret_error) {
        _cleanup_free_ char *copy = strdup(f->lines[i]);
        uint8_t digest[SHA256_DIGEST_SIZE];
        char *l, *tier;
        int r;

        if (!copy)
                return -ENOMEM;
        l = strstrip(copy);
        if (!*l || *l == '#')
                return 0;
        tier = strpbrk(l, " \t");
        if (!tier || tier - l != 2 * SHA256_DIGEST_SIZE)
                return keys_file_error(ret_error, "%s:%zu: not '<sha256 hex of a key> <tier>'", f->path,
                                       i + 1);
        *tier++ = 0;
        tier = strstrip(tier);
        for (size_t j = 0; j < SHA256_DIGEST_SIZE; j++) {
                int hi = hex_digit(l[2 * j]), lo = hex_digit(l[2 * j + 1]);
                if (hi < 0 || lo < 0)
                        return keys_file_error(ret_error, "%s:%zu: '%s' is not a SHA-256 in hex", f->path,
                                               i + 1, l);
                digest[j] = (uint8_t)(hi << 4 | lo);
        }
        r = keys_file_push_key(f, digest, tier, i);
        return r < 0 ? r : 1;
}

int keys_file_parse(const char *path, const char *text, KeysFile *ret, char **ret_error) {
        _cleanup_(keys_file_done) KeysFile f = {};
        int r;

        f.path = strdup(path);
        if (!f.path)
                return -ENOMEM;
        /* a last line without its '\n' is a line; the '\n' is added back when written */
        for (const char *p = text; *p;) {
                size_t n = strcspn(p, "\n");
                r = keys_file_push_line(&f, p, n);
                if (r < 0)
                        return r;
                p += n + (p[n] == '\n');
        }
        for (size_t i = 0; i < f.n_lines; i++) {
                r = keys_file_parse_line(&f, i, ret_error);
                if (r < 0)
                        return r;
        }
        *ret = f;
        f = (KeysFile){};
        return 0;
}

int keys_file_read(const char *path, KeysFile *ret, char **ret_error) {
        _cleanup_free_ char *text = NULL;
        size_t n;
        int r;

        r = read_full_file(path, &text, &n);
        if (r < 0)
                return r;
        return keys_file_parse(path, text, ret, ret_error);
}

int keys_file_add(KeysFile *f, const char *note, const uint8_t digest[static SHA256_DIGEST_SIZE],
                  const char *tier) {
        assert(f);
        _cleanup_free_ char *comment = NULL, *entry = NULL;
        char hex[SHA256_HEX_SIZE];
        int r;

        sha256_to_hex(digest, hex);
        if (asprintf(&entry, "%s %s", hex, tier) < 0)
                return -ENOMEM;
        if (note) {
                if (asprintf(&comment, "# %s", note) < 0)
                        return -ENOMEM;
                r = keys_file_push_line(f, comment, strlen(comment));
                if (r < 0)
                        return r;
        }
        r = keys_file_push_line(f, entry, strlen(entry));
        if (r < 0)
                return r;
        return keys_file_push_key(f, digest, tier, f->n_lines - 1);
}

void keys_file_remove(KeysFile *f, size_t i) {
        assert(f);
        size_t line = f->keys[i].line;

        free(f->keys[i].tier);
        memmove(f->keys + i, f->keys + i + 1, (f->n_keys - i - 1) * sizeof(KeyEntry));
        f->n_keys--;
        free(f->lines[line]);
        memmove(f->lines + line, f->lines + line + 1, (f->n_lines - line) * sizeof(char *));
        f->n_lines--;
        for (size_t k = 0; k < f->n_keys; k++)
                if (f->keys[k].line > line)
                        f->keys[k].line--;
}

int keys_file_write(const KeysFile *f, const char *reader_group) {
        assert(f);
        _cleanup_free_ char *text = NULL;
        size_t size = 0;
        /* a file root makes for the system service: the service's user reads it through its group (a file
         * that exists keeps whatever owner and mode it has) */
        struct group *g = reader_group ? getgrnam(reader_group) : NULL;
        FILE *m;
        int r;

        m = open_memstream(&text, &size);
        if (!m)
                return -ENOMEM;
        for (size_t i = 0; i < f->n_lines; i++)
                fprintf(m, "%s\n", f->lines[i]);
        if (fclose(m) != 0)
                return -ENOMEM;
        r = state_file_write_full(f->path, text ?: "", size, g ? g->gr_gid : (gid_t)-1, g ? 0640 : 0,
                                  /* sync= */ true);
        if (r >= 0 && reader_group && !g)
                return -ESRCH;
        return r;
}
