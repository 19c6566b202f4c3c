/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The host's answer relayed to the client (client-relay.c), byte for byte, against a fake host on loopback
 * (relay-harness.h): pass-through with its length, hop-by-hop headers dropped and X-Modelgate-Served-By
 * added (rule:hop-by-hop, rule:served-by); event streams chunked to HTTP/1.1 clients and up to the close for
 * HTTP/1.0; error events of a stream and whole error answers reworded in the client's API shape
 * (rule:reword-context, rule:reword-anthropic, rule:error-event). */

#include "relay-harness.h"
#include "tests.h"

/* llama.cpp's context overflow, as an answer or a stream's event (shared/llama-server-api.md) */
#define OVERFLOW_ERROR                                                                                      \
        "{\"code\":400,\"message\":\"request (4100 tokens) exceeds the available context size (4096 "       \
        "tokens), try increasing it\",\"type\":\"exceed_context_size_error\",\"n_prompt_tokens\":4100,"     \
        "\"n_ctx\":4096}"
#define TOO_LONG "prompt is too long: 4100 tokens > 4096 maximum"
#define OPENAI_TOO_LONG                                                                                     \
        "{\"error\":{\"message\":\"" TOO_LONG "\",\"type\":\"invalid_request_error\",\"param\":"            \
        "\"messages\",\"code\":\"context_length_exceeded\",\"n_prompt_tokens\":4100,\"n_ctx\":4096}}"
#define ANTHROPIC_TOO_LONG                                                                                  \
        "{\"type\":\"error\",\"error\":{\"message\":\"" TOO_LONG "\",\"type\":\"invalid_request_error\"}}"

TEST(a_json_answer_passes_through_with_its_length_and_end_to_end_headers) {
        Harness *h = harness_new("");
        Peer *p = peer_new(h);

        /* credentials and what the client's Connection: names stay here; only the model is renamed */
        peer_send_request(p, "POST", CHAT, "1.1",
                          "User-Agent: t/1\r\nAuthorization: Bearer s3cret\r\nConnection: keep-alive, "
                          "X-Private\r\nX-Private: p\r\nX-Request-Id: c-1\r\n",
                          "{\"model\":\"h-m1\",\"messages\":[],\"note\":\"h-m1\"}");
        /* rule:request-id: the client's sane id goes on to the host, and comes back in the answer in
         * place of the host's own */
        FakeConn *f = fake_expect_request_with_length(
                h,
                "POST " CHAT " HTTP/1.1\r\nHost: {host}\r\nUser-Agent: t/1\r\nContent-Type: "
                "application/json\r\nX-Request-Id: c-1\r\n",
                "{\"model\":\"m1\",\"messages\":[],\"note\":\"h-m1\"}");

        /* the answer in two pieces: each goes on as it comes */
        fake_send(f, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close, X-Hop\r\n"
                     "Keep-Alive: timeout=5\r\nX-Hop: private\r\nX-Request-Id: r1\r\nContent-Length: 24\r\n"
                     "\r\n{\"id\":\"r1\",");
        peer_expect(p, "HTTP/1.1 200 OK\r\n" SERVED "X-Request-Id: c-1\r\nContent-Type: application/json\r\n"
                       "Content-Length: 24\r\n\r\n{\"id\":\"r1\",");
        fake_send(f, "\"choices\":[]}");
        peer_expect(p, "\"choices\":[]}");
        fake_close(f);
        /* the host's close is its own: the client's connection stays for its next request */
        peer_expect_nothing(p);
        ASSERT_TRUE(!p->eof);
        peer_free(p);
        harness_free(h);
}

TEST(a_chunked_event_stream_is_chunked_again_for_http11) {
        Harness *h = harness_new("");
        Peer *p = peer_new(h);

        peer_send_request(p, "POST", CHAT, "1.1", "", STREAM_BODY);
        FakeConn *f = fake_expect_request_with_length(h, TO_HOST(CHAT), STREAM_TO_HOST);
        fake_send(f, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                     "Keep-Alive: timeout=5\r\nTransfer-Encoding: chunked\r\n\r\n");
        /* modelgate's framing, once; the host's Transfer-Encoding and Keep-Alive stop at its hop */
        peer_expect(p, "HTTP/1.1 200 OK\r\n" SERVED "Content-Type: text/event-stream\r\n"
                       "Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n");
        fake_send_chunk(f, "data: {\"n\":1}\n\n");
        peer_expect_chunk(p, "data: {\"n\":1}\n\n");
        /* a line split across the host's chunks goes on whole */
        fake_send_chunk(f, "data: {\"n\"");
        fake_send_chunk(f, ":2}\n\n");
        peer_expect_chunk(p, "data: {\"n\":2}\n\n");
        fake_send_chunk(f, "data: [DONE]\n\n");
        fake_send(f, "0\r\n\r\n");
        peer_expect_chunk(p, "data: [DONE]\n\n");
        peer_expect(p, "0\r\n\r\n");
        peer_expect_nothing(p);
        ASSERT_TRUE(!p->eof);
        peer_free(p);
        harness_free(h);
}

