/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The access line, built by hand: it is written for every request, and printf was a third of the
 * instructions a small request cost. */

#include <stdbool.h>
#include <string.h>
#include <sys/uio.h>

#include "modelgated/api/access-line.h"
#include "shared/log.h"
#include "shared/macro.h"
#include "shared/word.h"

typedef struct LineOut {
        char *p, *end;
} LineOut;

/* Inline, as everything that takes a LineOut: one the compiler sees go nowhere else keeps its place in a
 * register, where it was stored and loaded again around each byte written */
static _always_inline_ void out_mem(LineOut *o, const char *s, size_t l) {
        l = MIN(l, (size_t)(o->end - o->p));
        memcpy(o->p, s, l);
        o->p += l;
}

/* A literal: inline, where its length is known, it is a few moves rather than a call */
static inline void out_lit_n(LineOut *o, const char *s, size_t l) {
        if ((size_t)(o->end - o->p) >= l) {
                memcpy(o->p, s, l);
                o->p += l;
        } else
                out_mem(o, s, l);
}
#define out_lit(o, s) out_lit_n(o, "" s, sizeof(s) - 1)

static _always_inline_ void out_str(LineOut *o, const char *s) {
        out_mem(o, s, strlen(s));
}

/* "00" to "99", back to back: a number's digits are written two at a time, half the divisions */
static const char hundredths[] =
        "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
        "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
        "8081828384858687888990919293949596979899";

static inline size_t u64_digits(uint64_t v) {
        size_t n = 1;

        for (;;) {
                if (v < 10)
                        return n;
                if (v < 100)
                        return n + 1;
                if (v < 1000)
                        return n + 2;
                if (v < 10000)
                        return n + 3;
                v /= 10000;
                n += 4;
        }
}

/* v's n digits, ending at e */
static inline void put_digits(char *e, uint64_t v) {
        while (v >= 100) {
                uint64_t q = v / 100;
                e -= 2;
                memcpy(e, hundredths + 2 * (v - q * 100), 2);
                v = q;
        }
        if (v >= 10) {
                e -= 2;
                memcpy(e, hundredths + 2 * v, 2);
        } else
                *--e = (char)('0' + v);
}

/* Written in place from the end: a number is in every field, and a copy through memcpy() cost more than
 * the digits */
static inline void out_u64(LineOut *o, uint64_t v, int width) {
        size_t d = u64_digits(v), n = MAX(d, (size_t)MAX(width, 0));

        if ((size_t)(o->end - o->p) < n) {
                char t[24 + 24], *e = t + sizeof(t);
                n = MIN(n, sizeof(t));
                put_digits(e, v);
                memset(e - n, '0', n - d);
                out_mem(o, e - n, n);
                return;
        }
        memset(o->p, '0', n - d);
        put_digits(o->p + n, v);
        o->p += n;
}

/* The bytes log_escape() leaves as they are (and not the NUL that ends a string) */
static const bool plain[256] = {
        [0x20 ... 0x21] = true, /* '"' (0x22) is escaped */
        [0x23 ... 0x5b] = true, /* '\\' (0x5c) is escaped */
        [0x5d ... 0x7e] = true,
        [0x80 ... 0xff] = true,
};

/* The string escaped (not copied as it is: out_escaped()): where it ends in buf (room bytes) */
static __attribute__((noinline)) size_t escaped_slow(char *buf, size_t room, Span s) {
        char t[256];
        size_t l;

        log_escape(t, sizeof(t), s.p ?: "", s.n);
        l = MIN(strlen(t), room);
        memcpy(buf, t, l);
        return l;
}

