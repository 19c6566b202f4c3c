/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The Host objects of org.modelgate1, one per host under /org/modelgate1/host: their properties, read
 * from the live Host, and SwitchEngine()/StopEngine()/ResetFailed(). A path names a host, not a Host: a
 * reload may replace the Host meanwhile, so every call and every property looks it up by name again. */

#include <assert.h>
#include <stdio.h>

#include "modelgated/bus/bus-object-internal.h"
#include "modelgated/catalog/catalog.h"
#include "modelgated/catalog/catalog-list.h"
#include "shared/strv.h"

static Host *host_by_name(Manager *m, const char *name) {
        for (size_t i = 0; name && i < manager_n_hosts(m); i++)
                if (streq(manager_config(m)->hosts[i].name, name))
                        return manager_host_at(m, i);
        return NULL;
}

/* The host a /org/modelgate1/host/… path names now: a reload may have replaced it since the call began */
static Host *host_at_path(BusObject *o, const char *path) {
        _cleanup_free_ char *name = NULL;

        if (sd_bus_path_decode(path, HOST_PREFIX, &name) <= 0)
                return NULL;
        return host_by_name(o->manager, name);
}

/* Properties; userdata is the BusObject (host_find), the host is the path's */

static int property_get_host_string(sd_bus *bus, const char *path, const char *interface,
                                    const char *property, sd_bus_message *reply, void *userdata,
                                    sd_bus_error *error) {
        Host *h = host_at_path(userdata, path);

        if (!h)
                return -ENOENT;
        const HostConf *c = host_conf(h);
        ssize_t e = host_running(h);
        const char *v = "";

        if (streq(property, "Name"))
                v = c->name;
        else if (streq(property, "URL"))
                v = c->url.text;
        else if (streq(property, "Bus"))
                v = host_has_engines(h) ? c->bus : "";
        else if (streq(property, "State"))
                v = host_state_to_string(host_state(h));
        else if (streq(property, "Engine"))
                v = e >= 0 ? host_engine(h, (size_t)e)->conf->name : "";
        else if (streq(property, "Unit"))
                v = e >= 0 ? host_engine(h, (size_t)e)->conf->unit : "";
        else if (streq(property, "LastError"))
                v = host_last_error(h) ?: "";
        else if (streq(property, "BusState"))
                v = host_bus_state(h);
        else if (streq(property, "BusError"))
                v = host_bus_error(h) ?: "";
        return sd_bus_message_append(reply, "s", v);
}

static int property_get_host_engines(sd_bus *bus, const char *path, const char *interface,
                                     const char *property, sd_bus_message *reply, void *userdata,
                                     sd_bus_error *error) {
        Host *h = host_at_path(userdata, path);

        if (!h)
                return -ENOENT;
        int r;

        r = sd_bus_message_open_container(reply, 'a', "s");
        for (size_t i = 0; r >= 0 && i < host_n_engines(h); i++)
                r = sd_bus_message_append(reply, "s", host_engine(h, i)->conf->name);
        return r < 0 ? r : sd_bus_message_close_container(reply);
}

static int property_get_host_u(sd_bus *bus, const char *path, const char *interface, const char *property,
                               sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        Host *h = host_at_path(userdata, path);

        if (!h)
                return -ENOENT;
        return sd_bus_message_append(reply, "u",
                                     streq(property, "InFlight") ? host_in_flight(h) : host_waiting(h));
}

static int property_get_host_usec(sd_bus *bus, const char *path, const char *interface, const char *property,
                                  sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        BusObject *o = userdata;
        Host *h = host_at_path(o, path);
        if (!h)
                return -ENOENT;
        usec_t t = streq(property, "HoldDownUntilUSec") ? host_hold_down_until(h) : host_idle_stop_at(h);

        return sd_bus_message_append(reply, "t", bus_object_realtime(o, t));
}

/* rule:last-error: when LastError was said, on the wall clock already */
static int property_get_last_error_usec(sd_bus *bus, const char *path, const char *interface,
                                        const char *property, sd_bus_message *reply, void *userdata,
                                        sd_bus_error *error) {
        Host *h = host_at_path(userdata, path);

        if (!h)
                return -ENOENT;
        return sd_bus_message_append(reply, "t", (uint64_t)host_last_error_usec(h));
}

/* rule:state-words: the models the engine that is up serves without a load, as ollama ps names them;
 * read when asked (the host's list changes with its feed, which is not signalled here) */
static int property_get_loaded_models(sd_bus *bus, const char *path, const char *interface,
                                      const char *property, sd_bus_message *reply, void *userdata,
                                      sd_bus_error *error) {
        Host *h = host_at_path(userdata, path);

        if (!h)
                return -ENOENT;
        _cleanup_strv_free_ char **l = host_loaded_models(h);
        if (!l)
                return -ENOMEM;
        return sd_bus_message_append_strv(reply, l);
}

