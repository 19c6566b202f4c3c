/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* rule:host-check, on a request's head: a web page's request (host_check_browser_header()) names in Host a
 * name modelgate answers for, or it is refused before anything else. What the connection's address and the
 * machine's name are is asked only then: a request without those headers (an agent's, curl's) costs four
 * header lookups. */

#include "modelgated/client/client-internal.h"
#include "modelgated/access/host-check.h"
#include "modelgated/api/refusal-words.h"

/* The address the connection came in on, numeric ("" for a unix socket, or when it cannot be said) */
static void local_address(const Client *c, char buf[static INET6_ADDRSTRLEN]) {
        union {
                struct sockaddr sa;
                struct sockaddr_in in;
                struct sockaddr_in6 in6;
        } a = {};
        socklen_t l = sizeof(a);

        buf[0] = 0;
        if (getsockname(c->fd, &a.sa, &l) < 0)
                return;
        if (a.sa.sa_family == AF_INET)
                (void)inet_ntop(AF_INET, &a.in.sin_addr, buf, INET6_ADDRSTRLEN);
        else if (a.sa.sa_family == AF_INET6)
                (void)inet_ntop(AF_INET6, &a.in6.sin6_addr, buf, INET6_ADDRSTRLEN);
}

static const char *browser_header(HttpRequest *r) {
        return host_check_browser_header(
                http_request_header(r, "Origin"), http_request_header(r, "Sec-Fetch-Site"),
                http_request_header(r, "Referer"), http_request_header(r, "User-Agent"));
}

static bool host_served(Client *c) {
        HttpRequest *r = &c->parser.req;
        char local[INET6_ADDRSTRLEN], hostname[256] = "";
        Span name;

        if (!browser_header(r))
                return true;
        /* no Host (HTTP/1.0): nothing a page could have made lead here */
        Span host = http_request_header(r, "Host");
        if (!host.p)
                return true;
        if (!host_check_split(host, &name))
                return false;
        local_address(c, local);
        (void)gethostname(hostname, sizeof(hostname) - 1);
        return host_check_allowed(name, local[0] ? local : NULL, hostname,
                                  (c->req->config ?: manager_config(c->manager))->server_names);
}

bool client_host_refused(Client *c) {
        HttpRequest *r = &c->parser.req;
        Span host = http_request_header(r, "Host");
        char shown[4 * 256 + 1];

        if (host_served(c))
                return false;
        /* the client's words, in an answer: escaped, and without what would make an agent retry it
         * (rule:refusal-words) */
        log_escape(shown, sizeof(shown), host.p ?: "", MIN(host.n, (size_t)256));
        (void)refusal_words_strip(shown);
        client_answer(c, ANSWER_HOST_NOT_SERVED, browser_header(r), shown);
        return true;
}
