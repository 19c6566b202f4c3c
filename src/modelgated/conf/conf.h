/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* modelgate.conf(5): a systemd-style INI reader driven by one table of
 * {section, key, parser, offset}. A file is read into sections of
 * assignments first and applied second, so that a [Host] or [Engine] in a
 * drop-in amends the section of the same name (later wins for single values)
 * instead of adding a second one. */

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "modelgated/conf/url.h"
#include "shared/macro.h"
#include "shared/time-util.h"

/* per-host overrides not given: use [Proxy]'s */
#define CONF_USEC_UNSET (USEC_INFINITY - 1)

typedef enum BusKind {
        BUS_LOCAL,
        BUS_SYSTEM,
        BUS_SSH,
} BusKind;

typedef struct HostConf {
        char *name;
        HttpUrl url;
        char *bus; /* "local", "system", "ssh:[user@]host[:port]" */
        BusKind bus_kind;
        char *ssh_command;
        char *bus_path;
        char **busy_units;
        usec_t idle_stop_usec, hold_down_usec, wait_budget_usec, failed_start_hold_usec;
        bool shared; /* Shared=: other modelgate instances front this host too (rule:several-instances) */
        char *file;
        unsigned line;
        bool invalid; /* a value of its section is not valid: said, and not checked further */
} HostConf;

typedef struct EngineConf {
        char *host;
        char *name;
        char *unit;
        char **models; /* globs */
        usec_t start_timeout_usec;
        usec_t idle_stop_usec;          /* IdleStopSec=; CONF_USEC_UNSET: the host's; 0: never */
        HttpUrl url;                    /* url.text NULL: the host's */
        char *fallback;                 /* a [Fallback] Name=, or NULL */
        usec_t first_token_budget_usec; /* streaming: to the first data line; 0: none */
        usec_t request_budget_usec;     /* not streaming: to the whole answer; 0: none */
        char *warmup_request;           /* a file with a JSON body for POST /v1/chat/completions */
        usec_t prime_after_idle_usec;   /* 0: never */
        usec_t prompt_cache_save_usec;  /* rule:prompt-cache: each save and restore's budget; 0: off */
        char *warmup_body;              /* its contents, read by config_resolve() */
        size_t warmup_size;
        char *file;
        unsigned line;
        bool invalid; /* a value of its section is not valid: said, and not checked further */
} EngineConf;

/* An OpenAI- or Anthropic-compatible upstream that answers when an engine cannot
 * (rule:fallback-availability). */
typedef struct FallbackConf {
        char *name;
        HttpUrl url;
        char *model;
        char *key_credential; /* a name in $CREDENTIALS_DIRECTORY */
        char *key_file;
        int on_busy; /* -1: not set (yes) */
        char *key;   /* read by config_resolve(); NULL: none is sent */
        char *file;
        unsigned line;
        bool invalid; /* a value of its section is not valid: said, and not checked further */
} FallbackConf;

typedef struct TierConf {
        char *name;
        uint64_t daily_requests; /* UINT64_MAX: no cap */
        uint64_t daily_tokens;   /* rule:daily-tokens: prompt tokens not from the cache and generated ones;
                                  * UINT64_MAX: no cap */
        uint64_t max_body_size;  /* 0: [Proxy] MaxBodySize= */
        char **models;           /* globs over client-visible names; NULL: all */
        bool activity;           /* Activity=: may follow /activity and GetActivity (rule:activity-feed) */
        bool control;            /* Control=: may stop engines over HTTP (rule:swap-unload) */
        char *file;
        unsigned line;
        bool invalid; /* a value of its section is not valid: said, and not checked further */
} TierConf;

/* rule:alias-at-admission: one client-visible name the operator declares to be served by any of its targets
 * ("<host>-<key>" names, interchangeable by the operator's promise); which one serves a request is
 * alias-pick.h's rule. */
