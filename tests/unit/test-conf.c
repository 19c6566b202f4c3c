/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <sys/stat.h>
#include <unistd.h>

#include "modelgated/conf/conf.h"
#include "shared/keys-file.h"
#include "shared/strv.h"
#include "shared/time-util.h"
#include "tests.h"

static int parse(Config *c, const char *text) {
        config_init(c);
        return config_parse_text(c, "test.conf", text, strlen(text));
}

TEST(defaults_and_proxy_keys) {
        Config c;
        ASSERT_OK(parse(&c, "[Proxy]\nListen=127.0.0.1:8080   # inline comment\nListen=[::1]:9\n"
                            "IdleStopSec=1h 30min\nMaxBodySize=2M\nHoldDownSec=infinity\n; comment\n"));
        ASSERT_EQ(strv_length(c.listen), 2);
        ASSERT_STREQ(c.listen[0], "127.0.0.1:8080");
        ASSERT_EQ(c.idle_stop_usec, 90 * USEC_PER_MINUTE);
        ASSERT_EQ(c.max_body_size, 2 * 1024 * 1024);
        ASSERT_EQ(c.hold_down_usec, USEC_INFINITY);
        ASSERT_EQ(c.wait_budget_usec, 15 * USEC_PER_MINUTE);
        ASSERT_EQ(c.body_timeout_usec, 5 * USEC_PER_MINUTE);
        ASSERT_OK(config_verify(&c));
        config_done(&c);

        /* a body may have no total bound, but not a zero one (every body would get 408) */
        ASSERT_OK(parse(&c, "[Proxy]\nBodyTimeoutSec=infinity\n"));
        ASSERT_EQ(c.body_timeout_usec, USEC_INFINITY);
        ASSERT_OK(config_verify(&c));
        config_done(&c);
        ASSERT_OK(parse(&c, "[Proxy]\nBodyTimeoutSec=0\n"));
        ASSERT_TRUE(config_verify(&c) < 0);
        config_done(&c);
}

TEST(repeated_sections_and_merge_by_name) {
        Config c;
        ASSERT_OK(parse(
                &c, "[Host]\nName=3090\nURL=http://127.0.0.1:8080\n"
                    "[Host]\nName=a9\nURL=http://[::1]:81/base/\nBus=ssh:gpu@a9:2222\nBusyUnits=x.service\n"
                    "[Engine]\nHost=3090\nName=mainline\nUnit=llama-mainline.service\nModels=laguna-* qwen\n"
                    "[Engine]\nHost=3090\nName=fork\nUnit=llama-fork.service\n"));
        /* a drop-in amends the host of the same name instead of adding one */
        const char *dropin =
                "[Host]\nName=3090\nIdleStopSec=5min\n[Engine]\nHost=3090\nName=fork\nModels=flint\n";
        ASSERT_OK(config_parse_text(&c, "drop.conf", dropin, strlen(dropin)));
        ASSERT_OK(config_verify(&c));
        ASSERT_EQ(c.n_hosts, 2);
        ASSERT_EQ(c.n_engines, 2);
        ASSERT_STREQ(c.hosts[0].url.authority, "127.0.0.1:8080");
        ASSERT_EQ(c.hosts[0].idle_stop_usec, 5 * USEC_PER_MINUTE);
        ASSERT_EQ(c.hosts[1].hold_down_usec, CONF_USEC_UNSET);
        ASSERT_STREQ(c.hosts[1].url.authority, "[::1]:81");
        ASSERT_STREQ(c.hosts[1].url.base_path, "/base");
        ASSERT_EQ(c.hosts[1].bus_kind, BUS_SSH);
        ASSERT_EQ(c.hosts[0].bus_kind, BUS_LOCAL);
        ASSERT_STREQ(c.engines[1].models[0], "flint");
        ASSERT_EQ(strv_length(c.engines[0].models), 2);
        config_done(&c);
}

TEST(errors_are_refused) {
        static const char *const bad[] = {
                "Listen=1\n",                               /* outside a section */
                "[Proxy]\nBogus=1\n",                       /* unknown key */
                "[Nope]\n",                                 /* unknown section */
                "[Host]\nName=a\nURL=ftp://x:1\n",          /* not http(s) */
                "[Fallback]\nName=x\nKeyFile=relative\n",   /* not absolute */
                "[Fallback]\nName=x\nKeyCredential=../k\n", /* not a credential name */
                "[Fallback]\nName=x\nOnBusy=maybe\n",
                "[Tier]\nName=x\nDailyRequests=lots\n",
                "[Tier]\nName=x\nDailyTokens=-5\n",
                "[Fallback]\nURL=http://x:1\n",                             /* no Name= */
                "[Proxy]\nIdleStopSec=soon\n",                              /* bad time */
                "[Proxy]\nMaxBodySize=-1\n",                                /* bad size */
                "[Proxy]\nListen\n",                                        /* no '=' */
                "[Host]\nURL=http://x:1\n",                                 /* no Name= */
                "[Host]\nName=has-dash\nURL=http://x:1\n",                  /* '-' in a host name */
                "[Host]\nName=a\nURL=http://x:99999\n",                     /* port */
                "[Host]\nName=a\nURL=http://x\nBus=tcp:x\n",                /* bus */
                "[Host]\nName=a\nURL=http://x\nBus=ssh:a;rm\n",             /* shell metacharacters */
                "[Host]\nName=a\nURL=http://x\nBus=ssh:-oProxyCommand=x\n", /* an option */
                "[Host]\nName=a\nURL=http://x\nBus=ssh:-u@a\n",
                "[Host]\nName=a\nURL=http://x\nBus=ssh:u@a%h\n",
                "[Host]\nName=a\nURL=http://x\nBus=ssh:u$(id)@a\n",
                "[Host]\nName=a\nURL=http://x\nBus=ssh:u@a|b\n",
                "[Host]\nName=a\nURL=http://x\nBus=ssh:u@a:22x\n",
                "[Host]\nName=a\nURL=http://x\nBus=ssh:u@[::1]x\n",
                "[Engine]\nName=a\nUnit=a.service\n", /* no Host= */
                "[Engine]\nHost=a\nName=b\nUnit=noextension\n",
                "[Proxy\n",
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                Config c;
                if (parse(&c, bad[i]) == 0)
                        FAIL("accepted: %s", bad[i]);
                /* kept for a daemon that answers with them */
                if (strv_length(c.errors) != 1 || !strstr(c.errors[0], "test.conf"))
                        FAIL("not kept: %s", bad[i]);
                config_done(&c);
        }
}

