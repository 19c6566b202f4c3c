/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* One llhttp_t per client connection. llhttp callbacks may see a token in
 * pieces (a read can end anywhere), so names and values are appended to the
 * request's head buffer and closed by the *_complete callbacks. The parser is
 * paused on each complete message, which is what answers pipelined requests
 * in order: the bytes after it stay unconsumed until the caller asks for the
 * next request. Where llhttp 8 is lenient (bare LF, obs-fold, the framing of
 * chunks), the bytes are checked here before llhttp sees them: head_limit()
 * and chunk_scan(). What callers ask of a parsed request is in http-header.c. */

#include <assert.h>
#include <ctype.h>
#include <string.h>
#include <strings.h>

#include "modelgated/http/http.h"

/* The bytes each part of the head may hold, one lookup per byte (the checks run on every byte of every
 * request): a request target's (RFC 3986: no control character, space, byte above 0x7E or '#'), a
 * header name's (tchar, RFC 9110 §5.6.2) and a header value's (no control character but TAB). */
static const bool target_byte[256] = {
        [0x21 ... 0x22] = true, /* '#' (0x23) is not */
        [0x24 ... 0x7e] = true,
};
static const bool tchar[256] = {
        ['0' ... '9'] = true, ['A' ... 'Z'] = true, ['a' ... 'z'] = true, ['!'] = true,  ['#'] = true,
        ['$'] = true,         ['%'] = true,         ['&'] = true,         ['\''] = true, ['*'] = true,
        ['+'] = true,         ['-'] = true,         ['.'] = true,         ['^'] = true,  ['_'] = true,
        ['`'] = true,         ['|'] = true,         ['~'] = true,
};
static const bool value_byte[256] = {
        ['\t'] = true,
        [0x20 ... 0x7e] = true,
        [0x80 ... 0xff] = true,
};

#define BYTES(c) (UINT64_C(0x0101010101010101) * (c))
/* Whether any byte of v is below c (c <= 0x80), or is c: exact, for the word as a whole */
#define ANY_BELOW(v, c) ((((v)-BYTES(c)) & ~(v)&BYTES(0x80)) != 0)
#define ANY_IS(v, c) ANY_BELOW((v) ^ BYTES(c), 1)

/* How many bytes from at may be in a request target (target_byte): eight at a time while no byte of a
 * word is below '!', '#', DEL or above, then one at a time. Targets and values are checked whole. */
static inline size_t target_plain_len(const char *at, size_t n) {
        size_t i = 0;

        for (uint64_t v; n - i >= 8; i += 8) {
                memcpy(&v, at + i, 8);
                if (ANY_BELOW(v, 0x21) || (v & BYTES(0x80)) || ANY_IS(v, '#') || ANY_IS(v, 0x7f))
                        break;
        }
        while (i < n && target_byte[(unsigned char)at[i]])
                i++;
        return i;
}

/* The same for a header's value (value_byte): a word with a control character (TAB too: the table tells
 * that one) or DEL is looked at byte by byte */
static inline size_t value_plain_len(const char *at, size_t n) {
        size_t i = 0;

        for (uint64_t v; n - i >= 8; i += 8) {
                memcpy(&v, at + i, 8);
                if (ANY_BELOW(v, 0x20) || ANY_IS(v, 0x7f))
                        break;
        }
        while (i < n && value_byte[(unsigned char)at[i]])
                i++;
        return i;
}

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
        /* RFC 9112 §3.2, RFC 3986: no control character, TAB or byte above 0x7F goes raw in a target
         * (llhttp 8 lets TAB and 0x80-0xFF through, and they would reach the host and the log); a
         * fragment is never sent by a client, and would not be the host's business */
        size_t i = target_plain_len(at, n);
        if (i < n)
                return at[i] == '#' ? fail(p, 400, "the request target has a #fragment")
                                    : fail(p, 400,
                                           "the request target holds a byte that must be %-encoded (a "
                                           "control character, TAB, or a byte above 0x7E)");
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
        if (p->headers_complete) {
                /* a trailer (RFC 9112 §7.1.2): its syntax is checked by the chunk scan; it is dropped,
                 * never forwarded and never used for admission (rule:trailers-dropped) */
                r->had_trailers = true;
                return 0;
        }
        if (r->n_headers == 0 || p->in_header_value) {
                int k = http_header_table_add(&r->headers, &r->n_headers, &r->n_headers_alloc, 1000,
                                              buffer_size(&r->head));
                if (k == -E2BIG)
                        return fail(p, 431, "request has too many headers");
                if (k < 0)
                        return fail(p, 500, "out of memory");
                p->in_header_value = false;
        }
        if (buffer_append(&r->head, at, n) < 0)
                return fail(p, 500, "out of memory");
        current_header(p)->name_len += n;
        return 0;
}

