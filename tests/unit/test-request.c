/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* One request's state, the Request (request.h): made fresh for each request of a connection, so that
 * nothing of one answer leaks into the next — pipelined requests answered in order, each with its own
 * framing; a HEAD answer with its length and no body; an answer the host cuts, which ends the client's
 * connection without a clean end while the next connection works; a client that goes away, which ends
 * the host's work. Driven against a fake host on loopback (relay-harness.h). */

#include "modelgated/client/request.h"
#include "relay-harness.h"
#include "tests.h"

#define PROPS_HEAD "HEAD /props?model=m1 HTTP/1.1\r\nHost: {host}\r\n\r\n"
#define PROPS "{\"n_ctx\":4096,\"ok\":1}"
#define PROPS_LENGTH "21"

TEST(a_new_request_is_empty_and_its_end_frees_what_it_holds) {
        Request storage, *req = &storage;

        request_init(req, NULL);
        ASSERT_EQ(req->attempt.mode, MODE_PASS);
        ASSERT_TRUE(!req->attempt.upstream && !req->host && req->method == REQUEST_NO_METHOD && !req->head &&
                    !req->answer.chunked && !req->answer.head_sent);
        ASSERT_TRUE(!req->answer.complete && !req->answer.early && req->answer.status == 0 &&
                    req->answer.bytes == 0);
        ASSERT_TRUE(buffer_is_empty(&req->attempt.held) && buffer_is_empty(&req->attempt.pending));
        /* what a request may still hold when it ends: freed with it (LeakSanitizer watches) */
        req->method = REQUEST_METHOD_UNPARSED;
        ASSERT_STREQ(request_method_name(req), "-");
        req->path = (Span){CHAT, strlen(CHAT)};
        req->model = strdup("h-m1");
        ASSERT_OK(buffer_append_str(&req->attempt.held, "{\"error\":"));
        ASSERT_OK(buffer_append_str(&req->attempt.pending, "POST / HTTP/1.1\r\n"));
        sse_filter_init(&req->attempt.sse, API_ANTHROPIC);
        Buffer out = {};
        ASSERT_OK(
                sse_filter_feed(&req->attempt.sse, "data: {\"a\"", 10, &out)); /* a line held, unfinished */
        ASSERT_TRUE(buffer_is_empty(&out));
        request_done(req);
        /* empty again, for the connection's next request */
        ASSERT_TRUE(req->method == REQUEST_NO_METHOD && !req->path.p && !req->model &&
                    buffer_is_empty(&req->attempt.held) && buffer_is_empty(&req->attempt.pending) &&
                    req->attempt.mode == MODE_PASS);
        ASSERT_TRUE(request_method_name(req) == NULL);
        req->method = HTTP_POST;
        ASSERT_STREQ(request_method_name(req), "POST");
        request_done(req);
        ASSERT_TRUE(req->method == REQUEST_NO_METHOD);
}

