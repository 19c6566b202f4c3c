/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "modelgated/conf/conf-items.h"
#include "modelgated/conf/conf.h"
#include "modelgated/conf/listen-address.h"
#include "modelgated/conf/ssh-command.h"
#include "shared/parse-util.h"
#include "shared/strv.h"

static const char *const section_names[_SECTION_MAX] = {
        [SECTION_PROXY] = "Proxy",       [SECTION_HOST] = "Host",     [SECTION_ENGINE] = "Engine",
        [SECTION_FALLBACK] = "Fallback", [SECTION_ACCESS] = "Access", [SECTION_TIER] = "Tier",
        [SECTION_ALIAS] = "Alias",
};

_printf_(3, 4) static int refuse(char *why, int r, const char *fmt, ...) {
        va_list ap;

        va_start(ap, fmt);
        (void)vsnprintf(why, CONFIG_WHY_MAX, fmt, ap);
        va_end(ap);
        return r;
}

/* The first character of v that is neither a letter, a digit nor one of extra, said as an error says it:
 * '-', or a byte in hex when it would not print */
static bool bad_char(const char *v, const char *extra, char ret[static 8]) {
        for (const char *p = v; *p; p++)
                if (!isalnum((unsigned char)*p) && !strchr(extra, *p)) {
                        if (isprint((unsigned char)*p) && *p != '\'')
                                snprintf(ret, 8, "'%c'", *p);
                        else
                                snprintf(ret, 8, "\\x%02x", (unsigned char)*p);
                        return true;
                }
        return false;
}

#define TIMESPAN_WHY "a time span like 30s, 15min, 1h 30min or infinity"

static int parse_timespan_item(const char *v, void *data, char why[static CONFIG_WHY_MAX]) {
        int r = parse_timespan(v, data);
        return r < 0 ? refuse(why, r, TIMESPAN_WHY) : 0;
}

static int parse_timespan_override(const char *v, void *data, char why[static CONFIG_WHY_MAX]) {
        if (!*v) { /* empty: back to [Proxy]'s */
                *(usec_t *)data = CONF_USEC_UNSET;
                return 0;
        }
        int r = parse_timespan(v, data);
        return r < 0 ? refuse(why, r, TIMESPAN_WHY ", or empty for [Proxy]'s") : 0;
}

static int parse_size_item(const char *v, void *data, char why[static CONFIG_WHY_MAX]) {
        int r = parse_size(v, data);
        return r < 0 ? refuse(why, r, "a size in bytes, or with K, M or G (1024-based) like 512K or 64M")
                     : 0;
}

static int parse_string_item(const char *v, void *data, char why[static CONFIG_WHY_MAX]);

static int parse_uint_item(const char *v, void *data, char why[static CONFIG_WHY_MAX]) {
        int r = safe_atou64(v, data);
        return r < 0 ? refuse(why, r, "a whole number, like 1024") : 0;
}

/* a count, or "infinity" for none */
static int parse_cap_item(const char *v, void *data, char why[static CONFIG_WHY_MAX]) {
        if (streq(v, "infinity")) {
                *(uint64_t *)data = UINT64_MAX;
                return 0;
        }
        int r = safe_atou64(v, data);
        return r < 0 ? refuse(why, r, "a whole number, or infinity for no cap") : 0;
}

#define BOOLEAN_WHY "yes or no (also true/false, on/off, 1/0)"

static int parse_tristate_item(const char *v, void *data, char why[static CONFIG_WHY_MAX]) {
        int b = parse_boolean(v);
        if (b < 0)
                return refuse(why, b, BOOLEAN_WHY);
        *(int *)data = b;
        return 0;
}

static int parse_bool_item(const char *v, void *data, char why[static CONFIG_WHY_MAX]) {
        int b = parse_boolean(v);
        if (b < 0)
                return refuse(why, b, BOOLEAN_WHY);
        *(bool *)data = b;
        return 0;
}

static int parse_absolute_path_item(const char *v, void *data, char why[static CONFIG_WHY_MAX]) {
        if (*v && v[0] != '/')
                return refuse(why, -EINVAL, "an absolute path, beginning with '/'");
        return parse_string_item(v, data, why);
}

static int parse_credential_item(const char *v, void *data, char why[static CONFIG_WHY_MAX]) {
        if (*v && (strchr(v, '/') || streq(v, ".") || streq(v, "..")))
                return refuse(why, -EINVAL,
                              "the name of a credential of the unit (LoadCredential=), without '/'; a path "
                              "goes in KeyFile=");
        return parse_string_item(v, data, why);
}

