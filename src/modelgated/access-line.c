/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The access line, built by hand: it is written for every request, and printf was a third of the
 * instructions a small request cost. */

#include <stdbool.h>
#include <string.h>

#include "modelgated/access-line.h"
#include "shared/log.h"
#include "shared/macro.h"

typedef struct LineOut {
        char *p, *end;
} LineOut;

static void out_mem(LineOut *o, const char *s, size_t l) {
        l = MIN(l, (size_t)(o->end - o->p));
        memcpy(o->p, s, l);
        o->p += l;
}

static void out_str(LineOut *o, const char *s) {
        out_mem(o, s, strlen(s));
}

static void out_u64(LineOut *o, uint64_t v, int width) {
        char t[24], *e = t + sizeof(t), *q = e;
        do
                *--q = (char)('0' + v % 10);
        while ((v /= 10) || e - q < width);
        out_mem(o, q, (size_t)(e - q));
}

/* The bytes log_escape() leaves as they are (and not the NUL that ends a string) */
static const bool plain[256] = {
        [0x20 ... 0x21] = true, /* '"' (0x22) is escaped */
        [0x23 ... 0x5b] = true, /* '\\' (0x5c) is escaped */
        [0x5d ... 0x7e] = true,
        [0x80 ... 0xff] = true,
};

static void out_escaped(LineOut *o, const char *s) {
        char t[256];
        size_t n = 0;

        s = s ?: "";
        /* as a rule nothing in it needs escaping, and it is short enough for log_escape() to keep it
         * whole (it writes while 5 bytes are left in t): then it goes in as it is, without the copy */
        while (plain[(unsigned char)s[n]])
                n++;
        if (s[n] == 0 && n <= sizeof(t) - 5) {
                out_mem(o, s, n);
                return;
        }
        log_escape(t, sizeof(t), s, n + strlen(s + n));
        out_str(o, t);
}

size_t access_line_format(char *buf, size_t size, const AccessLine *l) {
        LineOut o = {buf, buf + size};

        out_str(&o, strna(l->method));
        out_str(&o, " ");
        out_escaped(&o, strna(l->path));
        out_str(&o, " model=\"");
        out_escaped(&o, l->model);
        out_str(&o, "\" host=");
        out_str(&o, l->host ?: "-");
        if (l->target) {
                out_str(&o, " target=");
                out_str(&o, l->target);
        }
        out_str(&o, " status=");
        out_u64(&o, (uint64_t)l->status, 0);
        out_str(&o, " bytes=");
        out_u64(&o, l->bytes, 0);
        out_str(&o, " dur=");
        out_u64(&o, l->duration / USEC_PER_SEC, 0);
        out_str(&o, ".");
        out_u64(&o, l->duration % USEC_PER_SEC / USEC_PER_MSEC, 3);
        out_str(&o, "s from=");
        out_str(&o, l->peer);
        out_str(&o, " ua=\"");
        out_escaped(&o, l->user_agent);
        out_str(&o, "\"");
        if (l->early) {
                out_str(&o, " early=200");
                if (l->error_status) {
                        out_str(&o, " error=");
                        out_u64(&o, (uint64_t)l->error_status, 0);
                }
        }
        if (l->key) {
                out_str(&o, " key=");
                out_str(&o, l->key);
        }
        if (l->fallback) {
                out_str(&o, " via=fallback/");
                out_str(&o, l->fallback);
        }
        if (l->note) {
                out_str(&o, " ");
                out_str(&o, l->note);
        }
        return (size_t)(o.p - buf);
}
