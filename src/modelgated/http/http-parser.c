/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The request parser: one HttpParser per client connection, fed the bytes as they are read. The head is
 * taken a line at a time, each line whole (found by its LF and looked at once); a line a read cut is held
 * in p->line until its end comes. The URL and the header names and values are copied into the request's
 * head buffer as each line is taken. The body is counted (Content-Length), or de-chunked by a scan of its
 * framing byte by byte that copies the data without looking at it (http-chunked.c). The parser stops at the
 * end of each message, which is what answers pipelined requests in order: the bytes after it stay unconsumed
 * until the caller asks for the next request. RFC 9112 is applied strictly (rule:strict-requests): CRLF line
 * ends only, no obs-fold, one framing. What callers ask of a parsed request is in http-request.c. */

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "modelgated/http/http-internal.h"
#include "modelgated/http/http.h"
#include "shared/macro.h"

/* The bytes a request target may hold, one lookup per byte (RFC 3986: no control character, space, byte
 * above 0x7E or '#'); a header name's are http_tchar's and a value's http_is_value_char()'s
 * (http-header.h) */
static const bool target_byte[256] = {
        [0x21 ... 0x22] = true, /* '#' (0x23) is not */
        [0x24 ... 0x7e] = true,
};

/* How many bytes from at may be in a request target (target_byte): eight at a time while no byte of a
 * word is below '!', '#', DEL or above, then one at a time. Targets and values are checked whole. */
static inline size_t target_plain_len(const char *at, size_t n) {
        size_t i = 0;

        for (uint64_t v; n - i >= 8; i += 8) {
                memcpy(&v, at + i, 8);
                if (WORD_BELOW(v, 0x21) | (v & WORD_BYTES(0x80)) | WORD_IS(v, '#') | WORD_IS(v, 0x7f))
                        break;
        }
        while (i < n && target_byte[(unsigned char)at[i]])
                i++;
        return i;
}

/* The methods modelgate knows, llhttp's list (llhttp.h's HTTP_METHOD_MAP): a request's method is one of
 * them, upper-case, or the request is refused */
static const struct {
        const char *name;
        size_t len;
        llhttp_method_t method;
} methods[] = {
#define METHOD(num, name, string) {#string, sizeof(#string) - 1, HTTP_##name},
        HTTP_METHOD_MAP(METHOD)
#undef METHOD
};

static int method_of(const char *s, size_t n, llhttp_method_t *ret) {
        /* the two every agent sends, before the list */
        if (n == 4 && memcmp(s, "POST", 4) == 0) {
                *ret = HTTP_POST;
                return 0;
        }
        if (n == 3 && memcmp(s, "GET", 3) == 0) {
                *ret = HTTP_GET;
                return 0;
        }
        for (size_t i = 0; i < ELEMENTSOF(methods); i++)
                if (methods[i].len == n && memcmp(methods[i].name, s, n) == 0) {
                        *ret = methods[i].method;
                        return 0;
                }
        return -ENOENT;
}

/* "HTTP/" DIGIT "." DIGIT, the whole of what is left of the request line */
static int version_of(HttpParser *p, const char *s, size_t n) {
        if (n != 8 || memcmp(s, "HTTP/", 5) != 0 || !isdigit((unsigned char)s[5]) || s[6] != '.' ||
            !isdigit((unsigned char)s[7]))
                return http_fail(p, 400, "the request line has a malformed HTTP version");
        if (s[5] != '1' || s[7] > '1')
                return http_fail(p, 505, "modelgate speaks HTTP/1.1 and HTTP/1.0 only");
        p->req.http_major = 1;
        p->req.http_minor = (uint8_t)(s[7] - '0');
        return 0;
}

/* scheme "://", the scheme letters only (as llhttp took it: no digit, '+', '-' or '.') */
static bool absolute_form(const char *t, size_t n) {
        size_t i = 0;

        if (!isalpha((unsigned char)t[0]))
                return false;
        while (i < n && isalpha((unsigned char)t[i]))
                i++;
        return n - i >= 3 && memcmp(t + i, "://", 3) == 0;
}

/* A request line's first bytes, before its end has come: a method is upper-case letters and '-', and
 * anything else is refused at once rather than when (if ever) the line ends */
