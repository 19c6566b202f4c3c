/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* modelgatectl(1): reads and drives org.modelgate1. Everything it shows comes from the bus, in the
 * bus's own names (--json prints the properties as they are), so the tool never knows more than busctl
 * would. */

#include <getopt.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <systemd/sd-bus.h>
#include <unistd.h>

#include "modelgated/conf/ssh-command.h"
#include "modelgatectl/modelgatectl.h"
#include "shared/errno-util.h"
#include "shared/log.h"
#include "shared/strv.h"
#include "shared/time-util.h"

int arg_user = -1;
bool arg_json = false;
static bool arg_once = false;
static const char *arg_host = NULL;
static const char *arg_ssh_command = NULL; /* as [Host] SSHCommand= (NULL: "ssh") */
static const char *arg_bus_path = NULL;    /* as [Host] BusPath= (NULL: the remote instance's own bus) */
static uint64_t arg_timeout = 0;
const char *arg_config = NULL;
sd_bus *the_bus = NULL;

static void help(void) {
        printf("%s [OPTIONS...] COMMAND\n\n"
               "Show and control modelgated through org.modelgate1.\n\n"
               "Commands:\n"
               "  status                 Hosts, engines, requests, countdowns, warnings (default)\n"
               "  hosts                  One line per host\n"
               "  engines                Every host's engines: unit, state, models\n"
               "  aliases                Each alias, the target it would pick now, and why\n"
               "  switch HOST ENGINE     Switch HOST to ENGINE, by the scheduler's rules; waits for it\n"
               "  stop HOST              Stop HOST's engine once nothing is in flight\n"
               "  reset-failed HOST      Start HOST's engines held after a failed start at the next "
               "request\n"
               "  reload                 Read the configuration again\n"
               "  check-config           Check the configuration (--config=, --user, --system) with\n"
               "                         the installed modelgated's --check-config\n"
               "  check                  Check the configuration against its hosts: buses, engine\n"
               "                         units, URLs, Models= (modelgated --check-config --hosts)\n"
               "  logs HOST [ENGINE]     The journal of HOST's engine units, on that host\n"
               "  top                    Hosts, requests in flight and the last ones, live (q quits)\n"
               "  key add TIER           Make an API key of TIER, print it once, store its digest\n"
               "  key list               The keys' digests (a prefix) and tiers\n"
               "  key remove DIGEST      Remove the key whose digest starts with DIGEST\n"
               "  key usage [NAME]       Requests and tokens per key and UTC day (NAME: a tier or a\n"
               "                         digest prefix)\n\n"
               "Options:\n"
               "  -h --help              Show this help\n"
               "     --version           Show the version\n"
               "     --user              The user instance (default unless root)\n"
               "     --system            The system instance (default for root)\n"
               "  -H --host=[USER@]HOST[:PORT]  The instance on HOST, through ssh\n"
               "     --ssh-command=CMD   For -H: the ssh client and its options, as SSHCommand=\n"
               "     --bus-path=ADDRESS  For -H: the remote bus, as BusPath=\n"
               "     --json              Print the bus's properties as JSON\n"
               "     --once              For top: print one frame and exit\n"
               "     --timeout=SPAN      How long switch waits (default: 24h)\n"
               "     --config=PATH       For key, check-config, check, logs: the modelgate.conf\n"
               "                         to read\n\n"
               "See modelgatectl(1).\n",
               program_invocation_short_name);
}

