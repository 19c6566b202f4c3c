/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* ssh's command line for a remote bus: what modelgated runs for Bus=ssh: and modelgatectl for --host=, so
 * that both reach a host the same way. */

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "modelgated/conf/ssh-command.h"
#include "shared/macro.h"
#include "shared/strv.h"

static bool ssh_chars(const char *p, size_t n, const char *extra) {
        if (n == 0 || *p == '-')
                return false;
        for (size_t i = 0; i < n; i++)
                if (!isalnum((unsigned char)p[i]) && !strchr(extra, p[i]))
                        return false;
        return true;
}

/* The characters are allow-listed: the parts reach ssh's command line, and an old client with %r/%h in a
 * ProxyCommand hands them to a shell; none may start with '-' (an option). */
int ssh_target_split(const char *spec, char **ret_target, char **ret_port) {
        const char *at = strrchr(spec, '@'), *hostpart = at ? at + 1 : spec, *host, *port = NULL;
        size_t host_len;

        if (at && !ssh_chars(spec, (size_t)(at - spec), "._-"))
                return -EINVAL;
        if (hostpart[0] == '[') {
                const char *close = strchr(hostpart, ']');
                if (!close || (close[1] && close[1] != ':'))
                        return -EINVAL;
                host = hostpart + 1;
                host_len = (size_t)(close - host);
                port = close[1] ? close + 2 : NULL;
                if (!ssh_chars(host, host_len, ":."))
                        return -EINVAL;
        } else {
                const char *colon = strchr(hostpart, ':');
                if (colon && strchr(colon + 1, ':'))
                        colon = NULL; /* a bare IPv6 address */
                host = hostpart;
                host_len = colon ? (size_t)(colon - hostpart) : strlen(hostpart);
                port = colon ? colon + 1 : NULL;
                if (!ssh_chars(host, host_len, colon || !strchr(hostpart, ':') ? "._-" : ":."))
                        return -EINVAL;
        }
        if (port && (!*port || strlen(port) > 5 || strspn(port, "0123456789") != strlen(port)))
                return -EINVAL;
        if (ret_target &&
            asprintf(ret_target, "%.*s%.*s", at ? (int)(at - spec + 1) : 0, spec, (int)host_len, host) < 0)
                return -ENOMEM;
        if (ret_port && !(*ret_port = port ? strdup(port) : NULL) && port)
                return -ENOMEM;
        return 0;
}

/* ssh_command's words, ssh's options and "-- target": what every command through ssh begins with */
static int ssh_base_argv(const char *ssh_command, const char *target_spec, char ***ret) {
        _cleanup_strv_free_ char **argv = NULL;
        _cleanup_free_ char *target = NULL, *port = NULL;
        int r;

        r = strv_split_words(ssh_command ?: "ssh", &argv);
        if (r < 0)
                return r;
        if (!argv[0])
                return -EINVAL;
        r = ssh_target_split(target_spec, &target, &port);
        if (r < 0)
                return r;
        const char *opts[] = {"-xT", "-oBatchMode=yes", "-oConnectTimeout=10", "-oServerAliveInterval=15",
                              "-oServerAliveCountMax=3"};
        for (size_t i = 0; i < ELEMENTSOF(opts); i++)
                if (strv_extend(&argv, opts[i]) < 0)
                        return -ENOMEM;
        if (port && (strv_extend(&argv, "-p") < 0 || strv_extend(&argv, port) < 0))
                return -ENOMEM;
        /* "--": a host string can never be read as an ssh option */
        if (strv_extend(&argv, "--") < 0 || strv_extend(&argv, target) < 0)
                return -ENOMEM;
        *ret = TAKE_PTR(argv);
        return 0;
}

int ssh_command_argv(const char *ssh_command, const char *target_spec, const char *bus_path, char ***ret) {
        _cleanup_strv_free_ char **argv = NULL;
        _cleanup_free_ char *bridge_bus = NULL;
        int r;

        if (bus_path) {
                if (strchr(bus_path, '\''))
                        return -EINVAL;
                /* quoted for the remote shell, which runs the command ssh sends */
                if (asprintf(&bridge_bus, "--bus-path='%s'", bus_path) < 0)
                        return -ENOMEM;
        } else if (!(bridge_bus = strdup("--bus-path=unix:path=/run/user/$(id -u)/bus")))
                return -ENOMEM;
        r = ssh_base_argv(ssh_command, target_spec, &argv);
        if (r < 0)
                return r;
        /* the bridge logs to ssh's stderr, which is ours, instead of the remote journal */
        if (strv_extend(&argv, "SYSTEMD_LOG_TARGET=console") < 0 ||
            strv_extend(&argv, "systemd-stdio-bridge") < 0 || strv_push(&argv, bridge_bus) < 0)
                return -ENOMEM;
        bridge_bus = NULL;
        *ret = TAKE_PTR(argv);
        return 0;
}

int ssh_command_run_argv(const char *ssh_command, const char *target_spec, char *const *remote,
                         char ***ret) {
        _cleanup_strv_free_ char **argv = NULL;
        int r;

        r = ssh_base_argv(ssh_command, target_spec, &argv);
        if (r < 0)
                return r;
        for (char *const *w = remote; w && *w; w++) {
                _cleanup_free_ char *q = NULL;
                /* each word quoted for the remote shell */
                if (strchr(*w, '\''))
                        return -EINVAL;
                if (asprintf(&q, "'%s'", *w) < 0 || strv_push(&argv, q) < 0)
                        return -ENOMEM;
                q = NULL;
        }
        *ret = TAKE_PTR(argv);
        return 0;
}