static int request_line_start(HttpParser *p, const char *s, size_t n) {
        for (size_t i = 0; i < n && s[i] != ' '; i++)
                if (!((s[i] >= 'A' && s[i] <= 'Z') || s[i] == '-'))
                        return s[i] == '\r' && i + 1 == n
                                       ? 0
                                       : http_fail(p, 400, "the request method is not one modelgate knows");
        return 0;
}

/* METHOD SP request-target SP HTTP-version (RFC 9112 §3), without its CRLF. A recipient may split on
 * runs of spaces (RFC 9112 §3); the line is rebuilt for the host anyway. */
static int request_line(HttpParser *p, const char *s, size_t n) {
        HttpRequest *r = &p->req;
        const char *end = s + n, *sp = memchr(s, ' ', n);

        if (!sp)
                return http_fail(p, 400, "the request line has no request target");
        if (method_of(s, (size_t)(sp - s), &r->method) < 0)
                /* an HTTP/2 client's preface ("PRI * HTTP/2.0") is a version spoken elsewhere */
                return sp - s == 3 && memcmp(s, "PRI", 3) == 0
                               ? http_fail(p, 505, "modelgate speaks HTTP/1.1 and HTTP/1.0 only")
                               : http_fail(p, 400, "the request method is not one modelgate knows");
        const char *t = sp;
        while (t < end && *t == ' ')
                t++;
        const char *te = memchr(t, ' ', (size_t)(end - t)) ?: end;
        size_t tn = (size_t)(te - t);
        if (tn == 0)
                return http_fail(p, 400, "the request line has no request target");
        /* RFC 9112 §3.2: a path ("/..."), the absolute form ("scheme://..."), "*" or, for CONNECT, an
         * authority: nothing else is a request target */
        if (t[0] != '/' && t[0] != '*' && r->method != HTTP_CONNECT && !absolute_form(t, tn))
                return http_fail(p, 400, "the request target is neither a path nor an absolute URL");
        if (http_account(p, tn) < 0)
                return -EBADMSG;
        /* RFC 9112 §3.2, RFC 3986: no control character, TAB or byte above 0x7E goes raw in a target (it
         * would reach the host and the log); a fragment is never sent by a client, and would not be the
         * host's business */
        size_t i = target_plain_len(t, tn);
        if (i < tn)
                return t[i] == '#'
                               ? http_fail(p, 400, "the request target has a #fragment")
                               : http_fail(
                                         p, 400,
                                         "the request target holds a byte that must be %-encoded (a control "
                                         "character, TAB, or a byte above 0x7E)");
        while (te < end && *te == ' ')
                te++;
        if (te == end) /* HTTP/0.9's request line */
                return http_fail(p, 400, "the request line has no HTTP version");
        if (version_of(p, te, (size_t)(end - te)) < 0)
                return -EBADMSG;
        r->url = buffer_size(&r->head);
        r->url_len = tn;
        if (buffer_append(&r->head, t, tn) < 0)
                return http_fail(p, 500, "out of memory");
        return 0;
}

/* Content-Length (RFC 9110 §8.6): digits, no sign, no list, no more than 2^64 - 1 */
static int content_length_of(HttpParser *p, Span v) {
        uint64_t x = 0;

        if (v.n == 0)
                return http_fail(p, 400, "Content-Length is not a number");
        for (size_t i = 0; i < v.n; i++) {
                unsigned d = (unsigned char)v.p[i] - '0';
                if (d > 9)
                        return http_fail(p, 400, "Content-Length is not a number");
                if (x > (UINT64_MAX - d) / 10)
                        return http_fail(p, 400, "Content-Length is larger than 2^64 - 1");
                x = x * 10 + d;
        }
        p->content_length = x;
        return 0;
}

