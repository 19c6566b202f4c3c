/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The response parser (upstream-response.c) against what llhttp made of the same bytes before it, with
 * the callbacks modelgate gave llhttp then (kept here as the reference): the same status, headers, framing
 * and keep-alive handed to the owner, the same body bytes, the same end (complete after as many bytes,
 * malformed, or waiting for more, and what the close makes of it). Some responses split at every byte
 * offset, many mutated ones split at random places; and the refusals that are modelgate's own beyond
 * llhttp's (the CRLF after a chunk's data). */

#include <assert.h>
#include <llhttp.h>

#include "modelgated/upstream/upstream-internal.h"
#include "tests.h"

typedef struct Outcome {
        int end;           /* 1 complete, -1 refused, 0 waiting for more */
        bool eof_complete; /* when waiting: the close ends the response */
        size_t used;       /* when complete: of all the bytes */
        unsigned n_heads;  /* on_headers calls */
        int status;
        bool chunked, has_content_length, keep_alive_head, keep_alive;
        uint64_t content_length;
        Buffer head; /* "name\0value\0" of each header, as on_headers saw them */
        Buffer body;
        bool in_line; /* ours, waiting: inside a line of the head, a chunk's size or the trailers */
} Outcome;

static void outcome_done(Outcome *o) {
        buffer_done(&o->head);
        buffer_done(&o->body);
}

static int record_headers(Outcome *o, const UpstreamResponse *r) {
        o->n_heads++;
        o->status = r->status;
        o->chunked = r->chunked;
        o->has_content_length = r->has_content_length;
        o->content_length = r->content_length;
        o->keep_alive_head = r->keep_alive;
        for (size_t i = 0; i < r->n_headers; i++) {
                Span n = upstream_response_header_name(r, i), v = upstream_response_header_value(r, i);
                assert(buffer_append(&o->head, n.p, n.n) >= 0 && buffer_append(&o->head, "", 1) >= 0);
                assert(buffer_append(&o->head, v.p, v.n) >= 0 && buffer_append(&o->head, "", 1) >= 0);
        }
        return 0;
}

/* The reference: llhttp and the callbacks upstream-response.c had for it */
typedef struct Ref {
        llhttp_t parser;
        UpstreamResponse resp;
        bool in_value, head_request, complete;
        uint64_t chunk_left;
        unsigned crlf_left, n_interim;
        const char *exec_end;
        int cancel_error;
        Outcome *out;
} Ref;

static int ref_begin(llhttp_t *l) {
        Ref *u = l->data;
        buffer_clear(&u->resp.head);
        u->resp.n_headers = 0;
        u->in_value = false;
        u->chunk_left = u->crlf_left = 0;
        return 0;
}

static int ref_field(llhttp_t *l, const char *at, size_t n) {
        Ref *u = l->data;
        UpstreamResponse *r = &u->resp;
        if (buffer_size(&r->head) + n > 256 * 1024)
                return -1;
        if (r->n_headers == 0 || u->in_value) {
                if (http_header_table_add(&r->headers, &r->n_headers, &r->n_headers_alloc, 1024,
                                          buffer_size(&r->head)) < 0)
                        return -1;
                u->in_value = false;
        }
        assert(buffer_append(&r->head, at, n) >= 0);
        r->headers[r->n_headers - 1].name_len += n;
        return 0;
}

static int ref_field_complete(llhttp_t *l) {
        Ref *u = l->data;
        u->resp.headers[u->resp.n_headers - 1].value = buffer_size(&u->resp.head);
        u->in_value = true;
        return 0;
}

static int ref_value(llhttp_t *l, const char *at, size_t n) {
        Ref *u = l->data;
        UpstreamResponse *r = &u->resp;
        if (buffer_size(&r->head) + n > 256 * 1024)
                return -1;
        assert(buffer_append(&r->head, at, n) >= 0);
        r->headers[r->n_headers - 1].value_len += n;
        return 0;
}

