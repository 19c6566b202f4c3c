/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The benchmark's client, in C so that microseconds are the proxies', not the client's.
 *
 *   client latency PORT N [MODEL...] N streaming requests, one after another on one keep-alive
 *                                    connection, naming the MODELs in turn; prints "first_us end_us"
 *                                    per request (time to the first SSE byte and to the end of the
 *                                    stream)
 *   client plain PORT N [MODEL]      the same with non-streaming requests; prints "end_us"
 *   client get PORT N PATH           N GET PATH one after another; prints "end_us"
 *   client trickle PORT MS GIVEUP MODEL...
 *                                    a streaming request every MS ms, each on a new connection,
 *                                    naming the MODELs in turn, each read until it ends or, after
 *                                    GIVEUP ms (0: never), abandoned (closed); when stdin closes
 *                                    prints per model "MODEL sent N status S:count... ended E
 *                                    gave-up G open O"
 *   client streams PORT C CHUNKS GAP C concurrent streams of CHUNKS chunks GAP µs apart; prints
 *                                    "total_us worst_gap_us" and, per stream, its largest gap
 *   client idle PORT C               C keep-alive connections that made one request each and stay
 *                                    open; prints "ready", then holds them until stdin closes
 *   client waiting PORT C MODEL      C streaming requests for MODEL that wait for their engine; prints
 *                                    "ready" once each has had a keepalive comment, holds them until
 *                                    stdin closes
 *   client blast PORT MODEL          one streaming request for MODEL with ?blast=1 (the upstream sends
 *                                    without end, as fast as it can), read as fast as it comes until
 *                                    stdin closes; prints "bytes seconds"
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
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

static int port;

static long long now_us(void) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        return (long long)t.tv_sec * 1000000 + t.tv_nsec / 1000;
}