static bool parse_port(const char *p) {
        char *end;
        unsigned long n;

        if (!isdigit((unsigned char)*p))
                return false;
        errno = 0;
        n = strtoul(p, &end, 10);
        return !*end && errno == 0 && n > 0 && n <= 65535;
}

/* rule:shared-counts: a numeric address only, since a name's lookup would block the daemon's loop; no
 * password in the file (RedisPasswordCredential=) */
static int parse_redis_item(const char *v, void *data, char why[static CONFIG_WHY_MAX]) {
        const char *a = startswith(v, "redis://") ? v + strlen("redis://") : NULL;
        char host[64];
        unsigned char buf[sizeof(struct in6_addr)];

        if (!*v || (startswith(v, "unix:/") && !strpbrk(v, " \t")))
                return parse_string_item(v, data, why);
        if (a && strchr(a, '@'))
                return refuse(why, -EINVAL,
                              "no password in the URL: it goes in a credential, RedisPasswordCredential=");
        if (a) {
                const char *port = NULL;
                if (*a == '[') {
                        const char *end = strchr(a, ']');
                        if (end && (size_t)(end - a) < sizeof(host)) {
                                snprintf(host, sizeof(host), "%.*s", (int)(end - a - 1), a + 1);
                                port = end[1] == ':' ? end + 2 : end[1] ? "" : NULL;
                                if (inet_pton(AF_INET6, host, buf) == 1 && (!port || parse_port(port)))
                                        return parse_string_item(v, data, why);
                        }
                } else {
                        size_t n = strcspn(a, ":");
                        if (n < sizeof(host)) {
                                snprintf(host, sizeof(host), "%.*s", (int)n, a);
                                port = a[n] ? a + n + 1 : NULL;
                                if ((streq(host, "localhost") || inet_pton(AF_INET, host, buf) == 1) &&
                                    (!port || parse_port(port)))
                                        return parse_string_item(v, data, why);
                        }
                }
        }
        return refuse(why, -EINVAL,
                      "unix:/PATH or redis://ADDRESS[:PORT], the address an IPv4 one, [IPv6] or localhost "
                      "(a name would be looked up with the daemon waiting)");
}

static int parse_string_item(const char *v, void *data, char why[static CONFIG_WHY_MAX]) {
        char **s = data;
        char *n = NULL;

        if (*v && !(n = strdup(v)))
                return -ENOMEM;
        free(*s);
        *s = n;
        return 0;
}

/* Space-separated words, appended; an empty value resets the list, as systemd does. */
static int parse_strv_item(const char *v, void *data, char why[static CONFIG_WHY_MAX]) {
        char ***l = data;

        if (!*v) {
                strv_free(*l);
                *l = NULL;
                return 0;
        }
        for (const char *p = v; *p;) {
                while (isspace((unsigned char)*p))
                        p++;
                if (!*p)
                        break;
                const char *e = p;
                while (*e && !isspace((unsigned char)*e))
                        e++;
                char *w = strndup(p, (size_t)(e - p));
                if (!w || strv_push(l, w) < 0) {
                        free(w);
                        return -ENOMEM;
                }
                p = e;
        }
        return 0;
}

bool host_name_is_valid(const char *s) {
        char c[8];
        return s && *s && strlen(s) <= 64 && !bad_char(s, "_.", c);
}

/* What is wrong with a name of at most 64 characters out of letters, digits and extra ('what' is "a host
 * name"), and, when only some characters are, the name with '_' for each */
static int refuse_name(const char *v, const char *extra, const char *what, const char *allowed,
                       char why[static CONFIG_WHY_MAX]) {
        char c[8];

        if (!*v)
                return refuse(why, -EINVAL, "%s must not be empty", what);
        if (strlen(v) > 64)
                return refuse(why, -EINVAL, "%s has at most 64 characters, this one %zu", what, strlen(v));
        if (!bad_char(v, extra, c))
                return 0;
        char fixed[65];
        size_t n = 0;
        for (const char *p = v; *p; p++)
                fixed[n++] = isalnum((unsigned char)*p) || strchr(extra, *p) ? *p : '_';
        fixed[n] = 0;
        return refuse(why, -EINVAL, "%s is not allowed in %s (%s), e.g. '%s'", c, what, allowed, fixed);
}

