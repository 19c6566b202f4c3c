/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <ctype.h>

#include "modelgated/http/http.h"
#include "tests.h"

/* Feeds msg split at every point (picohttpparser's "incomplete N" idea) and checks the result. */
static int feed_split(const char *msg, size_t split, HttpParser *p, size_t *ret_used) {
        size_t n = strlen(msg), used = 0, k;
        int r = HTTP_PARSE_MORE;

        for (size_t part = 0; part < 2 && r != HTTP_PARSE_DONE; part++) {
                size_t from = part == 0 ? 0 : split, to = part == 0 ? split : n;
                size_t off = from;
                while (off < to) {
                        r = http_parser_feed(p, msg + off, to - off, &k);
                        if (r < 0)
                                return r;
                        off += k;
                        used += k;
                        if (r == HTTP_PARSE_DONE || k == 0)
                                break;
                }
        }
        *ret_used = used;
        return r;
}

TEST(request_at_every_split_point) {
        const char *msg =
                "POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: h\r\nContent-Length: 11\r\n"
                "X-Thing:  spaced value  \r\n\r\n{\"model\":1}GET /next HTTP/1.1\r\nHost: h\r\n\r\n";
        for (size_t split = 0; split <= strlen(msg); split++) {
                HttpParser p;
                size_t used;
                http_parser_init(&p, 64 * 1024, 1024);
                ASSERT_EQ(feed_split(msg, split, &p, &used), HTTP_PARSE_DONE);
                ASSERT_EQ(p.req.method, HTTP_POST);
                Span url = http_request_url(&p.req);
                ASSERT_TRUE(span_eq(url, "/v1/chat/completions?x=1"));
                ASSERT_TRUE(span_eq(http_request_header(&p.req, "x-thing"), "spaced value"));
                ASSERT_EQ(buffer_size(&p.req.body), 11);
                ASSERT_TRUE(p.req.keep_alive);
                /* the pipelined request is not consumed */
                ASSERT_TRUE(strncmp(msg + used, "GET /next", 9) == 0);
                http_parser_next(&p);
                size_t k;
                ASSERT_EQ(http_parser_feed(&p, msg + used, strlen(msg) - used, &k), HTTP_PARSE_DONE);
                ASSERT_TRUE(span_eq(http_request_url(&p.req), "/next"));
                http_parser_done(&p);
        }
}

TEST(chunked_body) {
        const char *msg = "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: "
                          "chunked\r\n\r\n3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\n\r\n";
        for (size_t split = 0; split <= strlen(msg); split++) {
                HttpParser p;
                size_t used;
                http_parser_init(&p, 64 * 1024, 1024);
                ASSERT_EQ(feed_split(msg, split, &p, &used), HTTP_PARSE_DONE);
                ASSERT_TRUE(buffer_size(&p.req.body) == 5 &&
                            memcmp(buffer_peek(&p.req.body), "abcde", 5) == 0);
                http_parser_done(&p);
        }
}

/* A line comes whole to the parser, but one that cannot become a request is refused before its end */
TEST(a_request_line_that_cannot_be_one_is_refused_before_its_end) {
        static const char *const starts[] = {"get /x", "G{T /x", "\x16\x03\x01\x02\x00"};
        for (size_t i = 0; i < ELEMENTSOF(starts); i++) {
                HttpParser p;
                size_t k;
                http_parser_init(&p, 64 * 1024, 1024);
                ASSERT_TRUE(http_parser_feed(&p, starts[i], strlen(starts[i]), &k) < 0);
                ASSERT_EQ(p.error_status, 400);
                http_parser_done(&p);
        }
        /* an empty line before a request is no start of one; a method so far waits for the rest */
        HttpParser p;
        size_t k;
        http_parser_init(&p, 64 * 1024, 1024);
        ASSERT_EQ(http_parser_feed(&p, "\r", 1, &k), HTTP_PARSE_MORE);
        ASSERT_TRUE(!p.started);
        ASSERT_EQ(http_parser_feed(&p, "\nPOS", 4, &k), HTTP_PARSE_MORE);
        ASSERT_TRUE(p.started);
        http_parser_done(&p);
}

