/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* modelgatectl top: the live activity (rule:activity-feed) as a terminal view, like systemd-cgtop. It
 * reads the Manager's GetActivity() once a second (the same JSON as /activity's snapshot: one bus call,
 * no HTTP port or key to know) and draws one frame with plain ANSI: clear, home, lines cut to the
 * terminal's width. q quits; --once, or a stdout that is no terminal, prints one frame and exits. */

#include <errno.h>
#include <stdarg.h>
#include <json-c/json.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "modelgatectl/modelgatectl.h"
#include "shared/log.h"
#include "shared/macro.h"
#include "shared/time-util.h"

static struct termios saved_tty;
static bool tty_raw = false;

static void tty_restore(void) {
        if (tty_raw) {
                (void)tcsetattr(STDIN_FILENO, TCSANOW, &saved_tty);
                tty_raw = false;
        }
}

static void tty_make_raw(void) {
        struct termios t;

        if (!isatty(STDIN_FILENO) || tcgetattr(STDIN_FILENO, &saved_tty) < 0)
                return;
        t = saved_tty;
        t.c_lflag &= ~(ICANON | ECHO);
        t.c_cc[VMIN] = 0;
        t.c_cc[VTIME] = 0;
        if (tcsetattr(STDIN_FILENO, TCSANOW, &t) >= 0)
                tty_raw = true;
}

static json_object *get(json_object *o, const char *key) {
        json_object *v;
        return o && json_object_object_get_ex(o, key, &v) ? v : NULL;
}

static const char *s_of(json_object *o, const char *key, const char *none) {
        json_object *v = get(o, key);
        return v && json_object_is_type(v, json_type_string) ? json_object_get_string(v) : none;
}

static bool has(json_object *o, const char *key) {
        json_object *v = get(o, key);
        return v && !json_object_is_type(v, json_type_null);
}

static int64_t i_of(json_object *o, const char *key) {
        return has(o, key) ? json_object_get_int64(get(o, key)) : -1;
}

static double d_of(json_object *o, const char *key) {
        return has(o, key) ? json_object_get_double(get(o, key)) : -1;
}

/* A countdown to a CLOCK_REALTIME µs time, "-" for none */
static void countdown(char *buf, size_t l, json_object *o, const char *key, int64_t now) {
        int64_t t = i_of(o, key);
        if (t < 0)
                snprintf(buf, l, "-");
        else
                snprintf(buf, l, "%llds", (long long)(t > now ? (t - now + 999999) / 1000000 : 0));
}

static void num_or_dash(char *buf, size_t l, int64_t v) {
        if (v < 0)
                snprintf(buf, l, "-");
        else
                snprintf(buf, l, "%lld", (long long)v);
}

/* One line of the frame, cut to the width */
static void line(FILE *f, int width, const char *fmt, ...) _printf_(3, 4);
static void line(FILE *f, int width, const char *fmt, ...) {
        char buf[512];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(buf, sizeof(buf), fmt, ap);
        va_end(ap);
        if (width > 0 && (size_t)width < strlen(buf))
                buf[width] = 0;
        fprintf(f, "%s\n", buf);
}

static void draw_hosts(FILE *f, int w, json_object *hosts, int64_t now) {
        line(f, w, "%-12s %-10s %-20s %6s %9s %9s %7s", "HOST", "STATE", "ENGINE", "HOLD", "IDLESTOP",
             "IN-FLIGHT", "WAITING");
        for (size_t i = 0; hosts && i < json_object_array_length(hosts); i++) {
                json_object *h = json_object_array_get_idx(hosts, i);
                char engine[64], hold[24], idle[24];
                const char *to = s_of(h, "switching_to", NULL);
                if (to)
                        snprintf(engine, sizeof(engine), "%s>%s", s_of(h, "engine", "-"), to);
                else
                        snprintf(engine, sizeof(engine), "%s", s_of(h, "engine", "-"));
                countdown(hold, sizeof(hold), h, "hold_down_until", now);
                countdown(idle, sizeof(idle), h, "idle_stop_at", now);
                line(f, w, "%-12s %-10s %-20s %6s %9s %9lld %7lld", s_of(h, "host", "?"),
                     s_of(h, "state", "?"), engine, hold, idle, (long long)i_of(h, "in_flight"),
                     (long long)i_of(h, "waiting"));
        }
}