static _always_inline_ void out_escaped(LineOut *o, Span s) {
        size_t i = 0;

        /* as a rule nothing in it needs escaping, and it is short enough for log_escape() to keep it
         * whole (it writes while 5 bytes are left in its 256): then it is copied as it is checked */
        if (s.n <= 256 - 5 && s.n <= (size_t)(o->end - o->p)) {
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
                /* eight bytes at a time while none is below ' ', DEL, '"' or '\\'; the last eight
                 * overlapping those before */
                for (size_t at = 0; s.n >= 8 && i < s.n; i = at + 8) {
                        uint64_t v;
                        at = MIN(i, s.n - 8);
                        memcpy(&v, s.p + at, 8);
                        if (WORD_BELOW(v, 0x20) | WORD_IS(v, 0x7f) | WORD_IS(v, '"') | WORD_IS(v, '\\'))
                                break;
                        memcpy(o->p + at, &v, 8);
                }
#endif
                while (i < s.n && plain[(unsigned char)s.p[i]]) {
                        o->p[i] = s.p[i];
                        i++;
                }
                if (i == s.n) {
                        o->p += i;
                        return;
                }
        }
        o->p += escaped_slow(o->p, (size_t)(o->end - o->p), s);
}

/* "000" to "999", back to back: the three decimals of a time are one short copy, not three divisions */
#define DIGIT(x) x "0" x "1" x "2" x "3" x "4" x "5" x "6" x "7" x "8" x "9"
#define TWO(x)                                                                                              \
        DIGIT(x "0")                                                                                        \
        DIGIT(x "1")                                                                                        \
        DIGIT(x "2")                                                                                        \
        DIGIT(x "3") DIGIT(x "4") DIGIT(x "5") DIGIT(x "6") DIGIT(x "7") DIGIT(x "8") DIGIT(x "9")
static const char thousandths[] =
        TWO("0") TWO("1") TWO("2") TWO("3") TWO("4") TWO("5") TWO("6") TWO("7") TWO("8") TWO("9");
#undef TWO
#undef DIGIT

/* to the millisecond; inline: two or more in every line */
static _always_inline_ void out_seconds(LineOut *o, usec_t t) {
        uint64_t ms = t / USEC_PER_MSEC, s = ms / 1000;
        unsigned f = (unsigned)(ms - s * 1000);

        if (s < 10 && o->end - o->p >= 6) {
                /* as a rule: one digit, and the six bytes written where they go, with no copy between */
                o->p[0] = (char)('0' + s);
                o->p[1] = '.';
                memcpy(o->p + 2, thousandths + 3 * f, 3);
                o->p[5] = 's';
                o->p += 6;
                return;
        }
        char d[5] = {'.', 0, 0, 0, 's'};
        memcpy(d + 1, thousandths + 3 * f, 3);
        out_u64(o, s, 0);
        out_lit_n(o, d, sizeof(d));
}

/* rule:usage-charge: "~" before a count the answer did not say */
static void out_count(LineOut *o, int64_t v, bool charged) {
        if (v < 0)
                out_lit(o, "?");
        else {
                if (charged)
                        out_lit(o, "~");
                out_u64(o, (uint64_t)v, 0);
        }
}

/* tokens per second, to a tenth */
static void out_speed(LineOut *o, double v) {
        uint64_t t = (uint64_t)(v * 10 + 0.5);
        out_u64(o, t / 10, 0);
        out_lit(o, ".");
        out_u64(o, t % 10, 0);
        out_lit(o, "t/s");
}

/* rule:usage: the engine, its first byte, the tokens and the speeds */
static void out_usage(LineOut *o, const RequestRecord *l) {
        const Usage *u = l->usage;
        double prefill, decode;

        if (l->engine) {
                out_lit(o, " engine=");
                out_str(o, l->engine);
        }
        /* rule:queued-and-switch: a part under the line's millisecond would read "0.000s" */
        if (l->queued >= USEC_PER_MSEC) {
                out_lit(o, " queued=");
                out_seconds(o, l->queued);
        }
        if (l->switched >= USEC_PER_MSEC) {
                out_lit(o, " switch=");
                out_seconds(o, l->switched);
        }
        if (l->first_byte > 0) {
                out_lit(o, " first_byte=");
                out_seconds(o, l->first_byte);
        }
        if (!u || (!usage_known(u) && !l->cut))
                return;
        out_lit(o, " tokens=in:");
        out_count(o, u->in, u->in_charged);
        out_lit(o, ",cached:");
        out_count(o, u->cached, false);
        out_lit(o, ",out:");
        out_count(o, u->out, u->out_charged);
        if (l->cut)
                out_lit(o, "(cut)");
        if (l->fallback)
                out_lit(o, "(cloud)");
        if ((prefill = usage_speed(u->prompt_n, u->prompt_ms)) >= 0) {
                out_lit(o, " prefill=");
                out_speed(o, prefill);
        }
        if ((decode = usage_speed(u->predicted_n, u->predicted_ms)) >= 0) {
                out_lit(o, " decode=");
                out_speed(o, decode);
        }
}

