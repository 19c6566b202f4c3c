/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* rule:host-check: which Host a web page's request may name. */

#include <string.h>

#include "modelgated/access/host-check.h"
#include "tests.h"

static Span S_(const char *s) {
        return (Span){s, s ? strlen(s) : 0};
}

static bool allowed(const char *host, const char *local, const char *hostname, char *const *server_names) {
        Span name;
        return host_check_split(S_(host), &name) && host_check_allowed(name, local, hostname, server_names);
}

TEST(what_marks_a_web_pages_request) {
        const Span none = S_(NULL), ua = S_("Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36");

        ASSERT_STREQ(host_check_browser_header(S_("https://evil.example"), none, none, none), "Origin");
        ASSERT_STREQ(host_check_browser_header(S_("null"), S_("cross-site"), none, ua), "Origin");
        ASSERT_STREQ(host_check_browser_header(none, S_("same-origin"), none, none), "Sec-Fetch-Site");
        ASSERT_STREQ(host_check_browser_header(none, none, S_("http://rebound.example/"), none), "Referer");
        /* a plain-http page's same-origin GET: none of the others */
        ASSERT_STREQ(host_check_browser_header(none, none, none, ua), "User-Agent");
        /* agents, SDKs and curl; Node's fetch sends Sec-Fetch-Mode, which is not asked for */
        ASSERT_TRUE(!host_check_browser_header(none, none, none, none));
        ASSERT_TRUE(!host_check_browser_header(none, none, none, S_("curl/7.88.1")));
        ASSERT_TRUE(!host_check_browser_header(none, none, none, S_("node")));
        ASSERT_TRUE(!host_check_browser_header(none, none, none, S_("Anthropic/JS 0.60.0")));
        ASSERT_TRUE(!host_check_browser_header(none, none, none, S_("Mozilla")));
}

TEST(the_host_part) {
        Span n;
        ASSERT_TRUE(host_check_split(S_("gpu.lan:8080"), &n) && n.n == 7 && memcmp(n.p, "gpu.lan", 7) == 0);
        ASSERT_TRUE(host_check_split(S_("[::1]:8080"), &n) && n.n == 3 && memcmp(n.p, "::1", 3) == 0);
        ASSERT_TRUE(host_check_split(S_("[::1]"), &n) && n.n == 3);
        ASSERT_TRUE(host_check_split(S_("localhost."), &n) && n.n == 9);
        ASSERT_TRUE(!host_check_split(S_("[::1"), &n));
        ASSERT_TRUE(!host_check_split(S_("[::1]x"), &n));
        ASSERT_TRUE(!host_check_split(S_("gpu.lan:80a"), &n));
        ASSERT_TRUE(!host_check_split(S_(":8080"), &n));
        ASSERT_TRUE(!host_check_split(S_(""), &n));
}

TEST(the_names_modelgate_answers_for) {
        char *names[] = {(char *)"llm.example.org", (char *)"*.lan", (char *)"192.0.2.7",
                         (char *)"[2001:db8::7]", NULL};

        /* loopback addresses, the connection's own, localhost names */
        ASSERT_TRUE(allowed("127.0.0.1:8080", "127.0.0.1", NULL, NULL));
        ASSERT_TRUE(allowed("127.0.0.2:9000", "192.0.2.1", NULL, NULL));
        ASSERT_TRUE(allowed("[::1]:8080", NULL, NULL, NULL));
        ASSERT_TRUE(allowed("192.0.2.1:8080", "192.0.2.1", NULL, NULL));
        ASSERT_TRUE(allowed("192.0.2.1", "::ffff:192.0.2.1", NULL, NULL));
        ASSERT_TRUE(allowed("[2001:db8::1]:1", "2001:db8::1", NULL, NULL));
        ASSERT_TRUE(allowed("LocalHost:8080", NULL, NULL, NULL));
        ASSERT_TRUE(allowed("ui.localhost:8080", NULL, NULL, NULL));
        ASSERT_TRUE(allowed("localhost.:8080", NULL, NULL, NULL));
        /* the machine's name, whole or its first label */
        ASSERT_TRUE(allowed("gpubox:8080", NULL, "gpubox.example.org", NULL));
        ASSERT_TRUE(allowed("GPUBOX.example.org:8080", NULL, "gpubox.example.org", NULL));
        ASSERT_TRUE(!allowed("gpubox.evil.example:8080", NULL, "gpubox.example.org", NULL));
        /* ServerNames= */
        ASSERT_TRUE(allowed("llm.example.org:443", NULL, NULL, names));
        ASSERT_TRUE(allowed("gpu.lan:8080", NULL, NULL, names));
        ASSERT_TRUE(!allowed("lan:8080", NULL, NULL, names));
        ASSERT_TRUE(allowed("192.0.2.7:8080", "10.0.0.1", NULL, names));
        ASSERT_TRUE(allowed("[2001:db8::7]:8080", "10.0.0.1", NULL, names));
        /* anything else: a name of another site (rebinding), another address */
        ASSERT_TRUE(!allowed("evil.example:8080", "127.0.0.1", "gpubox", names));
        ASSERT_TRUE(!allowed("localhost.evil.example", "127.0.0.1", "gpubox", names));
        ASSERT_TRUE(!allowed("example.org", "127.0.0.1", NULL, names));
        ASSERT_TRUE(!allowed("192.0.2.8:8080", "192.0.2.1", NULL, names));
        ASSERT_TRUE(!allowed("1.1.1.1", "127.0.0.1", NULL, NULL));
}

TESTS_MAIN