/* rule:shared-counts: a socket or a numeric address, never a password in the file nor a name to look up */
TEST(redis_targets) {
        static const char *const good[] = {"unix:/run/redis/redis.sock",
                                           "redis://127.0.0.1",
                                           "redis://127.0.0.1:6380",
                                           "redis://[::1]:6379",
                                           "redis://[::1]",
                                           "redis://localhost:6379",
                                           ""};
        static const char *const bad[] = {"redis://:secret@127.0.0.1",
                                          "redis://redis.example:6379",
                                          "redis://127.0.0.1:0",
                                          "redis://127.0.0.1:99999",
                                          "redis://[::1",
                                          "unix:relative",
                                          "tcp://127.0.0.1",
                                          "/run/redis.sock"};
        _cleanup_free_ char *text = NULL;
        Config c;

        for (size_t i = 0; i < ELEMENTSOF(good); i++) {
                free(text);
                ASSERT_TRUE(asprintf(&text, "[Access]\nRedis=%s\n", good[i]) > 0);
                if (parse(&c, text) != 0)
                        FAIL("refused: %s", good[i]);
                ASSERT_TRUE(*good[i] ? c.access.redis && streq(c.access.redis, good[i]) : !c.access.redis);
                config_done(&c);
        }
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                free(text);
                ASSERT_TRUE(asprintf(&text, "[Access]\nRedis=%s\n", bad[i]) > 0);
                if (parse(&c, text) == 0)
                        FAIL("accepted: %s", bad[i]);
                config_done(&c);
        }
        /* a password is a credential's, and one without Redis= is a mistake said at once */
        ASSERT_OK(parse(&c, "[Access]\nRedisPasswordCredential=redis-password\n"));
        ASSERT_TRUE(config_verify(&c) < 0);
        config_done(&c);
        ASSERT_TRUE(parse(&c, "[Access]\nRedis=unix:/r.sock\nRedisPasswordCredential=../p\n") < 0);
        config_done(&c);
}

/* every form Bus=ssh: documents parses (and builds a command line), bare IPv6 included */
TEST(ssh_targets_accepted) {
        static const char *const good[] = {"ssh:a9",
                                           "ssh:gpu@a9",
                                           "ssh:gpu@a9:2222",
                                           "ssh:gpu.x_y@host-1.lan",
                                           "ssh:u@[fd00::1]:22",
                                           "ssh:fd00::1",
                                           "ssh:[::1]"};
        for (size_t i = 0; i < ELEMENTSOF(good); i++) {
                Config c;
                char text[256];
                snprintf(text, sizeof(text), "[Host]\nName=a\nURL=http://x:1\nBus=%s\n", good[i]);
                if (parse(&c, text) != 0)
                        FAIL("refused: %s", good[i]);
                config_done(&c);
        }
}

TEST(verify_checks_the_whole) {
        static const char *const bad[] = {
                "[Host]\nName=a\n",                                           /* no URL */
                "[Engine]\nHost=ghost\nName=e\nUnit=e.service\n",             /* unknown host */
                "[Host]\nName=a\nURL=http://x:1\n[Engine]\nHost=a\nName=e\n", /* no Unit */
                "[Host]\nName=a\nURL=http://x:1\n[Engine]\nHost=a\nName=e\nUnit=u.service\n"
                "[Engine]\nHost=a\nName=f\nUnit=u.service\n", /* shared unit */
                "[Host]\nName=a\nURL=http://x:1\n[Engine]\nHost=a\nName=e\nUnit=u.service\nFallback=nope\n",
                "[Fallback]\nName=f\nURL=http://x:1\n", /* no Model= */
                "[Fallback]\nName=f\nURL=http://x:1\nModel=m\nKeyFile=/k\nKeyCredential=k\n",
                "[Tier]\nName=t\n", /* no [Access] */
                "[Host]\nName=a\nURL=http://"
                "x:1\n[Engine]\nHost=a\nName=e\nUnit=u.service\nPrimeAfterIdleSec=1h\n",
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                Config c;
                ASSERT_OK(parse(&c, bad[i]));
                if (config_verify(&c) == 0)
                        FAIL("verified: %s", bad[i]);
                if (strv_length(c.errors) == 0)
                        FAIL("not kept: %s", bad[i]);
                config_done(&c);
        }
}

