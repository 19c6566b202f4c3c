/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The error answers (rule:error-shape, rule:error-status) as data: every error answer of modelgate's own,
 * from its outcome to its HTTP status, error code, headers and words, in one table. The client renders a row
 * in the request's API shape (client_answer()); the host and [Access] write a row's words (answer_format())
 * where they find the outcome and pass them up. Pure. */

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "modelgated/api/api-error.h"

/* How long a client is told to wait before it asks a host that is down again */
#define ANSWER_HOST_DOWN_RETRY_SEC 30

/* One outcome each. The comment names the arguments of the row's words, in their order. */
typedef enum Answer {
        ANSWER_OUT_OF_MEMORY,           /* - */
        ANSWER_ADMISSION_OUT_OF_MEMORY, /* - (the key could not be checked) */
        ANSWER_ALIAS_TARGET_LOST,       /* - */
        ANSWER_BAD_REQUEST,             /* the parser's words (400) */
        ANSWER_MALFORMED_REQUEST,       /* the parser's words; its status */
        ANSWER_NOT_A_PATH,              /* - */
        ANSWER_HEADERS_TIMEOUT,         /* - */
        ANSWER_BODY_TIMEOUT,            /* BodyTimeoutSec= as a timespan */
        ANSWER_BODY_TOO_SLOW,           /* IdleTimeoutSec= as a timespan */
        ANSWER_TOO_MANY_CONNECTIONS, /* connections (unsigned long long), MaxConnectionsPerAddress= (ull) */
        ANSWER_INVALID_API_KEY,      /* the key's digest in hex */
        ANSWER_MISSING_API_KEY,      /* - */
        ANSWER_DAILY_LIMIT,  /* who, the cap (ull), the day, the time left (answer_time_left()); Retry-After
                                given */
        ANSWER_DAILY_TOKENS, /* tokens counted (ull), the day, DailyTokens= (ull), the time left; as above */
        ANSWER_BODY_TOO_LARGE,          /* whose limit, its option, the limit (ull) */
        ANSWER_BODY_NOT_TAKEN,          /* - */
        ANSWER_INVALID_JSON,            /* - */
        ANSWER_MODEL_NOT_STRING,        /* - */
        ANSWER_MODEL_TWICE_IN_BODY,     /* - */
        ANSWER_MODEL_MISSING_IN_BODY,   /* - */
        ANSWER_MODEL_MISSING,           /* - */
        ANSWER_MODEL_BAD_ESCAPE,        /* - */
        ANSWER_MODEL_TWICE_IN_QUERY,    /* - */
        ANSWER_MODEL_BODY_AND_QUERY,    /* - */
        ANSWER_MODEL_CONTROL_CHARACTER, /* - */
        ANSWER_MODEL_NOT_ALLOWED,       /* tier, model */
        ANSWER_ACTIVITY_NOT_ALLOWED,    /* tier (or "anonymous") */
        ANSWER_CONTROL_NOT_ALLOWED,     /* tier (or "anonymous") */
        ANSWER_HOST_NOT_SERVED,         /* the header that marks a web page, the Host (escaped) */
        ANSWER_UNLOAD_SWITCHING,        /* host */
        ANSWER_UNKNOWN_HOST,            /* model (escaped) */
        ANSWER_UNKNOWN_MODEL,           /* host, key (escaped) */
        ANSWER_NO_ENGINE,               /* host, key (escaped) */
        ANSWER_NEVER_LISTED,            /* host, engine, key (escaped), host, engine */
        ANSWER_HOST_DOWN,               /* host, why */
        ANSWER_HOST_REMOVED,            /* host */
        ANSWER_GPU_BUSY,                /* the host's words */
        ANSWER_ENGINE_FAILED,           /* the host's words; its status */
        ANSWER_UPSTREAM_FAILED,         /* host, why, the host's URL */
        ANSWER_UPSTREAM_TIMEOUT,        /* host, UpstreamIdleTimeoutSec= as a timespan */
        ANSWER_UPSTREAM_ENDED_EARLY,    /* host, why */
        ANSWER_UPSTREAM_STREAM_CUT,     /* host, why */
        ANSWER_FALLBACK_FAILED,         /* fallback, its URL, why */
        ANSWER_BUDGET_EXCEEDED,         /* engine, host, what was not within which budget */
        ANSWER_CONFIG_ERROR,            /* the manager's words */
        ANSWER_CRASH_LOOP,              /* the manager's words */
        ANSWER_TOO_MANY_SUBSCRIBERS,    /* the feed's path, subscribers (size_t), the most it takes, the
                                         * most both take, those kept for /activity (ull) */
        ANSWER_PROBE_NOT_SWITCHED,      /* engine, host, what holds the GPU */
        ANSWER_PROBE_NOT_LOADED,        /* model (the key), engine, host */
        ANSWER_STREAM_NOT_FOUND,        /* - */
        ANSWER_STREAM_NO_CONV_ID,       /* - */
        ANSWER_WEBSOCKET_REFUSED,       /* - */
        ANSWER_STREAM_BAD_FROM,         /* - */
        ANSWER_LOOKUP_TOO_LARGE,        /* - */
        _ANSWER_MAX,
        _ANSWER_INVALID = -EINVAL,
} Answer;