typedef enum AliasPolicy {
        ALIAS_POLICY_WARM, /* the default */
        ALIAS_POLICY_ORDERED,
        ALIAS_POLICY_SPREAD,
        _ALIAS_POLICY_MAX,
        _ALIAS_POLICY_INVALID = -EINVAL,
} AliasPolicy;

/* Targets= holds at most this many: a request remembers the ones it tried in a 64-bit mask */
#define ALIAS_TARGETS_MAX 64

typedef struct AliasConf {
        char *name;
        char **targets;
        AliasPolicy policy;
        char *file;
        unsigned line;
        bool invalid; /* a value of its section is not valid: said, and not checked further */
} AliasConf;

typedef struct AccessConf {
        bool enabled; /* an [Access] section exists */
        char *keys_file;
        uint64_t anonymous_daily_requests; /* UINT64_MAX: no cap; 0: anonymous clients are refused */
        uint64_t anonymous_max_body_size;  /* 0: [Proxy] MaxBodySize= */
        /* rule:shared-counts: "unix:/path" or "redis://ADDRESS[:PORT]"; NULL: each instance counts alone */
        char *redis;
        char *redis_password_credential;
        char *redis_password; /* read by config_resolve() */
        /* the keys file, read by config_resolve(): SHA-256 digests and the index of their tier */
        uint8_t (*key_hashes)[32];
        size_t *key_tiers;
        size_t n_keys;
} AccessConf;

/* Where a key of [Proxy] or [Access] (sections that are one, not one per name) was last set */
typedef struct ConfigOrigin {
        const char *key; /* the ConfigItem's */
        char *file;
        unsigned line;
} ConfigOrigin;

typedef struct Config {
        unsigned n_ref; /* config_new()'s: a reload keeps the old one while requests and hosts use it */
        char **listen;
        char **server_names; /* rule:host-check: names a web page's request may give as Host, besides
                              * the addresses, localhost and the machine's name */
        usec_t exit_idle_usec;
        usec_t idle_stop_usec;
        usec_t hold_down_usec;
        usec_t wait_budget_usec;
        usec_t failed_start_hold_usec;
        usec_t keepalive_after_usec;
        usec_t keepalive_interval_usec;
        usec_t poll_interval_usec;
        usec_t header_timeout_usec;
        usec_t idle_timeout_usec;
        usec_t body_timeout_usec; /* from a head's end to its body's; USEC_INFINITY: no bound */
        usec_t upstream_idle_timeout_usec;
        uint64_t max_body_size;
        uint64_t max_header_size;
        uint64_t max_connections;
        uint64_t max_connections_per_address;
        uint64_t max_feed_subscribers;
        /* SessionHeaders= (rule:sessions): NULL until set, which is config_session_headers_default; an empty
         * list (set to nothing) is none. config_session_headers() says which. */
        char **session_headers;

        HostConf *hosts;
        size_t n_hosts;
        EngineConf *engines;
        size_t n_engines;
        FallbackConf *fallbacks;
        size_t n_fallbacks;
        AccessConf access;
        TierConf *tiers;
        size_t n_tiers;
        AliasConf *aliases;
        size_t n_aliases;

        /* What was wrong, as logged ("file:line: …"), at most CONFIG_ERRORS_MAX: a socket-activated daemon
         * answers with these while it refuses requests (modelgated(8)) */
        char **errors;
        unsigned n_errors; /* all of them, also those past CONFIG_ERRORS_MAX */
        ConfigOrigin *origins;
        size_t n_origins;
} Config;

#define CONFIG_ERRORS_MAX 16
/* errors logged by one read; the rest are counted */
#define CONFIG_ERRORS_LOGGED 100
/* ExitIdleSec= below this is raised to it */
#define CONFIG_EXIT_IDLE_MIN_USEC USEC_PER_SEC

/* SessionHeaders='s default, in its order, NULL-terminated: Claude Code's, opencode's two, Codex's (0.171
 * sends session-id, older ones session_id) */
