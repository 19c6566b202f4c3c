/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <assert.h>
#include <json.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "modelgated/rules/sse.h"

void sse_filter_init(SseFilter *f, ApiKind api) {
        assert(f);
        *f = (SseFilter){.api = api};
}

void sse_filter_done(SseFilter *f) {
        buffer_done(&f->line);
}

static bool has_prefix(const char *p, size_t n, const char *prefix) {
        size_t l = strlen(prefix);
        return n >= l && memcmp(p, prefix, l) == 0;
}

/* One line, without its '\n' (a '\r' before it is kept in eol). */
static int filter_line(SseFilter *f, const char *p, size_t n, const char *eol, Buffer *out) {
        size_t content = n;

        if (content > 0 && p[content - 1] == '\r')
                content--;

        if (content == 0)
                f->in_error_event = false;
        else if (has_prefix(p, content, "event:")) {
                const char *v = p + 6;
                size_t vl = content - 6;
                while (vl > 0 && *v == ' ')
                        v++, vl--;
                f->in_error_event = vl == 5 && memcmp(v, "error", 5) == 0;
        } else if (has_prefix(p, content, "data:")) {
                const char *v = p + 5;
                size_t vl = content - 5;
                if (vl > 0 && *v == ' ')
                        v++, vl--;
                if (vl == 6 && memcmp(v, "[DONE]", 6) == 0)
                        f->saw_done = true;
                else if (f->in_error_event || (vl > 0 && *v == '{' && memmem(v, vl, "\"error\"", 7))) {
                        _cleanup_free_ char *n2 = NULL;
                        size_t nl = 0;
                        if (api_error_reword(f->api, v, vl, &n2, &nl) > 0) {
                                if (buffer_append_str(out, "data: ") < 0 || buffer_append(out, n2, nl) < 0 ||
                                    buffer_append(out, p + content, n - content) < 0 ||
                                    buffer_append_str(out, eol) < 0)
                                        return -ENOMEM;
                                return 0;
                        }
                }
        }
        if (buffer_append(out, p, n) < 0 || buffer_append_str(out, eol) < 0)
                return -ENOMEM;
        return 0;
}

int sse_filter_feed(SseFilter *f, const char *p, size_t n, Buffer *out) {
        assert(f);
        const char *end = p + n;
        int r;

        while (p < end) {
                const char *nl = memchr(p, '\n', (size_t)(end - p));

                if (f->raw_until_newline) {
                        const char *stop = nl ? nl + 1 : end;
                        if (buffer_append(out, p, (size_t)(stop - p)) < 0)
                                return -ENOMEM;
                        if (nl)
                                f->raw_until_newline = false;
                        p = stop;
                        continue;
                }
                if (!nl) {
                        if (buffer_size(&f->line) + (size_t)(end - p) > SSE_LINE_MAX) {
                                if (buffer_append(out, buffer_peek(&f->line), buffer_size(&f->line)) < 0 ||
                                    buffer_append(out, p, (size_t)(end - p)) < 0)
                                        return -ENOMEM;
                                buffer_clear(&f->line);
                                f->raw_until_newline = true;
                        } else if (buffer_append(&f->line, p, (size_t)(end - p)) < 0)
                                return -ENOMEM;
                        break;
                }
                if (!buffer_is_empty(&f->line)) {
                        if (buffer_append(&f->line, p, (size_t)(nl - p)) < 0)
                                return -ENOMEM;
                        r = filter_line(f, buffer_peek(&f->line), buffer_size(&f->line), "\n", out);
                        buffer_clear(&f->line);
                } else
                        r = filter_line(f, p, (size_t)(nl - p), "\n", out);
                if (r < 0)
                        return r;
                p = nl + 1;
        }
        return 0;
}

int sse_filter_finish(SseFilter *f, Buffer *out) {
        assert(f);
        int r = 0;
        if (!buffer_is_empty(&f->line))
                r = filter_line(f, buffer_peek(&f->line), buffer_size(&f->line), "", out);
        buffer_clear(&f->line);
        return r;
}

int sse_error_event(ApiKind api, int status, const char *code, const char *message, Buffer *out) {
        _cleanup_free_ char *j = NULL;
        size_t l = 0;

        j = api_error_json(api, status, code, message, &l);
        if (!j)
                return -ENOMEM;
        if (api == API_ANTHROPIC && buffer_append_str(out, "event: error\n") < 0)
                return -ENOMEM;
        if (buffer_append_str(out, "data: ") < 0 || buffer_append(out, j, l) < 0 ||
            buffer_append_str(out, "\n\n") < 0)
                return -ENOMEM;
        return 0;
}

int sse_error_event_from_answer(ApiKind api, int status, const char *body, size_t n, Buffer *out) {
        _cleanup_free_ char *reworded = NULL;
        size_t rl = 0;
        json_object *o = NULL, *e = NULL;
        int r;

        if (api_error_reword(api, body, n, &reworded, &rl) > 0) {
                body = reworded;
                n = rl;
        }
        json_tokener *tok = json_tokener_new();
        if (!tok)
                return -ENOMEM;
        o = json_tokener_parse_ex(tok, body, (int)MIN(n, (size_t)INT32_MAX));
        if (o) {
                size_t end = json_tokener_get_parse_end(tok);
                while (end < n && strchr(" \t\r\n", body[end]))
                        end++;
                if (end < n)
                        o = (json_object_put(o), NULL); /* trailing bytes: not one JSON value */
        }
        json_tokener_free(tok);
        if (o && json_object_is_type(o, json_type_object) && json_object_object_get_ex(o, "error", &e)) {
                /* printed again on one line: an SSE data line cannot hold a line break */
                const char *j = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
                                                                          JSON_C_TO_STRING_NOSLASHESCAPE);
                r = (api == API_ANTHROPIC ? buffer_append_str(out, "event: error\n") : 0) < 0 ||
                                    buffer_append_str(out, "data: ") < 0 || buffer_append_str(out, j) < 0 ||
                                    buffer_append_str(out, "\n\n") < 0
                            ? -ENOMEM
                            : 0;
                json_object_put(o);
                return r;
        }
        json_object_put(o);

        char msg[512];
        size_t k = 0;
        k += (size_t)snprintf(msg, sizeof(msg), "the host answered %d: ", status);
        for (size_t i = 0; i < n && k + 2 < sizeof(msg) && i < 200; i++)
                msg[k++] = (unsigned char)body[i] < 0x20 ? ' ' : body[i];
        msg[k] = 0;
        return sse_error_event(api, status, "upstream_error", msg, out);
}
