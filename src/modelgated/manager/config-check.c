/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The host check of --check-config --hosts: see config-check.h. Its own event loop runs every host's bus
 * until each is up or has failed (or CHECK_BUS_TIMEOUT_USEC is over); the buses stay open while the report
 * is written, so that the units' properties are read where the bus left them. The engine URLs are asked
 * afterwards, one at a time, with a blocking GET and a timeout: this is a command that runs once and
 * exits, not the daemon's loop. */

#include <errno.h>
#include <fnmatch.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <systemd/sd-event.h>
#include <unistd.h>

#include "modelgated/hostbus/host-bus.h"
#include "modelgated/manager/config-check.h"
#include "modelgated/manager/models-seen.h"
#include "modelgated/catalog/catalog-list.h"
#include "modelgated/sched/model-memory.h"
#include "shared/log.h"
#include "shared/strv.h"

#define CHECK_BUS_TIMEOUT_USEC (20 * USEC_PER_SEC)
#define CHECK_HTTP_TIMEOUT_MSEC 5000
#define CHECK_ANSWER_MAX (8 * 1024 * 1024)

typedef struct CheckHost {
        sd_event *event;
        const HostConf *conf;
        char **units;    /* the host's engine units, in the order of its engines */
        size_t *engines; /* each unit's engine, an index of Config.engines */
        HostBus *bus;
        bool settled; /* up, or failed */
        char *down;   /* why it is not up */
        size_t *n_unsettled;
} CheckHost;

typedef struct Report {
        FILE *out;
        unsigned problems;
} Report;

_printf_(3, 4) static void say(Report *r, bool problem, const char *fmt, ...) {
        va_list ap;

        if (problem) {
                fputs("PROBLEM: ", r->out);
                r->problems++;
        }
        /* the hosts' words (a bus's failure, the model ids a host lists) go to a terminal: escaped as a log
         * line's are, so that none moves it */
        _cleanup_free_ char *line = NULL, *shown = NULL;
        va_start(ap, fmt);
        int k = vasprintf(&line, fmt, ap);
        va_end(ap);
        shown = k >= 0 ? log_escape_dup(line) : NULL;
        fputs(shown ?: "(out of memory)", r->out);
        fputc('\n', r->out);
}

static void settle(CheckHost *ch) {
        if (ch->settled)
                return;
        ch->settled = true;
        if (--*ch->n_unsettled == 0)
                (void)sd_event_exit(ch->event, 0);
}

static void bus_up(HostBus *b, void *userdata) {
        settle(userdata);
}

static void bus_down(HostBus *b, const char *reason, void *userdata) {
        CheckHost *ch = userdata;

        if (ch->settled)
                return; /* it was up: what was read is what is reported */
        ch->down = strdup(reason);
        settle(ch);
}

static const HostBusCallbacks check_callbacks = {
        .on_up = bus_up,
        .on_down = bus_down,
};

static int timeout_cb(sd_event_source *s, uint64_t usec, void *userdata) {
        return sd_event_exit(sd_event_source_get_event(s), 0);
}

/* poll() for fd until the deadline (CLOCK_MONOTONIC, in msec): 1 ready, 0 timed out */
static int wait_fd(int fd, short events, usec_t deadline) {
        for (;;) {
                usec_t now = now_usec(CLOCK_MONOTONIC);
                if (now >= deadline)
                        return 0;
                struct pollfd p = {.fd = fd, .events = events};
                int k = poll(&p, 1, (int)((deadline - now) / USEC_PER_MSEC) + 1);
                if (k < 0 && errno != EINTR)
                        return -errno;
                if (k > 0)
                        return 1;
        }
}

/* Undoes chunked framing in place; the length of what is left */
static size_t dechunk(char *b, size_t n) {
        size_t in = 0, out = 0;

        while (in < n) {
                char *end;
                unsigned long len = strtoul(b + in, &end, 16);
                char *nl = memchr(b + in, '\n', n - in);
                if (!nl || end == b + in || len == 0)
                        break;
                in = (size_t)(nl - b) + 1;
                len = MIN(len, n - in);
                memmove(b + out, b + in, len);
                out += len;
                in += len + 2; /* its CRLF */
        }
        return out;
}

