/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The Config object itself: its defaults, its lifetime (a reload keeps the old one while requests and
 * hosts use it), its errors kept for clients, and the look-ups every part of the configuration shares.
 * It is the bottom of the configuration's files: conf-verify.c, conf-resolve.c, conf-dump.c and
 * conf-parse.c call into it, and it calls none of them (only url.c and ssh-command.c, below it). */

#include <assert.h>
#include <errno.h>
#include <fnmatch.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "modelgated/conf/conf.h"
#include "modelgated/conf/ssh-command.h"
#include "shared/log.h"
#include "shared/strv.h"

int config_error(Config *c, int error, const char *fmt, ...) {
        assert(c);
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
        /* every error is counted, but a file that is no configuration at all (a binary, the wrong path)
         * would fill the journal */
        if (c->n_errors < CONFIG_ERRORS_LOGGED)
                log_error("%s", s);
        else if (c->n_errors == CONFIG_ERRORS_LOGGED)
                log_error("More than %d errors: the others are counted, not shown", CONFIG_ERRORS_LOGGED);
        c->n_errors++;
        if (strv_length(c->errors) < CONFIG_ERRORS_MAX && strv_push(&c->errors, s) >= 0)
                TAKE_PTR(s);
        return -error;
}

char *const config_session_headers_default[] = {
        (char *)"X-Claude-Code-Session-Id",
        (char *)"X-Session-Id",
        (char *)"x-session-affinity",
        (char *)"session-id",
        (char *)"session_id",
        NULL,
};

char *const *config_session_headers(const Config *c) {
        assert(c);
        return c->session_headers ?: config_session_headers_default;
}