static int parse_argv(int argc, char *argv[]) {
        enum {
                ARG_VERSION = 0x100,
                ARG_USER,
                ARG_SYSTEM,
                ARG_JSON,
                ARG_TIMEOUT,
                ARG_CONFIG,
                ARG_ONCE,
                ARG_SSH_COMMAND,
                ARG_BUS_PATH,
        };
        static const struct option options[] = {
                {"help", no_argument, NULL, 'h'},
                {"version", no_argument, NULL, ARG_VERSION},
                {"user", no_argument, NULL, ARG_USER},
                {"system", no_argument, NULL, ARG_SYSTEM},
                {"host", required_argument, NULL, 'H'},
                {"ssh-command", required_argument, NULL, ARG_SSH_COMMAND},
                {"bus-path", required_argument, NULL, ARG_BUS_PATH},
                {"json", no_argument, NULL, ARG_JSON},
                {"once", no_argument, NULL, ARG_ONCE},
                {"timeout", required_argument, NULL, ARG_TIMEOUT},
                {"config", required_argument, NULL, ARG_CONFIG},
                {},
        };
        int c;

        while ((c = getopt_long(argc, argv, "hH:", options, NULL)) >= 0)
                switch (c) {
                case 'h':
                        help();
                        return 0;
                case ARG_VERSION:
                        printf("modelgatectl %s\n", MODELGATE_VERSION);
                        return 0;
                case ARG_USER:
                        arg_user = 1;
                        break;
                case ARG_SYSTEM:
                        arg_user = 0;
                        break;
                case 'H':
                        arg_host = optarg;
                        break;
                case ARG_SSH_COMMAND:
                        arg_ssh_command = optarg;
                        break;
                case ARG_BUS_PATH:
                        arg_bus_path = optarg;
                        break;
                case ARG_JSON:
                        arg_json = true;
                        break;
                case ARG_ONCE:
                        arg_once = true;
                        break;
                case ARG_CONFIG:
                        arg_config = optarg;
                        break;
                case ARG_TIMEOUT:
                        if (parse_timespan(optarg, &arg_timeout) < 0 || arg_timeout == 0) {
                                log_error("--timeout='%s' is not a time span like 30s or 20min", optarg);
                                return -EINVAL;
                        }
                        break;
                default:
                        return -EINVAL;
                }
        if (arg_user < 0)
                arg_user = getuid() != 0;
        if ((arg_ssh_command || arg_bus_path) && !arg_host) {
                log_error("--ssh-command= and --bus-path= are for -H: without it there is no ssh");
                return -EINVAL;
        }
        return 1;
}

int connect_bus(sd_bus **ret) {
        _cleanup_(sd_bus_flush_close_unrefp) sd_bus *bus = NULL;
        _cleanup_strv_free_ char **argv = NULL;
        int r;

        if (!arg_host)
                return arg_user ? sd_bus_open_user(ret) : sd_bus_open_system(ret);

        /* the same ssh command line modelgated uses for Bus=ssh:, from what SSHCommand= and BusPath= take
         * (modelgate.conf(5)) */
        if (ssh_target_split(arg_host, NULL, NULL) < 0)
                return log_error("-H '%s' is not [USER@]HOST[:PORT]", arg_host), -EINVAL;
        r = ssh_command_argv(arg_ssh_command, arg_host,
                             arg_bus_path ?: (arg_user ? NULL : "unix:path=/run/dbus/system_bus_socket"),
                             &argv);
        if (r == -ENOMEM)
                return log_oom();
        if (r < 0)
                return log_error("--ssh-command='%s' or --bus-path='%s' cannot make an ssh command line "
                                 "(see SSHCommand= and BusPath= in modelgate.conf(5))",
                                 arg_ssh_command ?: "ssh", arg_bus_path ?: ""),
                       -EINVAL;
        r = sd_bus_new(&bus);
        if (r >= 0)
                r = sd_bus_set_exec(bus, argv[0], argv);
        if (r >= 0)
                r = sd_bus_set_bus_client(bus, true);
        if (r >= 0)
                r = sd_bus_start(bus);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(bus);
        return 0;
}