static int ref_headers_complete(llhttp_t *l) {
        Ref *u = l->data;
        UpstreamResponse *r = &u->resp;
        r->status = l->status_code;
        if (r->status == 101) {
                u->cancel_error = -EPROTO;
                return -1;
        }
        if (r->status >= 100 && r->status < 200)
                return 1;
        r->chunked = (l->flags & F_CHUNKED) != 0;
        r->has_content_length = (l->flags & F_CONTENT_LENGTH) != 0;
        r->content_length = l->content_length;
        r->keep_alive = llhttp_should_keep_alive(l);
        record_headers(u->out, r);
        if (u->head_request || r->status == 204 || r->status == 304)
                return 1;
        return 0;
}

static int ref_chunk_header(llhttp_t *l) {
        Ref *u = l->data;
        u->chunk_left = l->content_length;
        return 0;
}

static int ref_check_chunk_end(Ref *u, const char *p, const char *end) {
        for (; u->crlf_left > 0 && p < end; p++, u->crlf_left--)
                if (*p != "\r\n"[2 - u->crlf_left]) {
                        u->cancel_error = -EPROTO;
                        return -1;
                }
        return 0;
}

static int ref_body(llhttp_t *l, const char *at, size_t n) {
        Ref *u = l->data;
        if (u->resp.chunked && u->chunk_left > 0) {
                u->chunk_left -= MIN((uint64_t)n, u->chunk_left);
                if (u->chunk_left == 0) {
                        u->crlf_left = 2;
                        if (ref_check_chunk_end(u, at + n, u->exec_end) < 0)
                                return -1;
                }
        }
        assert(buffer_append(&u->out->body, at, n) >= 0);
        return 0;
}

static int ref_message_complete(llhttp_t *l) {
        Ref *u = l->data;
        if (u->resp.status >= 100 && u->resp.status < 200) {
                if (++u->n_interim > UPSTREAM_INTERIM_MAX) {
                        u->cancel_error = -EPROTO;
                        return -1;
                }
                return 0;
        }
        u->complete = true;
        u->resp.keep_alive = llhttp_should_keep_alive(l);
        return HPE_PAUSED;
}

static const llhttp_settings_t ref_settings = {
        .on_message_begin = ref_begin,
        .on_header_field = ref_field,
        .on_header_field_complete = ref_field_complete,
        .on_header_value = ref_value,
        .on_headers_complete = ref_headers_complete,
        .on_chunk_header = ref_chunk_header,
        .on_body = ref_body,
        .on_message_complete = ref_message_complete,
};

/* data in pieces ending at cuts[] (ascending, the last one n) */
static void ref_run(const char *data, const size_t *cuts, size_t n_cuts, bool head, Outcome *o) {
        Ref u = {.head_request = head, .out = o};
        llhttp_init(&u.parser, HTTP_RESPONSE, &ref_settings);
        u.parser.data = &u;

        size_t at = 0;
        for (size_t i = 0; i < n_cuts; at = cuts[i++]) {
                const char *buf = data + at;
                size_t k = cuts[i] - at;
                if (u.crlf_left > 0 && ref_check_chunk_end(&u, buf, buf + k) < 0) {
                        o->end = -1;
                        goto out;
                }
                u.exec_end = buf + k;
                llhttp_errno_t e = llhttp_execute(&u.parser, buf, k);
                if (u.cancel_error) {
                        o->end = -1;
                        goto out;
                }
                if (e == HPE_PAUSED && u.complete) {
                        o->end = 1;
                        o->used = at + (size_t)(llhttp_get_error_pos(&u.parser) - buf);
                        o->keep_alive = u.resp.keep_alive;
                        goto out;
                }
                if (e != HPE_OK) {
                        o->end = -1;
                        goto out;
                }
        }
        (void)llhttp_finish(&u.parser);
        o->eof_complete = u.complete && !u.cancel_error;
        if (o->eof_complete)
                o->keep_alive = u.resp.keep_alive;
out:
        buffer_done(&u.resp.head);
        free(u.resp.headers);
}

