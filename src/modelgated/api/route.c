/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Routing without a tree: the JSON body is validated and walked once by a
 * small scanner that remembers where the top-level "model" value starts and
 * ends, so the rewrite can splice the key in and keep every other byte as the
 * client sent it. A multi-megabyte body costs one pass and no allocation
 * besides the copy; json-c only decodes the model string itself. */

#include <ctype.h>
#include <json-c/json.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "modelgated/api/route.h"
#include "shared/buffer.h"
#include "shared/word.h"

typedef struct Scanner {
        const char *p, *end;
} Scanner;

/* JSON whitespace: machine-written bodies have little of it between tokens, and one comparison tells
 * that a byte is none (everything above ' ' is not whitespace) */
static inline void skip_ws(Scanner *s) {
        while (s->p < s->end && (unsigned char)*s->p <= ' ' &&
               (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
                s->p++;
}

/* The bytes a JSON string holds as they are: not '"', '\\' or a control character */
static const bool json_plain[256] = {
        [0x20 ... 0x21] = true,
        [0x23 ... 0x5b] = true,
        [0x5d ... 0xff] = true,
};

/* Past the plain bytes of a string, eight at a time: keys and most values end within their first eight
 * bytes, found at once there; the text of a conversation is most of a body. Then one at a time. */
static inline const char *skip_plain(const char *p, const char *end) {
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        while (end - p >= 8) {
                uint64_t v, m;
                memcpy(&v, p, 8);
                m = WORD_BELOW(v, 0x20) | WORD_IS(v, '"') | WORD_IS(v, '\\');
                if (m != 0)
                        return p + (__builtin_ctzll(m) >> 3);
                p += 8;
        }
#endif
        while (p < end && json_plain[(unsigned char)*p])
                p++;
        return p;
}

/* Inline: it runs for every key and string value of the body */
static inline int scan_string(Scanner *s, bool *ret_escaped) {
        bool escaped = false;

        if (s->p >= s->end || *s->p != '"')
                return -EBADMSG;
        s->p++;
        for (;;) {
                s->p = skip_plain(s->p, s->end);
                if (s->p >= s->end || (unsigned char)*s->p < 0x20)
                        return -EBADMSG;
                if (*s->p == '"') {
                        s->p++;
                        break;
                }
                escaped = true;
                s->p++;
                if (s->p >= s->end)
                        return -EBADMSG;
                if (*s->p == 'u') {
                        if (s->end - s->p < 5)
                                return -EBADMSG;
                        for (int i = 1; i <= 4; i++)
                                if (!isxdigit((unsigned char)s->p[i]))
                                        return -EBADMSG;
                        s->p += 5;
                } else if (strchr("\"\\/bfnrt", *s->p) && *s->p)
                        s->p++;
                else
                        return -EBADMSG;
        }
        if (ret_escaped)
                *ret_escaped = escaped;
        return 0;
}

static int scan_digits(Scanner *s) {
        const char *b = s->p;
        while (s->p < s->end && isdigit((unsigned char)*s->p))
                s->p++;
        return s->p > b ? 0 : -EBADMSG;
}

static int scan_scalar(Scanner *s) {
        static const char *const literals[] = {"true", "false", "null"};

        for (size_t i = 0; i < ELEMENTSOF(literals); i++) {
                size_t l = strlen(literals[i]);
                if ((size_t)(s->end - s->p) >= l && memcmp(s->p, literals[i], l) == 0) {
                        s->p += l;
                        return 0;
                }
        }
        if (s->p < s->end && *s->p == '-')
                s->p++;
        if (s->p < s->end && *s->p == '0')
                s->p++;
        else if (scan_digits(s) < 0)
                return -EBADMSG;
        if (s->p < s->end && *s->p == '.') {
                s->p++;
                if (scan_digits(s) < 0)
                        return -EBADMSG;
        }
        if (s->p < s->end && (*s->p == 'e' || *s->p == 'E')) {
                s->p++;
                if (s->p < s->end && (*s->p == '+' || *s->p == '-'))
                        s->p++;
                if (scan_digits(s) < 0)
                        return -EBADMSG;
        }
        return 0;
}

#define JSON_MAX_DEPTH 512

/* Whether the key at b..e (quotes included), written with escapes, is name (of length l): the host's
 * JSON parser decodes them, so "mo\u0064el" and "str\u0065am" are what they spell */
static bool key_is_escaped(const char *b, const char *e, const char *name, size_t l) {
        _cleanup_free_ char *copy = strndup(b, (size_t)(e - b));
        if (!copy)
                return false;
        json_object *o = json_tokener_parse(copy);
        bool r = o && json_object_is_type(o, json_type_string) &&
                 (size_t)json_object_get_string_len(o) == l &&
                 memcmp(json_object_get_string(o), name, l) == 0;
        json_object_put(o);
        return r;
}

/* Whether the key at b..e (quotes included) is name. Inline: it is asked twice of every key of the
 * body, and a key without escapes is the rule. */
static inline bool key_is(const char *b, const char *e, bool escaped, const char *name) {
        size_t l = strlen(name);
        if (escaped)
                return key_is_escaped(b, e, name, l);
        return (size_t)(e - b) == l + 2 && memcmp(b + 1, name, l) == 0;
}

/* What the scan of a body has found so far */
typedef struct ModelScan {
        const char *vb, *ve; /* the top-level "model" value, quotes included */
        bool capture;        /* the next value is the model's */
        bool capturing;      /* the value being scanned is */
        bool duplicate;
        bool stream;
        bool limit_seen, unlimited; /* RequestAsk's: a limit's name was seen; one of them is no limit */
        int64_t max_out;
} ModelScan;

/* The value of a limit of the tokens to generate (RequestAsk), at s->p: an integer >= 0, or none */
static void scan_limit(Scanner *s, ModelScan *m) {
        const char *q = s->p;
        int64_t v = 0;

        m->limit_seen = true;
        for (; q < s->end && *q >= '0' && *q <= '9'; q++) {
                if (v > (INT64_MAX - 9) / 10) {
                        m->unlimited = true; /* as many as no engine generates: none */
                        return;
                }
                v = v * 10 + (*q - '0');
        }
        /* "-1", a fraction, a string, null: not a limit known here */
        if (q == s->p || (q < s->end && (*q == '.' || *q == 'e' || *q == 'E'))) {
                m->unlimited = true;
                return;
        }
        m->max_out = MAX(m->max_out, v);
}

/* A key of an object at depth, and its ':' */
static int scan_member_key(Scanner *s, unsigned depth, ModelScan *m) {
        bool escaped, stream_key, limit_key = false;
        const char *kb;

        skip_ws(s);
        kb = s->p;
        if (scan_string(s, &escaped) < 0)
                return -EBADMSG;
        if (depth == 1 && key_is(kb, s->p, escaped, "model")) {
                if (m->vb)
                        m->duplicate = true;
                m->capture = true;
        }
        /* "stream": true (the last one wins, as in most parsers); validated with the rest */
        stream_key = depth == 1 && key_is(kb, s->p, escaped, "stream");
        /* the names llama.cpp and the APIs it serves read as the limit of the tokens it generates */
        if (depth == 1 && !stream_key && (escaped || kb[1] == 'n' || kb[1] == 'm'))
                limit_key = key_is(kb, s->p, escaped, "n_predict") ||
                            key_is(kb, s->p, escaped, "max_tokens") ||
                            key_is(kb, s->p, escaped, "max_completion_tokens") ||
                            key_is(kb, s->p, escaped, "max_output_tokens");
        skip_ws(s);
        if (s->p >= s->end || *s->p != ':')
                return -EBADMSG;
        s->p++;
        if (stream_key) {
                skip_ws(s);
                m->stream = s->end - s->p >= 4 && memcmp(s->p, "true", 4) == 0;
        }
        if (limit_key) {
                skip_ws(s);
                scan_limit(s, m);
        }
        return 0;
}

/* The model's value (vb..ve, a JSON string) as the text it spells */
static int model_of_value(const char *vb, const char *ve, Span *ret_span, char **ret_model) {
        char *model;

        if (*vb != '"')
                return MODEL_NOT_STRING;
        if (!memchr(vb + 1, '\\', (size_t)(ve - vb - 2))) {
                /* no escapes (the usual case): the bytes between the quotes are the value */
                model = strndup(vb + 1, (size_t)(ve - vb - 2));
                if (!model)
                        return -ENOMEM;
        } else {
                _cleanup_free_ char *copy = strndup(vb, (size_t)(ve - vb));
                if (!copy)
                        return -ENOMEM;
                json_object *o = json_tokener_parse(copy);
                if (!o || !json_object_is_type(o, json_type_string)) {
                        json_object_put(o);
                        return MODEL_NOT_JSON;
                }
                size_t l = (size_t)json_object_get_string_len(o);
                const char *v = json_object_get_string(o);
                if (strlen(v) != l) {
                        json_object_put(o);
                        return MODEL_NOT_STRING;
                }
                model = strdup(v);
                json_object_put(o);
                if (!model)
                        return -ENOMEM;
        }
        *ret_span = (Span){vb, (size_t)(ve - vb)};
        *ret_model = model;
        return MODEL_FOUND;
}

int json_read_request(const char *body, size_t n, Span *ret_span, char **ret_model, RequestAsk *ret_ask) {
        Scanner s = {body, body + n};
        char stack[JSON_MAX_DEPTH]; /* '{' or '[' */
        unsigned depth = 0;
        ModelScan m = {};

        skip_ws(&s);
        if (s.p >= s.end || *s.p != '{')
                return MODEL_NOT_JSON;

value:
        skip_ws(&s);
        if (s.p >= s.end)
                return MODEL_NOT_JSON;
        if (m.capture) {
                m.capture = false;
                m.capturing = true;
                m.vb = s.p;
        }
        if (*s.p == '{' || *s.p == '[') {
                if (depth >= JSON_MAX_DEPTH)
                        return MODEL_NOT_JSON;
                char open = *s.p++;
                stack[depth++] = open;
                skip_ws(&s);
                if (s.p < s.end && *s.p == (open == '{' ? '}' : ']')) {
                        s.p++;
                        depth--;
                        goto after_value;
                }
                if (open == '[')
                        goto value;
                goto object_key;
        }
        if ((*s.p == '"' ? scan_string(&s, NULL) : scan_scalar(&s)) < 0)
                return MODEL_NOT_JSON;
        goto after_value;

object_key:
        if (scan_member_key(&s, depth, &m) < 0)
                return MODEL_NOT_JSON;
        goto value;

after_value:
        if (m.capturing && depth == 1) {
                m.capturing = false;
                m.ve = s.p;
        }
        skip_ws(&s);
        if (depth == 0) {
                if (s.p != s.end)
                        return MODEL_NOT_JSON;
                if (ret_ask)
                        *ret_ask = (RequestAsk){.bytes = n,
                                                .stream = m.stream,
                                                .limited = m.limit_seen && !m.unlimited,
                                                .max_out = m.max_out};
                if (m.duplicate)
                        return MODEL_TWICE;
                if (!m.vb || !m.ve)
                        return MODEL_ABSENT;
                return model_of_value(m.vb, m.ve, ret_span, ret_model);
        }
        if (s.p >= s.end)
                return MODEL_NOT_JSON;
        if (*s.p == ',') {
                s.p++;
                if (stack[depth - 1] == '{')
                        goto object_key;
                goto value;
        }
        if (*s.p == (stack[depth - 1] == '{' ? '}' : ']')) {
                s.p++;
                depth--;
                goto after_value;
        }
        return MODEL_NOT_JSON;
}

int json_find_model(const char *body, size_t n, Span *ret_span, char **ret_model, bool *ret_stream) {
        /* what was not read stays as it was */
        RequestAsk ask = {.stream = ret_stream && *ret_stream};
        int k = json_read_request(body, n, ret_span, ret_model, &ask);

        if (ret_stream)
                *ret_stream = ask.stream;
        return k;
}

size_t json_quoted_len(const char *s) {
        size_t l = 2;
        for (const unsigned char *p = (const unsigned char *)s; *p; p++)
                l += *p == '"' || *p == '\\' ? 2 : *p < 0x20 ? 6 : 1;
        return l;
}

/* Writes s as a JSON string of length l (json_quoted_len()) at q */
static void json_quote_into(char *q, const char *s, size_t l) {
        if (l == strlen(s) + 2) {
                /* nothing to escape (the usual case) */
                *q = '"';
                memcpy(q + 1, s, l - 2);
                q[l - 1] = '"';
                return;
        }
        *q++ = '"';
        for (const unsigned char *p = (const unsigned char *)s; *p; p++)
                if (*p == '"' || *p == '\\') {
                        *q++ = '\\';
                        *q++ = (char)*p;
                } else if (*p < 0x20) {
                        memcpy(q, "\\u00", 4);
                        q[4] = "0123456789abcdef"[*p >> 4];
                        q[5] = "0123456789abcdef"[*p & 15];
                        q += 6;
                } else
                        *q++ = (char)*p;
        *q = '"';
}

char *json_quote(const char *s) {
        size_t l = json_quoted_len(s);
        char *o = malloc(l + 1);

        if (!o)
                return NULL;
        json_quote_into(o, s, l);
        o[l] = 0;
        return o;
}

int json_quote_append(Buffer *b, const char *s, size_t l) {
        char *q = buffer_append_space(b, l);

        if (!q)
                return -ENOMEM;
        json_quote_into(q, s, l);
        return 0;
}

Span url_path(Span url) {
        /* up to the first '?' or '#': memchr() over a path is faster than a loop testing both */
        const char *q = url.n > 0 ? memchr(url.p, '?', url.n) : NULL;
        size_t n = q ? (size_t)(q - url.p) : url.n;
        const char *h = n > 0 ? memchr(url.p, '#', n) : NULL;
        return (Span){url.p, h ? (size_t)(h - url.p) : n};
}

static int unhex(char c) {
        if (c >= '0' && c <= '9')
                return c - '0';
        if (c >= 'a' && c <= 'f')
                return c - 'a' + 10;
        if (c >= 'A' && c <= 'F')
                return c - 'A' + 10;
        return -1;
}

static int query_unescape(Span v, char **ret) {
        char *o = malloc(v.n + 1), *q = o;
        if (!o)
                return -ENOMEM;
        for (size_t i = 0; i < v.n; i++) {
                if (v.p[i] == '%') {
                        int a, b;
                        if (i + 2 >= v.n) {
                                free(o);
                                return -EBADMSG;
                        }
                        a = unhex(v.p[i + 1]);
                        b = unhex(v.p[i + 2]);
                        if (a < 0 || b < 0 || (a == 0 && b == 0)) {
                                free(o);
                                return -EBADMSG;
                        }
                        *q++ = (char)(a * 16 + b);
                        i += 2;
                } else if (v.p[i] == '+')
                        *q++ = ' ';
                else
                        *q++ = v.p[i];
        }
        *q = 0;
        *ret = o;
        return 0;
}

int query_find_param(Span url, const char *pname, Span *ret_span, char **ret_value) {
        Span path = url_path(url);
        size_t pl = strlen(pname);
        size_t i = path.n, qend = url.n;
        Span found = {};

        if (i >= url.n || url.p[i] != '?')
                return MODEL_ABSENT;
        const char *hash = memchr(url.p + i, '#', url.n - i);
        if (hash)
                qend = (size_t)(hash - url.p);
        i++;
        while (i < qend) {
                /* one pass over a parameter (a query is short: three memchr() calls a parameter cost
                 * more than a look at each byte) for its end, its '=' and whether its name has a '%' */
                size_t s = i;
                const char *eq = NULL;
                bool escaped = false;
                for (; i < qend && url.p[i] != '&' && url.p[i] != '='; i++)
                        escaped |= url.p[i] == '%';
                if (i < qend && url.p[i] == '=') {
                        eq = url.p + i;
                        while (i < qend && url.p[i] != '&')
                                i++;
                }
                Span param = {url.p + s, i - s};
                Span name = {param.p, eq ? (size_t)(eq - param.p) : param.n};
                /* names compare after %-decoding, as the host reads them ("mod%65l" is "model") */
                bool named = name.n == pl && memcmp(name.p, pname, pl) == 0;
                if (!named && escaped) {
                        /* a name that does not decode strictly ("%u0064", "%zz") is refused: a host's
                         * decoder might read it as "model" where ours cannot tell */
                        _cleanup_free_ char *d = NULL;
                        int r = query_unescape(name, &d);
                        if (r < 0)
                                return r == -EBADMSG ? MODEL_BAD_ESCAPE : r;
                        named = streq(d, pname);
                }
                if (named) {
                        if (found.p)
                                return MODEL_TWICE;
                        found = eq ? (Span){eq + 1, (size_t)(param.p + param.n - eq - 1)}
                                   : (Span){param.p + param.n, 0};
                }
                i++;
        }
        if (!found.p)
                return MODEL_ABSENT;
        int r = query_unescape(found, ret_value);
        if (r < 0)
                return r == -EBADMSG ? MODEL_BAD_ESCAPE : r;
        *ret_span = found;
        return MODEL_FOUND;
}

int query_find_model(Span url, Span *ret_span, char **ret_model) {
        return query_find_param(url, "model", ret_span, ret_model);
}

char *query_escape(const char *s) {
        Buffer b = {};
        for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
                int r;
                if (isalnum(*p) || strchr("-._~", *p))
                        r = buffer_append(&b, p, 1);
                else
                        r = buffer_printf(&b, "%%%02X", *p);
                if (r < 0) {
                        buffer_done(&b);
                        return NULL;
                }
        }
        if (buffer_terminate(&b) < 0) {
                buffer_done(&b);
                return NULL;
        }
        return buffer_steal(&b, NULL);
}

char *span_replace(Span src, Span span, const char *with, size_t *ret_size) {
        size_t pre = (size_t)(span.p - src.p), wl = strlen(with);
        size_t post = src.n - pre - span.n;
        char *o = malloc(pre + wl + post + 1);

        if (!o)
                return NULL;
        memcpy(o, src.p, pre);
        memcpy(o + pre, with, wl);
        memcpy(o + pre + wl, span.p + span.n, post);
        o[pre + wl + post] = 0;
        if (ret_size)
                *ret_size = pre + wl + post;
        return o;
}

static bool value_is(Span v, const char *t) {
        return v.n == strlen(t) && memcmp(v.p, t, v.n) == 0;
}

bool query_flag(Span url, const char *name) {
        const char *q = memchr(url.p, '?', url.n), *end = url.p + url.n;
        size_t nl = strlen(name);

        if (!q)
                return false;
        for (const char *p = q + 1; p < end;) {
                const char *amp = memchr(p, '&', (size_t)(end - p)), *e = amp ?: end;
                if ((size_t)(e - p) >= nl && memcmp(p, name, nl) == 0) {
                        Span v = {p + nl, (size_t)(e - p) - nl};
                        if (v.n == 0)
                                return true;
                        if (v.p[0] == '=')
                                return value_is((Span){v.p + 1, v.n - 1}, "1") ||
                                       value_is((Span){v.p + 1, v.n - 1}, "true") ||
                                       value_is((Span){v.p + 1, v.n - 1}, "yes");
                }
                p = e + 1;
        }
        return false;
}
