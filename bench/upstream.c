/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The benchmark's upstream: a small, fast llama-server stand-in (one thread, epoll), so that the
 * proxies are what is measured, not the Python double.
 *
 *   GET  /health                 {"status":"ok"}
 *   GET  /models                 a one-model list
 *   GET  /models/sse             an event stream that stays open, with a comment every 15 s (as a
 *                                llama-server router's feed: a proxy follows it)
 *   POST /v1/chat/completions    body with "stream":true → SSE: N chunks (default 8) then
 *                                "data: [DONE]", chunked, kept alive; else a small JSON answer.
 *                                ?n=N sets the chunk count, ?gap_us=U the time between chunks;
 *                                ?blast=1 streams 16 KiB chunks as fast as the socket takes them,
 *                                without end (a host streaming at full speed)
 *
 * usage: upstream PORT [stall=K | blackhole | flood=N]
 *   stall=K    every stream stops after K chunks and the connection stays open, silent (an engine
 *              that hangs mid-answer); everything else answers as usual
 *   blackhole  accepts connections and never reads or answers (a host that hangs); a connection is
 *              closed only when its peer closes it
 *   flood=N    /models lists N models (f0..f{N-1}, and m); after SIGUSR1 every /models/sse connection
 *              gets status_change events naming them in turn (loading, then loaded) as fast as its
 *              socket takes them, until SIGUSR2 (a host flooding its feed); no keepalive comments */

#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define MAXC 65536

typedef struct Conn {
        int fd;
        char in[16384];
        size_t n_in;
        /* a stream in progress */
        int chunks_left;
        long gap_us;
        long long next_at;
        int stall_left; /* chunks before it stalls; -1: never */
        /* nothing more is answered on it: a feed, or a stalled stream */
        bool held, feed;
        /* written from a block repeated without end while its socket takes it (EPOLLOUT) */
        bool blast, flooding;
        size_t off; /* into the block */
} Conn;

#define FEED_COMMENT_SEC 15

static Conn *conns[MAXC];
static int streams[MAXC]; /* fds with a stream in progress */
static size_t n_streams;
static int feeds[MAXC]; /* fds following /models/sse */
static size_t n_feeds;
static int ep, tick_fd;
static int stall_after = -1;
static int flood_models = -1; /* flood=N */
static volatile sig_atomic_t flood_on;
static char *flood_block, *blast_block, *flood_list;
static size_t flood_len, blast_len;

static long long now_us(void) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        return (long long)t.tv_sec * 1000000 + t.tv_nsec / 1000;
}

static void conn_close(Conn *c) {
        if (c->feed)
                for (size_t j = 0; j < n_feeds; j++)
                        if (feeds[j] == c->fd) {
                                feeds[j] = feeds[--n_feeds];
                                break;
                        }
        close(c->fd);
        conns[c->fd] = NULL;
        free(c);
}

static int send_all(Conn *c, const char *p, size_t n) {
        while (n > 0) {
                ssize_t k = send(c->fd, p, n, MSG_NOSIGNAL);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN) {
                                /* the benchmark's clients read: a short block is fine here */
                                struct timespec ts = {0, 100000};
                                nanosleep(&ts, NULL);
                                continue;
                        }
                        return -1;
                }
                p += k;
                n -= (size_t)k;
        }
        return 0;
}

static const char chunk_json[] =
        "data: "
        "{\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\","
        "\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok \"},\"finish_reason\":null}]}\n\n";

static int send_chunk(Conn *c) {
        char buf[512];
        int n;

        if (c->chunks_left > 0) {
                n = snprintf(buf, sizeof(buf), "%zx\r\n%s\r\n", sizeof(chunk_json) - 1, chunk_json);
                c->chunks_left--;
        } else {
                static const char done[] = "data: [DONE]\n\n";
                n = snprintf(buf, sizeof(buf), "%zx\r\n%s\r\n0\r\n\r\n", sizeof(done) - 1, done);
                c->chunks_left = -1;
        }
        return send_all(c, buf, (size_t)n);
}

/* The chunks that are due; -1 when the peer is gone and c is closed (freed: not to be looked at again) */
static int stream_run(Conn *c) {
        while (c->chunks_left >= 0 && (c->gap_us == 0 || now_us() >= c->next_at)) {
                if (c->stall_left == 0) {
                        c->chunks_left = -1;
                        c->held = true;
                        return 0;
                }
                if (c->stall_left > 0)
                        c->stall_left--;
                if (send_chunk(c) < 0) {
                        conn_close(c);
                        return -1;
                }
                c->next_at += c->gap_us;
        }
        return 0;
}

