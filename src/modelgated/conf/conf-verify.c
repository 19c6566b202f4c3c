/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* config_verify(): what no single assignment can tell, checked once every file is read. Each check logs
 * and keeps its error and goes on, so that one run names every problem; it runs after the files had
 * errors too, but what is missing from a section with a value that was not valid is not said again (the
 * value's own error says it). */

#include <assert.h>
#include <stddef.h>
#include <string.h>
#include <strings.h>

#include "modelgated/conf/conf.h"
#include "shared/log.h"
#include "shared/strv.h"

static int verify_proxy(Config *c) {
        char w[256];
        int r = 0;

        if (c->max_header_size < 1024 || c->max_header_size > 16 * 1024 * 1024)
                r = config_error(c, EINVAL, "%s[Proxy] MaxHeaderSize= must be between 1K and 16M",
                                 config_where(c, "MaxHeaderSize", w));
        if (c->max_connections_per_address < 1)
                r = config_error(c, EINVAL, "%s[Proxy] MaxConnectionsPerAddress= must be at least 1",
                                 config_where(c, "MaxConnectionsPerAddress", w));
        if (c->max_connections < 1)
                r = config_error(c, EINVAL, "%s[Proxy] MaxConnections= must be at least 1",
                                 config_where(c, "MaxConnections", w));
        if (c->keepalive_interval_usec == 0)
                r = config_error(c, EINVAL, "%s[Proxy] KeepaliveIntervalSec= must not be 0",
                                 config_where(c, "KeepaliveIntervalSec", w));
        if (c->exit_idle_usec > 0 && c->exit_idle_usec < CONFIG_EXIT_IDLE_MIN_USEC) {
                /* every idle exit and re-activation is a start of the unit, and the units' start limit
                 * (modelgated(8), UNIT SETTINGS) counts on at least a second between them (rule:start-limit)
                 */
                char t[FORMAT_TIMESPAN_MAX];
                log_warning(
                        "%s[Proxy] ExitIdleSec=%s is below 1s, using 1s: each idle exit and re-activation "
                        "counts against the unit's start limit",
                        config_where(c, "ExitIdleSec", w), format_timespan(t, sizeof(t), c->exit_idle_usec));
                c->exit_idle_usec = CONFIG_EXIT_IDLE_MIN_USEC;
        }
        static const struct {
                const char *key;
                size_t offset;
        } timeouts[] = {
                {"HeaderTimeoutSec", offsetof(Config, header_timeout_usec)},
                {"IdleTimeoutSec", offsetof(Config, idle_timeout_usec)},
                {"BodyTimeoutSec", offsetof(Config, body_timeout_usec)},
        };
        for (size_t i = 0; i < ELEMENTSOF(timeouts); i++)
                if (*(usec_t *)((char *)c + timeouts[i].offset) == 0)
                        r = config_error(c, EINVAL, "%s[Proxy] %s= must not be 0 (infinity: no bound)",
                                         config_where(c, timeouts[i].key, w), timeouts[i].key);
        /* rule:shared-counts: Redis is optional at build time, and a build without it says so */
        if (c->access.redis && !HAVE_HIREDIS)
                r = config_error(c, EOPNOTSUPP,
                                 "%s[Access] Redis=%s: this modelgated was built without hiredis (meson "
                                 "-Dredis=enabled, with libhiredis-dev)",
                                 config_where(c, "Redis", w), c->access.redis);
        if (c->access.redis_password_credential && !c->access.redis)
                r = config_error(c, EINVAL, "%s[Access] RedisPasswordCredential= without Redis=",
                                 config_where(c, "RedisPasswordCredential", w));
        return r;
}

/* Also fills in Bus= and SSHCommand= where they are not given. */
static int verify_host(Config *c, size_t i) {
        HostConf *h = &c->hosts[i];
        int r = 0;

        if (!h->url.text && !h->invalid)
                r = config_error(c, EINVAL, "%s:%u: [Host] '%s' has no URL=", h->file, h->line, h->name);
        if (!h->bus && !(h->bus = strdup("local")))
                return log_oom();
        h->bus_kind = streq(h->bus, "local") ? BUS_LOCAL : streq(h->bus, "system") ? BUS_SYSTEM : BUS_SSH;
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
        return r;
}

static int verify_engine(Config *c, size_t i) {
        const EngineConf *e = &c->engines[i];
        int r = 0;

        if (!config_find_host(c, e->host))
                r = config_error(c, EINVAL, "%s:%u: [Engine] '%s' names Host='%s', which no [Host] defines",
                                 e->file, e->line, e->name, e->host);
        if (!e->unit && !e->invalid)
                r = config_error(c, EINVAL, "%s:%u: [Engine] '%s' has no Unit=", e->file, e->line, e->name);
        for (size_t j = 0; j < i; j++)
                if (e->unit && c->engines[j].unit && streq(c->engines[j].host, e->host) &&
                    streq(c->engines[j].unit, e->unit))
                        r = config_error(c, EINVAL, "%s:%u: [Engine] '%s' and '%s' share Unit='%s'", e->file,
                                         e->line, c->engines[j].name, e->name, e->unit);
        if (e->fallback && !config_find_fallback(c, e->fallback))
                r = config_error(c, EINVAL,
                                 "%s:%u: [Engine] '%s' names Fallback='%s', which no [Fallback] defines",
                                 e->file, e->line, e->name, e->fallback);
        if (e->prime_after_idle_usec != 0 && !e->warmup_request && !e->invalid)
                r = config_error(c, EINVAL,
                                 "%s:%u: [Engine] '%s' has PrimeAfterIdleSec= but no WarmupRequest=",
                                 e->file, e->line, e->name);
        return r;
}

static int verify_fallback(Config *c, const FallbackConf *f) {
        int r = 0;

        if ((!f->url.text || !f->model) && !f->invalid)
                r = config_error(c, EINVAL, "%s:%u: [Fallback] '%s' needs URL= and Model=", f->file, f->line,
                                 f->name);
        if (f->key_credential && f->key_file)
                r = config_error(c, EINVAL,
                                 "%s:%u: [Fallback] '%s' has both KeyCredential= and KeyFile=", f->file,
                                 f->line, f->name);
        return r;
}

/* An alias is the operator's promise that its targets are interchangeable: each must be a model modelgate
 * can route. Its own name has no '-' (conf-items.c), so it never collides with "<host>-"; a target is
 * "<host>-<key>", never an alias, so aliases cannot form a cycle. */
static int verify_alias(Config *c, size_t i) {
        const AliasConf *a = &c->aliases[i];
        const HostConf *h;
        const char *key;
        int r = 0;

        if (strv_length(a->targets) == 0 && !a->invalid)
                r = config_error(c, EINVAL, "%s:%u: [Alias] '%s' has no Targets=", a->file, a->line,
                                 a->name);
        if (strv_length(a->targets) > ALIAS_TARGETS_MAX)
                r = config_error(c, EINVAL, "%s:%u: [Alias] '%s' has more than %d Targets=", a->file,
                                 a->line, a->name, ALIAS_TARGETS_MAX);
        STRV_FOREACH (t, a->targets) {
                for (char **u = a->targets; u < t; u++)
                        if (streq(*u, *t))
                                r = config_error(c, EINVAL, "%s:%u: [Alias] '%s' names target '%s' twice",
                                                 a->file, a->line, a->name, *t);
                h = config_host_of_model(c, *t, &key);
                if (!h) {
                        r = config_error(c, EINVAL,
                                         "%s:%u: [Alias] '%s': target '%s' does not start with a configured "
                                         "host name and '-'%s",
                                         a->file, a->line, a->name, *t,
                                         config_find_alias(c, *t) ? " (a target cannot be an alias)" : "");
                        continue;
                }
                bool engines = false;
                for (size_t j = 0; j < c->n_engines; j++)
                        engines = engines || streq(c->engines[j].host, h->name);
                /* a host without engines lists its models at run time; one with engines is known here */
                if (engines && !config_engine_of_key(c, h->name, key))
                        r = config_error(c, EINVAL,
                                         "%s:%u: [Alias] '%s': target '%s': no [Engine] of host '%s' lists "
                                         "'%s' in Models=",
                                         a->file, a->line, a->name, *t, h->name, key);
        }
        return r;
}

int config_verify(Config *c) {
        assert(c);
        int r, k;

        r = verify_proxy(c);
        for (size_t i = 0; i < c->n_hosts; i++) {
                k = verify_host(c, i);
                if (k == -ENOMEM)
                        return k;
                if (k < 0)
                        r = k;
        }
        for (size_t i = 0; i < c->n_engines; i++) {
                k = verify_engine(c, i);
                if (k < 0)
                        r = k;
        }
        for (size_t i = 0; i < c->n_fallbacks; i++) {
                k = verify_fallback(c, &c->fallbacks[i]);
                if (k < 0)
                        r = k;
        }
        for (size_t i = 0; i < c->n_aliases; i++) {
                k = verify_alias(c, i);
                if (k < 0)
                        r = k;
        }
        if (c->n_tiers > 0 && !c->access.enabled)
                r = config_error(c, EINVAL, "%s:%u: [Tier] sections need an [Access] section with KeysFile=",
                                 c->tiers[0].file, c->tiers[0].line);
        return r;
}
