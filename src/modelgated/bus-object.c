/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* org.modelgate1 on the bus: see bus-object.h and org.modelgate1(5). */

#include <assert.h>
#include <stdio.h>
#include <systemd/sd-bus.h>

#include "modelgated/bus-object.h"
#include "modelgated/host.h"
#include "modelgated/manager.h"
#include "modelgated/server.h"
#include "shared/list.h"
#include "shared/log.h"
#include "shared/strv.h"

#define OBJECT_PATH "/org/modelgate1"
#define HOST_PREFIX "/org/modelgate1/host"
#define BUS_NAME "org.modelgate1"
#define EMIT_DELAY_USEC (50 * USEC_PER_MSEC)

#define ERROR_NO_SUCH_HOST "org.modelgate1.Error.NoSuchHost"
#define ERROR_NO_SUCH_ENGINE "org.modelgate1.Error.NoSuchEngine"
#define ERROR_HOST_DOWN "org.modelgate1.Error.HostDown"
#define ERROR_BUSY "org.modelgate1.Error.Busy"
#define ERROR_ENGINE_FAILED "org.modelgate1.Error.EngineFailed"
#define ERROR_TIMEOUT "org.modelgate1.Error.Timeout"
#define ERROR_SWITCHING "org.modelgate1.Error.Switching"
#define ERROR_RELOAD_FAILED "org.modelgate1.Error.ReloadFailed"
#define ERROR_STOPPING "org.modelgate1.Error.Stopping"

/* What a Host object showed when PropertiesChanged was last sent. */
typedef struct HostSeen {
        const Host *host; /* a different Host at this index (a reload): everything changed */
        HostState state;
        ssize_t engine;
        unsigned in_flight, waiting;
        usec_t hold_down, idle_stop;
        char *last_error;
} HostSeen;

typedef struct BusCall BusCall;
typedef void (*BusCallAuthorized)(BusCall *c);

/* A method call being answered later: waiting for polkit, or for its engine. */
struct BusCall {
        BusObject *object;
        sd_bus_message *message;
        sd_bus_slot *slot; /* the polkit query in flight */
        const char *action;
        BusCallAuthorized authorized;
        char *host; /* by name: a reload may replace the Host meanwhile */
        char *engine;
        HostWaiter waiter;
        bool waiting;
        LIST_FIELDS(BusCall, calls);
};

struct BusObject {
        Manager *manager;
        Server *server;
        sd_bus *bus;
        bool system; /* polkit guards the methods that change anything */
        usec_t realtime_offset;
        bool primed; /* the first comparison only records */
        sd_event_source *emit_timer;
        HostSeen *seen;
        size_t n_seen;
        unsigned seen_connections, seen_in_flight, seen_waiting, seen_n_warnings, seen_warnings_serial;
        BusCall *calls;
};

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

static char *host_path(const Host *h) {
        char *p = NULL;
        return sd_bus_path_encode(HOST_PREFIX, host_conf(h)->name, &p) < 0 ? NULL : p;
}

static usec_t to_realtime(const BusObject *o, usec_t mono) {
        if (mono == 0 || mono == USEC_INFINITY)
                return 0;
        return mono + o->realtime_offset;
}

static void totals(Manager *m, unsigned *in_flight, unsigned *waiting) {
        *in_flight = *waiting = 0;
        for (size_t i = 0; i < manager_n_hosts(m); i++) {
                *in_flight += host_in_flight(manager_host_at(m, i));
                *waiting += host_waiting(manager_host_at(m, i));
        }
}

/* Manager properties */

static int property_get_version(sd_bus *bus, const char *path, const char *interface, const char *property,
                                sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        return sd_bus_message_append(reply, "s", MODELGATE_VERSION);
}

static int property_get_listening(sd_bus *bus, const char *path, const char *interface, const char *property,
                                  sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        BusObject *o = userdata;
        int r;

        r = sd_bus_message_open_container(reply, 'a', "s");
        for (size_t i = 0; r >= 0 && i < server_n_listeners(o->server); i++)
                r = sd_bus_message_append(reply, "s", server_listener_address(o->server, i));
        return r < 0 ? r : sd_bus_message_close_container(reply);
}