/* The tick runs only while a stream waits for its next chunk: fifty idle upstreams on a small machine
 * must not take the CPU the proxies are measured with. */
static void tick_arm(bool on) {
        struct itimerspec its = {{0, on ? 200000 : 0}, {0, on ? 200000 : 0}};
        timerfd_settime(tick_fd, 0, &its, NULL);
}

static void stream_add(Conn *c) {
        if (n_streams == 0)
                tick_arm(true);
        streams[n_streams++] = c->fd;
}

static void tick(void) {
        uint64_t x;
        size_t k = 0, n0 = n_streams;

        (void)!read(tick_fd, &x, sizeof(x));
        for (size_t j = 0; j < n0; j++) {
                int f = streams[j];
                Conn *c = conns[f];
                if (!c || c->chunks_left < 0)
                        continue;
                if (stream_run(c) == 0 && c->chunks_left >= 0)
                        streams[k++] = f;
        }
        /* streams started meanwhile were appended after n0 */
        for (size_t j = n0; j < n_streams; j++)
                streams[k++] = streams[j];
        n_streams = k;
        if (n_streams == 0)
                tick_arm(false);
}

static void feed_comment(int fd) {
        static const char comment[] = "d\r\n: keepalive\n\n\r\n";
        uint64_t x;

        (void)!read(fd, &x, sizeof(x));
        if (flood_models >= 0)
                return; /* a comment could land inside a flood's chunk */
        /* backwards: a failed send closes the connection, which takes it out of the list */
        for (size_t j = n_feeds; j-- > 0;) {
                Conn *c = conns[feeds[j]];
                if (send_all(c, comment, sizeof(comment) - 1) < 0)
                        conn_close(c);
        }
}

static int send_json(Conn *c, const char *body) {
        char buf[1024];
        int n = snprintf(
                buf, sizeof(buf),
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                strlen(body), body);
        return send_all(c, buf, (size_t)n);
}

static long query_num(const char *line, const char *key, long dflt) {
        const char *q = strchr(line, '?'), *sp = strchr(line + 5, ' ');
        size_t kl = strlen(key);
        for (const char *p = q; p && p < sp; p = strchr(p + 1, '&')) {
                if (strncmp(p + 1, key, kl) == 0 && p[1 + kl] == '=')
                        return atol(p + 2 + kl);
                if (!strchr(p + 1, '&'))
                        break;
        }
        return dflt;
}

static char *chunk_of(const char *data, size_t n, size_t *ret_len) {
        char *b = malloc(n + 32);
        int h = sprintf(b, "%zx\r\n", n);
        memcpy(b + h, data, n);
        memcpy(b + h + n, "\r\n", 2);
        *ret_len = (size_t)h + n + 2;
        return b;
}

static void make_blocks(void) {
        size_t cap = 2 * (size_t)(flood_models > 0 ? flood_models : 1) * 200 + 64, n = 0;
        char *ev = malloc(cap), data[16384 + 64];

        /* each model loading, then each loaded: one chunk of events, repeated */
        for (int i = 0; flood_models > 0 && i < 2 * flood_models; i++)
                n += (size_t)sprintf(ev + n,
                                     i < flood_models
                                             ? "data: {\"model\":\"f%d\",\"event\":\"status_change\",\"data\":"
                                               "{\"status\":\"loading\",\"progress\":{\"stages\":[\"text_model\"],"
                                               "\"current\":\"text_model\",\"value\":0.5}}}\n\n"
                                             : "data: {\"model\":\"f%d\",\"event\":\"status_change\",\"data\":"
                                               "{\"status\":\"loaded\"}}\n\n",
                                     i % flood_models);
        flood_block = chunk_of(ev, n, &flood_len);
        free(ev);
        n = (size_t)sprintf(data, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"");
        memset(data + n, 'x', 16000);
        n += 16000;
        n += (size_t)sprintf(data + n, "\"}}]}\n\n");
        blast_block = chunk_of(data, n, &blast_len);

        if (flood_models > 0) {
                size_t lcap = (size_t)flood_models * 120 + 256, l = 0;
                flood_list = malloc(lcap);
                l += (size_t)sprintf(flood_list, "{\"object\":\"list\",\"data\":[{\"id\":\"m\",\"object\":\"model\","
                                                  "\"status\":{\"value\":\"loaded\"}}");
                for (int i = 0; i < flood_models; i++)
                        l += (size_t)sprintf(flood_list + l,
                                             ",{\"id\":\"f%d\",\"object\":\"model\",\"owned_by\":\"llamacpp\","
                                             "\"status\":{\"value\":\"unloaded\",\"args\":[\"llama-server\"]}}",
                                             i);
                sprintf(flood_list + l, "]}");
        }
}

