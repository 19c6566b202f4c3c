/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Method calls answered later (see bus-call.h). polkit (rule:polkit), asynchronously, as no blocking call
 * may run in the loop: the caller's uid first (root is always allowed, as systemd's daemons do), then
 * CheckAuthorization for everyone else. On the user bus the bus itself admits only its owner. */

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "modelgated/bus/bus-call.h"
#include "modelgated/server/server.h"
#include "shared/log.h"
#include "shared/macro.h"

/* polkit answers a check that needs no person in milliseconds: one that has not answered in 20 s is stuck
 * (or stopped), and its caller is told so instead of being left to its own timeout, its call held here
 * meanwhile. 20 s is under the 25 s that sd-bus and libdbus callers (busctl, modelgatectl) wait by default,
 * so that they read this answer; a shorter $SYSTEMD_BUS_TIMEOUT shortens it. An interactive check waits for
 * a person at an authentication agent: longer, still bounded. */
#define POLKIT_TIMEOUT_USEC (20 * USEC_PER_SEC)
#define POLKIT_INTERACTIVE_TIMEOUT_USEC (5 * USEC_PER_MINUTE)

static usec_t polkit_timeout(BusCall *c, bool interactive) {
        uint64_t t = 0;

        if (interactive)
                return POLKIT_INTERACTIVE_TIMEOUT_USEC;
        if (sd_bus_get_method_call_timeout(c->set->bus, &t) < 0 || t == 0)
                return POLKIT_TIMEOUT_USEC;
        return MIN(t, POLKIT_TIMEOUT_USEC);
}

BusCall *bus_call_new(BusCallSet *set, void *userdata, sd_bus_message *message, const char *action,
                      BusCallAuthorized authorized, const char *host) {
        assert(set);
        BusCall *c = calloc(1, sizeof(BusCall));

        if (!c)
                return NULL;
        *c = (BusCall){.set = set,
                       .userdata = userdata,
                       .message = sd_bus_message_ref(message),
                       .action = action,
                       .authorized = authorized,
                       .host = host ? strdup(host) : NULL};
        LIST_PREPEND(calls, set->calls, c);
        if (host && !c->host) {
                bus_call_free(c);
                return NULL;
        }
        return c;
}

void bus_call_free(BusCall *c) {
        if (!c)
                return;
        if (c->waiting)
                host_release(&c->waiter);
        LIST_REMOVE(calls, c->set->calls, c);
        server_changed(c->set->server);
        sd_bus_slot_unref(c->slot);
        sd_bus_message_unref(c->message);
        free(c->host);
        free(c->engine);
        free(c);
}

void bus_call_reply(BusCall *c) {
        assert(c);
        (void)sd_bus_reply_method_return(c->message, NULL);
        bus_call_free(c);
}

void bus_call_reply_error(BusCall *c, const char *name, const char *fmt, ...) {
        assert(c);
        va_list ap;

        va_start(ap, fmt);
        (void)sd_bus_reply_method_errorfv(c->message, name, fmt, ap);
        va_end(ap);
        bus_call_free(c);
}

static int polkit_answered(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        BusCall *c = userdata;
        const sd_bus_error *e = sd_bus_message_get_error(reply);
        int authorized = 0, challenge = 0, r;

        c->slot = sd_bus_slot_unref(c->slot);
        /* sd-bus ends a call past its bound with NoReply; the bus sends that too when polkit exits first */
        if (e && sd_bus_error_has_name(e, SD_BUS_ERROR_NO_REPLY) &&
            now_usec(CLOCK_MONOTONIC) >= c->polkit_until) {
                char t[FORMAT_TIMESPAN_MAX];

                format_timespan(t, sizeof(t), c->polkit_timeout);
                log_warning("polkit did not answer the check of %s within %s, refusing it", c->action, t);
                bus_call_reply_error(c, SD_BUS_ERROR_TIMEOUT,
                                     "polkit did not answer within %s; nothing was changed, try again", t);
                return 0;
        }
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
        r = sd_bus_message_new_method_call(c->set->bus, &q, "org.freedesktop.PolicyKit1",
                                           "/org/freedesktop/PolicyKit1/Authority",
                                           "org.freedesktop.PolicyKit1.Authority", "CheckAuthorization");
        bool interactive = sd_bus_message_get_allow_interactive_authorization(c->message) > 0;
        if (r >= 0)
                r = sd_bus_message_append(q, "(sa{sv})sa{ss}us", "system-bus-name", 1, "name", "s",
                                          sd_bus_message_get_sender(c->message), c->action, 0,
                                          (uint32_t)interactive, "");
        if (r >= 0) {
                c->polkit_timeout = polkit_timeout(c, interactive);
                c->polkit_until = now_usec(CLOCK_MONOTONIC) + c->polkit_timeout;
                r = sd_bus_call_async(c->set->bus, &c->slot, q, polkit_answered, c, c->polkit_timeout);
        }
        if (r < 0)
                bus_call_reply_error(c, SD_BUS_ERROR_ACCESS_DENIED, "polkit could not be asked");
        return 0;
}

int bus_call_authorize(BusCall *c) {
        assert(c);
        int r;

        if (!c->set->polkit) {
                c->authorized(c);
                return 1;
        }
        r = sd_bus_call_method_async(c->set->bus, &c->slot, "org.freedesktop.DBus", "/org/freedesktop/DBus",
                                     "org.freedesktop.DBus", "GetConnectionUnixUser", uid_answered, c, "s",
                                     sd_bus_message_get_sender(c->message));
        if (r < 0)
                bus_call_reply_error(c, SD_BUS_ERROR_ACCESS_DENIED, "the caller could not be identified");
        return 1;
}

void bus_call_set_reply_all(BusCallSet *s, const char *name, const char *message) {
        assert(s);
        while (s->calls)
                bus_call_reply_error(s->calls, name, "%s", message);
}