/* GET url's base path + path; *ret_status and the body, or an error's words in *ret_error */
static int http_get(const HttpUrl *u, const char *path, int *ret_status, char **ret_body, size_t *ret_size,
                    char **ret_error) {
        _cleanup_close_ int fd = -1;
        _cleanup_free_ char *req = NULL, *buf = NULL;
        usec_t deadline = now_usec(CLOCK_MONOTONIC) + CHECK_HTTP_TIMEOUT_MSEC * USEC_PER_MSEC;
        size_t n = 0, cap = 0;
        int err = 0, r;
        socklen_t l = sizeof(err);

        fd = socket(u->address.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return -errno;
        if (connect(fd, (const struct sockaddr *)&u->address, u->address_len) < 0 && errno != EINPROGRESS)
                err = errno;
        else if ((r = wait_fd(fd, POLLOUT, deadline)) <= 0)
                err = r < 0 ? -r : ETIMEDOUT;
        else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &l) < 0)
                err = errno;
        if (err != 0)
                return asprintf(ret_error, "%s", strerror(err)) < 0 ? -ENOMEM : -err;
        if (asprintf(
                    &req,
                    "GET %s%s HTTP/1.1\r\nHost: %s\r\nAccept: application/json\r\nConnection: close\r\n\r\n",
                    u->base_path, path, u->authority) < 0)
                return -ENOMEM;
        if (send(fd, req, strlen(req), MSG_NOSIGNAL) != (ssize_t)strlen(req))
                return asprintf(ret_error, "cannot send: %m") < 0 ? -ENOMEM : -EIO;
        for (;;) {
                if (n + 65536 > cap) {
                        if (cap >= CHECK_ANSWER_MAX)
                                break;
                        char *nb = realloc(buf, cap = cap ? cap * 2 : 65536);
                        if (!nb)
                                return -ENOMEM;
                        buf = nb;
                }
                r = wait_fd(fd, POLLIN, deadline);
                if (r <= 0)
                        return asprintf(ret_error, "no whole answer within %ds",
                                        CHECK_HTTP_TIMEOUT_MSEC / 1000) < 0
                                       ? -ENOMEM
                                       : -ETIMEDOUT;
                ssize_t k = read(fd, buf + n, cap - n - 1);
                if (k < 0 && errno != EAGAIN && errno != EINTR)
                        return asprintf(ret_error, "%m") < 0 ? -ENOMEM : -EIO;
                if (k == 0)
                        break;
                if (k > 0)
                        n += (size_t)k;
        }
        buf[n] = 0;
        char *head_end = strstr(buf, "\r\n\r\n");
        if (!head_end || sscanf(buf, "HTTP/%*s %d", ret_status) != 1)
                return asprintf(ret_error, "not an HTTP answer") < 0 ? -ENOMEM : -EBADMSG;
        *head_end = 0;
        char *body = head_end + 4;
        size_t bn = n - (size_t)(body - buf);
        if (strcasestr(buf, "\r\ntransfer-encoding: chunked"))
                bn = dechunk(body, bn);
        *ret_body = strndup(body, bn);
        *ret_size = bn;
        return *ret_body ? 0 : -ENOMEM;
}

/* The ids the engine at u (engine NULL: the host itself, which has no engines) lists now: into *ret (NULL
 * when it could not be read, said in the report) */
