/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* aliases: each alias of the configuration, what each of its targets is doing, and the target a request
 * would get now and why (ListAliases()); a verb that only reads (rule:ctl-never-starts) */

#include <json-c/json.h>
#include <stdio.h>
#include <systemd/sd-bus.h>

#include "modelgatectl/modelgatectl.h"
#include "shared/macro.h"

/* ListAliases: each alias, what each target is doing, and the target a request would get now and why */
static int read_aliases(sd_bus *bus, json_object *aliases, sd_bus_error *e) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        const char *name, *policy, *target, *state, *pick, *why;
        int r;

        r = call_read(bus, OBJECT_PATH, "org.modelgate1.Manager", "ListAliases", e, &reply, NULL);
        if (r >= 0)
                r = sd_bus_message_enter_container(reply, 'a', "(ssa(ss)ss)");
        while (r >= 0 && (r = sd_bus_message_enter_container(reply, 'r', "ssa(ss)ss")) > 0) {
                json_object *a = json_object_new_object(), *targets = json_object_new_array();
                json_object_array_add(aliases, a);
                r = sd_bus_message_read(reply, "ss", &name, &policy);
                if (r >= 0)
                        r = sd_bus_message_enter_container(reply, 'a', "(ss)");
                while (r >= 0 && (r = sd_bus_message_read(reply, "(ss)", &target, &state)) > 0) {
                        json_object *t = json_object_new_object();
                        json_object_object_add(t, "Target", json_object_new_string(target));
                        json_object_object_add(t, "State", json_object_new_string(state));
                        json_object_array_add(targets, t);
                }
                if (r >= 0)
                        r = sd_bus_message_exit_container(reply);
                if (r >= 0)
                        r = sd_bus_message_read(reply, "ss", &pick, &why);
                if (r >= 0)
                        r = sd_bus_message_exit_container(reply);
                if (r < 0)
                        break;
                json_object_object_add(a, "Name", json_object_new_string(name));
                json_object_object_add(a, "Policy", json_object_new_string(policy));
                json_object_object_add(a, "Targets", targets);
                json_object_object_add(a, "Pick", json_object_new_string(pick));
                json_object_object_add(a, "Why", json_object_new_string(why));
        }
        return r;
}

int do_aliases(sd_bus *bus) {
        _cleanup_(sd_bus_error_free) sd_bus_error e = SD_BUS_ERROR_NULL;
        json_object *aliases = json_object_new_array();
        int r;

        r = read_aliases(bus, aliases, &e);
        if (r < 0) {
                json_object_put(aliases);
                return report("Cannot read modelgated's aliases", &e, r);
        }
        if (arg_json)
                print_json(aliases);
        else
                printf("%-16s %-8s %-24s %s\n", "ALIAS", "POLICY", "PICKS NOW", "WHY (TARGET: STATE)");
        for (size_t i = 0; !arg_json && i < json_object_array_length(aliases); i++) {
                json_object *a = json_object_array_get_idx(aliases, i),
                            *targets = json_object_object_get(a, "Targets");
                printf("%-16s %-8s %-24s %s (", json_str(a, "Name"), json_str(a, "Policy"),
                       *json_str(a, "Pick") ? json_str(a, "Pick") : "-", json_str(a, "Why"));
                for (size_t k = 0; k < json_object_array_length(targets); k++) {
                        json_object *t = json_object_array_get_idx(targets, k);
                        printf("%s%s: %s", k ? ", " : "", json_str(t, "Target"), json_str(t, "State"));
                }
                printf(")\n");
        }
        json_object_put(aliases);
        return EXIT_OK;
}
