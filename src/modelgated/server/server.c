/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The Server is the daemon's front: the listening sockets (socket-activated, or Listen=), the accept loop
 * with its connection limit, signals, the idle exit, and the clean stop. A stop closes the listeners
 * (systemd keeps its own copy of an activated socket, so new connections queue there for the next
 * instance), closes idle connections, lets running answers finish within STOP_DRAIN_USEC, then exits.
 * What it serves is the Manager's; the connections are the ClientSet's. */

#include <assert.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>

#include "modelgated/client/client.h"
#include "modelgated/conf/listen-address.h"
#include "modelgated/event/socket-watch.h"
#include "modelgated/manager/manager.h"
#include "modelgated/server/server.h"
#include "shared/errno-util.h"
#include "shared/log.h"
#include "shared/parse-util.h"
#include "shared/strv.h"

#define STOP_DRAIN_USEC (60 * USEC_PER_SEC)
#define ACCEPT_RETRY_USEC (1 * USEC_PER_SEC)

typedef struct Listener {
        Server *server;
        int fd;
        char *name;    /* FileDescriptorName= or the Listen= value */
        char *address; /* for logs and STATUS= */
        sd_event_source *source;
} Listener;

struct Server {
        Manager *manager;
        sd_event *event;
        ClientSet *clients;

        Listener *listeners;
        size_t n_listeners;
        bool socket_activated;
        char **listen_at_start; /* Listen= as started: a reload cannot change it */
        bool listeners_paused;
        sd_event_source *accept_retry;

        bool started;
        bool stopping;
        sd_event_source *stop_timer;
        sd_event_source *exit_idle_timer; /* armed while nothing needs the daemon */

        const ServerCallbacks *cb;
        void *userdata;
};

static const int handled_signals[] = {SIGTERM, SIGINT, SIGHUP};

static int accept_cb(sd_event_source *s, int fd, uint32_t revents, void *userdata);

/* log.c's buffered lines are written when the loop has nothing else to do. The source exists only while
 * a flush is to come: sd-event keeps a defer source among its pending ones as long as it exists, and each
 * of those costs every turn of the loop a comparison or two. */
static sd_event *log_flush_event;
static sd_event_source *log_flush_source;

static int log_flush_cb(sd_event_source *s, void *userdata) {
        log_flush_source = sd_event_source_disable_unref(log_flush_source);
        log_flush();
        return 0;
}

static void log_request_flush(void) {
        /* once per turn of the loop, not once per line: each request logs one */
        if (log_flush_source)
                return;
        if (sd_event_add_defer(log_flush_event, &log_flush_source, log_flush_cb, NULL) < 0)
                log_flush(); /* now, rather than never */
        else
                (void)sd_event_source_set_priority(log_flush_source, SD_EVENT_PRIORITY_IDLE);
}

static void clients_changed(void *userdata);
static void clients_room(void *userdata);

static const ClientSetCallbacks client_set_callbacks = {
        .changed = clients_changed,
        .room = clients_room,
};

static void resume_accepting(Server *s);

static void manager_changed_cb(void *userdata) {
        server_changed(userdata);
}

/* A reload never moves a listener (its socket, and the connections it accepts, stay): a changed Listen= is
 * said, with both values, so that nobody believes it applied */
static void warn_listen_changed(Server *s) {
        char **now = manager_config(s->manager)->listen;
        _cleanup_free_ char *was = NULL, *is = NULL;

        if (strv_equal(s->listen_at_start, now))
                return;
        was = s->listen_at_start ? strv_join(s->listen_at_start, " ") : strdup("(none)");
        is = now ? strv_join(now, " ") : strdup("(none)");
        if (!was || !is) {
                log_oom();
                return;
        }
        if (s->socket_activated)
                log_warning("[Proxy] Listen= changed from '%s' to '%s', which a socket-activated modelgated "
                            "never uses: it listens where modelgate.socket's ListenStream= says (change "
                            "that, then restart the socket and the service)",
                            was, is);
        else
                log_warning("[Proxy] Listen= changed from '%s' to '%s': a reload keeps the listeners, "
                            "modelgated listens on '%s' until it is restarted",
                            was, is, s->listen_at_start ? was : LISTEN_ADDRESS_DEFAULT);
}

