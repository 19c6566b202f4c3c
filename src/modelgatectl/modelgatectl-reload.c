/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* reload: Reload() of a running modelgated. One that exited idle is not running, and a socket that
 * listens for it starts it at the next connection, when it reads the configuration anyway: there is
 * nothing to reload then, which is not a failure (systemctl reload says "not active" for that, and
 * systemctl try-reload-or-restart does nothing). */

#include <stdio.h>
#include <systemd/sd-bus.h>

#include "modelgatectl/modelgatectl.h"
#include "shared/log.h"
#include "shared/macro.h"
#include "shared/strv.h"

/* ActiveState of unit in the instance's manager; NULL when not known */
static char *unit_state(sd_bus *bus, const char *unit) {
        _cleanup_(sd_bus_error_free) sd_bus_error e = SD_BUS_ERROR_NULL;
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        char *state = NULL;
        const char *path;

        if (sd_bus_call_method(bus, "org.freedesktop.systemd1", "/org/freedesktop/systemd1",
                               "org.freedesktop.systemd1.Manager", "GetUnit", &e, &reply, "s", unit) < 0 ||
            sd_bus_message_read(reply, "o", &path) < 0 ||
            sd_bus_get_property_string(bus, "org.freedesktop.systemd1", path,
                                       "org.freedesktop.systemd1.Unit", "ActiveState", &e, &state) < 0)
                return NULL;
        return state;
}

/* modelgated is stopped (its service inactive, not merely without the bus name) while its socket listens */
static bool stopped_with_socket(sd_bus *bus) {
        _cleanup_free_ char *socket = unit_state(bus, "modelgate.socket"),
                            *service = unit_state(bus, "modelgate.service");
        return streq_ptr(socket, "active") && service && STR_IN_SET(service, "inactive", "failed");
}

int do_reload(sd_bus *bus) {
        _cleanup_(sd_bus_error_free) sd_bus_error e = SD_BUS_ERROR_NULL;
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        int has_owner = 0, r;

        r = sd_bus_call_method(bus, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                               "NameHasOwner", &e, &reply, "s", BUS_NAME);
        if (r >= 0)
                r = sd_bus_message_read(reply, "b", &has_owner);
        if (r >= 0 && !has_owner && stopped_with_socket(bus)) {
                printf("modelgated is not running (it exited idle, or was stopped); modelgate.socket starts "
                       "it at the next connection, and it reads the configuration then "
                       "('modelgatectl check-config' checks it now)\n");
                return EXIT_OK;
        }
        sd_bus_error_free(&e);
        /* a verb that changes things may start it: a stopped modelgate's start reads the file anew */
        r = call_manager(bus, "Reload", /* start= */ true, &e, NULL);
        if (r < 0)
                return report("Reload failed", &e, r);
        return EXIT_OK;
}
