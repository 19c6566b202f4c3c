/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The fake host, the client ends and the loop of relay-harness.h. */

#include <fcntl.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "modelgated/catalog/catalog.h"
#include "modelgated/client/client.h"
#include "modelgated/host/host.h"
#include "modelgated/manager/manager.h"
#include "relay-harness.h"
#include "tests.h"

/* FAIL() with the test's line (where the harness was called from) */
#define FAIL_AT(w, ...)                                                                                     \
        do {                                                                                                \
                fprintf(stderr, "%s:%d: ", (w).file, (w).line);                                             \
                FAIL(__VA_ARGS__);                                                                          \
        } while (0)

#define HARNESS_DEADLINE_USEC (10 * USEC_PER_SEC)
#define MAX_CONNS 64
#define MAX_QUEUED 16

static const char MODEL_LIST[] =
        "{\"object\":\"list\",\"data\":[{\"id\":\"m1\",\"object\":\"model\",\"owned_by\":\"llamacpp\","
        "\"status\":{\"value\":\"loaded\"}}]}";

typedef struct Queued {
        FakeConn *conn;
        char *request;
} Queued;

struct Harness {
        sd_event *event;
        Manager *manager;
        ClientSet *set;
        char dir[64], conf_path[96], authority[32];
        int listen_fd;
        sd_event_source *listen_io;
        FakeConn *conns[MAX_CONNS];
        size_t n_conns;
        Queued queue[MAX_QUEUED];
        size_t n_queued;
};

/* Printing what differs: the bytes with their line ends and control characters escaped */
static void print_escaped(const char *label, const char *p, size_t n) {
        fprintf(stderr, "%s (%zu bytes): \"", label, n);
        for (size_t i = 0; i < n; i++) {
                unsigned char ch = (unsigned char)p[i];
                if (ch == '\r')
                        fputs("\\r", stderr);
                else if (ch == '\n')
                        fputs("\\n", stderr);
                else if (ch == '"' || ch == '\\')
                        fprintf(stderr, "\\%c", ch);
                else if (ch < 0x20 || ch >= 0x7f)
                        fprintf(stderr, "\\x%02x", ch);
                else
                        fputc(ch, stderr);
        }
        fputs("\"\n", stderr);
}

static void write_all(int fd, const char *p, size_t n) {
        while (n > 0) {
                ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0)
                        FAIL("send: %s", strerror(errno));
                p += k;
                n -= (size_t)k;
        }
}

/* Reads what the socket has; false at its end */
static bool read_into(int fd, Buffer *b) {
        char buf[16384];
        for (;;) {
                ssize_t k = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0 && errno == EAGAIN)
                        return true;
                if (k <= 0)
                        return false; /* an error (a reset) ends it too */
                ASSERT_OK(buffer_append(b, buf, (size_t)k));
        }
}

char *with_length(const char *head, const char *body) {
        Buffer b = {};
        ASSERT_OK(buffer_printf(&b, "%sContent-Length: %zu\r\n\r\n%s", head, strlen(body), body));
        return buffer_steal(&b, NULL);
}

void harness_run_until(Where w, Harness *h, bool (*done)(void *arg), void *arg, const char *what) {
        usec_t deadline = now_usec(CLOCK_MONOTONIC) + HARNESS_DEADLINE_USEC;

        while (!done(arg)) {
                usec_t n = now_usec(CLOCK_MONOTONIC);
                if (n >= deadline)
                        FAIL_AT(w, "timed out waiting for %s", what);
                ASSERT_TRUE(sd_event_run(h->event, deadline - n) >= 0);
        }
}

/* The fake host */

/* The length of the first whole request in b (head, and the body its Content-Length says), or 0 */
static size_t request_length(const Buffer *b) {
        const char *p = buffer_peek(b), *end = memmem(p, buffer_size(b), "\r\n\r\n", 4);
        if (!end)
                return 0;
        size_t head = (size_t)(end - p) + 4, body = 0;
        for (const char *q = p; q < end;) {
                const char *eol = memmem(q, (size_t)(end - q), "\r\n", 2) ?: end;
                if (strncasecmp(q, "Content-Length:", 15) == 0)
                        body = strtoull(q + 15, NULL, 10);
                q = eol + 2;
        }
        return buffer_size(b) >= head + body ? head + body : 0;
}

static void fake_answer_catalog(FakeConn *f, const char *request) {
        char answer[512];
        if (strncmp(request, "GET /models/sse ", 16) == 0)
                /* the feed: accepted, and nothing ever happens on it */
                fake_send(f, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                             "Transfer-Encoding: chunked\r\n\r\n");
        else {
                snprintf(
                        answer, sizeof(answer),
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                        strlen(MODEL_LIST), MODEL_LIST);
                fake_send(f, answer);
        }
}

