/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* modelgate.conf(5). Owns the Config struct: the daemon reads it whole at
 * start (and, later, on reload into a fresh Config), never piecemeal. Every
 * error names file, line and key; any error refuses the whole configuration. */

#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "modelgated/conf.h"
#include "modelgated/ssh-command.h"
#include "shared/fileio.h"
#include "shared/keys-file.h"
#include "shared/log.h"
#include "shared/parse-util.h"
#include "shared/strv.h"

/* Logs an error of the configuration and keeps its text in c->errors, for a daemon that has to say what is
 * wrong to clients instead of only to its log. Returns -abs(error); %m is that error. */
_printf_(3, 4) static int config_error(Config *c, int error, const char *fmt, ...) {
        _cleanup_free_ char *s = NULL;
        va_list ap;
        int k;

        error = error < 0 ? -error : error;
        errno = error;
        va_start(ap, fmt);
        k = vasprintf(&s, fmt, ap);
        va_end(ap);
        if (k < 0)
                return log_oom();
        log_error("%s", s);
        if (strv_length(c->errors) < CONFIG_ERRORS_MAX && strv_push(&c->errors, s) >= 0)
                TAKE_PTR(s);
        return -error;
}

typedef enum SectionKind {
        SECTION_PROXY,
        SECTION_HOST,
        SECTION_ENGINE,
        SECTION_FALLBACK,
        SECTION_ACCESS,
        SECTION_TIER,
        _SECTION_MAX,
        _SECTION_INVALID = -EINVAL,
} SectionKind;

static const char *const section_names[_SECTION_MAX] = {
        [SECTION_PROXY] = "Proxy",       [SECTION_HOST] = "Host",     [SECTION_ENGINE] = "Engine",
        [SECTION_FALLBACK] = "Fallback", [SECTION_ACCESS] = "Access", [SECTION_TIER] = "Tier",
};

typedef int (*ConfigParser)(const char *value, void *data);

typedef struct ConfigItem {
        SectionKind section;
        const char *key;
        ConfigParser parse;
        size_t offset;
} ConfigItem;

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

static int parse_url_item(const char *v, void *data) {
        HttpUrl *u = data;
        if (!*v) {
                http_url_done(u);
                return 0;
        }
        return http_url_parse(v, u);
}

static const ConfigItem config_items[] = {
        {SECTION_PROXY, "Listen", parse_strv_item, offsetof(Config, listen)},
        {SECTION_PROXY, "ExitIdleSec", parse_timespan_item, offsetof(Config, exit_idle_usec)},
        {SECTION_PROXY, "IdleStopSec", parse_timespan_item, offsetof(Config, idle_stop_usec)},
        {SECTION_PROXY, "HoldDownSec", parse_timespan_item, offsetof(Config, hold_down_usec)},
        {SECTION_PROXY, "WaitBudgetSec", parse_timespan_item, offsetof(Config, wait_budget_usec)},
        {SECTION_PROXY, "KeepaliveAfterSec", parse_timespan_item, offsetof(Config, keepalive_after_usec)},
        {SECTION_PROXY, "KeepaliveIntervalSec", parse_timespan_item,
         offsetof(Config, keepalive_interval_usec)},
        {SECTION_PROXY, "PollIntervalSec", parse_timespan_item, offsetof(Config, poll_interval_usec)},
        {SECTION_PROXY, "HeaderTimeoutSec", parse_timespan_item, offsetof(Config, header_timeout_usec)},
        {SECTION_PROXY, "IdleTimeoutSec", parse_timespan_item, offsetof(Config, idle_timeout_usec)},
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
        {SECTION_TIER, "Models", parse_strv_item, offsetof(TierConf, models)},
        {SECTION_TIER, "MaxBodySize", parse_size_item, offsetof(TierConf, max_body_size)},
};

void config_init(Config *c) {
        *c = (Config){
                .exit_idle_usec = 60 * USEC_PER_SEC,
                .idle_stop_usec = 15 * USEC_PER_MINUTE,
                .hold_down_usec = 30 * USEC_PER_SEC,
                .wait_budget_usec = 15 * USEC_PER_MINUTE,
                .keepalive_after_usec = 10 * USEC_PER_SEC,
                .keepalive_interval_usec = 15 * USEC_PER_SEC,
                .poll_interval_usec = 30 * USEC_PER_SEC,
                .header_timeout_usec = 30 * USEC_PER_SEC,
                .idle_timeout_usec = 5 * USEC_PER_MINUTE,
                .upstream_idle_timeout_usec = 10 * USEC_PER_MINUTE,
                .max_body_size = 64ULL * 1024 * 1024,
                .max_header_size = 64ULL * 1024,
                .max_connections = 16384,
                .max_connections_per_address = 1024,
                .max_feed_subscribers = 64,
                .access.anonymous_daily_requests = UINT64_MAX,
        };
}