#define TWO_HOSTS                                                                                           \
        "[Host]\nName=3090\nURL=http://127.0.0.1:8080\n[Host]\nName=a9\nURL=http://127.0.0.1:8081\n"        \
        "[Host]\nName=plain\nURL=http://127.0.0.1:8082\n"                                                   \
        "[Engine]\nHost=3090\nName=mainline\nUnit=m.service\nModels=laguna-*\n"                             \
        "[Engine]\nHost=a9\nName=mainline\nUnit=m.service\nModels=laguna-*\n"

TEST(aliases_parse_merge_and_dump) {
        Config c;
        ASSERT_OK(parse(&c, TWO_HOSTS "[Alias]\nName=laguna\nTargets=3090-laguna-xs a9-laguna-xs-q8\n"
                                      "[Alias]\nName=any\nTargets=plain-whatever\nPolicy=spread\n"
                                      "[Alias]\nName=laguna\nPolicy=ordered\n"));
        ASSERT_OK(config_verify(&c));
        ASSERT_EQ(c.n_aliases, 2);
        ASSERT_EQ(c.aliases[0].policy, ALIAS_POLICY_ORDERED); /* amended by name */
        ASSERT_EQ(strv_length(c.aliases[0].targets), 2);
        ASSERT_EQ(c.aliases[1].policy, ALIAS_POLICY_SPREAD);
        ASSERT_STREQ(config_find_alias(&c, "any")->targets[0], "plain-whatever");
        ASSERT_TRUE(!config_find_alias(&c, "3090-laguna-xs"));
        char *text = NULL;
        size_t n = 0;
        FILE *f = open_memstream(&text, &n);
        config_dump(&c, f);
        fclose(f);
        ASSERT_TRUE(strstr(
                text, "[Alias]\nName=laguna\nTargets=3090-laguna-xs a9-laguna-xs-q8\nPolicy=ordered\n"));
        free(text);
        config_done(&c);
        ASSERT_EQ(parse(&c, "[Alias]\nName=x\nPolicy=nearest\n"), -EINVAL);
        config_done(&c);
        ASSERT_EQ(parse(&c, "[Alias]\nName=two words\n"), -EINVAL);
        config_done(&c);
        /* a host name's characters: no '-', so that an alias never reads as "<host>-<key>" */
        ASSERT_EQ(parse(&c, "[Alias]\nName=a9-fast\nTargets=3090-laguna-xs\n"), -EINVAL);
        ASSERT_STREQ(c.errors[0],
                     "test.conf:2: [Alias] Name='a9-fast' is not valid: '-' is not allowed in an "
                     "alias name (letters, digits, '_' and '.', at most 64, as a host name: a name "
                     "with '-' would read as '<host>-<model>'), e.g. 'a9_fast'");
        config_done(&c);
}

/* rule:host-check: ServerNames= takes names, "*." names and addresses, never a port or a URL */
TEST(server_names_are_checked_and_dumped) {
        Config c;
        char *text = NULL;
        size_t n = 0;

        ASSERT_OK(parse(
                &c, "[Proxy]\nServerNames=llm.example.org *.lan\nServerNames=192.0.2.7 [2001:db8::7]\n"));
        ASSERT_EQ(strv_length(c.server_names), 4);
        FILE *f = open_memstream(&text, &n);
        config_dump(&c, f);
        fclose(f);
        ASSERT_TRUE(strstr(text, "\nServerNames=llm.example.org *.lan 192.0.2.7 [2001:db8::7]\n"));
        free(text);
        config_done(&c);
        const char *bad[] = {"llm.example.org:8080", "http://llm.example.org", "*", "-x", "a/b"};
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                char conf[128], error[512];
                snprintf(conf, sizeof(conf), "[Proxy]\nServerNames=ok.lan %s\n", bad[i]);
                ASSERT_EQ(parse(&c, conf), -EINVAL);
                snprintf(error, sizeof(error),
                         "test.conf:2: [Proxy] ServerNames='ok.lan %s' is not valid: each a host name "
                         "(letters, "
                         "digits, '-', '_', '.'), '*.' and a name for every name under it, or an IPv4 or "
                         "IPv6 "
                         "address; no port, no scheme",
                         bad[i]);
                ASSERT_STREQ(c.errors[0], error);
                config_done(&c);
        }
        /* empty: none again */
        ASSERT_OK(parse(&c, "[Proxy]\nServerNames=a.lan\nServerNames=\n"));
        ASSERT_TRUE(!c.server_names);
        config_done(&c);
}

