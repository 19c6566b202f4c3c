/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* rule:history: a finished request of /activity's ring, made again from its access line's fields (the
 * journal's, or the history file's, which are the same "NAME=value" strings). Pure: no journal, no file. */

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "modelgated/records/history.h"

/* A number of ours: digits only, no sign, no space */
static int parse_u64(Span v, uint64_t *ret) {
        uint64_t x = 0;

        if (v.n == 0 || v.n > 20)
                return -EBADMSG;
        for (size_t i = 0; i < v.n; i++) {
                if (v.p[i] < '0' || v.p[i] > '9' || x > (UINT64_MAX - (uint64_t)(v.p[i] - '0')) / 10)
                        return -EBADMSG;
                x = x * 10 + (uint64_t)(v.p[i] - '0');
        }
        *ret = x;
        return 0;
}

static int parse_i64(Span v, int64_t *ret) {
        uint64_t x;
        int r = parse_u64(v, &x);

        if (r < 0 || x > INT64_MAX)
                return -EBADMSG;
        *ret = (int64_t)x;
        return 0;
}

/* "12.3", as field_speed() writes it */
static int parse_speed(Span v, double *ret) {
        const char *dot = memchr(v.p, '.', v.n);
        uint64_t whole, tenths = 0;
        size_t n = dot ? (size_t)(dot - v.p) : v.n;

        if (parse_u64((Span){v.p, n}, &whole) < 0 ||
            (dot && parse_u64((Span){dot + 1, v.n - n - 1}, &tenths) < 0) || (dot && v.n - n - 1 != 1))
                return -EBADMSG;
        *ret = (double)whole + (double)tenths / 10;
        return 0;
}

static int hex_digit(char c) {
        return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* A copy, cut to the field; with unescape, log_escape()'s "\xNN" are the bytes again (the client's id and
 * model are escaped in the line and its fields) */
static const char *copy_value(char *dst, size_t size, Span v, bool unescape) {
        size_t k = 0;

        for (size_t i = 0; i < v.n && k < size - 1; i++) {
                int hi, lo;
                if (unescape && v.p[i] == '\\' && i + 3 < v.n && v.p[i + 1] == 'x' &&
                    (hi = hex_digit(v.p[i + 2])) >= 0 && (lo = hex_digit(v.p[i + 3])) >= 0) {
                        dst[k++] = (char)(hi << 4 | lo);
                        i += 3;
                } else
                        dst[k++] = v.p[i];
        }
        dst[k] = 0;
        return k > 0 ? dst : NULL;
}

static bool field_is(Span f, const char *name, Span *ret_value) {
        size_t l = strlen(name);

        if (f.n <= l || f.p[l] != '=' || memcmp(f.p, name, l) != 0)
                return false;
        *ret_value = (Span){f.p + l + 1, f.n - l - 1};
        return true;
}

static bool value_is(Span v, const char *s) {
        return v.n == strlen(s) && memcmp(v.p, s, v.n) == 0;
}

/* What an entry's fields say beyond its record */
typedef struct EntryMore {
        uint64_t done_at, duration;
        bool model_hidden, status;
} EntryMore;

