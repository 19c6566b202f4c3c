/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* One llhttp_t per client connection. llhttp callbacks may see a token in
 * pieces (a read can end anywhere), so names and values are appended to the
 * request's head buffer and closed by the *_complete callbacks. The parser is
 * paused on each complete message, which is what answers pipelined requests
 * in order: the bytes after it stay unconsumed until the caller asks for the
 * next request. */

#include <ctype.h>
#include <string.h>
#include <strings.h>

#include "modelgated/http.h"

static HttpParser *parser_of(llhttp_t *l) {
        return l->data;
}

static int fail(HttpParser *p, int status, const char *message) {
        p->error_status = status;
        p->error_message = message;
        return -1;
}

static int account(HttpParser *p, size_t n) {
        p->header_bytes += n;
        if (p->header_bytes > p->max_header_size)
                return fail(p, 431, "request headers are larger than MaxHeaderSize");
        return 0;
}

static int on_message_begin(llhttp_t *l) {
        HttpParser *p = parser_of(l);
        p->started = true;
        return 0;
}

static int on_url(llhttp_t *l, const char *at, size_t n) {
        HttpParser *p = parser_of(l);
        if (account(p, n) < 0)
                return -1;
        if (buffer_append(&p->req.head, at, n) < 0)
                return fail(p, 500, "out of memory");
        p->req.url_len += n;
        return 0;
}

static HttpHeader *current_header(HttpParser *p) {
        return &p->req.headers[p->req.n_headers - 1];
}

static int on_header_field(llhttp_t *l, const char *at, size_t n) {
        HttpParser *p = parser_of(l);
        HttpRequest *r = &p->req;

        if (account(p, n) < 0)
                return -1;
        if (r->n_headers == 0 || p->in_header_value) {
                if (r->n_headers >= 1000)
                        return fail(p, 431, "request has too many headers");
                if (r->n_headers == r->n_headers_alloc) {
                        size_t a = r->n_headers_alloc ? r->n_headers_alloc * 2 : 16;
                        HttpHeader *h = realloc(r->headers, a * sizeof(HttpHeader));
                        if (!h)
                                return fail(p, 500, "out of memory");
                        r->headers = h;
                        r->n_headers_alloc = a;
                }
                r->headers[r->n_headers++] = (HttpHeader){.name = buffer_size(&r->head)};
                p->in_header_value = false;
        }
        if (buffer_append(&r->head, at, n) < 0)
                return fail(p, 500, "out of memory");
        current_header(p)->name_len += n;
        return 0;
}

static int on_header_field_complete(llhttp_t *l) {
        HttpParser *p = parser_of(l);
        current_header(p)->value = buffer_size(&p->req.head);
        p->in_header_value = true;
        return account(p, 4); /* ": " and CRLF count too, as they do for a peer */
}

static int on_header_value(llhttp_t *l, const char *at, size_t n) {
        HttpParser *p = parser_of(l);

        if (account(p, n) < 0)
                return -1;
        /* llhttp hands an obs-fold continuation to us as part of the value */
        if (memchr(at, '\r', n) || memchr(at, '\n', n))
                return fail(p, 400, "obsolete line folding in a request header");
        if (buffer_append(&p->req.head, at, n) < 0)
                return fail(p, 500, "out of memory");
        current_header(p)->value_len += n;
        return 0;
}

static int on_header_value_complete(llhttp_t *l) {
        HttpParser *p = parser_of(l);
        HttpHeader *h = current_header(p);
        Span name = http_header_name(&p->req, p->req.n_headers - 1);
        Span value = http_header_value(&p->req, p->req.n_headers - 1);

        /* Trailing whitespace is not part of the value (RFC 9110 §5.5) */
        while (h->value_len > 0 && (value.p[h->value_len - 1] == ' ' || value.p[h->value_len - 1] == '\t'))
                h->value_len--;
        value.n = h->value_len;

        if (span_caseeq(name, "Content-Length"))
                p->n_content_length++;
        else if (span_caseeq(name, "Transfer-Encoding")) {
                p->n_transfer_encoding++;
                if (!span_caseeq(value, "chunked"))
                        return fail(p, 400, "Transfer-Encoding other than 'chunked' is not supported");
        } else if (span_caseeq(name, "Expect")) {
                if (!span_caseeq(value, "100-continue"))
                        return fail(p, 417, "only 'Expect: 100-continue' is supported");
                p->req.expect_continue = true;
        }
        return 0;
}

