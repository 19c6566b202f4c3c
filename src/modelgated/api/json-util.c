/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <string.h>

#include "modelgated/api/json-util.h"

int json_parse(json_tokener *tok, const char *text, size_t n, json_object **ret) {
        json_tokener *own = tok ? NULL : json_tokener_new();
        json_object *o;

        if (!tok && !own)
                return -ENOMEM;
        if (tok)
                json_tokener_reset(tok);
        o = json_tokener_parse_ex(tok ?: own, text, (int)MIN(n, (size_t)INT32_MAX));
        if (own)
                json_tokener_free(own);
        if (!o)
                return -EBADMSG;
        *ret = o;
        return 0;
}

const char *json_get_string(json_object *o, const char *key) {
        json_object *v;

        if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
                return NULL;
        return json_object_get_string(v);
}

bool json_get_int(json_object *o, const char *key, int64_t *ret) {
        json_object *v;

        if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_int))
                return false;
        *ret = json_object_get_int64(v);
        return true;
}

char *json_to_string_dup(json_object *o, int flags, size_t *ret_size) {
        size_t l = 0;
        const char *s = json_object_to_json_string_length(o, flags, &l);
        char *r = s ? strndup(s, l) : NULL;

        if (r && ret_size)
                *ret_size = l;
        return r;
}
