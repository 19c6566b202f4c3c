/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A host's answer, whatever its bytes: modelgate in one process (tests/unit/relay-harness.h), a client
 * that sends a request for the host and a pipelined GET /health on one connection, and a fake host that
 * answers the first with the input and closes. The invariant: the client's connection carries
 * well-framed HTTP/1.1 responses (interim 1xx aside), never more than one per request; the request's
 * answer is whole, or cut (the connection ends inside it); and when the first answer is whole and the
 * connection goes on, the second is /health's own. A host can never put a response of its own making
 * in front of another request's.
 *
 * The first input byte picks the request (streamed or not, chat or messages, HEAD); the rest is what
 * the host sends, at most 48 KiB (a socket buffer: the fake host never waits). */

#include <assert.h>
#include <llhttp.h>
#include <stdint.h>
#include <string.h>

#include "unit/relay-harness.h"
#include "tests.h"

#define MAX_ANSWER (48 * 1024)

typedef struct Count {
        unsigned begun, complete;
        int status[8];
        bool interim; /* the message being parsed is a 1xx */
        Buffer body;  /* of the second final response */
        unsigned body_of;
} Count;

static int on_begin(llhttp_t *l) {
        Count *c = l->data;
        c->begun++;
        return 0;
}

static int on_headers(llhttp_t *l) {
        Count *c = l->data;
        c->interim = l->status_code >= 100 && l->status_code < 200;
        if (c->interim)
                return 1; /* a 1xx has no content */
        if (c->complete < 8)
                c->status[c->complete] = l->status_code;
        return c->complete == 0 && l->method == HTTP_HEAD ? 1 : 0;
}

static int on_body(llhttp_t *l, const char *at, size_t n) {
        Count *c = l->data;
        if (c->complete == 1)
                assert(buffer_append(&c->body, at, n) >= 0);
        return 0;
}

static int on_complete(llhttp_t *l) {
        Count *c = l->data;
        if (c->interim) {
                c->begun--;
                c->interim = false;
                return 0;
        }
        c->complete++;
        return 0;
}

static const llhttp_settings_t settings = {
        .on_message_begin = on_begin,
        .on_headers_complete = on_headers,
        .on_body = on_body,
        .on_message_complete = on_complete,
};

/* The client's bytes so far as responses, from the start; the first answers a HEAD when head is set */
static llhttp_errno_t parse(const Peer *p, bool head, Count *count, const char **reason) {
        llhttp_t parser;

        buffer_done(&count->body);
        *count = (Count){};
        llhttp_init(&parser, HTTP_RESPONSE, &settings);
        parser.data = count;
        parser.method = head ? HTTP_HEAD : HTTP_POST;
        llhttp_errno_t e = llhttp_execute(&parser, buffer_peek(&p->in), buffer_size(&p->in));
        *reason = llhttp_get_error_reason(&parser);
        return e;
}

typedef struct Wait {
        Peer *p;
        bool head;
} Wait;

/* Both answers are in, or the connection ended (or what came is malformed already) */
static bool settled(void *arg) {
        Wait *w = arg;
        Count count = {};
        const char *reason;
        bool done = w->p->eof || parse(w->p, w->head, &count, &reason) != HPE_OK || count.complete >= 2;
        buffer_done(&count.body);
        return done;
}

static Harness *harness;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static const char *const bodies[] = {STREAM_BODY, PLAIN_BODY};
        bool head;
        const char *path;
        Count count = {};

        if (size < 1 || size > MAX_ANSWER + 1)
                return 0;
        if (!harness)
                harness = harness_new("[Proxy]\nUpstreamIdleTimeoutSec=5s\n");
        head = (data[0] & 4) != 0;
        path = data[0] & 2 ? MSGS : CHAT;

        Peer *p = peer_new(harness);
        peer_send_request(p, head ? "HEAD" : "POST", path, "1.1", "", bodies[data[0] & 1]);
        peer_send(p, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
        FakeConn *f = fake_take_request(harness);
        fake_send_bytes(f, data + 1, size - 1);
        fake_close(f);
        harness_run_until(HERE, harness, settled, &(Wait){p, head}, "the client's answers");

        const char *reason;
        if (parse(p, head, &count, &reason) != HPE_OK) {
                fprintf(stderr, "the client got a malformed stream of responses: %s\n%.*s\n", reason,
                        (int)buffer_size(&p->in), buffer_peek(&p->in));
                abort();
        }
        /* never more answers than requests */
        assert(count.complete <= 2 && count.begun <= 2);
        if (!p->eof) {
                /* the connection goes on: both answers are whole, and the second is /health's */
                assert(count.complete == 2);
                assert(count.status[1] == 200);
                assert(memmem(buffer_peek(&count.body), buffer_size(&count.body), "\"status\":\"ok\"", 13));
        } else if (count.complete == 2)
                assert(count.status[1] == 200);
        buffer_done(&count.body);
        peer_free(p);
        /* what a cut or a pooled connection left is gone before the next input */
        while (harness_queued(harness) > 0)
                fake_close(fake_take_request(harness));
        harness_reap(harness);
        return 0;
}