static int fake_io_cb(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        FakeConn *f = userdata;
        Harness *h = f->h;
        size_t n;

        if (!read_into(fd, &f->in)) {
                f->eof = true;
                (void)sd_event_source_set_enabled(s, SD_EVENT_OFF);
        }
        while ((n = request_length(&f->in)) > 0) {
                char *request = strndup(buffer_peek(&f->in), n);
                ASSERT_TRUE(request);
                buffer_consume(&f->in, n);
                if (strncmp(request, "GET /models ", 12) == 0 ||
                    strncmp(request, "GET /models/sse ", 16) == 0) {
                        fake_answer_catalog(f, request);
                        free(request);
                        continue;
                }
                ASSERT_TRUE(h->n_queued < MAX_QUEUED);
                h->queue[h->n_queued++] = (Queued){f, request};
        }
        return 0;
}

static int fake_accept_cb(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        Harness *h = userdata;
        int cfd = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

        if (cfd < 0)
                return 0;
        ASSERT_TRUE(h->n_conns < MAX_CONNS);
        FakeConn *f = calloc(1, sizeof(FakeConn));
        ASSERT_TRUE(f);
        *f = (FakeConn){.h = h, .fd = cfd};
        ASSERT_TRUE(sd_event_add_io(h->event, &f->io, cfd, EPOLLIN | EPOLLRDHUP, fake_io_cb, f) >= 0);
        h->conns[h->n_conns++] = f;
        return 0;
}

size_t harness_queued(Harness *h) {
        return h->n_queued;
}

static bool queue_nonempty(void *arg) {
        return ((Harness *)arg)->n_queued > 0;
}

/* rule:request-id: the id modelgate made, "X-Request-Id: " and 32 hex digits, is in every request to a
 * host and every answer's head; the tests that are not about it expect what is left without it (n: the
 * new length) */
static size_t strip_made_ids(char *s, size_t n) {
        static const char h[] = "X-Request-Id: ";
        size_t l = sizeof(h) - 1, i = 0;

        while (i + l + 34 <= n) {
                char *m = memmem(s + i, n - i, h, l);
                if (!m || (size_t)(m - s) + l + 34 > n)
                        break;
                size_t at = (size_t)(m - s), k = 0;
                while (k < 32 && strchr("0123456789abcdef", m[l + k]) && m[l + k])
                        k++;
                if (k == 32 && m[l + 32] == '\r' && m[l + 33] == '\n') {
                        memmove(m, m + l + 34, n - at - l - 34);
                        n -= l + 34;
                        s[n] = 0;
                } else
                        i = at + 1;
        }
        return n;
}

static void strip_made_ids_buffer(Buffer *b) {
        if (buffer_is_empty(b))
                return;
        ASSERT_OK(buffer_terminate(b));
        char *p = (char *)buffer_peek(b);
        b->end = b->start + strip_made_ids(p, buffer_size(b));
}

/* expected with "{host}" replaced by the fake host's address */
static char *with_authority(Harness *h, const char *expected) {
        Buffer b = {};
        const char *p = expected, *t;
        while ((t = strstr(p, "{host}"))) {
                ASSERT_OK(buffer_append(&b, p, (size_t)(t - p)));
                ASSERT_OK(buffer_append_str(&b, h->authority));
                p = t + 6;
        }
        ASSERT_OK(buffer_append_str(&b, p));
        return buffer_steal(&b, NULL);
}

FakeConn *fake_expect_request_at(Where w, Harness *h, const char *expected) {
        harness_run_until(w, h, queue_nonempty, h, "a request at the fake host");
        Queued q = h->queue[0];
        memmove(h->queue, h->queue + 1, --h->n_queued * sizeof(Queued));
        _cleanup_free_ char *want = with_authority(h, expected);
        if (!strstr(want, "X-Request-Id"))
                (void)strip_made_ids(q.request, strlen(q.request));
        if (!streq(q.request, want)) {
                print_escaped("the host got", q.request, strlen(q.request));
                print_escaped("expected", want, strlen(want));
                FAIL_AT(w, "the request the host got differs");
        }
        free(q.request);
        return q.conn;
}

FakeConn *fake_take_request_at(Where w, Harness *h) {
        harness_run_until(w, h, queue_nonempty, h, "a request at the fake host");
        Queued q = h->queue[0];
        memmove(h->queue, h->queue + 1, --h->n_queued * sizeof(Queued));
        free(q.request);
        return q.conn;
}

void fake_send_bytes(FakeConn *f, const void *p, size_t n) {
        write_all(f->fd, p, n);
}

FakeConn *fake_expect_request_with_length_at(Where w, Harness *h, const char *head, const char *body) {
        _cleanup_free_ char *expected = with_length(head, body);
        return fake_expect_request_at(w, h, expected);
}