static int error_exit(const sd_bus_error *e, int r) {
        /* a bus that never came up (an ssh that could not log in: sd_bus_start() of an unixexec: address
         * succeeds, the first call fails with ENOTCONN, as System.Error.ENOTCONN) is no bus, not a failed
         * operation */
        if (ERRNO_IS_DISCONNECT(r) && (!e || !e->name || ERRNO_IS_DISCONNECT(sd_bus_error_get_errno(e))))
                return EXIT_UNREACHABLE;
        if (!e || !e->name)
                return EXIT_FAILED;
        if (sd_bus_error_has_names(e, SD_BUS_ERROR_SERVICE_UNKNOWN, SD_BUS_ERROR_NAME_HAS_NO_OWNER,
                                   SD_BUS_ERROR_NO_REPLY, SD_BUS_ERROR_DISCONNECTED))
                return EXIT_UNREACHABLE;
        if (sd_bus_error_has_names(e, "org.modelgate1.Error.NoSuchHost", "org.modelgate1.Error.NoSuchEngine",
                                   SD_BUS_ERROR_UNKNOWN_OBJECT))
                return EXIT_NOT_FOUND;
        if (sd_bus_error_has_names(e, SD_BUS_ERROR_ACCESS_DENIED,
                                   SD_BUS_ERROR_INTERACTIVE_AUTHORIZATION_REQUIRED))
                return EXIT_DENIED;
        return EXIT_FAILED;
}

/* Root gets the system instance by default: one that is not there may be the wrong one */
static const char *user_hint(void) {
        return !arg_user && !arg_host ? "; for the user instance use --user" : "";
}

int report(const char *what, const sd_bus_error *e, int r) {
        /* rule:ctl-never-starts: the calls that read do not start it, and say what would */
        if (is_stopped(e) && the_bus && say_stopped(the_bus) >= 0)
                return EXIT_UNREACHABLE;
        if (e && sd_bus_error_has_names(e, SD_BUS_ERROR_SERVICE_UNKNOWN, SD_BUS_ERROR_NAME_HAS_NO_OWNER) &&
            !arg_user && !arg_host)
                log_error("%s: no system modelgate (modelgated is not on the system bus)%s", what,
                          user_hint());
        else if (e &&
                 sd_bus_error_has_names(e, SD_BUS_ERROR_SERVICE_UNKNOWN, SD_BUS_ERROR_NAME_HAS_NO_OWNER))
                log_error("%s: modelgated is not running on the %s bus%s", what,
                          arg_user ? "user" : "system", arg_host ? " of that host" : "");
        else
                log_error("%s: %s", what, e && e->message ? e->message : strerror(r < 0 ? -r : r));
        return error_exit(e, r);
}

/* a(sst) (FailedStarts) as JSON, as busctl -j shows it: an array of [s, s, t] */
static int read_sst_array(sd_bus_message *m, json_object **ret) {
        json_object *v = json_object_new_array();
        const char *a, *b;
        uint64_t t;
        int r;

        *ret = v;
        r = sd_bus_message_enter_container(m, 'a', "(sst)");
        while (r >= 0 && (r = sd_bus_message_read(m, "(sst)", &a, &b, &t)) > 0) {
                json_object *e = json_object_new_array();
                json_object_array_add(e, json_object_new_string(a));
                json_object_array_add(e, json_object_new_string(b));
                json_object_array_add(e, json_object_new_uint64(t));
                json_object_array_add(v, e);
        }
        return r < 0 ? r : sd_bus_message_exit_container(m);
}

/* a{sv} of basic types, string arrays and FailedStarts, as JSON */
static int read_properties(sd_bus_message *m, json_object *o) {
        int r;

        r = sd_bus_message_enter_container(m, 'a', "{sv}");
        if (r < 0)
                return r;
        while ((r = sd_bus_message_enter_container(m, 'e', "sv")) > 0) {
                const char *name, *contents;
                char type;
                json_object *v = NULL;

                r = sd_bus_message_read(m, "s", &name);
                if (r < 0)
                        return r;
                r = sd_bus_message_peek_type(m, &type, &contents);
                if (r < 0)
                        return r;
                r = sd_bus_message_enter_container(m, 'v', contents);
                if (r < 0)
                        return r;
                if (streq(contents, "s")) {
                        const char *s;
                        r = sd_bus_message_read(m, "s", &s);
                        v = json_object_new_string(s);
                } else if (streq(contents, "u")) {
                        uint32_t u;
                        r = sd_bus_message_read(m, "u", &u);
                        v = json_object_new_int64(u);
                } else if (streq(contents, "t")) {
                        uint64_t t;
                        r = sd_bus_message_read(m, "t", &t);
                        v = json_object_new_uint64(t);
                } else if (streq(contents, "as")) {
                        _cleanup_strv_free_ char **l = NULL;
                        r = sd_bus_message_read_strv(m, &l);
                        v = json_object_new_array();
                        STRV_FOREACH (s, l)
                                json_object_array_add(v, json_object_new_string(*s));
                } else if (streq(contents, "a(sst)"))
                        r = read_sst_array(m, &v);
                else
                        r = sd_bus_message_skip(m, contents);
                if (r < 0)
                        return r;
                if (v)
                        json_object_object_add(o, name, v);
                r = sd_bus_message_exit_container(m);
                if (r >= 0)
                        r = sd_bus_message_exit_container(m);
                if (r < 0)
                        return r;
        }
        if (r < 0)
                return r;
        return sd_bus_message_exit_container(m);
}