/* Listen= is checked where the file is read (file and line, --check-config), and dumped with its default */
TEST(listen_is_checked_and_dumped) {
        Config c;
        char *text = NULL;
        size_t n = 0;

        ASSERT_OK(parse(&c, "[Proxy]\nListen=8080 /run/m.sock\nListen=[::1]:9\n"));
        ASSERT_EQ(strv_length(c.listen), 3);
        FILE *f = open_memstream(&text, &n);
        config_dump(&c, f);
        fclose(f);
        ASSERT_TRUE(strstr(text, "\nListen=8080\nListen=/run/m.sock\nListen=[::1]:9\n"));
        free(text);
        config_done(&c);

        ASSERT_EQ(parse(&c, "[Proxy]\nListen=8080\nListen=localhost:80\n"), -EINVAL);
        ASSERT_STREQ(c.errors[0],
                     "test.conf:3: [Proxy] Listen='localhost:80' is not valid: each an IPv4:port, "
                     "[IPv6]:port, a port, or an absolute path");
        config_done(&c);
        ASSERT_EQ(parse(&c, "[Proxy]\nListen=127.0.0.1:65536\n"), -EINVAL);
        ASSERT_TRUE(strstr(c.errors[0], "test.conf:2: [Proxy] Listen='127.0.0.1:65536' is not valid"));
        config_done(&c);

        /* none given: the default is shown, as every other value */
        ASSERT_OK(parse(&c, "[Proxy]\nListen=8080\nListen=\n"));
        ASSERT_TRUE(!c.listen);
        f = open_memstream(&text, &n);
        config_dump(&c, f);
        fclose(f);
        ASSERT_TRUE(strstr(text, "[Proxy]\n# Listen= is used without socket activation"));
        ASSERT_TRUE(strstr(text, "\nListen=127.0.0.1:8080\n"));
        free(text);
        config_done(&c);
}

/* rule:sessions: SessionHeaders= appends to its default, an empty one leaves none, a name with a character
 * no header name has is refused; the list in effect is dumped, the default too */
static char *dumped(Config *c) {
        char *text = NULL;
        size_t n = 0;
        FILE *f = open_memstream(&text, &n);
        config_dump(c, f);
        fclose(f);
        return text;
}

TEST(session_headers_append_reset_and_dump) {
        Config c;
        char *text;

        ASSERT_OK(parse(&c, "[Proxy]\n"));
        ASSERT_TRUE(config_session_headers(&c) == config_session_headers_default);
        text = dumped(&c);
        ASSERT_TRUE(strstr(text, "\nSessionHeaders=X-Claude-Code-Session-Id X-Session-Id x-session-affinity "
                                 "session-id session_id\n"));
        free(text);
        config_done(&c);

        /* appended, a name already there (in any case) once */
        ASSERT_OK(parse(&c, "[Proxy]\nSessionHeaders=X-Agent-Session x-session-id\n"));
        ASSERT_EQ(strv_length((char **)config_session_headers(&c)), 6);
        ASSERT_STREQ(config_session_headers(&c)[5], "X-Agent-Session");
        config_done(&c);

        /* emptied first: only what follows; emptied last: none, and dumped so */
        ASSERT_OK(parse(&c, "[Proxy]\nSessionHeaders=\nSessionHeaders=X-Agent-Session\n"));
        ASSERT_EQ(strv_length((char **)config_session_headers(&c)), 1);
        config_done(&c);
        ASSERT_OK(parse(&c, "[Proxy]\nSessionHeaders=X-Agent-Session\nSessionHeaders=\n"));
        ASSERT_EQ(strv_length((char **)config_session_headers(&c)), 0);
        text = dumped(&c);
        ASSERT_TRUE(strstr(text, "\nSessionHeaders=\n"));
        free(text);
        config_done(&c);

        ASSERT_EQ(parse(&c, "[Proxy]\nSessionHeaders=X-Session:Id\n"), -EINVAL);
        ASSERT_STREQ(c.errors[0],
                     "test.conf:2: [Proxy] SessionHeaders='X-Session:Id' is not valid: header "
                     "names separated by spaces: ':' is not allowed in 'X-Session:Id' (RFC 9110 "
                     "token characters only)");
        config_done(&c);
        ASSERT_EQ(parse(&c, "[Proxy]\nSessionHeaders=a b c d e f g h i j k l\n"), -EINVAL);
        ASSERT_TRUE(strstr(c.errors[0], "at most 16 header names in all"));
        config_done(&c);
}

/* rule:daily-tokens: DailyTokens= parses as a cap (a number or infinity, the default) and is dumped */
TEST(tier_daily_tokens) {
        Config c;
        char *text = NULL;
        size_t n = 0;

        ASSERT_OK(parse(&c, "[Access]\n[Tier]\nName=free\nDailyTokens=200000\n[Tier]\nName=pro\n"
                            "[Tier]\nName=x\nDailyTokens=infinity\n"));
        ASSERT_OK(config_verify(&c));
        ASSERT_EQ(c.n_tiers, 3);
        ASSERT_EQ(c.tiers[0].daily_tokens, 200000);
        ASSERT_TRUE(c.tiers[1].daily_tokens == UINT64_MAX && c.tiers[1].daily_requests == UINT64_MAX);
        ASSERT_TRUE(c.tiers[2].daily_tokens == UINT64_MAX);
        FILE *f = open_memstream(&text, &n);
        config_dump(&c, f);
        fclose(f);
        ASSERT_TRUE(strstr(text, "[Tier]\nName=free\nDailyTokens=200000\n"));
        ASSERT_TRUE(!strstr(text, "Name=pro\nDailyTokens"));
        free(text);
        config_done(&c);
}