static void host_conf_done(HostConf *h) {
        free(h->name);
        http_url_done(&h->url);
        free(h->bus);
        free(h->ssh_command);
        free(h->bus_path);
        strv_free(h->busy_units);
        free(h->file);
}

static void engine_conf_done(EngineConf *e) {
        free(e->host);
        free(e->name);
        free(e->unit);
        strv_free(e->models);
        http_url_done(&e->url);
        free(e->fallback);
        free(e->warmup_request);
        free(e->warmup_body);
        free(e->file);
}

static void fallback_conf_done(FallbackConf *f) {
        free(f->name);
        http_url_done(&f->url);
        free(f->model);
        free(f->key_credential);
        free(f->key_file);
        free(f->key);
        free(f->file);
}

static void tier_conf_done(TierConf *t) {
        free(t->name);
        strv_free(t->models);
        free(t->file);
}

static void access_keys_done(AccessConf *a) {
        free(a->key_hashes);
        free(a->key_tiers);
        a->key_hashes = NULL;
        a->key_tiers = NULL;
        a->n_keys = 0;
}

void config_done(Config *c) {
        strv_free(c->listen);
        strv_free(c->errors);
        for (size_t i = 0; i < c->n_hosts; i++)
                host_conf_done(&c->hosts[i]);
        free(c->hosts);
        for (size_t i = 0; i < c->n_engines; i++)
                engine_conf_done(&c->engines[i]);
        free(c->engines);
        for (size_t i = 0; i < c->n_fallbacks; i++)
                fallback_conf_done(&c->fallbacks[i]);
        free(c->fallbacks);
        for (size_t i = 0; i < c->n_tiers; i++)
                tier_conf_done(&c->tiers[i]);
        free(c->tiers);
        free(c->access.keys_file);
        access_keys_done(&c->access);
        *c = (Config){};
}

Config *config_new(void) {
        Config *c = malloc(sizeof(Config));

        if (!c)
                return NULL;
        config_init(c);
        c->n_ref = 1;
        return c;
}

Config *config_ref(Config *c) {
        if (c)
                c->n_ref++;
        return c;
}

Config *config_unref(Config *c) {
        if (c && --c->n_ref == 0) {
                config_done(c);
                free(c);
        }
        return NULL;
}

const FallbackConf *config_find_fallback(const Config *c, const char *name) {
        for (size_t i = 0; name && i < c->n_fallbacks; i++)
                if (streq(c->fallbacks[i].name, name))
                        return &c->fallbacks[i];
        return NULL;
}

const HostConf *config_find_host(const Config *c, const char *name) {
        for (size_t i = 0; i < c->n_hosts; i++)
                if (streq(c->hosts[i].name, name))
                        return &c->hosts[i];
        return NULL;
}

/* One parsed "Key=value" with where it came from. */
typedef struct Assignment {
        const ConfigItem *item;
        char *value;
        unsigned line;
} Assignment;

typedef struct Section {
        SectionKind kind;
        unsigned line;
        Assignment *assignments;
        size_t n_assignments;
} Section;

static void section_done(Section *s) {
        for (size_t i = 0; i < s->n_assignments; i++)
                free(s->assignments[i].value);
        free(s->assignments);
        *s = (Section){.kind = _SECTION_INVALID};
}

static const char *section_last_value(const Section *s, const char *key) {
        const char *v = NULL;
        for (size_t i = 0; i < s->n_assignments; i++)
                if (streq(s->assignments[i].item->key, key))
                        v = s->assignments[i].value;
        return v;
}

static int apply_assignment(Config *c, const char *name, const Assignment *a, void *base) {
        int r = a->item->parse(a->value, (char *)base + a->item->offset);
        if (r == -ENOMEM)
                return log_oom();
        if (r < 0)
                return config_error(c, r, "%s:%u: [%s] %s='%s' is not valid%s", name, a->line,
                                    section_names[a->item->section], a->item->key, a->value,
                                    r == -EPROTONOSUPPORT ? " (only http:// and https:// URLs are supported)"
                                                          : "");
        return 0;
}

