/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <assert.h>
#include <json.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "modelgated/api/json-util.h"
#include "modelgated/api/sse.h"

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

static bool value_is(const char *v, size_t vl, const char *s) {
        return vl == strlen(s) && memcmp(v, s, vl) == 0;
}

/* rule:keepalive-events: the engine's message_start (Anthropic) or response.created (Responses) in an
 * answer modelgate began; the first one only */
static bool is_begin_event(const SseFilter *f, const char *v, size_t vl) {
        return f->begun && ((f->api == API_ANTHROPIC && value_is(v, vl, "message_start")) ||
                            (f->api == API_RESPONSES && value_is(v, vl, "response.created")));
}

static void filter_event_line(SseFilter *f, const char *v, size_t vl) {
        while (vl > 0 && *v == ' ')
                v++, vl--;
        f->event_named = true;
        if (is_begin_event(f, v, vl)) {
                f->in_begin_event = true;
                f->begun = false; /* once */
        }
        f->in_error_event = value_is(v, vl, "error");
        if (f->usage)
                f->usage_event = usage_event_of(v, vl);
        /* the Responses API ends a stream with one of these, and no [DONE] */
        if (f->api == API_RESPONSES &&
            (value_is(v, vl, "response.completed") || value_is(v, vl, "response.failed") ||
             value_is(v, vl, "response.incomplete")))
                f->saw_done = true;
        /* and Anthropic's with message_stop (llama.cpp sends no [DONE] there): what follows it cuts nothing
         * (rule:usage) */
        if (f->api == API_ANTHROPIC && value_is(v, vl, "message_stop"))
                f->saw_done = true;
}

/* llama.cpp's error in a Responses stream is OpenAI's data: {"error":…} without an event line, which Codex
 * ignores (and then sends the turn again): it becomes event response.failed. 1: written */
static int filter_responses_error(SseFilter *f, const char *v, size_t vl, const char *cr, size_t crl,
                                  const char *eol, Buffer *out) {
        _cleanup_free_ char *j = NULL;
        size_t jl = 0;
        int r;

        if (f->api != API_RESPONSES || f->event_named)
                return 0;
        r = api_response_failed_from(500, v, vl, &j, &jl);
        if (r <= 0)
                return r;
        if (buffer_append_str(out, "event: response.failed") < 0 || buffer_append(out, cr, crl) < 0 ||
            buffer_append_str(out, "\n") < 0 || buffer_append_str(out, "data: ") < 0 ||
            buffer_append(out, j, jl) < 0 || buffer_append(out, cr, crl) < 0 ||
            buffer_append_str(out, eol) < 0)
                return -ENOMEM;
        f->event_named = true;
        f->saw_done = true;
        return 1;
}

/* The engine's message_start's data as the message_delta that carries its usage (input tokens, cache
 * reads) into the message modelgate began; with no usage to be read, a message_delta that changes
 * nothing. */
static int splice_message_start(const char *v, size_t vl, Buffer *out) {
        _cleanup_(json_object_putp) json_object *o = NULL, *d = NULL;
        json_object *msg = NULL, *usage = NULL;
        _cleanup_free_ char *j = NULL;
        int r;

        if (json_parse(NULL, v, vl, &o) == 0 && json_object_object_get_ex(o, "message", &msg) &&
            json_object_object_get_ex(msg, "usage", &usage) &&
            json_object_is_type(usage, json_type_object)) {
                d = json_object_new_object();
                json_object *delta = json_object_new_object();
                if (!d || !delta ||
                    json_object_object_add(d, "type", json_object_new_string("message_delta")) < 0 ||
                    json_object_object_add(delta, "stop_reason", NULL) < 0 ||
                    json_object_object_add(delta, "stop_sequence", NULL) < 0 ||
                    json_object_object_add(d, "delta", delta) < 0) {
                        json_object_put(delta);
                        return -ENOMEM;
                }
                /* the SDKs set the message's output_tokens from every message_delta */
                if (!json_object_object_get_ex(usage, "output_tokens", NULL) &&
                    json_object_object_add(usage, "output_tokens", json_object_new_int(0)) < 0)
                        return -ENOMEM;
                if (json_object_object_add(d, "usage", json_object_get(usage)) < 0)
                        return -ENOMEM;
                j = json_to_string_dup(d, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, NULL);
                if (!j)
                        return -ENOMEM;
        }
        r = buffer_append_str(out, "event: message_delta\ndata: ");
        if (r >= 0)
                r = buffer_append_str(
                        out, j
                                     ?: "{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":null,"
                                        "\"stop_sequence\":null},\"usage\":{\"output_tokens\":0}}");
        return r < 0 ? -ENOMEM : 0;
}

