/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The request parser against RFC 9112 §2–§7, as a table: bytes in → the status modelgate answers with
 * (0: accepted), whether the connection stays, and what of the request reaches a host (the target and
 * the forwarded headers, as client.c builds them). Each row runs fed whole, one byte and 7 bytes at a
 * time, followed by a pipelined request: it must parse next when the connection stays, and never when
 * the row is refused. */

#include "modelgated/http/http.h"
#include "tests.h"

typedef struct Row {
        const char *name;
        const char *in;
        size_t len;        /* 0: strlen(in) */
        int status;        /* 0: accepted */
        bool keep;         /* accepted: the connection stays open */
        const char *has;   /* accepted: '|'-separated pieces the forwarded request contains */
        const char *lacks; /* accepted: '|'-separated pieces it must not contain (case-insensitive) */
        const char *body;  /* accepted: the body, de-chunked */
        /* refused: the connection closes after the answer and nothing of the request (nor of a request
         * pipelined behind it) reaches a host. REFUSED() says so for every refused row, and the run checks
         * what the parser decides of it: no request of the bytes completes (client-connection.c
         * dispatches on a complete request only), and no byte after the refusal is read (the daemon
         * closes on a parser error: client_parse_error()). The socket itself: tests/integration/
         * test_conformance.py. */
        bool closes_nothing_sent;
        uint64_t max_header_size; /* MaxHeaderSize= for the row (0: 64 KiB) */
} Row;

#define REFUSED(status) status, .closes_nothing_sent = true

#define H "Host: gate\r\n"
#define POST_CHUNKED "POST /v1/chat/completions HTTP/1.1\r\n" H "Transfer-Encoding: chunked\r\n\r\n"