static int section_apply(Config *c, const char *name, Section *s) {
        void *base = NULL;
        int r;

        if (s->kind == SECTION_PROXY)
                base = c;
        else if (s->kind == SECTION_HOST) {
                const char *hn = section_last_value(s, "Name");
                if (!hn)
                        return config_error(c, EINVAL, "%s:%u: [Host] section without Name=", name, s->line);
                for (size_t i = 0; i < c->n_hosts; i++)
                        if (streq(c->hosts[i].name, hn))
                                base = &c->hosts[i];
                if (!base) {
                        HostConf *n = realloc(c->hosts, sizeof(HostConf) * (c->n_hosts + 1));
                        if (!n)
                                return log_oom();
                        c->hosts = n;
                        base = &c->hosts[c->n_hosts++];
                        *(HostConf *)base = (HostConf){
                                .idle_stop_usec = CONF_USEC_UNSET,
                                .hold_down_usec = CONF_USEC_UNSET,
                                .wait_budget_usec = CONF_USEC_UNSET,
                                .file = strdup(name),
                                .line = s->line,
                        };
                }
        } else if (s->kind == SECTION_ENGINE) {
                const char *hn = section_last_value(s, "Host"), *en = section_last_value(s, "Name");
                if (!hn || !en)
                        return config_error(c, EINVAL, "%s:%u: [Engine] section without %s=", name, s->line,
                                            hn ? "Name" : "Host");
                for (size_t i = 0; i < c->n_engines; i++)
                        if (streq(c->engines[i].host, hn) && streq(c->engines[i].name, en))
                                base = &c->engines[i];
                if (!base) {
                        EngineConf *n = realloc(c->engines, sizeof(EngineConf) * (c->n_engines + 1));
                        if (!n)
                                return log_oom();
                        c->engines = n;
                        base = &c->engines[c->n_engines++];
                        *(EngineConf *)base = (EngineConf){
                                .start_timeout_usec = 5 * USEC_PER_MINUTE,
                                .file = strdup(name),
                                .line = s->line,
                        };
                }
        } else if (s->kind == SECTION_FALLBACK || s->kind == SECTION_TIER) {
                bool fb = s->kind == SECTION_FALLBACK;
                const char *n = section_last_value(s, "Name");
                if (!n)
                        return config_error(c, EINVAL, "%s:%u: [%s] section without Name=", name, s->line,
                                            section_names[s->kind]);
                for (size_t i = 0; i < (fb ? c->n_fallbacks : c->n_tiers); i++)
                        if (streq(fb ? c->fallbacks[i].name : c->tiers[i].name, n))
                                base = fb ? (void *)&c->fallbacks[i] : (void *)&c->tiers[i];
                if (!base && fb) {
                        FallbackConf *x =
                                reallocarray(c->fallbacks, c->n_fallbacks + 1, sizeof(FallbackConf));
                        if (!x)
                                return log_oom();
                        c->fallbacks = x;
                        base = &c->fallbacks[c->n_fallbacks++];
                        *(FallbackConf *)base =
                                (FallbackConf){.on_busy = -1, .file = strdup(name), .line = s->line};
                } else if (!base) {
                        TierConf *x = reallocarray(c->tiers, c->n_tiers + 1, sizeof(TierConf));
                        if (!x)
                                return log_oom();
                        c->tiers = x;
                        base = &c->tiers[c->n_tiers++];
                        *(TierConf *)base = (TierConf){
                                .daily_requests = UINT64_MAX, .file = strdup(name), .line = s->line};
                }
        } else if (s->kind == SECTION_ACCESS) {
                c->access.enabled = true;
                base = &c->access;
        } else
                return 0;

        for (size_t i = 0; i < s->n_assignments; i++) {
                r = apply_assignment(c, name, &s->assignments[i], base);
                if (r < 0)
                        return r;
        }
        return 0;
}

static char *strip(char *s) {
        while (isspace((unsigned char)*s))
                s++;
        size_t l = strlen(s);
        while (l > 0 && isspace((unsigned char)s[l - 1]))
                s[--l] = 0;
        return s;
}