/* One line of the engine's beginning (rule:keepalive-events): its event line is left out, its data line
 * spliced (Anthropic) or left out (Responses), the blank line that ends it kept only where an event is
 * left in its place. */
static int filter_begin_line(SseFilter *f, const char *p, size_t content, size_t n, const char *eol,
                             Buffer *out) {
        if (content == 0) {
                f->in_begin_event = f->event_named = false;
                f->usage_event = USAGE_EVENT_UNNAMED;
                if (f->api != API_ANTHROPIC)
                        return 0;
                return buffer_append(out, p, n) < 0 || buffer_append_str(out, eol) < 0 ? -ENOMEM : 0;
        }
        if (f->api != API_ANTHROPIC || !has_prefix(p, content, "data:"))
                return 0; /* the event line, a comment or an id: part of what is left out */
        const char *v = p + 5;
        size_t vl = content - 5;
        if (vl > 0 && *v == ' ')
                v++, vl--;
        if (splice_message_start(v, vl, out) < 0 || buffer_append(out, p + content, n - content) < 0 ||
            buffer_append_str(out, eol) < 0)
                return -ENOMEM;
        return 0;
}

bool sse_upstream_error_of(const char *v, size_t vl, bool in_event, int *ret_status, char *message,
                           size_t size) {
        _cleanup_(json_object_putp) json_object *o = NULL;
        json_object *e = NULL, *x = NULL;
        const char *text = NULL;
        int status = 500;

        if (size > 0)
                message[0] = 0;
        if (json_parse(NULL, v, vl, &o) < 0 || !json_object_is_type(o, json_type_object))
                return false;
        if (!json_object_object_get_ex(o, "error", &e)) {
                if (!in_event)
                        return false;
                e = o; /* llama.cpp's own shape in an Anthropic stream */
        }
        if (json_object_is_type(e, json_type_string))
                text = json_object_get_string(e);
        else if (json_object_is_type(e, json_type_object)) {
                if (json_object_object_get_ex(e, "message", &x) && json_object_is_type(x, json_type_string))
                        text = json_object_get_string(x);
                if (json_object_object_get_ex(e, "code", &x) && json_object_is_type(x, json_type_int) &&
                    json_object_get_int(x) >= 400 && json_object_get_int(x) <= 599)
                        status = json_object_get_int(x);
        } else
                return false;
        *ret_status = status;
        if (text && size > 0) {
                size_t l = strlen(text);
                if (l >= size) {
                        /* cut where a UTF-8 character begins, not inside one */
                        l = size - 1;
                        while (l > 0 && ((unsigned char)text[l] & 0xc0) == 0x80)
                                l--;
                }
                memcpy(message, text, l);
                message[l] = 0;
        }
        return true;
}