/* The headers that steer a client's retry */
typedef enum AnswerHeaders {
        ANSWER_HEADERS_NONE,
        ANSWER_HEADERS_RETRY_AFTER,    /* Retry-After */
        ANSWER_HEADERS_RETRY_AFTER_MS, /* Retry-After and retry-after-ms, for the SDKs that read that */
        ANSWER_HEADERS_NO_RETRY, /* x-should-retry: false: a person has to act, the SDKs do not retry */
        ANSWER_HEADERS_BEARER,   /* WWW-Authenticate: Bearer */
        ANSWER_HEADERS_UPGRADE,  /* Upgrade: HTTP/1.1 (RFC 9110 §15.5.22: a 426 names what to use) */
        _ANSWER_HEADERS_MAX,
} AnswerHeaders;

typedef struct AnswerRow {
        int status;       /* 0: the one that found the outcome gives it (the parser, the host) */
        const char *code; /* OpenAI's "code"; NULL: none */
        AnswerHeaders headers;
        unsigned retry_after; /* seconds, for the Retry-After headers; 0: given with the answer */
        const char *format;   /* printf: the words, their arguments as the enum's comment names them */
} AnswerRow;

const AnswerRow *answer_row(Answer a);

/* The row's words, with its arguments; snprintf()'s return */
int answer_vformat(char *buf, size_t size, Answer a, va_list ap);
int answer_format(char *buf, size_t size, Answer a, ...);

/* The one writing of the Retry-After family: "Retry-After: N\r\n", and "retry-after-ms: N000\r\n" when
 * ms; snprintf()'s return */
/* "18h 56min" (to the minute from a minute on, else "42s"): the time to a day's end, for people */
char *answer_time_left(char *buf, size_t size, uint64_t seconds);
int answer_retry_after(char *buf, size_t size, uint64_t seconds, bool ms);

/* The row's header lines, each ending in CRLF ("" for none); retry_after: the seconds, 0 for the row's own.
 * snprintf()'s return */
int answer_headers(char *buf, size_t size, Answer a, uint64_t retry_after);

/* An answer decided, to be written once by whoever sends it: its row, the status and Retry-After of a row
 * without its own (0: the row's), and its words */
typedef struct AnswerWords {
        Answer answer;
        int status;
        uint64_t retry_after;
        char message[512];
} AnswerWords;

/* Whether the row's words take arguments of this shape, in order: 's' a string, 'u' an unsigned long long,
 * 'z' a size_t ("" none) */
bool answer_shape_ok(Answer a, const char *shape);
/* The row's words with arguments of that shape (asserted): through the wrappers below, one a shape, whose
 * arguments the compiler checks */
void answer_words(AnswerWords *w, Answer a, const char *shape, ...);
/* Words found elsewhere (the host's, [Access]'s), with the status and Retry-After that came with them */
void answer_words_given(AnswerWords *w, Answer a, int status, uint64_t retry_after, const char *message);

static inline void answer_words_0(AnswerWords *w, Answer a) {
        answer_words(w, a, "");
}
static inline void answer_words_s(AnswerWords *w, Answer a, const char *s1) {
        answer_words(w, a, "s", s1);
}
static inline void answer_words_ss(AnswerWords *w, Answer a, const char *s1, const char *s2) {
        answer_words(w, a, "ss", s1, s2);
}
static inline void answer_words_sssss(AnswerWords *w, Answer a, const char *s1, const char *s2,
                                      const char *s3, const char *s4, const char *s5) {
        answer_words(w, a, "sssss", s1, s2, s3, s4, s5);
}
static inline void answer_words_ssu(AnswerWords *w, Answer a, const char *s1, const char *s2,
                                    unsigned long long u) {
        answer_words(w, a, "ssu", s1, s2, u);
}

/* The answer to a lookup of the model (k: api/route.h's ModelLookup, or -ENOMEM) in the body or (query)
 * in the query that found none to route by; _ANSWER_INVALID when it found one, or found none and
 * absent_ok (the other place may name it) */
Answer model_lookup_answer(int k, bool query, bool absent_ok, bool any_body);

/* The status of an answer: the row's, or 'given' for a row without one of its own */
static inline int answer_status(Answer a, int given) {
        return answer_row(a)->status ?: given;
}