TEST(aliases_that_cannot_route_are_refused) {
        static const struct {
                const char *text, *error;
        } bad[] = {
                {"[Alias]\nName=laguna\nTargets=3090-laguna-xs nowhere-laguna\n",
                 "test.conf:20: [Alias] 'laguna': target 'nowhere-laguna' does not start with a configured "
                 "host "
                 "name and '-'"},
                {"[Alias]\nName=laguna\nTargets=3090-flint\n",
                 "test.conf:20: [Alias] 'laguna': target '3090-flint': no [Engine] of host '3090' lists "
                 "'flint' "
                 "in Models="},
                {"[Alias]\nName=laguna\n", "test.conf:20: [Alias] 'laguna' has no Targets="},
                {"[Alias]\nName=laguna\nTargets=3090-laguna-xs 3090-laguna-xs\n",
                 "test.conf:20: [Alias] 'laguna' names target '3090-laguna-xs' twice"},
                /* an alias's target is a host's model, never an alias: no cycle can be written */
                {"[Alias]\nName=a\nTargets=b\n[Alias]\nName=b\nTargets=3090-laguna-xs\n",
                 "test.conf:20: [Alias] 'a': target 'b' does not start with a configured host name and '-' "
                 "(a "
                 "target cannot be an alias)"},
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                Config c;
                char text[1024];
                snprintf(text, sizeof(text), "%s%s", TWO_HOSTS, bad[i].text);
                ASSERT_OK(parse(&c, text));
                ASSERT_EQ(config_verify(&c), -EINVAL);
                ASSERT_STREQ(c.errors[0], bad[i].error);
                config_done(&c);
        }
}

TEST(errors_are_kept_as_logged) {
        Config c;
        char text[4096] = "", *p = text;

        ASSERT_EQ(parse(&c, "[Proxy]\nBogusKey=1\n"), -EINVAL);
        ASSERT_EQ(strv_length(c.errors), 1);
        ASSERT_STREQ(
                c.errors[0],
                "test.conf:2: unknown key 'BogusKey' in section [Proxy]; modelgate.conf(5) lists its keys");
        config_done(&c);

        /* verify names every problem, not just the first; up to CONFIG_ERRORS_MAX */
        ASSERT_OK(parse(&c, "[Host]\nName=a\n[Host]\nName=b\nURL=http://x:1\n[Host]\nName=c\n"));
        ASSERT_EQ(config_verify(&c), -EINVAL);
        ASSERT_EQ(strv_length(c.errors), 2);
        ASSERT_STREQ(c.errors[0], "test.conf:1: [Host] 'a' has no URL=");
        ASSERT_STREQ(c.errors[1], "test.conf:6: [Host] 'c' has no URL=");
        config_done(&c);
        for (int i = 0; i < 40; i++)
                p += sprintf(p, "[Host]\nName=h%d\n", i);
        ASSERT_OK(parse(&c, text));
        ASSERT_EQ(config_verify(&c), -EINVAL);
        ASSERT_EQ(strv_length(c.errors), CONFIG_ERRORS_MAX);
        config_done(&c);

        /* no file at all is an error like the others, with the %m of a read that failed */
        config_init(&c);
        ASSERT_EQ(config_read(&c, "/nonexistent/modelgate.conf"), -ENOENT);
        ASSERT_EQ(strv_length(c.errors), 1);
        ASSERT_STREQ(c.errors[0], "No configuration: neither /nonexistent/modelgate.conf nor "
                                  "/nonexistent/modelgate.conf.d/*.conf exists. See modelgate.conf(5).");
        config_done(&c);
        config_init(&c);
        ASSERT_TRUE(config_read(&c, "/proc/self/mem") < 0);
        ASSERT_EQ(strv_length(c.errors), 1);
        ASSERT_TRUE(strncmp(c.errors[0], "Failed to read /proc/self/mem: ", 31) == 0);
        config_done(&c);
}

/* One run says every error of a file, in the order of its lines, and each says what would be right */
TEST(every_error_of_a_file_at_once) {
        static const char text[] = "[Proxy]\n"
                                   "IdelStopSec=5min\n"
                                   "MaxBodySize=lots\n"
                                   "[host]\n"
                                   "Name=x\n"
                                   "[Host]\n"
                                   "Name=rtx-4090\n"
                                   "URL=http://127.0.0.1:8080\n"
                                   "[Host]\n"
                                   "Name=ok\n"
                                   "URL=ftp://x\n"
                                   "Unit=llama.service\n"
                                   "garbage line\n"
                                   "[Engine]\n"
                                   "Host=ok\n"
                                   "Name=main\n"
                                   "Unit=main.service\n";
        static const char *const want[] = {
                "test.conf:2: unknown key 'IdelStopSec' in section [Proxy]; did you mean IdleStopSec=?",
                "test.conf:3: [Proxy] MaxBodySize='lots' is not valid: a size in bytes, or with K, M or G "
                "(1024-based) like 512K or 64M",
                "test.conf:4: section [host] is unknown; did you mean [Host]?",
                "test.conf:7: [Host] Name='rtx-4090' is not valid: '-' is not allowed in a host name "
                "(letters, "
                "digits, '_' and '.', at most 64: '-' separates host and model in '<host>-<model>'), e.g. "
                "'rtx_4090'",
                "test.conf:11: [Host] URL='ftp://x' is not valid: only http:// and https:// URLs are "
                "supported",
                "test.conf:12: unknown key 'Unit' in section [Host]; Unit= is a key of [Engine]",
                "test.conf:13: a line that is neither [Section] nor Key=value",
        };
        Config c;

        ASSERT_EQ(parse(&c, text), -EINVAL);
        ASSERT_EQ(c.n_errors, ELEMENTSOF(want));
        ASSERT_EQ(strv_length(c.errors), ELEMENTSOF(want));
        for (size_t i = 0; i < ELEMENTSOF(want); i++)
                ASSERT_STREQ(c.errors[i], want[i]);
        /* what could be read is: the good host and its engine; the section [host] and the host without a
         * valid name are not */
        ASSERT_EQ(c.n_hosts, 1);
        ASSERT_STREQ(c.hosts[0].name, "ok");
        ASSERT_TRUE(c.hosts[0].invalid);
        ASSERT_EQ(c.n_engines, 1);
        ASSERT_STREQ(c.engines[0].unit, "main.service");
        /* the host's URL= was not valid: verify does not say it has none */
        ASSERT_OK(config_verify(&c));
        config_done(&c);
}

