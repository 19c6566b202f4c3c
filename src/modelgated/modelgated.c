/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* modelgated(8): reads the configuration, listens (socket-activated or on
 * Listen=), tells systemd it is ready and runs the loop until stopped. */

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sysexits.h>
#include <systemd/sd-daemon.h>

#include "modelgated/bus/bus-object.h"
#include "modelgated/manager/config-check.h"
#include "modelgated/manager/manager.h"
#include "modelgated/records/history.h"
#include "modelgated/server/server.h"
#include "shared/log.h"

static char *arg_config = NULL;
static bool arg_check_config = false;
static bool arg_check_hosts = false;
static int arg_user = -1; /* -1: decide by uid */

static void help(void) {
        printf("%s [OPTIONS...]\n\n"
               "One OpenAI- and Anthropic-compatible URL in front of llama.cpp engines on GPU hosts.\n\n"
               "  -h --help           Show this help\n"
               "     --version        Show the version\n"
               "     --config=PATH    Read this file (and PATH.d/*.conf) instead of the default\n"
               "     --check-config   Validate the configuration, print the effective one, exit\n"
               "     --hosts          With --check-config: check it against the hosts (buses, engine\n"
               "                      units, URLs, Models=) instead, and print what is wrong\n"
               "     --user           A user instance: $XDG_CONFIG_HOME/modelgate/modelgate.conf\n"
               "     --system         A system instance: /etc/modelgate/modelgate.conf\n"
               "  -v --verbose        Log debug messages too\n\n"
               "See modelgated(8) and modelgate.conf(5).\n",
               program_invocation_short_name);
}

static int parse_argv(int argc, char *argv[]) {
        enum { ARG_VERSION = 0x100, ARG_CONFIG, ARG_CHECK, ARG_HOSTS, ARG_USER, ARG_SYSTEM };
        static const struct option options[] = {
                {"help", no_argument, NULL, 'h'},
                {"version", no_argument, NULL, ARG_VERSION},
                {"config", required_argument, NULL, ARG_CONFIG},
                {"check-config", no_argument, NULL, ARG_CHECK},
                {"hosts", no_argument, NULL, ARG_HOSTS},
                {"user", no_argument, NULL, ARG_USER},
                {"system", no_argument, NULL, ARG_SYSTEM},
                {"verbose", no_argument, NULL, 'v'},
                {},
        };
        int c;

        while ((c = getopt_long(argc, argv, "hv", options, NULL)) >= 0)
                switch (c) {
                case 'h':
                        help();
                        return 0;
                case ARG_VERSION:
                        printf("modelgated %s\n", MODELGATE_VERSION);
                        return 0;
                case ARG_CONFIG:
                        arg_config = optarg;
                        break;
                case ARG_CHECK:
                        arg_check_config = true;
                        break;
                case ARG_HOSTS:
                        arg_check_hosts = true;
                        break;
                case ARG_USER:
                        arg_user = 1;
                        break;
                case ARG_SYSTEM:
                        arg_user = 0;
                        break;
                case 'v':
                        log_set_max_level(LOG_DEBUG);
                        break;
                default:
                        return -EINVAL;
                }
        if (arg_check_hosts && !arg_check_config)
                return log_error_errno(SYNTHETIC_ERRNO(EINVAL), "--hosts goes with --check-config.");
        if (optind < argc)
                return log_error_errno(SYNTHETIC_ERRNO(EINVAL), "%s takes no arguments.",
                                       program_invocation_short_name);
        return 1;
}

/* Many idle keep-alive clients need many descriptors; select() is not used anywhere, so raising
 * the soft limit to the hard one is safe (systemd's rlimit_nofile_bump() does the same). */
static void bump_nofile(void) {
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) >= 0 && rl.rlim_cur < rl.rlim_max) {
                rl.rlim_cur = rl.rlim_max;
                (void)setrlimit(RLIMIT_NOFILE, &rl);
        }
}

/* The D-Bus object hears of the server's changes, and keeps it from its idle exit while a call waits. */
static void server_changed_cb(void *userdata) {
        bus_object_changed(userdata);
}

static bool server_busy_cb(void *userdata) {
        return bus_object_busy(userdata);
}

