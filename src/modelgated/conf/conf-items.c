/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <ctype.h>
#include <errno.h>
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

static int parse_timespan_item(const char *v, void *data) {
        return parse_timespan(v, data);
}

static int parse_timespan_override(const char *v, void *data) {
        if (!*v) { /* empty: back to [Proxy]'s */
                *(usec_t *)data = CONF_USEC_UNSET;
                return 0;
        }
        return parse_timespan(v, data);
}

static int parse_size_item(const char *v, void *data) {
        return parse_size(v, data);
}

static int parse_string_item(const char *v, void *data);

static int parse_uint_item(const char *v, void *data) {
        return safe_atou64(v, data);
}

/* a count, or "infinity" for none */
static int parse_cap_item(const char *v, void *data) {
        if (streq(v, "infinity")) {
                *(uint64_t *)data = UINT64_MAX;
                return 0;
        }
        return safe_atou64(v, data);
}

static int parse_tristate_item(const char *v, void *data) {
        int b = parse_boolean(v);
        if (b < 0)
                return b;
        *(int *)data = b;
        return 0;
}

static int parse_bool_item(const char *v, void *data) {
        int b = parse_boolean(v);
        if (b < 0)
                return b;
        *(bool *)data = b;
        return 0;
}

static int parse_absolute_path_item(const char *v, void *data) {
        if (*v && v[0] != '/')
                return -EINVAL;
        return parse_string_item(v, data);
}

static int parse_credential_item(const char *v, void *data) {
        if (*v && (strchr(v, '/') || streq(v, ".") || streq(v, "..")))
                return -EINVAL;
        return parse_string_item(v, data);
}

static int parse_string_item(const char *v, void *data) {
        char **s = data;
        char *n = NULL;

        if (*v && !(n = strdup(v)))
                return -ENOMEM;
        free(*s);
        *s = n;
        return 0;
}

/* Space-separated words, appended; an empty value resets the list, as systemd does. */
static int parse_strv_item(const char *v, void *data) {
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
        if (!s || !*s || strlen(s) > 64)
                return false;
        for (; *s; s++)
                if (!isalnum((unsigned char)*s) && *s != '_' && *s != '.')
                        return false;
        return true;
}

static int parse_host_name_item(const char *v, void *data) {
        if (!host_name_is_valid(v))
                return -EINVAL;
        return parse_string_item(v, data);
}

static int parse_engine_name_item(const char *v, void *data) {
        if (!*v || strlen(v) > 64)
                return -EINVAL;
        for (const char *p = v; *p; p++)
                if (!isalnum((unsigned char)*p) && !strchr("_.-@", *p))
                        return -EINVAL;
        return parse_string_item(v, data);
}

static int parse_unit_item(const char *v, void *data) {
        const char *dot = strrchr(v, '.');
        if (!*v || strlen(v) > 255 || !dot || dot == v || strchr(v, '/') || strpbrk(v, " \t"))
                return -EINVAL;
        return parse_string_item(v, data);
}

static int parse_bus_item(const char *v, void *data) {
        if (!streq(v, "local") && !streq(v, "system") &&
            (strncmp(v, "ssh:", 4) != 0 || ssh_target_split(v + 4, NULL, NULL) < 0))
                return -EINVAL;
        return parse_string_item(v, data);
}

/* rule:alias-name: an alias name has a host name's characters (no '-'), so that it can never read as
 * "<host>-<key>" */
static int parse_alias_name_item(const char *v, void *data) {
        if (!host_name_is_valid(v))
                return -EDOM;
        return parse_string_item(v, data);
}

static int parse_alias_policy_item(const char *v, void *data) {
        AliasPolicy p = alias_policy_from_string(v);
        if (p < 0)
                return p;
        *(AliasPolicy *)data = p;
        return 0;
}

/* Listen=: words as parse_strv_item() takes them, each an address a listener can be made of, so that a
 * typo is the configuration's error (file and line, --check-config) and not a start that fails */
static int parse_listen_item(const char *v, void *data) {
        _cleanup_strv_free_ char **words = NULL;
        int r = parse_strv_item(v, &words);
        if (r < 0)
                return r;
        STRV_FOREACH (w, words)
                if (listen_address_parse(*w, NULL, NULL) < 0)
                        return -EADDRNOTAVAIL;
        return parse_strv_item(v, data);
}

static int parse_url_item(const char *v, void *data) {
        HttpUrl *u = data;
        if (!*v) {
                http_url_done(u);
                return 0;
        }
        return http_url_parse(v, u);
}

static const ConfigItem config_items[] = {
        {SECTION_PROXY, "Listen", parse_listen_item, offsetof(Config, listen)},
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

        {SECTION_ENGINE, "Host", parse_host_name_item, offsetof(EngineConf, host)},
        {SECTION_ENGINE, "Name", parse_engine_name_item, offsetof(EngineConf, name)},
        {SECTION_ENGINE, "Unit", parse_unit_item, offsetof(EngineConf, unit)},
        {SECTION_ENGINE, "Models", parse_strv_item, offsetof(EngineConf, models)},
        {SECTION_ENGINE, "StartTimeoutSec", parse_timespan_item, offsetof(EngineConf, start_timeout_usec)},
        {SECTION_ENGINE, "URL", parse_url_item, offsetof(EngineConf, url)},
        {SECTION_ENGINE, "Fallback", parse_engine_name_item, offsetof(EngineConf, fallback)},
        {SECTION_ENGINE, "FirstTokenBudgetSec", parse_timespan_item,
         offsetof(EngineConf, first_token_budget_usec)},
        {SECTION_ENGINE, "RequestBudgetSec", parse_timespan_item, offsetof(EngineConf, request_budget_usec)},
        {SECTION_ENGINE, "WarmupRequest", parse_absolute_path_item, offsetof(EngineConf, warmup_request)},
        {SECTION_ENGINE, "PrimeAfterIdleSec", parse_timespan_item,
         offsetof(EngineConf, prime_after_idle_usec)},

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