static int on_headers(Upstream *u, const UpstreamResponse *r, void *userdata) {
        return record_headers(userdata, r);
}

static int on_body(Upstream *u, const char *p, size_t n, void *userdata) {
        Outcome *o = userdata;
        assert(buffer_append(&o->body, p, n) >= 0);
        return 0;
}

static const UpstreamCallbacks callbacks = {.on_headers = on_headers, .on_body = on_body};

static void run(const char *data, const size_t *cuts, size_t n_cuts, bool head, Outcome *o) {
        Upstream *u = calloc(1, sizeof(Upstream));
        assert(u);
        u->cb = &callbacks;
        u->userdata = o;
        u->head_request = head;
        upstream_parser_init(u);

        size_t at = 0;
        for (size_t i = 0; i < n_cuts; at = cuts[i++]) {
                size_t used = 0;
                int r = upstream_parse(u, data + at, cuts[i] - at, &used);
                if (u->cancel_error || r < 0) {
                        o->end = -1;
                        goto out;
                }
                if (r > 0) {
                        assert(u->complete);
                        o->end = 1;
                        o->used = at + used;
                        o->keep_alive = u->resp.keep_alive;
                        goto out;
                }
        }
        o->eof_complete = upstream_parse_eof(u) > 0;
        if (o->eof_complete)
                o->keep_alive = u->resp.keep_alive;
        o->in_line = !buffer_is_empty(&u->parse.line);
out:
        buffer_done(&u->resp.head);
        free(u->resp.headers);
        upstream_parser_done(u);
        free(u);
}

static void print_escaped(const char *what, const char *p, size_t n) {
        fprintf(stderr, "%s (%zu bytes): \"", what, n);
        for (size_t i = 0; i < n; i++) {
                unsigned char c = p[i];
                if (c == '\r')
                        fputs("\\r", stderr);
                else if (c == '\n')
                        fputs("\\n", stderr);
                else if (c < ' ' || c >= 0x7f || c == '"' || c == '\\')
                        fprintf(stderr, "\\x%02x", c);
                else
                        fputc(c, stderr);
        }
        fputs("\"\n", stderr);
}

static void print_outcome(const char *who, const Outcome *o) {
        fprintf(stderr,
                "%s: end %d eof_complete %d used %zu heads %u status %d chunked %d has_cl %d cl %" PRIu64
                " keep_alive %d/%d\n",
                who, o->end, o->eof_complete, o->used, o->n_heads, o->status, o->chunked,
                o->has_content_length, o->content_length, o->keep_alive_head, o->keep_alive);
        print_escaped("  head", buffer_peek(&o->head), buffer_size(&o->head));
        print_escaped("  body", buffer_peek(&o->body), buffer_size(&o->body));
}

static bool same_body(const Outcome *a, const Outcome *b) {
        return buffer_size(&a->body) == buffer_size(&b->body) &&
               memcmp(buffer_peek(&a->body), buffer_peek(&b->body), buffer_size(&a->body)) == 0;
}

static bool same(const Outcome *a, const Outcome *b) {
        return a->end == b->end && a->eof_complete == b->eof_complete && a->used == b->used &&
               a->n_heads == b->n_heads && a->status == b->status && a->chunked == b->chunked &&
               a->has_content_length == b->has_content_length &&
               (!a->has_content_length || a->content_length == b->content_length) &&
               a->keep_alive_head == b->keep_alive_head && a->keep_alive == b->keep_alive &&
               buffer_size(&a->head) == buffer_size(&b->head) &&
               memcmp(buffer_peek(&a->head), buffer_peek(&b->head), buffer_size(&a->head)) == 0 &&
               same_body(a, b);
}

/* What llhttp took and we refuse, on purpose: a header name with a space in it or none (a line with a
 * space or nothing before its colon), and a CR followed by anything but LF where a header's value is
 * empty or a chunk's size line ends (llhttp skipped the byte after it unread) */
