/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A connection to Redis that no reply of its peer can take the process down with: see redis-conn.h. */

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "modelgated/access/redis-conn.h"
#include "shared/buffer.h"
#include "shared/log.h"
#include "shared/macro.h"

#define READ_SIZE (16 * 1024)

typedef enum RedisState {
        REDIS_DOWN,
        REDIS_CONNECTING,
        REDIS_AUTH, /* connected; AUTH sent */
        REDIS_READY,
} RedisState;

typedef struct Pending Pending;
struct Pending {
        Pending *next;
        RedisReplyHandler handler;
        void *userdata;
        usec_t sent;
};

struct RedisConn {
        sd_event *event;
        char *target, *password;
        RedisState state;
        int fd;
        sd_event_source *io, *watchdog;
        usec_t connect_started;
        redisReader *reader;
        const char *refused; /* why the caps refused what the reader read */
        Buffer out;
        Pending *head, *tail; /* oldest first: the next reply is head's */
        const RedisConnCallbacks *cb;
        void *userdata;
};

/* hiredis's own functions that make replies, but for arrays: at most REDIS_REPLY_ELEMENTS_MAX scalars, as
 * EVAL of rule:shared-counts's script and AUTH answer (a count a peer gives is otherwise allocated before
 * any of it arrives). createArray()'s count is an int before hiredis 1.0. */
#if HIREDIS_MAJOR >= 1
typedef size_t elements_t;
#else
typedef int elements_t;
#endif
static redisReplyObjectFunctions capped_fn;
static void *(*default_create_array)(const redisReadTask *task, elements_t elements);

static void *create_array(const redisReadTask *task, elements_t elements) {
        RedisConn *rc = task->privdata;

        /* (a count past INT_MAX reaches hiredis 0.14's int cut short, maybe below zero) */
        if (task->parent || (long long)elements < 0 || (long long)elements > REDIS_REPLY_ELEMENTS_MAX) {
                if (rc)
                        rc->refused = "an array nested, or of more than 16 elements";
                return NULL;
        }
        return default_create_array(task, elements);
}

static redisReader *reader_new(RedisConn *rc) {
        redisReader *r;

        if (!capped_fn.createArray) {
                redisReader *defaults = redisReaderCreate();
                if (!defaults)
                        return NULL;
                capped_fn = *defaults->fn;
                redisReaderFree(defaults);
                default_create_array = capped_fn.createArray;
                capped_fn.createArray = create_array;
        }
        r = redisReaderCreateWithFunctions(&capped_fn);
        if (r)
                r->privdata = rc;
        return r;
}

static void io_update(RedisConn *rc) {
        uint32_t events = rc->state == REDIS_CONNECTING
                                  ? EPOLLOUT
                                  : EPOLLIN | (buffer_is_empty(&rc->out) ? 0 : EPOLLOUT);
        (void)sd_event_source_set_io_events(rc->io, events);
}

/* Each command waits at most REDIS_ANSWER_TIMEOUT_USEC from when it was sent; so does a connection */
static void watchdog_update(RedisConn *rc) {
        usec_t since = rc->state == REDIS_CONNECTING ? rc->connect_started : rc->head ? rc->head->sent : 0;

        if (since == 0) {
                (void)sd_event_source_set_enabled(rc->watchdog, SD_EVENT_OFF);
                return;
        }
        (void)sd_event_source_set_time(rc->watchdog, since + REDIS_ANSWER_TIMEOUT_USEC);
        (void)sd_event_source_set_enabled(rc->watchdog, SD_EVENT_ONESHOT);
}

static void conn_close(RedisConn *rc) {
        rc->io = sd_event_source_disable_unref(rc->io);
        rc->fd = safe_close(rc->fd);
        if (rc->reader)
                redisReaderFree(rc->reader);
        rc->reader = NULL;
        rc->refused = NULL;
        buffer_clear(&rc->out);
        rc->state = REDIS_DOWN;
        (void)sd_event_source_set_enabled(rc->watchdog, SD_EVENT_OFF);
}

/* Every command still waiting hears NULL, in order; one that a handler sends meanwhile is refused */
static void pending_lost(RedisConn *rc) {
        while (rc->head) {
                Pending *p = rc->head;
                rc->head = p->next;
                if (!rc->head)
                        rc->tail = NULL;
                (void)p->handler(NULL, rc->userdata, p->userdata);
                free(p);
        }
}

/* The connection's end, and only its: why is copied before anything it may point into goes */
static void conn_fail(RedisConn *rc, const char *why, bool broken) {
        char w[256];

        snprintf(w, sizeof(w), "%s", why);
        conn_close(rc);
        pending_lost(rc);
        rc->cb->failed(w, broken, rc->userdata);
}

static int pending_add(RedisConn *rc, RedisReplyHandler handler, void *userdata) {
        Pending *p = calloc(1, sizeof(Pending));

        if (!p)
                return -ENOMEM;
        *p = (Pending){.handler = handler, .userdata = userdata, .sent = now_usec(CLOCK_MONOTONIC)};
        if (rc->tail)
                rc->tail->next = p;
        else
                rc->head = p;
        rc->tail = p;
        return 0;
}

