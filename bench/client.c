/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The benchmark's client, in C so that microseconds are the proxies', not the client's.
 *
 *   client latency PORT N            N streaming requests, one after another on one keep-alive
 *                                    connection; prints "first_us end_us" per request (time to the
 *                                    first SSE byte and to the end of the stream)
 *   client plain PORT N [MODEL]      the same with non-streaming requests; prints "end_us"
 *   client streams PORT C CHUNKS GAP C concurrent streams of CHUNKS chunks GAP µs apart; prints
 *                                    "total_us worst_gap_us" and, per stream, its largest gap
 *   client idle PORT C               C keep-alive connections that made one request each and stay
 *                                    open; prints "ready", then holds them until stdin closes
 *   client waiting PORT C MODEL      C streaming requests for MODEL that wait for their engine; prints
 *                                    "ready" once each has had a keepalive comment, holds them until
 *                                    stdin closes
 *
 * Requests name the model "b-m" (host "b" for modelgate; the others pass it through). */

#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int port;

static long long now_us(void) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        return (long long)t.tv_sec * 1000000 + t.tv_nsec / 1000;
}

static int dial(void) {
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
                perror("connect");
                exit(1);
        }
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        return fd;
}

static const char *model = "b-m";

static int request(char *buf, size_t l, bool stream, int chunks, int gap) {
        char body[256];
        snprintf(body, sizeof(body), "{\"model\":\"%s\",%s\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
                 model, stream ? "\"stream\":true," : "");
        return snprintf(buf, l,
                        "POST /v1/chat/completions?n=%d&gap_us=%d HTTP/1.1\r\nHost: bench\r\n"
                        "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                        chunks, gap, strlen(body), body);
}

static bool reset_pending;

/* A new connection: what was left of the old one's bytes is dropped. */
static void reset_response(void) {
        reset_pending = true;
}

/* Reads one response on a blocking socket. Sets *first to the arrival of the first body byte. */
static int read_response(int fd, long long *first) {
        static char buf[1 << 16];
        static size_t have = 0;

        if (reset_pending) {
                have = 0;
                reset_pending = false;
        }
        size_t head_end = 0;
        long long clen = -1;
        bool chunked = false;

        *first = 0;
        for (;;) {
                char *e = memmem(buf, have, "\r\n\r\n", 4);
                if (e) {
                        head_end = (size_t)(e - buf) + 4;
                        break;
                }
                ssize_t k = recv(fd, buf + have, sizeof(buf) - have, 0);
                if (k <= 0)
                        return -1;
                have += (size_t)k;
        }
        buf[head_end - 1] = 0;
        char *cl = strcasestr(buf, "\ncontent-length:");
        if (cl)
                clen = atoll(cl + 16);
        chunked = strcasestr(buf, "\ntransfer-encoding: chunked") != NULL;
        memmove(buf, buf + head_end, have - head_end);
        have -= head_end;
        if (have > 0)
                *first = now_us();
        if (clen >= 0) {
                while ((long long)have < clen) {
                        ssize_t k = recv(fd, buf + have, sizeof(buf) - have, 0);
                        if (k <= 0)
                                return -1;
                        if (!*first)
                                *first = now_us();
                        have += (size_t)k;
                }
                memmove(buf, buf + clen, have - (size_t)clen);
                have -= (size_t)clen;
                return 0;
        }
        if (!chunked)
                return -1;
        /* chunked: walk chunk headers until the last one */
        size_t pos = 0;
        for (;;) {
                char *nl;
                while (!(nl = memmem(buf + pos, have - pos, "\r\n", 2))) {
                        ssize_t k = recv(fd, buf + have, sizeof(buf) - have, 0);
                        if (k <= 0)
                                return -1;
                        if (!*first)
                                *first = now_us();
                        have += (size_t)k;
                }
                size_t n = strtoul(buf + pos, NULL, 16);
                size_t need = (size_t)(nl - buf) + 2 + n + 2;
                while (have < need) {
                        ssize_t k = recv(fd, buf + have, sizeof(buf) - have, 0);
                        if (k <= 0)
                                return -1;
                        have += (size_t)k;
                }
                pos = need;
                if (n == 0)
                        break;
                if (pos > sizeof(buf) / 2) {
                        memmove(buf, buf + pos, have - pos);
                        have -= pos;
                        pos = 0;
                }
        }
        memmove(buf, buf + pos, have - pos);
        have -= pos;
        return 0;
}

static int run_sequential(int n, bool stream) {
        char req[512];
        int fd = dial(), l = request(req, sizeof(req), stream, 8, 0), errors = 0;

        for (int i = 0; i < n; i++) {
                long long t0 = now_us(), first;
                if (send(fd, req, (size_t)l, 0) != l || read_response(fd, &first) < 0) {
                        /* counted, and the next request goes on a new connection (as a client would) */
                        errors++;
                        close(fd);
                        reset_response();
                        fd = dial();
                        continue;
                }
                long long t1 = now_us();
                if (stream)
                        printf("%lld %lld\n", first - t0, t1 - t0);
                else
                        printf("%lld\n", t1 - t0);
        }
        if (errors)
                fprintf(stderr, "errors %d\n", errors);
        return errors > n / 10; /* a few are reported; many mean the run says nothing */
}

typedef struct Stream {
        int fd;
        long long last, worst;
        int seen;
        bool done;
        char tail[16];
} Stream;

static int run_streams(int c, int chunks, int gap) {
        Stream *s = calloc((size_t)c, sizeof(Stream));
        struct epoll_event ev, evs[512];
        int ep = epoll_create1(0), left = c;
        char req[512], buf[1 << 16];
        int l = request(req, sizeof(req), true, chunks, gap);
        long long t0;

        for (int i = 0; i < c; i++) {
                s[i].fd = dial();
                ev = (struct epoll_event){.events = EPOLLIN, .data.u32 = (uint32_t)i};
                epoll_ctl(ep, EPOLL_CTL_ADD, s[i].fd, &ev);
        }
        t0 = now_us();
        for (int i = 0; i < c; i++) {
                if (send(s[i].fd, req, (size_t)l, 0) != l)
                        return 1;
                s[i].last = t0;
        }
        while (left > 0) {
                int n = epoll_wait(ep, evs, 512, 60000);
                if (n <= 0) {
                        fprintf(stderr, "streams: stalled with %d left\n", left);
                        return 1;
                }
                for (int j = 0; j < n; j++) {
                        Stream *x = &s[evs[j].data.u32];
                        ssize_t k = recv(x->fd, buf, sizeof(buf) - 1, MSG_DONTWAIT);
                        long long t = now_us();
                        if (k <= 0) {
                                if (!x->done) {
                                        fprintf(stderr, "streams: a stream ended early\n");
                                        return 1;
                                }
                                continue;
                        }
                        buf[k] = 0;
                        int events = 0;
                        for (char *p = buf; (p = strstr(p, "data: ")); p += 6)
                                events++;
                        if (events > 0) {
                                /* the first gap includes the request's trip, not an inter-chunk delay */
                                if (x->seen > 0 && t - x->last > x->worst)
                                        x->worst = t - x->last;
                                x->last = t;
                                x->seen += events;
                        }
                        if (!x->done && strstr(buf, "[DONE]")) {
                                x->done = true;
                                left--;
                        }
                }
        }
        long long total = now_us() - t0, worst = 0;
        for (int i = 0; i < c; i++)
                if (s[i].worst > worst)
                        worst = s[i].worst;
        printf("%lld %lld\n", total, worst);
        for (int i = 0; i < c; i++)
                printf("%lld\n", s[i].worst);
        return 0;
}

static int run_idle(int c) {
        int *fds = calloc((size_t)c, sizeof(int));
        const char req[] = "GET /health HTTP/1.1\r\nHost: bench\r\n\r\n";
        char buf[4096];

        for (int i = 0; i < c; i++) {
                long long first;
                fds[i] = dial();
                if (send(fds[i], req, sizeof(req) - 1, 0) != (ssize_t)sizeof(req) - 1 ||
                    read_response(fds[i], &first) < 0) {
                        fprintf(stderr, "idle: connection %d failed\n", i);
                        return 1;
                }
        }
        printf("ready\n");
        fflush(stdout);
        while (read(0, buf, sizeof(buf)) > 0)
                ;
        return 0;
}

/* C streaming requests for MODEL that wait for their engine: holds them once each has had a keepalive
 * comment (so modelgate's early 200 and its comments are flowing). */
static int run_waiting(int c) {
        int *fds = calloc((size_t)c, sizeof(int)), ep = epoll_create1(0), left = c;
        bool *seen = calloc((size_t)c, sizeof(bool));
        struct epoll_event ev, evs[512];
        char req[512], buf[4096];
        int l = request(req, sizeof(req), true, 8, 0);

        for (int i = 0; i < c; i++) {
                fds[i] = dial();
                if (send(fds[i], req, (size_t)l, 0) != l)
                        return 1;
                ev = (struct epoll_event){.events = EPOLLIN, .data.u32 = (uint32_t)i};
                epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &ev);
        }
        while (left > 0) {
                int n = epoll_wait(ep, evs, 512, 60000);
                if (n <= 0) {
                        fprintf(stderr, "waiting: no keepalive comment within 60 s (%d left)\n", left);
                        return 1;
                }
                for (int j = 0; j < n; j++) {
                        int i = (int)evs[j].data.u32;
                        ssize_t k = recv(fds[i], buf, sizeof(buf) - 1, MSG_DONTWAIT);
                        if (k <= 0) {
                                fprintf(stderr, "waiting: a connection ended\n");
                                return 1;
                        }
                        buf[k] = 0;
                        if (!seen[i] && strstr(buf, ": waiting for")) {
                                seen[i] = true;
                                left--;
                        }
                }
        }
        printf("ready\n");
        fflush(stdout);
        /* keep reading (the comments keep coming) until told to stop */
        for (;;) {
                struct pollfd pfd = {.fd = 0, .events = POLLIN};
                if (poll(&pfd, 1, 0) > 0 && read(0, buf, sizeof(buf)) <= 0)
                        return 0;
                int n = epoll_wait(ep, evs, 512, 200);
                for (int j = 0; j < n; j++)
                        (void)recv(fds[evs[j].data.u32], buf, sizeof(buf), MSG_DONTWAIT);
        }
}

int main(int argc, char **argv) {
        if (argc < 4) {
                fprintf(stderr, "usage: client latency|plain|streams|idle PORT N [CHUNKS GAP]\n");
                return 2;
        }
        port = atoi(argv[2]);
        if (strcmp(argv[1], "latency") == 0)
                return run_sequential(atoi(argv[3]), true);
        if (strcmp(argv[1], "plain") == 0) {
                if (argc >= 5)
                        model = argv[4];
                return run_sequential(atoi(argv[3]), false);
        }
        if (strcmp(argv[1], "streams") == 0 && argc >= 6)
                return run_streams(atoi(argv[3]), atoi(argv[4]), atoi(argv[5]));
        if (strcmp(argv[1], "idle") == 0)
                return run_idle(atoi(argv[3]));
        if (strcmp(argv[1], "waiting") == 0 && argc >= 5) {
                model = argv[4];
                return run_waiting(atoi(argv[3]));
        }
        return 2;
}