static bool refused_on_purpose(const char *data, size_t n) {
        for (size_t i = 0; i < n; i++) {
                if (data[i] == '\r' && i + 1 < n && data[i + 1] != '\n')
                        return true;
                if (i > 0 && data[i - 1] != '\n')
                        continue;
                const char *colon = memchr(data + i, ':', n - i), *lf = memchr(data + i, '\n', n - i);
                if (!colon || (lf && lf < colon))
                        continue;
                if (colon == data + i || memchr(data + i, ' ', (size_t)(colon - data - i)))
                        return true;
        }
        return false;
}

/* ours in these pieces: the same as llhttp's, or refused on purpose */
static Outcome check_cuts(const char *data, size_t n, const size_t *cuts, size_t n_cuts, bool head) {
        Outcome ours = {}, ref = {};
        run(data, cuts, n_cuts, head, &ours);
        ref_run(data, cuts, n_cuts, head, &ref);
        bool ok = same(&ours, &ref) ||
                  (ours.end == -1 && refused_on_purpose(data, n) &&
                   (ref.end != -1 || (buffer_size(&ours.body) <= buffer_size(&ref.body) &&
                                      memcmp(buffer_peek(&ours.body), buffer_peek(&ref.body),
                                             buffer_size(&ours.body)) == 0)));
        if (!ok && ours.end == 0 && !ours.eof_complete && ours.in_line && ref.end == -1) {
                /* llhttp refused inside a line that we refuse at its end: so we do, once it comes */
                char *more = malloc(n + 1);
                assert(more);
                memcpy(more, data, n);
                more[n] = '\n';
                Outcome then = {};
                run(more, (size_t[]){n + 1}, 1, head, &then);
                ok = then.end == -1;
                outcome_done(&then);
                free(more);
        }
        if (!ok) {
                print_escaped("input", data, n);
                fprintf(stderr, "head %d, cuts:", head);
                for (size_t i = 0; i < n_cuts; i++)
                        fprintf(stderr, " %zu", cuts[i]);
                fputc('\n', stderr);
                print_outcome("ours", &ours);
                print_outcome("llhttp", &ref);
                abort();
        }
        outcome_done(&ref);
        return ours;
}

/* in one piece, and in two split at every offset, and in single bytes: all the same (but for the body
 * handed on before a refusal: that depends on where the read ends) */
static Outcome check_splits(const char *data, size_t n, bool head) {
        size_t cuts[3];
        Outcome whole = check_cuts(data, n, (size_t[]){n}, 1, head);
        for (size_t i = 0; i <= n; i++) {
                cuts[0] = i;
                cuts[1] = n;
                Outcome o = check_cuts(data, n, cuts, 2, head);
                ASSERT_TRUE(whole.end == -1 ? o.end == -1 : same(&o, &whole));
                outcome_done(&o);
        }
        size_t *bytes = malloc(sizeof(size_t) * (n + 1));
        for (size_t i = 0; i < n; i++)
                bytes[i] = i + 1;
        Outcome o = check_cuts(data, n, bytes, n, head);
        ASSERT_TRUE(whole.end == -1 ? o.end == -1 : same(&o, &whole));
        outcome_done(&o);
        free(bytes);
        return whole;
}

static Outcome check_str(const char *s, bool head) {
        return check_splits(s, strlen(s), head);
}

static const char *body_of(const Outcome *o) {
        static char b[1024];
        snprintf(b, sizeof(b), "%.*s", (int)buffer_size(&o->body), buffer_peek(&o->body));
        return b;
}

TEST(a_content_length_body_ends_after_its_length) {
        const char *s =
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1";
        Outcome o = check_str(s, false);
        ASSERT_EQ(o.end, 1);
        ASSERT_EQ(o.used, strlen(s) - 8);
        ASSERT_EQ(o.status, 200);
        ASSERT_TRUE(o.has_content_length && o.content_length == 5 && !o.chunked && o.keep_alive);
        ASSERT_STREQ(body_of(&o), "hello");
        ASSERT_EQ(buffer_size(&o.head), strlen("Content-Type") + strlen("text/plain") + 14 + 1 + 4);
        outcome_done(&o);
}