#define HOST_NAME_ALLOWED                                                                                   \
        "letters, digits, '_' and '.', at most 64: '-' separates host and model in '<host>-<model>'"

static int parse_host_name_item(const char *v, void *data, char why[static CONFIG_WHY_MAX]) {
        int r = refuse_name(v, "_.", "a host name", HOST_NAME_ALLOWED, why);
        return r < 0 ? r : parse_string_item(v, data, why);
}

static int parse_engine_name_item(const char *v, void *data, char why[static CONFIG_WHY_MAX]) {
        int r = refuse_name(v, "_.-@", "a name", "letters, digits, '_', '.', '-' and '@', at most 64", why);
        return r < 0 ? r : parse_string_item(v, data, why);
}

static int parse_unit_item(const char *v, void *data, char why[static CONFIG_WHY_MAX]) {
        const char *dot = strrchr(v, '.');
        if (!*v || strlen(v) > 255 || !dot || dot == v || strchr(v, '/') || strpbrk(v, " \t"))
                return refuse(why, -EINVAL,
                              "a unit name with its type, like llama-mainline.service (no '/' or spaces, at "
                              "most 255)");
        return parse_string_item(v, data, why);
}

static int parse_bus_item(const char *v, void *data, char why[static CONFIG_WHY_MAX]) {
        if (!streq(v, "local") && !streq(v, "system") &&
            (strncmp(v, "ssh:", 4) != 0 || ssh_target_split(v + 4, NULL, NULL) < 0))
                return refuse(why, -EINVAL,
                              "local, system or ssh:[USER@]HOST[:PORT] (user and host of letters, digits, "
                              "'.', '_' and '-', or [IPv6]; a port of digits)");
        return parse_string_item(v, data, why);
}

/* rule:alias-name: an alias name has a host name's characters (no '-'), so that it can never read as
 * "<host>-<key>" */
static int parse_alias_name_item(const char *v, void *data, char why[static CONFIG_WHY_MAX]) {
        int r = refuse_name(v, "_.", "an alias name",
                            "letters, digits, '_' and '.', at most 64, as a host name: a name with '-' "
                            "would read as '<host>-<model>'",
                            why);
        return r < 0 ? r : parse_string_item(v, data, why);
}

static int parse_alias_policy_item(const char *v, void *data, char why[static CONFIG_WHY_MAX]) {
        AliasPolicy p = alias_policy_from_string(v);
        if (p < 0)
                return refuse(why, p, "warm, ordered or spread");
        *(AliasPolicy *)data = p;
        return 0;
}

/* SessionHeaders= (rule:sessions): header names, as a list appends to the default; empty: none at all (an
 * empty list, which is not the default's NULL) */
static int parse_session_headers_item(const char *v, void *data, char why[static CONFIG_WHY_MAX]) {
        _cleanup_strv_free_ char **words = NULL;
        char ***l = data, bad[8];
        int r;

        if (!*v) {
                strv_free(*l);
                *l = calloc(1, sizeof(char *));
                return *l ? 0 : -ENOMEM;
        }
        r = parse_strv_item(v, &words, why);
        if (r < 0)
                return r;
        STRV_FOREACH (w, words)
                if (bad_char(*w, "!#$%&'*+-.^_`|~", bad))
                        return refuse(
                                why, -EINVAL,
                                "header names separated by spaces: %s is not allowed in '%s' (RFC 9110 "
                                "token characters only)",
                                bad, *w);
        if (!*l && !(*l = strv_copy(config_session_headers_default)))
                return -ENOMEM;
        STRV_FOREACH (w, words) {
                bool known = false;
                STRV_FOREACH (o, *l)
                        known = known || strcasecmp(*o, *w) == 0;
                if (!known && strv_extend(l, *w) < 0)
                        return -ENOMEM;
        }
        if (strv_length(*l) > CONFIG_SESSION_HEADERS_MAX)
                return refuse(why, -E2BIG,
                              "at most %d header names in all (the default's %zu among them, "
                              "unless an empty SessionHeaders= comes first)",
                              CONFIG_SESSION_HEADERS_MAX, strv_length(config_session_headers_default));
        return 0;
}

/* Listen=: words as parse_strv_item() takes them, each an address a listener can be made of, so that a
 * typo is the configuration's error (file and line, --check-config) and not a start that fails */
