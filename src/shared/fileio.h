/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stddef.h>

/* Reads a whole file into a NUL-terminated buffer (*ret_size excludes the NUL). 0, -EFBIG (past 16M),
 * -ENOMEM or open()'s and read()'s -errno. */
int read_full_file(const char *path, char **ret, size_t *ret_size);