int config_parse_text(Config *c, const char *name, const char *text, size_t size) {
        _cleanup_free_ char *copy = NULL;
        Section s = {.kind = _SECTION_INVALID};
        unsigned line = 0;
        bool seen_section = false;
        int r = 0;

        if (memchr(text, 0, size))
                return config_error(c, EINVAL, "%s: contains a NUL byte", name);
        copy = strndup(text, size);
        if (!copy)
                return log_oom();

        for (char *p = copy, *next; p; p = next) {
                char *l, *eq;

                line++;
                next = strchr(p, '\n');
                if (next)
                        *next++ = 0;
                l = strip(p);
                if (*l == 0 || *l == '#' || *l == ';')
                        continue;

                if (*l == '[') {
                        size_t n = strlen(l);
                        if (l[n - 1] != ']' || n < 3) {
                                r = config_error(c, EINVAL, "%s:%u: invalid section header '%s'", name, line,
                                                 l);
                                goto finish;
                        }
                        l[n - 1] = 0;
                        l++;
                        r = section_apply(c, name, &s);
                        section_done(&s);
                        if (r < 0)
                                goto finish;
                        s.kind = _SECTION_INVALID;
                        for (int k = 0; k < _SECTION_MAX; k++)
                                if (streq(l, section_names[k]))
                                        s.kind = k;
                        if (s.kind < 0) {
                                r = config_error(c, EINVAL, "%s:%u: section [%s] is unknown", name, line, l);
                                goto finish;
                        }
                        s.line = line;
                        seen_section = true;
                        continue;
                }

                if (!seen_section) {
                        r = config_error(c, EINVAL, "%s:%u: assignment outside of a section", name, line);
                        goto finish;
                }
                eq = strchr(l, '=');
                if (!eq) {
                        r = config_error(c, EINVAL, "%s:%u: a line that is neither [Section] nor Key=value",
                                         name, line);
                        goto finish;
                }
                *eq = 0;
                char *key = strip(l), *value = eq + 1;
                /* Inline comments, as SPEC.md's examples use them: '#' after whitespace. */
                for (char *h = value; (h = strchr(h, '#')); h++)
                        if (h == value || isspace((unsigned char)h[-1])) {
                                *h = 0;
                                break;
                        }
                value = strip(value);

                const ConfigItem *item = NULL;
                for (size_t k = 0; k < ELEMENTSOF(config_items); k++)
                        if (config_items[k].section == s.kind && streq(config_items[k].key, key))
                                item = &config_items[k];
                if (!item) {
                        r = config_error(c, EINVAL, "%s:%u: unknown key '%s' in section [%s]", name, line,
                                         key, section_names[s.kind]);
                        goto finish;
                }
                /* Validate now, so the error points at this line even if the section is never applied */
                Assignment *na = realloc(s.assignments, sizeof(Assignment) * (s.n_assignments + 1));
                if (!na) {
                        r = log_oom();
                        goto finish;
                }
                s.assignments = na;
                na[s.n_assignments] = (Assignment){.item = item, .value = strdup(value), .line = line};
                if (!na[s.n_assignments].value) {
                        r = log_oom();
                        goto finish;
                }
                s.n_assignments++;
        }

        r = section_apply(c, name, &s);
finish:
        section_done(&s);
        return r;
}

static int config_load_one(Config *c, const char *path) {
        _cleanup_free_ char *text = NULL;
        size_t size = 0;
        int r;

        r = read_full_file(path, &text, &size);
        if (r < 0)
                return r;
        return config_parse_text(c, path, text ?: "", size);
}

static int cmp_str(const void *a, const void *b) {
        return strcmp(*(char *const *)a, *(char *const *)b);
}

