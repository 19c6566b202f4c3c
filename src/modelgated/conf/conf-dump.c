/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* modelgated --check-config: the effective configuration as modelgate.conf text, drop-ins merged and
 * defaults filled in, so that what the daemon will do can be read before it does it. */

#include <assert.h>
#include <stdio.h>

#include "modelgated/conf/conf.h"
#include "modelgated/conf/listen-address.h"
#include "shared/strv.h"

static void dump_usec(FILE *f, const char *key, usec_t u) {
        char buf[FORMAT_TIMESPAN_MAX];
        if (u != CONF_USEC_UNSET)
                fprintf(f, "%s=%s\n", key, format_timespan(buf, sizeof(buf), u));
}

static void dump_strv(FILE *f, const char *key, char *const *l) {
        if (!l)
                return;
        fprintf(f, "%s=", key);
        STRV_FOREACH (s, l)
                fprintf(f, "%s%s", s == l ? "" : " ", *s);
        fputc('\n', f);
}

static void dump_proxy(const Config *c, FILE *f) {
        fprintf(f, "[Proxy]\n");
        /* the default too, as every other value: where a start without socket activation listens */
        fprintf(f, "# Listen= is used without socket activation; socket-activated, modelgate.socket's "
                   "ListenStream= is\n");
        if (!c->listen)
                fprintf(f, "Listen=%s\n", LISTEN_ADDRESS_DEFAULT);
        STRV_FOREACH (l, c->listen)
                fprintf(f, "Listen=%s\n", *l);
        dump_strv(f, "ServerNames", c->server_names);
        dump_usec(f, "ExitIdleSec", c->exit_idle_usec);
        dump_usec(f, "IdleStopSec", c->idle_stop_usec);
        dump_usec(f, "HoldDownSec", c->hold_down_usec);
        dump_usec(f, "WaitBudgetSec", c->wait_budget_usec);
        dump_usec(f, "FailedStartHoldSec", c->failed_start_hold_usec);
        dump_usec(f, "KeepaliveAfterSec", c->keepalive_after_usec);
        dump_usec(f, "KeepaliveIntervalSec", c->keepalive_interval_usec);
        dump_usec(f, "PollIntervalSec", c->poll_interval_usec);
        dump_usec(f, "HeaderTimeoutSec", c->header_timeout_usec);
        dump_usec(f, "IdleTimeoutSec", c->idle_timeout_usec);
        dump_usec(f, "BodyTimeoutSec", c->body_timeout_usec);
        dump_usec(f, "UpstreamIdleTimeoutSec", c->upstream_idle_timeout_usec);
        fprintf(f, "MaxBodySize=%llu\nMaxHeaderSize=%llu\nMaxConnections=%llu\n",
                (unsigned long long)c->max_body_size, (unsigned long long)c->max_header_size,
                (unsigned long long)c->max_connections);
        fprintf(f, "MaxConnectionsPerAddress=%llu\nMaxFeedSubscribers=%llu\n",
                (unsigned long long)c->max_connections_per_address,
                (unsigned long long)c->max_feed_subscribers);
        /* the default too: which headers name a session (rule:sessions) */
        fprintf(f, "SessionHeaders=");
        STRV_FOREACH (h, (char **)config_session_headers(c))
                fprintf(f, "%s%s", h == config_session_headers(c) ? "" : " ", *h);
        fputc('\n', f);
}

static void dump_host(const HostConf *h, FILE *f) {
        fprintf(f, "\n[Host]\nName=%s\nURL=%s\nBus=%s\n", h->name, strna(h->url.text), strna(h->bus));
        if (h->bus_kind == BUS_SSH) {
                _cleanup_strv_free_ char **argv = NULL;
                fprintf(f, "SSHCommand=%s\n", strna(h->ssh_command));
                if (host_conf_ssh_argv(h, &argv) >= 0) {
                        fputs("# the bus runs:", f);
                        STRV_FOREACH (a, argv)
                                fprintf(f, strpbrk(*a, " \t\"") ? " '%s'" : " %s", *a);
                        fputc('\n', f);
                }
        }
        if (h->bus_path)
                fprintf(f, "BusPath=%s\n", h->bus_path);
        dump_strv(f, "BusyUnits", h->busy_units);
        dump_usec(f, "IdleStopSec", h->idle_stop_usec);
        dump_usec(f, "HoldDownSec", h->hold_down_usec);
        dump_usec(f, "WaitBudgetSec", h->wait_budget_usec);
        dump_usec(f, "FailedStartHoldSec", h->failed_start_hold_usec);
        if (h->shared)
                fprintf(f, "Shared=yes\n");
}

