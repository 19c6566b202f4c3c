/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The Manager: listening sockets (socket-activated, or Listen=), the accept
 * loop with its connection limit, signals, and the clean stop. A stop closes
 * the listeners (systemd keeps its own copy of an activated socket, so new
 * connections queue there for the next instance), closes idle connections,
 * lets running answers finish within STOP_DRAIN_USEC, then exits. */

#include <arpa/inet.h>
#include <assert.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>

#include "modelgated/access.h"
#include "modelgated/bus-object.h"
#include "modelgated/client.h"
#include "modelgated/host.h"
#include "modelgated/models.h"
#include "modelgated/manager.h"
#include "modelgated/metrics.h"
#include "modelgated/upstream.h"
#include "shared/count-map.h"
#include "shared/log.h"
#include "shared/parse-util.h"
#include "shared/strv.h"

#define STOP_DRAIN_USEC (60 * USEC_PER_SEC)
#define ACCEPT_RETRY_USEC (1 * USEC_PER_SEC)

static const int handled_signals[] = {SIGTERM, SIGINT, SIGHUP};

static int accept_cb(sd_event_source *s, int fd, uint32_t revents, void *userdata);

/* log.c's buffered lines are written when the loop has nothing else to do */
static sd_event_source *log_flush_source;

static int log_flush_cb(sd_event_source *s, void *userdata) {
        log_flush();
        return 0;
}

static void log_request_flush(void) {
        (void)sd_event_source_set_enabled(log_flush_source, SD_EVENT_ONESHOT);
}

int manager_new(Manager **ret) {
        Manager *m = calloc(1, sizeof(Manager));
        int r;

        if (!m)
                return -ENOMEM;
        m->config = config_new();
        m->metrics = metrics_new();
        if (!m->config || !m->metrics) {
                config_unref(m->config);
                metrics_free(m->metrics);
                free(m);
                return -ENOMEM;
        }
        r = sd_event_default(&m->event);
        if (r >= 0)
                r = upstream_pool_new(m->event, &m->pool);
        if (r < 0) {
                manager_free(m);
                return r;
        }
        m->start_usec = now_usec(CLOCK_MONOTONIC);
        *ret = m;
        return 0;
}

Manager *manager_free(Manager *m) {
        if (!m)
                return NULL;
        m->bus_object = bus_object_free(TAKE_PTR(m->bus_object));
        m->access = access_free(m->access);
        while (m->clients)
                client_free(m->clients);
        m->connections_by_address = count_map_free(m->connections_by_address);
        if (m->pool)
                upstream_pool_stop(m->pool);
        for (size_t i = 0; i < m->n_listeners; i++) {
                sd_event_source_disable_unref(m->listeners[i].source);
                safe_close(m->listeners[i].fd);
                free(m->listeners[i].name);
                free(m->listeners[i].address);
        }
        free(m->listeners);
        sd_event_source_disable_unref(m->accept_retry);
        sd_event_source_disable_unref(m->stop_timer);
        sd_event_source_disable_unref(m->exit_idle_timer);
        sd_event_source_disable_unref(m->feed_keepalive);
        log_set_buffered(NULL);
        log_flush_source = sd_event_source_disable_unref(log_flush_source);
        for (size_t i = 0; m->hosts && i < m->config->n_hosts; i++)
                host_free(m->hosts[i]);
        free(m->hosts);
        for (size_t i = 0; i < m->n_draining; i++)
                host_free(m->draining[i]);
        free(m->draining);
        sd_event_source_disable_unref(m->drain_source);
        config_unref(m->config);
        metrics_free(m->metrics);
        /* after the hosts and clients: their upstreams were the pool's */
        m->pool = upstream_pool_free(m->pool);
        free(m->config_path);
        strv_free(m->config_errors);
        free(m->refusal);
        sd_event_unref(m->event);
        free(m);
        return NULL;
}

