/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A host's response's head, a line at a time, as llhttp read it in its default mode (rule:host-input):
 * the status line, header lines into the UpstreamResponse's table (with a bound on their size and
 * number), continuation lines (obs-fold), and the framing and connection headers read as llhttp read them
 * (Content-Length, Transfer-Encoding, Connection), with llhttp's refusals: a duplicate, empty or bad
 * Content-Length (with Transfer-Encoding: upstream-response.c, at the head's end). Trailers are such
 * lines too. The parser around them is upstream-response.c's. */

#include <assert.h>
#include <string.h>
#include <strings.h>

#include "modelgated/upstream/upstream-internal.h"

/* how many headers a response's head may have */
#define UPSTREAM_HEADERS_MAX 1024

/* Whether p (n bytes) is lit (l bytes), any case */
static inline bool span_is(const char *p, size_t n, const char *lit, size_t l) {
        return n == l && http_caseeq_n(p, lit, l);
}

/* llhttp_should_keep_alive(): HTTP/1.1 unless "Connection: close", HTTP/1.0 only with "Connection:
 * keep-alive", and never for a body that the close ends */
bool upstream_head_keep_alive(const Upstream *u, bool skip_body) {
        const UpstreamParse *s = &u->parse;
        int status = u->resp.status;

        if (s->major > 0 && s->minor > 0 ? (s->flags & RF_CONNECTION_CLOSE)
                                         : !(s->flags & RF_CONNECTION_KEEP_ALIVE))
                return false;
        if (status / 100 == 1 || status == 204 || status == 304 || skip_body)
                return true;
        if ((s->flags & RF_TRANSFER_ENCODING) && !(s->flags & RF_CHUNKED))
                return false;
        return (s->flags & (RF_CHUNKED | RF_CONTENT_LENGTH)) != 0;
}

/* "HTTP/" DIGIT "." DIGIT SP status [SP reason]: the status as llhttp reads it (digits up to 999, maybe
 * none), the reason whatever it is */
int upstream_head_status_line(Upstream *u, const char *p, size_t n) {
        UpstreamParse *s = &u->parse;

        s->state = PARSE_HEADERS;
        s->in_section = false;

        if (n < 9 || memcmp(p, "HTTP/", 5) != 0)
                return upstream_malformed(u, "expected HTTP/");
        if (p[5] < '0' || p[5] > '9' || p[6] != '.' || p[7] < '0' || p[7] > '9')
                return upstream_malformed(u, "invalid version");
        s->major = p[5] - '0';
        s->minor = p[7] - '0';
        if (!((s->major == 1 && s->minor <= 1) || (s->major == 0 && s->minor == 9) ||
              (s->major == 2 && s->minor == 0)))
                return upstream_malformed(u, "invalid HTTP version");
        if (p[8] != ' ')
                return upstream_malformed(u, "expected space after version");
        if (n >= 12 && (unsigned)(p[9] - '0') < 10 && (unsigned)(p[10] - '0') < 10 &&
            (unsigned)(p[11] - '0') < 10 && (n == 12 || p[12] == ' ')) {
                u->resp.status = (p[9] - '0') * 100 + (p[10] - '0') * 10 + (p[11] - '0');
                return 0;
        }
        int status = 0;
        size_t i = 9;
        for (; i < n && p[i] >= '0' && p[i] <= '9'; i++) {
                status = status * 10 + (p[i] - '0');
                if (status > 999)
                        return upstream_malformed(u, "invalid status");
        }
        if (i < n && p[i] != ' ')
                return upstream_malformed(u, "invalid response status");
        u->resp.status = status;
        return 0;
}

/* More of the last header's value, at the end of the head */
static int head_append(Upstream *u, const char *p, size_t n) {
        if (u->parse.head_bytes + n > UPSTREAM_HEAD_MAX)
                return -E2BIG;
        u->parse.head_bytes += n;
        return buffer_append(&u->resp.head, p, n);
}

/* The framing and connection headers, as llhttp reads them */
static int parse_special(Upstream *u, const char *name, size_t name_len, const char *v, size_t n) {
        UpstreamParse *s = &u->parse;

        switch (name_len) {
        case 10:
                if (!span_is(name, name_len, "connection", 10))
                        return 0;
                /* tokens of a list: close and keep-alive, followed by spaces at most */
                for (size_t i = 0; i < n;) {
                        while (i < n && (v[i] == ' ' || v[i] == '\t'))
                                i++;
                        size_t t = i;
                        while (i < n && v[i] != ',')
                                i++;
                        size_t e = i;
                        while (e > t && v[e - 1] == ' ')
                                e--;
                        if (span_is(v + t, e - t, "close", 5))
                                s->flags |= RF_CONNECTION_CLOSE;
                        else if (span_is(v + t, e - t, "keep-alive", 10))
                                s->flags |= RF_CONNECTION_KEEP_ALIVE;
                        i++;
                }
                return 0;
        case 14: {
                if (!span_is(name, name_len, "content-length", 14))
                        return 0;
                if (s->flags & RF_CONTENT_LENGTH)
                        return upstream_malformed(u, "duplicate Content-Length");
                /* empty: refused unless the next line continues it (as llhttp) */
                if (n == 0) {
                        s->flags |= RF_EMPTY_CONTENT_LENGTH;
                        return 0;
                }
                uint64_t l = 0;
                size_t i = 0;
                for (; i < n && v[i] >= '0' && v[i] <= '9'; i++) {
                        unsigned d = (unsigned)(v[i] - '0');
                        if (l >= UINT64_MAX / 10 && (l > UINT64_MAX / 10 || d > UINT64_MAX % 10))
                                return upstream_malformed(u, "Content-Length overflow");
                        l = l * 10 + d;
                }
                for (; i < n; i++)
                        if (v[i] != ' ')
                                return upstream_malformed(u, "invalid character in Content-Length");
                u->resp.content_length = l;
                s->flags |= RF_CONTENT_LENGTH;
                return 0;
        }
        case 17: {
                if (!span_is(name, name_len, "transfer-encoding", 17))
                        return 0;
                /* an empty value is no coding (llhttp sets its flag where a value begins) */
                if (n == 0)
                        return 0;
                s->flags |= RF_TRANSFER_ENCODING;
                /* chunked when it is the last coding: the list's last item, spaces (not tabs) after it */
                size_t e = n;
                while (e > 0 && v[e - 1] == ' ')
                        e--;
                size_t t = e;
                while (t > 0 && v[t - 1] != ',')
                        t--;
                while (t < e && (v[t] == ' ' || v[t] == '\t'))
                        t++;
                if (span_is(v + t, e - t, "chunked", 7))
                        s->flags |= RF_CHUNKED;
                else
                        s->flags &= ~RF_CHUNKED;
                return 0;
        }
        default:
                return 0;
        }
}

/* A header whose line (its CR cut off) is [p, p + n), its name the first name_len bytes, its value from v
 * on: kept as the line is, in one copy, with the offsets of its name and value */
int upstream_head_add(Upstream *u, const char *p, size_t name_len, const char *v, size_t n) {
        UpstreamResponse *r = &u->resp;
        UpstreamParse *s = &u->parse;
        size_t vn = (size_t)(p + n - v), at = buffer_size(&r->head);

        if (s->head_bytes + name_len + vn > UPSTREAM_HEAD_MAX)
                return upstream_malformed(u, "headers too big");
        s->head_bytes += name_len + vn;
        if (http_header_table_add(&r->headers, &r->n_headers, &r->n_headers_alloc, UPSTREAM_HEADERS_MAX,
                                  at) < 0 ||
            buffer_append(&r->head, p, n) < 0)
                return upstream_malformed(u, "too many headers");
        HttpHeader *h = &r->headers[r->n_headers - 1];
        h->name_len = name_len;
        h->value = at + (size_t)(v - p);
        h->value_len = vn;
        s->in_section = true;
        return parse_special(u, p, name_len, v, vn);
}

/* A line that begins with a space or tab continues the header before it (obs-fold, RFC 9112 §5.2), as
 * llhttp reads it: the line is the value's next bytes (without the line end between), or its first ones
 * without the leading spaces where the value was empty; framing headers read it as llhttp does. */
static int parse_fold(Upstream *u, const char *p, size_t n) {
        UpstreamResponse *r = &u->resp;
        HttpHeader *h = &r->headers[r->n_headers - 1];
        const char *name = buffer_peek(&r->head) + h->name;
        size_t name_len = h->name_len;

        if (h->value_len == 0)
                while (n > 0 && (*p == ' ' || *p == '\t'))
                        p++, n--;
        if (n == 0)
                return 0;
        bool first = h->value_len == 0;
        if (head_append(u, p, n) < 0)
                return upstream_malformed(u, "headers too big");
        h->value_len += n;
        if (first) {
                u->parse.flags &= ~RF_EMPTY_CONTENT_LENGTH;
                return parse_special(u, name, name_len, p, n);
        }
        if (span_is(name, name_len, "content-length", 14))
                return upstream_malformed(u, "duplicate Content-Length");
        if (span_is(name, name_len, "transfer-encoding", 17))
                u->parse.flags &= ~RF_CHUNKED;
        else if (span_is(name, name_len, "connection", 10))
                return parse_special(u, name, name_len, p, n);
        return 0;
}

/* One header line, its CR cut off: into the table, and read for framing. A name is a token, as RFC
 * 9112 §5.1 has it: llhttp in its default mode took spaces in it ("Transfer-Encoding : chunked" as a
 * header of its own), or none at all, which no host sends but a smuggler. */
int upstream_head_line(Upstream *u, const char *p, size_t n) {
        if (*p == ' ' || *p == '\t') {
                if (!u->parse.in_section)
                        return upstream_malformed(u, "unexpected space after start line");
                if (!upstream_value_chars(p, n))
                        return upstream_malformed(u, "invalid header value char");
                return parse_fold(u, p, n);
        }
        /* the colon is no token byte: the name's loop stops there at the latest */
        const char *colon = memchr(p, ':', n), *q = p;
        if (!colon)
                return upstream_malformed(u, "invalid header token");
        while (http_tchar[(unsigned char)*q])
                q++;
        if (q != colon)
                return upstream_malformed(u, "invalid header token");
        if (q == p)
                return upstream_malformed(u, "empty header name");
        const char *v = q + 1;
        while (v < p + n && (*v == ' ' || *v == '\t'))
                v++;
        if (!upstream_value_chars(v, (size_t)(p + n - v)))
                return upstream_malformed(u, "invalid header value char");
        return upstream_head_add(u, p, (size_t)(q - p), v, n);
}
