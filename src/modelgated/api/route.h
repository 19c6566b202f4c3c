/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* rule:host-in-name, rule:model-rewrite and rule:model-once, as pure functions: which host a model name
 * names, where the model is in a request (top-level "model" of a JSON body, or the "model" query parameter),
 * and the rewrite that replaces that value by the key and leaves every other byte alone. No I/O, no logging:
 * fuzzed. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "modelgated/conf/conf.h"
#include "shared/buffer.h"
#include "shared/macro.h"

/* What a lookup of the model finds: MODEL_FOUND, or an outcome the caller answers (a 400,
 * rule:error-status). Real failures are negative errno (-ENOMEM) and never one of these. */
typedef enum ModelLookup {
        MODEL_FOUND = 0,
        MODEL_ABSENT,     /* an object (a query) without "model" */
        MODEL_NOT_STRING, /* "model" is not a string (or holds a NUL) */
        MODEL_TWICE,      /* "model" appears twice */
        MODEL_NOT_JSON,   /* the body is not JSON, or not an object */
        MODEL_BAD_ESCAPE, /* the query has a bad %-escape */
} ModelLookup;

/* What a request's body asks, besides its model, read in the same pass (rule:usage-charge) */
typedef struct RequestAsk {
        uint64_t bytes; /* the body's */
        bool stream;    /* the top-level "stream" is true (the last one, as in most parsers) */
        /* the most tokens it lets the engine generate: the largest of its top-level n_predict, max_tokens,
         * max_completion_tokens and max_output_tokens, when each of those it has is an integer >= 0 (a
         * negative n_predict is llama.cpp's "no limit", anything else is not known to be one) */
        bool limited;
        int64_t max_out;
} RequestAsk;

/* Validates body as JSON (RFC 8259, nesting at most 512 deep) and finds the top-level "model".
 * MODEL_FOUND with *ret_span (the value's bytes, quotes included) and *ret_model (decoded, malloc'ed);
 * MODEL_ABSENT, MODEL_NOT_STRING, MODEL_TWICE or MODEL_NOT_JSON; -ENOMEM. On MODEL_FOUND, MODEL_ABSENT,
 * MODEL_NOT_STRING and MODEL_TWICE, *ret_ask (optional) says what else the body asks. */
int json_read_request(const char *body, size_t n, Span *ret_span, char **ret_model, RequestAsk *ret_ask);
/* The same, with only whether it streams (*ret_stream, optional) */
int json_find_model(const char *body, size_t n, Span *ret_span, char **ret_model, bool *ret_stream);

/* Encodes s as a JSON string, quotes included. */
char *json_quote(const char *s);
/* The length of that encoding; the encoding appended to b, where l is that length (a request's body is
 * written with its length known first) */
size_t json_quoted_len(const char *s);
int json_quote_append(Buffer *b, const char *s, size_t l);

/* The "model" parameter of a URL's query. MODEL_FOUND with the value's span (still %-encoded) and the
 * decoded value; MODEL_ABSENT when there is none; MODEL_TWICE when it is there twice; MODEL_BAD_ESCAPE on
 * bad %-escapes; -ENOMEM. */
int query_find_model(Span url, Span *ret_span, char **ret_model);
/* The same for any parameter (its name compared after %-decoding): conv_id of GET /v1/stream */
int query_find_param(Span url, const char *name, Span *ret_span, char **ret_value);

/* Whether the query sets a flag: "name", "name=1", "name=true" or "name=yes". */
bool query_flag(Span url, const char *name);

/* %-encodes a query value (RFC 3986 unreserved characters stay as they are). */
char *query_escape(const char *s);

/* A copy of src with the bytes of span replaced by 'with'. */
char *span_replace(Span src, Span span, const char *with, size_t *ret_size);

/* The path of a URL: up to '?' or '#' */
Span url_path(Span url);