static void dump_engine(const EngineConf *e, FILE *f) {
        fprintf(f, "\n[Engine]\nHost=%s\nName=%s\nUnit=%s\n", e->host, e->name, strna(e->unit));
        dump_strv(f, "Models", e->models);
        dump_usec(f, "StartTimeoutSec", e->start_timeout_usec);
        dump_usec(f, "IdleStopSec", e->idle_stop_usec);
        if (e->url.text)
                fprintf(f, "URL=%s\n", e->url.text);
        if (e->fallback)
                fprintf(f, "Fallback=%s\n", e->fallback);
        if (e->first_token_budget_usec)
                dump_usec(f, "FirstTokenBudgetSec", e->first_token_budget_usec);
        if (e->request_budget_usec)
                dump_usec(f, "RequestBudgetSec", e->request_budget_usec);
        if (e->warmup_request)
                fprintf(f, "WarmupRequest=%s\n", e->warmup_request);
        if (e->prime_after_idle_usec)
                dump_usec(f, "PrimeAfterIdleSec", e->prime_after_idle_usec);
        if (e->prompt_cache_save_usec != 5 * USEC_PER_SEC)
                dump_usec(f, "PromptCacheSaveSec", e->prompt_cache_save_usec);
}

static void dump_fallback(const FallbackConf *fb, FILE *f) {
        fprintf(f, "\n[Fallback]\nName=%s\nURL=%s\nModel=%s\n", fb->name, strna(fb->url.text),
                strna(fb->model));
        if (fb->key_credential)
                fprintf(f, "KeyCredential=%s\n", fb->key_credential);
        if (fb->key_file)
                fprintf(f, "KeyFile=%s\n", fb->key_file);
        fprintf(f, "OnBusy=%s\n", fb->on_busy == 0 ? "no" : "yes");
}

static void dump_access(const AccessConf *a, FILE *f) {
        fprintf(f, "\n[Access]\n");
        if (a->keys_file)
                fprintf(f, "KeysFile=%s\n# %zu key(s)\n", a->keys_file, a->n_keys);
        if (a->anonymous_daily_requests != UINT64_MAX)
                fprintf(f, "AnonymousDailyRequests=%llu\n", (unsigned long long)a->anonymous_daily_requests);
        if (a->anonymous_max_body_size)
                fprintf(f, "AnonymousMaxBodySize=%llu\n", (unsigned long long)a->anonymous_max_body_size);
        if (a->redis)
                fprintf(f, "Redis=%s\n", a->redis);
        if (a->redis_password_credential)
                fprintf(f, "RedisPasswordCredential=%s\n", a->redis_password_credential);
}

static void dump_tier(const TierConf *t, FILE *f) {
        fprintf(f, "\n[Tier]\nName=%s\n", t->name);
        if (t->daily_requests != UINT64_MAX)
                fprintf(f, "DailyRequests=%llu\n", (unsigned long long)t->daily_requests);
        if (t->daily_tokens != UINT64_MAX)
                fprintf(f, "DailyTokens=%llu\n", (unsigned long long)t->daily_tokens);
        if (t->max_body_size)
                fprintf(f, "MaxBodySize=%llu\n", (unsigned long long)t->max_body_size);
        dump_strv(f, "Models", t->models);
        if (t->activity)
                fprintf(f, "Activity=yes\n");
        if (t->control)
                fprintf(f, "Control=yes\n");
}

static void dump_alias(const AliasConf *a, FILE *f) {
        fprintf(f, "\n[Alias]\nName=%s\n", a->name);
        dump_strv(f, "Targets", a->targets);
        fprintf(f, "Policy=%s\n", alias_policy_to_string(a->policy));
}

void config_dump(const Config *c, FILE *f) {
        assert(c);
        dump_proxy(c, f);
        for (size_t i = 0; i < c->n_hosts; i++)
                dump_host(&c->hosts[i], f);
        for (size_t i = 0; i < c->n_engines; i++)
                dump_engine(&c->engines[i], f);
        for (size_t i = 0; i < c->n_fallbacks; i++)
                dump_fallback(&c->fallbacks[i], f);
        if (c->access.enabled)
                dump_access(&c->access, f);
        for (size_t i = 0; i < c->n_tiers; i++)
                dump_tier(&c->tiers[i], f);
        for (size_t i = 0; i < c->n_aliases; i++)
                dump_alias(&c->aliases[i], f);
}
