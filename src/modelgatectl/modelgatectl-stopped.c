/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* rule:ctl-never-starts: a modelgate that is not running, said as such, with what its socket will do: the
 * service manager of the same bus (the user's, the system's, or the remote host's through -H) knows
 * modelgate.socket, whether it listens, and where. Nothing here starts anything. */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <systemd/sd-bus.h>

#include "modelgatectl/modelgatectl.h"
#include "shared/log.h"
#include "shared/macro.h"
#include "shared/strv.h"

#define SOCKET_UNIT "modelgate.socket"

/* The socket's Listen= addresses, "127.0.0.1:8080, …"; NULL: none or unknown */
static char *socket_listens(sd_bus *bus, const char *path) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        _cleanup_strv_free_ char **l = NULL;
        const char *type, *address;
        int r;

        r = sd_bus_get_property(bus, "org.freedesktop.systemd1", path, "org.freedesktop.systemd1.Socket",
                                "Listen", NULL, &reply, "a(ss)");
        if (r >= 0)
                r = sd_bus_message_enter_container(reply, 'a', "(ss)");
        while (r >= 0 && (r = sd_bus_message_read(reply, "(ss)", &type, &address)) > 0)
                if (strv_extend(&l, address) < 0)
                        return NULL;
        return r < 0 || strv_isempty(l) ? NULL : strv_join(l, ", ");
}

int say_stopped(sd_bus *bus) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        _cleanup_free_ char *load = NULL, *state = NULL, *listens = NULL;
        FILE *out = arg_json ? stderr : stdout; /* --json's stdout stays JSON */
        const char *path;
        int r;

        /* LoadUnit(): an inactive unit may not be loaded yet; loading it starts nothing */
        r = bus ? sd_bus_call_method(bus, "org.freedesktop.systemd1", "/org/freedesktop/systemd1",
                                     "org.freedesktop.systemd1.Manager", "LoadUnit", NULL, &reply, "s",
                                     SOCKET_UNIT)
                : -ENOTCONN;
        if (r >= 0)
                r = sd_bus_message_read(reply, "o", &path);
        if (r >= 0)
                r = sd_bus_get_property_string(bus, "org.freedesktop.systemd1", path,
                                               "org.freedesktop.systemd1.Unit", "LoadState", NULL, &load);
        /* a unit that is not installed loads as not-found, inactive: no modelgate of this instance at all,
         * which the caller says ("no system modelgate … use --user"), not a stopped one */
        if (r >= 0 && !streq(load, "loaded"))
                r = -ENOENT;
        if (r >= 0)
                r = sd_bus_get_property_string(bus, "org.freedesktop.systemd1", path,
                                               "org.freedesktop.systemd1.Unit", "ActiveState", NULL, &state);
        if (r < 0)
                return r; /* no service manager to ask: the caller says what it knows */
        if (STR_IN_SET(state, "active", "activating") && (listens = socket_listens(bus, path)))
                fprintf(out,
                        "modelgate is not running; its socket %s listens on %s and starts it on the next "
                        "request\n",
                        SOCKET_UNIT, listens);
        else
                fprintf(out, "modelgate is not running, and its socket %s is %s: nothing starts it\n",
                        SOCKET_UNIT, state);
        return EXIT_UNREACHABLE;
}