TEST(errors_say_the_fix) {
        static const struct {
                const char *text, *error;
        } cases[] = {
                {"[Nope]\n",
                 "test.conf:1: section [Nope] is unknown; the sections are [Proxy], [Host], [Engine], "
                 "[Fallback], [Access], [Tier] and [Alias]"},
                {"[PROXY]\n", "test.conf:1: section [PROXY] is unknown; did you mean [Proxy]?"},
                {"[Engines]\n", "test.conf:1: section [Engines] is unknown; did you mean [Engine]?"},
                {"[Proxy\n",
                 "test.conf:1: invalid section header '[Proxy': a header is [Name], alone on its line"},
                {"Listen=1\n", "test.conf:1: assignment outside of a section; it goes under [Proxy]"},
                {"Bogus=1\n",
                 "test.conf:1: assignment outside of a section; a file begins with a [Section] header"},
                {"[Proxy]\nidlestopsec=1\n",
                 "test.conf:2: unknown key 'idlestopsec' in section [Proxy]; did you mean IdleStopSec=?"},
                {"[Proxy]\nBogusKey=1\n",
                 "test.conf:2: unknown key 'BogusKey' in section [Proxy]; modelgate.conf(5) lists its keys"},
                {"[Proxy]\nHoldDownSec=soon\n",
                 "test.conf:2: [Proxy] HoldDownSec='soon' is not valid: a time "
                 "span like 30s, 15min, 1h 30min or infinity"},
                {"[Host]\nName=a b\n",
                 "test.conf:2: [Host] Name='a b' is not valid: ' ' is not allowed in a "
                 "host name (letters, digits, '_' and '.', at most 64: '-' separates host "
                 "and model in '<host>-<model>'), e.g. 'a_b'"},
                {"[Host]\nName=\xc3\xa9t\xc3\xa9\n", "test.conf:2: [Host] Name='\xc3\xa9t\xc3\xa9' is not "
                                                     "valid: \\xc3 is not allowed in a host name "
                                                     "(letters, digits, '_' and '.', at most 64: '-' "
                                                     "separates host and model in '<host>-<model>'), "
                                                     "e.g. '__t__'"},
                {"[Engine]\nHost=a\nName=main fork\nUnit=a.service\n",
                 "test.conf:3: [Engine] Name='main fork' is not valid: ' ' is not allowed in a name "
                 "(letters, "
                 "digits, '_', '.', '-' and '@', at most 64), e.g. 'main_fork'"},
                {"[Tier]\nName=t\nActivity=maybe\n", "test.conf:3: [Tier] Activity='maybe' is not valid: "
                                                     "yes or no (also true/false, on/off, 1/0)"},
                {"[Alias]\nName=a\nPolicy=nearest\n",
                 "test.conf:3: [Alias] Policy='nearest' is not valid: warm, ordered or spread"},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                Config c;
                ASSERT_EQ(parse(&c, cases[i].text), -EINVAL);
                ASSERT_TRUE(c.n_errors >= 1);
                ASSERT_STREQ(c.errors[0], cases[i].error);
                config_done(&c);
        }
}

/* A file that is no configuration at all: every error is counted, the first CONFIG_ERRORS_MAX kept */
TEST(many_errors_are_counted) {
        char text[8192] = "", *p = text;
        Config c;

        for (int i = 0; i < 500; i++)
                p += sprintf(p, "junk%d\n", i);
        ASSERT_EQ(parse(&c, text), -EINVAL);
        ASSERT_EQ(c.n_errors, 500);
        ASSERT_EQ(strv_length(c.errors), CONFIG_ERRORS_MAX);
        ASSERT_STREQ(c.errors[0], "test.conf:1: a line that is neither [Section] nor Key=value");
        config_done(&c);
}

/* A section without a (valid) name is not applied, but its values are checked; what is missing from a
 * section whose value did not parse is not said again */
