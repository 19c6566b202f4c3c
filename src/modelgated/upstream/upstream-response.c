/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A host's response as read (rule:host-input), by a parser of its own: status and headers collected into
 * the UpstreamResponse (with a bound on their size and number), handed to the owner once, then body
 * pieces as they come, straight out of the bytes read. 1xx interim responses are skipped with no content,
 * and a body is never expected where HTTP says there is none. It reads what llhttp (which read responses
 * before, and still reads requests) accepts, and refuses what it refuses, with a few refusals more (the
 * CRLF after a chunk's data), so that a host that worked before works now: a head's bare LF line ends, a
 * status of one to three digits or none, and obs-fold continuation lines among them.
 *
 * Lines of the head, a chunk's size line and the trailers are taken whole: from the bytes read when the
 * line is in them (the usual case: one memchr() for its end), else gathered into u->parse.line first. A
 * callback's refusal sets cancel_error and the parse stops there; upstream-connection.c ends the exchange
 * once it has returned. */

#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "modelgated/upstream/upstream-internal.h"

/* what a response's head may hold: the bytes of its names and values, and their number */
#define HEAD_MAX (256 * 1024)
#define HEADERS_MAX 1024
/* a line of the head or a chunk's size line gathered across reads; longer would be over HEAD_MAX */
#define HEAD_LINE_MAX (HEAD_MAX + 1024)

enum {
        RF_CHUNKED = 1 << 0,
        RF_CONTENT_LENGTH = 1 << 1,
        RF_TRANSFER_ENCODING = 1 << 2,
        RF_CONNECTION_CLOSE = 1 << 3,
        RF_CONNECTION_KEEP_ALIVE = 1 << 4,
        RF_EMPTY_CONTENT_LENGTH = 1 << 5, /* refused unless the next line continues it */
};

Span upstream_response_header_name(const UpstreamResponse *r, size_t i) {
        assert(r);
        return (Span){buffer_peek(&r->head) + r->headers[i].name, r->headers[i].name_len};
}

Span upstream_response_header_value(const UpstreamResponse *r, size_t i) {
        assert(r);
        return (Span){buffer_peek(&r->head) + r->headers[i].value, r->headers[i].value_len};
}

Span upstream_response_header(const UpstreamResponse *r, const char *name) {
        assert(r);
        return http_header_table_find(buffer_peek(&r->head), r->headers, r->n_headers, name);
}

void upstream_parser_init(Upstream *u) {
        assert(u);
        buffer_clear(&u->parse.line);
        u->parse.state = PARSE_START;
}

void upstream_parser_done(Upstream *u) {
        assert(u);
        buffer_done(&u->parse.line);
}

static int malformed(Upstream *u, const char *reason) {
        u->parse.reason = reason;
        return -EPROTO;
}

/* RFC 9110 §5.6.2 tchar, the bytes of a header's name */
static const bool token_char[256] = {
        ['!'] = 1, ['#'] = 1, ['$'] = 1, ['%'] = 1, ['&'] = 1, ['\''] = 1, ['*'] = 1, ['+'] = 1, ['-'] = 1,
        ['.'] = 1, ['^'] = 1, ['_'] = 1, ['`'] = 1, ['|'] = 1, ['~'] = 1,  ['0'] = 1, ['1'] = 1, ['2'] = 1,
        ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1, ['7'] = 1, ['8'] = 1,  ['9'] = 1, ['A'] = 1, ['B'] = 1,
        ['C'] = 1, ['D'] = 1, ['E'] = 1, ['F'] = 1, ['G'] = 1, ['H'] = 1,  ['I'] = 1, ['J'] = 1, ['K'] = 1,
        ['L'] = 1, ['M'] = 1, ['N'] = 1, ['O'] = 1, ['P'] = 1, ['Q'] = 1,  ['R'] = 1, ['S'] = 1, ['T'] = 1,
        ['U'] = 1, ['V'] = 1, ['W'] = 1, ['X'] = 1, ['Y'] = 1, ['Z'] = 1,  ['a'] = 1, ['b'] = 1, ['c'] = 1,
        ['d'] = 1, ['e'] = 1, ['f'] = 1, ['g'] = 1, ['h'] = 1, ['i'] = 1,  ['j'] = 1, ['k'] = 1, ['l'] = 1,
        ['m'] = 1, ['n'] = 1, ['o'] = 1, ['p'] = 1, ['q'] = 1, ['r'] = 1,  ['s'] = 1, ['t'] = 1, ['u'] = 1,
        ['v'] = 1, ['w'] = 1, ['x'] = 1, ['y'] = 1, ['z'] = 1,
};

/* A value's bytes: tab, and all but the other controls and DEL */
static inline bool value_char(unsigned char c) {
        return c >= ' ' ? c != 0x7f : c == '\t';
}

#define ONES UINT64_C(0x0101010101010101)
#define HIGHS UINT64_C(0x8080808080808080)

/* The first byte of [p, end) that is no value byte (a line's CR, most likely), or end: eight at a time
 * where the word says none of its bytes is below a space or a DEL, else from the first that may be */
static const char *scan_value(const char *p, const char *end) {
        while (p < end) {
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
                if (end - p >= 8) {
                        uint64_t w, d;
                        memcpy(&w, p, 8);
                        d = w ^ (ONES * 0x7f);
                        /* exact for the lowest byte flagged (borrows only go up) */
                        uint64_t m = (((w - ONES * ' ') & ~w) | ((d - ONES) & ~d)) & HIGHS;
                        if (m == 0) {
                                p += 8;
                                continue;
                        }
                        p += __builtin_ctzll(m) / 8;
                }
#endif
                if (!value_char((unsigned char)*p))
                        return p;
                p++;
        }
        return end;
}

static bool value_chars(const char *p, size_t n) {
        return scan_value(p, p + n) == p + n;
}

static inline bool span_is(const char *p, size_t n, const char *lit, size_t l) {
        return n == l && strncasecmp(p, lit, l) == 0;
}

static inline bool word_is(const char *p, const char *lit) {
        uint64_t a, b;

        memcpy(&a, p, 8);
        memcpy(&b, lit, 8);
        return (a | ONES * 0x20) == b;
}

/* Whether a header's name (a token) is lit, lower case, of 8 to 24 bytes: compared eight bytes at a time,
 * the last eight overlapping, each byte with its case bit set (no token byte but an upper case letter
 * becomes a lower case letter or '-' with it) */
static inline bool name_is(const char *p, size_t n, const char *lit, size_t l) {
        return n == l && word_is(p, lit) && word_is(p + l - 8, lit + l - 8) &&
               (l <= 16 || word_is(p + 8, lit + 8));
}

/* llhttp_should_keep_alive(): HTTP/1.1 unless "Connection: close", HTTP/1.0 only with "Connection:
 * keep-alive", and never for a body that the close ends */
static bool parse_keep_alive(const Upstream *u, bool skip_body) {
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
static int parse_status_line(Upstream *u, const char *p, size_t n) {
        UpstreamParse *s = &u->parse;

        s->state = PARSE_HEADERS;
        s->in_section = false;

        if (n < 9 || memcmp(p, "HTTP/", 5) != 0)
                return malformed(u, "expected HTTP/");
        if (p[5] < '0' || p[5] > '9' || p[6] != '.' || p[7] < '0' || p[7] > '9')
                return malformed(u, "invalid version");
        s->major = p[5] - '0';
        s->minor = p[7] - '0';
        if (!((s->major == 1 && s->minor <= 1) || (s->major == 0 && s->minor == 9) ||
              (s->major == 2 && s->minor == 0)))
                return malformed(u, "invalid HTTP version");
        if (p[8] != ' ')
                return malformed(u, "expected space after version");
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
                        return malformed(u, "invalid status");
        }
        if (i < n && p[i] != ' ')
                return malformed(u, "invalid response status");
        u->resp.status = status;
        return 0;
}

/* More of the last header's value, at the end of the head */
static int head_append(Upstream *u, const char *p, size_t n) {
        if (u->parse.head_bytes + n > HEAD_MAX)
                return -E2BIG;
        u->parse.head_bytes += n;
        return buffer_append(&u->resp.head, p, n);
}

/* The framing and connection headers, as llhttp reads them */
static int parse_special(Upstream *u, const char *name, size_t name_len, const char *v, size_t n) {
        UpstreamParse *s = &u->parse;

        switch (name_len) {
        case 10:
                if (!name_is(name, name_len, "connection", 10))
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
                if (!name_is(name, name_len, "content-length", 14))
                        return 0;
                if (s->flags & RF_CONTENT_LENGTH)
                        return malformed(u, "duplicate Content-Length");
                if (s->flags & RF_TRANSFER_ENCODING)
                        return malformed(u, "Content-Length with Transfer-Encoding");
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
                                return malformed(u, "Content-Length overflow");
                        l = l * 10 + d;
                }
                for (; i < n; i++)
                        if (v[i] != ' ')
                                return malformed(u, "invalid character in Content-Length");
                u->resp.content_length = l;
                s->flags |= RF_CONTENT_LENGTH;
                return 0;
        }
        case 17: {
                if (!name_is(name, name_len, "transfer-encoding", 17))
                        return 0;
                /* an empty value is no coding (llhttp sets its flag where a value begins) */
                if (n == 0)
                        return 0;
                if (s->flags & RF_CONTENT_LENGTH)
                        return malformed(u, "Transfer-Encoding with Content-Length");
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
static int add_header(Upstream *u, const char *p, size_t name_len, const char *v, size_t n) {
        UpstreamResponse *r = &u->resp;
        UpstreamParse *s = &u->parse;
        size_t vn = (size_t)(p + n - v), at = buffer_size(&r->head);

        if (s->head_bytes + name_len + vn > HEAD_MAX)
                return malformed(u, "headers too big");
        s->head_bytes += name_len + vn;
        if (http_header_table_add(&r->headers, &r->n_headers, &r->n_headers_alloc, HEADERS_MAX, at) < 0 ||
            buffer_append(&r->head, p, n) < 0)
                return malformed(u, "too many headers");
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
                return malformed(u, "headers too big");
        h->value_len += n;
        if (first) {
                u->parse.flags &= ~RF_EMPTY_CONTENT_LENGTH;
                return parse_special(u, name, name_len, p, n);
        }
        if (name_is(name, name_len, "content-length", 14))
                return malformed(u, "duplicate Content-Length");
        if (name_is(name, name_len, "transfer-encoding", 17))
                u->parse.flags &= ~RF_CHUNKED;
        else if (name_is(name, name_len, "connection", 10))
                return parse_special(u, name, name_len, p, n);
        return 0;
}

/* One header line, its CR cut off: into the table, and read for framing. A name is a token, as RFC
 * 9112 §5.1 has it: llhttp in its default mode took spaces in it ("Transfer-Encoding : chunked" as a
 * header of its own), or none at all, which no host sends but a smuggler. */
static int parse_header_line(Upstream *u, const char *p, size_t n) {
        if (*p == ' ' || *p == '\t') {
                if (!u->parse.in_section)
                        return malformed(u, "unexpected space after start line");
                if (!value_chars(p, n))
                        return malformed(u, "invalid header value char");
                return parse_fold(u, p, n);
        }
        /* the colon is no token byte: the name's loop stops there at the latest */
        const char *colon = memchr(p, ':', n), *q = p;
        if (!colon)
                return malformed(u, "invalid header token");
        while (token_char[(unsigned char)*q])
                q++;
        if (q != colon)
                return malformed(u, "invalid header token");
        if (q == p)
                return malformed(u, "empty header name");
        const char *v = q + 1;
        while (v < p + n && (*v == ' ' || *v == '\t'))
                v++;
        if (!value_chars(v, (size_t)(p + n - v)))
                return malformed(u, "invalid header value char");
        return add_header(u, p, (size_t)(q - p), v, n);
}

/* The end of a message: a 1xx is dropped and the next response read; a final one is complete (1). */
static int message_complete(Upstream *u) {
        UpstreamParse *s = &u->parse;

        if (u->resp.status >= 100 && u->resp.status < 200) {
                /* a host that sends interim responses forever would hold the request with no answer */
                if (++u->n_interim > UPSTREAM_INTERIM_MAX) {
                        u->cancel_error = -EPROTO;
                        return -ECANCELED;
                }
                u->headers_done = false;
                /* an interim response the host says is its last: no response follows */
                s->state = parse_keep_alive(u, true) ? PARSE_START : PARSE_CLOSED;
                return 0;
        }
        u->complete = true;
        /* what on_headers was told, but where the body llhttp thought of then is not there (HEAD) */
        if (s->skip_body)
                u->resp.keep_alive = parse_keep_alive(u, true);
        s->state = PARSE_DONE;
        return 1;
}

/* The empty line that ends the head: the owner's on_headers for a final response, and how the body is
 * framed. 0 goes on, 1 complete, < 0 as upstream_parse(). */
static int headers_complete(Upstream *u) {
        UpstreamParse *s = &u->parse;
        UpstreamResponse *r = &u->resp;

        /* We never ask for an upgrade: a 101 would hand the connection to another protocol. */
        if (r->status == 101) {
                u->cancel_error = -EPROTO;
                return -ECANCELED;
        }
        /* Other 1xx interim responses are dropped. They end at their empty line, whatever their headers
         * say (RFC 9112 §6.3 rule 1, RFC 9110 §15.2). */
        if (r->status >= 100 && r->status < 200) {
                s->skip_body = true;
                return message_complete(u);
        }
        r->chunked = (s->flags & RF_CHUNKED) != 0;
        r->has_content_length = (s->flags & RF_CONTENT_LENGTH) != 0;
        if (!r->has_content_length)
                r->content_length = 0;
        /* as llhttp said it before it knew that a HEAD's answer has no body */
        r->keep_alive = parse_keep_alive(u, false);
        u->headers_done = true;

        const UpstreamCallbacks *cb = u->cb;
        /* a failure of an owner that handed u over meanwhile (upstream_set_owner()) is not the new one's */
        if (cb && cb->on_headers && cb->on_headers(u, r, u->userdata) < 0 && u->cb == cb)
                u->cancel_error = -ECANCELED;
        if (u->cancel_error)
                return -ECANCELED;
        /* RFC 9110 §9.3.2, §15.3.5, §15.4.5: no body, whatever the headers say */
        s->skip_body = u->head_request || r->status == 204 || r->status == 304;
        if (s->skip_body)
                return message_complete(u);
        if (s->flags & RF_CHUNKED) {
                s->state = PARSE_CHUNK_SIZE;
                return 0;
        }
        if (s->flags & RF_TRANSFER_ENCODING) {
                /* RFC 9112 §6.3: a response whose last coding is not chunked ends at the close */
                s->state = PARSE_BODY_EOF;
                return 0;
        }
        if (s->flags & RF_CONTENT_LENGTH) {
                if (r->content_length == 0)
                        return message_complete(u);
                s->left = r->content_length;
                s->state = PARSE_BODY_LENGTH;
                return 0;
        }
        s->state = PARSE_BODY_EOF;
        return 0;
}

/* A chunk's size line: hex digits, then an extension (ignored) */
static int parse_chunk_size(Upstream *u, const char *p, size_t n) {
        UpstreamParse *s = &u->parse;
        uint64_t size = 0;
        size_t i = 0;

        for (; i < n; i++) {
                unsigned char c = p[i];
                unsigned d = c >= '0' && c <= '9'                     ? c - '0'
                             : (c | 0x20) >= 'a' && (c | 0x20) <= 'f' ? (c | 0x20) - 'a' + 10
                                                                      : 16;
                if (d == 16)
                        break;
                if (size > UINT64_MAX / 16)
                        return malformed(u, "chunk size overflow");
                size = size * 16 + d;
        }
        if (i == 0)
                return malformed(u, "invalid character in chunk size");
        /* extensions, as llhttp takes them: ;name[=token or quoted-string] with no spaces */
        while (i < n) {
                if (p[i] != ';' || ++i == n || p[i] == ' ')
                        return malformed(u, "invalid character in chunk extensions");
                while (i < n && token_char[(unsigned char)p[i]])
                        i++;
                if (i == n || p[i] == ';')
                        continue;
                if (p[i++] != '=')
                        return malformed(u, "invalid character in chunk extensions name");
                while (i < n && token_char[(unsigned char)p[i]])
                        i++;
                if (i < n && p[i] == '"') {
                        for (i++; i < n && p[i] != '"'; i++)
                                if (((unsigned char)p[i] < ' ' && p[i] != '\t') || p[i] == '\\')
                                        return malformed(u, "invalid character in chunk extensions");
                        if (i++ == n)
                                return malformed(u, "invalid character in chunk extensions");
                        continue;
                }
                /* llhttp's quirk: after a token value's ";" only another ";" or the line's end */
                if (i < n && p[i] == ';' && ++i < n && p[i] != ';')
                        return malformed(u, "invalid character in chunk size");
        }
        s->left = size;
        s->state = size > 0 ? PARSE_CHUNK_DATA : PARSE_TRAILERS;
        s->in_section = false;
        return 0;
}

/* A whole line of the head, a chunk's size or the trailers, without its LF */
static int parse_line(Upstream *u, const char *p, size_t n) {
        UpstreamParse *s = &u->parse;
        bool cr = n > 0 && p[n - 1] == '\r';

        /* a CR inside is no value byte, nor part of a chunk's size line */
        if (cr)
                n--;
        switch (s->state) {
        case PARSE_HEADERS:
        case PARSE_TRAILERS:
                /* a bare LF ends the status line and the head, not a header (as llhttp) */
                if (n == 0)
                        return s->state == PARSE_HEADERS ? headers_complete(u) : message_complete(u);
                if (!cr)
                        return malformed(u, "expected CRLF after header value");
                return parse_header_line(u, p, n);
        case PARSE_CHUNK_SIZE:
                if (!cr)
                        return malformed(u, "expected CRLF after chunk size");
                return parse_chunk_size(u, p, n);
        default:
                abort();
        }
}

/* What of the CRLF after a chunk's data [p, end) holds is wrong */
static bool chunk_end_bad(const char *p, const char *end) {
        return (p < end && p[0] != '\r') || (p + 1 < end && p[1] != '\n');
}

/* Body bytes to the owner as they are */
static int deliver(Upstream *u, const char *p, size_t n) {
        const UpstreamCallbacks *cb = u->cb;

        if (cb && cb->on_body && cb->on_body(u, p, n, u->userdata) < 0 && u->cb == cb)
                u->cancel_error = -ECANCELED;
        return u->cancel_error ? -ECANCELED : 0;
}

/* A response's first byte: what the last one (an interim response) left is forgotten */
static void message_begin(Upstream *u) {
        UpstreamParse *s = &u->parse;

        buffer_clear(&u->resp.head);
        u->resp.n_headers = 0;
        u->resp.status = 0;
        u->resp.chunked = u->resp.has_content_length = u->resp.keep_alive = false;
        u->resp.content_length = 0;
        s->flags = 0;
        s->head_bytes = 0;
        s->skip_body = false;
        s->state = PARSE_STATUS;
}

/* The status line, as far as [*pp, end) holds it. It ends at a bare LF, or at a CR and the byte after
 * it, whatever it is (llhttp's default mode). 0: go on from *pp; else as upstream_parse(). */
static int take_status_line(Upstream *u, const char **pp, const char *end) {
        UpstreamParse *s = &u->parse;
        const char *p = *pp;
        int r;

        if (!buffer_is_empty(&s->line) && buffer_peek(&s->line)[buffer_size(&s->line) - 1] == '\r') {
                r = parse_status_line(u, buffer_peek(&s->line), buffer_size(&s->line) - 1);
                buffer_clear(&s->line);
                *pp = p + 1;
                return r;
        }
        const char *eol = NULL;
        if (buffer_is_empty(&s->line) && end - p > 13) {
                /* the usual line, whole in the read: "HTTP/1.1 200 OK", its end looked for after the
                 * version and status (a line end before it is refused all the same) */
                const char *e = p + ((unsigned)(p[9] - '0') < 10 && (unsigned)(p[10] - '0') < 10 &&
                                                     (unsigned)(p[11] - '0') < 10 && p[12] == ' '
                                             ? 13
                                             : 9);
                while (e < end && *e != '\r' && *e != '\n')
                        e++;
                eol = e < end ? e : NULL;
        } else {
                const char *lf = memchr(p, '\n', (size_t)(end - p));
                eol = memchr(p, '\r', (size_t)((lf ?: end) - p)) ?: lf;
        }
        if (!eol || eol + 1 == end) {
                *pp = end;
                if (buffer_size(&s->line) + (size_t)(end - p) > HEAD_LINE_MAX)
                        return malformed(u, "line too long");
                if (buffer_append(&s->line, p, (size_t)(end - p)) < 0)
                        return -ENOMEM;
                if (!eol || *eol == '\r')
                        return 0;
                r = parse_status_line(u, buffer_peek(&s->line), buffer_size(&s->line) - 1);
                buffer_clear(&s->line);
                return r;
        }
        *pp = eol + (*eol == '\r' ? 2 : 1);
        if (buffer_is_empty(&s->line))
                return parse_status_line(u, p, (size_t)(eol - p));
        if (buffer_append(&s->line, p, (size_t)(eol - p)) < 0)
                return -ENOMEM;
        r = parse_status_line(u, buffer_peek(&s->line), buffer_size(&s->line));
        buffer_clear(&s->line);
        return r;
}

/* A line of the head, a chunk's size or the trailers, as far as [*pp, end) holds it: taken when its LF
 * is there, else kept in parse.line (and what is wrong in it already refused). 0: go on from *pp; else
 * as upstream_parse(). */
static int take_line(Upstream *u, const char **pp, const char *end) {
        UpstreamParse *s = &u->parse;
        const char *p = *pp;
        int r;

        if (s->state != PARSE_CHUNK_SIZE && buffer_is_empty(&s->line) &&
            (s->flags & RF_EMPTY_CONTENT_LENGTH) && *p != ' ' && *p != '\t')
                return malformed(u, "empty Content-Length");
        if (s->state != PARSE_CHUNK_SIZE &&
            (buffer_is_empty(&s->line) ? *p == '\r' : *buffer_peek(&s->line) == '\r')) {
                /* the empty line's CR and the byte after it, whatever it is, as llhttp takes it in its
                 * default mode */
                if (!buffer_is_empty(&s->line)) {
                        buffer_clear(&s->line);
                        *pp = p + 1;
                } else if (p + 1 == end) {
                        *pp = end;
                        return buffer_append(&s->line, p, 1) < 0 ? -ENOMEM : 0;
                } else
                        *pp = p + 2;
                return s->state == PARSE_HEADERS ? headers_complete(u) : message_complete(u);
        }
        if (s->state != PARSE_CHUNK_SIZE && buffer_is_empty(&s->line)) {
                /* a header line whole in the read: its bytes looked at once, where they are */
                const char *q = p;
                if (!token_char[(unsigned char)end[-1]])
                        /* a byte that stops the name is there before end: no bound to check */
                        while (token_char[(unsigned char)*q])
                                q++;
                else
                        while (q < end && token_char[(unsigned char)*q])
                                q++;
                if (q > p && q < end && *q == ':') {
                        const char *v = q + 1;
                        while (v < end && (*v == ' ' || *v == '\t'))
                                v++;
                        const char *e = scan_value(v, end);
                        if (e + 1 < end && e[0] == '\r' && e[1] == '\n') {
                                *pp = e + 2;
                                return add_header(u, p, (size_t)(q - p), v, (size_t)(e - p));
                        }
                }
        }
        const char *lf = memchr(p, '\n', (size_t)(end - p));
        if (!lf) {
                *pp = end;
                if (buffer_size(&s->line) + (size_t)(end - p) > HEAD_LINE_MAX)
                        return malformed(u, "line too long");
                /* what is wrong already needs no line end to be refused */
                const char *cr = memchr(p, '\r', (size_t)(end - p));
                if (cr && cr + 1 < end)
                        return malformed(u, "expected LF after CR");
                if (s->state != PARSE_CHUNK_SIZE && !value_chars(p, (size_t)((cr ?: end) - p)))
                        return malformed(u, "invalid header char");
                return buffer_append(&s->line, p, (size_t)(end - p)) < 0 ? -ENOMEM : 0;
        }
        *pp = lf + 1;
        if (buffer_is_empty(&s->line))
                return parse_line(u, p, (size_t)(lf - p));
        if (buffer_append(&s->line, p, (size_t)(lf - p)) < 0)
                return -ENOMEM;
        r = parse_line(u, buffer_peek(&s->line), buffer_size(&s->line));
        buffer_clear(&s->line);
        return r;
}

int upstream_parse(Upstream *u, const char *buf, size_t size, size_t *ret_used) {
        UpstreamParse *s = &u->parse;
        const char *p = buf, *end = buf + size;
        int r;

        assert(u);
        assert(ret_used);
        while (p < end) {
                switch (s->state) {
                case PARSE_CLOSED:
                        /* as llhttp: whatever follows is dropped, and the close ends nothing */
                        p = end;
                        continue;
                case PARSE_START:
                        /* line ends before a response are skipped */
                        if (*p == '\r' || *p == '\n') {
                                p++;
                                continue;
                        }
                        message_begin(u);
                        continue;
                case PARSE_STATUS:
                        r = take_status_line(u, &p, end);
                        if (r != 0)
                                goto done;
                        continue;
                case PARSE_HEADERS:
                case PARSE_CHUNK_SIZE:
                case PARSE_TRAILERS:
                        r = take_line(u, &p, end);
                        if (r != 0)
                                goto done;
                        continue;
                case PARSE_BODY_LENGTH:
                case PARSE_CHUNK_DATA: {
                        size_t n = (size_t)MIN((uint64_t)(end - p), s->left);
                        s->left -= n;
                        if (s->left == 0)
                                s->state = s->state == PARSE_CHUNK_DATA ? PARSE_CHUNK_CR : PARSE_DONE;
                        /* a chunk's CRLF that this read holds is checked before its data goes on */
                        if (s->state == PARSE_CHUNK_CR && chunk_end_bad(p + n, end)) {
                                u->cancel_error = -EPROTO;
                                return -ECANCELED;
                        }
                        r = deliver(u, p, n);
                        p += n;
                        if (r < 0)
                                return r;
                        if (s->state == PARSE_DONE) {
                                r = message_complete(u);
                                goto done;
                        }
                        continue;
                }
                case PARSE_BODY_EOF:
                        r = deliver(u, p, (size_t)(end - p));
                        if (r < 0)
                                return r;
                        p = end;
                        continue;
                case PARSE_CHUNK_CR:
                case PARSE_CHUNK_LF:
                        /* the CRLF after a chunk's data, exactly */
                        if (*p != (s->state == PARSE_CHUNK_CR ? '\r' : '\n')) {
                                u->cancel_error = -EPROTO;
                                return -ECANCELED;
                        }
                        p++;
                        s->state = s->state == PARSE_CHUNK_CR ? PARSE_CHUNK_LF : PARSE_CHUNK_SIZE;
                        continue;
                case PARSE_DONE:
                default:
                        abort();
                }
        }
        return 0;
done:
        *ret_used = (size_t)(p - buf);
        return r;
}

int upstream_parse_eof(Upstream *u) {
        assert(u);
        /* a response without length ends here (older llama.cpp builds end streams like this) */
        if (u->parse.state != PARSE_BODY_EOF)
                return 0;
        return message_complete(u);
}
