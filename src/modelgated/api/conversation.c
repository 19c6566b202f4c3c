/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* rule:resumable-streams: the conversations modelgate has routed, and the lookup bodies. */

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "modelgated/api/conversation.h"
#include "modelgated/api/path-table.h"
#include "modelgated/api/route.h"
#include "shared/keys-file.h"
#include "shared/macro.h"
#include "shared/parse-util.h"
#include "shared/strv.h"

_Static_assert(CONV_LOOKUP_BODY_MAX == CONV_LOOKUP_MAX * (CONV_ID_MAX + 3) + 1024,
               "a lookup's body holds its most ids");

static char *concat(const char *a, const char *b) {
        char *s = NULL;
        return asprintf(&s, "%s%s", a, b) < 0 ? NULL : s;
}

static void entry_done(ConvEntry *e) {
        free(e->id);
        free(e->host);
        free(e->engine);
        free(e->owner);
}

void conv_map_done(ConvMap *m) {
        for (size_t i = 0; i < m->n; i++)
                entry_done(&m->entries[i]);
        m->entries = mfree(m->entries);
        m->n = 0;
}

bool conv_id_valid(const char *p, size_t n) {
        if (!p || n == 0 || n > CONV_ID_MAX)
                return false;
        for (size_t i = 0; i < n; i++)
                if ((unsigned char)p[i] < 0x20 || p[i] == 0x7f)
                        return false;
        return true;
}

bool conv_expired(const ConvEntry *e, usec_t now) {
        return now > e->seen && now - e->seen > CONV_TTL_USEC;
}

usec_t conv_map_hold_until(const ConvMap *m) {
        return m->n > 0 ? m->entries[m->n - 1].seen + CONV_HOLD_USEC : 0;
}

static void map_drop(ConvMap *m, size_t i) {
        entry_done(&m->entries[i]);
        memmove(m->entries + i, m->entries + i + 1, (m->n - i - 1) * sizeof(ConvEntry));
        m->n--;
}

/* the expired ones are the oldest: at the front */
static void map_expire(ConvMap *m, usec_t now) {
        size_t k = 0;

        while (k < m->n && conv_expired(&m->entries[k], now))
                entry_done(&m->entries[k++]);
        if (k == 0)
                return;
        memmove(m->entries, m->entries + k, (m->n - k) * sizeof(ConvEntry));
        m->n -= k;
}

static ssize_t map_index(const ConvMap *m, const char *owner, const char *id) {
        for (size_t i = m->n; i > 0; i--) /* the newest first: a resume follows its start soon */
                if (streq(m->entries[i - 1].id, id) && streq(m->entries[i - 1].owner, owner))
                        return (ssize_t)(i - 1);
        return -1;
}

/* Room for one more of owner's: its own used longest ago at its bound; at the map's, its own again if it
 * has any, else the one used longest ago (the front) */
static void map_make_room(ConvMap *m, const char *owner) {
        size_t mine = 0, oldest = 0;

        for (size_t i = 0; i < m->n; i++)
                if (streq(m->entries[i].owner, owner) && mine++ == 0)
                        oldest = i;
        if (mine >= CONV_OWNER_MAX || (m->n >= CONV_MAP_MAX && mine > 0))
                map_drop(m, oldest);
        else if (m->n >= CONV_MAP_MAX)
                map_drop(m, 0);
}

/* The routes whose handler is handle_completions_impl() in llama-server's server-context.cpp, the one
 * place that makes a stream session (server-stream.cpp) */
bool conv_path_keeps_stream(Span path) {
        return path_route_keeps_stream(path_route_lookup(path), HTTP_POST);
}

int conv_map_remember(ConvMap *m, const char *owner, const char *id, const char *host, const char *engine,
                      usec_t now) {
        ConvEntry e = {.seen = now};
        ssize_t i;

        assert(owner);
        e.id = strdup(id);
        e.host = strdup(host);
        e.engine = strdup(engine ?: "");
        e.owner = strdup(owner);
        if (!e.id || !e.host || !e.engine || !e.owner) {
                entry_done(&e);
                return -ENOMEM;
        }
        if (!m->entries) {
                m->entries = calloc(CONV_MAP_MAX, sizeof(ConvEntry));
                if (!m->entries) {
                        entry_done(&e);
                        return -ENOMEM;
                }
        }
        map_expire(m, now);
        i = map_index(m, owner, id);
        if (i >= 0)
                map_drop(m, (size_t)i);
        else
                map_make_room(m, owner);
        m->entries[m->n++] = e;
        return 0;
}

const ConvEntry *conv_map_find(ConvMap *m, const char *owner, const char *id, usec_t now) {
        ssize_t i;

        map_expire(m, now);
        i = map_index(m, owner, id);
        return i >= 0 ? &m->entries[i] : NULL;
}

void conv_map_touch(ConvMap *m, const char *owner, const char *id, usec_t now) {
        ssize_t i = map_index(m, owner, id);
        ConvEntry e;

        if (i < 0)
                return;
        e = m->entries[i];
        memmove(m->entries + i, m->entries + i + 1, (m->n - (size_t)i - 1) * sizeof(ConvEntry));
        e.seen = MAX(now, e.seen);
        m->entries[m->n - 1] = e;
}

