/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The client-side parser fed in pieces whose sizes come from the input's first byte, request after
 * request, as a connection would; plus the model lookup on each complete request. The invariant, not
 * just "no crash": whatever is accepted, the head that goes on to a host (built as client-dispatch.c
 * builds it) has exactly one Host (modelgate's), no credential, no hop-by-hop header nor one that a
 * Connection header names, no header name with SP or HTAB, and a plain ASCII target. The names are
 * written out here, not asked of http-header.c: the check must not share a bug with the filter. */
#include <stdint.h>
#include <stdlib.h>
#include <strings.h>

#include "modelgated/http/http-writer.h"
#include "modelgated/http/http.h"
#include "modelgated/api/route.h"

/* rule:credentials-stop and RFC 9110 §7.6.1, RFC 9112 §6, §7.1.2 (hop by hop, framing, Expect): none of
 * these reaches a host, in any letter case */
static const char *const never_forwarded[] = {
        "authorization",  "x-api-key",  "cookie",           "proxy-authorization",
        "connection",     "keep-alive", "proxy-connection", "te",
        "trailer",        "upgrade",    "expect",           "transfer-encoding",
        "content-length",
};

static bool name_is(Span name, const char *s) {
        return name.n == strlen(s) && strncasecmp(name.p, s, name.n) == 0;
}

/* RFC 9110 §5.6.2 token characters */
static bool is_tchar(unsigned char c) {
        return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
               (c != 0 && strchr("!#$%&'*+-.^_`|~", c));
}

/* Whether a Connection header of the client's (any of them, RFC 9110 §5.3) lists this name */
static bool connection_names(const HttpRequest *r, Span name) {
        for (size_t i = 0; i < r->n_headers; i++) {
                if (!name_is(http_header_name(r, i), "connection"))
                        continue;
                Span v = http_header_value(r, i);
                for (size_t s = 0; s < v.n;) {
                        size_t a = s, e = s;
                        while (e < v.n && v.p[e] != ',')
                                e++;
                        s = e + 1;
                        while (a < e && (v.p[a] == ' ' || v.p[a] == '\t'))
                                a++;
                        while (e > a && (v.p[e - 1] == ' ' || v.p[e - 1] == '\t'))
                                e--;
                        if (e - a == name.n && strncasecmp(v.p + a, name.p, name.n) == 0)
                                return true;
                }
        }
        return false;
}

/* One "name: value" line of the upstream head (without its CRLF) */
static void check_header_line(const HttpRequest *r, Span line, unsigned *n_host) {
        const char *colon = memchr(line.p, ':', line.n);
        if (!colon || colon == line.p)
                abort();
        Span name = {line.p, (size_t)(colon - line.p)};

        /* "Authorization :" is the name no filter recognises (RFC 9112 §5.1) */
        if (memchr(name.p, ' ', name.n) || memchr(name.p, '\t', name.n))
                abort();
        for (size_t i = 0; i < name.n; i++)
                if (!is_tchar((unsigned char)name.p[i]))
                        abort();
        /* the value of one line: a CR, LF or NUL in it would start another header upstream */
        for (const char *v = colon; v < line.p + line.n; v++)
                if (*v == '\r' || *v == '\n' || *v == '\0')
                        abort();
        if (name_is(name, "host")) {
                if (++*n_host > 1)
                        abort();
                return;
        }
        if (connection_names(r, name))
                abort();
        for (size_t i = 0; i < sizeof(never_forwarded) / sizeof(never_forwarded[0]); i++)
                if (name_is(name, never_forwarded[i]))
                        abort();
}

static void check_upstream_head(const HttpRequest *r) {
        Span url = http_request_url(r);
        Buffer up = {};
        unsigned n_host = 0;

        for (size_t i = 0; i < url.n; i++)
                if ((unsigned char)url.p[i] <= 0x20 || (unsigned char)url.p[i] >= 0x7f || url.p[i] == '#')
                        abort();
        if (http_write_request_line(&up, llhttp_method_name(r->method), "", url.p, url.n, "host.invalid") <
                    0 ||
            http_request_append_forwarded_headers(r, &up) < 0 || buffer_append_str(&up, "\r\n") < 0)
                abort();
        const char *l = buffer_peek(&up), *e = l + buffer_size(&up);
        const char *eol = memmem(l, (size_t)(e - l), "\r\n", 2); /* the request line */
        for (l = eol ? eol + 2 : e; l < e; l = eol + 2) {
                eol = memmem(l, (size_t)(e - l), "\r\n", 2);
                if (!eol)
                        abort();
                if (eol == l) /* the empty line ends the head, and the head is all there is */
                        break;
                check_header_line(r, (Span){l, (size_t)(eol - l)}, &n_host);
        }
        if (!eol || eol + 2 != e || n_host != 1)
                abort();
        buffer_done(&up);
}

static void check_request(HttpParser *p) {
        Span s;
        char *m = NULL;
        bool stream;

        check_upstream_head(&p->req);
        if (json_find_model(buffer_peek(&p->req.body), buffer_size(&p->req.body), &s, &m, &stream) == 0)
                free(m);
        if (query_find_model(http_request_url(&p->req), &s, &m) == 0)
                free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        HttpParser p;
        size_t step, off = 1;

        if (size < 1)
                return 0;
        step = data[0] % 64 + 1;
        http_parser_init(&p, 4096, 65536);
        while (off < size) {
                size_t k = 0, n = MIN(step, size - off);
                int r = http_parser_feed(&p, (const char *)data + off, n, &k);
                if (r < 0)
                        break;
                off += k;
                if (r == HTTP_PARSE_DONE) {
                        /* no request ends without a byte of its own: one that does is the parser stuck
                         * (llhttp left in its Upgrade state did this), and a connection would answer it
                         * forever */
                        if (k == 0)
                                abort();
                        check_request(&p);
                        http_parser_next(&p);
                } else if (k == 0)
                        break; /* no progress: feeding the same bytes again would loop */
        }
        http_parser_done(&p);
        return 0;
}