/* rule:prompt-cache: the engines that answered 501, read when asked (the log said it once) */
static int property_get_prompt_cache_unsupported(sd_bus *bus, const char *path, const char *interface,
                                                 const char *property, sd_bus_message *reply, void *userdata,
                                                 sd_bus_error *error) {
        Host *h = host_at_path(userdata, path);

        if (!h)
                return -ENOENT;
        _cleanup_strv_free_ char **l = host_prompt_cache_unsupported(h);
        if (!l)
                return -ENOMEM;
        return sd_bus_message_append_strv(reply, l);
}

/* rule:wait-reason: read when asked, never signalled: it counts down each second */
static int property_get_wait_reason(sd_bus *bus, const char *path, const char *interface,
                                    const char *property, sd_bus_message *reply, void *userdata,
                                    sd_bus_error *error) {
        BusObject *o = userdata;
        Host *h = host_at_path(o, path);
        char why[192];

        if (!h)
                return -ENOENT;
        if (host_wait_reason(h, why, sizeof(why)) < 0)
                why[0] = 0;
        return sd_bus_message_append(reply, "s", why);
}

static void switch_ready(HostWaiter *w, int status, const char *message) {
        BusCall *c = container_of(w, BusCall, waiter);
        static const struct {
                int status;
                const char *name;
        } errors[] = {
                {423, ERROR_BUSY},
                {502, ERROR_ENGINE_FAILED},
                {503, ERROR_HOST_DOWN},
                {504, ERROR_TIMEOUT},
        };
        const char *name = ERROR_ENGINE_FAILED;

        if (status == 0) {
                /* the engine is up: the switch was all this call wanted, it is not a request in flight */
                host_release(w);
                c->waiting = false;
                bus_call_reply(c);
                return;
        }
        c->waiting = false; /* answered with an error, the host has forgotten it */
        for (size_t i = 0; i < ELEMENTSOF(errors); i++)
                if (errors[i].status == status)
                        name = errors[i].name;
        bus_call_reply_error(c, name, "%s", message);
}

static void switch_authorized(BusCall *c) {
        BusObject *o = c->userdata;
        Manager *m = o->manager;
        Host *h = host_by_name(m, c->host);
        HostRefusal refusal;
        ssize_t e = -1;
        int r;

        if (!h) {
                bus_call_reply_error(c, ERROR_NO_SUCH_HOST, "host '%s' is gone (a reload removed it)",
                                     c->host);
                return;
        }
        if (manager_stopping(m)) {
                bus_call_reply_error(c, ERROR_STOPPING, "modelgated is stopping");
                return;
        }
        for (size_t i = 0; i < host_n_engines(h); i++)
                if (streq(host_engine(h, i)->conf->name, c->engine))
                        e = (ssize_t)i;
        if (e < 0) {
                /* the names to pick from, as a shell's completion would give them */
                _cleanup_strv_free_ char **names = NULL;
                for (size_t i = 0; i < host_n_engines(h); i++)
                        (void)strv_extend(&names, host_engine(h, i)->conf->name);
                _cleanup_free_ char *list = names ? strv_join(names, ", ") : NULL;
                bus_call_reply_error(c, ERROR_NO_SUCH_ENGINE, "host '%s' has no engine '%s'; %s%s", c->host,
                                     c->engine, list ? "its engines: " : "it has no [Engine] at all",
                                     list ?: "");
                return;
        }
        r = host_acquire(h, (size_t)e, &c->waiter, switch_ready, NULL, "SwitchEngine()", &refusal);
        if (r == HOST_REFUSED) {
                /* down (503), or held after a failed start (502): the error of that status */
                switch_ready(&c->waiter, refusal.status, refusal.message);
                return;
        }
        c->waiting = true;
        if (r == HOST_ACQUIRED)
                switch_ready(&c->waiter, 0, NULL);
        bus_object_changed(o);
}

static int method_switch_engine(sd_bus_message *message, void *userdata, sd_bus_error *error) {
        BusObject *o = userdata;
        Host *h = host_at_path(o, sd_bus_message_get_path(message));
        const char *engine;
        BusCall *c;
        int r;

        if (!h)
                return -ENOENT;
        r = sd_bus_message_read(message, "s", &engine);
        if (r < 0)
                return r;
        if (!host_has_engines(h))
                return sd_bus_error_setf(error, ERROR_NO_SUCH_ENGINE,
                                         "host '%s' has no [Engine]: modelgate does not start its server",
                                         host_conf(h)->name);
        c = bus_call_new(&o->calls, o, message, "org.modelgate1.switch-engine", switch_authorized,
                         host_conf(h)->name);
        if (!c || !(c->engine = strdup(engine))) {
                bus_call_free(c);
                return -ENOMEM;
        }
        return bus_call_authorize(c);
}

