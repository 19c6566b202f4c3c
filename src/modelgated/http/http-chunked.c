/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A chunked request body (RFC 9112 §7.1): its framing checked byte by byte (sizes, extensions, the CRLF
 * after each chunk's data, trailers), its data copied into the request's body without being looked at.
 * http-parser.c's body_feed() hands it the body's bytes once the head said "Transfer-Encoding: chunked"; the
 * scan's state is the parser's ChunkScan, zeroed at each head's end. Extensions are checked and
 * dropped; trailers are checked, counted against MaxHeaderSize and dropped (rule:trailers-dropped). */

#include <errno.h>

#include "modelgated/http/http-internal.h"
#include "modelgated/http/http.h"
#include "shared/macro.h"

enum {
        CS_SIZE_START, /* the first hex digit of a chunk size */
        CS_SIZE,
        CS_EXT, /* after ';': extensions are not forwarded (the body goes on de-chunked) */
        CS_EXT_NAME,
        CS_EXT_VALUE,
        CS_EXT_QUOTED,
        CS_EXT_QUOTED_END,
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
        return http_fail(p, 400, "a chunk size is not a hexadecimal number of at most 16 digits");
}

static int chunk_bad_crlf(HttpParser *p) {
        return http_fail(p, 400, "a line of the chunked body does not end with CRLF");
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

/* CS_EXT to CS_EXT_QUOTED_END: chunk-ext = *( ";" name [ "=" ( token / quoted-string ) ] ) (RFC 9112
 * §7.1.1, without the whitespace it calls bad; a quoted value without backslashes, as llhttp reads it) */
static int chunk_ext_byte(HttpParser *p, ChunkScan *cs, unsigned char c) {
        bool ok;

        switch (cs->state) {
        case CS_EXT:
                ok = http_tchar[c];
                cs->state = CS_EXT_NAME;
                break;
        case CS_EXT_NAME:
        case CS_EXT_VALUE:
                if (c == '=' && cs->state == CS_EXT_NAME) {
                        cs->state = CS_EXT_VALUE;
                        ok = true;
                        /* a value is a token or a quoted string: its first byte says which */
                        cs->value_begun = false;
                        break;
                }
                if (c == '"' && cs->state == CS_EXT_VALUE && !cs->value_begun) {
                        cs->state = CS_EXT_QUOTED;
                        ok = true;
                        break;
                }
                ok = http_tchar[c] || c == ';' || c == '\r';
                cs->value_begun = true;
                break;
        case CS_EXT_QUOTED:
                ok = c == '\t' || (c >= 0x20 && c != 0x7f && c != '\\');
                if (c == '"')
                        cs->state = CS_EXT_QUOTED_END;
                break;
        default: /* CS_EXT_QUOTED_END */
                ok = c == ';' || c == '\r';
                break;
        }
        if (!ok)
                return http_fail(p, 400, "a chunk extension is malformed");
        if (c == ';' && cs->state != CS_EXT_QUOTED)
                cs->state = CS_EXT;
        else if (c == '\r' && cs->state != CS_EXT_QUOTED) {
                cs->state = CS_SIZE_LF;
                return 0;
        }
        /* extensions are head-like bytes: bounded by MaxHeaderSize=, or a trickle of them would hold the
         * connection for good */
        return http_account(p, 1);
}

/* CS_SIZE_LF: a size of 0 is the last chunk, the trailer section follows it */
static int chunk_size_lf_byte(HttpParser *p, ChunkScan *cs, unsigned char c) {
        if (c != '\n')
                return chunk_bad_crlf(p);
        /* a chunk announced larger than what is left of MaxBodySize is refused before it arrives */
        if (cs->size > p->max_body_size - buffer_size(&p->req.body))
                return http_body_too_large(p);
        cs->left = cs->size;
        cs->state = cs->size > 0 ? CS_DATA : CS_LINE_START;
        cs->size = 0;
        cs->digits = 0;
        return 0;
}

/* CS_DATA_CR, CS_DATA_LF: exactly CRLF after the data */
static int chunk_data_end_byte(HttpParser *p, ChunkScan *cs, unsigned char c) {
        if (cs->state == CS_DATA_CR) {
                if (c != '\r')
                        return http_fail(p, 400, "chunk data is not followed by CRLF");
                cs->state = CS_DATA_LF;
                return 0;
        }
        if (c != '\n')
                return http_fail(p, 400, "chunk data is not followed by CRLF");
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
                        return http_fail(p, 400, "obsolete line folding in a request trailer");
                else if (http_is_tchar(c)) {
                        /* a trailer (RFC 9112 §7.1.2): dropped, never forwarded and never used for
                         * admission (rule:trailers-dropped); its bytes count as a header's */
                        p->req.had_trailers = true;
                        cs->state = CS_NAME;
                        return http_account(p, 5);
                } else
                        return http_fail(p, 400, "a request trailer has a malformed name");
                break;
        case CS_NAME:
                if (c == ':')
                        cs->state = CS_VALUE;
                else if (!http_is_tchar(c))
                        return http_fail(p, 400, "a request trailer has a malformed name");
                else
                        return http_account(p, 1);
                break;
        case CS_VALUE:
                if (c == '\r')
                        cs->state = CS_VALUE_LF;
                else if ((c < 0x20 && c != '\t') || c == 0x7f)
                        return http_fail(p, 400, "a request trailer value holds a control character");
                else
                        return http_account(p, 1);
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
        case CS_EXT_NAME:
        case CS_EXT_VALUE:
        case CS_EXT_QUOTED:
        case CS_EXT_QUOTED_END:
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

/* The chunked body (RFC 9112 §7.1): its framing checked byte by byte, its data copied. Returns how many
 * bytes belong to this message (all of them, or up to its last byte), or -EBADMSG with the error set. */
ssize_t http_chunk_scan(HttpParser *p, const char *d, size_t n) {
        ChunkScan *cs = &p->chunk;
        size_t i = 0;

        while (i < n && cs->state != CS_DONE) {
                if (cs->state == CS_DATA) {
                        size_t k = (size_t)MIN(cs->left, (uint64_t)(n - i));
                        if (buffer_size(&p->req.body) + k > p->max_body_size)
                                return http_body_too_large(p);
                        if (buffer_append(&p->req.body, d + i, k) < 0)
                                return http_fail(p, 500, "out of memory");
                        cs->left -= k;
                        i += k;
                        if (cs->left == 0)
                                cs->state = CS_DATA_CR;
                        continue;
                }
                if (chunk_byte(p, cs, (unsigned char)d[i]) < 0)
                        return -EBADMSG;
                i++;
        }
        p->message_complete = cs->state == CS_DONE;
        return (ssize_t)i;
}
