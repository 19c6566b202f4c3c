/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What a host's service manager says of a unit (host-bus-units.c), read from a real sd-bus message: a
 * manager (or whatever answers on the host's bus, through ssh) is not trusted with modelgate's log lines
 * and LastError, so the strings are kept escaped (rule:log-escaped). */

#include <sys/socket.h>
#include <systemd/sd-bus.h>
#include <unistd.h>

#include "modelgated/hostbus/host-bus-internal.h"
#include "tests.h"

/* An a{sv} of string properties, sealed and ready to be read as a reply would be */
static sd_bus_message *properties(sd_bus *bus, const char *const *kv) {
        sd_bus_message *m = NULL;

        ASSERT_TRUE(0 <= sd_bus_message_new_signal(bus, &m, "/u", "org.example.T", "P"));
        ASSERT_TRUE(0 <= sd_bus_message_open_container(m, 'a', "{sv}"));
        for (; kv[0]; kv += 2)
                ASSERT_TRUE(0 <= sd_bus_message_append(m, "{sv}", kv[0], "s", kv[1]));
        ASSERT_TRUE(0 <= sd_bus_message_close_container(m));
        ASSERT_TRUE(0 <= sd_bus_message_seal(m, 1, 0));
        ASSERT_TRUE(0 <= sd_bus_message_rewind(m, true));
        return m;
}

TEST(a_units_states_from_the_bus_are_kept_escaped) {
        sd_bus *bus = NULL;
        UnitInfo u = {};

        int fds[2];
        /* a bus on one end of a socketpair: open (authenticating) is all a message needs to be made */
        ASSERT_TRUE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
        ASSERT_TRUE(0 <= sd_bus_new(&bus));
        ASSERT_TRUE(0 <= sd_bus_set_fd(bus, fds[0], fds[0]));
        ASSERT_TRUE(0 <= sd_bus_start(bus));
        static const char *const kv[] = {"ActiveState", "failed\n<3>host 3090 up\x1b[2J",
                                         "Result",      "exit-code",
                                         "SubState",    "dead\"\\",
                                         NULL};
        sd_bus_message *m = properties(bus, kv);
        ASSERT_TRUE(unit_info_read_properties(m, &u) >= 0);
        /* no line end, no escape sequence: a log line or a terminal gets them as text */
        ASSERT_STREQ(u.active_state, "failed\\x0a<3>host 3090 up\\x1b[2J");
        ASSERT_STREQ(u.sub_state, "dead\\x22\\x5c");
        /* what systemd really says is the same bytes */
        ASSERT_STREQ(u.result, "exit-code");
        unit_info_done(&u);
        sd_bus_message_unref(m);
        sd_bus_close_unref(bus);
        close(fds[1]);
}

TESTS_MAIN