/* A plain request whose host answers with a chunked head and 'first' (the client has the head then) */
static FakeConn *chunked_answer(Harness *h, Peer *p, const char *first) {
        peer_send_request(p, "POST", CHAT, "1.1", "", PLAIN_BODY);
        FakeConn *f = fake_expect_request_with_length(h, TO_HOST(CHAT), PLAIN_TO_HOST);
        fake_send(f,
                  "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n");
        fake_send(f, first);
        peer_expect(p, "HTTP/1.1 200 OK\r\n" SERVED "Content-Type: application/json\r\n"
                       "Transfer-Encoding: chunked\r\n\r\n");
        return f;
}

TEST(a_hosts_chunk_not_ended_by_crlf_is_a_malformed_answer_even_across_reads) {
        Harness *h = harness_new("");

        /* "XX" where CRLF must be (llhttp skips any two bytes): the head is out, so the answer is cut */
        Peer *p = peer_new(h);
        (void)chunked_answer(h, p, "5\r\nhelloXX0\r\n\r\n");
        peer_expect_eof(p);
        peer_free(p);

        /* the CR in one read, a wrong byte at the start of the next */
        p = peer_new(h);
        FakeConn *f = chunked_answer(h, p, "2\r\n{}\r");
        peer_expect_chunk(p, "{}");
        fake_send(f, "X0\r\n\r\n");
        peer_expect_eof(p);
        peer_free(p);

        /* and a right one split the same way goes on to its end */
        p = peer_new(h);
        f = chunked_answer(h, p, "2\r\n{}\r");
        peer_expect_chunk(p, "{}");
        fake_send(f, "\n0\r\n\r\n");
        peer_expect(p, "0\r\n\r\n");
        ASSERT_TRUE(!p->eof);
        peer_free(p);
        harness_free(h);
}

TEST(an_event_stream_goes_to_an_http10_client_up_to_the_close) {
        Harness *h = harness_new("");
        Peer *p = peer_new(h);

        peer_send_request(p, "POST", CHAT, "1.0", "", STREAM_BODY);
        /* the host is asked in HTTP/1.1 whatever the client speaks */
        FakeConn *f = fake_expect_request_with_length(h, TO_HOST(CHAT), STREAM_TO_HOST);
        fake_send(f, SSE_HEAD);
        peer_expect(p, "HTTP/1.1 200 OK\r\n" SERVED
                       "Content-Type: text/event-stream\r\nConnection: close\r\n\r\n");
        fake_send_chunk(f, "data: {\"n\":1}\n\n");
        peer_expect(p, "data: {\"n\":1}\n\n");
        fake_send_chunk(f, "data: [DONE]\n\n");
        fake_send(f, "0\r\n\r\n");
        peer_expect(p, "data: [DONE]\n\n");
        /* no chunk framing: the end of the connection is the end of the answer */
        peer_expect_eof(p);
        peer_free(p);
        harness_free(h);
}

static FakeConn *expect_request_for(Harness *h, const char *path, const char *body) {
        char head[128];
        snprintf(head, sizeof(head),
                 "POST %s HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n", path);
        return fake_expect_request_with_length(h, head, body);
}

/* A stream whose second event is 'event' from the host; 'expected': what the client gets of it */
static void stream_error_case(const char *path, const char *event, const char *expected) {
        Harness *h = harness_new("");
        Peer *p = peer_new(h);

        peer_send_request(p, "POST", path, "1.1", "", STREAM_BODY);
        FakeConn *f = expect_request_for(h, path, STREAM_TO_HOST);
        fake_send(f, SSE_HEAD);
        peer_expect(p, SSE_HEAD_OUT);
        fake_send_chunk(f, "data: {\"n\":1}\n\n");
        peer_expect_chunk(p, "data: {\"n\":1}\n\n");
        fake_send_chunk(f, event);
        peer_expect_chunk(p, expected);
        fake_send(f, "0\r\n\r\n");
        peer_expect(p, "0\r\n\r\n");
        peer_expect_nothing(p);
        peer_free(p);
        harness_free(h);
}

TEST(stream_error_events_are_reworded_in_the_clients_api_shape) {
        /* OpenAI: the context overflow becomes the words coding agents compact on */
        stream_error_case(CHAT, "data: {\"error\":" OVERFLOW_ERROR "}\n\n", "data: " OPENAI_TOO_LONG "\n\n");
        /* OpenAI: any other error event is OpenAI's shape already, and passes as it is */
        stream_error_case(CHAT,
                          "data: {\"error\":{\"code\":500,\"message\":\"generation failed\",\"type\":"
                          "\"server_error\"}}\n\n",
                          "data: {\"error\":{\"code\":500,\"message\":\"generation failed\",\"type\":"
                          "\"server_error\"}}\n\n");
        /* Anthropic: llama.cpp's bare error is wrapped in Anthropic's shape */
        stream_error_case(MSGS,
                          "event: error\ndata: {\"code\":500,\"message\":\"generation failed\",\"type\":"
                          "\"server_error\"}\n\n",
                          "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\","
                          "\"message\":\"generation failed\"}}\n\n");
        stream_error_case(MSGS, "event: error\ndata: " OVERFLOW_ERROR "\n\n",
                          "event: error\ndata: " ANTHROPIC_TOO_LONG "\n\n");
        /* Responses: llama.cpp's unnamed error line becomes the API's own event, with Codex's code */
        stream_error_case(
                RESPONSES, "data: {\"error\":" OVERFLOW_ERROR "}\n\n",
                "event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"object\":"
                "\"response\",\"status\":\"failed\",\"error\":{\"code\":\"context_length_exceeded\","
                "\"message\":\"" TOO_LONG "\"}}}\n\n");
}