static int get_all(sd_bus *bus, const char *path, const char *interface, json_object *o, sd_bus_error *e) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        int r;

        r = call_read(bus, path, "org.freedesktop.DBus.Properties", "GetAll", e, &reply, "s", interface);
        if (r < 0)
                return r;
        return read_properties(reply, o);
}

/* The Manager's properties with a "Hosts" array of every Host's. */
static int read_state(sd_bus *bus, json_object **ret, sd_bus_error *e) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        json_object *state = json_object_new_object(), *hosts = json_object_new_array();
        const char *name, *st, *engine, *path;
        int r;

        json_object_object_add(state, "Hosts", hosts);
        r = get_all(bus, OBJECT_PATH, "org.modelgate1.Manager", state, e);
        if (r >= 0)
                r = call_read(bus, OBJECT_PATH, "org.modelgate1.Manager", "ListHosts", e, &reply, NULL);
        if (r >= 0)
                r = sd_bus_message_enter_container(reply, 'a', "(ssso)");
        while (r >= 0 && (r = sd_bus_message_read(reply, "(ssso)", &name, &st, &engine, &path)) > 0) {
                json_object *h = json_object_new_object();
                json_object_array_add(hosts, h);
                r = get_all(bus, path, "org.modelgate1.Host", h, e);
        }
        if (r < 0) {
                json_object_put(state);
                return r;
        }
        *ret = state;
        return 0;
}

const char *json_str(json_object *o, const char *key) {
        json_object *v;
        return json_object_object_get_ex(o, key, &v) ? json_object_get_string(v) : "";
}

static uint64_t num(json_object *o, const char *key) {
        json_object *v;
        return json_object_object_get_ex(o, key, &v) ? json_object_get_uint64(v) : 0;
}

static char *join(json_object *o, const char *key, const char *sep) {
        json_object *a;
        _cleanup_strv_free_ char **l = NULL;

        if (json_object_object_get_ex(o, key, &a))
                for (size_t i = 0; i < json_object_array_length(a); i++)
                        (void)strv_extend(&l, json_object_get_string(json_object_array_get_idx(a, i)));
        return strv_join(l, sep);
}

/* "12s left"-style countdowns from the realtime timestamps the bus shows */
static const char *until(char *buf, size_t l, uint64_t at) {
        usec_t now = now_usec(CLOCK_REALTIME);
        char t[FORMAT_TIMESPAN_MAX];

        if (at == 0)
                return NULL;
        snprintf(buf, l, "%s",
                 format_timespan(t, sizeof(t), at > now ? (at - now) / USEC_PER_SEC * USEC_PER_SEC : 0)
                         ?: "?");
        return buf;
}

/* "15:42" (local time) of a realtime timestamp the bus shows; "-" for none */
static const char *clock_time(char buf[static 16], uint64_t at) {
        time_t t = (time_t)(at / USEC_PER_SEC);
        struct tm tm;

        if (at == 0 || !localtime_r(&t, &tm) || strftime(buf, 16, "%H:%M", &tm) == 0)
                return "-";
        return buf;
}