static void server_stopping_cb(void *userdata) {
        bus_object_release_name(userdata);
}

static const ServerCallbacks server_callbacks = {
        .changed = server_changed_cb,
        .busy = server_busy_cb,
        .stopping = server_stopping_cb,
};

/* --check-config --hosts: the report, exit status 1 when it found a problem */
static int check_hosts(Manager *m, bool user) {
        int r;

        /* models-seen.json where the instance keeps it: the system unit's StateDirectory= */
        if (!user && !getenv("STATE_DIRECTORY"))
                (void)setenv("STATE_DIRECTORY", "/var/lib/modelgate", /* overwrite= */ false);
        r = config_check_hosts(manager_config(m), stdout);
        if (r < 0)
                log_error_errno(r, "Cannot check the hosts: %m");
        return r == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

int main(int argc, char *argv[]) {
        /* freed in the reverse order: the bus object, the server with its connections, the manager, and
         * last the history file the connections' access lines went to */
        _cleanup_(history_file_freep) HistoryFile *history = NULL;
        _cleanup_(sd_event_unrefp) sd_event *event = NULL;
        _cleanup_(manager_freep) Manager *m = NULL;
        _cleanup_(server_freep) Server *server = NULL;
        _cleanup_(bus_object_freep) BusObject *bus_object = NULL;
        _cleanup_free_ char *path = NULL;
        int r;

        r = parse_argv(argc, argv);
        if (r <= 0)
                return r < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
        log_open_journal(); /* once: never a system call per request for it */

        bool user = !(arg_user == 0 || (arg_user < 0 && getuid() == 0));
        path = arg_config ? strdup(arg_config) : config_default_path(user);
        if (!path) {
                log_error("Cannot tell where the configuration is: set $HOME or pass --config=PATH");
                return EX_CONFIG;
        }

        /* a loop of our own, not the thread's default one: sd-event checks that a default loop runs in
         * the thread that made it with a gettid() on every turn, a system call per event dispatched */
        r = sd_event_new(&event);
        if (r >= 0)
                r = manager_new(event, user, &m);
        if (r < 0) {
                log_error_errno(r, "Failed to set up the event loop: %m");
                return EXIT_FAILURE;
        }
        r = manager_load_config(m, path);
        /* Socket-activated, exiting would leave the socket's clients hanging (and have systemd start us
         * again for the next one): manager_start() brings up a daemon that refuses requests instead. By
         * hand, the errors above and EX_CONFIG (the units' RestartPreventExitStatus=) say it all. */
        if (r < 0 && (arg_check_config || sd_listen_fds(/* unset_environment= */ false) <= 0)) {
                unsigned n = manager_n_config_errors(m);
                if (r == -ENOENT && !user && !arg_config)
                        /* root gets the system instance by default, and may have meant its own */
                        log_error(
                                "No system modelgate: %s does not exist; for the user instance use --user.",
                                path);
                log_error("Refusing to start: the configuration has %u error%s (above).", n,
                          n == 1 ? "" : "s");
                return EX_CONFIG;
        }
        if (arg_check_hosts)
                return check_hosts(m, user);
        if (arg_check_config) {
                config_dump(manager_config(m), stdout);
                return EXIT_SUCCESS;
        }
        /* a crash loop slower than the units' start limit (which idle exits must not reach) ends here */
        if (r >= 0 && sd_listen_fds(/* unset_environment= */ false) > 0 && manager_record_run(m) < 0)
                return EXIT_FAILURE;

        history = manager_history_start(m);
        bump_nofile();
        r = server_new(m, &server);
        if (r < 0) {
                log_error_errno(r, "Failed to set up: %m");
                return EXIT_FAILURE;
        }
        /* without a bus there is no D-Bus object, and the daemon serves all the same */
        if (bus_object_new(m, server, user, &bus_object) >= 0 && bus_object)
                server_set_callbacks(server, &server_callbacks, bus_object);
        r = server_start(server);
        if (r < 0)
                return EXIT_FAILURE;
        r = server_run(server);
        if (r < 0) {
                log_error_errno(r, "Event loop failed: %m");
                return EXIT_FAILURE;
        }
        manager_clean_exit(m);
        log_info("Stopped.");
        return EXIT_SUCCESS;
}