static int property_get_counter(sd_bus *bus, const char *path, const char *interface, const char *property,
                                sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        BusObject *o = userdata;
        unsigned in_flight, waiting;

        totals(o->manager, &in_flight, &waiting);
        if (streq(property, "Connections"))
                return sd_bus_message_append(reply, "u", (uint32_t)server_n_connections(o->server));
        return sd_bus_message_append(reply, "u", streq(property, "InFlight") ? in_flight : waiting);
}

static int property_get_warnings(sd_bus *bus, const char *path, const char *interface, const char *property,
                                 sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        BusObject *o = userdata;
        Manager *m = o->manager;
        int r;

        r = sd_bus_message_open_container(reply, 'a', "s");
        if (r >= 0 && manager_refusal(m))
                r = sd_bus_message_append(reply, "s", manager_refusal(m));
        for (size_t i = 0; r >= 0 && i < manager_n_hosts(m); i++)
                STRV_FOREACH (w, host_warnings(manager_host_at(m, i))) {
                        _cleanup_free_ char *s = NULL;
                        if (asprintf(&s, "host %s: %s", manager_config(m)->hosts[i].name, *w) < 0)
                                return -ENOMEM;
                        r = sd_bus_message_append(reply, "s", s);
                        if (r < 0)
                                break;
                }
        return r < 0 ? r : sd_bus_message_close_container(reply);
}

static unsigned n_warnings(Manager *m) {
        unsigned n = manager_refusal(m) ? 1 : 0;
        for (size_t i = 0; i < manager_n_hosts(m); i++)
                n += (unsigned)strv_length(host_warnings(manager_host_at(m, i)));
        return n;
}

/* Host properties; userdata is the BusObject (host_find), the host is the path's */

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

        return sd_bus_message_append(reply, "t", to_realtime(o, t));
}

/* polkit, asynchronously: the caller's uid first (root is always allowed, as systemd's daemons do),
 * then CheckAuthorization for everyone else. On the user bus the bus itself admits only its owner. */

static void bus_call_free(BusCall *c) {
        if (!c)
                return;
        if (c->waiting)
                host_release(&c->waiter);
        LIST_REMOVE(calls, c->object->calls, c);
        server_changed(c->object->server);
        sd_bus_slot_unref(c->slot);
        sd_bus_message_unref(c->message);
        free(c->host);
        free(c->engine);
        free(c);
}

static void bus_call_reply_error(BusCall *c, const char *name, const char *message) {
        (void)sd_bus_reply_method_errorf(c->message, name, "%s", message);
        bus_call_free(c);
}

static int polkit_answered(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        BusCall *c = userdata;
        const sd_bus_error *e = sd_bus_message_get_error(reply);
        int authorized = 0, challenge = 0, r;

        c->slot = sd_bus_slot_unref(c->slot);
        if (e) {
                log_warning("polkit check of %s failed: %s", c->action, e->message ?: e->name);
                bus_call_reply_error(c, SD_BUS_ERROR_ACCESS_DENIED,
                                     "polkit could not be asked; only root may do this now");
                return 0;
        }
        r = sd_bus_message_enter_container(reply, 'r', "bba{ss}");
        if (r >= 0)
                r = sd_bus_message_read(reply, "bb", &authorized, &challenge);
        if (r < 0) {
                bus_call_reply_error(c, SD_BUS_ERROR_ACCESS_DENIED, "polkit's answer could not be read");
                return 0;
        }
        if (authorized)
                c->authorized(c);
        else if (challenge)
                bus_call_reply_error(c, SD_BUS_ERROR_INTERACTIVE_AUTHORIZATION_REQUIRED,
                                     "interactive authentication is required");
        else
                bus_call_reply_error(c, SD_BUS_ERROR_ACCESS_DENIED, "polkit denied it");
        return 0;
}

