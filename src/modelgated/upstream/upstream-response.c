/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A host's response as read (rule:host-input), by a parser of its own: status and headers collected into
 * the UpstreamResponse (upstream-head.c reads the lines), handed to the owner once, then body pieces as
 * they come, straight out of the bytes read, de-chunked. 1xx interim responses are skipped with no
 * content, and a body is never expected where HTTP says there is none. It reads what llhttp (which read
 * responses before, and still reads requests) read in its default mode, and refuses what it refused, so
 * that a host that worked before works the same: a bare LF ending the status line or the head, the
 * empty line's CR followed by any byte, obs-fold lines, a status of up to three digits. It refuses a few
 * things more: the CRLF after a chunk's data and its size line must be exactly that, and a header's name
 * a token (upstream-head.c).
 *
 * Lines are taken whole: where they lie in the read when they are whole in it (a header line in one pass
 * over its bytes), else gathered into parse.line until their LF comes, what is wrong in them refused as
 * soon as it is there. A callback's refusal sets cancel_error and the parse stops there;
 * upstream-connection.c ends the exchange once it has returned. */

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "modelgated/upstream/upstream-internal.h"

/* a line of the head or a chunk's size line gathered across reads; longer would be over the head's bound */
#define HEAD_LINE_MAX (UPSTREAM_HEAD_MAX + 1024)

Span upstream_response_header_name(const UpstreamResponse *r, size_t i) {
        assert(r);
        return (Span){buffer_peek(&r->head) + r->headers[i].name, r->headers[i].name_len};
}

Span upstream_response_header_value(const UpstreamResponse *r, size_t i) {
        assert(r);
        return (Span){buffer_peek(&r->head) + r->headers[i].value, r->headers[i].value_len};
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
                s->state = upstream_head_keep_alive(u, true) ? PARSE_START : PARSE_CLOSED;
                return 0;
        }
        u->complete = true;
        /* what on_headers was told, but where the body llhttp thought of then is not there (HEAD), or
         * where trailers said more (Connection: close) */
        if (s->skip_body || u->resp.chunked)
                u->resp.keep_alive = upstream_head_keep_alive(u, s->skip_body);
        s->state = PARSE_DONE;
        return 1;
}

/* The empty line that ends the head: the owner's on_headers for a final response, and how the body is
 * framed. 0 goes on, 1 complete, < 0 as upstream_parse(). */