bool http_is_tchar(unsigned char c) {
        return tchar[c];
}

static int on_header_field_complete(llhttp_t *l) {
        HttpParser *p = parser_of(l);
        if (p->headers_complete)
                return account(p, 4);
        Span name = http_header_name(&p->req, p->req.n_headers - 1);

        /* RFC 9112 §5.1: no whitespace between a field name and the colon, a server MUST answer 400.
         * llhttp 8 keeps "Authorization " as the name, which no filter would recognise. */
        size_t i = 0;
        while (i < name.n && tchar[(unsigned char)name.p[i]])
                i++;
        if (i < name.n)
                return name.p[i] == ' ' || name.p[i] == '\t'
                               ? fail(p, 400, "a request header has whitespace before its colon")
                               : fail(p, 400, "a request header name holds a character that is not allowed");
        if (name.n == 0)
                return fail(p, 400, "a request header has an empty name");
        current_header(p)->value = buffer_size(&p->req.head);
        p->in_header_value = true;
        return account(p, 4); /* ": " and CRLF count too, as they do for a peer */
}

static int on_header_value(llhttp_t *l, const char *at, size_t n) {
        HttpParser *p = parser_of(l);

        if (account(p, n) < 0)
                return -1;
        /* one pass for both refusals; CR and LF are control characters too, and win wherever they are:
         * llhttp hands an obs-fold continuation to us as part of the value */
        size_t i = value_plain_len(at, n);
        if (i < n)
                return memchr(at, '\r', n) || memchr(at, '\n', n)
                               ? fail(p, 400, "obsolete line folding in a request header")
                               : fail(p, 400, "a request header value holds a control character");
        if (p->headers_complete)
                return 0;
        if (buffer_append(&p->req.head, at, n) < 0)
                return fail(p, 500, "out of memory");
        current_header(p)->value_len += n;
        return 0;
}

static int on_header_value_complete(llhttp_t *l) {
        HttpParser *p = parser_of(l);
        if (p->headers_complete)
                return 0;
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
        } else if (span_caseeq(name, "Host"))
                p->n_host++;
        else if (http_header_is_request_id(name) && p->req.request_id_at == 0)
                p->req.request_id_at = p->req.n_headers; /* noted here, where each name is looked at */
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
        if (l->http_major == 0) /* llhttp's HTTP/0.9: a request line without a version */
                return fail(p, 400, "the request line has no HTTP version");
        if (l->http_major != 1 || l->http_minor > 1)
                return fail(p, 505, "modelgate speaks HTTP/1.1 and HTTP/1.0 only");
        /* RFC 9112 §3.2: exactly one Host in HTTP/1.1 */
        if (p->n_host > 1 || (l->http_minor == 1 && p->n_host == 0))
                return fail(p, 400,
                            p->n_host ? "request has more than one Host header"
                                      : "an HTTP/1.1 request must have a Host header");
        if (p->n_content_length > 0 && l->content_length > p->max_body_size)
                return fail(p, 413, p->body_limit_message ?: "request body is larger than MaxBodySize");

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
                        return fail(p, 400, "an absolute request target must have a path");
                r->url += (size_t)(slash - url.p);
                r->url_len -= (size_t)(slash - url.p);
        }

        /* modelgate never switches protocols (rule:no-upgrade): Upgrade is dropped as a hop-by-hop header
         * and the request is an ordinary one, so that llhttp does not take what follows for another
         * protocol's bytes */
        if (l->upgrade) {
                r->upgrade = true;
                l->upgrade = 0;
        }

        r->method = l->method;
        r->http_major = l->http_major;
        r->http_minor = l->http_minor;
        r->has_body = p->n_content_length > 0 ? l->content_length > 0 : p->n_transfer_encoding > 0;
        r->chunked = p->n_transfer_encoding > 0;
        p->headers_complete = true;
        if (r->chunked) {
                /* stop where the body starts, so that the chunk scan sees every byte of it */
                p->chunk = (ChunkScan){};
                p->body_paused = true;
                return HPE_PAUSED;
        }
        return 0;
}

static int on_body(llhttp_t *l, const char *at, size_t n) {
        HttpParser *p = parser_of(l);

        if (buffer_size(&p->req.body) + n > p->max_body_size)
                return fail(p, 413, p->body_limit_message ?: "request body is larger than MaxBodySize");
        if (buffer_append(&p->req.body, at, n) < 0)
                return fail(p, 500, "out of memory");
        return 0;
}

