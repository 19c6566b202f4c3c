/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* What the files of modelgatectl(1) share: its bus, its exit codes and its options. */

#include <stdbool.h>
#include <systemd/sd-bus.h>

#define BUS_NAME "org.modelgate1"
#define OBJECT_PATH "/org/modelgate1"

/* exit codes, modelgatectl(1) */
enum {
        EXIT_OK = 0,
        EXIT_FAILED = 1,      /* the daemon refused or the operation failed */
        EXIT_USAGE = 2,       /* bad command line */
        EXIT_UNREACHABLE = 3, /* no bus, or no modelgated on it */
        EXIT_NOT_FOUND = 4,   /* no such host or engine */
        EXIT_DENIED = 5,      /* polkit or the bus said no */
        EXIT_REFUSING = 6,    /* status, hosts: modelgated answers, but refuses every request */
};

#include <json-c/json.h>

extern int arg_user;           /* --user (1) or --system (0) */
extern bool arg_json;          /* --json */
extern const char *arg_config; /* --config= */

/* The bus of the instance the options name (-H: through ssh) */
int connect_bus(sd_bus **ret);

/* check: modelgated --check-config --hosts, in this process's place (rule:check-hosts) */
int do_check(void);
int do_aliases(sd_bus *bus);
/* logs HOST [ENGINE]: journalctl for the host's engine units, here or through its ssh (rule:engine-logs) */
int do_logs(const char *host, const char *engine);

/* top: the live activity, every second until q; once: one frame (also when stdout is no terminal) */
int do_top(sd_bus *bus, bool once);

/* key add|list|remove: argv[0] is the verb, checked by the caller */
int do_key(int argc, char **argv);
/* key usage [NAME]: ListKeyUsage(), the rows whose tier is NAME or whose key begins with it */
int do_key_usage(sd_bus *bus, const char *name);

/* check-config: execs the installed modelgated (or $MODELGATED) with --check-config; returns only when it
 * could not */
int do_check_config(void);
/* modelgate.conf (--config=, else the instance's) into c, after config_init(); its path in *ret_path when
 * not NULL. 0, or a negative errno, said. */
struct Config;
int load_config(struct Config *c, char **ret_path);

/* engines: each host's ListEngines(), as a table or --json */
int do_engines(sd_bus *bus);

/* reload: Reload(); a modelgated that is not running while its socket listens has nothing to reload */
int do_reload(sd_bus *bus);

/* A failed call said, and its exit code */
int report(const char *what, const sd_bus_error *e, int r);
/* method of host's object, with types and the arguments after them (types NULL: none): EXIT_OK, or the
 * error said and its exit status */
int call_host(sd_bus *bus, const char *host, const char *method, uint64_t timeout, const char *what,
              const char *types, ...);
void print_json(json_object *o);
/* o's member key as a string; "" when it has none */
const char *json_str(json_object *o, const char *key);
/* method of the Manager, without arguments: a person at a terminal may be asked to authenticate (polkit,
 * on the system bus). rule:ctl-never-starts: without start, a call that must not start a stopped modelgate
 * (NO_AUTO_START: the bus answers NameHasNoOwner instead of activating it). */
int call_manager(sd_bus *bus, const char *method, bool start, sd_bus_error *e, sd_bus_message **reply);
/* rule:ctl-never-starts: a call that reads, never starting modelgate: as sd_bus_call_method() otherwise */
int call_read(sd_bus *bus, const char *path, const char *interface, const char *member, sd_bus_error *e,
              sd_bus_message **reply, const char *types, ...);
/* The error of a call to a modelgate that is not running */
bool is_stopped(const sd_bus_error *e);
/* rule:ctl-never-starts: "modelgate is not running; its socket … listens on … and starts it on the next
 * request", or that nothing starts it, from the service manager of bus: EXIT_UNREACHABLE; a negative errno,
 * nothing said, when no service manager on bus answers */
int say_stopped(sd_bus *bus);
/* The command's bus (main()'s, which lives to the end), for report()'s say_stopped() */
extern sd_bus *the_bus;