static int uid_answered(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        BusCall *c = userdata;
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *q = NULL;
        uint32_t uid;
        int r;

        c->slot = sd_bus_slot_unref(c->slot);
        if (sd_bus_message_is_method_error(reply, NULL) || sd_bus_message_read(reply, "u", &uid) < 0) {
                bus_call_reply_error(c, SD_BUS_ERROR_ACCESS_DENIED, "the caller could not be identified");
                return 0;
        }
        if (uid == 0) {
                c->authorized(c);
                return 0;
        }
        r = sd_bus_message_new_method_call(c->object->bus, &q, "org.freedesktop.PolicyKit1",
                                           "/org/freedesktop/PolicyKit1/Authority",
                                           "org.freedesktop.PolicyKit1.Authority", "CheckAuthorization");
        if (r >= 0)
                r = sd_bus_message_append(
                        q, "(sa{sv})sa{ss}us", "system-bus-name", 1, "name", "s",
                        sd_bus_message_get_sender(c->message), c->action, 0,
                        (uint32_t)sd_bus_message_get_allow_interactive_authorization(c->message), "");
        if (r >= 0)
                /* an interactive authorization can take as long as a person needs */
                r = sd_bus_call_async(c->object->bus, &c->slot, q, polkit_answered, c, UINT64_MAX - 1);
        if (r < 0)
                bus_call_reply_error(c, SD_BUS_ERROR_ACCESS_DENIED, "polkit could not be asked");
        return 0;
}

/* Answers the call now, or later from c->authorized; takes the call either way. */
static int bus_call_authorize(BusCall *c) {
        int r;

        if (!c->object->system) {
                c->authorized(c);
                return 1;
        }
        r = sd_bus_call_method_async(c->object->bus, &c->slot, "org.freedesktop.DBus",
                                     "/org/freedesktop/DBus", "org.freedesktop.DBus",
                                     "GetConnectionUnixUser", uid_answered, c, "s",
                                     sd_bus_message_get_sender(c->message));
        if (r < 0)
                bus_call_reply_error(c, SD_BUS_ERROR_ACCESS_DENIED, "the caller could not be identified");
        return 1;
}

static BusCall *bus_call_new(BusObject *o, sd_bus_message *message, const char *action,
                             BusCallAuthorized authorized, const char *host) {
        BusCall *c = calloc(1, sizeof(BusCall));

        if (!c)
                return NULL;
        *c = (BusCall){.object = o,
                       .message = sd_bus_message_ref(message),
                       .action = action,
                       .authorized = authorized,
                       .host = host ? strdup(host) : NULL};
        LIST_PREPEND(calls, o->calls, c);
        if (host && !c->host) {
                bus_call_free(c);
                return NULL;
        }
        return c;
}

/* Manager methods */

static int method_list_hosts(sd_bus_message *message, void *userdata, sd_bus_error *error) {
        BusObject *o = userdata;
        Manager *m = o->manager;
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        int r;

        r = sd_bus_message_new_method_return(message, &reply);
        if (r >= 0)
                r = sd_bus_message_open_container(reply, 'a', "(ssso)");
        for (size_t i = 0; r >= 0 && i < manager_n_hosts(m); i++) {
                Host *h = manager_host_at(m, i);
                ssize_t e = host_running(h);
                _cleanup_free_ char *p = host_path(h);
                if (!p)
                        return -ENOMEM;
                r = sd_bus_message_append(reply, "(ssso)", host_conf(h)->name,
                                          host_state_to_string(host_state(h)),
                                          e >= 0 ? host_engine(h, (size_t)e)->conf->name : "", p);
        }
        if (r >= 0)
                r = sd_bus_message_close_container(reply);
        if (r < 0)
                return r;
        return sd_bus_send(NULL, reply, NULL);
}

static void reload_authorized(BusCall *c) {
        _cleanup_free_ char *why = NULL;
        int r;

        r = manager_reload(c->object->manager, &why);
        if (r < 0)
                bus_call_reply_error(c, ERROR_RELOAD_FAILED, why ?: "the configuration has errors");
        else {
                (void)sd_bus_reply_method_return(c->message, NULL);
                bus_call_free(c);
        }
}