void fake_send(FakeConn *f, const char *s) {
        write_all(f->fd, s, strlen(s));
}

void fake_send_with_length(FakeConn *f, const char *head, const char *body) {
        _cleanup_free_ char *answer = with_length(head, body);
        fake_send(f, answer);
}

void fake_send_chunk(FakeConn *f, const char *data) {
        Buffer b = {};
        ASSERT_OK(buffer_printf(&b, "%zx\r\n%s\r\n", strlen(data), data));
        write_all(f->fd, buffer_peek(&b), buffer_size(&b));
        buffer_done(&b);
}

void fake_close(FakeConn *f) {
        f->io = sd_event_source_disable_unref(f->io);
        f->fd = safe_close(f->fd);
        f->eof = true;
}

static bool fake_closed(void *arg) {
        FakeConn *f = arg;
        if (f->fd >= 0 && !f->eof && !read_into(f->fd, &f->in))
                f->eof = true;
        return f->eof;
}

void fake_expect_eof_at(Where w, FakeConn *f) {
        harness_run_until(w, f->h, fake_closed, f, "modelgate to close its connection to the host");
}

/* The client's end */

static int peer_io_cb(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        Peer *p = userdata;
        if (!read_into(fd, &p->in)) {
                p->eof = true;
                (void)sd_event_source_set_enabled(s, SD_EVENT_OFF);
        }
        return 0;
}

Peer *peer_new(Harness *h) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        int fds[2];
        Peer *p = calloc(1, sizeof(Peer));

        ASSERT_TRUE(p);
        ASSERT_OK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds));
        *p = (Peer){.h = h, .fd = fds[1]};
        ASSERT_TRUE(sd_event_add_io(h->event, &p->io, fds[1], EPOLLIN | EPOLLRDHUP, peer_io_cb, p) >= 0);
        ASSERT_OK(client_new(h->set, fds[0], (const struct sockaddr *)&sa, sizeof(sa)));
        return p;
}

void peer_free(Peer *p) {
        if (!p)
                return;
        sd_event_source_disable_unref(p->io);
        safe_close(p->fd);
        buffer_done(&p->in);
        free(p);
}

void peer_send(Peer *p, const char *s) {
        write_all(p->fd, s, strlen(s));
}