static int command_queue(RedisConn *rc, int argc, const char **argv, RedisReplyHandler handler,
                         void *userdata) {
        char *cmd = NULL;
        int n = redisFormatCommandArgv(&cmd, argc, argv, NULL);

        if (n < 0)
                return -ENOMEM;
        int r = buffer_append(&rc->out, cmd, (size_t)n);
        redisFreeCommand(cmd);
        if (r < 0 || pending_add(rc, handler, userdata) < 0) {
                /* what was appended goes out with no one to hear its reply: the connection must end */
                if (r >= 0)
                        rc->out.end -= (size_t)n;
                return -ENOMEM;
        }
        if (rc->head == rc->tail)
                watchdog_update(rc);
        io_update(rc);
        return 0;
}

static const char *auth_reply(const redisReply *reply, void *conn_userdata, void *userdata) {
        RedisConn *rc = userdata;

        if (!reply)
                return NULL;
        if (reply->type == REDIS_REPLY_ERROR)
                return reply->str; /* WRONGPASS and the like, as Redis says it */
        if (reply->type != REDIS_REPLY_STATUS)
                return "an answer to AUTH that is not a status";
        rc->state = REDIS_READY;
        rc->cb->ready(rc->userdata);
        return NULL;
}

static void connected(RedisConn *rc) {
        int error = 0;
        socklen_t l = sizeof(error);

        if (getsockopt(rc->fd, SOL_SOCKET, SO_ERROR, &error, &l) < 0)
                error = errno;
        if (error != 0) {
                conn_fail(rc, strerror(error), false);
                return;
        }
        if (!(rc->reader = reader_new(rc))) {
                conn_fail(rc, "out of memory", false);
                return;
        }
        if (rc->password) {
                const char *argv[] = {"AUTH", rc->password};
                rc->state = REDIS_AUTH;
                if (command_queue(rc, 2, argv, auth_reply, rc) < 0)
                        conn_fail(rc, "out of memory", false);
                return;
        }
        rc->state = REDIS_READY;
        watchdog_update(rc);
        io_update(rc);
        rc->cb->ready(rc->userdata);
}

/* Every reply read so far, each to the command that has waited longest. false: the connection ended */
static bool replies_take(RedisConn *rc) {
        for (;;) {
                void *reply = NULL;
                if (redisReaderGetReply(rc->reader, &reply) != REDIS_OK) {
                        conn_fail(rc,
                                  rc->refused
                                          ?: rc->reader->errstr[0] ? rc->reader->errstr
                                                                   : "an answer that is not RESP",
                                  true);
                        return false;
                }
                if (!reply)
                        break;
                Pending *p = rc->head;
                if (!p) {
                        freeReplyObject(reply);
                        conn_fail(rc, "an answer to no command", true);
                        return false;
                }
                rc->head = p->next;
                if (!rc->head)
                        rc->tail = NULL;
                const char *why = p->handler(reply, rc->userdata, p->userdata);
                free(p);
                if (why) {
                        char w[256];
                        bool broken = ((redisReply *)reply)->type != REDIS_REPLY_ERROR;
                        snprintf(w, sizeof(w), "%s", why);
                        freeReplyObject(reply);
                        conn_fail(rc, w, broken);
                        return false;
                }
                freeReplyObject(reply);
        }
        /* what waits in the reader for the rest of a reply */
        if (rc->reader->len - rc->reader->pos > REDIS_REPLY_MAX) {
                conn_fail(rc, "an answer of more than 64 KiB", true);
                return false;
        }
        watchdog_update(rc);
        return true;
}

static void conn_read(RedisConn *rc) {
        char buf[READ_SIZE];
        ssize_t k = recv(rc->fd, buf, sizeof(buf), MSG_DONTWAIT);

        if (k < 0) {
                if (errno != EAGAIN && errno != EINTR)
                        conn_fail(rc, strerror(errno), false);
                return;
        }
        if (k == 0) {
                conn_fail(rc, "the connection was closed", false);
                return;
        }
        if (redisReaderFeed(rc->reader, buf, (size_t)k) != REDIS_OK) {
                conn_fail(rc, "out of memory", false);
                return;
        }
        (void)replies_take(rc);
}

static void conn_write(RedisConn *rc) {
        ssize_t k = send(rc->fd, buffer_peek(&rc->out), buffer_size(&rc->out), MSG_DONTWAIT | MSG_NOSIGNAL);

        if (k < 0) {
                if (errno != EAGAIN && errno != EINTR)
                        conn_fail(rc, strerror(errno), false);
                return;
        }
        buffer_consume(&rc->out, (size_t)k);
        io_update(rc);
}

static int io_cb(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        RedisConn *rc = userdata;

        if (rc->state == REDIS_CONNECTING) {
                connected(rc);
                return 0;
        }
        if (revents & (EPOLLIN | EPOLLHUP | EPOLLERR))
                conn_read(rc);
        if (rc->state != REDIS_DOWN && (revents & EPOLLOUT) && !buffer_is_empty(&rc->out))
                conn_write(rc);
        return 0;
}