static int method_reload(sd_bus_message *message, void *userdata, sd_bus_error *error) {
        BusCall *c = bus_call_new(userdata, message, "org.modelgate1.reload", reload_authorized, NULL);

        if (!c)
                return -ENOMEM;
        return bus_call_authorize(c);
}

/* Host methods */

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
                (void)sd_bus_reply_method_return(c->message, NULL);
                bus_call_free(c);
                return;
        }
        c->waiting = false; /* answered with an error, the host has forgotten it */
        for (size_t i = 0; i < ELEMENTSOF(errors); i++)
                if (errors[i].status == status)
                        name = errors[i].name;
        bus_call_reply_error(c, name, message);
}

static void switch_authorized(BusCall *c) {
        Manager *m = c->object->manager;
        Host *h = host_by_name(m, c->host);
        HostRefusal refusal;
        ssize_t e = -1;
        char msg[256];
        int r;

        if (!h) {
                snprintf(msg, sizeof(msg), "host '%s' is gone (a reload removed it)", c->host);
                return bus_call_reply_error(c, ERROR_NO_SUCH_HOST, msg);
        }
        if (manager_stopping(m))
                return bus_call_reply_error(c, ERROR_STOPPING, "modelgated is stopping");
        for (size_t i = 0; i < host_n_engines(h); i++)
                if (streq(host_engine(h, i)->conf->name, c->engine))
                        e = (ssize_t)i;
        if (e < 0) {
                snprintf(msg, sizeof(msg), "host '%s' has no engine '%s'", c->host, c->engine);
                return bus_call_reply_error(c, ERROR_NO_SUCH_ENGINE, msg);
        }
        r = host_acquire(h, (size_t)e, &c->waiter, switch_ready, "SwitchEngine()", &refusal);
        if (r < 0)
                return bus_call_reply_error(c, ERROR_HOST_DOWN, refusal.message);
        c->waiting = true;
        if (r == 0)
                switch_ready(&c->waiter, 0, NULL);
        bus_object_changed(c->object);
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
        c = bus_call_new(o, message, "org.modelgate1.switch-engine", switch_authorized, host_conf(h)->name);
        if (!c || !(c->engine = strdup(engine))) {
                bus_call_free(c);
                return -ENOMEM;
        }
        return bus_call_authorize(c);
}

static void stop_authorized(BusCall *c) {
        Host *h = host_by_name(c->object->manager, c->host);
        char msg[256];
        int r;

        if (!h) {
                snprintf(msg, sizeof(msg), "host '%s' is gone (a reload removed it)", c->host);
                return bus_call_reply_error(c, ERROR_NO_SUCH_HOST, msg);
        }
        r = host_request_stop(h);
        if (r == -ENOTCONN) {
                snprintf(msg, sizeof(msg), "host '%s' is down: %s", c->host,
                         host_last_error(h) ?: "unreachable");
                return bus_call_reply_error(c, ERROR_HOST_DOWN, msg);
        }
        if (r == -EBUSY) {
                snprintf(msg, sizeof(msg),
                         "host '%s' is switching engines; the clients waiting for the switch decide",
                         c->host);
                return bus_call_reply_error(c, ERROR_SWITCHING, msg);
        }
        (void)sd_bus_reply_method_return(c->message, NULL);
        bus_call_free(c);
}

static int method_stop_engine(sd_bus_message *message, void *userdata, sd_bus_error *error) {
        Host *h = host_at_path(userdata, sd_bus_message_get_path(message));
        BusCall *c;

        if (!h)
                return -ENOENT;
        c = bus_call_new(userdata, message, "org.modelgate1.stop-engine", stop_authorized,
                         host_conf(h)->name);
        if (!c)
                return -ENOMEM;
        return bus_call_authorize(c);
}

