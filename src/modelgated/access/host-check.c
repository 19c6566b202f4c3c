/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Which Host a web page's request may name: see host-check.h. */

#include <arpa/inet.h>
#include <ctype.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "modelgated/access/host-check.h"

/* Longer than any name (253) or address: a Host past it is refused */
#define NAME_MAX_LEN 256

const char *host_check_browser_header(Span origin, Span sec_fetch_site, Span referer, Span user_agent) {
        if (origin.p)
                return "Origin";
        if (sec_fetch_site.p)
                return "Sec-Fetch-Site";
        if (referer.p)
                return "Referer";
        if (user_agent.n >= 8 && strncasecmp(user_agent.p, "Mozilla/", 8) == 0)
                return "User-Agent";
        return NULL;
}

bool host_check_split(Span host, Span *ret_name) {
        const char *p = host.p, *end = host.p + host.n, *colon;

        if (!p || host.n == 0)
                return false;
        if (*p == '[') {
                const char *close = memchr(p, ']', host.n);
                if (!close)
                        return false;
                colon = close + 1 < end ? close + 1 : NULL;
                if (colon && *colon != ':')
                        return false;
                *ret_name = (Span){p + 1, (size_t)(close - p - 1)};
        } else {
                colon = memchr(p, ':', host.n);
                *ret_name = (Span){p, (size_t)((colon ?: end) - p)};
        }
        if (colon)
                for (const char *d = colon + 1; d < end; d++)
                        if (!isdigit((unsigned char)*d))
                                return false;
        if (ret_name->n > 0 && ret_name->p[ret_name->n - 1] == '.')
                ret_name->n--;
        return ret_name->n > 0 && ret_name->n < NAME_MAX_LEN;
}

/* An address, as 16 bytes (IPv4 mapped into IPv6, so that both forms of one address compare equal) */
static bool parse_address(const char *s, struct in6_addr *ret) {
        struct in_addr a4;
        char b[NAME_MAX_LEN];
        size_t n = strlen(s);

        if (n >= 2 && s[0] == '[' && s[n - 1] == ']') {
                snprintf(b, sizeof(b), "%.*s", (int)(n - 2), s + 1);
                s = b;
        }
        if (inet_pton(AF_INET, s, &a4) == 1) {
                *ret = (struct in6_addr){};
                ret->s6_addr[10] = ret->s6_addr[11] = 0xff;
                memcpy(ret->s6_addr + 12, &a4, 4);
                return true;
        }
        return inet_pton(AF_INET6, s, ret) == 1;
}

static bool is_loopback(const struct in6_addr *a) {
        return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
}

/* name is pattern, or with "*.": a name under it (not the name itself) */
static bool name_matches(const char *name, const char *pattern) {
        size_t n = strlen(name), l;

        if (strncmp(pattern, "*.", 2) != 0)
                return strcasecmp(name, pattern) == 0;
        pattern += 1; /* ".name" */
        l = strlen(pattern);
        return n > l && strcasecmp(name + n - l, pattern) == 0;
}

bool host_check_allowed(Span span, const char *local_address, const char *hostname,
                        char *const *server_names) {
        char name[NAME_MAX_LEN];
        struct in6_addr a, b;

        if (span.n >= sizeof(name))
                return false;
        memcpy(name, span.p, span.n);
        name[span.n] = 0;
        if (parse_address(name, &a)) {
                if (is_loopback(&a) ||
                    (local_address && parse_address(local_address, &b) && memcmp(&a, &b, sizeof(a)) == 0))
                        return true;
                STRV_FOREACH (s, server_names)
                        if (parse_address(*s, &b) && memcmp(&a, &b, sizeof(a)) == 0)
                                return true;
                return false;
        }
        if (name_matches(name, "localhost") || name_matches(name, "*.localhost"))
                return true;
        if (hostname && *hostname) {
                size_t first = strcspn(hostname, ".");
                if (strcasecmp(name, hostname) == 0 ||
                    (strlen(name) == first && strncasecmp(name, hostname, first) == 0))
                        return true;
        }
        STRV_FOREACH (s, server_names)
                if (name_matches(name, *s))
                        return true;
        return false;
}