static void read_list(Report *rep, const HostConf *h, const char *engine, const HttpUrl *u, char ***ret) {
        _cleanup_free_ char *body = NULL, *error = NULL, *who = NULL, *where = NULL;
        _cleanup_(catalog_list_freep) CatalogList *list = NULL;
        size_t n = 0, k;
        int status = 0, r;

        *ret = NULL;
        if ((engine ? asprintf(&who, "host %s: engine %s", h->name, engine)
                    : asprintf(&who, "host %s", h->name)) < 0 ||
            asprintf(&where, "%s://%s%s/models", u->tls ? "https" : "http", u->authority, u->base_path) < 0)
                return;
        if (u->tls) {
                say(rep, false, "%s: %s is https, not asked by this check", who, where);
                return;
        }
        r = http_get(u, "/models", &status, &body, &n, &error);
        if (r < 0) {
                say(rep, true, "%s%s%s cannot be read: %s", who, engine ? " runs, but " : ": ", where,
                    strna(error));
                return;
        }
        if (status != 200 || catalog_list_parse(body, n, 4096, CHECK_ANSWER_MAX, &list) < 0) {
                say(rep, true, "%s%s%s answers %d%s", who, engine ? " runs, but " : ": ", where, status,
                    status == 200 ? ", not a model list" : "");
                return;
        }
        *ret = catalog_list_ids(list);
        k = catalog_list_size(list);
        say(rep, false, "%s%s%s lists %zu model%s", who, engine ? " runs; " : ": ", where, k,
            k == 1 ? "" : "s");
}

static bool any_matches(const char *glob, char *const *keys) {
        STRV_FOREACH (k, (char **)keys)
                if (fnmatch(glob, *k, 0) == 0)
                        return true;
        return false;
}

/* rule:check-hosts: each Models= glob of the host's engines against what the host lists or listed */
static void check_models(Report *rep, const Config *c, CheckHost *ch, const ModelMemory *mem, char **live,
                         ssize_t running) {
        _cleanup_strv_free_ char **listed = NULL;

        if (model_memory_keys(mem, ch->conf->name, NULL, &listed) < 0)
                return;
        STRV_FOREACH (k, live)
                if (!strv_contains(listed, *k))
                        (void)strv_extend(&listed, *k);
        for (size_t i = 0; ch->units && ch->units[i]; i++) {
                const EngineConf *e = &c->engines[ch->engines[i]];
                _cleanup_strv_free_ char **own = NULL;
                _cleanup_free_ char *names = NULL;

                (void)model_memory_keys(mem, ch->conf->name, e->name, &own);
                bool known = own || (running == (ssize_t)i && live);
                STRV_FOREACH (g, e->models) {
                        if (any_matches(*g, listed))
                                continue;
                        if (!known) {
                                say(rep, false,
                                    "host %s: engine %s: Models=%s matches nothing its host lists or "
                                    "listed; "
                                    "not known to be wrong: engine %s has not been seen running",
                                    ch->conf->name, e->name, *g, e->name);
                                continue;
                        }
                        names = mfree(names);
                        names = strv_join(running == (ssize_t)i && live ? live : own, ", ");
                        say(rep, true,
                            "host %s: engine %s: Models=%s matches nothing host %s lists or listed (engine "
                            "%s "
                            "listed: %s)",
                            ch->conf->name, e->name, *g, ch->conf->name, e->name, strna(names));
                }
        }
}

static void report_host(Report *rep, const Config *c, CheckHost *ch, const ModelMemory *mem) {
        const HostConf *h = ch->conf;
        _cleanup_strv_free_ char **live = NULL;
        ssize_t running = -1;

        if (!ch->settled)
                say(rep, true, "host %s: the bus (%s) did not come up within %llus", h->name,
                    host_bus_label(ch->bus), (unsigned long long)(CHECK_BUS_TIMEOUT_USEC / USEC_PER_SEC));
        else if (ch->down)
                say(rep, true, "host %s: the bus cannot be reached: %s", h->name, ch->down);
        else {
                say(rep, false, "host %s: bus up (%s)", h->name, host_bus_label(ch->bus));
                for (size_t i = 0; ch->units[i]; i++) {
                        const UnitInfo *u = host_bus_unit(ch->bus, i);
                        _cleanup_strv_free_ char **w = NULL;

                        /* not loaded, no Ref() holds it: systemd collects it before GetAll() */
                        if (!u->load_state) {
                                say(rep, true,
                                    "host %s: engine unit %s is not-found (nothing could be read of it)",
                                    h->name, ch->units[i]);
                                continue;
                        }
                        (void)unit_info_check(u, ch->units, &w);
                        STRV_FOREACH (s, w)
                                say(rep, true, "host %s: %s", h->name, *s);
                        if (unit_info_is_running(u))
                                running = (ssize_t)i;
                }
        }
        if (running >= 0) {
                const EngineConf *e = &c->engines[ch->engines[running]];
                read_list(rep, h, e->name, e->url.text ? &e->url : &h->url, &live);
        } else if (ch->settled && !ch->down)
                say(rep, false, "host %s: no engine runs; its URL is asked when one does", h->name);
        check_models(rep, c, ch, mem, live, running);
}