static void manager_reloaded_cb(void *userdata) {
        Server *s = userdata;
        /* a new ExitIdleSec= applies from now */
        if (s->exit_idle_timer)
                (void)sd_event_source_set_enabled(s->exit_idle_timer, SD_EVENT_OFF);
        warn_listen_changed(s);
        /* a higher MaxConnections= has room for the connections waiting in the backlog now */
        resume_accepting(s);
        server_changed(s);
}

static void manager_catalog_ready_cb(void *userdata) {
        Server *s = userdata;
        client_set_catalogs_ready(s->clients);
}

static void manager_host_probed_cb(void *userdata) {
        Server *s = userdata;
        client_set_hosts_probed(s->clients);
}

static const ManagerCallbacks manager_callbacks = {
        .changed = manager_changed_cb,
        .catalog_ready = manager_catalog_ready_cb,
        .host_probed = manager_host_probed_cb,
        .reloaded = manager_reloaded_cb,
};

int server_new(Manager *m, Server **ret) {
        Server *s = calloc(1, sizeof(Server));
        int r;

        if (!s)
                return -ENOMEM;
        s->manager = m;
        s->event = sd_event_ref(manager_event(m));
        r = client_set_new(m, &client_set_callbacks, s, &s->clients);
        if (r < 0) {
                server_free(s);
                return r;
        }
        manager_set_callbacks(m, &manager_callbacks, s);
        *ret = s;
        return 0;
}

Server *server_free(Server *s) {
        if (!s)
                return NULL;
        s->clients = client_set_free(s->clients);
        for (size_t i = 0; i < s->n_listeners; i++) {
                sd_event_source_disable_unref(s->listeners[i].source);
                safe_close(s->listeners[i].fd);
                free(s->listeners[i].name);
                free(s->listeners[i].address);
        }
        free(s->listeners);
        strv_free(s->listen_at_start);
        sd_event_source_disable_unref(s->accept_retry);
        sd_event_source_disable_unref(s->stop_timer);
        sd_event_source_disable_unref(s->exit_idle_timer);
        log_set_buffered(NULL);
        log_flush_source = sd_event_source_disable_unref(log_flush_source);
        log_flush_event = NULL;
        manager_set_callbacks(s->manager, NULL, NULL);
        sd_event_unref(s->event);
        return mfree(s);
}

void server_set_callbacks(Server *s, const ServerCallbacks *cb, void *userdata) {
        assert(s);
        s->cb = cb;
        s->userdata = userdata;
}

size_t server_n_connections(const Server *s) {
        assert(s);
        return client_set_count(s->clients);
}

size_t server_n_listeners(const Server *s) {
        assert(s);
        return s->n_listeners;
}

const char *server_listener_address(const Server *s, size_t i) {
        assert(s);
        return i < s->n_listeners ? s->listeners[i].address : NULL;
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

static int add_listener(Server *s, int fd, const char *name) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        char addr[128] = "?";
        Listener *l;
        int r;

        l = realloc(s->listeners, sizeof(Listener) * (s->n_listeners + 1));
        if (!l)
                return -ENOMEM;
        s->listeners = l;
        /* the array may have moved: each listener's source is handed its own element, which it must find
         * again (a second Listen= left the first one's pointing into freed memory) */
        for (size_t i = 0; i < s->n_listeners; i++)
                (void)sd_event_source_set_userdata(s->listeners[i].source, &s->listeners[i]);
        if (getsockname(fd, (struct sockaddr *)&ss, &sl) >= 0)
                format_address((struct sockaddr *)&ss, addr, sizeof(addr));
        l = &s->listeners[s->n_listeners];
        *l = (Listener){.server = s, .fd = fd, .name = strdup(name), .address = strdup(addr)};
        r = sd_event_add_io(s->event, &l->source, fd, EPOLLIN, accept_cb, l);
        if (r < 0)
                return r;
        (void)sd_event_source_set_exit_on_failure(l->source, true);
        s->n_listeners++;
        return 0;
}