/* What is wrong, for logs and the D-Bus error of a refused reload: the first few errors, joined. */
static char *config_errors_join(char **errors, int r) {
        _cleanup_free_ char *s = NULL;
        size_t n = strv_length(errors);
        char *ret;

        if (n == 0)
                /* out of memory, or an error that config_error() could not keep */
                return asprintf(&ret, "%s", strerror(r < 0 ? -r : r)) < 0 ? NULL : ret;
        if (n > 4) {
                char *keep = errors[4];
                errors[4] = NULL;
                s = strv_join(errors, "; ");
                errors[4] = keep;
                if (!s || asprintf(&ret, "%s; and %zu more (see the log)", s, n - 4) < 0)
                        return NULL;
                return ret;
        }
        return strv_join(errors, "; ");
}

/* The answer to every request, the STATUS= and the D-Bus warning of a daemon that refuses requests. */
static int manager_set_refusal(Manager *m, char **errors, int r) {
        _cleanup_free_ char *what = config_errors_join(errors, r), *refusal = NULL;

        if (!what ||
            asprintf(&refusal, "modelgate's configuration has errors: %s; fix it and run '%s'", what,
                     m->user ? "systemctl --user reload modelgate" : "systemctl reload modelgate") < 0)
                return log_oom();
        free(m->refusal);
        m->refusal = TAKE_PTR(refusal);
        m->warnings_serial++;
        (void)sd_notifyf(false, "STATUS=Refusing requests: %s", m->refusal);
        return 0;
}

int manager_load_config(Manager *m, const char *path) {
        _cleanup_(config_unrefp) Config *c = config_new();
        int r;

        if (!c)
                return log_oom();
        if (free_and_strdup(&m->config_path, path) < 0)
                return log_oom();
        r = config_read(c, path);
        if (r < 0) {
                strv_free(m->config_errors);
                m->config_errors = TAKE_PTR(c->errors);
                if (!m->config_errors && strv_extend(&m->config_errors, strerror(-r)) < 0)
                        return log_oom();
                return r;
        }
        if (c->n_hosts == 0)
                log_warning("%s: no [Host] is configured; every model request will get 404", path);
        config_unref(m->config);
        m->config = TAKE_PTR(c);
        return 0;
}

#define FEED_KEEPALIVE_USEC (15 * USEC_PER_SEC)

/* An SSE comment every 15 s keeps idle /models/sse feeds alive through intermediaries. */
static int feed_keepalive_cb(sd_event_source *s, uint64_t usec, void *userdata) {
        Manager *m = userdata;
        static const char comment[] = ": keepalive\n\n";

        if (m->n_feed_clients == 0)
                return 0;
        client_feed_broadcast(m, comment, sizeof(comment) - 1);
        (void)sd_event_source_set_time_relative(s, FEED_KEEPALIVE_USEC);
        (void)sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
        return 0;
}

void manager_feed_subscribed(Manager *m) {
        if (!m->feed_keepalive) {
                if (sd_event_add_time_relative(m->event, &m->feed_keepalive, CLOCK_MONOTONIC,
                                               FEED_KEEPALIVE_USEC, 0, feed_keepalive_cb, m) < 0)
                        return;
        } else if (sd_event_source_get_enabled(m->feed_keepalive, NULL) > 0)
                return;
        else
                (void)sd_event_source_set_time_relative(m->feed_keepalive, FEED_KEEPALIVE_USEC);
        (void)sd_event_source_set_enabled(m->feed_keepalive, SD_EVENT_ONESHOT);
}

void manager_catalog_ready(Manager *m) {
        models_catalogs_ready(m);
}

Host *manager_host(Manager *m, const HostConf *h) {
        size_t i = (size_t)(h - m->config->hosts);

        if (h >= m->config->hosts && i < m->config->n_hosts)
                return m->hosts[i];
        for (i = 0; i < m->config->n_hosts; i++)
                if (streq(m->config->hosts[i].name, h->name))
                        return m->hosts[i];
        for (i = 0; i < m->n_draining; i++)
                if (streq(host_conf(m->draining[i])->name, h->name))
                        return m->draining[i];
        return NULL;
}

