/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Files in modelgated's state directory: $STATE_DIRECTORY (the unit's StateDirectory=; the first of a
 * ':'-separated list), else $XDG_STATE_HOME/modelgate, else ~/.local/state/modelgate. */

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* The path of name there (malloc'ed), or NULL when none can be told. */
char *state_file_path(const char *name);
/* Writes data to path so that a crash leaves the old file or the new one, never a mix: a temporary file
 * of a fresh name beside it (mkostemp: never a planted link), with the old file's owner, group and mode,
 * fsync, rename. Creates missing parent directories. */
int state_file_write(const char *path, const char *data, size_t n);
/* The same; a file that does not exist yet gets new_gid ((gid_t)-1: the writer's) and new_mode (0: 0600).
 * Without sync, no fsync(): the file survives the process, not the machine. */
int state_file_write_full(const char *path, const char *data, size_t n, gid_t new_gid, mode_t new_mode,
                          bool sync);
/* Takes an exclusive lock for a read-modify-write of path (on ".<name>.lock" beside it); returns the fd
 * that holds it, or a negative errno. */
int state_file_lock(const char *path);
