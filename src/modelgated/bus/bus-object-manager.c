/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* org.modelgate1 on the bus (see bus-object.h and org.modelgate1(5)): the Manager object at
 * /org/modelgate1, its properties and methods, and the lifecycle of the whole API on the bus: connect,
 * publish, own the name, give it up, free. The Host objects are in bus-object-host.c, PropertiesChanged
 * in bus-object-changes.c, what both the properties and the signals compute in bus-object-view.c, and
 * the calls answered later (polkit, a switch) in bus-call.c. Top of the bus-object files: it calls the
 * others, none calls it. */

#include <stdio.h>

#include "modelgated/bus/bus-object-internal.h"
#include "modelgated/access/access.h"
#include "shared/log.h"
#include "shared/strv.h"

#define BUS_NAME "org.modelgate1"

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

        bus_object_totals(o->manager, &in_flight, &waiting);
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
        /* rule:shared-counts: an instance counting alone says so */
        if (r >= 0 && manager_config(m)->access.redis && access_shared_warning(manager_access(m)))
                r = sd_bus_message_append(reply, "s", access_shared_warning(manager_access(m)));
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

/* "config-error" or "crash-loop" while every request is refused, as /health's "status" says it; "" else */
static int property_get_refusing(sd_bus *bus, const char *path, const char *interface, const char *property,
                                 sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        Manager *m = ((BusObject *)userdata)->manager;

        return sd_bus_message_append(reply, "s",
                                     !manager_refusal(m)     ? ""
                                     : manager_crash_loop(m) ? "crash-loop"
                                                             : "config-error");
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
                _cleanup_free_ char *p = bus_object_host_path(h);
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

/* Each alias, its targets with what each is doing, the one a request would go to now and why. */
static int append_alias(Manager *m, const AliasConf *a, sd_bus_message *reply) {
        AliasTarget t[ALIAS_TARGETS_MAX];
        const char *why;
        ssize_t pick = manager_alias_pick(m, a, NULL, 0, t, &why);
        int r;

        r = sd_bus_message_open_container(reply, 'r', "ssa(ss)ss");
        if (r >= 0)
                r = sd_bus_message_append(reply, "ss", a->name, alias_policy_to_string(a->policy));
        if (r >= 0)
                r = sd_bus_message_open_container(reply, 'a', "(ss)");
        for (size_t k = 0; r >= 0 && a->targets[k] && k < ALIAS_TARGETS_MAX; k++)
                r = sd_bus_message_append(reply, "(ss)", a->targets[k],
                                          alias_target_state_to_string(t[k].state));
        if (r >= 0)
                r = sd_bus_message_close_container(reply);
        if (r >= 0)
                r = sd_bus_message_append(reply, "ss", pick >= 0 ? a->targets[pick] : "", why);
        return r < 0 ? r : sd_bus_message_close_container(reply);
}

static int method_list_aliases(sd_bus_message *message, void *userdata, sd_bus_error *error) {
        BusObject *o = userdata;
        const Config *c = manager_config(o->manager);
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        int r;

        r = sd_bus_message_new_method_return(message, &reply);
        if (r >= 0)
                r = sd_bus_message_open_container(reply, 'a', "(ssa(ss)ss)");
        for (size_t i = 0; r >= 0 && i < c->n_aliases; i++)
                r = append_alias(o->manager, &c->aliases[i], reply);
        if (r >= 0)
                r = sd_bus_message_close_container(reply);
        if (r < 0)
                return r;
        return sd_bus_send(NULL, reply, NULL);
}

/* What a caller may see of every key's requests and usage (rule:polkit): on the system bus root, or whom
 * polkit allows org.modelgate1.view-activity; as /activity is an Activity=yes tier's alone */
#define ACTION_VIEW_ACTIVITY "org.modelgate1.view-activity"

/* rule:activity-feed: the /activity snapshot as JSON (names and numbers only, rule:no-text-in-activity) */
static void activity_authorized(BusCall *c) {
        BusObject *o = c->userdata;
        _cleanup_(buffer_done) Buffer b = {};

        if (manager_activity_snapshot(o->manager, /* event= */ false, &b) < 0 || buffer_terminate(&b) < 0)
                bus_call_reply_error(c, SD_BUS_ERROR_NO_MEMORY, "out of memory");
        else {
                (void)sd_bus_reply_method_return(c->message, "s", buffer_peek(&b));
                bus_call_free(c);
        }
}

static int method_get_activity(sd_bus_message *message, void *userdata, sd_bus_error *error) {
        BusObject *o = userdata;
        BusCall *c = bus_call_new(&o->calls, o, message, ACTION_VIEW_ACTIVITY, activity_authorized, NULL);

        if (!c)
                return -ENOMEM;
        return bus_call_authorize(c);
}

typedef struct KeyUsageReply {
        sd_bus_message *reply;
        const Config *config;
} KeyUsageReply;

/* rule:key-usage: one row of ListKeyUsage(), with the caps its caller has now (none: UINT64_MAX) */
static int append_key_usage(const char *day, const char *name, const char *tier, const UsageCount *n,
                            void *userdata) {
        KeyUsageReply *k = userdata;
        uint64_t requests_cap = UINT64_MAX, tokens_cap = UINT64_MAX;
        const char *digest = startswith(name, "k:");

        if (!tier)
                requests_cap = k->config->access.anonymous_daily_requests;
        for (size_t i = 0; tier && i < k->config->n_tiers; i++)
                if (streq(k->config->tiers[i].name, tier)) {
                        requests_cap = k->config->tiers[i].daily_requests;
                        tokens_cap = k->config->tiers[i].daily_tokens;
                }
        return sd_bus_message_append(k->reply, "(ssstttttt)", digest ?: name, tier ?: "", day, n->requests,
                                     n->in, n->cached, n->out, requests_cap, tokens_cap);
}

/* rule:key-usage: every key's and every anonymous address's counts */
static void key_usage_authorized(BusCall *c) {
        BusObject *o = c->userdata;
        KeyUsageReply k = {.config = manager_config(o->manager)};
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        Access *access = k.config->access.enabled ? manager_access(o->manager) : NULL;
        int r;

        r = sd_bus_message_new_method_return(c->message, &reply);
        if (r >= 0)
                r = sd_bus_message_open_container(reply, 'a', "(ssstttttt)");
        k.reply = reply;
        if (r >= 0 && access)
                r = access_usage_foreach(access, append_key_usage, &k);
        if (r >= 0)
                r = sd_bus_message_close_container(reply);
        if (r < 0)
                return bus_call_reply_error(c, SD_BUS_ERROR_NO_MEMORY, "out of memory");
        (void)sd_bus_send(NULL, reply, NULL);
        bus_call_free(c);
}

static int method_list_key_usage(sd_bus_message *message, void *userdata, sd_bus_error *error) {
        BusObject *o = userdata;
        BusCall *c = bus_call_new(&o->calls, o, message, ACTION_VIEW_ACTIVITY, key_usage_authorized, NULL);

        if (!c)
                return -ENOMEM;
        return bus_call_authorize(c);
}

static void reload_authorized(BusCall *c) {
        _cleanup_free_ char *why = NULL;
        int r;

        r = manager_reload(((BusObject *)c->userdata)->manager, &why);
        if (r < 0)
                bus_call_reply_error(c, ERROR_RELOAD_FAILED, "%s", why ?: "the configuration has errors");
        else
                bus_call_reply(c);
}

static int method_reload(sd_bus_message *message, void *userdata, sd_bus_error *error) {
        BusObject *o = userdata;
        BusCall *c = bus_call_new(&o->calls, o, message, "org.modelgate1.reload", reload_authorized, NULL);

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
        SD_BUS_PROPERTY("Refusing", "s", property_get_refusing, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_METHOD_WITH_ARGS("ListHosts", SD_BUS_NO_ARGS, SD_BUS_RESULT("a(ssso)", hosts),
                                method_list_hosts, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("ListAliases", SD_BUS_NO_ARGS, SD_BUS_RESULT("a(ssa(ss)ss)", aliases),
                                method_list_aliases, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("GetActivity", SD_BUS_NO_ARGS, SD_BUS_RESULT("s", activity),
                                method_get_activity, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("ListKeyUsage", SD_BUS_NO_ARGS, SD_BUS_RESULT("a(ssstttttt)", usage),
                                method_list_key_usage, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("Reload", SD_BUS_NO_ARGS, SD_BUS_NO_RESULT, method_reload,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_VTABLE_END,
};

bool bus_object_busy(const BusObject *o) {
        return o && o->calls.calls;
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
        /* both clocks now, back to back (this runs before the loop): an offset between them, not an
         * instant, so the loop's time would not do */
        o->realtime_offset = now_usec(CLOCK_REALTIME) - now_usec(CLOCK_MONOTONIC);
        r = user ? sd_bus_open_user(&o->bus) : sd_bus_open_system(&o->bus);
        if (r < 0)
                return log_warning_errno(r, "Cannot connect to the %s bus, no D-Bus object: %m",
                                         user ? "user" : "system");
        o->calls = (BusCallSet){.bus = o->bus, .polkit = !user, .server = server};
        r = sd_bus_add_object_vtable(o->bus, NULL, OBJECT_PATH, "org.modelgate1.Manager", manager_vtable, o);
        if (r >= 0)
                r = bus_object_host_publish(o);
        if (r >= 0)
                r = sd_bus_request_name_async(o->bus, NULL, BUS_NAME, 0, name_acquired, NULL);
        if (r >= 0)
                r = sd_bus_attach_event(o->bus, manager_event(m), SD_EVENT_PRIORITY_NORMAL);
        if (r >= 0)
                r = bus_object_changes_start(o);
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
        bus_call_set_reply_all(&o->calls, ERROR_STOPPING, "modelgated is stopping");
        bus_object_changes_stop(o);
        /* the replies above, and the name's release, are written before the connection closes */
        sd_bus_flush_close_unref(o->bus);
        free(o);
        return NULL;
}
