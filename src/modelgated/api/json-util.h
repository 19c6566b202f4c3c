/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* What every reader and writer of JSON here does with json-c: a cleanup for a json_object, a whole text
 * parsed, a member read with its type checked, an object written out as a malloc'ed string. Pure. */

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shared/macro.h"

DEFINE_TRIVIAL_CLEANUP_FUNC(json_object *, json_object_put);

/* n bytes (not NUL-terminated) parsed as one JSON text with tok (reset first), or with a tokener of its
 * own when tok is NULL. 0 with *ret; -EBADMSG when the bytes are not (or not only the start of) JSON;
 * -ENOMEM. */
int json_parse(json_tokener *tok, const char *text, size_t n, json_object **ret);

/* The member key of o when it is a string (an int), else NULL (false) */
const char *json_get_string(json_object *o, const char *key);
bool json_get_int(json_object *o, const char *key, int64_t *ret);

/* o written with flags (JSON_C_TO_STRING_*), malloc'ed, its length in *ret_size (optional); NULL: out of
 * memory */
char *json_to_string_dup(json_object *o, int flags, size_t *ret_size);