static Span str_span(const char *s) {
        return (Span){s, s ? strlen(s) : 0};
}

size_t access_line_format(char *buf, size_t size, const RequestRecord *l) {
        LineOut o = {buf, buf + size};

        out_str(&o, strna(l->method));
        out_lit(&o, " ");
        out_escaped(&o, l->path.p ? l->path : str_span("n/a"));
        out_lit(&o, " model=\"");
        out_escaped(&o, str_span(l->model));
        out_lit(&o, "\" host=");
        out_str(&o, l->host ?: "-");
        if (l->target) {
                out_lit(&o, " target=");
                out_str(&o, l->target);
        }
        out_lit(&o, " status=");
        out_u64(&o, (uint64_t)l->status, 0);
        out_lit(&o, " bytes=");
        out_u64(&o, l->bytes, 0);
        out_lit(&o, " dur=");
        out_seconds(&o, l->duration);
        out_lit(&o, " from=");
        out_str(&o, l->peer);
        out_lit(&o, " ua=\"");
        out_escaped(&o, l->user_agent);
        out_lit(&o, "\"");
        if (l->early) {
                out_lit(&o, " early=200");
                if (l->error_status) {
                        out_lit(&o, " error=");
                        out_u64(&o, (uint64_t)l->error_status, 0);
                }
        }
        if (l->upstream_error_status) {
                out_lit(&o, " upstream_error=");
                out_u64(&o, (uint64_t)l->upstream_error_status, 0);
                out_lit(&o, " upstream_message=\"");
                out_escaped(&o, str_span(l->upstream_error ?: ""));
                out_lit(&o, "\"");
        }
        if (l->key) {
                out_lit(&o, " key=");
                out_str(&o, l->key);
        }
        if (l->session) {
                out_lit(&o, " session=");
                out_str(&o, l->session);
        }
        if (l->fallback) {
                out_lit(&o, " via=fallback/");
                out_str(&o, l->fallback);
        }
        if (l->note) {
                out_lit(&o, " ");
                out_str(&o, l->note);
        }
        out_usage(&o, l);
        if (l->request_id.n > 0) {
                out_lit(&o, " id=");
                if (l->request_id_made)
                        out_mem(&o, l->request_id.p, l->request_id.n);
                else
                        out_escaped(&o, l->request_id);
        }
        return (size_t)(o.p - buf);
}

/* One field: its name, then what 'write' puts in (cut at the buffer's end) */
typedef struct FieldsOut {
        LineOut o;
        struct iovec *iov;
        size_t n;
} FieldsOut;

/* name: "NAME=", l bytes; inline, with a literal: its bytes are a few moves, not a call */
static _always_inline_ LineOut *field_begin_n(FieldsOut *f, const char *name, size_t l) {
        f->iov[f->n].iov_base = f->o.p;
        out_lit_n(&f->o, name, l);
        return &f->o;
}
#define field_begin(f, name) field_begin_n(f, "" name "=", sizeof(name))

static void field_end(FieldsOut *f) {
        f->iov[f->n].iov_len = (size_t)(f->o.p - (char *)f->iov[f->n].iov_base);
        f->n++;
}

static _always_inline_ void field_str_n(FieldsOut *f, const char *name, size_t l, const char *v) {
        if (!v)
                return;
        out_str(field_begin_n(f, name, l), v);
        field_end(f);
}
#define field_str(f, name, v) field_str_n(f, "" name "=", sizeof(name), v)

static _always_inline_ void field_u64_n(FieldsOut *f, const char *name, size_t l, uint64_t v) {
        out_u64(field_begin_n(f, name, l), v, 0);
        field_end(f);
}
#define field_u64(f, name, v) field_u64_n(f, "" name "=", sizeof(name), v)