/* One line, without its '\n' (a '\r' before it is kept in eol). */
static int filter_line(SseFilter *f, const char *p, size_t n, const char *eol, Buffer *out) {
        size_t content = n;
        int r;

        if (content > 0 && p[content - 1] == '\r')
                content--;

        if (has_prefix(p, content, "data:"))
                f->saw_data = true;
        if (f->in_begin_event) {
                /* what it cost is read from the engine's own words, before they are spliced */
                if (f->usage && has_prefix(p, content, "data:")) {
                        const char *v = p + 5;
                        size_t vl = content - 5;
                        if (vl > 0 && *v == ' ')
                                v++, vl--;
                        usage_sse_data(f->usage, f->usage_event, v, vl);
                }
                return filter_begin_line(f, p, content, n, eol, out);
        }
        if (content == 0) {
                f->in_error_event = f->event_named = false;
                f->usage_event = USAGE_EVENT_UNNAMED;
        } else if (has_prefix(p, content, "event:")) {
                filter_event_line(f, p + 6, content - 6);
                if (f->in_begin_event)
                        return 0; /* left out with the rest of the engine's beginning */
        } else if (has_prefix(p, content, "data:")) {
                const char *v = p + 5;
                size_t vl = content - 5;
                if (vl > 0 && *v == ' ')
                        v++, vl--;
                if (f->usage && !f->in_error_event)
                        usage_sse_data(f->usage, f->usage_event, v, vl);
                if (vl == 6 && memcmp(v, "[DONE]", 6) == 0)
                        f->saw_done = true;
                else if (f->in_error_event || (vl > 0 && *v == '{' && memmem(v, vl, "\"error\"", 7))) {
                        _cleanup_free_ char *n2 = NULL;
                        size_t nl = 0;

                        if (f->upstream_error_status == 0)
                                (void)sse_upstream_error_of(v, vl, f->in_error_event,
                                                            &f->upstream_error_status, f->upstream_error,
                                                            sizeof(f->upstream_error));
                        r = filter_responses_error(f, v, vl, p + content, n - content, eol, out);
                        if (r != 0)
                                return r < 0 ? r : 0;
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

static int append_event(ApiKind api, const char *j, size_t l, Buffer *out) {
        const char *name = api == API_ANTHROPIC   ? "event: error\n"
                           : api == API_RESPONSES ? "event: response.failed\n"
                                                  : "";
        if (buffer_append_str(out, name) < 0 || buffer_append_str(out, "data: ") < 0 ||
            buffer_append(out, j, l) < 0 || buffer_append_str(out, "\n\n") < 0)
                return -ENOMEM;
        return 0;
}

int sse_error_event(ApiKind api, int status, const char *code, const char *message, Buffer *out) {
        _cleanup_free_ char *j = NULL;
        size_t l = 0;

        j = api == API_RESPONSES ? api_response_failed_json(status, code, message, &l)
                                 : api_error_json(api, status, code, message, &l);
        if (!j)
                return -ENOMEM;
        return append_event(api, j, l, out);
}

/* body as one JSON value with an "error" member, printed again on one line (an SSE data line cannot
 * hold a line break); NULL when it is not */
static char *one_line_error(const char *body, size_t n, int *ret) {
        json_object *o = NULL, *e = NULL;
        char *j = NULL;

        *ret = 0;
        json_tokener *tok = json_tokener_new();
        if (!tok) {
                *ret = -ENOMEM;
                return NULL;
        }
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
                j = strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
                                                                     JSON_C_TO_STRING_NOSLASHESCAPE));
                if (!j)
                        *ret = -ENOMEM;
        }
        json_object_put(o);
        return j;
}

int sse_error_event_from_answer(ApiKind api, int status, const char *body, size_t n, Buffer *out) {
        _cleanup_free_ char *reworded = NULL, *j = NULL;
        size_t rl = 0;
        int r;

        if (api == API_RESPONSES) {
                r = api_response_failed_from(status, body, n, &j, &rl);
                if (r < 0)
                        return r;
                if (r > 0)
                        return append_event(api, j, rl, out);
        } else {
                if (api_error_reword(api, body, n, &reworded, &rl) > 0) {
                        body = reworded;
                        n = rl;
                }
                j = one_line_error(body, n, &r);
                if (r < 0)
                        return r;
                if (j)
                        return append_event(api, j, strlen(j), out);
        }

        char msg[512];
        size_t k = 0;
        k += (size_t)snprintf(msg, sizeof(msg), "the host answered %d: ", status);
        for (size_t i = 0; i < n && k + 2 < sizeof(msg) && i < 200; i++)
                msg[k++] = (unsigned char)body[i] < 0x20 ? ' ' : body[i];
        msg[k] = 0;
        return sse_error_event(api, status, "upstream_error", msg, out);
}