TEST(pipelined_requests_are_answered_in_order_each_with_its_own_framing) {
        Harness *h = harness_new("");
        Peer *p = peer_new(h);
        _cleanup_free_ char *stream = with_length("POST " CHAT " HTTP/1.1\r\nHost: gate\r\n", STREAM_BODY);
        _cleanup_free_ char *plain = with_length("POST " MSGS " HTTP/1.1\r\nHost: gate\r\n", PLAIN_BODY);

        /* a stream, a HEAD, and a request the host refuses: in one write */
        peer_send(p, stream);
        peer_send(p, "HEAD /props?model=h-m1 HTTP/1.1\r\nHost: gate\r\n\r\n");
        peer_send(p, plain);
        FakeConn *f = fake_expect_request_with_length(h, "POST " CHAT " HTTP/1.1\r\nHost: {host}\r\n",
                                                      STREAM_TO_HOST);
        fake_send(f, SSE_HEAD);
        fake_send_chunk(f, "data: {\"n\":1}\n\n");
        peer_expect(p, SSE_HEAD_OUT);
        peer_expect_chunk(p, "data: {\"n\":1}\n\n");
        /* the next request waits for this answer's end */
        ASSERT_EQ(harness_queued(h), 0);
        fake_send_chunk(f, "data: [DONE]\n\n");
        fake_send(f, "0\r\n\r\n");
        peer_expect_chunk(p, "data: [DONE]\n\n");
        peer_expect(p, "0\r\n\r\n");

        /* the HEAD: the length the GET would have, no body, and nothing of the stream's chunking */
        f = fake_expect_request(h, PROPS_HEAD);
        fake_send(f, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 4242\r\n\r\n");
        peer_expect(p, "HTTP/1.1 200 OK\r\n" SERVED
                       "Content-Type: application/json\r\nContent-Length: 4242\r\n\r\n");

        /* the refusal: held whole and reworded in the Anthropic shape of its own path */
        f = fake_expect_request_with_length(h, "POST " MSGS " HTTP/1.1\r\nHost: {host}\r\n", PLAIN_TO_HOST);
        fake_send_with_length(f, "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n",
                              "{\"error\":{\"code\":500,\"message\":\"boom\",\"type\":\"server_error\"}}");
        peer_expect_with_length(
                p, "HTTP/1.1 500 Internal Server Error\r\n" SERVED "Content-Type: application/json\r\n",
                "{\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"boom\"}}");
        peer_expect_nothing(p);
        ASSERT_TRUE(!p->eof);
        ASSERT_EQ(harness_queued(h), 0);
        peer_free(p);
        harness_free(h);
}

TEST(a_head_answer_keeps_its_length_and_has_no_body) {
        Harness *h = harness_new("");
        Peer *p = peer_new(h);

        peer_send(p, "HEAD /props?model=h-m1 HTTP/1.1\r\nHost: gate\r\n\r\n");
        FakeConn *f = fake_expect_request(h, PROPS_HEAD);
        fake_send(f, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " PROPS_LENGTH
                     "\r\n\r\n");
        peer_expect(p, "HTTP/1.1 200 OK\r\n" SERVED
                       "Content-Type: application/json\r\nContent-Length: " PROPS_LENGTH "\r\n\r\n");
        peer_expect_nothing(p);

        /* the GET after it on the same connection: its answer begins right after the HEAD's head */
        peer_send(p, "GET /props?model=h-m1 HTTP/1.1\r\nHost: gate\r\n\r\n");
        f = fake_expect_request(h, "GET /props?model=m1 HTTP/1.1\r\nHost: {host}\r\n\r\n");
        fake_send(f, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " PROPS_LENGTH
                     "\r\n\r\n" PROPS);
        peer_expect(p, "HTTP/1.1 200 OK\r\n" SERVED
                       "Content-Type: application/json\r\nContent-Length: " PROPS_LENGTH "\r\n\r\n" PROPS);
        peer_expect_nothing(p);
        ASSERT_TRUE(!p->eof);
        peer_free(p);
        harness_free(h);
}

/* After a cut, a new connection's request is answered whole: nothing of the cut one is left */
static void next_connection_works(Harness *h) {
        Peer *p = peer_new(h);

        peer_send_request(p, "POST", CHAT, "1.1", "", PLAIN_BODY);
        FakeConn *f = fake_expect_request_with_length(h, TO_HOST(CHAT), PLAIN_TO_HOST);
        fake_send_with_length(f, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n", "{\"ok\":2}");
        peer_expect_with_length(p, "HTTP/1.1 200 OK\r\n" SERVED "Content-Type: application/json\r\n",
                                "{\"ok\":2}");
        peer_expect_nothing(p);
        ASSERT_TRUE(!p->eof);
        peer_free(p);
}

TEST(a_host_that_closes_mid_body_cuts_the_clients_answer) {
        Harness *h = harness_new("");
        Peer *p = peer_new(h);

        /* chunked: the client's answer ends without its last chunk */
        peer_send_request(p, "POST", CHAT, "1.1", "", PLAIN_BODY);
        FakeConn *f = fake_expect_request_with_length(h, TO_HOST(CHAT), PLAIN_TO_HOST);
        fake_send(f, "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: "
                     "chunked\r\n\r\n");
        fake_send_chunk(f, "{\"n\":1}\n");
        peer_expect(p, "HTTP/1.1 200 OK\r\n" SERVED "Content-Type: application/x-ndjson\r\n"
                       "Transfer-Encoding: chunked\r\n\r\n");
        peer_expect_chunk(p, "{\"n\":1}\n");
        fake_close(f);
        peer_expect_eof(p);
        peer_free(p);
        next_connection_works(h);

        /* with a length: the connection ends before the length is reached */
        p = peer_new(h);
        peer_send_request(p, "POST", CHAT, "1.1", "", PLAIN_BODY);
        f = fake_expect_request_with_length(h, TO_HOST(CHAT), PLAIN_TO_HOST);
        fake_send(f,
                  "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 20\r\n\r\n{\"ok\"");
        peer_expect(p, "HTTP/1.1 200 OK\r\n" SERVED
                       "Content-Type: application/json\r\nContent-Length: 20\r\n\r\n"
                       "{\"ok\"");
        fake_close(f);
        peer_expect_eof(p);
        peer_free(p);
        next_connection_works(h);
        harness_free(h);
}

TEST(a_stream_the_host_cuts_ends_with_an_error_event_and_the_connection_goes_on) {
        Harness *h = harness_new("");
        Peer *p = peer_new(h);

        peer_send_request(p, "POST", CHAT, "1.1", "", STREAM_BODY);
        FakeConn *f = fake_expect_request_with_length(h, TO_HOST(CHAT), STREAM_TO_HOST);
        fake_send(f, SSE_HEAD);
        fake_send_chunk(f, "data: {\"n\":1}\n\n");
        peer_expect(p, SSE_HEAD_OUT);
        peer_expect_chunk(p, "data: {\"n\":1}\n\n");
        fake_close(f);
        /* rule:cut-stream: an event stream can say it was cut, in the API's shape, and then end cleanly */
        peer_expect_chunk(p, "data: {\"error\":{\"message\":\"host 'h' stopped the stream before it ended "
                             "(connection closed before the response ended); the answer is incomplete\","
                             "\"type\":\"server_error\",\"code\":\"upstream_incomplete\"}}\n\n");
        peer_expect(p, "0\r\n\r\n");
        peer_expect_nothing(p);
        ASSERT_TRUE(!p->eof);

        /* the same connection's next request: a fresh request, with a length and no chunking */
        peer_send_request(p, "POST", CHAT, "1.1", "", PLAIN_BODY);
        f = fake_expect_request_with_length(h, TO_HOST(CHAT), PLAIN_TO_HOST);
        fake_send_with_length(f, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n", "{\"ok\":1}");
        peer_expect_with_length(p, "HTTP/1.1 200 OK\r\n" SERVED "Content-Type: application/json\r\n",
                                "{\"ok\":1}");
        peer_expect_nothing(p);
        peer_free(p);
        harness_free(h);
}

TEST(a_client_that_goes_away_ends_the_hosts_work) {
        Harness *h = harness_new("");
        Peer *p = peer_new(h);

        peer_send_request(p, "POST", CHAT, "1.1", "", STREAM_BODY);
        FakeConn *f = fake_expect_request_with_length(h, TO_HOST(CHAT), STREAM_TO_HOST);
        fake_send(f, SSE_HEAD);
        fake_send_chunk(f, "data: {\"n\":1}\n\n");
        peer_expect(p, SSE_HEAD_OUT);
        peer_expect_chunk(p, "data: {\"n\":1}\n\n");
        peer_free(p);
        /* the host's connection is closed, so the GPU stops working for nobody */
        fake_expect_eof(f);
        next_connection_works(h);
        harness_free(h);
}

TESTS_MAIN