static void format_address(const struct sockaddr *sa, char *buf, size_t l) {
        char a[INET6_ADDRSTRLEN];

        if (sa->sa_family == AF_INET) {
                const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
                snprintf(buf, l, "%s:%u", inet_ntop(AF_INET, &in->sin_addr, a, sizeof(a)),
                         ntohs(in->sin_port));
        } else if (sa->sa_family == AF_INET6) {
                const struct sockaddr_in6 *in = (const struct sockaddr_in6 *)sa;
                snprintf(buf, l, "[%s]:%u", inet_ntop(AF_INET6, &in->sin6_addr, a, sizeof(a)),
                         ntohs(in->sin6_port));
        } else if (sa->sa_family == AF_UNIX)
                snprintf(buf, l, "%s", ((const struct sockaddr_un *)sa)->sun_path);
        else
                snprintf(buf, l, "?");
}

static int add_listener(Manager *m, int fd, const char *name) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        char addr[128] = "?";
        Listener *l;
        int r;

        l = realloc(m->listeners, sizeof(Listener) * (m->n_listeners + 1));
        if (!l)
                return -ENOMEM;
        m->listeners = l;
        if (getsockname(fd, (struct sockaddr *)&ss, &sl) >= 0)
                format_address((struct sockaddr *)&ss, addr, sizeof(addr));
        l = &m->listeners[m->n_listeners];
        *l = (Listener){.manager = m, .fd = fd, .name = strdup(name), .address = strdup(addr)};
        r = sd_event_add_io(m->event, &l->source, fd, EPOLLIN, accept_cb, l);
        if (r < 0)
                return r;
        (void)sd_event_source_set_exit_on_failure(l->source, true);
        m->n_listeners++;
        return 0;
}

/* "127.0.0.1:8080", "[::1]:8080", "8080" (every address), "/run/x.sock" */
static int parse_listen(const char *s, struct sockaddr_storage *ss, socklen_t *sl) {
        uint64_t port;
        char host[128];
        const char *colon;

        memset(ss, 0, sizeof(*ss));
        if (s[0] == '/') {
                struct sockaddr_un *un = (struct sockaddr_un *)ss;
                if (strlen(s) >= sizeof(un->sun_path))
                        return -ENAMETOOLONG;
                un->sun_family = AF_UNIX;
                strcpy(un->sun_path, s);
                *sl = sizeof(*un);
                return 0;
        }
        if (safe_atou64(s, &port) == 0) {
                struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
                if (port == 0 || port > 65535)
                        return -EINVAL;
                in6->sin6_family = AF_INET6;
                in6->sin6_addr = in6addr_any;
                in6->sin6_port = htons((uint16_t)port);
                *sl = sizeof(*in6);
                return 0;
        }
        if (s[0] == '[') {
                const char *e = strchr(s, ']');
                if (!e || e[1] != ':' || (size_t)(e - s - 1) >= sizeof(host))
                        return -EINVAL;
                memcpy(host, s + 1, (size_t)(e - s - 1));
                host[e - s - 1] = 0;
                colon = e + 1;
        } else {
                colon = strrchr(s, ':');
                if (!colon || (size_t)(colon - s) >= sizeof(host))
                        return -EINVAL;
                memcpy(host, s, (size_t)(colon - s));
                host[colon - s] = 0;
        }
        if (safe_atou64(colon + 1, &port) < 0 || port == 0 || port > 65535)
                return -EINVAL;
        struct sockaddr_in *in = (struct sockaddr_in *)ss;
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
        if (inet_pton(AF_INET, host, &in->sin_addr) == 1) {
                in->sin_family = AF_INET;
                in->sin_port = htons((uint16_t)port);
                *sl = sizeof(*in);
        } else if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
                in6->sin6_family = AF_INET6;
                in6->sin6_port = htons((uint16_t)port);
                *sl = sizeof(*in6);
        } else
                return -EINVAL;
        return 0;
}