static void stop_authorized(BusCall *c) {
        BusObject *o = c->userdata;
        Host *h = host_by_name(o->manager, c->host);
        int r;

        if (!h) {
                bus_call_reply_error(c, ERROR_NO_SUCH_HOST, "host '%s' is gone (a reload removed it)",
                                     c->host);
                return;
        }
        r = host_request_stop(h);
        if (r == -ENOTCONN) {
                bus_call_reply_error(c, ERROR_HOST_DOWN, "host '%s' is down: %s", c->host,
                                     host_last_error(h) ?: "unreachable");
                return;
        }
        if (r == -EBUSY) {
                bus_call_reply_error(
                        c, ERROR_SWITCHING,
                        "host '%s' is switching engines; the clients waiting for the switch decide",
                        c->host);
                return;
        }
        bus_call_reply(c);
}

static int method_stop_engine(sd_bus_message *message, void *userdata, sd_bus_error *error) {
        BusObject *o = userdata;
        Host *h = host_at_path(o, sd_bus_message_get_path(message));
        BusCall *c;

        if (!h)
                return -ENOENT;
        c = bus_call_new(&o->calls, o, message, "org.modelgate1.stop-engine", stop_authorized,
                         host_conf(h)->name);
        if (!c)
                return -ENOMEM;
        return bus_call_authorize(c);
}

/* rule:failed-start-hold: a(sst), each held engine: its name, its words, the hold's end (CLOCK_REALTIME
 * µs; UINT64_MAX: until reset) */
static int property_get_failed_starts(sd_bus *bus, const char *path, const char *interface,
                                      const char *property, sd_bus_message *reply, void *userdata,
                                      sd_bus_error *error) {
        BusObject *o = userdata;
        Host *h = host_at_path(o, path);
        int r;

        if (!h)
                return -ENOENT;
        r = sd_bus_message_open_container(reply, 'a', "(sst)");
        for (size_t i = 0; r >= 0 && i < host_n_engines(h); i++) {
                usec_t until = host_held_until(h, i);
                if (until > 0)
                        r = sd_bus_message_append(
                                reply, "(sst)", host_engine(h, i)->conf->name, host_held_reason(h, i) ?: "",
                                until == USEC_INFINITY ? UINT64_MAX : bus_object_realtime(o, until));
        }
        return r < 0 ? r : sd_bus_message_close_container(reply);
}

static void reset_failed_authorized(BusCall *c) {
        BusObject *o = c->userdata;
        Host *h = host_by_name(o->manager, c->host);

        if (!h) {
                bus_call_reply_error(c, ERROR_NO_SUCH_HOST, "host '%s' is gone (a reload removed it)",
                                     c->host);
                return;
        }
        (void)host_reset_failed(h);
        bus_object_changed(o);
        bus_call_reply(c);
}

/* ListEngines(): each engine with its unit, its state, its Models= globs and the models it lists, with
 * their status: the running engine's from the host's list now ("loaded", "loading", "unloaded"), another's
 * as learned when it last ran ("listed"). Read-only, as the properties are. */
static int append_engine_models(sd_bus_message *reply, Host *h, size_t i) {
        const CatalogList *l = host_running(h) == (ssize_t)i ? catalog_snapshot(host_catalog(h)) : NULL;
        int r;

        r = sd_bus_message_open_container(reply, 'a', "(ss)");
        if (l)
                for (size_t k = 0; r >= 0 && k < catalog_list_size(l); k++)
                        r = sd_bus_message_append(reply, "(ss)", catalog_list_id(l, k),
                                                  catalog_list_loading(l, k) ? "loading"
                                                  : catalog_list_cold(l, k)  ? "unloaded"
                                                                             : "loaded");
        else
                STRV_FOREACH (k, catalog_engine_keys(host_catalog(h), i))
                        if (r >= 0)
                                r = sd_bus_message_append(reply, "(ss)", *k, "listed");
        return r < 0 ? r : sd_bus_message_close_container(reply);
}