static void field_speed(FieldsOut *f, LineOut *o, double v) {
        uint64_t t = (uint64_t)(v * 10 + 0.5);
        out_u64(o, t / 10, 0);
        out_lit(o, ".");
        out_u64(o, t % 10, 0);
        field_end(f);
}

size_t access_line_fields(char *buf, size_t size, struct iovec *fields, const RequestRecord *l) {
        FieldsOut f = {{buf, buf + size}, fields, 0};
        const Usage *u = l->usage;
        double v;

        /* names from the configuration, and modelgate's own numbers: only the model, the key and the id
         * are the client's, escaped as in the line (a session is its label, hex digits of ours) */
        field_str(&f, "MODELGATE_HOST", l->host);
        field_str(&f, "MODELGATE_ENGINE", l->engine);
        if (l->model) {
                out_escaped(field_begin(&f, "MODELGATE_MODEL"), str_span(l->model));
                field_end(&f);
        }
        field_u64(&f, "MODELGATE_STATUS", (uint64_t)l->status);
        if (l->upstream_error_status) {
                field_u64(&f, "MODELGATE_UPSTREAM_ERROR", (uint64_t)l->upstream_error_status);
                out_escaped(field_begin(&f, "MODELGATE_UPSTREAM_MESSAGE"),
                            str_span(l->upstream_error ?: ""));
                field_end(&f);
        }
        if (l->request_id.n > 0) {
                out_escaped(field_begin(&f, "MODELGATE_REQUEST_ID"), l->request_id);
                field_end(&f);
        }
        field_str(&f, "MODELGATE_KEY", l->key);
        field_str(&f, "MODELGATE_SESSION", l->session);
        field_str(&f, "MODELGATE_FALLBACK", l->fallback);
        field_u64(&f, "MODELGATE_DURATION_USEC", l->duration);
        if (l->first_byte > 0)
                field_u64(&f, "MODELGATE_FIRST_BYTE_USEC", l->first_byte);
        if (l->queued > 0)
                field_u64(&f, "MODELGATE_QUEUED_USEC", l->queued);
        if (l->switched > 0)
                field_u64(&f, "MODELGATE_SWITCH_USEC", l->switched);
        if (u && u->in >= 0)
                field_u64(&f, "MODELGATE_TOKENS_IN", (uint64_t)u->in);
        if (u && u->cached >= 0)
                field_u64(&f, "MODELGATE_TOKENS_CACHED", (uint64_t)u->cached);
        if (u && u->out >= 0)
                field_u64(&f, "MODELGATE_TOKENS_OUT", (uint64_t)u->out);
        if (u && (u->in_charged || u->out_charged))
                field_str(&f, "MODELGATE_TOKENS_CHARGED",
                          u->in_charged && u->out_charged ? "in,out"
                          : u->in_charged                 ? "in"
                                                          : "out");
        if (u && (v = usage_speed(u->prompt_n, u->prompt_ms)) >= 0)
                field_speed(&f, field_begin(&f, "MODELGATE_PREFILL_TPS"), v);
        if (u && (v = usage_speed(u->predicted_n, u->predicted_ms)) >= 0)
                field_speed(&f, field_begin(&f, "MODELGATE_DECODE_TPS"), v);
        if (u && usage_prefilled(u) >= 0)
                field_u64(&f, "MODELGATE_TOKENS_PREFILLED", (uint64_t)usage_prefilled(u));
        if (l->cut)
                field_str(&f, "MODELGATE_CUT", "yes");
        /* rule:history: the rest of what the ring of /activity shows, so that a start rebuilds it */
        if (l->api) {
                field_str(&f, "MODELGATE_API", l->api);
                field_str(&f, "MODELGATE_STREAM", l->stream ? "yes" : "no");
                if (l->model_hidden)
                        field_str(&f, "MODELGATE_MODEL_SHOWN", "no");
                field_u64(&f, "MODELGATE_DONE_REALTIME_USEC", l->done_at);
        }
        return f.n;
}