int config_load(Config *c, const char *path) {
        _cleanup_free_ char *dir = NULL;
        _cleanup_strv_free_ char **names = NULL;
        bool found = false;
        size_t n = 0;
        DIR *d;
        int r;

        r = config_load_one(c, path);
        if (r == -ENOENT)
                log_debug("%s does not exist, looking for drop-ins only", path);
        else if (r < 0 && r != -EINVAL)
                return config_error(c, r, "Failed to read %s: %m", path);
        else if (r < 0)
                return r;
        else
                found = true;

        if (asprintf(&dir, "%s.d", path) < 0)
                return log_oom();
        d = opendir(dir);
        if (!d) {
                if (errno != ENOENT)
                        return config_error(c, errno, "Failed to open %s: %m", dir);
                goto done;
        }
        for (struct dirent *de; (de = readdir(d));) {
                size_t l = strlen(de->d_name);
                if (de->d_name[0] == '.' || l < 6 || !streq(de->d_name + l - 5, ".conf"))
                        continue;
                char *name = NULL;
                if (asprintf(&name, "%s/%s", dir, de->d_name) < 0 || strv_push(&names, name) < 0) {
                        free(name);
                        closedir(d);
                        return log_oom();
                }
                n++;
        }
        closedir(d);
        if (n > 0)
                qsort(names, n, sizeof(char *), cmp_str);
        for (size_t i = 0; i < n; i++) {
                r = config_load_one(c, names[i]);
                if (r == -EINVAL)
                        return r;
                if (r < 0)
                        return config_error(c, r, "Failed to read %s: %m", names[i]);
                found = true;
        }
done:
        if (!found)
                return config_error(
                        c, ENOENT,
                        "No configuration: neither %s nor %s.d/*.conf exists. See modelgate.conf(5).", path,
                        path);
        return 0;
}

int config_verify(Config *c) {
        int r = 0;

        if (c->max_header_size < 1024 || c->max_header_size > 16 * 1024 * 1024)
                r = config_error(c, EINVAL, "[Proxy] MaxHeaderSize= must be between 1K and 16M");
        if (c->max_connections_per_address < 1)
                r = config_error(c, EINVAL, "[Proxy] MaxConnectionsPerAddress= must be at least 1");
        if (c->max_connections < 1)
                r = config_error(c, EINVAL, "[Proxy] MaxConnections= must be at least 1");
        if (c->keepalive_interval_usec == 0)
                r = config_error(c, EINVAL, "[Proxy] KeepaliveIntervalSec= must not be 0");
        if (c->exit_idle_usec > 0 && c->exit_idle_usec < CONFIG_EXIT_IDLE_MIN_USEC) {
                /* every idle exit and re-activation is a start of the unit, and the units' start limit
                 * (modelgated(8), UNIT SETTINGS) counts on at least a second between them */
                char t[FORMAT_TIMESPAN_MAX];
                log_warning("[Proxy] ExitIdleSec=%s is below 1s, using 1s: each idle exit and re-activation "
                            "counts against the unit's start limit",
                            format_timespan(t, sizeof(t), c->exit_idle_usec));
                c->exit_idle_usec = CONFIG_EXIT_IDLE_MIN_USEC;
        }
        if (c->header_timeout_usec == 0 || c->idle_timeout_usec == 0)
                r = config_error(c, EINVAL, "[Proxy] HeaderTimeoutSec= and IdleTimeoutSec= must not be 0");

        for (size_t i = 0; i < c->n_hosts; i++) {
                HostConf *h = &c->hosts[i];
                if (!h->url.text)
                        r = config_error(c, EINVAL, "%s:%u: [Host] '%s' has no URL=", h->file, h->line,
                                         h->name);
                if (!h->bus && !(h->bus = strdup("local")))
                        return log_oom();
                h->bus_kind = streq(h->bus, "local")    ? BUS_LOCAL
                              : streq(h->bus, "system") ? BUS_SYSTEM
                                                        : BUS_SSH;
                if (!h->ssh_command && !(h->ssh_command = strdup("ssh")))
                        return log_oom();
                if (h->bus_kind == BUS_SSH) {
                        _cleanup_strv_free_ char **argv = NULL;
                        if (host_conf_ssh_argv(h, &argv) < 0)
                                r = config_error(c, EINVAL,
                                                 "%s:%u: [Host] '%s': cannot make an ssh command from "
                                                 "Bus='%s', SSHCommand='%s' and BusPath='%s' (a bad port, "
                                                 "an open quote, or a ' in BusPath=)",
                                                 h->file, h->line, h->name, h->bus, h->ssh_command,
                                                 strna(h->bus_path));
                }
                for (size_t j = 0; j < i; j++)
                        /* a host name that is a prefix of another is fine: the longest match wins */
                        if (strcasecmp(c->hosts[j].name, h->name) == 0 && !streq(c->hosts[j].name, h->name))
                                log_warning("%s:%u: [Host] names '%s' and '%s' differ only in case", h->file,
                                            h->line, h->name, c->hosts[j].name);
        }
        for (size_t i = 0; i < c->n_engines; i++) {
                EngineConf *e = &c->engines[i];
                if (!config_find_host(c, e->host))
                        r = config_error(c, EINVAL,
                                         "%s:%u: [Engine] '%s' names Host='%s', which no [Host] defines",
                                         e->file, e->line, e->name, e->host);
                if (!e->unit)
                        r = config_error(c, EINVAL, "%s:%u: [Engine] '%s' has no Unit=", e->file, e->line,
                                         e->name);
                for (size_t j = 0; j < i; j++)
                        if (e->unit && c->engines[j].unit && streq(c->engines[j].host, e->host) &&
                            streq(c->engines[j].unit, e->unit))
                                r = config_error(c, EINVAL, "%s:%u: [Engine] '%s' and '%s' share Unit='%s'",
                                                 e->file, e->line, c->engines[j].name, e->name, e->unit);
                if (e->fallback && !config_find_fallback(c, e->fallback))
                        r = config_error(
                                c, EINVAL,
                                "%s:%u: [Engine] '%s' names Fallback='%s', which no [Fallback] defines",
                                e->file, e->line, e->name, e->fallback);
                if (e->prime_after_idle_usec != 0 && !e->warmup_request)
                        r = config_error(c, EINVAL,
                                         "%s:%u: [Engine] '%s' has PrimeAfterIdleSec= but no WarmupRequest=",
                                         e->file, e->line, e->name);
        }
        for (size_t i = 0; i < c->n_fallbacks; i++) {
                FallbackConf *f = &c->fallbacks[i];
                if (!f->url.text || !f->model)
                        r = config_error(c, EINVAL, "%s:%u: [Fallback] '%s' needs URL= and Model=", f->file,
                                         f->line, f->name);
                if (f->key_credential && f->key_file)
                        r = config_error(c, EINVAL,
                                         "%s:%u: [Fallback] '%s' has both KeyCredential= and KeyFile=",
                                         f->file, f->line, f->name);
        }
        if (c->n_tiers > 0 && !c->access.enabled)
                r = config_error(c, EINVAL, "[Tier] sections need an [Access] section with KeysFile=");
        return r;
}