static int parse_listen_item(const char *v, void *data, char why[static CONFIG_WHY_MAX]) {
        _cleanup_strv_free_ char **words = NULL;
        int r = parse_strv_item(v, &words, why);
        if (r < 0)
                return r;
        STRV_FOREACH (w, words)
                if (listen_address_parse(*w, NULL, NULL) < 0)
                        return refuse(why, -EADDRNOTAVAIL,
                                      "each an IPv4:port, [IPv6]:port, a port, or an absolute path");
        return parse_strv_item(v, data, why);
}

/* rule:host-check: a name (letters, digits, '-', '_', '.'), "*." and a name, or an IPv4 or IPv6 address (an
 * IPv6 one in brackets or not); no port, no scheme */
static bool server_name_valid(const char *w) {
        char b[INET6_ADDRSTRLEN + 2];
        struct in6_addr a;
        size_t n = strlen(w);

        if (n >= 2 && n < sizeof(b) && w[0] == '[' && w[n - 1] == ']')
                snprintf(b, sizeof(b), "%.*s", (int)(n - 2), w + 1);
        else
                snprintf(b, sizeof(b), "%s", w);
        if (inet_pton(AF_INET, b, &a) == 1 || inet_pton(AF_INET6, b, &a) == 1)
                return true;
        if (startswith(w, "*."))
                w += 2;
        if (!*w || strlen(w) > 253 || *w == '.' || *w == '-')
                return false;
        for (; *w; w++)
                if (!isalnum((unsigned char)*w) && !strchr("-_.", *w))
                        return false;
        return true;
}

/* rule:host-check: names and addresses a web page's request may give as Host */
static int parse_server_names_item(const char *v, void *data, char why[static CONFIG_WHY_MAX]) {
        _cleanup_strv_free_ char **words = NULL;
        int r = parse_strv_item(v, &words, why);
        if (r < 0)
                return r;
        STRV_FOREACH (w, words)
                if (!server_name_valid(*w))
                        return refuse(
                                why, -EINVAL,
                                "each a host name (letters, digits, '-', '_', '.'), '*.' and a name for "
                                "every name under it, or an IPv4 or IPv6 address; no port, no scheme");
        return parse_strv_item(v, data, why);
}

static int parse_url_item(const char *v, void *data, char why[static CONFIG_WHY_MAX]) {
        HttpUrl *u = data;
        int r;

        if (!*v) {
                http_url_done(u);
                return 0;
        }
        r = http_url_parse(v, u);
        if (r == -EPROTONOSUPPORT)
                return refuse(why, r, "only http:// and https:// URLs are supported");
        if (r < 0 && r != -ENOMEM)
                return refuse(why, r,
                              "a URL like http://192.0.2.20:8081 (http:// or https://, a host, a port from "
                              "1 to 65535, a path)");
        return r;
}

