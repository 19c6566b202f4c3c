/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Replays fuzzer inputs (files or directories of files) through LLVMFuzzerTestOneInput, so that
 * the corpora run as ordinary meson tests without clang. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
        FILE *f = fopen(path, "rb");
        if (!f) {
                perror(path);
                return 1;
        }
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        fseek(f, 0, SEEK_SET);
        uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
        if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
                fclose(f);
                free(buf);
                return 1;
        }
        fclose(f);
        LLVMFuzzerTestOneInput(buf, (size_t)n);
        free(buf);
        printf("%s ok\n", path);
        return 0;
}

int main(int argc, char *argv[]) {
        int r = 0, n = 0;
        for (int i = 1; i < argc; i++) {
                struct stat st;
                if (stat(argv[i], &st) < 0) {
                        perror(argv[i]);
                        return 1;
                }
                if (!S_ISDIR(st.st_mode)) {
                        r |= run_file(argv[i]);
                        n++;
                        continue;
                }
                DIR *d = opendir(argv[i]);
                for (struct dirent *de; d && (de = readdir(d));) {
                        char p[4096];
                        if (de->d_name[0] == '.')
                                continue;
                        snprintf(p, sizeof(p), "%s/%s", argv[i], de->d_name);
                        r |= run_file(p);
                        n++;
                }
                if (d)
                        closedir(d);
        }
        return n == 0 ? 1 : r; /* an empty corpus is a broken test, not a pass */
}