/* A secret in a file: the first line, without its line end. */
static int read_secret(const char *path, char **ret) {
        _cleanup_free_ char *s = NULL;
        size_t n;
        int r;

        r = read_full_file(path, &s, &n);
        if (r < 0)
                return r;
        s[strcspn(s, "\r\n")] = 0;
        if (!*s)
                return -ENODATA;
        *ret = TAKE_PTR(s);
        return 0;
}

int config_load_keys(Config *c, const char *path) {
        _cleanup_(keys_file_done) KeysFile f = {};
        _cleanup_free_ char *error = NULL;
        int r;

        access_keys_done(&c->access);
        r = keys_file_read(path, &f, &error);
        if (r == -ENOENT) {
                log_warning("[Access] KeysFile=%s does not exist: no client has a key", path);
                return 0;
        }
        if (r == -EBADMSG)
                return config_error(c, EINVAL, "%s", error);
        if (r < 0)
                return config_error(c, r, "[Access] KeysFile=%s cannot be read: %m", path);

        c->access.key_hashes = reallocarray(NULL, f.n_keys, SHA256_DIGEST_SIZE);
        c->access.key_tiers = reallocarray(NULL, f.n_keys, sizeof(size_t));
        if (f.n_keys > 0 && (!c->access.key_hashes || !c->access.key_tiers))
                return log_oom();
        for (size_t k = 0; k < f.n_keys; k++) {
                const KeyEntry *e = &f.keys[k];
                ssize_t t = -1;

                for (size_t i = 0; i < c->n_tiers; i++)
                        if (streq(c->tiers[i].name, e->tier))
                                t = (ssize_t)i;
                if (t < 0)
                        return config_error(c, EINVAL, "%s:%zu: tier '%s' has no [Tier] section", path,
                                            e->line + 1, e->tier);
                memcpy(c->access.key_hashes[k], e->digest, SHA256_DIGEST_SIZE);
                c->access.key_tiers[k] = (size_t)t;
                c->access.n_keys++;
        }
        return 0;
}

