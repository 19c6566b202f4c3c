/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* rule:host-check, on a request's head: a web page's request (host_check_browser_header()) names in Host a
 * name modelgate answers for, or it is refused before anything else. What the connection's address and the
 * machine's name are is asked only then: a request without those headers (an agent's, curl's) costs one
 * pass over its headers. */

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

/* The headers the check reads, each the first of its name, found in one pass over the request's headers
 * (their lengths differ: one comparison a header, where a lookup each was a pass each) */
typedef struct CheckHeaders {
        Span host, origin, sec_fetch_site, referer, user_agent;
} CheckHeaders;

static _always_inline_ void first_of(Span *s, const HttpRequest *r, size_t i, const char *name) {
        if (!s->p && span_caseeq(http_header_name(r, i), name))
                *s = http_header_value(r, i);
}

static void check_headers(const HttpRequest *r, CheckHeaders *h) {
        *h = (CheckHeaders){};
        for (size_t i = 0; i < r->n_headers; i++)
                switch (r->headers[i].name_len) {
                case 4:
                        first_of(&h->host, r, i, "Host");
                        break;
                case 6:
                        first_of(&h->origin, r, i, "Origin");
                        break;
                case 7:
                        first_of(&h->referer, r, i, "Referer");
                        break;
                case 10:
                        first_of(&h->user_agent, r, i, "User-Agent");
                        break;
                case 14:
                        first_of(&h->sec_fetch_site, r, i, "Sec-Fetch-Site");
                        break;
                }
}

static const char *browser_header(const CheckHeaders *h) {
        return host_check_browser_header(h->origin, h->sec_fetch_site, h->referer, h->user_agent);
}

static bool host_served(Client *c, const CheckHeaders *h) {
        char local[INET6_ADDRSTRLEN], hostname[256] = "";
        Span name;

        if (!browser_header(h))
                return true;
        /* no Host (HTTP/1.0): nothing a page could have made lead here */
        if (!h->host.p)
                return true;
        if (!host_check_split(h->host, &name))
                return false;
        local_address(c, local);
        (void)gethostname(hostname, sizeof(hostname) - 1);
        return host_check_allowed(name, local[0] ? local : NULL, hostname,
                                  (c->req->config ?: manager_config(c->manager))->server_names);
}

bool client_host_refused(Client *c) {
        CheckHeaders h;
        char shown[4 * 256 + 1];

        check_headers(&c->parser.req, &h);
        if (host_served(c, &h))
                return false;
        /* the client's words, in an answer: escaped, and without what would make an agent retry it
         * (rule:refusal-words) */
        log_escape(shown, sizeof(shown), h.host.p ?: "", MIN(h.host.n, (size_t)256));
        (void)refusal_words_strip(shown);
        client_answer(c, ANSWER_HOST_NOT_SERVED, browser_header(&h), shown);
        return true;
}
