/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* check-config: the installed modelgated's --check-config; and the file as the commands that read it
 * themselves (key, logs) load it. modelgated lives in meson's libexecdir, which
 * is on nobody's PATH (/usr/local/libexec, /usr/libexec), so the command a reader types is this one: it
 * runs the modelgated the build installed, with the instance and the file this command line names. */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "modelgated/conf/conf.h"
#include "modelgatectl/modelgatectl.h"
#include "shared/log.h"
#include "shared/macro.h"

/* check-config, and check (hosts: --hosts too, rule:check-hosts: each host's bus reached as the daemon
 * does) */
static int run_check(bool hosts) {
        /* $MODELGATED: a modelgated of a build tree, not installed */
        const char *path = getenv("MODELGATED");
        _cleanup_free_ char *config = NULL;
        char *argv[6];
        size_t n = 0;

        if (!path || !*path)
                path = MODELGATED_PATH;
        if (arg_config && asprintf(&config, "--config=%s", arg_config) < 0)
                return log_oom(), EXIT_FAILED;
        argv[n++] = (char *)path;
        argv[n++] = (char *)"--check-config";
        if (hosts)
                argv[n++] = (char *)"--hosts";
        argv[n++] = (char *)(arg_user ? "--user" : "--system");
        if (config)
                argv[n++] = config;
        argv[n] = NULL;
        /* modelgated's exit status is this command's: 0, or 78 (EX_CONFIG) for a file with errors, 1 for
         * problems the hosts showed */
        fflush(stdout);
        execv(path, argv);
        log_error_errno(errno, "Cannot run %s: %m (modelgated as installed; $MODELGATED names another)",
                        path);
        return EXIT_FAILED;
}

int do_check_config(void) {
        return run_check(/* hosts= */ false);
}

int do_check(void) {
        return run_check(/* hosts= */ true);
}

int load_config(Config *c, char **ret_path) {
        _cleanup_free_ char *path = arg_config ? strdup(arg_config) : config_default_path(arg_user);
        int r;

        config_init(c);
        if (!path)
                return log_error_errno(SYNTHETIC_ERRNO(EINVAL),
                                       "Cannot tell where modelgate.conf is: pass --config=PATH");
        r = config_load(c, path);
        if (r < 0)
                return log_error_errno(r, "Cannot read %s (see above)", path);
        if (ret_path)
                *ret_path = TAKE_PTR(path);
        return 0;
}