/* a chunk announced larger than what is left of MaxBodySize is refused before it arrives */
static int on_chunk_header(llhttp_t *l) {
        HttpParser *p = parser_of(l);

        if (l->content_length > p->max_body_size - buffer_size(&p->req.body))
                return fail(p, 413, p->body_limit_message ?: "request body is larger than MaxBodySize");
        return 0;
}

static int on_message_complete(llhttp_t *l) {
        HttpParser *p = parser_of(l);
        p->req.keep_alive = llhttp_should_keep_alive(l);
        /* RFC 9112 §6.1: an HTTP/1.0 message with Transfer-Encoding has faulty framing: answer, then close
         */
        if (p->req.chunked && p->req.http_minor == 0)
                p->req.keep_alive = false;
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

/* A buffer that grew for one big request is given back, not kept for the connection's next one */
static void buffer_reuse(Buffer *b) {
        if (b->alloc > 64 * 1024)
                buffer_done(b);
        else
                buffer_clear(b);
}

static void request_reset(HttpRequest *r) {
        buffer_reuse(&r->head);
        buffer_reuse(&r->body);
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
        llhttp_init(&p->llhttp, HTTP_REQUEST, &settings);
        p->llhttp.data = p;
}

void http_parser_done(HttpParser *p) {
        buffer_done(&p->req.head);
        buffer_done(&p->req.body);
        free(p->req.headers);
        p->req.headers = NULL;
}

int http_parser_limit_body(HttpParser *p, uint64_t max, const char *why) {
        assert(p);
        if (max >= p->max_body_size)
                return 0;
        p->max_body_size = max;
        p->body_limit_message = why;
        if ((p->n_content_length > 0 && p->llhttp.content_length > max) || buffer_size(&p->req.body) > max)
                return -EFBIG;
        return 0;
}

void http_parser_next(HttpParser *p) {
        assert(p);
        request_reset(&p->req);
        p->max_body_size = p->default_max_body_size;
        p->body_limit_message = NULL;
        p->header_bytes = 0;
        p->n_content_length = p->n_transfer_encoding = p->n_host = 0;
        p->in_header_value = p->headers_complete = p->headers_reported = p->body_paused = false;
        p->message_complete = p->started = p->last_was_cr = p->last_was_lf = false;
        if (llhttp_get_errno(&p->llhttp) == HPE_PAUSED)
                llhttp_resume(&p->llhttp);
}

enum {
        CS_SIZE_START, /* the first hex digit of a chunk size */
        CS_SIZE,
        CS_EXT, /* after ';': extensions are not forwarded (the body goes on de-chunked) */
        CS_SIZE_LF,
        CS_DATA,
        CS_DATA_CR,
        CS_DATA_LF,
        CS_LINE_START, /* a trailer line, or the empty line that ends the message */
        CS_NAME,
        CS_VALUE,
        CS_VALUE_LF,
        CS_END_LF,
        CS_DONE,
};

static int hex_digit(unsigned char c) {
        return c >= '0' && c <= '9'   ? c - '0'
               : c >= 'a' && c <= 'f' ? c - 'a' + 10
               : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                      : -1;
}

static int chunk_bad_size(HttpParser *p) {
        return fail(p, 400, "a chunk size is not a hexadecimal number of at most 16 digits"), -EBADMSG;
}

static int chunk_bad_crlf(HttpParser *p) {
        return fail(p, 400, "a line of the chunked body does not end with CRLF"), -EBADMSG;
}

/* Each chunk_*_byte() below takes one byte in the states it names: 0, or -EBADMSG with the error set. */

/* CS_SIZE_START, CS_SIZE: at most 16 hex digits (no overflow), then ';' or CR; no whitespace, no sign */
static int chunk_size_byte(HttpParser *p, ChunkScan *cs, unsigned char c) {
        int x = hex_digit(c);

        if (x >= 0) {
                if (++cs->digits > 16)
                        return chunk_bad_size(p);
                cs->size = cs->size * 16 + (uint64_t)x;
                cs->state = CS_SIZE;
        } else if (cs->state == CS_SIZE && c == ';')
                cs->state = CS_EXT;
        else if (cs->state == CS_SIZE && c == '\r')
                cs->state = CS_SIZE_LF;
        else
                return chunk_bad_size(p);
        return 0;
}

static int chunk_ext_byte(HttpParser *p, ChunkScan *cs, unsigned char c) {
        if (c == '\r')
                cs->state = CS_SIZE_LF;
        else if ((c < 0x20 && c != '\t') || c == 0x7f)
                return fail(p, 400, "a chunk extension holds a control character"), -EBADMSG;
        /* extensions are head-like bytes: bounded by MaxHeaderSize=, or a trickle of
         * them would hold the connection for good */
        else if (account(p, 1) < 0)
                return -EBADMSG;
        return 0;
}

/* CS_SIZE_LF: a size of 0 is the last chunk, the trailer section follows it */
static int chunk_size_lf_byte(HttpParser *p, ChunkScan *cs, unsigned char c) {
        if (c != '\n')
                return chunk_bad_crlf(p);
        cs->left = cs->size;
        cs->state = cs->size > 0 ? CS_DATA : CS_LINE_START;
        cs->size = 0;
        cs->digits = 0;
        return 0;
}

/* CS_DATA_CR, CS_DATA_LF: exactly CRLF after the data, which llhttp does not check */
static int chunk_data_end_byte(HttpParser *p, ChunkScan *cs, unsigned char c) {
        if (cs->state == CS_DATA_CR) {
                if (c != '\r')
                        return fail(p, 400, "chunk data is not followed by CRLF"), -EBADMSG;
                cs->state = CS_DATA_LF;
                return 0;
        }
        if (c != '\n')
                return fail(p, 400, "chunk data is not followed by CRLF"), -EBADMSG;
        cs->state = CS_SIZE_START;
        return 0;
}

/* CS_LINE_START to CS_END_LF: trailer lines (RFC 9112 §7.1.2) with the head's rules, and the empty
 * line that ends the message */
static int chunk_trailer_byte(HttpParser *p, ChunkScan *cs, unsigned char c) {
        switch (cs->state) {
        case CS_LINE_START:
                if (c == '\r')
                        cs->state = CS_END_LF;
                else if (c == '\n')
                        return chunk_bad_crlf(p);
                else if (c == ' ' || c == '\t')
                        return fail(p, 400, "obsolete line folding in a request trailer"), -EBADMSG;
                else if (http_is_tchar(c))
                        cs->state = CS_NAME;
                else
                        return fail(p, 400, "a request trailer has a malformed name"), -EBADMSG;
                break;
        case CS_NAME:
                if (c == ':')
                        cs->state = CS_VALUE;
                else if (!http_is_tchar(c))
                        return fail(p, 400, "a request trailer has a malformed name"), -EBADMSG;
                break;
        case CS_VALUE:
                if (c == '\r')
                        cs->state = CS_VALUE_LF;
                else if ((c < 0x20 && c != '\t') || c == 0x7f)
                        return fail(p, 400, "a request trailer value holds a control character"), -EBADMSG;
                break;
        case CS_VALUE_LF:
        case CS_END_LF:
                if (c != '\n')
                        return chunk_bad_crlf(p);
                cs->state = cs->state == CS_END_LF ? CS_DONE : CS_LINE_START;
                break;
        }
        return 0;
}

static int chunk_byte(HttpParser *p, ChunkScan *cs, unsigned char c) {
        switch (cs->state) {
        case CS_SIZE_START:
        case CS_SIZE:
                return chunk_size_byte(p, cs, c);
        case CS_EXT:
                return chunk_ext_byte(p, cs, c);
        case CS_SIZE_LF:
                return chunk_size_lf_byte(p, cs, c);
        case CS_DATA_CR:
        case CS_DATA_LF:
                return chunk_data_end_byte(p, cs, c);
        case CS_LINE_START:
        case CS_NAME:
        case CS_VALUE:
        case CS_VALUE_LF:
        case CS_END_LF:
                return chunk_trailer_byte(p, cs, c);
        }
        return 0;
}

/* Checks bytes of a chunked body. Returns how many belong to this message (all of them, or up to its
 * last byte), or -EBADMSG with the error set. */
static ssize_t chunk_scan(HttpParser *p, const char *d, size_t n) {
        ChunkScan *cs = &p->chunk;
        size_t i = 0;

        while (i < n && cs->state != CS_DONE) {
                if (cs->state == CS_DATA) {
                        /* the data itself is counted, not looked at */
                        uint64_t k = MIN(cs->left, (uint64_t)(n - i));
                        cs->left -= k;
                        i += (size_t)k;
                        if (cs->left == 0)
                                cs->state = CS_DATA_CR;
                        continue;
                }
                if (chunk_byte(p, cs, (unsigned char)d[i]) < 0)
                        return -EBADMSG;
                i++;
        }
        return (ssize_t)i;
}

/* Hands bytes to llhttp, and remembers how the last one it took ends a line (for head_limit()). */
static int feed_llhttp(HttpParser *p, const char *data, size_t n, size_t *ret_consumed) {
        llhttp_errno_t e = llhttp_execute(&p->llhttp, data, n);
        size_t k;

        if (e == HPE_OK)
                k = n;
        else if (e == HPE_PAUSED || e == HPE_PAUSED_UPGRADE) {
                /* not reached (on_headers_complete clears the upgrade); were it, the connection would
                 * not be read further */
                if (e == HPE_PAUSED_UPGRADE) {
                        p->req.keep_alive = false;
                        p->message_complete = true;
                }
                k = (size_t)(llhttp_get_error_pos(&p->llhttp) - data);
        } else {
                /* 505 for a version that was read and is not 1.x (llhttp says "invalid version" for a
                 * request line whose end is malformed too, which is a 400) */
                if (p->error_status == 0 && (e == HPE_PAUSED_H2_UPGRADE ||
                                             (e == HPE_INVALID_VERSION &&
                                              !(p->llhttp.http_major == 1 && p->llhttp.http_minor <= 1))))
                        fail(p, 505, "modelgate speaks HTTP/1.1 and HTTP/1.0 only");
                else if (p->error_status == 0)
                        fail(p, 400, llhttp_get_error_reason(&p->llhttp) ?: "malformed request");
                return -EBADMSG;
        }
        if (k > 0) {
                p->last_was_cr = data[k - 1] == '\r';
                p->last_was_lf = data[k - 1] == '\n';
        }
        *ret_consumed = k;
        return 0;
}

/* How much of the head llhttp may see: up to the first bare LF, or up to the line end before a folded
 * line (obs-fold, RFC 9112 §5.2: a line that starts with whitespace, which llhttp 8 would join to the
 * previous value). Only the bytes around each LF matter, so the scan goes from LF to LF. */
static size_t head_scan(const HttpParser *p, const char *d, size_t len, bool *ret_fold) {
        *ret_fold = false;
        if ((d[0] == ' ' || d[0] == '\t') && p->last_was_lf && p->started) {
                *ret_fold = true;
                return 0;
        }
        for (const char *q = d, *end = d + len; (q = memchr(q, '\n', (size_t)(end - q))); q++) {
                size_t i = (size_t)(q - d);
                if (!(i > 0 ? d[i - 1] == '\r' : p->last_was_cr))
                        return i;
                if (i + 1 < len && (d[i + 1] == ' ' || d[i + 1] == '\t')) {
                        *ret_fold = true;
                        return i + 1;
                }
        }
        return len;
}

#define HEAD_STRAY_LF 1

/* llhttp 8 takes a bare LF as a line end in the head; a peer in front of us may not, which is the stuff
 * of smuggling. So the head is fed up to the first bare LF only, and if the head is not complete by
 * then, the request is refused. Sets *len to what may be fed; returns 0, HEAD_STRAY_LF (skip one
 * byte), or -EBADMSG with the error set. */
static int head_limit(HttpParser *p, const char *d, size_t *len) {
        bool fold;

        *len = head_scan(p, d, *len, &fold);
        if (*len > 0)
                return 0;
        if (fold)
                return fail(p, 400, "obsolete line folding in a request header"), -EBADMSG;
        /* a bare LF before any byte of a request is a stray line end between pipelined requests
         * (RFC 9112 §2.2 allows an empty line) */
        if (!p->started && p->header_bytes == 0)
                return HEAD_STRAY_LF;
        return fail(p, 400, "request line or header ends with a bare LF, not CRLF"), -EBADMSG;
}

int http_parser_feed(HttpParser *p, const char *data, size_t n, size_t *ret_consumed) {
        assert(p);
        size_t done = 0;
        int r;

        if (p->error_status > 0)
                return -EBADMSG;

        while (done < n && !p->message_complete) {
                size_t len = n - done, k = 0;
                const char *d = data + done;
                bool scanned = p->headers_complete && p->req.chunked;

                if (scanned) {
                        ssize_t m = chunk_scan(p, d, len);
                        if (m < 0)
                                return -EBADMSG;
                        len = (size_t)m;
                } else if (!p->headers_complete) {
                        r = head_limit(p, d, &len);
                        if (r < 0)
                                return r;
                        if (r == HEAD_STRAY_LF) {
                                done++;
                                continue;
                        }
                }

                r = feed_llhttp(p, d, len, &k);
                if (r < 0)
                        return r;
                done += k;
                if (p->body_paused) {
                        /* the head of a chunked request: the body goes through the chunk scan */
                        p->body_paused = false;
                        llhttp_resume(&p->llhttp);
                        continue;
                }
                /* llhttp and the scan must agree on where the message ends */
                if (scanned && (p->message_complete != (p->chunk.state == CS_DONE) || k != len))
                        return fail(p, 400, "malformed chunked body"), -EBADMSG;
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