extern char *const config_session_headers_default[];
#define CONFIG_SESSION_HEADERS_MAX 16
/* The header names that say a request's session, first the one that wins (none: an empty list) */
char *const *config_session_headers(const Config *c);

void config_init(Config *c);
void config_done(Config *c);
Config *config_new(void);
Config *config_ref(Config *c);
Config *config_unref(Config *c);
DEFINE_TRIVIAL_CLEANUP_FUNC(Config *, config_unref);

/* Logs an error of the configuration and keeps its text in c->errors, for a daemon that has to say what is
 * wrong to clients instead of only to its log. Returns -abs(error); %m is that error. */
_printf_(3, 4) int config_error(Config *c, int error, const char *fmt, ...);

/* Reads one file's text into c. 'name' labels error messages. 0 or -EINVAL (every error of the text logged
 * with file:line and what would be right, and kept in c->errors). */
int config_parse_text(Config *c, const char *name, const char *text, size_t size);
/* Reads path and, beside it, path.d/ *.conf in lexical order. -ENOENT if neither exists. */
int config_load(Config *c, const char *path);
/* Checks what only the whole configuration can tell (engines name existing hosts, hosts have URLs, …). */
int config_verify(Config *c);
/* Resolves every URL to an address (blocking getaddrinfo, once at load). */
int config_resolve(Config *c);
/* config_load(), config_verify() and config_resolve(): the whole configuration at path, or an error with
 * every problem found logged and in c->errors. */
int config_read(Config *c, const char *path);
void config_dump(const Config *c, FILE *f);
/* The first four of errors (n_total in all) joined with "; " and how many more the log has; r's text when
 * none was kept. NULL: out of memory. */
char *config_errors_join(char **errors, unsigned n_total, int r);
/* "systemctl [--user] reload modelgate" */
const char *config_reload_command(bool user);
/* What a daemon that refuses requests for errors in its configuration answers (rule:refusing-state): the
 * errors, and how a fixed file is read whether the daemon runs or has exited. NULL: out of memory. */
char *config_refusal_message(char **errors, unsigned n_total, int r, bool user);
/* modelgate.conf of a user instance ($XDG_CONFIG_HOME/modelgate, ~/.config/modelgate) or of the system
 * (/etc/modelgate); NULL when a user's cannot be told. */
char *config_default_path(bool user);

/* Notes that key (of [Proxy] or [Access]) was set at file:line, for the errors of config_verify() */
int config_note_origin(Config *c, const char *key, const char *file, unsigned line);
/* "file:line: " where key was last set, "" when it was not (a default): the start of an error about it */
const char *config_where(const Config *c, const char *key, char buf[static 256]);

const HostConf *config_find_host(const Config *c, const char *name);
const FallbackConf *config_find_fallback(const Config *c, const char *name);
const AliasConf *config_find_alias(const Config *c, const char *name);
const char *alias_policy_to_string(AliasPolicy p);
AliasPolicy alias_policy_from_string(const char *s);

/* rule:host-in-name: the host named by "<host>-<key>", the longest configured host name followed by '-'.
 * Returns the host and sets *ret_key to the rest, or NULL. */
const HostConf *config_host_of_model(const Config *c, const char *model, const char **ret_key);
/* The first [Engine] of host whose Models= globs match key, or NULL. */
const EngineConf *config_engine_of_key(const Config *c, const char *host, const char *key);
/* Reads a keys file (shared/keys-file.h) against c's tiers into c->access, replacing its keys. */
int config_load_keys(Config *c, const char *path);

/* The command a Bus=ssh:… host's bus runs (rule:ssh-bridge): SSHCommand= split into words, ssh's options,
 * the target, and systemd-stdio-bridge with BusPath= (quoted for the remote shell) or the remote user's own
 * bus (expanded by it). -EINVAL when SSHCommand=, the target or BusPath= cannot make one. */
int host_conf_ssh_argv(const HostConf *h, char ***ret);

bool host_name_is_valid(const char *s);