static int on_headers_complete(llhttp_t *l) {
        HttpParser *p = parser_of(l);
        HttpRequest *r = &p->req;

        if (p->n_content_length > 1)
                return fail(p, 400, "request has more than one Content-Length header");
        if (p->n_content_length > 0 && p->n_transfer_encoding > 0)
                return fail(p, 400, "request has both Content-Length and Transfer-Encoding");
        if (p->n_transfer_encoding > 1)
                return fail(p, 400, "request has more than one Transfer-Encoding header");
        if (l->method == HTTP_CONNECT || l->method == HTTP_TRACE)
                return fail(p, 405, "method is not allowed here");
        if (p->n_content_length > 0 && l->content_length > p->max_body_size)
                return fail(p, 413, "request body is larger than MaxBodySize");

        r->method = l->method;
        r->http_major = l->http_major;
        r->http_minor = l->http_minor;
        r->has_body = p->n_content_length > 0 ? l->content_length > 0 : p->n_transfer_encoding > 0;
        p->headers_complete = true;
        return 0;
}

static int on_body(llhttp_t *l, const char *at, size_t n) {
        HttpParser *p = parser_of(l);

        if (buffer_size(&p->req.body) + n > p->max_body_size)
                return fail(p, 413, "request body is larger than MaxBodySize");
        if (buffer_append(&p->req.body, at, n) < 0)
                return fail(p, 500, "out of memory");
        return 0;
}

/* a chunk announced larger than what is left of MaxBodySize is refused before it arrives */
static int on_chunk_header(llhttp_t *l) {
        HttpParser *p = parser_of(l);

        if (l->content_length > p->max_body_size - buffer_size(&p->req.body))
                return fail(p, 413, "request body is larger than MaxBodySize");
        return 0;
}

static int on_message_complete(llhttp_t *l) {
        HttpParser *p = parser_of(l);
        p->req.keep_alive = llhttp_should_keep_alive(l);
        p->message_complete = true;
        return HPE_PAUSED;
}

static const llhttp_settings_t settings = {
        .on_message_begin = on_message_begin,
        .on_url = on_url,
        .on_header_field = on_header_field,
        .on_header_field_complete = on_header_field_complete,
        .on_header_value = on_header_value,
        .on_header_value_complete = on_header_value_complete,
        .on_headers_complete = on_headers_complete,
        .on_body = on_body,
        .on_chunk_header = on_chunk_header,
        .on_message_complete = on_message_complete,
};

static void request_reset(HttpRequest *r) {
        buffer_clear(&r->head);
        buffer_clear(&r->body);
        r->n_headers = 0;
        r->url = r->url_len = 0;
        r->keep_alive = r->expect_continue = r->has_body = false;
}

void http_parser_init(HttpParser *p, uint64_t max_header_size, uint64_t max_body_size) {
        *p = (HttpParser){
                .max_header_size = max_header_size,
                .max_body_size = max_body_size,
        };
        llhttp_init(&p->llhttp, HTTP_REQUEST, &settings);
        p->llhttp.data = p;
}

void http_parser_done(HttpParser *p) {
        buffer_done(&p->req.head);
        buffer_done(&p->req.body);
        free(p->req.headers);
        p->req.headers = NULL;
}

void http_parser_next(HttpParser *p) {
        request_reset(&p->req);
        p->header_bytes = 0;
        p->n_content_length = p->n_transfer_encoding = 0;
        p->in_header_value = p->headers_complete = p->headers_reported = false;
        p->message_complete = p->started = p->last_was_cr = p->last_was_lf = false;
        if (llhttp_get_errno(&p->llhttp) == HPE_PAUSED)
                llhttp_resume(&p->llhttp);
}

static int feed_chunk(HttpParser *p, const char *data, size_t n, size_t *ret_consumed) {
        llhttp_errno_t e = llhttp_execute(&p->llhttp, data, n);

        if (e == HPE_OK) {
                *ret_consumed = n;
                return 0;
        }
        if (e == HPE_PAUSED || e == HPE_PAUSED_UPGRADE) {
                /* A request with "Upgrade:" is served as a plain one; the connection closes after it */
                if (e == HPE_PAUSED_UPGRADE) {
                        p->req.keep_alive = false;
                        p->message_complete = true;
                }
                *ret_consumed = (size_t)(llhttp_get_error_pos(&p->llhttp) - data);
                return 0;
        }
        if (p->error_status == 0)
                fail(p, 400, llhttp_get_error_reason(&p->llhttp) ?: "malformed request");
        return -EBADMSG;
}