/* What a header means to the parser: the framing, Expect, Host, Connection and Upgrade */
static int header_seen(HttpParser *p, Span name, Span value) {
        switch (name.n) {
        case 4:
                if (span_caseeq(name, "Host"))
                        p->n_host++;
                break;
        case 6:
                if (span_caseeq(name, "Expect")) {
                        if (!span_caseeq(value, "100-continue"))
                                return http_fail(p, 417, "only 'Expect: 100-continue' is supported");
                        p->req.expect_continue = true;
                }
                break;
        case 7:
                if (span_caseeq(name, "Upgrade"))
                        p->upgrade_header = true;
                break;
        case 10:
                if (span_caseeq(name, "Connection"))
                        p->connection_header = true;
                break;
        case 12:
                if (http_header_is_request_id(name) && p->req.request_id_at == 0)
                        p->req.request_id_at =
                                p->req.n_headers; /* noted here, where each name is looked at */
                break;
        case 14:
                if (span_caseeq(name, "Content-Length") && p->n_content_length++ == 0)
                        return content_length_of(p, value);
                break;
        case 17:
                if (span_caseeq(name, "Transfer-Encoding")) {
                        p->n_transfer_encoding++;
                        if (!span_caseeq(value, "chunked"))
                                return http_fail(p, 400,
                                                 "Transfer-Encoding other than 'chunked' is not supported");
                }
                break;
        }
        return 0;
}

/* field-name ":" OWS field-value OWS (RFC 9112 §5), n bytes; its CRLF follows them (s[n] is the CR) */
static int header_line(HttpParser *p, const char *s, size_t n) {
        HttpRequest *r = &p->req;

        /* RFC 9112 §5.2, §2.2: a line that starts with whitespace continues the one before (obs-fold),
         * or, right after the request line, smuggles a header: refused either way */
        if (s[0] == ' ' || s[0] == '\t')
                return http_fail(p, 400, "obsolete line folding in a request header");
        /* RFC 9112 §5.1: no whitespace between a field name and the colon, a server MUST answer 400 */
        /* the line's CR (s[n]) is no token character: it bounds the scans */
        size_t i = 0;
        /* four at a time: each byte is looked at only while those before it are name bytes */
        while (http_tchar[(unsigned char)s[i]] && http_tchar[(unsigned char)s[i + 1]] &&
               http_tchar[(unsigned char)s[i + 2]] && http_tchar[(unsigned char)s[i + 3]])
                i += 4;
        while (http_tchar[(unsigned char)s[i]])
                i++;
        if (i == n || s[i] != ':')
                return i < n && (s[i] == ' ' || s[i] == '\t')
                               ? http_fail(p, 400, "a request header has whitespace before its colon")
                       : i < n ? http_fail(p, 400,
                                           "a request header name holds a character that is not allowed")
                               : http_fail(p, 400, "a request header has no colon");
        if (i == 0)
                return http_fail(p, 400, "a request header has an empty name");
        size_t v = i + 1;
        while (s[v] == ' ' || s[v] == '\t')
                v++;
        size_t vn = n - v;
        /* the value as it came, trailing whitespace and all, with ": " and CRLF: what a peer counts */
        if (http_account(p, i + vn + 4) < 0)
                return -EBADMSG;
        /* one pass for both refusals; a CR is a control character too (a bare one, here) */
        size_t k = (size_t)(http_value_end(s + v, s + v + vn) - (s + v));
        if (k < vn)
                return memchr(s + v, '\r', vn)
                               ? http_fail(p, 400, "obsolete line folding in a request header")
                               : http_fail(p, 400, "a request header value holds a control character");
        /* trailing whitespace is not part of the value (RFC 9110 §5.5) */
        while (vn > 0 && (s[v + vn - 1] == ' ' || s[v + vn - 1] == '\t'))
                vn--;
        int q = http_header_table_add(&r->headers, &r->n_headers, &r->n_headers_alloc, 1000,
                                      buffer_size(&r->head));
        if (q == -E2BIG)
                return http_fail(p, 431, "request has too many headers");
        /* the line whole, in one copy: the name and the value are where they were in it */
        char *at = q < 0 ? NULL : buffer_append_space(&r->head, v + vn);
        if (!at)
                return http_fail(p, 500, "out of memory");
        memcpy(at, s, v + vn);
        HttpHeader *h = &r->headers[r->n_headers - 1];
        h->name_len = i;
        h->value = h->name + v;
        h->value_len = vn;
        return header_seen(p, (Span){at, i}, (Span){at + v, vn});
}

