/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* engines: every host's engines in one table, as ollama ps and llama-swap's list show models: each
 * engine's unit, its state, and the models it lists with theirs (the running engine's from its list now;
 * another's as learned when it last ran; its Models= globs when it never ran). One ListHosts() and one
 * ListEngines() per host. */

#include <json-c/json.h>
#include <stdio.h>
#include <systemd/sd-bus.h>

#include "modelgatectl/modelgatectl.h"
#include "shared/macro.h"
#include "shared/strv.h"

/* host's ListEngines() appended to rows as objects */
static int read_engines(sd_bus *bus, const char *host, const char *path, json_object *rows,
                        sd_bus_error *e) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        const char *name, *unit, *state, *model, *status;
        int r;

        r = call_read(bus, path, "org.modelgate1.Host", "ListEngines", e, &reply, NULL);
        if (r >= 0)
                r = sd_bus_message_enter_container(reply, 'a', "(sssasa(ss))");
        while (r >= 0 && (r = sd_bus_message_enter_container(reply, 'r', "sssasa(ss)")) > 0) {
                _cleanup_strv_free_ char **globs = NULL;
                json_object *o = json_object_new_object(), *models = json_object_new_array(),
                            *patterns = json_object_new_array();

                json_object_array_add(rows, o);
                r = sd_bus_message_read(reply, "sss", &name, &unit, &state);
                if (r >= 0)
                        r = sd_bus_message_read_strv(reply, &globs);
                if (r >= 0)
                        r = sd_bus_message_enter_container(reply, 'a', "(ss)");
                while (r >= 0 && (r = sd_bus_message_read(reply, "(ss)", &model, &status)) > 0) {
                        json_object *m = json_object_new_object();
                        json_object_object_add(m, "Name", json_object_new_string(model));
                        json_object_object_add(m, "Status", json_object_new_string(status));
                        json_object_array_add(models, m);
                }
                if (r >= 0)
                        r = sd_bus_message_exit_container(reply);
                if (r >= 0)
                        r = sd_bus_message_exit_container(reply);
                STRV_FOREACH (g, globs)
                        json_object_array_add(patterns, json_object_new_string(*g));
                json_object_object_add(o, "Host", json_object_new_string(host));
                json_object_object_add(o, "Engine", json_object_new_string(r >= 0 ? name : ""));
                json_object_object_add(o, "Unit", json_object_new_string(r >= 0 ? unit : ""));
                json_object_object_add(o, "State", json_object_new_string(r >= 0 ? state : ""));
                json_object_object_add(o, "Models", models);
                json_object_object_add(o, "ModelPatterns", patterns);
        }
        return r;
}

/* "laguna-xs (loaded), qwen3-8b": a status shown where it is not the plain one; the globs when nothing
 * was ever listed */
static void print_models(json_object *row) {
        json_object *models = json_object_object_get(row, "Models"),
                    *patterns = json_object_object_get(row, "ModelPatterns");
        size_t n = json_object_array_length(models);

        for (size_t k = 0; k < n; k++) {
                json_object *m = json_object_array_get_idx(models, k);
                const char *status = json_str(m, "Status");
                printf("%s%s", k ? ", " : "", json_str(m, "Name"));
                if (STR_IN_SET(status, "loaded", "loading"))
                        printf(" (%s)", status);
        }
        if (n == 0 && json_object_array_length(patterns) > 0) {
                printf("Models=");
                for (size_t k = 0; k < json_object_array_length(patterns); k++)
                        printf("%s%s", k ? " " : "",
                               json_object_get_string(json_object_array_get_idx(patterns, k)));
                printf(" (not listed yet)");
        } else if (n == 0)
                printf("-");
        printf("\n");
}

int do_engines(sd_bus *bus) {
        _cleanup_(sd_bus_error_free) sd_bus_error e = SD_BUS_ERROR_NULL;
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        json_object *rows = json_object_new_array();
        const char *name, *state, *engine, *path;
        int r;

        /* rule:ctl-never-starts: a verb that only reads */
        r = call_read(bus, OBJECT_PATH, "org.modelgate1.Manager", "ListHosts", &e, &reply, NULL);
        if (r >= 0)
                r = sd_bus_message_enter_container(reply, 'a', "(ssso)");
        while (r >= 0 && (r = sd_bus_message_read(reply, "(ssso)", &name, &state, &engine, &path)) > 0)
                r = read_engines(bus, name, path, rows, &e);
        if (r < 0) {
                json_object_put(rows);
                return report("Cannot read modelgated's engines", &e, r);
        }
        if (arg_json)
                print_json(rows);
        else
                printf("%-12s %-12s %-9s %-24s %s\n", "HOST", "ENGINE", "STATE", "UNIT",
                       "MODELS (LOADED OR LOADING SAID)");
        for (size_t i = 0; !arg_json && i < json_object_array_length(rows); i++) {
                json_object *o = json_object_array_get_idx(rows, i);
                printf("%-12s %-12s %-9s %-24s ", json_str(o, "Host"), json_str(o, "Engine"),
                       json_str(o, "State"), json_str(o, "Unit"));
                print_models(o);
        }
        json_object_put(rows);
        return EXIT_OK;
}