static const Row rows[] = {
        /* header names and values (RFC 9112 §5, RFC 9110 §5.1, §5.5) */
        {"plain", "GET /health HTTP/1.1\r\n" H "\r\n", 0, 0, true, "/health|", NULL, ""},
        {"SP before colon: Authorization", "GET /x HTTP/1.1\r\n" H "Authorization : Bearer S\r\n\r\n", 0,
         REFUSED(400)},
        {"two SP before colon: X-Api-Key", "GET /x HTTP/1.1\r\n" H "X-Api-Key  : S\r\n\r\n", 0,
         REFUSED(400)},
        {"SP before colon: Cookie", "GET /x HTTP/1.1\r\n" H "Cookie : S\r\n\r\n", 0, REFUSED(400)},
        {"SP before colon: Host", "GET /x HTTP/1.1\r\nHost : evil\r\n\r\n", 0, REFUSED(400)},
        {"HTAB before colon", "GET /x HTTP/1.1\r\n" H "Authorization\t: S\r\n\r\n", 0, REFUSED(400)},
        {"SP inside a name", "GET /x HTTP/1.1\r\n" H "X Api: S\r\n\r\n", 0, REFUSED(400)},
        {"empty name", "GET /x HTTP/1.1\r\n" H ": v\r\n\r\n", 0, REFUSED(400)},
        {"name with '('", "GET /x HTTP/1.1\r\n" H "X(y): v\r\n\r\n", 0, REFUSED(400)},
        {"name with a high byte", "GET /x HTTP/1.1\r\n" H "X\xc3\xa9: v\r\n\r\n", 0, REFUSED(400)},
        {"NUL in a value", "GET /x HTTP/1.1\r\n" H "X-A: a\0b\r\n\r\n", 41, REFUSED(400)},
        {"control character in a value", "GET /x HTTP/1.1\r\n" H "X-A: a\x01z\r\n\r\n", 0, REFUSED(400)},
        {"DEL in a value", "GET /x HTTP/1.1\r\n" H "X-A: a\x7fz\r\n\r\n", 0, REFUSED(400)},
        {"HTAB and obs-text in a value pass", "GET /x HTTP/1.1\r\n" H "X-A: a\tb \xe9\r\n\r\n", 0, 0, true,
         "X-A: a\tb \xe9\r\n"},
        {"value whitespace trimmed", "GET /x HTTP/1.1\r\n" H "X-A:   v  \r\n\r\n", 0, 0, true, "X-A: v\r\n"},
        {"obs-fold", "GET /x HTTP/1.1\r\n" H "X-A: a\r\n b\r\n\r\n", 0, REFUSED(400)},
        {"obs-fold with HTAB", "GET /x HTTP/1.1\r\n" H "X-A: a\r\n\tb\r\n\r\n", 0, REFUSED(400)},
        {"bare LF after a header", "GET /x HTTP/1.1\r\n" H "X-A: a\n\r\n", 0, REFUSED(400)},
        {"bare LF after the request line", "GET /x HTTP/1.1\n" H "\r\n", 0, REFUSED(400)},
        {"CR then a byte for the empty line", "GET /x HTTP/1.1\r\n" H "\rX\r\n\r\n", 0, REFUSED(400)},
        {"a header without a colon", "GET /x HTTP/1.1\r\n" H "X-A\r\n\r\n", 0, REFUSED(400)},
        {"bare CR in a value", "GET /x HTTP/1.1\r\n" H "X-A: a\rb\r\n\r\n", 0, REFUSED(400)},
        /* RFC 9112 §2.2: a whitespace-preceded line before the first header MUST be refused or consumed */
        {"SP before the first header line", "GET /x HTTP/1.1\r\n Host: gate\r\n\r\n", 0, REFUSED(400)},
        /* MaxHeaderSize= counts the target, names, values and 4 bytes a header: 2 + 10 + 12 + 40 = 64 */
        {"header line at MaxHeaderSize",
         "GET /x HTTP/1.1\r\nX-Long: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\nHost: gate\r\n\r\n", 0, 0,
         true, NULL, .max_header_size = 64},
        {"header line one byte past MaxHeaderSize",
         "GET /x HTTP/1.1\r\nX-Long: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\nHost: gate\r\n\r\n", 0,
         REFUSED(431), .max_header_size = 64},
        {"credentials never forwarded",
         "GET /x HTTP/1.1\r\n" H "Authorization: Bearer S\r\nX-Api-Key: S\r\nCookie: c=S\r\n"
         "Proxy-Authorization: S\r\nX-Keep: k\r\n\r\n",
         0, 0, true, "X-Keep: k", "authorization|x-api-key|cookie|S\r\n"},

        /* Host (RFC 9112 §3.2) */
        {"no Host in HTTP/1.1", "GET /x HTTP/1.1\r\n\r\n", 0, REFUSED(400)},
        {"two Host headers", "GET /x HTTP/1.1\r\n" H "Host: evil\r\n\r\n", 0, REFUSED(400)},
        {"two Host headers in HTTP/1.0", "GET /x HTTP/1.0\r\nHost: gate\r\nHost: evil\r\n\r\n", 0,
         REFUSED(400)},
        {"no Host in HTTP/1.0", "GET /x HTTP/1.0\r\n\r\n", 0, 0, false, "/x|", "host"},
        {"Host is never forwarded as sent", "GET /x HTTP/1.1\r\nHost: evil\r\n\r\n", 0, 0, true, "/x|",
         "evil"},

        /* Content-Length and Transfer-Encoding (RFC 9112 §6) */
        {"Content-Length with a trailing HTAB", "POST /x HTTP/1.1\r\n" H "Content-Length: 3\t\r\n\r\nabc", 0,
         0, true, NULL, "content-length", "abc"},
        {"empty Content-Length", "POST /x HTTP/1.1\r\n" H "Content-Length:\r\n\r\n", 0, REFUSED(400)},
        {"Content-Length body", "POST /x HTTP/1.1\r\n" H "Content-Length: 3\r\n\r\nabc", 0, 0, true, NULL,
         "content-length", "abc"},
        {"two Content-Length", "POST /x HTTP/1.1\r\n" H "Content-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
         0, REFUSED(400)},
        {"Content-Length list", "POST /x HTTP/1.1\r\n" H "Content-Length: 3, 3\r\n\r\nabc", 0, REFUSED(400)},
        {"negative Content-Length", "POST /x HTTP/1.1\r\n" H "Content-Length: -1\r\n\r\n", 0, REFUSED(400)},
        {"Content-Length with a sign", "POST /x HTTP/1.1\r\n" H "Content-Length: +3\r\n\r\nabc", 0,
         REFUSED(400)},
        {"Content-Length not a number", "POST /x HTTP/1.1\r\n" H "Content-Length: 1a\r\n\r\nabc", 0,
         REFUSED(400)},
        {"Content-Length past 2^64", "POST /x HTTP/1.1\r\n" H "Content-Length: 18446744073709551616\r\n\r\n",
         0, REFUSED(400)},
        {"Content-Length and chunked",
         "POST /x HTTP/1.1\r\n" H "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 0,
         REFUSED(400)},
        {"chunked and Content-Length",
         "POST /x HTTP/1.1\r\n" H "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n", 0,
         REFUSED(400)},
        {"two Transfer-Encoding",
         "POST /x HTTP/1.1\r\n" H
         "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
         0, REFUSED(400)},
        {"gzip, chunked", "POST /x HTTP/1.1\r\n" H "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 0,
         REFUSED(400)},
        {"chunked, then not last",
         "POST /x HTTP/1.1\r\n" H "Transfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n", 0, REFUSED(400)},
        {"identity", "POST /x HTTP/1.1\r\n" H "Transfer-Encoding: identity\r\n\r\n", 0, REFUSED(400)},
        /* any coding but a bare "chunked" is a 400 here (RFC 9112 §6.1 allows 501 for one not understood) */
        {"chunked with a parameter",
         "POST /x HTTP/1.1\r\n" H "Transfer-Encoding: chunked;x\r\n\r\n0\r\n\r\n", 0, REFUSED(400)},
        {"chunked is case-insensitive",
         "POST /x HTTP/1.1\r\n" H "Transfer-Encoding: Chunked\r\n\r\n1\r\na\r\n0\r\n\r\n", 0, 0, true, NULL,
         "transfer-encoding", "a"},
        {"HTTP/1.0 with Transfer-Encoding closes",
         "POST /x HTTP/1.0\r\nConnection: keep-alive\r\nTransfer-Encoding: "
         "chunked\r\n\r\n1\r\na\r\n0\r\n\r\n",
         0, 0, false, NULL, NULL, "a"},

        /* chunks (RFC 9112 §7.1) */
        {"chunks and an extension", POST_CHUNKED "3\r\nabc\r\n2;ext=\"v\"\r\nde\r\n0\r\n\r\n", 0, 0, true,
         NULL, NULL, "abcde"},
        {"an extension on the last chunk", POST_CHUNKED "0;ext=1\r\n\r\n", 0, 0, true, NULL, NULL, ""},
        {"upper-case hex size", POST_CHUNKED "A\r\n0123456789\r\n0\r\n\r\n", 0, 0, true, NULL, NULL,
         "0123456789"},
        {"leading zeros in the size", POST_CHUNKED "003\r\nabc\r\n000\r\n\r\n", 0, 0, true, NULL, NULL,
         "abc"},
        {"chunk data not ended by CRLF", POST_CHUNKED "3\r\nabcXY0\r\n\r\n", 0, REFUSED(400)},
        {"chunk data ended by LF only", POST_CHUNKED "3\r\nabc\n0\r\n\r\n", 0, REFUSED(400)},
        {"chunk data ended by CR only", POST_CHUNKED "3\r\nabc\r0\r\n\r\n", 0, REFUSED(400)},
        /* llhttp takes any two bytes for the CRLF: only the scan's CR check refuses this one */
        {"chunk data ended by X LF", POST_CHUNKED "3\r\nabcX\n0\r\n\r\n", 0, REFUSED(400)},
        {"chunk size line ended by LF", POST_CHUNKED "3\nabc\r\n0\r\n\r\n", 0, REFUSED(400)},
        {"last chunk ended by a bare LF", POST_CHUNKED "3\r\nabc\r\n0\r\n\n", 0, REFUSED(400)},
        {"last chunk line by a bare LF", POST_CHUNKED "3\r\nabc\r\n0\n\r\n", 0, REFUSED(400)},
        {"no size", POST_CHUNKED "\r\nabc\r\n0\r\n\r\n", 0, REFUSED(400)},
        {"size not hex", POST_CHUNKED "g\r\nabc\r\n0\r\n\r\n", 0, REFUSED(400)},
        {"size with a sign", POST_CHUNKED "+3\r\nabc\r\n0\r\n\r\n", 0, REFUSED(400)},
        {"size with 0x", POST_CHUNKED "0x3\r\nabc\r\n0\r\n\r\n", 0, REFUSED(400)},
        {"size overflow", POST_CHUNKED "10000000000000003\r\nabc\r\n0\r\n\r\n", 0, REFUSED(400)},
        {"space after the size", POST_CHUNKED "3 \r\nabc\r\n0\r\n\r\n", 0, REFUSED(400)},
        {"control character in an extension", POST_CHUNKED "3;a\x01\r\nabc\r\n0\r\n\r\n", 0, REFUSED(400)},
        {"trailer dropped", POST_CHUNKED "3\r\nabc\r\n0\r\nX-Injected: yes\r\n\r\n", 0, 0, true, NULL,
         "x-injected", "abc"},
        {"trailer Authorization dropped", POST_CHUNKED "3\r\nabc\r\n0\r\nAuthorization: Bearer S\r\n\r\n", 0,
         0, true, NULL, "authorization", "abc"},
        {"folded trailer", POST_CHUNKED "3\r\nabc\r\n0\r\nX-A: a\r\n b\r\n\r\n", 0, REFUSED(400)},
        {"trailer with SP before colon", POST_CHUNKED "3\r\nabc\r\n0\r\nX-A : a\r\n\r\n", 0, REFUSED(400)},
        {"trailer ended by a bare LF", POST_CHUNKED "3\r\nabc\r\n0\r\nX-A: a\n\r\n", 0, REFUSED(400)},
        {"trailer without a colon", POST_CHUNKED "3\r\nabc\r\n0\r\nX-A\r\n\r\n", 0, REFUSED(400)},
        {"two extensions on a chunk", POST_CHUNKED "2;a=1;b\r\nde\r\n0;c=\"x y\"\r\n\r\n", 0, 0, true, NULL,
         NULL, "de"},
        {"an extension without a name", POST_CHUNKED "3;\r\nabc\r\n0\r\n\r\n", 0, REFUSED(400)},
        {"an extension with a space for a name", POST_CHUNKED "3; =1\r\nabc\r\n0\r\n\r\n", 0, REFUSED(400)},
        {"a backslash in a quoted extension", POST_CHUNKED "3;a=\"\\x\"\r\nabc\r\n0\r\n\r\n", 0,
         REFUSED(400)},
        {"bytes after a quoted extension", POST_CHUNKED "3;a=\"x\"y\r\nabc\r\n0\r\n\r\n", 0, REFUSED(400)},

        /* the request line (RFC 9112 §3) */
        {"origin form with a query", "GET /props?model=h-a HTTP/1.1\r\n" H "\r\n", 0, 0, true,
         "/props?model=h-a|"},
        {"absolute form", "GET http://gate/health?x=1 HTTP/1.1\r\n" H "\r\n", 0, 0, true, "/health?x=1|",
         "http:"},
        {"absolute form without a path", "GET http://gate HTTP/1.1\r\n" H "\r\n", 0, REFUSED(400)},
        {"fragment", "GET /health#frag HTTP/1.1\r\n" H "\r\n", 0, REFUSED(400)},
        {"neither a path nor an absolute URL", "GET health HTTP/1.1\r\n" H "\r\n", 0, REFUSED(400)},
        {"a scheme with a digit", "GET h2://gate/health HTTP/1.1\r\n" H "\r\n", 0, REFUSED(400)},
        {"no space before the version", "GET /x/HTTP/1.1\r\n" H "\r\n", 0, REFUSED(400)},
        {"a malformed version", "GET /x HTTP/A.1\r\n" H "\r\n", 0, REFUSED(400)},
        {"a version with three digits", "GET /x HTTP/1.10\r\n" H "\r\n", 0, REFUSED(400)},
        {"TAB in the target", "GET /a\tb HTTP/1.1\r\n" H "\r\n", 0, REFUSED(400)},
        {"high byte in the target", "GET /a\xc3\xa9 HTTP/1.1\r\n" H "\r\n", 0, REFUSED(400)},
        /* RFC 9112 §3: a recipient MAY split on whitespace; the line is rebuilt for the host anyway */
        {"two spaces in the request line", "GET  /x HTTP/1.1\r\n" H "\r\n", 0, 0, true, "/x|"},
        {"lower-case method", "get /x HTTP/1.1\r\n" H "\r\n", 0, REFUSED(400)},
        {"unknown method", "FOO /x HTTP/1.1\r\n" H "\r\n", 0, REFUSED(400)},
        {"CONNECT", "CONNECT gate:443 HTTP/1.1\r\n" H "\r\n", 0, REFUSED(405)},
        {"TRACE", "TRACE / HTTP/1.1\r\n" H "\r\n", 0, REFUSED(405)},
        /* the asterisk form (RFC 9112 §3.2.4) parses; client-dispatch.c then answers 400 ("the request
         * target must be a path") before anything reaches a host, and the connection stays */
        {"OPTIONS *", "OPTIONS * HTTP/1.1\r\n" H "\r\n", 0, 0, true},
        {"HTTP/0.9 style", "GET /x\r\n\r\n", 0, REFUSED(400)},
        {"no version", "GET /x \r\n" H "\r\n", 0, REFUSED(400)},
        {"lower-case http", "GET /x http/1.1\r\n" H "\r\n", 0, REFUSED(400)},
        {"bare CR after the version", "GET /x HTTP/1.1\rHost: gate\r\n\r\n", 0, REFUSED(400)},
        {"CR CR LF after the version", "GET /x HTTP/1.1\r\r\n" H "\r\n", 0, REFUSED(400)},
        {"leading empty line", "\r\nGET /x HTTP/1.1\r\n" H "\r\n", 0, 0, true, "/x|"},

        /* HTTP versions (RFC 9112 §2.3) */
        {"HTTP/1.0 closes", "GET /x HTTP/1.0\r\n\r\n", 0, 0, false},
        {"HTTP/1.0 keep-alive", "GET /x HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", 0, 0, true},
        {"HTTP/2.0", "GET /x HTTP/2.0\r\n" H "\r\n", 0, REFUSED(505)},
        {"HTTP/1.2", "GET /x HTTP/1.2\r\n" H "\r\n", 0, REFUSED(505)},
        {"HTTP/3.0", "GET /x HTTP/3.0\r\n" H "\r\n", 0, REFUSED(505)},
        {"HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 0, REFUSED(505)},

        /* Expect (RFC 9110 §10.1.1) */
        {"Expect: 100-continue",
         "POST /x HTTP/1.1\r\n" H "Expect: 100-continue\r\nContent-Length: 1\r\n\r\na", 0, 0, true, NULL,
         "expect", "a"},
        {"other Expect", "POST /x HTTP/1.1\r\n" H "Expect: something\r\nContent-Length: 1\r\n\r\na", 0,
         REFUSED(417)},

        /* Upgrade (RFC 9110 §7.8): never honoured, the request is plain HTTP/1.1 */
        {"Upgrade h2c",
         "GET /health HTTP/1.1\r\n" H "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: "
         "h2c\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\n",
         0, 0, true, "/health|", "upgrade|http2-settings"},
        {"Upgrade websocket",
         "GET /x HTTP/1.1\r\n" H "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: k\r\n\r\n",
         0, 0, true, "Sec-WebSocket-Key: k", "upgrade"},
        {"Upgrade with a body",
         "POST /x HTTP/1.1\r\n" H "Connection: upgrade\r\nUpgrade: h2c\r\nContent-Length: 2\r\n\r\n{}", 0, 0,
         true, NULL, "upgrade", "{}"},

        /* Connection and the hop-by-hop headers (RFC 9110 §7.6.1) */
        {"hop-by-hop headers dropped",
         "GET /x HTTP/1.1\r\n" H "Keep-Alive: 5\r\nProxy-Connection: x\r\nTE: trailers\r\nTrailer: "
         "X\r\nConnection: keep-alive\r\n\r\n",
         0, 0, true, "/x|", "keep-alive|proxy-connection|te:|trailer"},
        {"Connection names a header",
         "GET /x HTTP/1.1\r\n" H "Connection: X-Secret\r\nX-Secret: s\r\nX-Keep: k\r\n\r\n", 0, 0, true,
         "X-Keep", "x-secret"},
        {"tokens across several Connection headers",
         "GET /x HTTP/1.1\r\n" H
         "Connection: keep-alive\r\nConnection: X-A, X-B\r\nX-A: a\r\nX-B: b\r\nX-C: c\r\n\r\n",
         0, 0, true, "X-C", "x-a|x-b"},
        {"close in a second Connection header",
         "GET /x HTTP/1.1\r\n" H "Connection: X-A\r\nConnection: close\r\n\r\n", 0, 0, false},
        {"Connection: close", "GET /x HTTP/1.1\r\n" H "Connection: close\r\n\r\n", 0, 0, false},
};

static bool contains_nocase(const char *hay, size_t n, const char *needle, size_t l) {
        for (size_t i = 0; i + l <= n; i++)
                if (strncasecmp(hay + i, needle, l) == 0)
                        return true;
        return false;
}

/* each '|'-separated piece of list, in forwarded (or not) */
static void check_pieces(const Row *row, const Buffer *fwd, const char *list, bool want) {
        for (const char *p = list; p && *p;) {
                const char *bar = strchr(p, '|'), *e = bar ?: p + strlen(p);
                size_t l = (size_t)(e - p);
                bool found = want ? memmem(buffer_peek(fwd), buffer_size(fwd), p, l) != NULL
                                  : contains_nocase(buffer_peek(fwd), buffer_size(fwd), p, l);
                if (found != want)
                        FAIL("%s: the forwarded request %s '%.*s':\n%.*s", row->name,
                             want ? "lacks" : "contains", (int)l, p, (int)buffer_size(fwd),
                             buffer_peek(fwd));
                p = bar ? bar + 1 : e;
        }
}

/* Feeds in[0..n) in pieces of 'step' bytes (0: whole); returns the result and the bytes consumed. */
static int feed(HttpParser *p, const char *in, size_t n, size_t step, size_t *ret_used) {
        size_t off = 0;
        int r = HTTP_PARSE_MORE;

        while (off < n) {
                size_t len = step ? MIN(step, n - off) : n - off, k = 0;
                r = http_parser_feed(p, in + off, len, &k);
                if (r < 0)
                        break;
                off += k;
                if (r == HTTP_PARSE_DONE)
                        break;
                if (k < len)
                        FAIL("the parser stopped at %zu without a result", off);
        }
        *ret_used = off;
        return r;
}

static const char next[] = "GET /after HTTP/1.1\r\nHost: gate\r\n\r\n";

static void parser_init_for(HttpParser *p, const Row *row) {
        http_parser_init(p, row->max_header_size ?: 64 * 1024, 1024 * 1024);
}

/* A refused row: its bytes and the request pipelined behind them, fed as a connection takes them (each
 * complete request dispatched, the parser readied for the next) until the refusal */
static void run_refused(const Row *row, const char *in, size_t n, size_t step) {
        HttpParser p;
        unsigned n_done = 0;
        int r = HTTP_PARSE_MORE;
        size_t k;

        if (!row->closes_nothing_sent)
                FAIL("%s: a refused row says REFUSED(): the connection closes, nothing reaches a host",
                     row->name);
        parser_init_for(&p, row);
        for (size_t off = 0, used = 0; off < n && r >= 0; off += used) {
                r = feed(&p, in + off, n - off, step, &used);
                if (r == HTTP_PARSE_DONE) {
                        n_done++;
                        http_parser_next(&p);
                } else if (used == 0)
                        break;
        }
        if (r >= 0)
                FAIL("%s (step %zu): not refused, expected %d", row->name, step, row->status);
        if (p.error_status != row->status)
                FAIL("%s (step %zu): %d (%s), expected %d", row->name, step, p.error_status, p.error_message,
                     row->status);
        /* nothing reaches a host: only a complete request is ever dispatched */
        if (n_done > 0)
                FAIL("%s (step %zu): %u request(s) of it completed, and would reach a host", row->name, step,
                     n_done);
        /* the connection closes: not another byte is read, whatever follows gets the same refusal */
        if (http_parser_feed(&p, next, strlen(next), &k) >= 0 || p.error_status != row->status)
                FAIL("%s (step %zu): the parser read on after its refusal", row->name, step);
        http_parser_done(&p);
}

static void check_forwarded(const Row *row, const HttpParser *p, size_t step) {
        Buffer fwd = {};
        Span url = http_request_url(&p->req);

        ASSERT_OK(buffer_append(&fwd, url.p, url.n));
        ASSERT_OK(buffer_append_str(&fwd, "|"));
        ASSERT_OK(http_request_append_forwarded_headers(&p->req, &fwd));
        check_pieces(row, &fwd, row->has, true);
        check_pieces(row, &fwd, row->lacks, false);
        /* no forwarded header has whitespace in its name, ever */
        for (size_t i = 0; i < p->req.n_headers; i++) {
                Span name = http_header_name(&p->req, i);
                ASSERT_TRUE(!memchr(name.p, ' ', name.n) && !memchr(name.p, '\t', name.n));
        }
        if (row->body && (buffer_size(&p->req.body) != strlen(row->body) ||
                          memcmp(buffer_peek(&p->req.body), row->body, strlen(row->body)) != 0))
                FAIL("%s (step %zu): body '%.*s', expected '%s'", row->name, step,
                     (int)buffer_size(&p->req.body), buffer_peek(&p->req.body), row->body);
        buffer_done(&fwd);
}

static void run_accepted(const Row *row, const char *in, size_t n, size_t step) {
        HttpParser p;
        size_t used = 0;

        parser_init_for(&p, row);
        int r = feed(&p, in, n, step, &used);
        if (r != HTTP_PARSE_DONE)
                FAIL("%s (step %zu): %d (%s %s), expected a request", row->name, step, r,
                     r < 0 ? "status" : "", r < 0 ? p.error_message : "");
        if (p.req.keep_alive != row->keep)
                FAIL("%s (step %zu): keep-alive %d, expected %d", row->name, step, p.req.keep_alive,
                     row->keep);
        check_forwarded(row, &p, step);

        /* pipelining: the next request is where this one ended */
        if (row->keep) {
                size_t k;
                http_parser_next(&p);
                ASSERT_EQ(feed(&p, in + used, n - used, step, &k), HTTP_PARSE_DONE);
                if (!span_eq(http_request_url(&p.req), "/after"))
                        FAIL("%s (step %zu): the pipelined request was not parsed next", row->name, step);
        }
        http_parser_done(&p);
}

/* The row's bytes, then a request pipelined behind them */
static void run_row(const Row *row, size_t step) {
        size_t len = row->len ?: strlen(row->in);
        char *in = malloc(len + sizeof(next));

        ASSERT_TRUE(in);
        memcpy(in, row->in, len);
        memcpy(in + len, next, sizeof(next));
        if (row->status)
                run_refused(row, in, len + strlen(next), step);
        else
                run_accepted(row, in, len + strlen(next), step);
        free(in);
}

/* chunk extensions count as head bytes: a trickle of them cannot hold a connection for good */
TEST(chunk_extensions_are_bounded) {
        HttpParser p;
        size_t k;
        const char *head = POST_CHUNKED "1;";
        char ext[4096];

        memset(ext, 'a', sizeof(ext));
        http_parser_init(&p, 16 * 1024, 1024 * 1024);
        ASSERT_EQ(http_parser_feed(&p, head, strlen(head), &k), HTTP_PARSE_HEADERS);
        int r = 0;
        for (int i = 0; i < 8 && r >= 0; i++)
                r = http_parser_feed(&p, ext, sizeof(ext), &k);
        ASSERT_TRUE(r < 0);
        ASSERT_EQ(p.error_status, 431);
        http_parser_done(&p);
}

TEST(conformance_table) {
        for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
                run_row(&rows[i], 0);
                run_row(&rows[i], 1);
                run_row(&rows[i], 7);
        }
        printf("%zu rows, each fed whole, byte by byte and 7 bytes at a time\n", ELEMENTSOF(rows));
}

TESTS_MAIN