/* rule:last-error: "the words (at 15:42:07, 3min 2s ago)" */
static void print_last_error(json_object *h) {
        uint64_t at = num(h, "LastErrorUSec"), now = now_usec(CLOCK_REALTIME);
        char when[16] = "", ago[FORMAT_TIMESPAN_MAX];
        time_t t = (time_t)(at / USEC_PER_SEC);
        struct tm tm;

        if (!*json_str(h, "LastError"))
                return;
        if (at == 0 || !localtime_r(&t, &tm) || strftime(when, sizeof(when), "%H:%M:%S", &tm) == 0) {
                printf("  last error: %s\n", json_str(h, "LastError"));
                return;
        }
        printf("  last error: %s (at %s, %s ago)\n", json_str(h, "LastError"), when,
               format_timespan(ago, sizeof(ago), now > at ? (now - at) / USEC_PER_SEC * USEC_PER_SEC : 0)
                       ?: "?");
}

void print_json(json_object *o) {
        printf("%s\n",
               json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE));
}

/* FailedStarts: the engines held after a failed start, "fork,main" */
static char *held_names(json_object *held) {
        _cleanup_strv_free_ char **l = NULL;

        for (size_t k = 0; held && k < json_object_array_length(held); k++)
                (void)strv_extend(&l, json_object_get_string(json_object_array_get_idx(
                                              json_object_array_get_idx(held, k), 0)));
        return strv_join(l, ",");
}

static void print_held(json_object *held) {
        char b[FORMAT_TIMESPAN_MAX + 16];

        for (size_t k = 0; held && k < json_object_array_length(held); k++) {
                json_object *x = json_object_array_get_idx(held, k);
                uint64_t at = json_object_get_uint64(json_object_array_get_idx(x, 2));
                const char *left = at == UINT64_MAX ? NULL : until(b, sizeof(b), at);
                printf("  held:       %s after a failed start, %s%s (reset-failed ends it)\n",
                       json_object_get_string(json_object_array_get_idx(x, 0)), left ?: "until reset",
                       left ? " left" : "");
        }
}

/* status's first lines: version, addresses, counts, and a refusal */
static void print_header(json_object *state, const char *refusing) {
        _cleanup_free_ char *listening = join(state, "Listening", ", ");
        printf("modelgate %s, listening on %s\n", json_str(state, "Version"),
               listening && *listening ? listening : "nothing");
        printf("%llu connection(s), %llu request(s) in flight, %llu waiting\n",
               (unsigned long long)num(state, "Connections"), (unsigned long long)num(state, "InFlight"),
               (unsigned long long)num(state, "Waiting"));
        if (refusing)
                printf("refusing every request (%s): see the warnings below\n", refusing);
}

/* rule:bus-gone: an engine that serves on through a lost bus says so beside its state. true: it does */
static bool host_state_words(json_object *h, char *buf, size_t l) {
        bool gone = streq(json_str(h, "BusState"), "gone") && !streq(json_str(h, "State"), "down");

        snprintf(buf, l, "%s%s", json_str(h, "State"), gone ? ", bus gone" : "");
        return gone;
}

static void print_bus(json_object *h, bool gone) {
        if (*json_str(h, "BusError"))
                printf("  bus:        gone (%s)%s\n", json_str(h, "BusError"),
                       gone ? "; the engine serves on, a switch, start or stop waits for the bus" : "");
}