static int method_list_engines(sd_bus_message *message, void *userdata, sd_bus_error *error) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        Host *h = host_at_path(userdata, sd_bus_message_get_path(message));
        int r;

        if (!h)
                return -ENOENT;
        r = sd_bus_message_new_method_return(message, &reply);
        if (r >= 0)
                r = sd_bus_message_open_container(reply, 'a', "(sssasa(ss))");
        for (size_t i = 0; r >= 0 && i < host_n_engines(h); i++) {
                const EngineConf *e = host_engine(h, i)->conf;
                r = sd_bus_message_open_container(reply, 'r', "sssasa(ss)");
                if (r >= 0)
                        r = sd_bus_message_append(reply, "sss", e->name, e->unit, host_engine_state(h, i));
                if (r >= 0)
                        r = sd_bus_message_append_strv(reply, e->models);
                if (r >= 0)
                        r = append_engine_models(reply, h, i);
                if (r >= 0)
                        r = sd_bus_message_close_container(reply);
        }
        if (r >= 0)
                r = sd_bus_message_close_container(reply);
        if (r < 0)
                return r;
        return sd_bus_send(NULL, reply, NULL);
}

/* ResetFailed(), as systemctl reset-failed: the engines held after a failed start are started again by
 * the next request for them */
static int method_reset_failed(sd_bus_message *message, void *userdata, sd_bus_error *error) {
        BusObject *o = userdata;
        Host *h = host_at_path(o, sd_bus_message_get_path(message));
        BusCall *c;

        if (!h)
                return -ENOENT;
        c = bus_call_new(&o->calls, o, message, "org.modelgate1.reset-failed", reset_failed_authorized,
                         host_conf(h)->name);
        if (!c)
                return -ENOMEM;
        return bus_call_authorize(c);
}

static const sd_bus_vtable host_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_PROPERTY("Name", "s", property_get_host_string, 0, SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_PROPERTY("URL", "s", property_get_host_string, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("Bus", "s", property_get_host_string, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("State", "s", property_get_host_string, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("Engine", "s", property_get_host_string, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("Unit", "s", property_get_host_string, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("Engines", "as", property_get_host_engines, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("InFlight", "u", property_get_host_u, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("Waiting", "u", property_get_host_u, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("HoldDownUntilUSec", "t", property_get_host_usec, 0,
                        SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("IdleStopAtUSec", "t", property_get_host_usec, 0,
                        SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("LastError", "s", property_get_host_string, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("BusState", "s", property_get_host_string, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("BusError", "s", property_get_host_string, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("LastErrorUSec", "t", property_get_last_error_usec, 0,
                        SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("LoadedModels", "as", property_get_loaded_models, 0, 0),
        SD_BUS_PROPERTY("WaitReason", "s", property_get_wait_reason, 0, 0),
        SD_BUS_PROPERTY("PromptCacheUnsupported", "as", property_get_prompt_cache_unsupported, 0, 0),
        SD_BUS_PROPERTY("FailedStarts", "a(sst)", property_get_failed_starts, 0,
                        SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_METHOD_WITH_ARGS("SwitchEngine", SD_BUS_ARGS("s", engine), SD_BUS_NO_RESULT,
                                method_switch_engine, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("StopEngine", SD_BUS_NO_ARGS, SD_BUS_NO_RESULT, method_stop_engine,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("ResetFailed", SD_BUS_NO_ARGS, SD_BUS_NO_RESULT, method_reset_failed,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("ListEngines", SD_BUS_NO_ARGS, SD_BUS_RESULT("a(sssasa(ss))", engines),
                                method_list_engines, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_VTABLE_END,
};

static int host_find(sd_bus *bus, const char *path, const char *interface, void *userdata, void **found,
                     sd_bus_error *error) {
        _cleanup_free_ char *name = NULL;
        Host *h;

        if (sd_bus_path_decode(path, HOST_PREFIX, &name) <= 0)
                return 0;
        h = host_by_name(((BusObject *)userdata)->manager, name);
        if (!h)
                return 0;
        *found = userdata;
        return 1;
}

static int host_enumerate(sd_bus *bus, const char *path, void *userdata, char ***nodes,
                          sd_bus_error *error) {
        Manager *m = ((BusObject *)userdata)->manager;
        char **l = calloc(manager_n_hosts(m) + 1, sizeof(char *));

        if (!l)
                return -ENOMEM;
        for (size_t i = 0; i < manager_n_hosts(m); i++)
                if (!(l[i] = bus_object_host_path(manager_host_at(m, i)))) {
                        strv_free(l);
                        return -ENOMEM;
                }
        *nodes = l;
        return 0;
}

int bus_object_host_publish(BusObject *o) {
        assert(o);
        int r;

        r = sd_bus_add_fallback_vtable(o->bus, NULL, HOST_PREFIX, "org.modelgate1.Host", host_vtable,
                                       host_find, o);
        if (r >= 0)
                r = sd_bus_add_node_enumerator(o->bus, NULL, HOST_PREFIX, host_enumerate, o);
        return r;
}