/* A line that comes in a trickle is bounded by MaxHeaderSize= before its end */
TEST(a_trickled_line_is_bounded_before_its_end) {
        HttpParser p;
        size_t k;
        char v[200];
        memset(v, 'a', sizeof(v));
        http_parser_init(&p, 100, 1024);
        const char *head = "GET /x HTTP/1.1\r\nX-A: ";
        ASSERT_EQ(http_parser_feed(&p, head, strlen(head), &k), HTTP_PARSE_MORE);
        ASSERT_TRUE(http_parser_feed(&p, v, sizeof(v), &k) < 0);
        ASSERT_EQ(p.error_status, 431);
        http_parser_done(&p);
}

/* The word-wise case-insensitive comparison against strncasecmp() (C locale), on random bytes of every
 * length, most of them one case change away from each other */
TEST(case_insensitive_comparison_agrees_with_strncasecmp) {
        static const char alphabet[] = "aAzZ@[`{-_09\r\x80\xc1\xe1\x7f ";
        srand(42);
        for (unsigned k = 0; k < 200000; k++) {
                char a[24], b[24];
                size_t n = (size_t)rand() % 21;
                for (size_t i = 0; i < n; i++) {
                        a[i] = alphabet[rand() % (sizeof(alphabet) - 1)];
                        b[i] = rand() % 3 ? a[i] ^ (rand() % 2 ? 0x20 : 0)
                                          : alphabet[rand() % (sizeof(alphabet) - 1)];
                }
                bool want = true;
                for (size_t i = 0; i < n && want; i++) {
                        unsigned char x = (unsigned char)a[i], y = (unsigned char)b[i];
                        want = (x >= 'A' && x <= 'Z' ? x | 0x20 : x) ==
                               (y >= 'A' && y <= 'Z' ? y | 0x20 : y);
                }
                if (http_caseeq_n(a, b, n) != want)
                        FAIL("'%.*s' and '%.*s': %d", (int)n, a, (int)n, b, !want);
        }
}

static void expect_error(const char *msg, int status, uint64_t max_header, uint64_t max_body) {
        for (size_t split = 0; split <= strlen(msg); split++) {
                HttpParser p;
                size_t used;
                http_parser_init(&p, max_header, max_body);
                int r = feed_split(msg, split, &p, &used);
                if (r >= 0)
                        FAIL("accepted (split %zu): %s", split, msg);
                ASSERT_EQ(p.error_status, status);
                http_parser_done(&p);
        }
}

TEST(refusals) {
        expect_error("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
                     400, 65536, 100);
        expect_error("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx", 400,
                     65536, 100);
        expect_error("GET / HTTP/1.1\r\nHost: h\r\nA: b\r\n c\r\n\r\n", 400, 65536, 100);
        expect_error("GET / HTTP/1.1\r\nHost: h\r\nA: b\r\n\tc\r\n\r\n", 400, 65536, 100);
        expect_error("GET / HTTP/1.1\nA: b\n\n", 400, 65536, 100);
        expect_error("GET / HTTP/1.1\r\nHost: h\r\nA: b\n\r\n", 400, 65536, 100);
        expect_error("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\n", 400, 65536, 100);
        expect_error("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400, 65536,
                     100);
        expect_error("CONNECT h:1 HTTP/1.1\r\nHost: h\r\n\r\n", 405, 65536, 100);
        expect_error("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 101\r\n\r\n", 413, 65536, 100);
        expect_error("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n65\r\n", 413, 65536,
                     100);
        char big[3000];
        snprintf(big, sizeof(big), "GET / HTTP/1.1\r\nHost: h\r\nX: %02000d\r\n\r\n", 0);
        expect_error(big, 431, 1024, 100);
}

TEST(expect_continue_reports_headers_first) {
        HttpParser p;
        size_t k;
        const char *head = "POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n";
        http_parser_init(&p, 65536, 100);
        ASSERT_EQ(http_parser_feed(&p, head, strlen(head), &k), HTTP_PARSE_HEADERS);
        ASSERT_TRUE(p.req.expect_continue && p.req.has_body);
        ASSERT_EQ(http_parser_feed(&p, "{}", 2, &k), HTTP_PARSE_DONE);
        http_parser_done(&p);
}

TEST(header_tokens) {
        ASSERT_TRUE(span_has_token((Span){"keep-alive, X-Foo", 17}, "x-foo"));
        ASSERT_TRUE(!span_has_token((Span){"keep-alive, X-Foo", 17}, "x-fo"));
        ASSERT_TRUE(http_header_is_hop_by_hop((Span){"transfer-encoding", 17}));
        ASSERT_TRUE(http_header_is_credential((Span){"x-api-key", 9}));
        ASSERT_TRUE(!http_header_is_credential((Span){"x-api-keys", 10}));
}