/* The empty line: the head is whole, and what it says together is checked */
static int head_end(HttpParser *p) {
        HttpRequest *r = &p->req;

        if (p->n_content_length > 1)
                return http_fail(p, 400, "request has more than one Content-Length header");
        if (p->n_content_length > 0 && p->n_transfer_encoding > 0)
                return http_fail(p, 400, "request has both Content-Length and Transfer-Encoding");
        if (p->n_transfer_encoding > 1)
                return http_fail(p, 400, "request has more than one Transfer-Encoding header");
        if (r->method == HTTP_CONNECT || r->method == HTTP_TRACE)
                return http_fail(p, 405, "method is not allowed here");
        /* RFC 9112 §3.2: exactly one Host in HTTP/1.1 */
        if (p->n_host > 1 || (r->http_minor == 1 && p->n_host == 0))
                return http_fail(p, 400,
                                 p->n_host ? "request has more than one Host header"
                                           : "an HTTP/1.1 request must have a Host header");
        if (p->n_content_length > 0 && p->content_length > p->max_body_size)
                return http_body_too_large(p);

        /* RFC 9112 §3.2.2: a server MUST accept the absolute form; the path is what matters here */
        Span url = http_request_url(r);
        size_t skip = 0;
        /* the usual form, "/...", is not compared with either */
        if (url.n >= 7 && url.p[0] != '/' && strncasecmp(url.p, "http://", 7) == 0)
                skip = 7;
        else if (url.n >= 8 && url.p[0] != '/' && strncasecmp(url.p, "https://", 8) == 0)
                skip = 8;
        if (skip > 0) {
                const char *slash = memchr(url.p + skip, '/', url.n - skip);
                if (!slash)
                        return http_fail(p, 400, "an absolute request target must have a path");
                r->url += (size_t)(slash - url.p);
                r->url_len -= (size_t)(slash - url.p);
        }

        /* RFC 9110 §7.6.1: several Connection lines are one list. The connection stays open unless it
         * says close (HTTP/1.1) or unless it says keep-alive (HTTP/1.0) */
        static const Span close = {"close", 5}, keep_alive = {"keep-alive", 10}, upgrade = {"upgrade", 7};
        r->keep_alive = r->http_minor == 1
                                ? !(p->connection_header && http_request_connection_lists(r, close))
                                : p->connection_header && http_request_connection_lists(r, keep_alive);
        /* modelgate never switches protocols (rule:no-upgrade): Upgrade is dropped as a hop-by-hop header
         * and the request is an ordinary one */
        r->upgrade = p->upgrade_header && p->connection_header && http_request_connection_lists(r, upgrade);
        r->chunked = p->n_transfer_encoding > 0;
        r->has_body = p->n_content_length > 0 ? p->content_length > 0 : r->chunked;
        /* RFC 9112 §6.1: an HTTP/1.0 message with Transfer-Encoding has faulty framing: answer, then close
         */
        if (r->chunked && r->http_minor == 0)
                r->keep_alive = false;
        p->body_left = p->n_content_length > 0 ? p->content_length : 0;
        p->chunk = (ChunkScan){};
        p->headers_complete = true;
        p->message_complete = !r->has_body;
        return 0;
}

/* One line of the head, its LF included */
static int head_line(HttpParser *p, const char *s, size_t n) {
        /* CRLF only: a peer in front of us may take a bare LF for a line end where we would not, which is
         * the stuff of smuggling */
        if (n < 2 || s[n - 2] != '\r') {
                /* a bare LF before a request is a stray line end between pipelined ones (RFC 9112 §2.2) */
                if (!p->request_line_done && n == 1)
                        return 0;
                return http_fail(p, 400, "request line or header ends with a bare LF, not CRLF");
        }
        n -= 2;
        if (!p->request_line_done) {
                if (n == 0) /* RFC 9112 §2.2: an empty line before the request line is ignored */
                        return 0;
                p->started = p->request_line_done = true;
                return request_line(p, s, n);
        }
        if (n == 0)
                return head_end(p);
        return header_line(p, s, n);
}

/* Takes whole lines of the head from d; a last line without its LF is held in p->line. Returns how
 * many bytes were taken (all of them, or up to the end of the head), or -EBADMSG. */