static int resolve_url(Config *c, HttpUrl *u, const char *what) {
        struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV}, *res = NULL;
        char port[8];
        int r;

        snprintf(port, sizeof(port), "%u", u->port);
        r = getaddrinfo(u->host, port, &hints, &res);
        if (r != 0)
                return config_error(c, EHOSTUNREACH, "%s: cannot resolve '%s': %s", what, u->host,
                                    gai_strerror(r));
        memcpy(&u->address, res->ai_addr, res->ai_addrlen);
        u->address_len = res->ai_addrlen;
        freeaddrinfo(res);
        return 0;
}

int config_resolve(Config *c) {
        int r = 0, k;
        for (size_t i = 0; i < c->n_fallbacks; i++) {
                FallbackConf *f = &c->fallbacks[i];
                _cleanup_free_ char *what = NULL, *path = NULL;
                if (asprintf(&what, "[Fallback] %s URL=%s", f->name, f->url.text) < 0)
                        return log_oom();
                k = resolve_url(c, &f->url, what);
                if (k < 0)
                        r = k;
                if (f->key_credential) {
                        const char *d = getenv("CREDENTIALS_DIRECTORY");
                        if (!d) {
                                r = config_error(
                                        c, ENOENT,
                                        "%s:%u: [Fallback] '%s' KeyCredential=%s: $CREDENTIALS_DIRECTORY is "
                                        "not set (LoadCredential= in the unit)",
                                        f->file, f->line, f->name, f->key_credential);
                                continue;
                        }
                        if (asprintf(&path, "%s/%s", d, f->key_credential) < 0)
                                return log_oom();
                }
                if (path || f->key_file) {
                        k = read_secret(path ?: f->key_file, &f->key);
                        if (k < 0)
                                r = config_error(c, k,
                                                 "%s:%u: [Fallback] '%s': the key in %s cannot be read: %m",
                                                 f->file, f->line, f->name, path ?: f->key_file);
                }
                if (f->key && !f->url.tls)
                        log_warning(
                                "%s:%u: [Fallback] '%s': URL=%s is http://, so its key crosses the network "
                                "in clear text; use https://",
                                f->file, f->line, f->name, f->url.text);
        }
        for (size_t i = 0; i < c->n_engines; i++) {
                EngineConf *e = &c->engines[i];
                if (!e->warmup_request)
                        continue;
                k = read_full_file(e->warmup_request, &e->warmup_body, &e->warmup_size);
                if (k < 0)
                        r = config_error(c, k, "%s:%u: [Engine] '%s' WarmupRequest=%s cannot be read: %m",
                                         e->file, e->line, e->name, e->warmup_request);
        }
        if (c->access.keys_file) {
                k = config_load_keys(c, c->access.keys_file);
                if (k < 0)
                        r = k;
        }
        for (size_t i = 0; i < c->n_hosts; i++) {
                _cleanup_free_ char *what = NULL;
                if (asprintf(&what, "[Host] %s URL=%s", c->hosts[i].name, c->hosts[i].url.text) < 0)
                        return log_oom();
                k = resolve_url(c, &c->hosts[i].url, what);
                if (k < 0)
                        r = k;
        }
        for (size_t i = 0; i < c->n_engines; i++) {
                _cleanup_free_ char *what = NULL;
                if (!c->engines[i].url.text)
                        continue;
                if (asprintf(&what, "[Engine] %s URL=%s", c->engines[i].name, c->engines[i].url.text) < 0)
                        return log_oom();
                k = resolve_url(c, &c->engines[i].url, what);
                if (k < 0)
                        r = k;
        }
        return r;
}

int config_read(Config *c, const char *path) {
        int r;

        r = config_load(c, path);
        if (r < 0)
                return r;
        r = config_verify(c);
        if (r < 0)
                return r;
        return config_resolve(c);
}

int host_conf_ssh_argv(const HostConf *h, char ***ret) {
        return ssh_command_argv(h->ssh_command, h->bus + 4, h->bus_path, ret);
}

char *config_default_path(bool user) {
        const char *xdg = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");
        char *p = NULL;

        if (!user)
                return strdup("/etc/modelgate/modelgate.conf");
        if (xdg && xdg[0] == '/')
                return asprintf(&p, "%s/modelgate/modelgate.conf", xdg) < 0 ? NULL : p;
        if (home && home[0] == '/')
                return asprintf(&p, "%s/.config/modelgate/modelgate.conf", home) < 0 ? NULL : p;
        return NULL;
}