static int watchdog_cb(sd_event_source *s, uint64_t usec, void *userdata) {
        RedisConn *rc = userdata;

        conn_fail(rc, rc->state == REDIS_CONNECTING ? "no connection within 2s" : "no answer within 2s",
                  false);
        return 0;
}

/* The socket for target, connecting (non-blocking); -errno */
static int socket_for(const char *target) {
        union {
                struct sockaddr sa;
                struct sockaddr_un un;
                struct sockaddr_in in;
                struct sockaddr_in6 in6;
        } a = {};
        socklen_t l;

        if (startswith(target, "unix:")) {
                if (strlen(target + 5) >= sizeof(a.un.sun_path))
                        return -ENAMETOOLONG;
                a.un.sun_family = AF_UNIX;
                strcpy(a.un.sun_path, target + 5);
                l = sizeof(a.un);
        } else {
                /* redis://ADDRESS[:PORT], a numeric address (conf-items.c): no lookup that would block */
                char host[64];
                const char *h = target + strlen("redis://"), *colon = strrchr(h, ':');
                int port = 6379;
                if (*h == '[') {
                        const char *end = strchr(h, ']');
                        snprintf(host, sizeof(host), "%.*s", (int)(end ? end - h - 1 : 0), h + 1);
                        colon = end && end[1] == ':' ? end + 1 : NULL;
                } else
                        snprintf(host, sizeof(host), "%.*s", (int)(colon ? colon - h : (ptrdiff_t)strlen(h)),
                                 h);
                if (colon)
                        port = atoi(colon + 1);
                if (streq(host, "localhost"))
                        snprintf(host, sizeof(host), "127.0.0.1");
                if (inet_pton(AF_INET, host, &a.in.sin_addr) == 1) {
                        a.in.sin_family = AF_INET;
                        a.in.sin_port = htons((uint16_t)port);
                        l = sizeof(a.in);
                } else if (inet_pton(AF_INET6, host, &a.in6.sin6_addr) == 1) {
                        a.in6.sin6_family = AF_INET6;
                        a.in6.sin6_port = htons((uint16_t)port);
                        l = sizeof(a.in6);
                } else
                        return -EADDRNOTAVAIL;
        }
        int fd = socket(a.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        if (connect(fd, &a.sa, l) < 0 && errno != EINPROGRESS) {
                int r = -errno;
                safe_close(fd);
                return r;
        }
        return fd;
}

void redis_conn_connect(RedisConn *rc) {
        if (rc->state != REDIS_DOWN)
                return;
        int fd = socket_for(rc->target);
        if (fd < 0) {
                rc->cb->failed(strerror(-fd), false, rc->userdata);
                return;
        }
        rc->fd = fd;
        if (sd_event_add_io(rc->event, &rc->io, fd, EPOLLOUT, io_cb, rc) < 0) {
                rc->fd = safe_close(rc->fd);
                rc->cb->failed("its socket cannot be watched", false, rc->userdata);
                return;
        }
        rc->state = REDIS_CONNECTING;
        rc->connect_started = now_usec(CLOCK_MONOTONIC);
        watchdog_update(rc);
}

int redis_conn_new(sd_event *event, const char *target, const char *password, const RedisConnCallbacks *cb,
                   void *userdata, RedisConn **ret) {
        RedisConn *rc = calloc(1, sizeof(RedisConn));

        if (!rc)
                return -ENOMEM;
        rc->fd = -EBADF;
        rc->event = sd_event_ref(event);
        rc->cb = cb;
        rc->userdata = userdata;
        rc->target = strdup(target);
        rc->password = password ? strdup(password) : NULL;
        if (!rc->target || (password && !rc->password) ||
            sd_event_add_time(event, &rc->watchdog, CLOCK_MONOTONIC, 0, 0, watchdog_cb, rc) < 0) {
                redis_conn_free(rc);
                return -ENOMEM;
        }
        (void)sd_event_source_set_enabled(rc->watchdog, SD_EVENT_OFF);
        *ret = rc;
        return 0;
}

RedisConn *redis_conn_free(RedisConn *rc) {
        if (!rc)
                return NULL;
        conn_close(rc);
        pending_lost(rc);
        sd_event_source_disable_unref(rc->watchdog);
        sd_event_unref(rc->event);
        buffer_done(&rc->out);
        free(rc->target);
        if (rc->password)
                explicit_bzero(rc->password, strlen(rc->password));
        free(rc->password);
        return mfree(rc);
}

bool redis_conn_ready(const RedisConn *rc) {
        return rc->state == REDIS_READY;
}

int redis_conn_send(RedisConn *rc, int argc, const char **argv, RedisReplyHandler handler, void *userdata) {
        if (rc->state != REDIS_READY)
                return -ENOTCONN;
        return command_queue(rc, argc, argv, handler, userdata);
}
