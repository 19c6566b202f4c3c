/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Logging with systemd's semantics, written small: messages go to stderr,
 * prefixed "<N>" (sd-daemon(3)) when stderr is not a terminal so that the
 * journal keeps the priority. log_*_errno() return -abs(error) so that
 * "return log_error_errno(r, ...)" reads naturally, and "%m" means that error. */

#include <errno.h>
#include <stdbool.h>
#include <sys/uio.h>
#include <syslog.h>

#include "shared/macro.h"

void log_set_max_level(int level);
int log_get_max_level(void);
void log_set_prefix(bool on);

int log_internal(int level, int error, const char *file, int line, const char *fmt, ...) _printf_(5, 6);
/* Buffers messages below LOG_WARNING; request_flush() is called after each one, and must arrange for
 * log_flush() soon (the daemon: when its loop is idle). Warnings and errors are written at once. */
void log_set_buffered(void (*request_flush)(void));
void log_flush(void);
/* Between these (they nest), buffered lines are written at the end, without request_flush(): a batch of
 * events that the loop dispatches in one turn writes its lines once, and needs no idle turn for them */
void log_batch_begin(void);
void log_batch_end(void);
/* The one escaping of client- and host-supplied text for log lines: control characters, '"' and '\\'
 * become \xNN, so that no such string can start a line of its own (a forged "<3>" priority) or move the
 * terminal. Truncates to fit dst (size l, at least 1). */
void log_escape(char *dst, size_t l, const char *s, size_t n);
/* The same, malloc'ed; NULL for NULL (or out of memory). */
char *log_escape_dup(const char *s);

/* A line formatted by the caller (no printf pass): the access log writes one per request. */
void log_line(int level, const char *s, size_t n);
/* The same for a line at buf + LOG_MESSAGE_ROOM (n bytes) with a byte of room after it: the priority's
 * prefix and the newline are written around it where it is, so that it is not copied once more */
void log_line_in_place(int level, char *buf, size_t n);

/* rule:journal-fields: whether stderr is the journal's stream ($JOURNAL_STREAM names the device and inode
 * of fd 2, as systemd's own log code checks), decided once at start-up by log_open_journal(). Then lines
 * with fields of their own go to the journal as entries (sd_journal_sendv(), one sendmsg instead of one
 * write), with MESSAGE=, PRIORITY=, MESSAGE_ID= and the fields; otherwise they are plain lines on stderr
 * and the fields are never built. */
void log_open_journal(void);
bool log_journal(void);
/* The text of a MESSAGE= field starts after this much room at the start of its buffer */
#define LOG_MESSAGE_ROOM (sizeof("MESSAGE=") - 1)
/* buf holds LOG_MESSAGE_ROOM bytes of room, then the line (n bytes), and fields are "NAME=value" each (at
 * most LOG_MAX_FIELDS): one journal entry when log_journal(), else the line as log_line() writes it. */
#define LOG_MAX_FIELDS 28
/* "NAME=value" written into b (cut at l), as a field for log_line_fields() */
struct iovec log_field(char *b, size_t l, const char *name, const char *value);
void log_line_fields(int level, const char *message_id, char *buf, size_t n, const struct iovec *fields,
                     size_t n_fields);

/* An error made up by the caller rather than returned by a call: log_*_errno(SYNTHETIC_ERRNO(EINVAL), …)
 * logs and returns -EINVAL as for any other, and says by the flag that no system call failed (so %m is
 * that made-up error, not the errno of whatever ran last). ERRNO_VALUE() is the errno without the flag. */
#define SYNTHETIC_ERRNO_FLAG (1 << 30)
#define SYNTHETIC_ERRNO(num) (SYNTHETIC_ERRNO_FLAG | ((num) < 0 ? -(num) : (num)))
#define IS_SYNTHETIC_ERRNO(val) ((((val) < 0 ? -(val) : (val)) & SYNTHETIC_ERRNO_FLAG) != 0)
#define ERRNO_VALUE(val) (((val) < 0 ? -(val) : (val)) & ~SYNTHETIC_ERRNO_FLAG)

#define log_full_errno(level, error, ...)                                                                   \
        ({                                                                                                  \
                int _l = (level), _e = ERRNO_VALUE(error);                                                  \
                (log_get_max_level() >= LOG_PRI(_l))                                                        \
                        ? log_internal(_l, _e, __FILE__, __LINE__, __VA_ARGS__)                             \
                        : -_e;                                                                              \
        })
#define log_full(level, ...) (void)log_full_errno(level, 0, __VA_ARGS__)

#define log_debug(...) log_full(LOG_DEBUG, __VA_ARGS__)
#define log_info(...) log_full(LOG_INFO, __VA_ARGS__)
#define log_notice(...) log_full(LOG_NOTICE, __VA_ARGS__)
#define log_warning(...) log_full(LOG_WARNING, __VA_ARGS__)
#define log_error(...) log_full(LOG_ERR, __VA_ARGS__)

#define log_debug_errno(e, ...) log_full_errno(LOG_DEBUG, e, __VA_ARGS__)
#define log_info_errno(e, ...) log_full_errno(LOG_INFO, e, __VA_ARGS__)
#define log_notice_errno(e, ...) log_full_errno(LOG_NOTICE, e, __VA_ARGS__)
#define log_warning_errno(e, ...) log_full_errno(LOG_WARNING, e, __VA_ARGS__)
#define log_error_errno(e, ...) log_full_errno(LOG_ERR, e, __VA_ARGS__)

#define log_oom() log_error_errno(SYNTHETIC_ERRNO(ENOMEM), "Out of memory.")