static int listen_on(Server *s, const char *spec) {
        struct sockaddr_storage ss;
        socklen_t sl;
        _cleanup_close_ int fd = -1;
        int r, one = 1;

        r = listen_address_parse(spec, &ss, &sl);
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
        r = add_listener(s, fd, spec);
        if (r < 0)
                return log_error_errno(r, "Failed to watch %s: %m", spec);
        TAKE_FD(fd);
        return 0;
}

static int server_listen(Server *s) {
        _cleanup_strv_free_ char **names = NULL;
        Config *config = manager_config(s->manager);
        int n, r;

        /* Listen= as started, socket-activated or not: a reload that changes it says so */
        if (config->listen && !(s->listen_at_start = strv_copy(config->listen)))
                return log_oom();
        /* rule:socket-activation: the sockets passed, whatever their names; else Listen= */
        n = sd_listen_fds_with_names(true, &names);
        if (n < 0)
                return log_error_errno(n, "Failed to read the sockets passed by systemd: %m");
        if (n > 0) {
                s->socket_activated = true;
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
                        r = add_listener(s, fd, name);
                        if (r < 0)
                                return log_error_errno(r, "Failed to watch socket '%s': %m", name);
                }
                if (s->n_listeners == 0)
                        return log_error_errno(SYNTHETIC_ERRNO(EBADF),
                                               "None of the %d sockets passed by systemd can be used", n);
                if (config->listen)
                        log_info("Socket-activated: [Proxy] Listen= is not used");
                return 0;
        }

        if (!config->listen)
                return listen_on(s, LISTEN_ADDRESS_DEFAULT);
        STRV_FOREACH (l, config->listen) {
                r = listen_on(s, *l);
                if (r < 0)
                        return r;
        }
        return 0;
}

static void set_accepting(Server *s, bool on) {
        for (size_t i = 0; i < s->n_listeners; i++)
                (void)sd_event_source_set_enabled(s->listeners[i].source, on ? SD_EVENT_ON : SD_EVENT_OFF);
        s->listeners_paused = !on;
}

/* Re-enables listeners paused by MaxConnections= or EMFILE: below it, or with a connection that can make
 * room (client_set_full()). */
static void resume_accepting(Server *s) {
        if (s->listeners_paused && !s->stopping && !client_set_full(s->clients))
                set_accepting(s, true);
}

static int accept_retry_cb(sd_event_source *source, uint64_t usec, void *userdata) {
        resume_accepting(userdata);
        return 0;
}

static void accept_failed(Server *s, int error) {
        log_warning_errno(error, "Cannot accept connections for now: %m");
        set_accepting(s, false);
        if (!s->accept_retry)
                (void)sd_event_add_time_relative(s->event, &s->accept_retry, CLOCK_MONOTONIC,
                                                 ACCEPT_RETRY_USEC, 0, accept_retry_cb, s);
        else {
                (void)sd_event_source_set_time_relative(s->accept_retry, ACCEPT_RETRY_USEC);
                (void)sd_event_source_set_enabled(s->accept_retry, SD_EVENT_ONESHOT);
        }
}