TEST(a_chunked_body_with_extensions_and_trailers) {
        const char *s = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                        "5;name=value;;q\r\nhello\r\n1;q=\"a "
                        "b\";x\r\n-\r\n00A;x\r\n0123456789\r\n0\r\nX-Trailer: t\r\nY: u\r\n\r\n";
        Outcome o = check_str(s, false);
        ASSERT_EQ(o.end, 1);
        ASSERT_EQ(o.used, strlen(s));
        ASSERT_TRUE(o.chunked && !o.has_content_length && o.keep_alive);
        ASSERT_STREQ(body_of(&o), "hello-0123456789");
        outcome_done(&o);
}

TEST(a_body_without_length_ends_at_the_close) {
        Outcome o = check_str("HTTP/1.1 200 OK\r\nServer: x\r\n\r\nsome body", false);
        ASSERT_EQ(o.end, 0);
        ASSERT_TRUE(o.eof_complete && !o.keep_alive && !o.keep_alive_head);
        ASSERT_STREQ(body_of(&o), "some body");
        outcome_done(&o);
        /* a coding other than chunked last: the same */
        o = check_str("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n5\r\nhello", false);
        ASSERT_TRUE(o.eof_complete && !o.chunked);
        ASSERT_STREQ(body_of(&o), "5\r\nhello");
        outcome_done(&o);
}

TEST(interim_responses_are_skipped) {
        const char *s = "HTTP/1.1 100 Continue\r\n\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n"
                        "Content-Length: 3\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\nA: b\r\n\r\n{}";
        Outcome o = check_str(s, false);
        ASSERT_EQ(o.end, 1);
        ASSERT_EQ(o.n_heads, 1u);
        ASSERT_EQ(o.status, 200);
        ASSERT_STREQ(body_of(&o), "{}");
        ASSERT_EQ(buffer_size(&o.head), 14 + 1 + 1 + 1 + 1 + 1 + 1 + 1);
        outcome_done(&o);
}

/* an interim response that says it is the host's last (HTTP/1.0 without keep-alive, "Connection: close"):
 * what follows is dropped, and the close ends no answer */
TEST(nothing_after_a_last_interim_response) {
        Outcome o = check_str("HTTP/1.0 100 Continue\r\n\r\nHTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n",
                              false);
        ASSERT_TRUE(o.end == 0 && !o.eof_complete && o.n_heads == 0);
        outcome_done(&o);
        o = check_str("HTTP/1.1 103 Early Hints\r\nConnection: close\r\n\r\nHTTP/1.1 200 OK\r\n\r\nbody",
                      false);
        ASSERT_TRUE(o.end == 0 && !o.eof_complete && o.n_heads == 0);
        outcome_done(&o);
}

TEST(no_body_for_head_204_304) {
        Outcome o = check_str("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nnext", true);
        ASSERT_TRUE(o.end == 1 && o.used == 40 && o.keep_alive && o.content_length == 100);
        outcome_done(&o);
        /* without a length, llhttp said "no keep-alive" to on_headers, and keep-alive at the end */
        o = check_str("HTTP/1.1 200 OK\r\n\r\n", true);
        ASSERT_TRUE(o.end == 1 && o.keep_alive && !o.keep_alive_head);
        outcome_done(&o);
        o = check_str("HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n", false);
        ASSERT_TRUE(o.end == 1 && o.keep_alive && buffer_size(&o.body) == 0);
        outcome_done(&o);
        o = check_str("HTTP/1.0 304 Not Modified\r\nContent-Length: 7\r\n\r\n", false);
        ASSERT_TRUE(o.end == 1 && !o.keep_alive);
        outcome_done(&o);
}

