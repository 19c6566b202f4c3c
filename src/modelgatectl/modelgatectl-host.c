/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* modelgatectl logs: the configuration's hosts, reached without the daemon (check, which runs
 * modelgated --check-config --hosts, is in modelgatectl-check-config.c). logs runs journalctl for an engine
 * unit where it runs: on this machine, or through the host's own ssh command (rule:engine-logs). It replaces
 * this process: its output and exit status are the command's. */

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "modelgated/conf/conf.h"
#include "modelgated/conf/ssh-command.h"
#include "modelgatectl/modelgatectl.h"
#include "shared/log.h"
#include "shared/strv.h"

#define LOG_LINES "200"

/* The names of c's hosts, or of host's engines, for words that say what there is */
static char *names(const Config *c, const char *host) {
        _cleanup_strv_free_ char **l = NULL;

        for (size_t i = 0; !host && i < c->n_hosts; i++)
                (void)strv_extend(&l, c->hosts[i].name);
        for (size_t i = 0; host && i < c->n_engines; i++)
                if (streq(c->engines[i].host, host))
                        (void)strv_extend(&l, c->engines[i].name);
        return l ? strv_join(l, ", ") : strdup("none");
}

/* journalctl's words for the units: -u UNIT for each, the last lines, no pager */
static int journal_words(const Config *c, const HostConf *h, const char *engine, bool user, char ***ret) {
        _cleanup_strv_free_ char **w = NULL;

        if (strv_extend(&w, "journalctl") < 0 || (user && strv_extend(&w, "--user") < 0))
                return -ENOMEM;
        for (size_t i = 0; i < c->n_engines; i++) {
                const EngineConf *e = &c->engines[i];
                if (!streq(e->host, h->name) || (engine && !streq(e->name, engine)) || !e->unit)
                        continue;
                if (strv_extend(&w, "-u") < 0 || strv_extend(&w, e->unit) < 0)
                        return -ENOMEM;
        }
        if (strv_extend(&w, "-n") < 0 || strv_extend(&w, LOG_LINES) < 0 || strv_extend(&w, "--no-pager") < 0)
                return -ENOMEM;
        *ret = TAKE_PTR(w);
        return 0;
}

int do_logs(const char *host, const char *engine) {
        _cleanup_(config_done) Config c = {};
        _cleanup_strv_free_ char **words = NULL, **argv = NULL;
        _cleanup_free_ char *known = NULL, *line = NULL;
        const HostConf *h = NULL;
        bool found = !engine;
        int r;

        if (load_config(&c, NULL) < 0)
                return EXIT_FAILED;
        for (size_t i = 0; i < c.n_hosts; i++)
                if (streq(c.hosts[i].name, host))
                        h = &c.hosts[i];
        for (size_t i = 0; h && engine && i < c.n_engines; i++)
                found = found || (streq(c.engines[i].host, host) && streq(c.engines[i].name, engine));
        if (!h) {
                known = names(&c, NULL);
                log_error("No host '%s' in the configuration; its hosts: %s", host, strna(known));
                return EXIT_NOT_FOUND;
        }
        if (!found) {
                known = names(&c, host);
                log_error("Host '%s' has no engine '%s'; its engines: %s", host, engine, strna(known));
                return EXIT_NOT_FOUND;
        }
        const char *bus = h->bus ?: "local";
        bool ssh = startswith(bus, "ssh:");
        /* an ssh host's units are its user's own (rule:ssh-bridge), unless BusPath= names the system bus */
        bool user =
                !streq(bus, "system") && !(ssh && h->bus_path && strstr(h->bus_path, "system_bus_socket"));
        if (journal_words(&c, h, engine, user, &words) < 0)
                return log_oom(), EXIT_FAILED;
        if (!ssh)
                argv = strv_copy(words);
        else if ((r = ssh_command_run_argv(h->ssh_command, bus + 4, words, &argv)) < 0)
                return log_error_errno(r, "Cannot make an ssh command for host '%s': %m", host), EXIT_FAILED;
        if (!argv)
                return log_oom(), EXIT_FAILED;
        line = strv_join(argv, " ");
        /* said first, so that a follow (-f) or another filter is one edit of a command seen */
        fprintf(stderr, "%s\n", strna(line));
        (void)fflush(stdout);
        execvp(argv[0], argv);
        log_error_errno(errno, "Cannot run %s: %m", argv[0]);
        return EXIT_FAILED;
}