static int accept_cb(sd_event_source *source, int fd, uint32_t revents, void *userdata) {
        Listener *l = userdata;
        Server *s = l->server;
        uint64_t max = manager_config(s->manager)->max_connections;

        for (int i = 0; i < 64; i++) {
                struct sockaddr_storage peer;
                socklen_t pl = sizeof(peer);
                int one = 1, cfd;

                if (client_set_full(s->clients)) {
                        /* every connection holds a request: the rest wait in the kernel's backlog until
                         * one closes or is idle */
                        log_debug("MaxConnections=%llu reached, not accepting for now",
                                  (unsigned long long)max);
                        set_accepting(s, false);
                        return 0;
                }
                cfd = accept4(fd, (struct sockaddr *)&peer, &pl, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (cfd < 0) {
                        if (ERRNO_IS_TRANSIENT(errno))
                                return 0;
                        if (ERRNO_IS_RESOURCE(errno)) {
                                accept_failed(s, errno);
                                return 0;
                        }
                        log_debug_errno(errno, "accept() failed, ignoring: %m");
                        continue;
                }
                if (peer.ss_family != AF_UNIX)
                        (void)setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
                if (client_new(s->clients, cfd, (struct sockaddr *)&peer, pl) < 0)
                        log_oom();
        }
        return 0;
}

/* At MaxConnections=, a connection went idle: accepting again closes it if a new one comes. */
static void clients_room(void *userdata) {
        resume_accepting(userdata);
}

/* A connection opened or closed: a slot for the listeners, maybe the end of a clean stop. */
static void clients_changed(void *userdata) {
        Server *s = userdata;

        if (s->stopping && client_set_count(s->clients) == 0) {
                (void)sd_event_exit(s->event, 0);
                return;
        }
        resume_accepting(s);
        server_changed(s);
}

/* rule:idle-exit: nothing is lost by exiting when nobody is connected, waiting or subscribed and no engine
 * still needs its idle stop; a connection arriving now waits in the socket systemd holds, and starts the
 * next instance. */
static bool server_is_idle(Server *s) {
        if (client_set_count(s->clients) > 0 || (s->cb && s->cb->busy && s->cb->busy(s->userdata)))
                return false;
        return !manager_keeps_daemon(s->manager);
}

static void release_name(Server *s) {
        if (s->cb && s->cb->stopping)
                s->cb->stopping(s->userdata);
}

static int exit_idle_cb(sd_event_source *source, uint64_t usec, void *userdata) {
        Server *s = userdata;
        usec_t idle = manager_config(s->manager)->exit_idle_usec;
        char t[FORMAT_TIMESPAN_MAX];

        if (!server_is_idle(s))
                return 0;
        /* no accept() from here on: whatever arrives is the next instance's */
        for (size_t i = 0; i < s->n_listeners; i++)
                (void)sd_event_source_set_enabled(s->listeners[i].source, SD_EVENT_OFF);
        s->stopping = true;
        manager_stop(s->manager);
        format_timespan(t, sizeof(t), idle);
        log_info("Idle for %s, exiting; the socket stays with systemd", t);
        (void)sd_notifyf(false,
                         "STOPPING=1\nSTATUS=Exited after %s idle (ExitIdleSec=); the next connection "
                         "starts it again",
                         t);
        release_name(s);
        return sd_event_exit(s->event, 0);
}

/* "always 0 without socket activation": nothing would start it again */
static bool server_exits_when_idle(Server *s) {
        usec_t idle = manager_config(s->manager)->exit_idle_usec;
        return s->socket_activated && idle != 0 && idle != USEC_INFINITY;
}

/* The idle exit's timer runs exactly while nothing needs the daemon, and the owner hears of changes. */
void server_changed(Server *s) {
        assert(s);
        usec_t idle_usec = manager_config(s->manager)->exit_idle_usec;

        if (s->cb && s->cb->changed)
                s->cb->changed(s->userdata);
        if (!s->started || s->stopping)
                return;
        if (!server_exits_when_idle(s)) {
                /* a reload to ExitIdleSec=0 */
                if (s->exit_idle_timer)
                        (void)sd_event_source_set_enabled(s->exit_idle_timer, SD_EVENT_OFF);
                return;
        }
        if (!s->exit_idle_timer) {
                int r = sd_event_add_time_relative(s->event, &s->exit_idle_timer, CLOCK_MONOTONIC, idle_usec,
                                                   USEC_PER_SEC / 10, exit_idle_cb, s);
                if (r < 0) {
                        log_warning_errno(r, "Failed to set up the idle exit, staying: %m");
                        return;
                }
                (void)sd_event_source_set_enabled(s->exit_idle_timer, SD_EVENT_OFF);
        }
        bool idle = server_is_idle(s);
        bool armed = sd_event_source_get_enabled(s->exit_idle_timer, NULL) > 0;
        if (idle && !armed) {
                (void)sd_event_source_set_time_relative(s->exit_idle_timer, idle_usec);
                (void)sd_event_source_set_enabled(s->exit_idle_timer, SD_EVENT_ONESHOT);
        } else if (!idle && armed)
                (void)sd_event_source_set_enabled(s->exit_idle_timer, SD_EVENT_OFF);
}

static int stop_timeout_cb(sd_event_source *source, uint64_t usec, void *userdata) {
        Server *s = userdata;
        log_warning("%zu connection(s) still busy after the stop timeout, closing them",
                    client_set_count(s->clients));
        return sd_event_exit(s->event, 0);
}

void server_stop(Server *s) {
        assert(s);
        if (s->stopping) {
                log_notice("Second stop request, exiting now");
                (void)sd_event_exit(s->event, 0);
                return;
        }
        s->stopping = true;
        manager_stop(s->manager);
        (void)sd_notify(false, "STOPPING=1\nSTATUS=Stopping: finishing running answers");
        release_name(s);
        if (s->exit_idle_timer)
                (void)sd_event_source_set_enabled(s->exit_idle_timer, SD_EVENT_OFF);
        log_info("Stopping: no new connections; %zu open", client_set_count(s->clients));
        for (size_t i = 0; i < s->n_listeners; i++) {
                /* Our own socket dies with our descriptor, and with it every connection still in its backlog
                 * (reset): those arrived before the stop, so they are accepted and answered first. An
                 * activated socket stays with systemd, backlog and all, for the next instance. */
                if (!s->socket_activated)
                        (void)accept_cb(s->listeners[i].source, s->listeners[i].fd, EPOLLIN,
                                        &s->listeners[i]);
                s->listeners[i].source = sd_event_source_disable_unref(s->listeners[i].source);
                s->listeners[i].fd = safe_close(s->listeners[i].fd);
        }
        client_set_stop(s->clients);
        if (client_set_count(s->clients) == 0) {
                (void)sd_event_exit(s->event, 0);
                return;
        }
        (void)sd_event_add_time_relative(s->event, &s->stop_timer, CLOCK_MONOTONIC, STOP_DRAIN_USEC, 0,
                                         stop_timeout_cb, s);
}

static int signal_cb(sd_event_source *source, const struct signalfd_siginfo *si, void *userdata) {
        Server *s = userdata;

        if (si->ssi_signo == SIGHUP) {
                _cleanup_free_ char *why = NULL;
                if (manager_reload(s->manager, &why) < 0)
                        log_error("SIGHUP: configuration not reloaded: %s", strna(why));
                return 0;
        }
        server_stop(s);
        return 0;
}

static int server_watch_signals(Server *s) {
        sigset_t mask;
        int r;

        sigemptyset(&mask);
        for (size_t i = 0; i < ELEMENTSOF(handled_signals); i++)
                sigaddset(&mask, handled_signals[i]);
        sigprocmask(SIG_BLOCK, &mask, NULL);
        (void)signal(SIGPIPE, SIG_IGN);
        for (size_t i = 0; i < ELEMENTSOF(handled_signals); i++) {
                r = sd_event_add_signal(s->event, NULL, handled_signals[i], signal_cb, s);
                if (r < 0)
                        return log_error_errno(r, "Failed to watch signal %d: %m", handled_signals[i]);
        }
        return 0;
}

int server_start(Server *s) {
        assert(s);
        char status[512];
        size_t o = 0;
        int r;

        r = server_listen(s);
        if (r < 0)
                return r;
        r = manager_start(s->manager);
        if (r < 0)
                return r;
        r = server_watch_signals(s);
        if (r < 0)
                return r;
        (void)sd_event_set_watchdog(s->event, true);
        log_flush_event = s->event;
        log_set_buffered(log_request_flush);

        o += (size_t)snprintf(status + o, sizeof(status) - o, "Listening on");
        for (size_t i = 0; i < s->n_listeners && o < sizeof(status) - 64; i++)
                o += (size_t)snprintf(status + o, sizeof(status) - o, "%s %s", i ? "," : "",
                                      s->listeners[i].address);
        snprintf(status + o, sizeof(status) - o, "; %zu host(s)", manager_n_hosts(s->manager));
        log_info("%s%s", status, s->socket_activated ? " (socket-activated)" : "");
        s->started = true;
        server_changed(s);
        if (manager_refusal(s->manager)) {
                /* the errors are in the log, once; STATUS= says them (manager_start()) */
                log_error("Refusing every request with 503 until a reload brings a configuration without "
                          "errors; no host is contacted meanwhile");
                (void)sd_notify(false, "READY=1");
                return 0;
        }
        (void)sd_notifyf(false, "READY=1\nSTATUS=%s", status);
        return 0;
}

int server_run(Server *s) {
        assert(s);
        return socket_watch_loop(manager_sockets(s->manager));
}