TEST(keep_alive_as_llhttp) {
        static const char *const cases[] = {
                "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\nx",
                "HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx",
                "HTTP/1.1 200 OK\r\nConnection: foo, close\r\nContent-Length: 1\r\n\r\nx",
                "HTTP/1.1 200 OK\r\nConnection: closed\r\nContent-Length: 1\r\n\r\nx",
                "HTTP/1.1 200 OK\r\nConnection: Keep-Alive ,Close \r\nContent-Length: 1\r\n\r\nx",
                /* bare LF ending the status line and the head, not a header */
                "HTTP/1.1 200 OK\nContent-Length: 2\r\n\nok",
                "HTTP/1.1 200 OK\r\nX-A: a\r\n  b\r\nContent-Length: 0\r\n\r\n",
                "HTTP/1.1 200 OK\r\nX-A: a  \r\nX-B:\r\nX-C: \t c\t\r\nContent-Length: 0\r\n\r\n",
                "HTTP/2.0 200 OK\r\nContent-Length: 0\r\n\r\n",
                "HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n",
                "HTTP/1.1 0200 \r\nContent-Length: 0\r\n\r\n",
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n\r\nx",
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
                /* trailers: their Connection and Transfer-Encoding count for keep-alive, and a
                 * Content-Length there is no conflict */
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nTransfer-Encoding: gzip\r\n\r\n",
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nConnection: close\r\n\r\n",
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nContent-Length: 5\r\n\r\n",
                /* CR and any byte end the status line and the head */
                "HTTP/1.1 200 OK\rXContent-Length: 1\r\n\rXy",
                /* an empty Content-Length that the next line continues */
                "HTTP/1.1 200 OK\r\nContent-Length:\r\n 2\r\n\r\nok",
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                Outcome o = check_str(cases[i], false);
                if (o.end != 1 && !o.eof_complete)
                        FAIL("case %zu not taken", i);
                outcome_done(&o);
        }
}

static void check_refused(const char *s, bool head) {
        Outcome o = check_str(s, head);
        if (o.end != -1) {
                print_escaped("not refused", s, strlen(s));
                abort();
        }
        outcome_done(&o);
}

