/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A host object's method, called and waited for; a switch says meanwhile what it waits for. */

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <systemd/sd-bus.h>
#include <unistd.h>

#include "modelgatectl/modelgatectl.h"
#include "shared/log.h"
#include "shared/macro.h"
#include "shared/time-util.h"

static int host_object_path(const char *host, char **ret) {
        return sd_bus_path_encode(OBJECT_PATH "/host", host, ret);
}

typedef struct CallDone {
        bool done;
        int r;
        sd_bus_error error;
} CallDone;

static void call_done_clear(CallDone *d) {
        sd_bus_error_free(&d->error);
}

static int call_done(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        CallDone *d = userdata;

        d->done = true;
        d->r = sd_bus_message_get_errno(reply);
        if (sd_bus_message_is_method_error(reply, NULL))
                (void)sd_bus_error_copy(&d->error, sd_bus_message_get_error(reply));
        return 0;
}

/* rule:wait-reason: while the call waits, the host's WaitReason each second, a line when it changes */
static void say_wait_reason(sd_bus *bus, const char *host, const char *path, char **last) {
        _cleanup_(sd_bus_error_free) sd_bus_error e = SD_BUS_ERROR_NULL;
        _cleanup_free_ char *why = NULL;

        if (sd_bus_get_property_string(bus, BUS_NAME, path, "org.modelgate1.Host", "WaitReason", &e, &why) <
                    0 ||
            !*why || streq_ptr(why, *last))
                return;
        printf("host %s: %s\n", host, why);
        fflush(stdout);
        free(*last);
        *last = TAKE_PTR(why);
}

int call_host(sd_bus *bus, const char *host, const char *method, uint64_t timeout, const char *what,
              const char *types, ...) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        _cleanup_(sd_bus_slot_unrefp) sd_bus_slot *slot = NULL;
        _cleanup_free_ char *path = NULL, *last = NULL;
        _cleanup_(call_done_clear) CallDone d = {.error = SD_BUS_ERROR_NULL};
        /* a switch can wait minutes: it says what for, as a waiting stream's comments do */
        bool watch = streq(method, "SwitchEngine") && !arg_json;
        /* the first look after a second: a switch that is quicker says only its end. The call's own
         * timeout ends it (sd-bus answers it with ETIMEDOUT). */
        usec_t next = now_usec(CLOCK_MONOTONIC) + USEC_PER_SEC;
        va_list ap;
        int r;

        r = host_object_path(host, &path);
        if (r < 0)
                return log_oom(), EXIT_FAILED;
        r = sd_bus_message_new_method_call(bus, &m, BUS_NAME, path, "org.modelgate1.Host", method);
        if (r >= 0)
                r = sd_bus_message_set_allow_interactive_authorization(m, isatty(STDIN_FILENO) > 0);
        va_start(ap, types);
        if (r >= 0 && types)
                r = sd_bus_message_appendv(m, types, ap);
        va_end(ap);
        if (r < 0)
                return log_error_errno(r, "Cannot build the call: %m"), EXIT_FAILED;
        r = sd_bus_call_async(bus, &slot, m, call_done, &d, timeout);
        if (r < 0)
                return log_error_errno(r, "Cannot call %s(): %m", method), EXIT_FAILED;
        while (!d.done) {
                usec_t now = now_usec(CLOCK_MONOTONIC);
                if (watch && now >= next) {
                        say_wait_reason(bus, host, path, &last);
                        next = now + USEC_PER_SEC;
                }
                r = sd_bus_process(bus, NULL);
                if (r == 0 && !d.done) {
                        now = now_usec(CLOCK_MONOTONIC);
                        r = sd_bus_wait(bus, !watch ? UINT64_MAX : next > now ? next - now : 0);
                }
                if (r < 0)
                        return log_error_errno(r, "%s: the bus failed: %m", what), EXIT_UNREACHABLE;
        }
        if (d.r == 0)
                return EXIT_OK;
        if (sd_bus_error_has_name(&d.error, SD_BUS_ERROR_UNKNOWN_OBJECT) ||
            sd_bus_error_has_name(&d.error, SD_BUS_ERROR_UNKNOWN_METHOD)) {
                log_error("%s: modelgated has no host '%s'", what, host);
                return EXIT_NOT_FOUND;
        }
        return report(what, &d.error, -d.r);
}

int call_manager(sd_bus *bus, const char *method, bool start, sd_bus_error *e, sd_bus_message **reply) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        int r;

        r = sd_bus_message_new_method_call(bus, &m, BUS_NAME, OBJECT_PATH, "org.modelgate1.Manager", method);
        if (r >= 0)
                r = sd_bus_message_set_allow_interactive_authorization(m, isatty(STDIN_FILENO) > 0);
        if (r >= 0)
                r = sd_bus_message_set_auto_start(m, start);
        if (r >= 0)
                r = sd_bus_call(bus, m, 0, e, reply);
        return r;
}

int call_read(sd_bus *bus, const char *path, const char *interface, const char *member, sd_bus_error *e,
              sd_bus_message **reply, const char *types, ...) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        va_list ap;
        int r;

        r = sd_bus_message_new_method_call(bus, &m, BUS_NAME, path, interface, member);
        if (r >= 0)
                r = sd_bus_message_set_auto_start(m, false);
        va_start(ap, types);
        if (r >= 0 && types && *types)
                r = sd_bus_message_appendv(m, types, ap);
        va_end(ap);
        if (r >= 0)
                r = sd_bus_call(bus, m, 0, e, reply);
        return r;
}

bool is_stopped(const sd_bus_error *e) {
        return e && sd_bus_error_has_names(e, SD_BUS_ERROR_SERVICE_UNKNOWN, SD_BUS_ERROR_NAME_HAS_NO_OWNER);
}