static void draw_inflight(FILE *f, int w, json_object *reqs, int64_t now, int rows) {
        line(f, w, "%-22s %-10s %-10s %-11s %7s %-12s %6s", "REQUESTS  MODEL", "HOST", "ENGINE", "PHASE",
             "AGE", "WAITS FOR", "TTFB");
        size_t n = reqs ? json_object_array_length(reqs) : 0;
        for (size_t i = 0; i < n && (int)i < rows; i++) {
                json_object *r = json_object_array_get_idx(reqs, i);
                char fb[24];
                num_or_dash(fb, sizeof(fb), i_of(r, "first_byte_ms"));
                line(f, w, "%-22s %-10s %-10s %-11s %6.1fs %-12s %6s", s_of(r, "model", "unknown"),
                     s_of(r, "host", "-"), s_of(r, "engine", "-"), s_of(r, "phase", "?"),
                     (double)(now - i_of(r, "started")) / 1e6, s_of(r, "waits_for", "-"), fb);
        }
        if ((int)n > rows)
                line(f, w, "  ... %zu more", n - (size_t)rows);
}

static void draw_recent(FILE *f, int w, json_object *reqs, int rows) {
        line(f, w, "%-6s %-22s %-10s %8s %6s %6s %8s %8s", "STATUS", "RECENT  MODEL", "ENGINE", "DURATION",
             "IN", "OUT", "PREFILL", "DECODE");
        size_t n = reqs ? json_object_array_length(reqs) : 0;
        /* newest first */
        for (size_t k = 0; k < n && (int)k < rows; k++) {
                json_object *r = json_object_array_get_idx(reqs, n - 1 - k);
                char in[24], out[24], pf[24], dc[24];
                num_or_dash(in, sizeof(in), i_of(r, "tokens_in"));
                num_or_dash(out, sizeof(out), i_of(r, "tokens_out"));
                double p = d_of(r, "prefill_tps"), d = d_of(r, "decode_tps");
                snprintf(pf, sizeof(pf), p < 0 ? "-" : "%.1f/s", p);
                snprintf(dc, sizeof(dc), d < 0 ? "-" : "%.1f/s", d);
                line(f, w, "%-6lld %-22s %-10s %7.2fs %6s %6s %8s %8s", (long long)i_of(r, "status"),
                     s_of(r, "model", "unknown"), s_of(r, "fallback", s_of(r, "engine", "-")),
                     (double)i_of(r, "duration_ms") / 1000, in, out, pf, dc);
        }
}

/* rule:sessions: each agent's session by its label, the most recently active first: its turns, the
 * requests of it in flight (FLY), its tokens, how many of its requests waited and how long, the switches
 * it caused (SW), and how long since its last request (IDLE) */
static void draw_sessions(FILE *f, int w, json_object *sessions, int64_t now, int rows) {
        line(f, w, "%-12s %-18s %-8s %5s %3s %7s %7s %6s %5s %7s %3s %5s", "SESSION", "KEY", "HOST", "TURNS",
             "FLY", "IN", "CACHED", "OUT", "WAITS", "WAITED", "SW", "IDLE");
        size_t n = sessions ? json_object_array_length(sessions) : 0;
        for (size_t i = 0; i < n && (int)i < rows; i++) {
                json_object *s = json_object_array_get_idx(sessions, i);
                int64_t last = i_of(s, "last");
                char idle[24];
                snprintf(idle, sizeof(idle), "%llds",
                         (long long)(last > 0 && now > last ? (now - last) / 1000000 : 0));
                line(f, w, "%-12.12s %-18.18s %-8.8s %5lld %3lld %7lld %7lld %6lld %5lld %6.1fs %3lld %5s",
                     s_of(s, "session", "?"), s_of(s, "key", "anonymous"), s_of(s, "host", "-"),
                     (long long)i_of(s, "turns"), (long long)i_of(s, "in_flight"),
                     (long long)i_of(s, "tokens_in"), (long long)i_of(s, "tokens_cached"),
                     (long long)i_of(s, "tokens_out"), (long long)i_of(s, "waits"),
                     (double)i_of(s, "wait_ms") / 1000, (long long)i_of(s, "switches"), idle);
        }
        if ((int)n > rows)
                line(f, w, "  ... %zu more", n - (size_t)rows);
}