static const sd_bus_vtable manager_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_PROPERTY("Version", "s", property_get_version, 0, SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_PROPERTY("Listening", "as", property_get_listening, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("Connections", "u", property_get_counter, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("InFlight", "u", property_get_counter, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("Waiting", "u", property_get_counter, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("Warnings", "as", property_get_warnings, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_METHOD_WITH_ARGS("ListHosts", SD_BUS_NO_ARGS, SD_BUS_RESULT("a(ssso)", hosts),
                                method_list_hosts, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("Reload", SD_BUS_NO_ARGS, SD_BUS_NO_RESULT, method_reload,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_VTABLE_END,
};

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
        SD_BUS_METHOD_WITH_ARGS("SwitchEngine", SD_BUS_ARGS("s", engine), SD_BUS_NO_RESULT,
                                method_switch_engine, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("StopEngine", SD_BUS_NO_ARGS, SD_BUS_NO_RESULT, method_stop_engine,
                                SD_BUS_VTABLE_UNPRIVILEGED),
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
                if (!(l[i] = host_path(manager_host_at(m, i)))) {
                        strv_free(l);
                        return -ENOMEM;
                }
        *nodes = l;
        return 0;
}

/* PropertiesChanged for what differs from what was last announced */

static int emit_cb(sd_event_source *s, uint64_t usec, void *userdata) {
        BusObject *o = userdata;
        Manager *m = o->manager;
        unsigned in_flight, waiting, nw = n_warnings(m);
        const char *changed[8];
        size_t n = 0;

        if (o->n_seen != manager_n_hosts(m)) {
                HostSeen *s2 = reallocarray(o->seen, manager_n_hosts(m) ?: 1, sizeof(HostSeen));
                if (!s2)
                        return 0;
                for (size_t i = manager_n_hosts(m); i < o->n_seen; i++)
                        free(s2[i].last_error);
                for (size_t i = o->n_seen; i < manager_n_hosts(m); i++)
                        s2[i] = (HostSeen){};
                o->seen = s2;
                o->n_seen = manager_n_hosts(m);
        }
        for (size_t i = 0; i < manager_n_hosts(m); i++) {
                Host *h = manager_host_at(m, i);
                HostSeen *v = &o->seen[i], now = {
                                                   .host = h,
                                                   .state = host_state(h),
                                                   .engine = host_running(h),
                                                   .in_flight = host_in_flight(h),
                                                   .waiting = host_waiting(h),
                                                   .hold_down = to_realtime(o, host_hold_down_until(h)),
                                                   .idle_stop = to_realtime(o, host_idle_stop_at(h)),
                                           };
                const char *host_changed[12];
                size_t k = 0;
                bool all = v->host != h;

                if (all) {
                        host_changed[k++] = "URL";
                        host_changed[k++] = "Bus";
                        host_changed[k++] = "Engines";
                }
                if (all || v->state != now.state)
                        host_changed[k++] = "State";
                if (all || v->engine != now.engine) {
                        host_changed[k++] = "Engine";
                        host_changed[k++] = "Unit";
                }
                if (all || v->in_flight != now.in_flight)
                        host_changed[k++] = "InFlight";
                if (all || v->waiting != now.waiting)
                        host_changed[k++] = "Waiting";
                if (all || v->hold_down != now.hold_down)
                        host_changed[k++] = "HoldDownUntilUSec";
                if (all || v->idle_stop != now.idle_stop)
                        host_changed[k++] = "IdleStopAtUSec";
                if (all || !streq_ptr(v->last_error, host_last_error(h))) {
                        host_changed[k++] = "LastError";
                        (void)free_and_strdup(&v->last_error, host_last_error(h));
                }
                host_changed[k] = NULL;
                now.last_error = v->last_error;
                *v = now;
                if (k > 0 && o->primed) {
                        _cleanup_free_ char *p = host_path(h);
                        if (p)
                                (void)sd_bus_emit_properties_changed_strv(o->bus, p, "org.modelgate1.Host",
                                                                          (char **)host_changed);
                }
        }

        totals(m, &in_flight, &waiting);
        if (o->seen_connections != server_n_connections(o->server))
                changed[n++] = "Connections";
        if (o->seen_in_flight != in_flight)
                changed[n++] = "InFlight";
        if (o->seen_waiting != waiting)
                changed[n++] = "Waiting";
        if (o->seen_n_warnings != nw || o->seen_warnings_serial != manager_warnings_serial(m))
                changed[n++] = "Warnings";
        changed[n] = NULL;
        o->seen_connections = (unsigned)server_n_connections(o->server);
        o->seen_in_flight = in_flight;
        o->seen_waiting = waiting;
        o->seen_n_warnings = nw;
        o->seen_warnings_serial = manager_warnings_serial(m);
        o->primed = true;
        if (n > 0 && o->primed)
                (void)sd_bus_emit_properties_changed_strv(o->bus, OBJECT_PATH, "org.modelgate1.Manager",
                                                          (char **)changed);
        return 0;
}

void bus_object_changed(BusObject *o) {
        if (!o || sd_event_source_get_enabled(o->emit_timer, NULL) > 0)
                return;
        (void)sd_event_source_set_time_relative(o->emit_timer, EMIT_DELAY_USEC);
        (void)sd_event_source_set_enabled(o->emit_timer, SD_EVENT_ONESHOT);
}

bool bus_object_busy(const BusObject *o) {
        return o && o->calls;
}

static int name_acquired(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        const sd_bus_error *e = sd_bus_message_get_error(reply);

        if (e)
                log_warning("Cannot own the D-Bus name %s (%s): busctl and modelgatectl will not see this "
                            "instance",
                            BUS_NAME, e->message ?: e->name);
        else
                log_debug("Acquired the D-Bus name %s", BUS_NAME);
        return 0;
}

int bus_object_new(Manager *m, Server *server, bool user, BusObject **ret) {
        _cleanup_(bus_object_freep) BusObject *o = NULL;
        int r;

        o = calloc(1, sizeof(BusObject));
        if (!o)
                return log_oom();
        o->manager = m;
        o->server = server;
        o->system = !user;
        o->realtime_offset = now_usec(CLOCK_REALTIME) - now_usec(CLOCK_MONOTONIC);
        r = user ? sd_bus_open_user(&o->bus) : sd_bus_open_system(&o->bus);
        if (r < 0)
                return log_warning_errno(r, "Cannot connect to the %s bus, no D-Bus object: %m",
                                         user ? "user" : "system");
        r = sd_bus_add_object_vtable(o->bus, NULL, OBJECT_PATH, "org.modelgate1.Manager", manager_vtable, o);
        if (r >= 0)
                r = sd_bus_add_fallback_vtable(o->bus, NULL, HOST_PREFIX, "org.modelgate1.Host", host_vtable,
                                               host_find, o);
        if (r >= 0)
                r = sd_bus_add_node_enumerator(o->bus, NULL, HOST_PREFIX, host_enumerate, o);
        if (r >= 0)
                r = sd_bus_request_name_async(o->bus, NULL, BUS_NAME, 0, name_acquired, NULL);
        if (r >= 0)
                r = sd_bus_attach_event(o->bus, manager_event(m), SD_EVENT_PRIORITY_NORMAL);
        if (r >= 0)
                r = sd_event_add_time_relative(manager_event(m), &o->emit_timer, CLOCK_MONOTONIC,
                                               EMIT_DELAY_USEC, 10 * USEC_PER_MSEC, emit_cb, o);
        if (r < 0)
                return log_warning_errno(r, "Cannot publish the D-Bus object: %m");
        *ret = TAKE_PTR(o);
        return 0;
}

void bus_object_release_name(BusObject *o) {
        if (o && o->bus)
                (void)sd_bus_release_name_async(o->bus, NULL, BUS_NAME, NULL, NULL);
}

BusObject *bus_object_free(BusObject *o) {
        if (!o)
                return NULL;
        while (o->calls)
                bus_call_reply_error(o->calls, ERROR_STOPPING, "modelgated is stopping");
        sd_event_source_disable_unref(o->emit_timer);
        for (size_t i = 0; i < o->n_seen; i++)
                free(o->seen[i].last_error);
        free(o->seen);
        /* the replies above, and the name's release, are written before the connection closes */
        sd_bus_flush_close_unref(o->bus);
        free(o);
        return NULL;
}