TEST(malformed_answers_are_refused) {
        check_refused("HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\n",
                      false);
        check_refused("HTTP/1.2 200 OK\r\n\r\n", false);
        check_refused("HTTP/1.1 2x0 OK\r\n\r\n", false);
        check_refused("HTTP/1.1 1000 OK\r\n\r\n", false);
        check_refused("HTTX/1.1 200 OK\r\n\r\n", false);
        check_refused("HTTP/1.1 200 OK\r\nNo colon\r\n\r\n", false);
        check_refused("HTTP/1.1 200 OK\r\nA : b\r\n\r\n", false);
        check_refused("HTTP/1.1 200 OK\r\nA: b\x01\r\n\r\n", false);
        check_refused("HTTP/1.1 200 OK\r\nA: b\rc\r\n\r\n", false);
        check_refused("HTTP/1.1 200 OK\nContent-Length: 2\n\nok", false);
        check_refused("HTTP/1.1 200 OK\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n", false);
        check_refused("HTTP/1.1 200 OK\r\nContent-Length:\r\nX: y\r\n\r\n", false);
        check_refused("HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\n", false);
        check_refused("HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx", false);
        check_refused("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n",
                      false);
        check_refused("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
                      false);
        check_refused("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1g\r\nx\r\n0\r\n\r\n", false);
        check_refused("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                      "10000000000000000\r\nx\r\n0\r\n\r\n",
                      false);
        /* too many interim responses */
        Buffer b = {};
        for (unsigned i = 0; i <= UPSTREAM_INTERIM_MAX; i++)
                assert(buffer_append_str(&b, "HTTP/1.1 102 Processing\r\n\r\n") >= 0);
        assert(buffer_append_str(&b, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n") >= 0);
        assert(buffer_terminate(&b) >= 0);
        check_refused(buffer_peek(&b), false);
        buffer_done(&b);
}

/* the CRLF after a chunk's data is checked, as llhttp did not */
TEST(a_chunk_not_ended_by_crlf_is_refused) {
        static const char *const bad[] = {
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n",
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\rX0\r\n\r\n",
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\n\r0\r\n\r\n",
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++)
                check_refused(bad[i], false);
}

/* 1024 headers are taken, 1025 not; nor names and values over 256 KiB */
TEST(too_many_headers_are_refused) {
        Buffer b = {};
        assert(buffer_append_str(&b, "HTTP/1.1 200 OK\r\n") >= 0);
        for (unsigned i = 0; i < 1023; i++)
                assert(buffer_append_str(&b, "A: b\r\n") >= 0);
        Buffer ok = {};
        assert(buffer_append(&ok, buffer_peek(&b), buffer_size(&b)) >= 0);
        assert(buffer_append_str(&ok, "Content-Length: 0\r\n\r\n") >= 0);
        Outcome o = check_cuts(buffer_peek(&ok), buffer_size(&ok), (size_t[]){buffer_size(&ok)}, 1, false);
        ASSERT_EQ(o.end, 1);
        outcome_done(&o);
        assert(buffer_append_str(&b, "A: b\r\nContent-Length: 0\r\n\r\n") >= 0);
        o = check_cuts(buffer_peek(&b), buffer_size(&b), (size_t[]){100, buffer_size(&b)}, 2, false);
        ASSERT_EQ(o.end, -1);
        outcome_done(&o);
        buffer_done(&b);
        buffer_done(&ok);

        char *big = malloc(300 * 1024);
        assert(big);
        int l = snprintf(big, 100, "HTTP/1.1 200 OK\r\nX: ");
        memset(big + l, 'v', 256 * 1024);
        strcpy(big + l + 256 * 1024, "\r\n\r\n");
        o = check_cuts(big, strlen(big), (size_t[]){strlen(big)}, 1, false);
        ASSERT_EQ(o.end, -1);
        outcome_done(&o);
        free(big);
}

/* many responses with a few bytes changed, split at random places: whatever llhttp made of them */
TEST(mutated_answers_read_as_llhttp_read_them) {
        static const char *const seeds[] = {
                "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nhelloHTTP",
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: "
                "chunked\r\n\r\n5;a=b\r\nhello\r\n3;x=\"y\"\r\nabc\r\n0\r\n"
                "X-Trailer: t\r\n\r\nZ",
                "HTTP/1.0 200 OK\r\nServer: x\r\n\r\nsome body",
                "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
                "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}",
                "HTTP/1.1 204 No Content\r\nContent-Length: 7\r\n\r\n",
                "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\nx",
                "HTTP/1.1 200 OK\r\nConnection: foo, close\r\nContent-Length: 1\r\n\r\nxEXTRA",
                "HTTP/1.1 200 OK\nContent-Length: 2\n\nok",
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n",
                "HTTP/1.1 304 Not Modified\r\nX-A: a\r\n b\r\n\r\n",
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive, close\r\n\r\n"
                "1\r\nx\r\n0\r\nA: b\r\n c\r\nContent-Length: 1\r\n\r\n",
                "HTTP/1.0 103 Early\r\nConnection: keep-alive\r\nLink: x\r\n\r\nHTTP/1.0 200 OK\r\n"
                "Content-Length:  2 \r\nConnection: keep-alive\r\n\r\nok",
                "HTTP/1.1 200 OK\r\nContent-Length:\r\n 3\r\nTransfer-Encoding:\r\n\r\nabc",
                "HTTP/1.1 200\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked \r\n\r\n"
                "1;a;b=\"c\";d=e\r\nx\r\n0\r\n\r\n",
        };
        static const char alphabet[] = "\r\n \t:;,0019aFxH.\x7f\x80\x01=\"\\ck-";
        const char *env = getenv("UPSTREAM_PARSE_ROUNDS");
        unsigned rounds = env ? (unsigned)atoi(env) : 200000;
        const char *seed_env = getenv("UPSTREAM_PARSE_SEED");
        unsigned seed = seed_env ? (unsigned)atoi(seed_env) : 1;
        char buf[1024];

        for (unsigned round = 0; round < rounds; round++) {
                const char *s = seeds[rand_r(&seed) % ELEMENTSOF(seeds)];
                size_t n = strlen(s);
                memcpy(buf, s, n);
                for (int m = rand_r(&seed) % 4; m > 0; m--) {
                        size_t at = (size_t)rand_r(&seed) % (n + 1);
                        char c = alphabet[rand_r(&seed) % (sizeof(alphabet) - 1)];
                        switch (rand_r(&seed) % 3) {
                        case 0:
                                if (at < n)
                                        buf[at] = c;
                                break;
                        case 1:
                                if (n + 1 < sizeof(buf)) {
                                        memmove(buf + at + 1, buf + at, n - at);
                                        buf[at] = c;
                                        n++;
                                }
                                break;
                        default:
                                if (at < n) {
                                        memmove(buf + at, buf + at + 1, n - at - 1);
                                        n--;
                                }
                        }
                }
                size_t cuts[4];
                size_t n_cuts = (size_t)rand_r(&seed) % 4;
                for (size_t i = 0; i < n_cuts; i++)
                        cuts[i] = (size_t)rand_r(&seed) % (n + 1);
                /* ascending */
                for (size_t i = 1; i < n_cuts; i++)
                        for (size_t j = i; j > 0 && cuts[j - 1] > cuts[j]; j--) {
                                size_t t = cuts[j];
                                cuts[j] = cuts[j - 1];
                                cuts[j - 1] = t;
                        }
                cuts[n_cuts++] = n;
                bool head = rand_r(&seed) % 8 == 0;
                Outcome o = check_cuts(buf, n, cuts, n_cuts, head);
                outcome_done(&o);
        }
}

static int refuse_headers(Upstream *u, const UpstreamResponse *r, void *userdata) {
        return -1;
}

static int refuse_body(Upstream *u, const char *p, size_t n, void *userdata) {
        return -1;
}

static const UpstreamCallbacks taken_over = {.on_body = on_body};

/* hands u to another owner, then refuses: the refusal is not the new owner's */
static int hand_over(Upstream *u, const char *p, size_t n, void *userdata) {
        upstream_set_owner(u, &taken_over, userdata);
        return -1;
}

static int parse_with(const UpstreamCallbacks *cb, const char *s, int *ret_cancel, Outcome *o) {
        Upstream *u = calloc(1, sizeof(Upstream));
        size_t used = 0;
        assert(u);
        u->cb = cb;
        u->userdata = o;
        upstream_parser_init(u);
        int r = upstream_parse(u, s, strlen(s), &used);
        *ret_cancel = u->cancel_error;
        buffer_done(&u->resp.head);
        free(u->resp.headers);
        upstream_parser_done(u);
        free(u);
        return r;
}

/* an owner's refusal ends the parse where it is, with cancel_error set, unless it handed u over first */
TEST(an_owners_refusal_cancels) {
        const char *s = "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nbody";
        Outcome o = {};
        int cancel;

        ASSERT_EQ(parse_with(&(UpstreamCallbacks){.on_headers = refuse_headers}, s, &cancel, &o),
                  -ECANCELED);
        ASSERT_EQ(cancel, -ECANCELED);
        ASSERT_EQ(parse_with(&(UpstreamCallbacks){.on_body = refuse_body}, s, &cancel, &o), -ECANCELED);
        ASSERT_EQ(cancel, -ECANCELED);
        ASSERT_EQ(parse_with(&(UpstreamCallbacks){.on_body = hand_over}, s, &cancel, &o), 1);
        ASSERT_EQ(cancel, 0);
        outcome_done(&o);
}

TESTS_MAIN