static ssize_t head_feed(HttpParser *p, const char *d, size_t n) {
        size_t i = 0;

        while (i < n && !p->headers_complete) {
                const char *lf = memchr(d + i, '\n', n - i);
                size_t e = lf ? (size_t)(lf - d) + 1 : n;
                int r;

                if (lf && buffer_is_empty(&p->line))
                        r = head_line(p, d + i, e - i);
                else {
                        if (buffer_append(&p->line, d + i, e - i) < 0)
                                return http_fail(p, 500, "out of memory");
                        /* a request has begun with its first byte that is not a line end */
                        if (buffer_size(&p->line) > 1 || buffer_peek(&p->line)[0] != '\r')
                                p->started = true;
                        if (!lf) {
                                if (!p->request_line_done &&
                                    request_line_start(p, buffer_peek(&p->line), buffer_size(&p->line)) < 0)
                                        return -EBADMSG;
                                /* a line that comes in a trickle is bounded before its end: by
                                 * MaxHeaderSize=, with room for what a line holds that is not counted
                                 * (the method, the version, the separators) */
                                if (p->header_bytes + buffer_size(&p->line) > p->max_header_size + 64)
                                        return http_fail(p, 431,
                                                         "request headers are larger than MaxHeaderSize");
                                return (ssize_t)n;
                        }
                        r = head_line(p, buffer_peek(&p->line), buffer_size(&p->line));
                        buffer_clear(&p->line);
                }
                if (r < 0)
                        return r;
                i = e;
        }
        return (ssize_t)i;
}

/* The body's bytes from d: through the chunk scan, or counted against Content-Length */
static ssize_t body_feed(HttpParser *p, const char *d, size_t n) {
        if (p->req.chunked)
                return http_chunk_scan(p, d, n);
        size_t k = (size_t)MIN((uint64_t)n, p->body_left);
        if (buffer_size(&p->req.body) + k > p->max_body_size)
                return http_body_too_large(p);
        if (buffer_append(&p->req.body, d, k) < 0)
                return http_fail(p, 500, "out of memory");
        p->body_left -= k;
        p->message_complete = p->body_left == 0;
        return (ssize_t)k;
}

/* A buffer that grew for one big request is given back, not kept for the connection's next one */
#define HTTP_KEEP_BYTES (64 * 1024)

static void request_reset(HttpRequest *r) {
        buffer_clear_keep(&r->head, HTTP_KEEP_BYTES);
        buffer_clear_keep(&r->body, HTTP_KEEP_BYTES);
        r->n_headers = r->request_id_at = 0;
        r->url = r->url_len = 0;
        r->keep_alive = r->expect_continue = r->has_body = false;
        r->chunked = r->upgrade = r->had_trailers = false;
}

void http_parser_init(HttpParser *p, uint64_t max_header_size, uint64_t max_body_size) {
        assert(p);
        *p = (HttpParser){
                .max_header_size = max_header_size,
                .max_body_size = max_body_size,
                .default_max_body_size = max_body_size,
        };
}

void http_parser_done(HttpParser *p) {
        buffer_done(&p->req.head);
        buffer_done(&p->req.body);
        buffer_done(&p->line);
        free(p->req.headers);
        p->req.headers = NULL;
}

int http_parser_limit_body(HttpParser *p, uint64_t max, const char *why) {
        assert(p);
        if (max >= p->max_body_size)
                return 0;
        p->max_body_size = max;
        p->body_limit_message = why;
        if ((p->n_content_length > 0 && p->content_length > max) || buffer_size(&p->req.body) > max)
                return -EFBIG;
        return 0;
}

void http_parser_next(HttpParser *p) {
        assert(p);
        request_reset(&p->req);
        buffer_clear_keep(&p->line, HTTP_KEEP_BYTES);
        p->max_body_size = p->default_max_body_size;
        p->body_limit_message = NULL;
        p->header_bytes = 0;
        p->content_length = p->body_left = 0;
        p->n_content_length = p->n_transfer_encoding = p->n_host = 0;
        p->headers_complete = p->headers_reported = p->message_complete = false;
        p->started = p->request_line_done = p->connection_header = p->upgrade_header = false;
}

int http_parser_feed(HttpParser *p, const char *data, size_t n, size_t *ret_consumed) {
        assert(p);
        size_t done = 0;

        if (p->error_status > 0)
                return -EBADMSG;
        while (done < n && !p->message_complete) {
                ssize_t k = p->headers_complete ? body_feed(p, data + done, n - done)
                                                : head_feed(p, data + done, n - done);
                if (k < 0)
                        return (int)k;
                done += (size_t)k;
        }
        *ret_consumed = done;
        if (p->message_complete)
                return HTTP_PARSE_DONE;
        if (p->headers_complete && !p->headers_reported) {
                p->headers_reported = true;
                return HTTP_PARSE_HEADERS;
        }
        return HTTP_PARSE_MORE;
}