void config_init(Config *c) {
        assert(c);
        *c = (Config){
                .exit_idle_usec = 60 * USEC_PER_SEC,
                .idle_stop_usec = 15 * USEC_PER_MINUTE,
                .hold_down_usec = 30 * USEC_PER_SEC,
                .wait_budget_usec = 15 * USEC_PER_MINUTE,
                .failed_start_hold_usec = 60 * USEC_PER_SEC,
                .keepalive_after_usec = 10 * USEC_PER_SEC,
                .keepalive_interval_usec = 15 * USEC_PER_SEC,
                .poll_interval_usec = 30 * USEC_PER_SEC,
                .header_timeout_usec = 30 * USEC_PER_SEC,
                .idle_timeout_usec = 5 * USEC_PER_MINUTE,
                .body_timeout_usec = 5 * USEC_PER_MINUTE,
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

static void alias_conf_done(AliasConf *a) {
        free(a->name);
        strv_free(a->targets);
        free(a->file);
}

void config_done(Config *c) {
        strv_free(c->listen);
        strv_free(c->server_names);
        strv_free(c->session_headers);
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
        for (size_t i = 0; i < c->n_aliases; i++)
                alias_conf_done(&c->aliases[i]);
        free(c->aliases);
        free(c->access.keys_file);
        free(c->access.redis);
        free(c->access.redis_password_credential);
        if (c->access.redis_password)
                explicit_bzero(c->access.redis_password, strlen(c->access.redis_password));
        free(c->access.redis_password);
        free(c->access.key_hashes);
        free(c->access.key_tiers);
        for (size_t i = 0; i < c->n_origins; i++)
                free(c->origins[i].file);
        free(c->origins);
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
        assert(c);
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

int config_note_origin(Config *c, const char *key, const char *file, unsigned line) {
        assert(c);
        ConfigOrigin *o = NULL;
        char *f = strdup(file);

        if (!f)
                return -ENOMEM;
        for (size_t i = 0; i < c->n_origins && !o; i++)
                if (c->origins[i].key == key)
                        o = &c->origins[i];
        if (!o) {
                ConfigOrigin *n = reallocarray(c->origins, c->n_origins + 1, sizeof(ConfigOrigin));
                if (!n) {
                        free(f);
                        return -ENOMEM;
                }
                c->origins = n;
                o = &n[c->n_origins++];
                *o = (ConfigOrigin){.key = key};
        }
        free(o->file);
        o->file = f;
        o->line = line;
        return 0;
}

const char *config_where(const Config *c, const char *key, char buf[static 256]) {
        assert(c);
        buf[0] = 0;
        for (size_t i = 0; i < c->n_origins; i++)
                if (streq(c->origins[i].key, key))
                        snprintf(buf, 256, "%s:%u: ", c->origins[i].file, c->origins[i].line);
        return buf;
}

const FallbackConf *config_find_fallback(const Config *c, const char *name) {
        assert(c);
        for (size_t i = 0; name && i < c->n_fallbacks; i++)
                if (streq(c->fallbacks[i].name, name))
                        return &c->fallbacks[i];
        return NULL;
}

const AliasConf *config_find_alias(const Config *c, const char *name) {
        assert(c);
        for (size_t i = 0; name && i < c->n_aliases; i++)
                if (streq(c->aliases[i].name, name))
                        return &c->aliases[i];
        return NULL;
}

static const char *const alias_policy_names[_ALIAS_POLICY_MAX] = {
        [ALIAS_POLICY_WARM] = "warm",
        [ALIAS_POLICY_ORDERED] = "ordered",
        [ALIAS_POLICY_SPREAD] = "spread",
};

const char *alias_policy_to_string(AliasPolicy p) {
        return p >= 0 && p < _ALIAS_POLICY_MAX ? alias_policy_names[p] : NULL;
}

AliasPolicy alias_policy_from_string(const char *s) {
        for (AliasPolicy p = 0; s && p < _ALIAS_POLICY_MAX; p++)
                if (streq(s, alias_policy_names[p]))
                        return p;
        return _ALIAS_POLICY_INVALID;
}

const HostConf *config_host_of_model(const Config *c, const char *model, const char **ret_key) {
        assert(c);
        const HostConf *best = NULL;
        size_t best_len = 0;

        for (size_t i = 0; i < c->n_hosts; i++) {
                const char *n = c->hosts[i].name;
                size_t l = strlen(n);
                if (l > best_len && strncmp(model, n, l) == 0 && model[l] == '-' && model[l + 1]) {
                        best = &c->hosts[i];
                        best_len = l;
                }
        }
        if (best && ret_key)
                *ret_key = model + best_len + 1;
        return best;
}

const EngineConf *config_engine_of_key(const Config *c, const char *host, const char *key) {
        assert(c);
        for (size_t i = 0; i < c->n_engines; i++) {
                if (!streq(c->engines[i].host, host))
                        continue;
                STRV_FOREACH (g, c->engines[i].models)
                        if (fnmatch(*g, key, 0) == 0)
                                return &c->engines[i];
        }
        return NULL;
}

const HostConf *config_find_host(const Config *c, const char *name) {
        assert(c);
        for (size_t i = 0; i < c->n_hosts; i++)
                if (streq(c->hosts[i].name, name))
                        return &c->hosts[i];
        return NULL;
}

/* Here rather than in ssh-command.c, which knows no HostConf: modelgatectl --host= builds the same command
 * from its own arguments. */
int host_conf_ssh_argv(const HostConf *h, char ***ret) {
        assert(h);
        return ssh_command_argv(h->ssh_command, h->bus + 4, h->bus_path, ret);
}

char *config_errors_join(char **errors, unsigned n_total, int r) {
        _cleanup_free_ char *s = NULL;
        size_t n = strv_length(errors);
        char *ret;

        if (n == 0)
                /* out of memory, or an error that config_error() could not keep */
                return asprintf(&ret, "%s", strerror(r < 0 ? -r : r)) < 0 ? NULL : ret;
        if (n <= 4)
                return strv_join(errors, "; ");
        char *keep = errors[4];
        errors[4] = NULL;
        s = strv_join(errors, "; ");
        errors[4] = keep;
        if (!s || asprintf(&ret, "%s; and %zu more (see the log)", s, MAX((size_t)n_total, n) - 4) < 0)
                return NULL;
        return ret;
}

const char *config_reload_command(bool user) {
        return user ? "systemctl --user reload modelgate" : "systemctl reload modelgate";
}

char *config_refusal_message(char **errors, unsigned n_total, int r, bool user) {
        _cleanup_free_ char *what = config_errors_join(errors, n_total, r);
        char *ret;

        /* read by someone who may come when the daemon has exited idle: then there is nothing to reload,
         * and the next start reads the file anyway */
        if (!what ||
            asprintf(&ret,
                     "modelgate's configuration has errors: %s; fix it; a running modelgate reads it "
                     "on '%s', a stopped one at its next start",
                     what, config_reload_command(user)) < 0)
                return NULL;
        return ret;
}