static int listen_on(Manager *m, const char *spec) {
        struct sockaddr_storage ss;
        socklen_t sl;
        _cleanup_close_ int fd = -1;
        int r, one = 1;

        r = parse_listen(spec, &ss, &sl);
        if (r < 0)
                return log_error_errno(
                        r, "[Proxy] Listen='%s' is not an address, a port or an absolute path", spec);
        fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return log_error_errno(errno, "Failed to create a socket for %s: %m", spec);
        if (ss.ss_family == AF_UNIX)
                (void)unlink(((struct sockaddr_un *)&ss)->sun_path);
        else
                (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, (struct sockaddr *)&ss, sl) < 0)
                return log_error_errno(errno, "Failed to bind %s: %m", spec);
        if (listen(fd, SOMAXCONN) < 0)
                return log_error_errno(errno, "Failed to listen on %s: %m", spec);
        r = add_listener(m, fd, spec);
        if (r < 0)
                return log_error_errno(r, "Failed to watch %s: %m", spec);
        TAKE_FD(fd);
        return 0;
}

static int manager_listen(Manager *m) {
        _cleanup_strv_free_ char **names = NULL;
        int n, r;

        n = sd_listen_fds_with_names(true, &names);
        if (n < 0)
                return log_error_errno(n, "Failed to read the sockets passed by systemd: %m");
        if (n > 0) {
                m->socket_activated = true;
                for (int i = 0; i < n; i++) {
                        int fd = SD_LISTEN_FDS_START + i;
                        const char *name = names && names[i] ? names[i] : "unknown";
                        if (sd_is_socket(fd, AF_UNSPEC, SOCK_STREAM, 1) <= 0) {
                                log_warning("Passed file descriptor %d ('%s') is not a listening stream "
                                            "socket, closing it",
                                            fd, name);
                                safe_close(fd);
                                continue;
                        }
                        (void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
                        r = add_listener(m, fd, name);
                        if (r < 0)
                                return log_error_errno(r, "Failed to watch socket '%s': %m", name);
                }
                if (m->n_listeners == 0)
                        return log_error_errno(EBADF, "None of the %d sockets passed by systemd can be used",
                                               n);
                if (m->config->listen)
                        log_info("Socket-activated: [Proxy] Listen= is not used");
                return 0;
        }

        if (!m->config->listen)
                return listen_on(m, "127.0.0.1:8080");
        STRV_FOREACH (l, m->config->listen) {
                r = listen_on(m, *l);
                if (r < 0)
                        return r;
        }
        return 0;
}

static void set_accepting(Manager *m, bool on) {
        for (size_t i = 0; i < m->n_listeners; i++)
                (void)sd_event_source_set_enabled(m->listeners[i].source, on ? SD_EVENT_ON : SD_EVENT_OFF);
        m->listeners_paused = !on;
}

void manager_resume_accepting(Manager *m) {
        if (m->listeners_paused && !m->stopping && m->n_clients < m->config->max_connections)
                set_accepting(m, true);
}

static int accept_retry_cb(sd_event_source *s, uint64_t usec, void *userdata) {
        manager_resume_accepting(userdata);
        return 0;
}

static int accept_cb(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        Listener *l = userdata;
        Manager *m = l->manager;

        for (int i = 0; i < 64; i++) {
                struct sockaddr_storage peer;
                socklen_t pl = sizeof(peer);
                int one = 1, cfd;

                if (m->n_clients >= m->config->max_connections) {
                        /* the rest wait in the kernel's backlog until a connection closes */
                        log_debug("MaxConnections=%llu reached, not accepting for now",
                                  (unsigned long long)m->config->max_connections);
                        set_accepting(m, false);
                        return 0;
                }
                cfd = accept4(fd, (struct sockaddr *)&peer, &pl, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (cfd < 0) {
                        if (errno == EAGAIN || errno == EINTR)
                                return 0;
                        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                                log_warning_errno(errno, "Cannot accept connections for now: %m");
                                set_accepting(m, false);
                                if (!m->accept_retry)
                                        (void)sd_event_add_time_relative(m->event, &m->accept_retry,
                                                                         CLOCK_MONOTONIC, ACCEPT_RETRY_USEC,
                                                                         0, accept_retry_cb, m);
                                else {
                                        (void)sd_event_source_set_time_relative(m->accept_retry,
                                                                                ACCEPT_RETRY_USEC);
                                        (void)sd_event_source_set_enabled(m->accept_retry, SD_EVENT_ONESHOT);
                                }
                                return 0;
                        }
                        log_debug_errno(errno, "accept() failed, ignoring: %m");
                        continue;
                }
                if (peer.ss_family != AF_UNIX)
                        (void)setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
                if (client_new(m, cfd, (struct sockaddr *)&peer, pl) < 0)
                        log_oom();
        }
        return 0;
}

void manager_client_gone(Manager *m) {
        if (m->stopping && m->n_clients == 0) {
                (void)sd_event_exit(m->event, 0);
                return;
        }
        manager_resume_accepting(m);
        manager_changed(m);
}

/* SPEC §8: nothing is lost by exiting when nobody is connected, waiting or subscribed and no engine still
 * needs its idle stop; a connection arriving now waits in the socket systemd holds, and starts the next
 * instance. */
static bool manager_is_idle(Manager *m) {
        if (m->n_clients > 0 || bus_object_busy(m->bus_object))
                return false;
        for (size_t i = 0; i < m->config->n_hosts; i++)
                if (host_keeps_daemon(m->hosts[i]))
                        return false;
        return m->n_draining == 0;
}

static int exit_idle_cb(sd_event_source *s, uint64_t usec, void *userdata) {
        Manager *m = userdata;
        char t[FORMAT_TIMESPAN_MAX];

        if (!manager_is_idle(m))
                return 0;
        /* no accept() from here on: whatever arrives is the next instance's */
        for (size_t i = 0; i < m->n_listeners; i++)
                (void)sd_event_source_set_enabled(m->listeners[i].source, SD_EVENT_OFF);
        m->stopping = true;
        format_timespan(t, sizeof(t), m->config->exit_idle_usec);
        log_info("Idle for %s, exiting; the socket stays with systemd", t);
        (void)sd_notifyf(false,
                         "STOPPING=1\nSTATUS=Exited after %s idle (ExitIdleSec=); the next connection "
                         "starts it again",
                         t);
        bus_object_release_name(m->bus_object);
        return sd_event_exit(m->event, 0);
}

/* "always 0 without socket activation": nothing would start it again */
static bool manager_exits_when_idle(Manager *m) {
        return m->socket_activated && m->config->exit_idle_usec != 0 &&
               m->config->exit_idle_usec != USEC_INFINITY;
}

/* The idle exit's timer runs exactly while nothing needs the daemon, and the bus hears of changes. */
static void manager_update(Manager *m) {
        bus_object_changed(m->bus_object);
        if (!m->started || m->stopping)
                return;
        if (!manager_exits_when_idle(m)) {
                /* a reload to ExitIdleSec=0 */
                if (m->exit_idle_timer)
                        (void)sd_event_source_set_enabled(m->exit_idle_timer, SD_EVENT_OFF);
                return;
        }
        if (!m->exit_idle_timer) {
                int r = sd_event_add_time_relative(m->event, &m->exit_idle_timer, CLOCK_MONOTONIC,
                                                   m->config->exit_idle_usec, USEC_PER_SEC / 10,
                                                   exit_idle_cb, m);
                if (r < 0) {
                        log_warning_errno(r, "Failed to set up the idle exit, staying: %m");
                        return;
                }
                (void)sd_event_source_set_enabled(m->exit_idle_timer, SD_EVENT_OFF);
        }
        bool idle = manager_is_idle(m);
        bool armed = sd_event_source_get_enabled(m->exit_idle_timer, NULL) > 0;
        if (idle && !armed) {
                (void)sd_event_source_set_time_relative(m->exit_idle_timer, m->config->exit_idle_usec);
                (void)sd_event_source_set_enabled(m->exit_idle_timer, SD_EVENT_ONESHOT);
        } else if (!idle && armed)
                (void)sd_event_source_set_enabled(m->exit_idle_timer, SD_EVENT_OFF);
}

void manager_changed(Manager *m) {
        if (m->n_draining > 0)
                /* a draining host may be done now; not freed from here, which runs inside its callbacks */
                (void)sd_event_source_set_enabled(m->drain_source, SD_EVENT_ONESHOT);
        manager_update(m);
}

static int stop_timeout_cb(sd_event_source *s, uint64_t usec, void *userdata) {
        Manager *m = userdata;
        log_warning("%zu connection(s) still busy after the stop timeout, closing them", m->n_clients);
        return sd_event_exit(m->event, 0);
}

static void manager_stop(Manager *m) {
        if (m->stopping) {
                log_notice("Second stop request, exiting now");
                (void)sd_event_exit(m->event, 0);
                return;
        }
        m->stopping = true;
        (void)sd_notify(false, "STOPPING=1\nSTATUS=Stopping: finishing running answers");
        bus_object_release_name(m->bus_object);
        if (m->exit_idle_timer)
                (void)sd_event_source_set_enabled(m->exit_idle_timer, SD_EVENT_OFF);
        log_info("Stopping: no new connections; %zu open", m->n_clients);
        for (size_t i = 0; i < m->n_listeners; i++) {
                /* Our own socket dies with our descriptor, and with it every connection still in its backlog
                 * (reset): those arrived before the stop, so they are accepted and answered first. An
                 * activated socket stays with systemd, backlog and all, for the next instance. */
                if (!m->socket_activated)
                        (void)accept_cb(m->listeners[i].source, m->listeners[i].fd, EPOLLIN,
                                        &m->listeners[i]);
                m->listeners[i].source = sd_event_source_disable_unref(m->listeners[i].source);
                m->listeners[i].fd = safe_close(m->listeners[i].fd);
        }
        for (Client *c = m->clients, *n; c; c = n) {
                n = client_next(c);
                client_stop(c);
        }
        upstream_pool_stop(m->pool);
        if (m->n_clients == 0) {
                (void)sd_event_exit(m->event, 0);
                return;
        }
        (void)sd_event_add_time_relative(m->event, &m->stop_timer, CLOCK_MONOTONIC, STOP_DRAIN_USEC, 0,
                                         stop_timeout_cb, m);
}

static int signal_cb(sd_event_source *s, const struct signalfd_siginfo *si, void *userdata) {
        Manager *m = userdata;

        if (si->ssi_signo == SIGHUP) {
                _cleanup_free_ char *why = NULL;
                if (manager_reload(m, &why) < 0)
                        log_error("SIGHUP: configuration not reloaded: %s", strna(why));
                return 0;
        }
        manager_stop(m);
        return 0;
}

int manager_start(Manager *m) {
        char status[512];
        size_t o = 0;
        int r;

        r = manager_listen(m);
        if (r < 0)
                return r;

        m->hosts = calloc(MAX(m->config->n_hosts, 1u), sizeof(Host *));
        if (!m->hosts)
                return log_oom();
        for (size_t i = 0; i < m->config->n_hosts; i++)
                if (!(m->hosts[i] = host_new(m, m->config, &m->config->hosts[i])))
                        return log_oom();
        for (size_t i = 0; i < m->config->n_hosts; i++)
                host_start(m->hosts[i]);
        (void)bus_object_new(m, m->user, &m->bus_object);

        sigset_t mask;
        sigemptyset(&mask);
        for (size_t i = 0; i < ELEMENTSOF(handled_signals); i++)
                sigaddset(&mask, handled_signals[i]);
        sigprocmask(SIG_BLOCK, &mask, NULL);
        (void)signal(SIGPIPE, SIG_IGN);
        for (size_t i = 0; i < ELEMENTSOF(handled_signals); i++) {
                r = sd_event_add_signal(m->event, NULL, handled_signals[i], signal_cb, m);
                if (r < 0)
                        return log_error_errno(r, "Failed to watch signal %d: %m", handled_signals[i]);
        }
        (void)sd_event_set_watchdog(m->event, true);
        if (sd_event_add_defer(m->event, &log_flush_source, log_flush_cb, NULL) >= 0) {
                (void)sd_event_source_set_priority(log_flush_source, SD_EVENT_PRIORITY_IDLE);
                (void)sd_event_source_set_enabled(log_flush_source, SD_EVENT_OFF);
                log_set_buffered(log_request_flush);
        }

        o += (size_t)snprintf(status + o, sizeof(status) - o, "Listening on");
        for (size_t i = 0; i < m->n_listeners && o < sizeof(status) - 64; i++)
                o += (size_t)snprintf(status + o, sizeof(status) - o, "%s %s", i ? "," : "",
                                      m->listeners[i].address);
        snprintf(status + o, sizeof(status) - o, "; %zu host(s)", m->config->n_hosts);
        log_info("%s%s", status, m->socket_activated ? " (socket-activated)" : "");
        m->started = true;
        manager_changed(m);
        if (m->config_errors) {
                /* Exiting would leave the socket's clients hanging and systemd restarting us for nothing:
                 * every request gets the errors at once, until a reload brings a good file. The errors
                 * are in the log above, once. */
                r = manager_set_refusal(m, m->config_errors, -EINVAL);
                if (r < 0)
                        return r;
                log_error("Refusing every request with 503 until a reload brings a configuration without "
                          "errors; no host is contacted meanwhile");
                (void)sd_notify(false, "READY=1");
                return 0;
        }
        (void)sd_notifyf(false, "READY=1\nSTATUS=%s", status);
        return 0;
}

int manager_run(Manager *m) {
        return sd_event_loop(m->event);
}

static bool host_is_draining(Manager *m, const char *name) {
        for (size_t i = 0; i < m->n_draining; i++)
                if (streq(host_conf(m->draining[i])->name, name))
                        return true;
        return false;
}

/* Frees the draining hosts that have answered everything, and starts the hosts that replaced them: two
 * Hosts switching one GPU at once could cut a stream. */
static int drain_cb(sd_event_source *s, void *userdata) {
        Manager *m = userdata;

        for (size_t i = 0; i < m->n_draining;) {
                Host *h = m->draining[i];
                if (!host_drained(h)) {
                        i++;
                        continue;
                }
                log_info("host %s: drained, the previous configuration's host is gone", host_conf(h)->name);
                _cleanup_free_ char *name = strdup(host_conf(h)->name);
                host_free(h);
                memmove(m->draining + i, m->draining + i + 1, (m->n_draining - i - 1) * sizeof(Host *));
                m->n_draining--;
                for (size_t j = 0; name && j < m->config->n_hosts; j++)
                        if (streq(m->config->hosts[j].name, name) && !host_is_draining(m, name))
                                host_start(m->hosts[j]);
        }
        /* not manager_changed(): that would wake this up again at once while a host still drains */
        manager_update(m);
        return 0;
}

static int fail_reload(char **ret_error, int r, const char *why) {
        *ret_error = strdup(why);
        return r;
}

static bool taken_by(Host *const *hosts, size_t n, const Host *h) {
        for (size_t i = 0; i < n; i++)
                if (hosts[i] == h)
                        return true;
        return false;
}

int manager_reload(Manager *m, char **ret_error) {
        _cleanup_(config_unrefp) Config *n = NULL;
        _cleanup_free_ Host **hosts = NULL;
        _cleanup_free_ bool *kept_from = NULL;
        size_t kept = 0, added = 0, drained = 0;
        Host **draining;
        int r;

        *ret_error = NULL;
        if (m->stopping)
                return fail_reload(ret_error, -ESHUTDOWN, "modelgated is stopping");
        n = config_new();
        if (!n)
                return fail_reload(ret_error, -ENOMEM, "out of memory");
        log_info("Reloading %s", m->config_path);
        r = config_read(n, m->config_path); /* getaddrinfo() blocks the loop for a moment: names are rare */
        if (r < 0) {
                _cleanup_free_ char *what = config_errors_join(n->errors, r), *why = NULL;
                if (m->refusal) {
                        log_error("Reload refused: %s still has errors (above); every request is still "
                                  "answered with them",
                                  m->config_path);
                        strv_free(m->config_errors);
                        m->config_errors = TAKE_PTR(n->errors);
                        (void)manager_set_refusal(m, m->config_errors, r);
                        manager_changed(m);
                } else
                        log_error("Reload refused, the running configuration stays: %s has errors (above)",
                                  m->config_path);
                if (!what || asprintf(&why, "the configuration has errors: %s; %s", what,
                                      m->refusal ? "modelgate still refuses every request"
                                                 : "the running configuration stays") < 0)
                        return fail_reload(ret_error, r, "the configuration has errors (see the log)");
                *ret_error = TAKE_PTR(why);
                return r;
        }

        hosts = calloc(MAX(n->n_hosts, 1u), sizeof(Host *));
        kept_from = calloc(MAX(n->n_hosts, 1u), sizeof(bool));
        draining = reallocarray(m->draining, m->n_draining + m->config->n_hosts + 1, sizeof(Host *));
        if (!hosts || !kept_from || !draining)
                return fail_reload(ret_error, -ENOMEM, "out of memory");
        m->draining = draining;

        /* the same URL, bus and engine units: the Host carries on with the new values, waiters and all;
         * the others are made now, so that running out of memory changes nothing */
        for (size_t i = 0; i < n->n_hosts; i++) {
                for (size_t j = 0; j < m->config->n_hosts && !hosts[i]; j++)
                        if (!taken_by(hosts, i, m->hosts[j]) &&
                            host_can_take(m->hosts[j], n, &n->hosts[i])) {
                                hosts[i] = m->hosts[j];
                                kept_from[i] = true;
                        }
                if (!hosts[i] && !(hosts[i] = host_new(m, n, &n->hosts[i]))) {
                        for (size_t k = 0; k <= i; k++)
                                if (!kept_from[k])
                                        host_free(hosts[k]);
                        return fail_reload(ret_error, -ENOMEM, "out of memory");
                }
        }
        /* the rest finish what they have; nothing new reaches them */
        for (size_t j = 0; j < m->config->n_hosts; j++)
                if (!taken_by(hosts, n->n_hosts, m->hosts[j])) {
                        m->draining[m->n_draining++] = m->hosts[j];
                        drained++;
                }

        Config *old = m->config;
        m->config = TAKE_PTR(n);
        free(m->hosts);
        m->hosts = TAKE_PTR(hosts);
        for (size_t i = 0; i < m->config->n_hosts; i++) {
                if (kept_from[i]) {
                        (void)host_set_conf(m->hosts[i], m->config, &m->config->hosts[i]);
                        kept++;
                        continue;
                }
                added++;
                if (!host_is_draining(m, m->config->hosts[i].name))
                        host_start(m->hosts[i]);
                else
                        log_info(
                                "host %s: changed; it starts once the previous one has answered what it has",
                                m->config->hosts[i].name);
        }
        if (!m->socket_activated && !strv_equal(old->listen, m->config->listen))
                log_warning("[Proxy] Listen= changed: it applies at the next start of modelgated");
        config_unref(old);

        if (m->refusal) {
                strv_free(TAKE_PTR(m->config_errors));
                m->refusal = mfree(m->refusal);
                m->warnings_serial++;
                log_notice("%s has no errors now: serving requests", m->config_path);
        }
        /* a new ExitIdleSec= applies from now */
        if (m->exit_idle_timer)
                (void)sd_event_source_set_enabled(m->exit_idle_timer, SD_EVENT_OFF);
        log_notice("Reloaded %s: %zu host(s), %zu kept, %zu new, %zu draining", m->config_path,
                   m->config->n_hosts, kept, added, drained);
        (void)sd_notifyf(false, "STATUS=Reloaded; %zu host(s)", m->config->n_hosts);
        if (!m->drain_source && sd_event_add_defer(m->event, &m->drain_source, drain_cb, m) >= 0)
                (void)sd_event_source_set_enabled(m->drain_source, SD_EVENT_OFF);
        manager_changed(m);
        return 0;
}