static const ConfigItem config_items[] = {
        {SECTION_PROXY, "Listen", parse_listen_item, offsetof(Config, listen)},
        {SECTION_PROXY, "ServerNames", parse_server_names_item, offsetof(Config, server_names)},
        {SECTION_PROXY, "ExitIdleSec", parse_timespan_item, offsetof(Config, exit_idle_usec)},
        {SECTION_PROXY, "IdleStopSec", parse_timespan_item, offsetof(Config, idle_stop_usec)},
        {SECTION_PROXY, "HoldDownSec", parse_timespan_item, offsetof(Config, hold_down_usec)},
        {SECTION_PROXY, "WaitBudgetSec", parse_timespan_item, offsetof(Config, wait_budget_usec)},
        {SECTION_PROXY, "FailedStartHoldSec", parse_timespan_item, offsetof(Config, failed_start_hold_usec)},
        {SECTION_PROXY, "KeepaliveAfterSec", parse_timespan_item, offsetof(Config, keepalive_after_usec)},
        {SECTION_PROXY, "KeepaliveIntervalSec", parse_timespan_item,
         offsetof(Config, keepalive_interval_usec)},
        {SECTION_PROXY, "PollIntervalSec", parse_timespan_item, offsetof(Config, poll_interval_usec)},
        {SECTION_PROXY, "HeaderTimeoutSec", parse_timespan_item, offsetof(Config, header_timeout_usec)},
        {SECTION_PROXY, "IdleTimeoutSec", parse_timespan_item, offsetof(Config, idle_timeout_usec)},
        {SECTION_PROXY, "BodyTimeoutSec", parse_timespan_item, offsetof(Config, body_timeout_usec)},
        {SECTION_PROXY, "UpstreamIdleTimeoutSec", parse_timespan_item,
         offsetof(Config, upstream_idle_timeout_usec)},
        {SECTION_PROXY, "MaxBodySize", parse_size_item, offsetof(Config, max_body_size)},
        {SECTION_PROXY, "MaxHeaderSize", parse_size_item, offsetof(Config, max_header_size)},
        {SECTION_PROXY, "MaxConnections", parse_uint_item, offsetof(Config, max_connections)},
        {SECTION_PROXY, "MaxConnectionsPerAddress", parse_uint_item,
         offsetof(Config, max_connections_per_address)},
        {SECTION_PROXY, "MaxFeedSubscribers", parse_uint_item, offsetof(Config, max_feed_subscribers)},
        {SECTION_PROXY, "SessionHeaders", parse_session_headers_item, offsetof(Config, session_headers)},

        {SECTION_HOST, "Name", parse_host_name_item, offsetof(HostConf, name)},
        {SECTION_HOST, "URL", parse_url_item, offsetof(HostConf, url)},
        {SECTION_HOST, "Bus", parse_bus_item, offsetof(HostConf, bus)},
        {SECTION_HOST, "SSHCommand", parse_string_item, offsetof(HostConf, ssh_command)},
        {SECTION_HOST, "BusPath", parse_string_item, offsetof(HostConf, bus_path)},
        {SECTION_HOST, "BusyUnits", parse_strv_item, offsetof(HostConf, busy_units)},
        {SECTION_HOST, "IdleStopSec", parse_timespan_override, offsetof(HostConf, idle_stop_usec)},
        {SECTION_HOST, "HoldDownSec", parse_timespan_override, offsetof(HostConf, hold_down_usec)},
        {SECTION_HOST, "WaitBudgetSec", parse_timespan_override, offsetof(HostConf, wait_budget_usec)},
        {SECTION_HOST, "FailedStartHoldSec", parse_timespan_override,
         offsetof(HostConf, failed_start_hold_usec)},
        {SECTION_HOST, "Shared", parse_bool_item, offsetof(HostConf, shared)},

        {SECTION_ENGINE, "Host", parse_host_name_item, offsetof(EngineConf, host)},
        {SECTION_ENGINE, "Name", parse_engine_name_item, offsetof(EngineConf, name)},
        {SECTION_ENGINE, "Unit", parse_unit_item, offsetof(EngineConf, unit)},
        {SECTION_ENGINE, "Models", parse_strv_item, offsetof(EngineConf, models)},
        {SECTION_ENGINE, "StartTimeoutSec", parse_timespan_item, offsetof(EngineConf, start_timeout_usec)},
        /* the host's, for this engine (empty: the host's again) */
        {SECTION_ENGINE, "IdleStopSec", parse_timespan_override, offsetof(EngineConf, idle_stop_usec)},
        {SECTION_ENGINE, "URL", parse_url_item, offsetof(EngineConf, url)},
        {SECTION_ENGINE, "Fallback", parse_engine_name_item, offsetof(EngineConf, fallback)},
        {SECTION_ENGINE, "FirstTokenBudgetSec", parse_timespan_item,
         offsetof(EngineConf, first_token_budget_usec)},
        {SECTION_ENGINE, "RequestBudgetSec", parse_timespan_item, offsetof(EngineConf, request_budget_usec)},
        {SECTION_ENGINE, "WarmupRequest", parse_absolute_path_item, offsetof(EngineConf, warmup_request)},
        {SECTION_ENGINE, "PrimeAfterIdleSec", parse_timespan_item,
         offsetof(EngineConf, prime_after_idle_usec)},
        {SECTION_ENGINE, "PromptCacheSaveSec", parse_timespan_item,
         offsetof(EngineConf, prompt_cache_save_usec)},

        {SECTION_FALLBACK, "Name", parse_engine_name_item, offsetof(FallbackConf, name)},
        {SECTION_FALLBACK, "URL", parse_url_item, offsetof(FallbackConf, url)},
        {SECTION_FALLBACK, "Model", parse_string_item, offsetof(FallbackConf, model)},
        {SECTION_FALLBACK, "KeyCredential", parse_credential_item, offsetof(FallbackConf, key_credential)},
        {SECTION_FALLBACK, "KeyFile", parse_absolute_path_item, offsetof(FallbackConf, key_file)},
        {SECTION_FALLBACK, "OnBusy", parse_tristate_item, offsetof(FallbackConf, on_busy)},

        {SECTION_ACCESS, "KeysFile", parse_absolute_path_item, offsetof(AccessConf, keys_file)},
        {SECTION_ACCESS, "AnonymousDailyRequests", parse_cap_item,
         offsetof(AccessConf, anonymous_daily_requests)},
        {SECTION_ACCESS, "AnonymousMaxBodySize", parse_size_item,
         offsetof(AccessConf, anonymous_max_body_size)},
        {SECTION_ACCESS, "Redis", parse_redis_item, offsetof(AccessConf, redis)},
        {SECTION_ACCESS, "RedisPasswordCredential", parse_credential_item,
         offsetof(AccessConf, redis_password_credential)},

        {SECTION_TIER, "Name", parse_engine_name_item, offsetof(TierConf, name)},
        {SECTION_TIER, "DailyRequests", parse_cap_item, offsetof(TierConf, daily_requests)},
        {SECTION_TIER, "DailyTokens", parse_cap_item, offsetof(TierConf, daily_tokens)},
        {SECTION_TIER, "Models", parse_strv_item, offsetof(TierConf, models)},
        {SECTION_TIER, "MaxBodySize", parse_size_item, offsetof(TierConf, max_body_size)},
        {SECTION_TIER, "Activity", parse_bool_item, offsetof(TierConf, activity)},
        {SECTION_TIER, "Control", parse_bool_item, offsetof(TierConf, control)},

        {SECTION_ALIAS, "Name", parse_alias_name_item, offsetof(AliasConf, name)},
        {SECTION_ALIAS, "Targets", parse_strv_item, offsetof(AliasConf, targets)},
        {SECTION_ALIAS, "Policy", parse_alias_policy_item, offsetof(AliasConf, policy)},
};