/* The host answers 'answer' (its last 10 bytes later than the rest): nothing reaches the client before the
 * whole body is in, then it gets expected_head, a Content-Length, and expected_body */
static void held_error_case(const char *path, bool stream, const char *answer, const char *expected_head,
                            const char *expected_body) {
        Harness *h = harness_new("");
        Peer *p = peer_new(h);
        size_t n = strlen(answer);

        peer_send_request(p, "POST", path, "1.1", "", stream ? STREAM_BODY : PLAIN_BODY);
        FakeConn *f = expect_request_for(h, path, stream ? STREAM_TO_HOST : PLAIN_TO_HOST);
        _cleanup_free_ char *start = strndup(answer, n - 10);
        fake_send(f, start);
        peer_expect_nothing(p);
        fake_send(f, answer + n - 10);
        peer_expect_with_length(p, expected_head, expected_body);
        peer_expect_nothing(p);
        ASSERT_TRUE(!p->eof);
        peer_free(p);
        harness_free(h);
}

TEST(error_answers_are_held_whole_and_reworded) {
        _cleanup_free_ char *overflow =
                with_length("HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n",
                            "{\"error\":" OVERFLOW_ERROR "}");

        /* a stream refused before it began: llama.cpp's first error is JSON (rule:reword-context) */
        held_error_case(CHAT, true, overflow,
                        "HTTP/1.1 400 Bad Request\r\n" SERVED "Content-Type: application/json\r\n",
                        OPENAI_TOO_LONG);
        held_error_case(MSGS, true, overflow,
                        "HTTP/1.1 400 Bad Request\r\n" SERVED "Content-Type: application/json\r\n",
                        ANTHROPIC_TOO_LONG);
        /* the Responses API answers HTTP errors in OpenAI's shape; its prompt is "input" */
        held_error_case(
                RESPONSES, true, overflow,
                "HTTP/1.1 400 Bad Request\r\n" SERVED "Content-Type: application/json\r\n",
                "{\"error\":{\"message\":\"" TOO_LONG "\",\"type\":\"invalid_request_error\",\"param\":"
                "\"input\",\"code\":\"context_length_exceeded\",\"n_prompt_tokens\":4100,\"n_ctx\":4096}}");
        /* a chunked llama.cpp error in Anthropic's shape, framed by its length */
        held_error_case(
                MSGS, false,
                "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
                "Transfer-Encoding: chunked\r\n\r\n"
                "36\r\n{\"error\":{\"code\":500,\"message\":\"model failed to load\",\r\n"
                "17\r\n\"type\":\"server_error\"}}\r\n0\r\n\r\n",
                "HTTP/1.1 500 Internal Server Error\r\n" SERVED "Content-Type: application/json\r\n",
                "{\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"model failed to "
                "load\"}}");
        /* on the OpenAI API that error is in its shape already; a body that is not JSON stays as it is */
        held_error_case(
                CHAT, false,
                "HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/plain\r\nContent-Length: 31\r\n"
                "\r\nproxy error: connection refused",
                "HTTP/1.1 500 Internal Server Error\r\n" SERVED "Content-Type: text/plain\r\n",
                "proxy error: connection refused");
}

TEST(an_unknown_key_of_a_known_host_is_404_without_asking_the_host) {
        Harness *h = harness_new("");
        Peer *p = peer_new(h);
        static const char head[] = "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n";
/* rule:unlisted-key-404: the host's list is known, and does not have the key */
#define NOT_LISTED "host 'h' does not list a model 'nope'; GET /v1/models lists the models this proxy serves"

        peer_send_request(p, "POST", CHAT, "1.1", "", "{\"model\":\"h-nope\"}");
        peer_expect_with_length(p, head,
                                "{\"error\":{\"message\":\"" NOT_LISTED "\",\"type\":\"not_found_error\","
                                "\"code\":\"model_not_found\"}}");
        /* the same connection goes on, and the next error is in that request's API shape */
        peer_send_request(p, "POST", MSGS, "1.1", "", "{\"model\":\"h-nope\"}");
        peer_expect_with_length(p, head,
                                "{\"type\":\"error\",\"error\":{\"message\":\"" NOT_LISTED "\",\"type\":"
                                "\"not_found_error\"}}");
        peer_expect_nothing(p);
        ASSERT_EQ(harness_queued(h), 0);
        peer_free(p);
        harness_free(h);
}

TESTS_MAIN
