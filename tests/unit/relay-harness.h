/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* modelgate in one process, for the tests of the client side (the Request and the relay): a Manager
 * with one [Host] "h" (no [Engine], so no bus) whose URL is a fake host this harness listens for on
 * loopback, a ClientSet, and client connections that are socketpairs. The fake host answers its
 * catalog by itself (GET /models lists "m1"; GET /models/sse is accepted and held open); every other
 * request waits in a queue for the test, which writes the answer piece by piece. Every wait drives the
 * one sd_event loop until a condition holds, and fails the test after a deadline: no sleeps. */

#include <stdbool.h>
#include <systemd/sd-event.h>

#include "shared/buffer.h"

/* What the tests ask and the fake host answers: the API paths, a streamed and a plain request body as the
 * client sends it and as the host gets it, and the head the relay makes of an event stream. */
#define CHAT "/v1/chat/completions"
#define MSGS "/v1/messages"
#define RESPONSES "/v1/responses"
#define SERVED "X-Modelgate-Served-By: h\r\n"
#define TO_HOST(path) "POST " path " HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
#define SSE_HEAD "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
#define STREAM_BODY "{\"model\":\"h-m1\",\"stream\":true,\"messages\":[]}"
#define STREAM_TO_HOST "{\"model\":\"m1\",\"stream\":true,\"messages\":[]}"
#define PLAIN_BODY "{\"model\":\"h-m1\",\"max_tokens\":5,\"messages\":[]}"
#define PLAIN_TO_HOST "{\"model\":\"m1\",\"max_tokens\":5,\"messages\":[]}"
#define SSE_HEAD_OUT                                                                                        \
        "HTTP/1.1 200 OK\r\n" SERVED "Content-Type: text/event-stream\r\nTransfer-Encoding: "               \
        "chunked\r\n\r\n"

typedef struct Harness Harness;

/* Where a test called an expectation from, for its failure message: each expectation is a macro that
 * passes HERE to its _at() function */
typedef struct Where {
        const char *file;
        int line;
} Where;
#define HERE ((Where){__FILE__, __LINE__})

/* One connection modelgate opened to the fake host */
typedef struct FakeConn {
        Harness *h;
        int fd;
        sd_event_source *io;
        Buffer in;
        bool eof; /* modelgate closed (or cancelled) it */
} FakeConn;

/* The test's end of one client connection */
typedef struct Peer {
        Harness *h;
        int fd;
        sd_event_source *io;
        Buffer in; /* received, not yet checked */
        bool eof;
} Peer;

/* head + "Content-Length: <body's length>\r\n\r\n" + body, malloc'ed */
char *with_length(const char *head, const char *body);

/* extra: more of modelgate.conf after the [Host] ("" for none) */
Harness *harness_new(const char *extra);
void harness_free(Harness *h);
/* The Manager inside, for a test that looks at what it keeps (the callers' counts) */
typedef struct Manager Manager;
Manager *harness_manager(Harness *h);
/* Runs the loop until done(arg), failing after the deadline with 'what'. */
void harness_run_until(Where w, Harness *h, bool (*done)(void *arg), void *arg, const char *what);
/* The requests modelgate has sent on (the catalog's aside) that no fake_expect_request() took yet */
size_t harness_queued(Harness *h);
/* Frees the fake host's connections that are closed (either way) and hold no queued request: for a
 * fuzzer's thousands of runs on one harness. Their FakeConn pointers are gone afterwards. */
void harness_reap(Harness *h);

Peer *peer_new(Harness *h);
void peer_free(Peer *p);
void peer_send(Peer *p, const char *s);
/* A request with the right Content-Length; version "1.1" or "1.0"; extra: header lines ("" for none) */
void peer_send_request(Peer *p, const char *method, const char *target, const char *version,
                       const char *extra, const char *body);
/* Waits for these exact bytes as the next ones, and takes them (fails at once on the first difference) */
void peer_expect_at(Where w, Peer *p, const char *bytes);
#define peer_expect(p, bytes) peer_expect_at(HERE, p, bytes)
/* The same for one chunk of a chunked body */
void peer_expect_chunk_at(Where w, Peer *p, const char *data);
#define peer_expect_chunk(p, data) peer_expect_chunk_at(HERE, p, data)
/* head (its lines, without the blank line) with "Content-Length: <body's>", the blank line and body */
void peer_expect_with_length_at(Where w, Peer *p, const char *head, const char *body);
#define peer_expect_with_length(p, head, body) peer_expect_with_length_at(HERE, p, head, body)
/* Waits for the end of the connection, with nothing before it that was not expected */
void peer_expect_eof_at(Where w, Peer *p);
#define peer_expect_eof(p) peer_expect_eof_at(HERE, p)
/* Nothing unexpected has arrived (checked after the loop has nothing left to do now) */
void peer_expect_nothing_at(Where w, Peer *p);
#define peer_expect_nothing(p) peer_expect_nothing_at(HERE, p)

/* Waits for the next request modelgate sends the fake host, and checks its exact bytes; "{host}" in
 * expected stands for the fake host's address. Returns the connection it came on. */
FakeConn *fake_expect_request_at(Where w, Harness *h, const char *expected);
#define fake_expect_request(h, expected) fake_expect_request_at(HERE, h, expected)
/* The same for head (its lines, without the blank line), "Content-Length: <body's>", and body */
FakeConn *fake_expect_request_with_length_at(Where w, Harness *h, const char *head, const char *body);
#define fake_expect_request_with_length(h, head, body)                                                      \
        fake_expect_request_with_length_at(HERE, h, head, body)
/* Waits for the next request modelgate sends the fake host, whatever it is */
FakeConn *fake_take_request_at(Where w, Harness *h);
#define fake_take_request(h) fake_take_request_at(HERE, h)
void fake_send(FakeConn *f, const char *s);
/* Bytes that may hold NULs (at most what a socket buffer takes: the fake host never waits) */
void fake_send_bytes(FakeConn *f, const void *p, size_t n);
void fake_send_with_length(FakeConn *f, const char *head, const char *body);
void fake_send_chunk(FakeConn *f, const char *data);
/* The host closes the connection */
void fake_close(FakeConn *f);
/* Waits until modelgate has closed this connection (it gave up on the host's answer) */
void fake_expect_eof_at(Where w, FakeConn *f);
#define fake_expect_eof(f) fake_expect_eof_at(HERE, f)
