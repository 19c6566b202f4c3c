/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* How a HostBus's connection reaches the service manager: the address of the user or the system bus,
 * or an exec: of ssh running systemd-stdio-bridge on the host (rule:ssh-bridge). sd-bus forks that child;
 * its stderr is a pipe of ours, read line by line and logged prefixed and escaped, so that what a
 * GPU host prints is evidence in our log rather than log lines of its own. The pipe is replaced on
 * each connect and closed with the HostBus. */

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "modelgated/hostbus/host-bus-internal.h"
#include "shared/errno-util.h"
#include "shared/log.h"
#include "shared/strv.h"

static char *address_escape(const char *s) {
        char *r = malloc(strlen(s) * 3 + 1), *p = r;
        if (!r)
                return NULL;
        for (; *s; s++) {
                if ((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
                    strchr("_-/.", *s))
                        *p++ = *s;
                else
                        p += sprintf(p, "%%%02x", (unsigned char)*s);
        }
        *p = 0;
        return r;
}

int host_bus_set_address(HostBus *b, char **ret_reason) {
        assert(b);
        int r;

        switch (b->host->bus_kind) {
        case BUS_LOCAL: {
                const char *a = getenv("DBUS_SESSION_BUS_ADDRESS"), *rt = getenv("XDG_RUNTIME_DIR");
                _cleanup_free_ char *addr = NULL, *e = NULL;
                if (!a) {
                        if (!rt) {
                                *ret_reason = strdup("no user bus (neither DBUS_SESSION_BUS_ADDRESS nor "
                                                     "XDG_RUNTIME_DIR is set)");
                                return -ENOMEDIUM;
                        }
                        e = address_escape(rt);
                        if (!e || asprintf(&addr, "unix:path=%s/bus", e) < 0)
                                return -ENOMEM;
                        a = addr;
                }
                return sd_bus_set_address(b->bus, a);
        }
        case BUS_SYSTEM:
                return sd_bus_set_address(b->bus, getenv("DBUS_SYSTEM_BUS_ADDRESS")
                                                          ?: "unix:path=/run/dbus/system_bus_socket");
        case BUS_SSH: {
                _cleanup_strv_free_ char **argv = NULL;
                r = host_conf_ssh_argv(b->host, &argv);
                if (r < 0)
                        return r;
                return sd_bus_set_exec(b->bus, argv[0], argv);
        }
        }
        return -EINVAL;
}

static void stderr_flush(HostBus *b) {
        char e[4 * sizeof(b->stderr_line) + 8];

        if (b->stderr_len == 0)
                return;
        log_escape(e, sizeof(e), b->stderr_line, b->stderr_len);
        /* ssh names itself ("ssh: connect to host …"): said once, not "ssh: ssh: " */
        bool named = b->host->bus_kind == BUS_SSH && startswith(e, "ssh: ");
        log_warning("host %s: %s%s", b->host->name,
                    named                          ? ""
                    : b->host->bus_kind == BUS_SSH ? "ssh: "
                                                   : "bus: ",
                    e);
        b->stderr_len = 0;
}

void host_bus_stderr_close(HostBus *b) {
        assert(b);
        stderr_flush(b);
        b->stderr_source = sd_event_source_disable_unref(b->stderr_source);
}

static int stderr_cb(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        HostBus *b = userdata;
        char buf[4096];
        ssize_t k = read(fd, buf, sizeof(buf));

        if (k < 0 && ERRNO_IS_TRANSIENT(errno))
                return 0;
        if (k <= 0) {
                /* every writer has gone (the child exited) */
                host_bus_stderr_close(b);
                return 0;
        }
        for (ssize_t i = 0; i < k; i++) {
                if (buf[i] == '\n' || buf[i] == '\r') {
                        stderr_flush(b);
                        continue;
                }
                if (b->stderr_len == sizeof(b->stderr_line))
                        stderr_flush(b);
                b->stderr_line[b->stderr_len++] = buf[i];
        }
        return 0;
}

/* sd_bus_start() forks the ssh child for an exec: address; its stderr is made a pipe of ours for the
 * moment of the fork (the loop is single-threaded, so nothing else writes to fd 2 meanwhile) */
int host_bus_start(HostBus *b) {
        assert(b);
        _cleanup_close_ int saved = -1, rd = -1, wr = -1;
        int p[2], r;

        if (b->host->bus_kind != BUS_SSH)
                return sd_bus_start(b->bus);
        host_bus_stderr_close(b);
        if (pipe2(p, O_CLOEXEC) < 0)
                return sd_bus_start(b->bus);
        rd = p[0];
        wr = p[1];
        (void)fcntl(rd, F_SETFL, O_NONBLOCK);
        saved = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
        if (saved < 0 || dup2(wr, STDERR_FILENO) < 0)
                return sd_bus_start(b->bus);
        r = sd_bus_start(b->bus);
        (void)dup2(saved, STDERR_FILENO);
        if (sd_event_add_io(b->event, &b->stderr_source, rd, EPOLLIN, stderr_cb, b) >= 0) {
                (void)sd_event_source_set_io_fd_own(b->stderr_source, true);
                TAKE_FD(rd);
        }
        return r;
}