void peer_send_request(Peer *p, const char *method, const char *target, const char *version,
                       const char *extra, const char *body) {
        Buffer b = {};
        ASSERT_OK(buffer_printf(&b, "%s %s HTTP/%s\r\nHost: gate\r\n%s", method, target, version, extra));
        if (body)
                ASSERT_OK(buffer_printf(&b,
                                        "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                                        strlen(body), body));
        else
                ASSERT_OK(buffer_append_str(&b, "\r\n"));
        write_all(p->fd, buffer_peek(&b), buffer_size(&b));
        buffer_done(&b);
}

typedef struct Expect {
        Peer *p;
        const char *want;
        size_t n;
} Expect;

static bool expect_done(void *arg) {
        Expect *e = arg;
        if (!strstr(e->want, "X-Request-Id"))
                strip_made_ids_buffer(&e->p->in);
        size_t have = MIN(buffer_size(&e->p->in), e->n);
        /* a difference fails now, not at the deadline */
        return have == e->n || e->p->eof || memcmp(buffer_peek(&e->p->in), e->want, have) != 0;
}

void peer_expect_at(Where w, Peer *p, const char *bytes) {
        Expect e = {p, bytes, strlen(bytes)};
        harness_run_until(w, p->h, expect_done, &e, "the client's answer");
        if (!strstr(bytes, "X-Request-Id"))
                strip_made_ids_buffer(&p->in);
        if (buffer_size(&p->in) < e.n || memcmp(buffer_peek(&p->in), bytes, e.n) != 0) {
                print_escaped("the client got", buffer_peek(&p->in), buffer_size(&p->in));
                print_escaped("expected", bytes, e.n);
                FAIL_AT(w, "the client's answer differs%s", p->eof ? " (and the connection ended)" : "");
        }
        buffer_consume(&p->in, e.n);
}

void peer_expect_chunk_at(Where w, Peer *p, const char *data) {
        Buffer b = {};
        ASSERT_OK(buffer_printf(&b, "%zx\r\n%s\r\n", strlen(data), data));
        ASSERT_OK(buffer_terminate(&b));
        peer_expect_at(w, p, buffer_peek(&b));
        buffer_done(&b);
}

void peer_expect_with_length_at(Where w, Peer *p, const char *head, const char *body) {
        _cleanup_free_ char *expected = with_length(head, body);
        peer_expect_at(w, p, expected);
}

static bool peer_ended(void *arg) {
        Peer *p = arg;
        return p->eof;
}

void peer_expect_eof_at(Where w, Peer *p) {
        harness_run_until(w, p->h, peer_ended, p, "the end of the client's connection");
        if (!buffer_is_empty(&p->in)) {
                print_escaped("before the end, the client got", buffer_peek(&p->in), buffer_size(&p->in));
                FAIL_AT(w, "more than expected before the end");
        }
}

void peer_expect_nothing_at(Where w, Peer *p) {
        /* whatever is due now runs; modelgate writes to the client inside those callbacks */
        while (sd_event_run(p->h->event, 0) > 0)
                ;
        (void)read_into(p->fd, &p->in);
        if (!buffer_is_empty(&p->in)) {
                print_escaped("the client got", buffer_peek(&p->in), buffer_size(&p->in));
                FAIL_AT(w, "more than expected");
        }
}

/* The harness */

static bool catalog_knows_m1(void *arg) {
        Harness *h = arg;
        return catalog_lists(host_catalog(manager_host_at(h->manager, 0)), "m1") == 1;
}

static void listen_loopback(Harness *h) {
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t l = sizeof(sa);

        h->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        ASSERT_TRUE(h->listen_fd >= 0);
        ASSERT_OK(bind(h->listen_fd, (struct sockaddr *)&sa, sizeof(sa)));
        ASSERT_OK(listen(h->listen_fd, 64));
        ASSERT_OK(getsockname(h->listen_fd, (struct sockaddr *)&sa, &l));
        snprintf(h->authority, sizeof(h->authority), "127.0.0.1:%u", (unsigned)ntohs(sa.sin_port));
        ASSERT_TRUE(sd_event_add_io(h->event, &h->listen_io, h->listen_fd, EPOLLIN, fake_accept_cb, h) >= 0);
}

Harness *harness_new(const char *extra) {
        Harness *h = calloc(1, sizeof(Harness));
        FILE *f;

        ASSERT_TRUE(h);
        snprintf(h->dir, sizeof(h->dir), "/tmp/test-relay-XXXXXX");
        ASSERT_TRUE(mkdtemp(h->dir));
        /* learned engine keys would be kept here; a host without engines writes none */
        ASSERT_OK(setenv("STATE_DIRECTORY", h->dir, 1));
        ASSERT_TRUE(sd_event_new(&h->event) >= 0);
        listen_loopback(h);

        snprintf(h->conf_path, sizeof(h->conf_path), "%s/modelgate.conf", h->dir);
        ASSERT_TRUE((f = fopen(h->conf_path, "we")));
        fprintf(f, "[Host]\nName=h\nURL=http://%s\n%s", h->authority, extra);
        ASSERT_OK(fclose(f));

        ASSERT_OK(manager_new(h->event, true, &h->manager));
        ASSERT_OK(manager_load_config(h->manager, h->conf_path));
        ASSERT_OK(manager_start(h->manager));
        ASSERT_OK(client_set_new(h->manager, NULL, NULL, &h->set));
        /* the host's list is read: an unknown key is 404, and m1 routes */
        harness_run_until(HERE, h, catalog_knows_m1, h, "the catalog's first read of the fake host");
        return h;
}

Manager *harness_manager(Harness *h) {
        return h->manager;
}

void harness_reap(Harness *h) {
        size_t kept = 0;

        for (size_t i = 0; i < h->n_conns; i++) {
                FakeConn *f = h->conns[i];
                bool queued = false;
                for (size_t j = 0; j < h->n_queued; j++)
                        queued = queued || h->queue[j].conn == f;
                if ((f->fd >= 0 && !f->eof) || queued) {
                        h->conns[kept++] = f;
                        continue;
                }
                sd_event_source_disable_unref(f->io);
                safe_close(f->fd);
                buffer_done(&f->in);
                free(f);
        }
        h->n_conns = kept;
}

void harness_free(Harness *h) {
        if (!h)
                return;
        client_set_free(h->set);
        manager_free(h->manager);
        for (size_t i = 0; i < h->n_conns; i++) {
                sd_event_source_disable_unref(h->conns[i]->io);
                safe_close(h->conns[i]->fd);
                buffer_done(&h->conns[i]->in);
                free(h->conns[i]);
        }
        for (size_t i = 0; i < h->n_queued; i++)
                free(h->queue[i].request);
        sd_event_source_disable_unref(h->listen_io);
        safe_close(h->listen_fd);
        sd_event_unref(h->event);
        (void)unlink(h->conf_path);
        /* what [Access] keeps (a test of the callers' counts has it) */
        char usage[128];
        snprintf(usage, sizeof(usage), "%s/usage.json", h->dir);
        (void)unlink(usage);
        ASSERT_OK(rmdir(h->dir));
        free(h);
}