static bool opens_websocket(const char *msg) {
        HttpParser p;
        size_t k;
        bool r;

        http_parser_init(&p, 65536, 100);
        ASSERT_EQ(http_parser_feed(&p, msg, strlen(msg), &k), HTTP_PARSE_DONE);
        r = http_request_opens_websocket(&p.req);
        http_parser_done(&p);
        return r;
}

/* rule:websocket-426: what a WebSocket's opening handshake is (RFC 6455 §4.1), as Codex sends it */
TEST(websocket_handshake) {
        ASSERT_TRUE(opens_websocket("GET /v1/responses HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\n"
                                    "Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
                                    "Sec-WebSocket-Key: LYJBgKgGtM3OKSKFbNdeQw==\r\n\r\n"));
        /* tokens in any case, among others, on any of several lines */
        ASSERT_TRUE(opens_websocket("GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive\r\n"
                                    "Connection: UPGRADE\r\nUpgrade: h2c, WebSocket\r\n\r\n"));
        ASSERT_TRUE(opens_websocket("GET / HTTP/1.1\r\nHost: h\r\nConnection: upgrade\r\nUpgrade: h2c\r\n"
                                    "Upgrade: websocket\r\n\r\n"));
        /* not one: another protocol, Upgrade that Connection does not name, not a GET, HTTP/1.0 */
        ASSERT_TRUE(!opens_websocket(
                "GET / HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n"));
        ASSERT_TRUE(!opens_websocket("GET / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\n\r\n"));
        ASSERT_TRUE(!opens_websocket("POST / HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\n"
                                     "Upgrade: websocket\r\nContent-Length: 2\r\n\r\n{}"));
        ASSERT_TRUE(!opens_websocket("GET / HTTP/1.0\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"));
        ASSERT_TRUE(!opens_websocket("GET / HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\n"
                                     "Upgrade: websockets\r\n\r\n"));
}

static bool hop(const char *name) {
        return http_header_is_hop_by_hop((Span){name, strlen(name)});
}

static bool credential(const char *name) {
        return http_header_is_credential((Span){name, strlen(name)});
}

/* Each name in any case, and nothing of its length that is another name or a byte away from it */
TEST(hop_by_hop_and_credential_names) {
        static const char *const hops[] = {
                "Connection",        "Keep-Alive", "Proxy-Connection", "TE",   "Trailer",
                "Transfer-Encoding", "Upgrade",    "Content-Length",   "Host", "Expect"};
        static const char *const credentials[] = {"Authorization", "X-Api-Key", "Proxy-Authorization",
                                                  "Cookie"};
        char t[32];

        for (size_t i = 0; i < ELEMENTSOF(hops); i++) {
                ASSERT_TRUE(hop(hops[i]) && !credential(hops[i]));
                for (size_t j = 0; hops[i][j]; j++)
                        t[j] = (char)(j % 2 ? toupper(hops[i][j]) : tolower(hops[i][j]));
                t[strlen(hops[i])] = 0;
                ASSERT_TRUE(hop(t));
                /* a dash for a CR (their bit 5 aside, the same), a letter one bit away */
                if (strchr(t, '-')) {
                        *strchr(t, '-') = '\r';
                        ASSERT_TRUE(!hop(t));
                }
                t[0] ^= 1;
                ASSERT_TRUE(!hop(t));
        }
        for (size_t i = 0; i < ELEMENTSOF(credentials); i++) {
                ASSERT_TRUE(credential(credentials[i]) && !hop(credentials[i]));
                for (size_t j = 0; credentials[i][j]; j++)
                        t[j] = (char)toupper(credentials[i][j]);
                t[strlen(credentials[i])] = 0;
                ASSERT_TRUE(credential(t));
                t[1] ^= 1;
                ASSERT_TRUE(!credential(t));
        }
        ASSERT_TRUE(!hop("Content-Type") && !hop("Hos") && !hop("Hosts") && !hop("") && !credential(""));
        ASSERT_TRUE(!hop("Host\x80") && !hop("H\xcfst"));
}

TESTS_MAIN