TEST(nameless_sections_are_checked_too) {
        Config c;

        ASSERT_EQ(parse(&c, "[Host]\nURL=ftp://x\nIdleStopSec=soon\n"), -EINVAL);
        ASSERT_EQ(c.n_errors, 3);
        ASSERT_STREQ(c.errors[0],
                     "test.conf:2: [Host] URL='ftp://x' is not valid: only http:// and https:// "
                     "URLs are supported");
        ASSERT_TRUE(strstr(c.errors[1], "test.conf:3: [Host] IdleStopSec='soon' is not valid: a time span"));
        ASSERT_STREQ(c.errors[2], "test.conf:1: [Host] section without Name=");
        ASSERT_EQ(c.n_hosts, 0);
        config_done(&c);

        ASSERT_EQ(parse(&c, "[Host]\nName=a\nURL=http://x:1\n[Engine]\nHost=a\nName=e\nUnit=noext\n"
                            "PrimeAfterIdleSec=1h\nWarmupRequest=relative.json\n"),
                  -EINVAL);
        ASSERT_EQ(c.n_errors, 2);
        ASSERT_EQ(config_verify(&c), 0); /* neither "has no Unit=" nor "no WarmupRequest=" */
        ASSERT_EQ(c.n_errors, 2);
        config_done(&c);
}

/* config_read(): every file and the checks of the whole, in one run */
TEST(every_file_and_the_whole_in_one_run) {
        char dir[] = "/tmp/test-conf-XXXXXX", path[64], dropins[80], dropin[128];
        Config c;
        FILE *f;

        ASSERT_TRUE(mkdtemp(dir) != NULL);
        snprintf(path, sizeof(path), "%s/modelgate.conf", dir);
        snprintf(dropins, sizeof(dropins), "%s.d", path);
        snprintf(dropin, sizeof(dropin), "%s/50-x.conf", dropins);
        ASSERT_TRUE((f = fopen(path, "we")));
        fputs("[Proxy]\nBogusKey=1\n[Host]\nName=a\nURL=http://127.0.0.1:1\nBus=tcp:x\n", f);
        fclose(f);
        ASSERT_OK(mkdir(dropins, 0755));
        ASSERT_TRUE((f = fopen(dropin, "we")));
        fputs("[Engine]\nHost=ghost\nName=e\nUnit=e.service\nStartTimeoutSec=never\n", f);
        fclose(f);

        config_init(&c);
        ASSERT_EQ(config_read(&c, path), -EINVAL);
        ASSERT_EQ(c.n_errors, 4);
        ASSERT_TRUE(strstr(c.errors[0], "modelgate.conf:2: unknown key 'BogusKey'"));
        ASSERT_TRUE(strstr(c.errors[1],
                           "modelgate.conf:6: [Host] Bus='tcp:x' is not valid: local, system or "
                           "ssh:[USER@]HOST[:PORT]"));
        ASSERT_TRUE(strstr(c.errors[2], "50-x.conf:5: [Engine] StartTimeoutSec='never' is not valid"));
        ASSERT_TRUE(strstr(c.errors[3],
                           "50-x.conf:1: [Engine] 'e' names Host='ghost', which no [Host] defines"));
        config_done(&c);
        ASSERT_OK(unlink(dropin));
        ASSERT_OK(rmdir(dropins));
        ASSERT_OK(unlink(path));
        ASSERT_OK(rmdir(dir));
}

/* [Proxy] is one section however many times it is written: a check of its values names where each was last
 * set */
TEST(proxy_errors_name_file_and_line) {
        const char *dropin = "[Proxy]\nMaxConnections=0\n";
        Config c;

        ASSERT_OK(parse(&c, "[Proxy]\nMaxConnections=5\nHeaderTimeoutSec=0\n[Host]\nName=a\nURL=http://x:1\n"
                            "[Tier]\nName=t\n"));
        ASSERT_OK(config_parse_text(&c, "drop.conf", dropin, strlen(dropin)));
        ASSERT_EQ(config_verify(&c), -EINVAL);
        ASSERT_EQ(c.n_errors, 3);
        ASSERT_STREQ(c.errors[0], "drop.conf:2: [Proxy] MaxConnections= must be at least 1");
        ASSERT_STREQ(c.errors[1],
                     "test.conf:3: [Proxy] HeaderTimeoutSec= must not be 0 (infinity: no bound)");
        ASSERT_STREQ(c.errors[2], "test.conf:7: [Tier] sections need an [Access] section with KeysFile=");
        config_done(&c);
}

/* rule:refusing-state: the answer says how a fixed file is read, whether the daemon still runs or not */
TEST(refusal_message) {
        char *errors[] = {"a.conf:1: one",  "a.conf:2: two",  "a.conf:3: three",
                          "a.conf:4: four", "a.conf:5: five", NULL};
        char *m;

        m = config_refusal_message(errors + 4, 1, -EINVAL, /* user= */ true);
        ASSERT_STREQ(
                m, "modelgate's configuration has errors: a.conf:5: five; fix it; a running modelgate reads "
                   "it on 'systemctl --user reload modelgate', a stopped one at its next start");
        free(m);
        m = config_refusal_message(errors, 20, -EINVAL, /* user= */ false);
        ASSERT_STREQ(m,
                     "modelgate's configuration has errors: a.conf:1: one; a.conf:2: two; a.conf:3: three; "
                     "a.conf:4: four; and 16 more (see the log); fix it; a running modelgate reads it on "
                     "'systemctl reload modelgate', a stopped one at its next start");
        free(m);
        ASSERT_STREQ(errors[4], "a.conf:5: five");
}