int http_parser_feed(HttpParser *p, const char *data, size_t n, size_t *ret_consumed) {
        size_t done = 0;
        int r;

        if (p->error_status > 0)
                return -EBADMSG;

        while (done < n && !p->message_complete) {
                size_t len = n - done, k = 0;
                const char *d = data + done;

                /* llhttp 8 takes a bare LF as a line end in the head; a peer in front of us may
                 * not, which is the stuff of smuggling. So the head is fed up to the first bare
                 * LF only, and if the head is not complete by then, the request is refused. */
                bool fold = false;
                if (!p->headers_complete) {
                        /* obs-fold (RFC 9112 §5.2): a line of the head that starts with whitespace;
                         * llhttp 8 would join it to the previous value. Only the bytes around each
                         * LF matter, so the scan goes from LF to LF. */
                        if ((d[0] == ' ' || d[0] == '\t') && p->last_was_lf && p->started) {
                                len = 0;
                                fold = true;
                        } else
                                for (const char *q = d, *end = d + len;
                                     (q = memchr(q, '\n', (size_t)(end - q))); q++) {
                                        size_t i = (size_t)(q - d);
                                        if (!(i > 0 ? d[i - 1] == '\r' : p->last_was_cr)) {
                                                len = i;
                                                break;
                                        }
                                        if (i + 1 < len && (d[i + 1] == ' ' || d[i + 1] == '\t')) {
                                                len = i + 1;
                                                fold = true;
                                                break;
                                        }
                                }
                        if (len == 0 && fold && !p->headers_complete) {
                                fail(p, 400, "obsolete line folding in a request header");
                                return -EBADMSG;
                        }
                        if (len == 0) {
                                /* a bare LF before any byte of a request is a stray line end
                                 * between pipelined requests (RFC 9112 §2.2 allows an empty line) */
                                if (!p->started && p->header_bytes == 0) {
                                        done++;
                                        continue;
                                }
                                fail(p, 400, "request line or header ends with a bare LF, not CRLF");
                                return -EBADMSG;
                        }
                }

                r = feed_chunk(p, d, len, &k);
                if (r < 0)
                        return r;
                if (k > 0) {
                        p->last_was_cr = d[k - 1] == '\r';
                        p->last_was_lf = d[k - 1] == '\n';
                }
                done += k;
                if (k < len)
                        break; /* paused */
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

Span http_header_name(const HttpRequest *r, size_t i) {
        return (Span){buffer_peek(&r->head) + r->headers[i].name, r->headers[i].name_len};
}

Span http_header_value(const HttpRequest *r, size_t i) {
        return (Span){buffer_peek(&r->head) + r->headers[i].value, r->headers[i].value_len};
}

Span http_request_header(const HttpRequest *r, const char *name) {
        for (size_t i = 0; i < r->n_headers; i++)
                if (span_caseeq(http_header_name(r, i), name))
                        return http_header_value(r, i);
        return (Span){};
}

bool span_caseeq(Span s, const char *t) {
        return s.p && strlen(t) == s.n && strncasecmp(s.p, t, s.n) == 0;
}

bool span_startswith(Span s, const char *prefix) {
        size_t l = strlen(prefix);
        return s.n >= l && memcmp(s.p, prefix, l) == 0;
}

bool span_eq(Span s, const char *t) {
        return s.p && strlen(t) == s.n && memcmp(s.p, t, s.n) == 0;
}

bool span_has_token(Span list, const char *token) {
        size_t i = 0;

        while (list.p && i < list.n) {
                while (i < list.n && (list.p[i] == ' ' || list.p[i] == '\t' || list.p[i] == ','))
                        i++;
                size_t s = i;
                while (i < list.n && list.p[i] != ',')
                        i++;
                size_t e = i;
                while (e > s && (list.p[e - 1] == ' ' || list.p[e - 1] == '\t'))
                        e--;
                if (span_caseeq((Span){list.p + s, e - s}, token))
                        return true;
        }
        return false;
}

bool http_header_is_hop_by_hop(Span name) {
        static const char *const names[] = {
                "Connection",        "Keep-Alive", "Proxy-Connection", "TE",   "Trailer",
                "Transfer-Encoding", "Upgrade",    "Content-Length",   "Host", "Expect",
        };
        for (size_t i = 0; i < ELEMENTSOF(names); i++)
                if (span_caseeq(name, names[i]))
                        return true;
        return false;
}

bool http_header_is_credential(Span name) {
        return span_caseeq(name, "Authorization") || span_caseeq(name, "X-Api-Key") ||
               span_caseeq(name, "Proxy-Authorization") || span_caseeq(name, "Cookie");
}
