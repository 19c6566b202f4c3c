/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* systemd's exit codes (src/basic/exit-status.h, systemd 252) and what each means for an engine unit: a
 * small table, pure. Only the codes systemd sets in the child before exec() are here: a status below 200
 * is the engine's own, and its meaning is the engine's. */

#include <stdio.h>

#include "modelgated/sched/exit-status.h"
#include "shared/macro.h"

static const struct {
        int status;
        const char *name, *words;
} table[] = {
        {200, "CHDIR", "the engine unit's WorkingDirectory= does not exist or cannot be entered"},
        {201, "NICE", "the engine unit's Nice= could not be set"},
        {202, "FDS", "the engine's file descriptors could not be set up"},
        {203, "EXEC", "the engine's ExecStart= binary was not found or not executable"},
        {204, "MEMORY", "systemd ran out of memory setting up the engine"},
        {205, "LIMITS", "the engine unit's Limit…= settings could not be applied"},
        {206, "OOM_ADJUST", "the engine unit's OOMScoreAdjust= could not be set"},
        {207, "SIGNAL_MASK", "the engine's signal mask could not be set"},
        {208, "STDIN", "the engine unit's StandardInput= could not be set up"},
        {209, "STDOUT", "the engine unit's StandardOutput= could not be set up"},
        {210, "CHROOT", "the engine unit's RootDirectory=/RootImage= could not be entered"},
        {211, "IOPRIO", "the engine unit's IOSchedulingClass=/IOSchedulingPriority= could not be set"},
        {212, "TIMERSLACK", "the engine unit's TimerSlackNSec= could not be set"},
        {213, "SECUREBITS", "the engine unit's SecureBits= could not be set"},
        {214, "SETSCHEDULER", "the engine unit's CPUSchedulingPolicy= could not be set"},
        {215, "CPUAFFINITY", "the engine unit's CPUAffinity= could not be set"},
        {216, "GROUP", "the engine unit's Group= does not exist or cannot be taken"},
        {217, "USER",
         "the engine unit's User= does not exist or cannot be taken (a user unit cannot change "
         "user)"},
        {218, "CAPABILITIES", "the engine unit's capabilities could not be set"},
        {219, "CGROUP", "the engine could not be put in its control group"},
        {220, "SETSID", "the engine could not get a session of its own"},
        {221, "CONFIRM", "starting the engine was not confirmed"},
        {222, "STDERR", "the engine unit's StandardError= could not be set up"},
        {224, "PAM", "the engine unit's PAMName= session could not be opened"},
        {225, "NETWORK", "the engine unit's PrivateNetwork= could not be set up"},
        {226, "NAMESPACE",
         "the engine unit's file system namespace could not be set up (a ReadWritePaths=, "
         "BindPaths= or other path it names is missing, or namespaces are not allowed)"},
        {227, "NO_NEW_PRIVILEGES", "the engine unit's NoNewPrivileges= could not be set"},
        {228, "SECCOMP", "the engine unit's SystemCallFilter= could not be applied"},
        {229, "SELINUX_CONTEXT", "the engine unit's SELinuxContext= could not be set"},
        {230, "PERSONALITY", "the engine unit's Personality= could not be set"},
        {231, "APPARMOR_PROFILE", "the engine unit's AppArmorProfile= could not be applied"},
        {232, "ADDRESS_FAMILIES", "the engine unit's RestrictAddressFamilies= could not be applied"},
        {233, "RUNTIME_DIRECTORY", "the engine unit's RuntimeDirectory= could not be created"},
        {235, "CHOWN", "the engine's sockets or directories could not be given to its user"},
        {236, "SMACK_PROCESS_LABEL", "the engine unit's SmackProcessLabel= could not be set"},
        {237, "KEYRING", "the engine's kernel keyring could not be set up"},
        {238, "STATE_DIRECTORY", "the engine unit's StateDirectory= could not be created"},
        {239, "CACHE_DIRECTORY", "the engine unit's CacheDirectory= could not be created"},
        {240, "LOGS_DIRECTORY", "the engine unit's LogsDirectory= could not be created"},
        {241, "CONFIGURATION_DIRECTORY", "the engine unit's ConfigurationDirectory= could not be created"},
        {242, "NUMA", "the engine unit's NUMAPolicy= could not be set"},
        {243, "CREDENTIALS", "the engine unit's LoadCredential=/SetCredential= could not be set up"},
        {245, "BPF", "the engine unit's BPF programs (IPAddressDeny=, …) could not be attached"},
};

static ssize_t find(int status) {
        for (size_t i = 0; i < ELEMENTSOF(table); i++)
                if (table[i].status == status)
                        return (ssize_t)i;
        return -1;
}

const char *exit_status_name(int status) {
        ssize_t i = find(status);
        return i < 0 ? NULL : table[i].name;
}

const char *exit_status_words(int status) {
        ssize_t i = find(status);
        return i < 0 ? NULL : table[i].words;
}

void exit_status_describe(int status, char *buf, size_t l) {
        ssize_t i = find(status);

        if (i < 0)
                snprintf(buf, l, ", exit status %d", status);
        else
                snprintf(buf, l, ", exit status %d/%s: %s", status, table[i].name, table[i].words);
}