static void want_out(Conn *c, bool on) {
        struct epoll_event ev = {.events = EPOLLIN | (on ? EPOLLOUT : 0), .data.fd = c->fd};
        epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
}

/* A blast or a flood: its block again and again while the socket takes it; a flood stops at the end of
 * a block once it is switched off */
static void on_writable(Conn *c) {
        const char *b = c->blast ? blast_block : flood_block;
        size_t n = c->blast ? blast_len : flood_len;

        for (;;) {
                if (!c->blast && c->off == 0 && !flood_on) {
                        c->flooding = false;
                        want_out(c, false);
                        return;
                }
                ssize_t k = send(c->fd, b + c->off, n - c->off, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno != EAGAIN)
                                conn_close(c);
                        return;
                }
                c->off = (c->off + (size_t)k) % n;
        }
}

static void flood_switch(void) {
        static bool was;

        if (was == (bool)flood_on)
                return;
        was = flood_on;
        for (size_t j = 0; flood_on && j < n_feeds; j++) {
                Conn *c = conns[feeds[j]];
                if (!c->flooding) {
                        c->flooding = true;
                        want_out(c, true);
                }
        }
}

static void on_signal(int sig) {
        flood_on = sig == SIGUSR1;
}

/* One complete request in c->in: answer it. Returns bytes used, 0 for "incomplete", -1 to close. */
static ssize_t handle(Conn *c) {
        char *end = memmem(c->in, c->n_in, "\r\n\r\n", 4);
        size_t head, body = 0, total;
        char *cl;
        static const char health[] = "{\"status\":\"ok\"}";
        static const char models[] = "{\"object\":\"list\",\"data\":[{\"id\":\"m\",\"object\":\"model\","
                                     "\"status\":{\"value\":\"loaded\"}}]}";
        static const char answer[] = "{\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion\",\"created\":"
                                     "1,\"model\":\"m\",\"choices\":"
                                     "[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"tok "
                                     "tok tok tok\"},\"finish_reason\":"
                                     "\"stop\"}],\"usage\":{\"total_tokens\":4}}";
        static const char sse_head[] = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                                       "Transfer-Encoding: chunked\r\n\r\n";

        if (!end)
                return c->n_in >= sizeof(c->in) ? -1 : 0;
        head = (size_t)(end - c->in) + 4;
        *end = 0;
        cl = strcasestr(c->in, "\r\ncontent-length:");
        if (cl)
                body = (size_t)atol(cl + 17);
        total = head + body;
        if (total > sizeof(c->in))
                return -1;
        if (c->n_in < total) {
                *end = '\r';
                return 0;
        }
        if (strncmp(c->in, "GET /health", 11) == 0) {
                if (send_json(c, health) < 0)
                        return -1;
        } else if (strncmp(c->in, "GET /models/sse", 15) == 0) {
                if (send_all(c, sse_head, sizeof(sse_head) - 1) < 0)
                        return -1;
                c->held = c->feed = true;
                feeds[n_feeds++] = c->fd;
                if (flood_on) {
                        c->flooding = true;
                        want_out(c, true);
                }
        } else if (strncmp(c->in, "GET /models", 11) == 0) {
                if (flood_list) {
                        char head[256];
                        int h = snprintf(head, sizeof(head),
                                         "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                                         "%zu\r\n\r\n",
                                         strlen(flood_list));
                        if (send_all(c, head, (size_t)h) < 0 || send_all(c, flood_list, strlen(flood_list)) < 0)
                                return -1;
                } else if (send_json(c, models) < 0)
                        return -1;
        } else if (memmem(c->in + head, body, "\"stream\":true", 13) && query_num(c->in, "blast", 0)) {
                if (send_all(c, sse_head, sizeof(sse_head) - 1) < 0)
                        return -1;
                c->held = c->blast = true;
                want_out(c, true);
        } else if (memmem(c->in + head, body, "\"stream\":true", 13)) {
                if (send_all(c, sse_head, sizeof(sse_head) - 1) < 0)
                        return -1;
                c->chunks_left = (int)query_num(c->in, "n", 8);
                c->gap_us = query_num(c->in, "gap_us", 0);
                c->next_at = now_us();
                c->stall_left = stall_after;
                if (stream_run(c) < 0)
                        return -2; /* closed */
                if (c->chunks_left >= 0)
                        stream_add(c);
        } else if (send_json(c, answer) < 0)
                return -1;
        return (ssize_t)total;
}