static int do_status(sd_bus *bus, bool brief) {
        _cleanup_(sd_bus_error_free) sd_bus_error e = SD_BUS_ERROR_NULL;
        json_object *state = NULL, *hosts;
        int r;

        r = read_state(bus, &state, &e);
        if (r < 0)
                return report("Cannot read modelgated's state", &e, r);
        hosts = json_object_object_get(state, "Hosts");
        /* a daemon that answers every request with an error is not one that serves, for scripts too */
        _cleanup_free_ char *refusing = strdup(json_str(state, "Refusing"));
        int ret = refusing && *refusing ? EXIT_REFUSING : EXIT_OK;
        if (ret != EXIT_OK && (brief || arg_json))
                log_error("modelgated refuses every request (%s); 'modelgatectl status' says why", refusing);
        if (arg_json) {
                print_json(brief ? hosts : state);
                json_object_put(state);
                return ret;
        }

        if (!brief)
                print_header(state, ret != EXIT_OK ? refusing : NULL);
        else
                printf("%-12s %-10s %-14s %9s %7s %-9s %s\n", "HOST", "STATE", "ENGINE", "IN-FLIGHT",
                       "WAITING", "IDLE-STOP", "HELD");

        for (size_t i = 0; i < json_object_array_length(hosts); i++) {
                json_object *h = json_object_array_get_idx(hosts, i);
                char b1[FORMAT_TIMESPAN_MAX + 16], b2[FORMAT_TIMESPAN_MAX + 16], hhmm[16];
                const char *engine = json_str(h, "Engine"), *hold, *idle;
                json_object *held = json_object_object_get(h, "FailedStarts");
                char state[64];
                bool gone = host_state_words(h, state, sizeof(state));
                if (brief) {
                        _cleanup_free_ char *names = held_names(held);
                        printf("%-12s %-10s %-14s %9llu %7llu %-9s %s\n", json_str(h, "Name"), state,
                               *engine ? engine : "-", (unsigned long long)num(h, "InFlight"),
                               (unsigned long long)num(h, "Waiting"),
                               clock_time(hhmm, num(h, "IdleStopAtUSec")), names && *names ? names : "-");
                        continue;
                }
                _cleanup_free_ char *engines = join(h, "Engines", " ");
                printf("\n%s (%s): %s", json_str(h, "Name"), json_str(h, "URL"), state);
                if (*engine)
                        printf(", engine %s (%s)", engine, json_str(h, "Unit"));
                printf("\n");
                if (engines && *engines)
                        printf("  engines:    %s (bus %s)\n", engines, json_str(h, "Bus"));
                print_bus(h, gone);
                printf("  requests:   %llu in flight, %llu waiting\n",
                       (unsigned long long)num(h, "InFlight"), (unsigned long long)num(h, "Waiting"));
                hold = until(b1, sizeof(b1), num(h, "HoldDownUntilUSec"));
                idle = until(b2, sizeof(b2), num(h, "IdleStopAtUSec"));
                if (hold)
                        printf("  hold-down:  %s left\n", hold);
                /* what is loaded (the engine and its models, as ollama ps names them) and until when */
                _cleanup_free_ char *models = join(h, "LoadedModels", ", ");
                if (*engine)
                        printf("  loaded:     %s (%s), ", engine,
                               models && *models ? models : "no model listed");
                if (*engine && idle)
                        printf("idle stop in %s (at %s)\n", idle,
                               clock_time(hhmm, num(h, "IdleStopAtUSec")));
                else if (*engine)
                        printf("no idle stop due%s\n",
                               num(h, "InFlight") + num(h, "Waiting") > 0 ? " (in use)" : "");
                print_held(held);
                print_last_error(h);
        }
        if (!brief) {
                json_object *w = json_object_object_get(state, "Warnings");
                if (w && json_object_array_length(w) > 0) {
                        printf("\nwarnings:\n");
                        for (size_t i = 0; i < json_object_array_length(w); i++)
                                printf("  %s\n", json_object_get_string(json_object_array_get_idx(w, i)));
                }
        }
        json_object_put(state);
        return ret;
}

/* connect_bus(), a failure said: EXIT_OK, EXIT_USAGE or EXIT_UNREACHABLE. The bus is the_bus from now. */
static int connect_bus_or_say(sd_bus **ret) {
        int r = connect_bus(ret);
        the_bus = r >= 0 ? *ret : NULL;
        if (r < 0) {
                if (r != -EINVAL && !arg_user && !arg_host)
                        log_error_errno(r, "Cannot connect to the system bus: %m; no system modelgate%s",
                                        user_hint());
                else if (r != -EINVAL)
                        log_error_errno(r, "Cannot connect to the %s bus%s: %m",
                                        arg_user ? "user" : "system", arg_host ? " through ssh" : "");
                return r == -EINVAL ? EXIT_USAGE : EXIT_UNREACHABLE;
        }
        return EXIT_OK;
}