static void draw(FILE *f, json_object *snap, int width, int height) {
        json_object *hosts = get(snap, "hosts"), *inflight = get(snap, "inflight"),
                    *recent = get(snap, "recent"), *sessions = get(snap, "sessions");
        int64_t now = i_of(snap, "t");
        time_t secs = (time_t)(now / 1000000);
        char when[32];
        struct tm tm;

        strftime(when, sizeof(when), "%H:%M:%S", localtime_r(&secs, &tm));
        size_t nh = hosts ? json_object_array_length(hosts) : 0,
               ni = inflight ? json_object_array_length(inflight) : 0,
               ns = sessions ? json_object_array_length(sessions) : 0;
        /* rule:state-words: in flight and waiting as status counts them, the hosts' own numbers (a request
         * queued for a switch is waiting, not in flight) */
        int64_t flying = 0, waiting = 0;
        for (size_t i = 0; i < nh; i++) {
                flying += MAX(i_of(json_object_array_get_idx(hosts, i), "in_flight"), 0);
                waiting += MAX(i_of(json_object_array_get_idx(hosts, i), "waiting"), 0);
        }
        line(f, width,
             "modelgate top  %s  hosts %zu  %lld in flight, %lld waiting  sessions %zu  recent %zu", when,
             nh, (long long)flying, (long long)waiting, ns, recent ? json_object_array_length(recent) : 0);
        line(f, width, "%s", "");
        draw_hosts(f, width, hosts, now);
        line(f, width, "%s", "");
        /* the rest of the screen: the requests in flight, the sessions (when there are any), then the last
         * requests */
        int left = height - 5 - (int)nh;
        int rows_in = MAX(1, MIN((int)ni + ((int)ni > left / 2 ? 1 : 0), left / 2 - 1));
        draw_inflight(f, width, inflight, now, rows_in);
        line(f, width, "%s", "");
        if (ns > 0) {
                int rows_s = MAX(1, MIN((int)ns + ((int)ns > left / 4 ? 1 : 0), left / 4 - 1));
                draw_sessions(f, width, sessions, now, rows_s);
                line(f, width, "%s", "");
                left -= rows_s + 2;
        }
        draw_recent(f, width, recent, MAX(1, left - rows_in - 3));
}

static int fetch(sd_bus *bus, json_object **ret) {
        _cleanup_(sd_bus_error_free) sd_bus_error e = SD_BUS_ERROR_NULL;
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        const char *s;
        int r;

        /* rule:ctl-never-starts: top open is no reason for modelgate to run (its idle exit stays one) */
        r = call_manager(bus, "GetActivity", /* start= */ false, &e, &reply);
        if (r >= 0)
                r = sd_bus_message_read(reply, "s", &s);
        if (r < 0 && is_stopped(&e))
                return -ESRCH;
        if (r < 0) {
                /* polkit's no is the caller's to hear as such (exit 5), as for the other methods */
                if (sd_bus_error_has_name(&e, SD_BUS_ERROR_ACCESS_DENIED) ||
                    sd_bus_error_has_name(&e, SD_BUS_ERROR_INTERACTIVE_AUTHORIZATION_REQUIRED))
                        return report("Cannot read the activity", &e, r);
                log_error("Cannot read the activity: %s", e.message ?: strerror(-r));
                return EXIT_UNREACHABLE;
        }
        *ret = json_tokener_parse(s);
        if (!*ret) {
                log_error("GetActivity() returned no JSON");
                return EXIT_FAILED;
        }
        return EXIT_OK;
}

static void on_signal(int sig) {
        tty_restore();
        signal(sig, SIG_DFL);
        raise(sig);
}

int do_top(sd_bus *bus, bool once) {
        bool live = !once && isatty(STDOUT_FILENO);
        int r;

        if (live) {
                tty_make_raw();
                atexit(tty_restore);
                signal(SIGINT, on_signal);
                signal(SIGTERM, on_signal);
        }
        for (;;) {
                json_object *snap = NULL;
                struct winsize ws = {};
                int width = 0, height = 1000;

                r = fetch(bus, &snap);
                if (r == -ESRCH && !live) {
                        if (say_stopped(bus) < 0)
                                log_error(
                                        "Cannot read the activity: modelgated is not running on the %s bus",
                                        arg_user ? "user" : "system");
                        return EXIT_UNREACHABLE;
                }
                if (r != EXIT_OK && r != -ESRCH)
                        return r;
                if (live) {
                        width = 80;
                        height = 24;
                        if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) >= 0 && ws.ws_col > 0 && ws.ws_row > 0) {
                                width = ws.ws_col;
                                height = ws.ws_row;
                        }
                        fputs("\033[H\033[2J", stdout);
                }
                if (r == -ESRCH && say_stopped(bus) < 0) /* stopped: said, and looked at again in a second */
                        printf("modelgate is not running\n");
                else
                        draw(stdout, snap, width, height);
                json_object_put(snap);
                fflush(stdout);
                if (!live)
                        return EXIT_OK;
                /* a second, or a key */
                struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
                if (poll(&p, 1, 1000) > 0) {
                        char c;
                        ssize_t n = read(STDIN_FILENO, &c, 1);
                        if (n == 0 && !tty_raw)
                                p.fd = -1; /* stdin closed: refresh only */
                        if (n == 1 && (c == 'q' || c == 'Q')) {
                                tty_restore();
                                return EXIT_OK;
                        }
                }
        }
}
