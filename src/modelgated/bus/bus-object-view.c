/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What the objects of org.modelgate1 show that both a property read and PropertiesChanged need: the
 * Manager's totals and its count of warnings, the wall-clock time D-Bus shows for a deadline, and the
 * path of a Host object. Here, below the objects and their signals, so that each of those only calls
 * down to compute the same value the same way. */

#include <assert.h>

#include "modelgated/bus/bus-object-internal.h"
#include "modelgated/access/access.h"
#include "shared/strv.h"

usec_t bus_object_realtime(const BusObject *o, usec_t mono) {
        assert(o);
        if (mono == 0 || mono == USEC_INFINITY)
                return 0;
        return mono + o->realtime_offset;
}

void bus_object_totals(Manager *m, unsigned *in_flight, unsigned *waiting) {
        *in_flight = *waiting = 0;
        for (size_t i = 0; i < manager_n_hosts(m); i++) {
                *in_flight += host_in_flight(manager_host_at(m, i));
                *waiting += host_waiting(manager_host_at(m, i));
        }
}

unsigned bus_object_n_warnings(Manager *m) {
        unsigned n = manager_refusal(m) ? 1 : 0;
        if (manager_config(m)->access.redis && manager_access(m) && access_shared_warning(manager_access(m)))
                n++;
        for (size_t i = 0; i < manager_n_hosts(m); i++)
                n += (unsigned)strv_length(host_warnings(manager_host_at(m, i)));
        return n;
}

char *bus_object_host_path(const Host *h) {
        char *p = NULL;
        return sd_bus_path_encode(HOST_PREFIX, host_conf(h)->name, &p) < 0 ? NULL : p;
}