static int dial(void) {
        struct sockaddr_in a = {.sin_family = AF_INET,
                                .sin_port = htons((uint16_t)port),
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
        snprintf(body, sizeof(body),
                 "{\"model\":\"%s\",%s\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", model,
                 stream ? "\"stream\":true," : "");
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

/* n requests, one after another on a keep-alive connection, the k-th being reqs[k % n_reqs] */
static int run_sequential(int n, char **reqs, int n_reqs, bool stream) {
        int fd = dial(), errors = 0;

        for (int i = 0; i < n; i++) {
                const char *req = reqs[i % n_reqs];
                ssize_t l = (ssize_t)strlen(req);
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

static int run_models(int n, char **models, int n_models, bool stream) {
        char **reqs = calloc((size_t)n_models, sizeof(char *));

        for (int i = 0; i < n_models; i++) {
                model = models[i];
                reqs[i] = malloc(512);
                request(reqs[i], 512, stream, 8, 0);
        }
        return run_sequential(n, reqs, n_models, stream);
}

static int run_get(int n, const char *path) {
        char *req = NULL;

        if (asprintf(&req, "GET %s HTTP/1.1\r\nHost: bench\r\n\r\n", path) < 0)
                return 1;
        return run_sequential(n, &req, 1, false);
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

typedef struct Trickle {
        int model, status;
        bool open;
        long long since;
        char tail[16]; /* the last bytes read, so that an end marker split over two reads is seen */
} Trickle;

typedef struct TrickleModel {
        int sent, ended, gave_up, codes[8], counts[8], n_codes;
} TrickleModel;

#define TRICKLE_MAX 65536

static Trickle *trickles;
static TrickleModel *trickle_models;
static int trickle_top; /* one past the highest descriptor used */

static void trickle_status(TrickleModel *m, int status) {
        for (int i = 0; i < m->n_codes; i++)
                if (m->codes[i] == status) {
                        m->counts[i]++;
                        return;
                }
        if (m->n_codes < 8) {
                m->codes[m->n_codes] = status;
                m->counts[m->n_codes++] = 1;
        }
}

/* Bytes of one trickle request's answer: its status is counted, and it ends at the end of the stream, at
 * an error status (the answer to it is not read further) or when the proxy closes. */
static void trickle_read(int fd) {
        Trickle *t = &trickles[fd];
        TrickleModel *m = &trickle_models[t->model];
        char buf[16384 + sizeof(t->tail)];
        size_t tl = strlen(t->tail);
        ssize_t k;

        memcpy(buf, t->tail, tl);
        k = recv(fd, buf + tl, sizeof(buf) - tl - 1, MSG_DONTWAIT);
        if (k < 0 && errno == EAGAIN)
                return;
        if (k > 0) {
                buf[tl + (size_t)k] = 0;
                if (!t->status && strncmp(buf, "HTTP/1.1 ", 9) == 0) {
                        t->status = atoi(buf + 9);
                        trickle_status(m, t->status);
                }
                size_t all = tl + (size_t)k, keep = all < sizeof(t->tail) - 1 ? all : sizeof(t->tail) - 1;
                memmove(t->tail, buf + all - keep, keep);
                t->tail[keep] = 0;
                if (t->status == 200 && !strstr(buf, "[DONE]") && !strstr(buf, "\r\n0\r\n\r\n"))
                        return;
        }
        if (!t->status)
                trickle_status(m, 0); /* closed without an answer */
        t->open = false;
        m->ended++;
        close(fd);
}

/* A client with a timeout: an answer that has not ended after giveup_ms is abandoned (closed). */
static void trickle_give_up(long long giveup_ms) {
        long long now = now_us();

        for (int fd = 0; fd < trickle_top; fd++) {
                Trickle *t = &trickles[fd];
                if (!t->open || now - t->since < giveup_ms * 1000)
                        continue;
                t->open = false;
                trickle_models[t->model].gave_up++;
                close(fd);
        }
}

static int trickle_send(int ep, const char *m, int model_index) {
        struct epoll_event ev = {.events = EPOLLIN};
        char req[512];
        int c = dial(), l;

        if (c >= TRICKLE_MAX)
                return -1;
        model = m;
        l = request(req, sizeof(req), true, 8, 0);
        trickles[c] = (Trickle){.model = model_index, .open = true, .since = now_us()};
        trickle_models[model_index].sent++;
        if (c >= trickle_top)
                trickle_top = c + 1;
        if (send(c, req, (size_t)l, 0) != l)
                return -1;
        ev.data.fd = c;
        return epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev);
}

static void trickle_print(char **models, int n_models) {
        for (int i = 0; i < n_models; i++) {
                TrickleModel *m = &trickle_models[i];
                printf("%s sent %d status", models[i], m->sent);
                for (int c = 0; c < m->n_codes; c++)
                        printf(" %d:%d", m->codes[c], m->counts[c]);
                printf(" ended %d gave-up %d open %d\n", m->ended, m->gave_up,
                       m->sent - m->ended - m->gave_up);
        }
}

static int run_trickle(int ms, int giveup_ms, char **models, int n_models) {
        struct itimerspec its = {{ms / 1000, (ms % 1000) * 1000000L}, {ms / 1000, (ms % 1000) * 1000000L}};
        int ep = epoll_create1(0), tfd = timerfd_create(CLOCK_MONOTONIC, 0), next = 0;
        struct epoll_event ev = {.events = EPOLLIN, .data.fd = 0}, evs[256];
        char buf[512];

        trickles = calloc(TRICKLE_MAX, sizeof(Trickle));
        trickle_models = calloc((size_t)n_models, sizeof(TrickleModel));
        epoll_ctl(ep, EPOLL_CTL_ADD, 0, &ev);
        ev.data.fd = tfd;
        epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &ev);
        timerfd_settime(tfd, 0, &its, NULL);
        for (;;) {
                int n = epoll_wait(ep, evs, 256, -1);
                for (int j = 0; j < n; j++) {
                        int fd = evs[j].data.fd;
                        if (fd == 0 && read(0, buf, sizeof(buf)) <= 0) {
                                trickle_print(models, n_models);
                                return 0;
                        }
                        if (fd == tfd) {
                                uint64_t x;
                                (void)!read(tfd, &x, sizeof(x));
                                if (giveup_ms > 0)
                                        trickle_give_up(giveup_ms);
                                if (trickle_send(ep, models[next], next) < 0)
                                        return 1;
                                next = (next + 1) % n_models;
                        } else if (fd > 0 && trickles[fd].open)
                                trickle_read(fd);
                }
        }
}

static int run_blast(const char *m) {
        static char buf[1 << 20];
        char req[512], body[256];
        int fd = dial();
        long long t0 = now_us(), got = 0;
        struct pollfd p[2] = {{.fd = fd, .events = POLLIN}, {.fd = 0, .events = POLLIN}};

        snprintf(body, sizeof(body), "{\"model\":\"%s\",\"stream\":true,\"messages\":[]}", m);
        int l = snprintf(req, sizeof(req),
                         "POST /v1/chat/completions?blast=1 HTTP/1.1\r\nHost: bench\r\n"
                         "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                         strlen(body), body);
        if (send(fd, req, (size_t)l, 0) != l)
                return 1;
        for (;;) {
                if (poll(p, 2, -1) < 0)
                        continue;
                if (p[1].revents) {
                        if (read(0, buf, sizeof(buf)) <= 0)
                                break;
                }
                if (p[0].revents) {
                        ssize_t k = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
                        if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR)) {
                                fprintf(stderr, "the stream ended\n");
                                break;
                        }
                        if (k > 0)
                                got += k;
                }
        }
        printf("%lld %.3f\n", got, (now_us() - t0) / 1e6);
        close(fd);
        return 0;
}

int main(int argc, char **argv) {
        static char *dflt[] = {"b-m"};

        if (argc < 4) {
                fprintf(stderr, "usage: client latency|plain|get|streams|idle|waiting|trickle|blast PORT N ...\n");
                return 2;
        }
        port = atoi(argv[2]);
        if (strcmp(argv[1], "latency") == 0)
                return argc >= 5 ? run_models(atoi(argv[3]), argv + 4, argc - 4, true)
                                 : run_models(atoi(argv[3]), dflt, 1, true);
        if (strcmp(argv[1], "plain") == 0)
                return run_models(atoi(argv[3]), argc >= 5 ? argv + 4 : dflt, 1, false);
        if (strcmp(argv[1], "get") == 0 && argc >= 5)
                return run_get(atoi(argv[3]), argv[4]);
        if (strcmp(argv[1], "streams") == 0 && argc >= 6)
                return run_streams(atoi(argv[3]), atoi(argv[4]), atoi(argv[5]));
        if (strcmp(argv[1], "idle") == 0)
                return run_idle(atoi(argv[3]));
        if (strcmp(argv[1], "waiting") == 0 && argc >= 5) {
                model = argv[4];
                return run_waiting(atoi(argv[3]));
        }
        if (strcmp(argv[1], "blast") == 0)
                return run_blast(argv[3]);
        if (strcmp(argv[1], "trickle") == 0 && argc >= 6)
                return run_trickle(atoi(argv[3]), atoi(argv[4]), argv + 5, argc - 5);
        return 2;
}