TEST(exit_idle_is_a_second_at_least) {
        static const struct {
                const char *value;
                usec_t usec;
        } cases[] = {
                {"300ms", USEC_PER_SEC},    {"1ms", USEC_PER_SEC},       {"1s", USEC_PER_SEC}, {"0", 0},
                {"90s", 90 * USEC_PER_SEC}, {"infinity", USEC_INFINITY},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                Config c;
                char text[64];
                snprintf(text, sizeof(text), "[Proxy]\nExitIdleSec=%s\n", cases[i].value);
                ASSERT_OK(parse(&c, text));
                ASSERT_OK(config_verify(&c));
                ASSERT_EQ(c.exit_idle_usec, cases[i].usec);
                config_done(&c);
        }
}

TEST(timespans) {
        usec_t u;
        ASSERT_OK(parse_timespan("30s", &u));
        ASSERT_EQ(u, 30 * USEC_PER_SEC);
        ASSERT_OK(parse_timespan("15min", &u));
        ASSERT_EQ(u, 15 * USEC_PER_MINUTE);
        ASSERT_OK(parse_timespan("1h 30min", &u));
        ASSERT_EQ(u, 90 * USEC_PER_MINUTE);
        ASSERT_OK(parse_timespan("2", &u));
        ASSERT_EQ(u, 2 * USEC_PER_SEC);
        ASSERT_OK(parse_timespan("1.5s", &u));
        ASSERT_EQ(u, 1500 * USEC_PER_MSEC);
        ASSERT_OK(parse_timespan("250ms", &u));
        ASSERT_EQ(u, 250 * USEC_PER_MSEC);
        ASSERT_TRUE(parse_timespan("", &u) < 0);
        ASSERT_TRUE(parse_timespan("-1s", &u) < 0);
        ASSERT_TRUE(parse_timespan("5 parsecs", &u) < 0);
        char buf[FORMAT_TIMESPAN_MAX];
        ASSERT_STREQ(format_timespan(buf, sizeof(buf), 90 * USEC_PER_MINUTE), "1h 30min");
        ASSERT_STREQ(format_timespan(buf, sizeof(buf), 15 * USEC_PER_MINUTE), "15min");
}

static char *ssh_line(const char *bus, const char *command, const char *bus_path) {
        HostConf h = {.bus = (char *)bus, .ssh_command = (char *)command, .bus_path = (char *)bus_path};
        char **argv = NULL;
        char *j;

        if (host_conf_ssh_argv(&h, &argv) < 0)
                return NULL;
        j = strv_join(argv, "|");
        strv_free(argv);
        return j;
}

TEST(ssh_command_lines) {
        char *s;

        /* rule:ssh-bridge: the options, "--" before the target, the bridge with an explicit bus path */
        s = ssh_line("ssh:gpu@a9", "ssh", NULL);
        ASSERT_STREQ(s, "ssh|-xT|-oBatchMode=yes|-oConnectTimeout=10|-oServerAliveInterval=15|"
                        "-oServerAliveCountMax=3|--|gpu@a9|SYSTEMD_LOG_TARGET=console|systemd-stdio-bridge|"
                        "--bus-path=unix:path=/run/user/$(id -u)/bus");
        free(s);
        s = ssh_line("ssh:a9:2222", "ssh -F '/etc/modelgate/ssh config' -i \"k\"", "unix:path=/b/bus");
        ASSERT_STREQ(s, "ssh|-F|/etc/modelgate/ssh config|-i|k|-xT|-oBatchMode=yes|-oConnectTimeout=10|"
                        "-oServerAliveInterval=15|-oServerAliveCountMax=3|-p|2222|--|a9|"
                        "SYSTEMD_LOG_TARGET=console|systemd-stdio-bridge|--bus-path='unix:path=/b/bus'");
        free(s);
        s = ssh_line("ssh:u@[fd00::1]:22", "ssh", NULL);
        ASSERT_TRUE(s && strstr(s, "|-p|22|--|u@fd00::1|"));
        free(s);
        s = ssh_line("ssh:fd00::1", "ssh", NULL); /* a bare IPv6 address has no port */
        ASSERT_TRUE(s && strstr(s, "|--|fd00::1|"));
        free(s);
        ASSERT_NULL(ssh_line("ssh:a9:", "ssh", NULL));
        ASSERT_NULL(ssh_line("ssh:a9:22x", "ssh", NULL));
        ASSERT_NULL(ssh_line("ssh:[::1", "ssh", NULL));
        ASSERT_NULL(ssh_line("ssh:a9", "ssh 'open", NULL));
        ASSERT_NULL(ssh_line("ssh:a9", "", NULL));
        ASSERT_NULL(ssh_line("ssh:a9", "ssh", "unix:path=/it's"));
}

TEST(sha256_vectors) {
        char h[65];
        sha256_hex("", 0, h);
        ASSERT_STREQ(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        sha256_hex("abc", 3, h);
        ASSERT_STREQ(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        static const char m[] =
                "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"; /* 56 bytes: two blocks */
        sha256_hex(m, sizeof(m) - 1, h);
        ASSERT_STREQ(h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
        char a[1000];
        memset(a, 'a', sizeof(a));
        sha256_hex(a, sizeof(a), h);
        ASSERT_STREQ(h, "41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3");
}

TESTS_MAIN
