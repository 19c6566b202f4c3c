/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The upstream pool (upstream-pool.c) against a fake host on loopback, on a real sd-event loop: a pooled
 * connection the host has closed is not used again when it is taken outside the sockets' batch (a
 * probe's or a refresh's timer), before the loop has read the close, even within the time a pooled
 * connection is otherwise trusted without a look. A POST sent on it would fail: it is not retried. */

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "modelgated/upstream/upstream.h"
#include "tests.h"

#define POST "POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\n{}"
#define OK "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"

typedef struct Exchange {
        int status, error;
        bool done;
} Exchange;

static int on_headers(Upstream *u, const UpstreamResponse *resp, void *userdata) {
        ((Exchange *)userdata)->status = resp->status;
        return 0;
}

static int on_body(Upstream *u, const char *p, size_t n, void *userdata) {
        return 0;
}

static void on_complete(Upstream *u, void *userdata) {
        ((Exchange *)userdata)->done = true;
}

static void on_error(Upstream *u, int error, bool started, void *userdata) {
        ((Exchange *)userdata)->error = error;
        ((Exchange *)userdata)->done = true;
}

static const UpstreamCallbacks callbacks = {
        .on_headers = on_headers, .on_body = on_body, .on_complete = on_complete, .on_error = on_error};

/* Turns of the loop until the fake host has accepted a connection and read a whole request on it */
static int fake_take_request(sd_event *e, int listen_fd) {
        usec_t deadline = now_usec(CLOCK_MONOTONIC) + 5 * USEC_PER_SEC;
        char buf[256];
        size_t n = 0;
        int fd = -1;

        while (now_usec(CLOCK_MONOTONIC) < deadline) {
                ASSERT_TRUE(sd_event_run(e, 10 * USEC_PER_MSEC) >= 0);
                if (fd < 0)
                        fd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (fd < 0)
                        continue;
                ssize_t k = read(fd, buf + n, sizeof(buf) - 1 - n);
                if (k > 0)
                        n += (size_t)k;
                if (n == strlen(POST)) {
                        ASSERT_TRUE(memcmp(buf, POST, n) == 0);
                        return fd;
                }
        }
        FAIL("the fake host got no whole request (%zu bytes)", n);
}

static void run_until_done(sd_event *e, Exchange *x) {
        usec_t deadline = now_usec(CLOCK_MONOTONIC) + 5 * USEC_PER_SEC;
        while (!x->done && now_usec(CLOCK_MONOTONIC) < deadline)
                ASSERT_TRUE(sd_event_run(e, 10 * USEC_PER_MSEC) >= 0);
        ASSERT_TRUE(x->done);
}

static void exchange(sd_event *e, UpstreamPool *pool, const HttpUrl *url, int listen_fd, Exchange *x,
                     int *ret_fd) {
        Buffer req = {};
        Upstream *u;

        ASSERT_OK(buffer_append(&req, POST, strlen(POST)));
        ASSERT_OK(upstream_start(pool, url, &req, false, &callbacks, x, &u));
        int fd = fake_take_request(e, listen_fd);
        ASSERT_EQ(write(fd, OK, strlen(OK)), (ssize_t)strlen(OK));
        run_until_done(e, x);
        *ret_fd = fd;
}

TEST(a_pooled_connection_the_host_closed_is_not_taken_from_a_timer) {
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t l = sizeof(sa);
        sd_event *e;
        SocketWatchSet *sockets;
        UpstreamPool *pool;
        HttpUrl url = {};
        char s[64];
        Exchange first = {}, second = {};
        int fd1, fd2;

        int listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        ASSERT_TRUE(listen_fd >= 0);
        ASSERT_OK(bind(listen_fd, (struct sockaddr *)&sa, sizeof(sa)));
        ASSERT_OK(listen(listen_fd, 8));
        ASSERT_OK(getsockname(listen_fd, (struct sockaddr *)&sa, &l));
        snprintf(s, sizeof(s), "http://127.0.0.1:%u", (unsigned)ntohs(sa.sin_port));
        ASSERT_OK(http_url_parse(s, &url));
        /* what config_resolve() does for a [Host] */
        memcpy(&url.address, &sa, sizeof(sa));
        url.address_len = sizeof(sa);
        ASSERT_TRUE(sd_event_new(&e) >= 0);
        ASSERT_OK(socket_watch_set_new(e, &sockets));
        ASSERT_OK(upstream_pool_new(e, sockets, &pool));

        exchange(e, pool, &url, listen_fd, &first, &fd1);
        ASSERT_EQ(first.status, 200);
        ASSERT_EQ(first.error, 0);
        /* the host closes the idle connection; the loop has not run since, but the kernel has the close:
         * the sockets' set is readable in sd-event's epoll */
        close(fd1);
        struct pollfd p = {.fd = sd_event_get_fd(e), .events = POLLIN};
        ASSERT_EQ(poll(&p, 1, 5000), 1);

        /* taken here, outside any batch, as a timer's callback takes it */
        exchange(e, pool, &url, listen_fd, &second, &fd2);
        ASSERT_EQ(second.error, 0);
        ASSERT_EQ(second.status, 200);

        close(fd2);
        upstream_pool_free(pool);
        socket_watch_set_free(sockets);
        sd_event_unref(e);
        http_url_done(&url);
        close(listen_fd);
}

TESTS_MAIN