/* One field into e; the numbers' fields that are not numbers make the entry no entry */
static int entry_field(HistoryEntry *e, Span f, EntryMore *more) {
        ActivityRequest *r = &e->r;
        uint64_t u;
        Span v;

#define STR(name, member, unescape)                                                                         \
        if (field_is(f, name, &v)) {                                                                        \
                r->member = copy_value(e->member, sizeof(e->member), v, unescape);                          \
                return 0;                                                                                   \
        }
#define NUM(name, member)                                                                                   \
        if (field_is(f, name, &v))                                                                          \
                return parse_i64(v, &r->member);
        STR("MODELGATE_MODEL", model, true);
        STR("MODELGATE_HOST", host, false);
        STR("MODELGATE_ENGINE", engine, false);
        STR("MODELGATE_KEY", key, false);
        STR("MODELGATE_FALLBACK", fallback, false);
        STR("MODELGATE_SESSION", session, false);
        STR("MODELGATE_UPSTREAM_MESSAGE", upstream_error, true); /* rule:upstream-error */
        NUM("MODELGATE_TOKENS_IN", tokens_in);
        NUM("MODELGATE_TOKENS_CACHED", tokens_cached);
        NUM("MODELGATE_TOKENS_PREFILLED", tokens_prefilled);
        NUM("MODELGATE_TOKENS_OUT", tokens_out);
#undef STR
#undef NUM
        if (field_is(f, "MODELGATE_REQUEST_ID", &v)) {
                (void)copy_value(e->id, sizeof(e->id), v, true);
                r->id = (Span){e->id, strlen(e->id)};
                return 0;
        }
        if (field_is(f, "MODELGATE_UPSTREAM_ERROR", &v))
                return parse_u64(v, &u) < 0 || u > 999 ? -EBADMSG : (r->upstream_error_status = (int)u, 0);
        if (field_is(f, "MODELGATE_STATUS", &v)) {
                more->status = true;
                return parse_u64(v, &u) < 0 || u > 999 ? -EBADMSG : (r->status = (int)u, 0);
        }
        if (field_is(f, "MODELGATE_DURATION_USEC", &v))
                return parse_u64(v, &more->duration) < 0
                               ? -EBADMSG
                               : (r->duration_ms = (int64_t)(more->duration / USEC_PER_MSEC), 0);
        if (field_is(f, "MODELGATE_FIRST_BYTE_USEC", &v))
                return parse_u64(v, &u) < 0 ? -EBADMSG
                                            : (r->first_byte_ms = (int64_t)(u / USEC_PER_MSEC), 0);
        if (field_is(f, "MODELGATE_QUEUED_USEC", &v))
                return parse_u64(v, &r->queued_usec);
        if (field_is(f, "MODELGATE_SWITCH_USEC", &v))
                return parse_u64(v, &r->switch_usec);
        if (field_is(f, "MODELGATE_PREFILL_TPS", &v))
                return parse_speed(v, &r->prefill_tps);
        if (field_is(f, "MODELGATE_DECODE_TPS", &v))
                return parse_speed(v, &r->decode_tps);
        if (field_is(f, "MODELGATE_DONE_REALTIME_USEC", &v))
                return parse_u64(v, &more->done_at);
        if (field_is(f, "MODELGATE_API", &v)) {
                /* the ring's names are static: one of /activity's, else "other" */
                static const char *const apis[] = {"chat", "completions", "messages", "responses"};
                r->api = "other";
                for (size_t i = 0; i < ELEMENTSOF(apis); i++)
                        if (value_is(v, apis[i]))
                                r->api = apis[i];
                return 0;
        }
        if (field_is(f, "MODELGATE_STREAM", &v))
                r->stream = value_is(v, "yes");
        else if (field_is(f, "MODELGATE_CUT", &v))
                r->cut = value_is(v, "yes");
        else if (field_is(f, "MODELGATE_MODEL_SHOWN", &v))
                more->model_hidden = value_is(v, "no");
        return 0;
}

int history_entry_parse(const Span *fields, size_t n, usec_t received, HistoryEntry *ret) {
        assert(fields || n == 0);
        assert(ret);
        EntryMore more = {};

        *ret = (HistoryEntry){};
        ret->r = (ActivityRequest){
                .phase = ACTIVITY_DONE,
                .first_byte_ms = -1,
                .duration_ms = -1,
                .tokens_in = -1,
                .tokens_cached = -1,
                .tokens_prefilled = -1,
                .tokens_out = -1,
                .prefill_tps = -1,
                .decode_tps = -1,
        };
        for (size_t i = 0; i < n; i++)
                if (entry_field(ret, fields[i], &more) < 0)
                        return -EBADMSG;
        /* an entry of an older modelgate, or of a request that reached no host: not one of the ring */
        if (!ret->r.api || !more.status || ret->r.duration_ms < 0)
                return -EBADMSG;
        if (more.model_hidden)
                ret->r.model = NULL; /* rule:no-text-in-activity: the client's own words stay in the log */
        ret->r.t = more.done_at ?: received;
        ret->r.started = ret->r.t - MIN(ret->r.t, more.duration);
        return 0;
}
