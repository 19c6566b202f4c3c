/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* rule:exit-status-words: an engine unit's exit status in words, where systemd (not the engine) set it.
 * systemd's service manager exits the forked child with one of the EXIT_* codes of its exit-status.h
 * (200 and up) when it could not get as far as exec()ing ExecStart=: the number alone ("exit status 203")
 * sends an operator to a man page, the words say what to fix. */

#include <stddef.h>

/* systemd's name (EXEC, CHDIR, …) and what it means for an engine unit, or NULL for a status systemd does
 * not set (the engine's own: llama-server's 1, a shell's 127). */
const char *exit_status_name(int status);
const char *exit_status_words(int status);

/* ", exit status 203/EXEC: the engine's ExecStart= binary was not found or not executable" for systemd's
 * codes, ", exit status 1" for the others, into buf (always terminated). */
void exit_status_describe(int status, char *buf, size_t l);