/* Not a secret: it only keeps owners apart on the host, and no client ever sees it (the lookup's answer
 * is shown without it). A hash rather than the owner itself, so that the host's log names no key digest
 * and no client address. */
int conv_host_prefix(const char *owner, char ret[static CONV_HOST_PREFIX_LEN + 1]) {
        static const char what[] = "modelgate conversation owner\n";
        uint8_t h[SHA256_DIGEST_SIZE];
        char hex[SHA256_HEX_SIZE];
        _cleanup_free_ char *s = concat(what, owner);

        if (!s || sha256(s, strlen(s), h) < 0)
                return -EIO;
        sha256_to_hex(h, hex);
        snprintf(ret, CONV_HOST_PREFIX_LEN + 1, "mg-%.16s-", hex);
        return 0;
}

char *conv_host_id(const char *owner, const char *id) {
        char prefix[CONV_HOST_PREFIX_LEN + 1];

        if (conv_host_prefix(owner, prefix) < 0)
                return NULL;
        return concat(prefix, id);
}

char *conv_stream_url(const char *host_id, const char *from) {
        _cleanup_free_ char *q = query_escape(host_id);
        char *url = NULL;

        if (!q || asprintf(&url, "/v1/stream?conv_id=%s%s%s", q, from ? "&from=" : "", from ?: "") < 0)
                return NULL;
        return url;
}

bool conv_from_valid(const char *from) {
        uint64_t v;
        size_t n = strspn(from, "0123456789");

        return n > 0 && n <= 20 && from[n] == 0 && safe_atou64(from, &v) >= 0;
}

int conv_lookup_ids(const char *body, size_t n, char ***ret) {
        _cleanup_(json_object_putp) json_object *o = NULL;
        _cleanup_strv_free_ char **ids = NULL;
        json_object *a;
        int r;

        *ret = NULL;
        r = json_parse(NULL, body ?: "", n, &o);
        if (r == -ENOMEM)
                return r;
        if (r < 0 || !json_object_is_type(o, json_type_object) ||
            !json_object_object_get_ex(o, "conversation_ids", &a) ||
            !json_object_is_type(a, json_type_array))
                return 0;
        /* every entry counts, whatever it is: an array of empty strings or of one id repeated is no way
         * past the bound */
        for (size_t i = 0; i < json_object_array_length(a) && i < CONV_LOOKUP_MAX; i++) {
                json_object *v = json_object_array_get_idx(a, i);
                const char *s = json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
                if (!s || !conv_id_valid(s, (size_t)json_object_get_string_len(v)) || strv_contains(ids, s))
                        continue;
                if (strv_extend(&ids, s) < 0)
                        return -ENOMEM;
        }
        *ret = TAKE_PTR(ids);
        return 0;
}

char *conv_lookup_body(const char *prefix, char *const *ids, size_t *ret_size) {
        _cleanup_(json_object_putp) json_object *o = json_object_new_object(), *a = json_object_new_array();

        if (!o || !a)
                return NULL;
        STRV_FOREACH (id, ids) {
                _cleanup_free_ char *h = concat(prefix, *id);
                json_object *s = h ? json_object_new_string(h) : NULL;
                if (!s || json_object_array_add(a, s) < 0) {
                        json_object_put(s);
                        return NULL;
                }
        }
        if (json_object_object_add(o, "conversation_ids", TAKE_PTR(a)) < 0)
                return NULL;
        return json_to_string_dup(o, JSON_C_TO_STRING_PLAIN, ret_size);
}

/* "<id>" or "<id>::<model>", as llama-server's lookup matches a session to an id asked for */
static bool names_one_of(const char *conv, char *const *ids) {
        STRV_FOREACH (id, ids) {
                const char *rest = startswith(conv, *id);
                if (rest && (*rest == 0 || startswith(rest, "::")))
                        return true;
        }
        return false;
}

int conv_lookup_merge(json_object *into, const char *body, size_t n, const char *prefix, char *const *ids) {
        _cleanup_(json_object_putp) json_object *a = NULL;
        int r;

        r = json_parse(NULL, body ?: "", n, &a);
        if (r < 0)
                return r;
        if (!json_object_is_type(a, json_type_array))
                return -EBADMSG;
        for (size_t i = 0; i < json_object_array_length(a); i++) {
                json_object *e = json_object_array_get_idx(a, i);
                const char *conv = json_get_string(e, "conversation_id");
                const char *own = conv ? startswith(conv, prefix) : NULL;
                if (!json_object_is_type(e, json_type_object) || !own || !names_one_of(own, ids))
                        continue;
                json_object *shown = json_object_new_string(own);
                /* replaces the host's id where it stood (it frees it, and 'own' with it) */
                if (!shown || json_object_object_add(e, "conversation_id", shown) < 0) {
                        json_object_put(shown);
                        return -ENOMEM;
                }
                if (json_object_array_add(into, json_object_get(e)) < 0) {
                        json_object_put(e);
                        return -ENOMEM;
                }
        }
        return 0;
}