const char *section_kind_to_string(SectionKind k) {
        return k >= 0 && k < _SECTION_MAX ? section_names[k] : NULL;
}

SectionKind section_kind_from_string(const char *s) {
        for (SectionKind k = 0; k < _SECTION_MAX; k++)
                if (streq(s, section_names[k]))
                        return k;
        return _SECTION_INVALID;
}

const ConfigItem *config_item_find(SectionKind section, const char *key) {
        for (size_t k = 0; k < ELEMENTSOF(config_items); k++)
                if (config_items[k].section == section && streq(config_items[k].key, key))
                        return &config_items[k];
        return NULL;
}

/* Levenshtein's distance, ignoring case: how many letters to add, remove or change to make a of b */
static size_t edit_distance(const char *a, const char *b) {
        size_t la = strlen(a), lb = strlen(b), row[65];

        if (la > 64 || lb > 64)
                return SIZE_MAX;
        for (size_t j = 0; j <= lb; j++)
                row[j] = j;
        for (size_t i = 1; i <= la; i++) {
                size_t diag = row[0];
                row[0] = i;
                for (size_t j = 1; j <= lb; j++) {
                        size_t up = row[j],
                               cost = tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]);
                        row[j] = MIN(MIN(row[j] + 1, row[j - 1] + 1), diag + cost);
                        diag = up;
                }
        }
        return row[lb];
}

/* close enough to be a typo: the same but for case, or a letter or two off in a longer name */
static bool is_close(const char *typed, const char *known, size_t *best) {
        size_t d = edit_distance(typed, known), l = strlen(known);

        if (d >= *best || d > (l <= 4 ? 1 : l <= 8 ? 2 : 3))
                return false;
        *best = d;
        return true;
}

const char *config_item_closest(SectionKind section, const char *key) {
        const char *found = NULL;
        size_t best = SIZE_MAX;

        for (size_t k = 0; k < ELEMENTSOF(config_items); k++)
                if (config_items[k].section == section && is_close(key, config_items[k].key, &best))
                        found = config_items[k].key;
        return found;
}

const char *section_kind_closest(const char *name) {
        const char *found = NULL;
        size_t best = SIZE_MAX;

        for (SectionKind k = 0; k < _SECTION_MAX; k++)
                if (is_close(name, section_names[k], &best))
                        found = section_names[k];
        return found;
}

SectionKind config_item_section_of(SectionKind section, const char *key) {
        for (size_t k = 0; k < ELEMENTSOF(config_items); k++)
                if (config_items[k].section != section && streq(config_items[k].key, key))
                        return config_items[k].section;
        return _SECTION_INVALID;
}

const char *section_kind_list(void) {
        _Static_assert(_SECTION_MAX == 7, "every section is in the list");
        return "[Proxy], [Host], [Engine], [Fallback], [Access], [Tier] and [Alias]";
}