/* key add|list|remove (the keys file) or usage (the bus): args[0] is the verb, n the words from it on */
static int key_command(int n, char **args) {
        _cleanup_(sd_bus_flush_close_unrefp) sd_bus *bus = NULL;
        const char *kv = n >= 1 ? args[0] : "";
        int r;

        if (streq(kv, "usage") && n <= 2) {
                r = connect_bus_or_say(&bus);
                return r != EXIT_OK ? r : do_key_usage(bus, n == 2 ? args[1] : NULL);
        }
        if (!((streq(kv, "list") && n == 1) || (STR_IN_SET(kv, "add", "remove") && n == 2))) {
                log_error("Use 'key add TIER', 'key list', 'key remove DIGEST' or 'key usage [NAME]'");
                return EXIT_USAGE;
        }
        return do_key(n, args);
}

int main(int argc, char *argv[]) {
        _cleanup_(sd_bus_flush_close_unrefp) sd_bus *bus = NULL;
        const char *verb;
        int r, n;

        log_set_prefix(false);
        r = parse_argv(argc, argv);
        if (r <= 0)
                return r < 0 ? EXIT_USAGE : EXIT_OK;
        verb = optind < argc ? argv[optind] : "status";
        n = argc - optind - 1;
        if (streq(verb, "key"))
                return key_command(n, argv + optind + 1);
        if (streq(verb, "check-config")) {
                if (n > 0 || arg_host) {
                        log_error("check-config takes no arguments and checks this machine's file (no -H)");
                        return EXIT_USAGE;
                }
                return do_check_config();
        }
        /* the configuration's hosts, without the daemon */
        if (streq(verb, "check") && n == 0)
                return do_check();
        if (streq(verb, "logs") && (n == 1 || n == 2))
                return do_logs(argv[optind + 1], n == 2 ? argv[optind + 2] : NULL);
        if (STR_IN_SET(verb, "check", "logs")) {
                log_error("Use 'check' or 'logs HOST [ENGINE]'; see %s --help",
                          program_invocation_short_name);
                return EXIT_USAGE;
        }
        if (!STR_IN_SET(verb, "status", "hosts", "engines", "aliases", "switch", "stop", "reset-failed",
                        "reload", "top")) {
                log_error("Unknown command '%s'; see %s --help", verb, program_invocation_short_name);
                return EXIT_USAGE;
        }
        if ((STR_IN_SET(verb, "status", "hosts", "engines", "aliases", "reload", "top") && n > 0) ||
            (streq(verb, "switch") && n != 2) || (STR_IN_SET(verb, "stop", "reset-failed") && n != 1)) {
                log_error("Wrong arguments for '%s'; see %s --help", verb, program_invocation_short_name);
                return EXIT_USAGE;
        }

        r = connect_bus_or_say(&bus);
        if (r != EXIT_OK)
                return r;

        if (streq(verb, "status") || streq(verb, "hosts"))
                return do_status(bus, streq(verb, "hosts"));
        if (streq(verb, "aliases"))
                return do_aliases(bus);
        if (streq(verb, "engines"))
                return do_engines(bus);
        if (streq(verb, "top"))
                return do_top(bus, arg_once);
        if (streq(verb, "switch")) {
                const char *host = argv[optind + 1], *engine = argv[optind + 2];
                r = call_host(bus, host, "SwitchEngine", arg_timeout ?: 24 * USEC_PER_HOUR, "Switch failed",
                              "s", engine);
                if (r == EXIT_OK && !arg_json)
                        printf("host %s: engine %s is up\n", host, engine);
                return r;
        }
        if (streq(verb, "stop")) {
                const char *host = argv[optind + 1];
                r = call_host(bus, host, "StopEngine", 0, "Stop failed", NULL);
                if (r == EXIT_OK && !arg_json)
                        printf("host %s: its engine stops once nothing is in flight\n", host);
                return r;
        }
        if (streq(verb, "reset-failed")) {
                const char *host = argv[optind + 1];
                r = call_host(bus, host, "ResetFailed", 0, "Cannot reset the failed starts", NULL);
                if (r == EXIT_OK && !arg_json)
                        printf("host %s: the next request for any of its engines starts it\n", host);
                return r;
        }
        return do_reload(bus);
}