/* A host without engines: its URL is all there is, and it must answer */
static void report_plain_host(Report *rep, const HostConf *h) {
        _cleanup_strv_free_ char **live = NULL;

        read_list(rep, h, NULL, &h->url, &live);
}

static int host_setup(CheckHost *ch, sd_event *e, const Config *c, const HostConf *h, size_t *n_unsettled) {
        size_t n = 0;

        *ch = (CheckHost){.event = e, .conf = h, .n_unsettled = n_unsettled};
        ch->engines = calloc(c->n_engines + 1, sizeof(size_t));
        if (!ch->engines)
                return -ENOMEM;
        for (size_t i = 0; i < c->n_engines; i++)
                if (streq(c->engines[i].host, h->name)) {
                        if (strv_extend(&ch->units, c->engines[i].unit) < 0)
                                return -ENOMEM;
                        ch->engines[n++] = i;
                }
        if (n == 0)
                return 0; /* no engines: no bus to ask, only its URL */
        (*n_unsettled)++;
        return host_bus_new(e, h, ch->units, NULL, &check_callbacks, ch, &ch->bus);
}

int config_check_hosts(const Config *c, FILE *out) {
        _cleanup_(sd_event_unrefp) sd_event *e = NULL;
        _cleanup_(model_memory_freep) ModelMemory *mem = model_memory_new();
        _cleanup_free_ CheckHost *hosts = NULL;
        Report rep = {.out = out};
        size_t n_unsettled = 0, n = 0;
        int r;

        if (!mem || !(hosts = calloc(c->n_hosts + 1, sizeof(CheckHost))))
                return -ENOMEM;
        models_seen_load(mem);
        r = sd_event_new(&e);
        if (r < 0)
                return r;
        for (; n < c->n_hosts; n++) {
                r = host_setup(&hosts[n], e, c, &c->hosts[n], &n_unsettled);
                if (r < 0) {
                        n++;
                        goto finish;
                }
        }
        /* every host counted before any connects: a connect that fails at once settles its host there and
         * then, and must not end the wait for hosts not set up yet */
        for (size_t i = 0; i < n; i++)
                if (hosts[i].bus)
                        host_bus_connect(hosts[i].bus);
        if (n_unsettled > 0) {
                r = sd_event_add_time_relative(e, NULL, CLOCK_MONOTONIC, CHECK_BUS_TIMEOUT_USEC, 0,
                                               timeout_cb, NULL);
                if (r >= 0)
                        r = sd_event_loop(e);
                if (r < 0)
                        goto finish;
        }
        for (size_t i = 0; i < n; i++)
                if (hosts[i].bus)
                        report_host(&rep, c, &hosts[i], mem);
                else
                        report_plain_host(&rep, &c->hosts[i]);
        if (rep.problems == 0)
                fprintf(out, "No problems found.\n");
        else
                fprintf(out, "%u problem%s found.\n", rep.problems, rep.problems == 1 ? "" : "s");
        r = (int)rep.problems;
finish:
        for (size_t i = 0; i < n; i++) {
                host_bus_free(hosts[i].bus);
                strv_free(hosts[i].units);
                free(hosts[i].engines);
                free(hosts[i].down);
        }
        return r;
}