static int headers_complete(Upstream *u) {
        UpstreamParse *s = &u->parse;
        UpstreamResponse *r = &u->resp;

        /* RFC 9112 §6.1: which one frames the body? (checked at the head's end, as llhttp; trailers
         * may have both) */
        if ((s->flags & RF_TRANSFER_ENCODING) && (s->flags & RF_CONTENT_LENGTH))
                return upstream_malformed(u, "Content-Length with Transfer-Encoding");
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
        r->keep_alive = upstream_head_keep_alive(u, false);
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

/* a hex digit's value plus one, 0 for any other byte */
static const uint8_t hex_digit[256] = {
        ['0'] = 1,  ['1'] = 2,  ['2'] = 3,  ['3'] = 4,  ['4'] = 5,  ['5'] = 6,  ['6'] = 7,  ['7'] = 8,
        ['8'] = 9,  ['9'] = 10, ['a'] = 11, ['b'] = 12, ['c'] = 13, ['d'] = 14, ['e'] = 15, ['f'] = 16,
        ['A'] = 11, ['B'] = 12, ['C'] = 13, ['D'] = 14, ['E'] = 15, ['F'] = 16,
};

/* The next chunk is size bytes, or the trailers come */
static void chunk_size_known(Upstream *u, uint64_t size) {
        UpstreamParse *s = &u->parse;

        s->left = size;
        s->state = size > 0 ? PARSE_CHUNK_DATA : PARSE_TRAILERS;
        s->in_section = false;
}

/* A chunk's size line, its CRLF cut off: hex digits, then extensions (ignored) */
static int parse_chunk_size(Upstream *u, const char *p, size_t n) {
        uint64_t size = 0;
        size_t i = 0;

        for (; i < n; i++) {
                unsigned d = hex_digit[(unsigned char)p[i]];
                if (d-- == 0)
                        break;
                if (size > UINT64_MAX / 16)
                        return upstream_malformed(u, "chunk size overflow");
                size = size * 16 + d;
        }
        if (i == 0)
                return upstream_malformed(u, "invalid character in chunk size");
        /* extensions, as llhttp takes them: ;name[=token or quoted-string] with no spaces */
        while (i < n) {
                if (p[i] != ';' || ++i == n || p[i] == ' ')
                        return upstream_malformed(u, "invalid character in chunk extensions");
                while (i < n && http_tchar[(unsigned char)p[i]])
                        i++;
                if (i == n || p[i] == ';')
                        continue;
                if (p[i++] != '=')
                        return upstream_malformed(u, "invalid character in chunk extensions name");
                while (i < n && http_tchar[(unsigned char)p[i]])
                        i++;
                if (i < n && p[i] == '"') {
                        for (i++; i < n && p[i] != '"'; i++)
                                if (((unsigned char)p[i] < ' ' && p[i] != '\t') || p[i] == '\\')
                                        return upstream_malformed(u,
                                                                  "invalid character in chunk extensions");
                        if (i++ == n)
                                return upstream_malformed(u, "invalid character in chunk extensions");
                        continue;
                }
                /* llhttp's quirk: after a token value's ";" only another ";" or the line's end */
                if (i < n && p[i] == ';' && ++i < n && p[i] != ';')
                        return upstream_malformed(u, "invalid character in chunk size");
        }
        chunk_size_known(u, size);
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
                        return upstream_malformed(u, "expected CRLF after header value");
                return upstream_head_line(u, p, n);
        case PARSE_CHUNK_SIZE:
                if (!cr)
                        return upstream_malformed(u, "expected CRLF after chunk size");
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
                r = upstream_head_status_line(u, buffer_peek(&s->line), buffer_size(&s->line) - 1);
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
                        return upstream_malformed(u, "line too long");
                if (buffer_append(&s->line, p, (size_t)(end - p)) < 0)
                        return -ENOMEM;
                if (!eol || *eol == '\r')
                        return 0;
                r = upstream_head_status_line(u, buffer_peek(&s->line), buffer_size(&s->line) - 1);
                buffer_clear(&s->line);
                return r;
        }
        *pp = eol + (*eol == '\r' ? 2 : 1);
        if (buffer_is_empty(&s->line))
                return upstream_head_status_line(u, p, (size_t)(eol - p));
        if (buffer_append(&s->line, p, (size_t)(eol - p)) < 0)
                return -ENOMEM;
        r = upstream_head_status_line(u, buffer_peek(&s->line), buffer_size(&s->line));
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

        if (s->state == PARSE_CHUNK_SIZE && buffer_is_empty(&s->line)) {
                /* the usual size line, whole in the read: hex digits (as many as cannot overflow) and
                 * CRLF */
                uint64_t size = 0;
                const char *q = p;
                for (; q < end && q - p < 16 && hex_digit[(unsigned char)*q]; q++)
                        size = size * 16 + hex_digit[(unsigned char)*q] - 1;
                if (q > p && end - q >= 2 && q[0] == '\r' && q[1] == '\n') {
                        *pp = q + 2;
                        chunk_size_known(u, size);
                        return 0;
                }
        }
        if (s->state != PARSE_CHUNK_SIZE && buffer_is_empty(&s->line) &&
            (s->flags & RF_EMPTY_CONTENT_LENGTH) && *p != ' ' && *p != '\t')
                return upstream_malformed(u, "empty Content-Length");
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
                if (!http_tchar[(unsigned char)end[-1]])
                        /* a byte that stops the name is there before end: no bound to check */
                        while (http_tchar[(unsigned char)*q])
                                q++;
                else
                        while (q < end && http_tchar[(unsigned char)*q])
                                q++;
                if (q > p && q < end && *q == ':') {
                        const char *v = q + 1;
                        while (v < end && (*v == ' ' || *v == '\t'))
                                v++;
                        const char *e = http_value_end(v, end);
                        if (e + 1 < end && e[0] == '\r' && e[1] == '\n') {
                                *pp = e + 2;
                                return upstream_head_add(u, p, (size_t)(q - p), v, (size_t)(e - p));
                        }
                }
        }
        const char *lf = memchr(p, '\n', (size_t)(end - p));
        if (!lf) {
                *pp = end;
                if (buffer_size(&s->line) + (size_t)(end - p) > HEAD_LINE_MAX)
                        return upstream_malformed(u, "line too long");
                /* what is wrong already needs no line end to be refused */
                const char *cr = memchr(p, '\r', (size_t)(end - p));
                if (cr && cr + 1 < end)
                        return upstream_malformed(u, "expected LF after CR");
                if (s->state != PARSE_CHUNK_SIZE && !upstream_value_chars(p, (size_t)((cr ?: end) - p)))
                        return upstream_malformed(u, "invalid header char");
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

/* A chunk's data, as far as [*pp, end) holds it, to the owner; its CRLF checked before, where the read
 * holds it, and taken. 0, or < 0 as upstream_parse(). */
static int take_chunk_data(Upstream *u, const char **pp, const char *end) {
        UpstreamParse *s = &u->parse;
        const char *p = *pp;
        size_t n = (size_t)MIN((uint64_t)(end - p), s->left);

        s->left -= n;
        *pp = p + n;
        if (s->left > 0)
                return deliver(u, p, n);
        if (chunk_end_bad(p + n, end)) {
                u->cancel_error = -EPROTO;
                return -ECANCELED;
        }
        int r = deliver(u, p, n);
        if (r < 0)
                return r;
        if (end - (p + n) >= 2) {
                *pp = p + n + 2;
                s->state = PARSE_CHUNK_SIZE;
        } else
                s->state = PARSE_CHUNK_CR;
        return 0;
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
                case PARSE_BODY_LENGTH: {
                        size_t n = (size_t)MIN((uint64_t)(end - p), s->left);
                        s->left -= n;
                        r = deliver(u, p, n);
                        p += n;
                        if (r < 0)
                                return r;
                        if (s->left > 0)
                                continue;
                        s->state = PARSE_DONE;
                        r = message_complete(u);
                        goto done;
                }
                case PARSE_CHUNK_DATA:
                        r = take_chunk_data(u, &p, end);
                        if (r < 0)
                                return r;
                        continue;
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
