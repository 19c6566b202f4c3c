/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The command that reaches a bus over ssh (rule:ssh-bridge), for Bus=ssh: hosts and modelgatectl --host=. */

/* "[user@]host[:port]" (IPv6 bare or in brackets) split into ssh's "[user@]host" and the port (NULL: none);
 * either return may be NULL to only check. -EINVAL when it is not one. */
int ssh_target_split(const char *spec, char **ret_target, char **ret_port);
/* ssh_command (NULL: "ssh") split into words, ssh's options, the target ("[user@]host[:port]"), and
 * systemd-stdio-bridge with bus_path (quoted for the remote shell) or, when NULL, the remote user's own bus
 * (expanded by it). -EINVAL when the command, the target or bus_path cannot make one. */
int ssh_command_argv(const char *ssh_command, const char *target, const char *bus_path, char ***ret);
/* ssh_command, ssh's options, the target, and the words of remote (each quoted for the remote shell): a
 * command of the host's own run through ssh, as modelgatectl logs runs journalctl there. -EINVAL when a
 * word has a ' in it, or the command or the target cannot make one. */
int ssh_command_run_argv(const char *ssh_command, const char *target, char *const *remote, char ***ret);