/* A feed or a stalled stream: whatever the peer sends is dropped; its close closes ours. */
static void on_readable_held(Conn *c) {
        char buf[4096];
        for (;;) {
                ssize_t k = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT);
                if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR)) {
                        conn_close(c);
                        return;
                }
                if (k < 0)
                        return;
        }
}

static void on_readable(Conn *c) {
        if (c->held) {
                on_readable_held(c);
                return;
        }
        for (;;) {
                ssize_t k = recv(c->fd, c->in + c->n_in, sizeof(c->in) - c->n_in, MSG_DONTWAIT);
                if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR)) {
                        conn_close(c);
                        return;
                }
                if (k < 0)
                        break;
                c->n_in += (size_t)k;
                while (c->chunks_left < 0 && !c->held && c->n_in > 0) {
                        ssize_t used = handle(c);
                        if (used == -2)
                                return;
                        if (used < 0) {
                                conn_close(c);
                                return;
                        }
                        if (used == 0)
                                break;
                        memmove(c->in, c->in + used, c->n_in - (size_t)used);
                        c->n_in -= (size_t)used;
                }
                if (c->n_in == sizeof(c->in))
                        break;
        }
}

static bool blackhole;

static void on_accept(int lfd) {
        struct epoll_event ev;
        int c, one = 1;

        while ((c = accept4(lfd, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                if (c >= MAXC) {
                        close(c);
                        continue;
                }
                setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
                Conn *cn = calloc(1, sizeof(Conn));
                cn->fd = c;
                cn->chunks_left = -1;
                /* a blackhole never reads: it only hears of the peer's close (EPOLLIN is not asked for) */
                cn->held = blackhole;
                conns[c] = cn;
                ev = (struct epoll_event){.events = blackhole ? EPOLLRDHUP : EPOLLIN, .data.fd = c};
                epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev);
        }
}

static int listen_on(int port) {
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        int lfd, one = 1;

        a.sin_port = htons((uint16_t)port);
        lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(lfd, 4096) < 0) {
                perror("bind");
                exit(1);
        }
        return lfd;
}

static void watch(int fd) {
        struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
        epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
}

int main(int argc, char **argv) {
        struct epoll_event evs[256];
        struct itimerspec feed_its = {{FEED_COMMENT_SEC, 0}, {FEED_COMMENT_SEC, 0}};
        int lfd, feed_fd;

        if (argc < 2) {
                fprintf(stderr, "usage: %s PORT [stall=K | blackhole | flood=N]\n", argv[0]);
                return 2;
        }
        if (argc >= 3 && strncmp(argv[2], "stall=", 6) == 0)
                stall_after = atoi(argv[2] + 6);
        else if (argc >= 3 && strncmp(argv[2], "flood=", 6) == 0)
                flood_models = atoi(argv[2] + 6);
        else if (argc >= 3 && strcmp(argv[2], "blackhole") == 0)
                blackhole = true;
        else if (argc >= 3) {
                fprintf(stderr, "unknown mode %s\n", argv[2]);
                return 2;
        }
        signal(SIGPIPE, SIG_IGN);
        make_blocks();
        {
                struct sigaction sa = {.sa_handler = on_signal};
                sigaction(SIGUSR1, &sa, NULL);
                sigaction(SIGUSR2, &sa, NULL);
        }
        lfd = listen_on(atoi(argv[1]));
        ep = epoll_create1(0);
        watch(lfd);
        /* streams with a gap between chunks are served from a 200 µs tick, armed while there are any */
        tick_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
        watch(tick_fd);
        feed_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
        timerfd_settime(feed_fd, 0, &feed_its, NULL);
        watch(feed_fd);

        for (;;) {
                int n = epoll_wait(ep, evs, 256, -1);
                flood_switch(); /* a signal ends the wait (EINTR, n < 0) */
                for (int i = 0; i < n; i++) {
                        int fd = evs[i].data.fd;
                        if (fd != lfd && fd != tick_fd && fd != feed_fd && conns[fd] && (evs[i].events & EPOLLOUT)) {
                                on_writable(conns[fd]);
                                if (!conns[fd] || !(evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
                                        continue;
                        }
                        if (fd == lfd)
                                on_accept(lfd);
                        else if (fd == tick_fd)
                                tick();
                        else if (fd == feed_fd)
                                feed_comment(feed_fd);
                        else if (conns[fd] && blackhole)
                                conn_close(conns[fd]);
                        else if (conns[fd])
                                on_readable(conns[fd]);
                }
        }
}
