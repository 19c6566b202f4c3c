/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <systemd/sd-journal.h>
#include <unistd.h>

#include "shared/log.h"

static int max_level = LOG_INFO;
static bool to_journal;
static int use_prefix = -1; /* -1: decide on first use */

void log_set_max_level(int level) {
        max_level = level;
}

int log_get_max_level(void) {
        return max_level;
}

void log_set_prefix(bool on) {
        use_prefix = on;
}

static void (*flush_hook)(void);

void log_set_buffered(void (*request_flush)(void)) {
        /* access lines come one per request: under load they are gathered and written at the end of the
         * batch of events that logged them (log_batch_end()), or when the loop has nothing else to do (or
         * the buffer is full), instead of one write(2) each */
        static char buf[64 * 1024];
        if (request_flush && !flush_hook)
                setvbuf(stderr, buf, _IOFBF, sizeof(buf));
        if (!request_flush)
                fflush(stderr);
        flush_hook = request_flush;
}

void log_flush(void) {
        fflush(stderr);
}

/* In a batch of events (log_batch_begin()), lines wait for its end rather than for an idle turn of the
 * loop: the turn costs more than the whole of a small request's line */
static unsigned batch_depth;
static bool batch_buffered;

void log_batch_begin(void) {
        batch_depth++;
}

void log_batch_end(void) {
        assert(batch_depth > 0);
        if (--batch_depth == 0 && batch_buffered) {
                batch_buffered = false;
                fflush(stderr);
        }
}

/* After a line: written now, at the batch's end, or when the hook's owner says */
static void line_written(int level) {
        if (!flush_hook || LOG_PRI(level) <= LOG_WARNING)
                fflush(stderr);
        else if (batch_depth > 0)
                batch_buffered = true;
        else
                flush_hook();
}

int log_internal(int level, int error, const char *file, int line, const char *fmt, ...) {
        char buf[4096];
        va_list ap;
        int n = 0, k;

        (void)file;
        (void)line;

        if (use_prefix < 0)
                use_prefix = !isatty(STDERR_FILENO);

        if (use_prefix)
                n = snprintf(buf, sizeof(buf), "<%i>", LOG_PRI(level));
        /* %m must mean the error we were given, not whatever errno is now */
        errno = error;
        va_start(ap, fmt);
        k = vsnprintf(buf + n, sizeof(buf) - (size_t)n - 1, fmt, ap);
        va_end(ap);
        n = k < 0 ? n : MIN(n + k, (int)sizeof(buf) - 2);
        buf[n++] = '\n';
        fwrite(buf, 1, (size_t)n, stderr);

        line_written(level);
        return -error;
}

void log_line(int level, const char *s, size_t n) {
        char b[4096];
        size_t k = 0;

        if (LOG_PRI(level) > max_level)
                return;
        if (use_prefix < 0)
                use_prefix = !isatty(STDERR_FILENO);
        if (use_prefix) {
                b[k++] = '<';
                b[k++] = (char)('0' + LOG_PRI(level));
                b[k++] = '>';
        }
        if (n < sizeof(b) - k) {
                /* one write into stderr's buffer (and one lock of it) for the line, as a rule: there is
                 * one for every request */
                memcpy(b + k, s, n);
                b[k + n] = '\n';
                fwrite(b, 1, k + n + 1, stderr);
        } else {
                if (k > 0)
                        fwrite(b, 1, k, stderr);
                fwrite(s, 1, n, stderr);
                fputc('\n', stderr);
        }
        line_written(level);
}

void log_line_in_place(int level, char *buf, size_t n) {
        char *s = buf + LOG_MESSAGE_ROOM;
        size_t k = 0;

        _Static_assert(LOG_MESSAGE_ROOM >= 3, "room for the priority's prefix");
        if (LOG_PRI(level) > max_level)
                return;
        if (use_prefix < 0)
                use_prefix = !isatty(STDERR_FILENO);
        if (use_prefix) {
                s -= 3;
                s[0] = '<';
                s[1] = (char)('0' + LOG_PRI(level));
                s[2] = '>';
                k = 3;
        }
        s[k + n] = '\n';
        fwrite(s, 1, k + n + 1, stderr);
        line_written(level);
}

void log_escape(char *dst, size_t l, const char *s, size_t n) {
        assert(dst);
        size_t o = 0;
        for (size_t i = 0; i < n && o + 5 < l; i++) {
                unsigned char ch = (unsigned char)s[i];
                if (ch < 0x20 || ch == 0x7f || ch == '"' || ch == '\\') {
                        dst[o++] = '\\';
                        dst[o++] = 'x';
                        dst[o++] = "0123456789abcdef"[ch >> 4];
                        dst[o++] = "0123456789abcdef"[ch & 15];
                } else
                        dst[o++] = (char)ch;
        }
        dst[o] = 0;
}

char *log_escape_dup(const char *s) {
        if (!s)
                return NULL;
        size_t n = strlen(s), l = n * 4 + 6;
        char *d = malloc(l);
        if (d)
                log_escape(d, l, s, n);
        return d;
}

void log_open_journal(void) {
        const char *e = getenv("JOURNAL_STREAM");
        unsigned long long dev, ino;
        struct stat st;
        int k = 0;

        /* rule:journal-fields: "dev:ino" of the stream the service manager connected to the journal; fd 2
         * must still be that one (a shell redirect keeps the variable and changes the fd) */
        to_journal = e && sscanf(e, "%llu:%llu%n", &dev, &ino, &k) == 2 && e[k] == 0 &&
                     fstat(STDERR_FILENO, &st) >= 0 && (unsigned long long)st.st_dev == dev &&
                     (unsigned long long)st.st_ino == ino;
}

bool log_journal(void) {
        return to_journal;
}

void log_line_fields(int level, const char *message_id, char *buf, size_t n, const struct iovec *fields,
                     size_t n_fields) {
        struct iovec iov[LOG_MAX_FIELDS + 3];
        char pri[sizeof("PRIORITY=") + 1] = "PRIORITY=0", mid[sizeof("MESSAGE_ID=") + 32];
        size_t k = 0;

        assert(buf);
        if (LOG_PRI(level) > max_level)
                return;
        if (!to_journal) {
                log_line(level, buf + LOG_MESSAGE_ROOM, n);
                return;
        }
        memcpy(buf, "MESSAGE=", LOG_MESSAGE_ROOM);
        iov[k++] = (struct iovec){buf, LOG_MESSAGE_ROOM + n};
        pri[sizeof(pri) - 2] = (char)('0' + LOG_PRI(level));
        iov[k++] = (struct iovec){pri, sizeof(pri) - 1};
        if (message_id) {
                int l = snprintf(mid, sizeof(mid), "MESSAGE_ID=%s", message_id);
                iov[k++] = (struct iovec){mid, (size_t)MIN(l, (int)sizeof(mid) - 1)};
        }
        for (size_t i = 0; i < n_fields && i < LOG_MAX_FIELDS; i++)
                iov[k++] = fields[i];
        /* the journal gone (restarted, full socket buffer): the line goes to stderr as it would have */
        if (sd_journal_sendv(iov, (int)k) < 0)
                log_line(level, buf + LOG_MESSAGE_ROOM, n);
}

struct iovec log_field(char *b, size_t l, const char *name, const char *value) {
        int k = snprintf(b, l, "%s=%s", name, value ?: "");
        return (struct iovec){b, (size_t)MIN(MAX(k, 0), (int)l - 1)};
}
