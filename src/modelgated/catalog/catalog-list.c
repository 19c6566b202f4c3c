/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A host's /models answer, read entry by entry (catalog-list.h). The frame ({"data":[ … ], …}) is scanned
 * here, a byte at a time; every value in it (an entry, or another member's value) is parsed by json-c's
 * tokener, which keeps its state across reads, so an entry split over two reads costs nothing more. An
 * entry's text stays the host's bytes until a status event changes it; then json-c's text of it goes to
 * 'edits', and the old one is garbage there until edits are compacted (when garbage outweighs what is
 * live: each compaction follows as many bytes of changes as it copies). */

#include <assert.h>
#include <errno.h>
#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

#include "modelgated/catalog/catalog-list.h"
#include "shared/buffer.h"
#include "shared/count-map.h"
#include "shared/strv.h"

#define JSON_FLAGS (JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE)
#define EDITS_SLACK (64 * 1024)

typedef enum ReadState {
        READ_START,          /* before the top-level '{' */
        READ_KEY_OR_END,     /* after '{': a key, or '}' */
        READ_KEY,            /* after ',': a key */
        READ_IN_KEY,         /* inside a key's string */
        READ_COLON,          /* after a key */
        READ_VALUE,          /* before a member's value: "data"'s '[', or any value */
        READ_IN_VALUE,       /* the tokener has the start of a value that is not "data" (checked, dropped) */
        READ_AFTER_VALUE,    /* ',' or '}' */
        READ_ELEMENT_OR_END, /* after '[': an entry, or ']' */
        READ_ELEMENT,        /* after ',' in the list: an entry */
        READ_IN_ELEMENT,     /* the tokener has the start of an entry */
        READ_AFTER_ELEMENT,  /* ',' or ']' */
        READ_TRAILER,        /* after the last '}': whitespace only */
        READ_DONE,           /* catalog_list_read_end() said yes */
} ReadState;

typedef struct ListEntry {
        char *id;
        size_t offset, len; /* in raw, or in edits once edited */
        bool edited;
        bool loading;
        bool cold; /* a status.value other than "loaded": a router's model that a request would load */
} ListEntry;

struct CatalogList {
        size_t max_entries, max_bytes;
        Buffer raw;        /* the answer as read */
        Buffer edits;      /* the texts of entries a status event changed */
        size_t edits_live; /* of which still an entry's text */
        ListEntry *entries;
        size_t n_entries, n_alloc;
        size_t n_elements; /* every element of "data" so far, with an id or not: what max_entries bounds */
        CountMap *by_id;   /* id → 1 + the first entry with that id */
        CountMap *names;   /* the ids and the aliases */
        json_tokener *apply_tok; /* for catalog_list_apply(): one per event would cost more than its entry */
        uint64_t entry_parses;

        ReadState state;
        int error; /* once set, what every read returns */
        Buffer key;
        bool key_escaped, in_escape, member_is_data, seen_data;
        json_tokener *tok;
        size_t value_start;     /* in raw */
        CatalogStatus *pending; /* for entries not read yet; a slot of a model whose entry came is empty */
        size_t n_pending;
        CountMap *pending_by_key; /* key → 1 + its slot */
};

int catalog_list_new(size_t max_entries, size_t max_bytes, CatalogList **ret) {
        CatalogList *l = calloc(1, sizeof(CatalogList));

        if (!l)
                return -ENOMEM;
        l->max_entries = max_entries;
        l->max_bytes = max_bytes;
        l->tok = json_tokener_new();
        if (!l->tok) {
                free(l);
                return -ENOMEM;
        }
        *ret = l;
        return 0;
}

static void pending_free(CatalogList *l) {
        for (size_t i = 0; i < l->n_pending; i++)
                catalog_status_done(&l->pending[i]);
        l->pending = mfree(l->pending);
        l->n_pending = 0;
        l->pending_by_key = count_map_free(l->pending_by_key);
}

CatalogList *catalog_list_free(CatalogList *l) {
        if (!l)
                return NULL;
        for (size_t i = 0; i < l->n_entries; i++)
                free(l->entries[i].id);
        free(l->entries);
        buffer_done(&l->raw);
        buffer_done(&l->edits);
        buffer_done(&l->key);
        count_map_free(l->by_id);
        count_map_free(l->names);
        if (l->tok)
                json_tokener_free(l->tok);
        if (l->apply_tok)
                json_tokener_free(l->apply_tok);
        pending_free(l);
        return mfree(l);
}

static bool is_ws(char c) {
        return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static const char *entry_text(const CatalogList *l, const ListEntry *e) {
        return buffer_peek(e->edited ? &l->edits : &l->raw) + e->offset;
}

static bool status_is_loading(json_object *o) {
        json_object *st, *v;

        return json_object_object_get_ex(o, "status", &st) && json_object_object_get_ex(st, "value", &v) &&
               json_object_is_type(v, json_type_string) && streq(json_object_get_string(v), "loading");
}

static bool status_is_cold(json_object *o) {
        json_object *st, *v;

        return json_object_object_get_ex(o, "status", &st) && json_object_object_get_ex(st, "value", &v) &&
               (!json_object_is_type(v, json_type_string) || !streq(json_object_get_string(v), "loaded"));
}

static int add_names(CatalogList *l, json_object *o) {
        json_object *al;

        if (!json_object_object_get_ex(o, "aliases", &al) || !json_object_is_type(al, json_type_array))
                return 0;
        for (size_t k = 0; k < json_object_array_length(al); k++) {
                json_object *a = json_object_array_get_idx(al, k);
                if (json_object_is_type(a, json_type_string) &&
                    !count_map_get(&l->names, json_object_get_string(a), true))
                        return -ENOMEM;
        }
        return 0;
}

/* Edits are compacted once their garbage outweighs what is live (and a little more) */
static int edits_compact(CatalogList *l) {
        Buffer b = {};

        if (buffer_size(&l->edits) <= 2 * l->edits_live + EDITS_SLACK)
                return 0;
        for (size_t i = 0; i < l->n_entries; i++) {
                ListEntry *e = &l->entries[i];
                size_t at = buffer_size(&b);
                if (!e->edited)
                        continue;
                if (buffer_append(&b, entry_text(l, e), e->len) < 0) {
                        buffer_done(&b);
                        return -ENOMEM;
                }
                e->offset = at;
        }
        buffer_done(&l->edits);
        l->edits = b;
        return 0;
}

/* o, the changed entry i, becomes its text */
static int entry_write(CatalogList *l, size_t i, json_object *o) {
        ListEntry *e = &l->entries[i];
        size_t n = 0;
        const char *text = json_object_to_json_string_length(o, JSON_FLAGS, &n);
        size_t at = buffer_size(&l->edits);

        if (!text || buffer_append(&l->edits, text, n) < 0)
                return -ENOMEM;
        if (e->edited)
                l->edits_live -= e->len;
        e->offset = at;
        e->len = n;
        e->edited = true;
        e->loading = status_is_loading(o);
        e->cold = status_is_cold(o);
        l->edits_live += n;
        /* a loaded model's own entry may bring aliases the list did not have */
        if (add_names(l, o) < 0)
                return -ENOMEM;
        return edits_compact(l);
}

/* One element of "data" has been parsed (o; NULL for a JSON null), ending at end in raw */
static int element_read(CatalogList *l, json_object *o, size_t end) {
        json_object *id;
        ListEntry *e;
        uint64_t *at, *slot;

        if (!json_object_is_type(o, json_type_object) || !json_object_object_get_ex(o, "id", &id) ||
            !json_object_is_type(id, json_type_string))
                return 0; /* a listing leaves it out */
        while (end > l->value_start && is_ws(buffer_peek(&l->raw)[end - 1]))
                end--;
        if (l->n_entries == l->n_alloc) {
                size_t k = MAX(l->n_alloc * 2, 16u);
                ListEntry *p = reallocarray(l->entries, k, sizeof(ListEntry));
                if (!p)
                        return -ENOMEM;
                l->entries = p;
                l->n_alloc = k;
        }
        at = count_map_get(&l->by_id, json_object_get_string(id), true);
        if (!at || !count_map_get(&l->names, json_object_get_string(id), true) || add_names(l, o) < 0)
                return -ENOMEM;
        e = &l->entries[l->n_entries];
        *e = (ListEntry){.offset = l->value_start,
                         .len = end - l->value_start,
                         .loading = status_is_loading(o),
                         .cold = status_is_cold(o)};
        e->id = strdup(json_object_get_string(id));
        if (!e->id)
                return -ENOMEM;
        l->n_entries++;
        if (*at != 0)
                return 0; /* a second entry with the id: events go to the first, as a listing finds it */
        *at = l->n_entries;

        /* an event that came before its entry: the entry is parsed already, so it costs no parse */
        slot = l->pending_by_key ? count_map_get(&l->pending_by_key, e->id, false) : NULL;
        if (slot && *slot > 0) {
                CatalogStatus *s = &l->pending[*slot - 1];
                int r = catalog_status_apply_entry(o, s);
                *slot = 0;
                if (r > 0)
                        r = entry_write(l, l->n_entries - 1, o);
                catalog_status_done(s);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* The key just read names the model list: "data", perhaps spelled with escapes */
static bool key_is_data(CatalogList *l) {
        _cleanup_(buffer_done) Buffer q = {};
        json_object *s;
        bool yes;

        if (!l->key_escaped)
                return buffer_size(&l->key) == 4 && memcmp(buffer_peek(&l->key), "data", 4) == 0;
        if (buffer_append_str(&q, "\"") < 0 ||
            buffer_append(&q, buffer_peek(&l->key), buffer_size(&l->key)) < 0 ||
            buffer_append_str(&q, "\"") < 0 || buffer_terminate(&q) < 0)
                return false;
        s = json_tokener_parse(buffer_peek(&q));
        yes = json_object_is_type(s, json_type_string) && streq(json_object_get_string(s), "data");
        json_object_put(s);
        return yes;
}

/* One byte of the object's structure (whitespace, braces, the colon, commas, the trailer) in the
 * states that read nothing else: 1 (it took the byte), or -EBADMSG */
static int scan_structure(CatalogList *l, char ch) {
        switch (l->state) {
        case READ_START:
                if (!is_ws(ch) && ch != '{')
                        return -EBADMSG;
                if (ch == '{')
                        l->state = READ_KEY_OR_END;
                return 1;

        case READ_KEY_OR_END:
        case READ_KEY:
                if (is_ws(ch))
                        return 1;
                if (ch == '}' && l->state == READ_KEY_OR_END) {
                        l->state = READ_TRAILER;
                        return 1;
                }
                if (ch != '"')
                        return -EBADMSG;
                buffer_clear(&l->key);
                l->key_escaped = l->in_escape = false;
                l->state = READ_IN_KEY;
                return 1;

        case READ_COLON:
                if (!is_ws(ch) && ch != ':')
                        return -EBADMSG;
                if (ch == ':') {
                        l->member_is_data = key_is_data(l);
                        if (l->member_is_data && l->seen_data)
                                return -EBADMSG; /* two lists: which one would be the host's? */
                        l->state = READ_VALUE;
                }
                return 1;

        case READ_AFTER_ELEMENT:
                if (!is_ws(ch) && ch != ',' && ch != ']')
                        return -EBADMSG;
                if (ch == ',')
                        l->state = READ_ELEMENT;
                else if (ch == ']')
                        l->state = READ_AFTER_VALUE;
                return 1;

        case READ_AFTER_VALUE:
                if (!is_ws(ch) && ch != ',' && ch != '}')
                        return -EBADMSG;
                if (ch == ',')
                        l->state = READ_KEY;
                else if (ch == '}')
                        l->state = READ_TRAILER;
                return 1;

        case READ_TRAILER:
                return is_ws(ch) ? 1 : -EBADMSG;

        default: /* READ_DONE, and the states scan() hands elsewhere */
                return -EBADMSG;
        }
}

/* A member's key, up to its closing quote, as far as p[0..n) holds it: the bytes taken, or < 0 */
static ssize_t scan_key(CatalogList *l, const char *p, size_t n) {
        size_t j = 0;

        for (; j < n; j++) {
                if (l->in_escape)
                        l->in_escape = false;
                else if (p[j] == '\\')
                        l->in_escape = l->key_escaped = true;
                else if (p[j] == '"')
                        break;
                else if ((unsigned char)p[j] < 0x20)
                        return -EBADMSG;
        }
        if (buffer_append(&l->key, p, j) < 0)
                return -ENOMEM;
        if (j == n)
                return (ssize_t)n;
        l->state = READ_COLON;
        return (ssize_t)j + 1;
}

/* Before a member's value or an element of "data", at raw offset at: the "data" list opens, or the
 * tokener starts on the value. The bytes taken (0: the tokener takes ch), or < 0 */
static int scan_value_start(CatalogList *l, char ch, size_t at) {
        if (is_ws(ch))
                return 1;
        if (l->state == READ_VALUE) {
                if (l->member_is_data) {
                        if (ch != '[')
                                return -EBADMSG;
                        l->seen_data = true;
                        l->state = READ_ELEMENT_OR_END;
                        return 1;
                }
                l->state = READ_IN_VALUE;
        } else {
                if (ch == ']' && l->state == READ_ELEMENT_OR_END) {
                        l->state = READ_AFTER_VALUE;
                        return 1;
                }
                if (++l->n_elements > l->max_entries)
                        return -E2BIG;
                l->state = READ_IN_ELEMENT;
        }
        json_tokener_reset(l->tok);
        l->value_start = at;
        return 0;
}

/* A value, or an element of "data", through the tokener, as far as p[0..n) (raw from base on) holds
 * it: the bytes taken, or < 0 */
static ssize_t scan_json(CatalogList *l, const char *p, size_t n, size_t base) {
        size_t k = MIN(n, (size_t)INT32_MAX);
        json_object *o = json_tokener_parse_ex(l->tok, p, (int)k);
        enum json_tokener_error e = json_tokener_get_error(l->tok);
        int r = 0;

        if (e == json_tokener_continue)
                return (ssize_t)k;
        if (e != json_tokener_success) {
                json_object_put(o);
                return -EBADMSG;
        }
        k = json_tokener_get_parse_end(l->tok);
        if (l->state == READ_IN_ELEMENT) {
                r = element_read(l, o, base + k);
                l->state = READ_AFTER_ELEMENT;
        } else
                l->state = READ_AFTER_VALUE;
        json_object_put(o);
        return r < 0 ? r : (ssize_t)k;
}

/* The new bytes p[0..n), which are raw from base on */
static int scan(CatalogList *l, const char *p, size_t n, size_t base) {
        size_t i = 0;

        while (i < n) {
                ssize_t k;

                switch (l->state) {
                case READ_IN_KEY:
                        k = scan_key(l, p + i, n - i);
                        break;
                case READ_VALUE:
                case READ_ELEMENT_OR_END:
                case READ_ELEMENT:
                        k = scan_value_start(l, p[i], base + i);
                        break;
                case READ_IN_VALUE:
                case READ_IN_ELEMENT:
                        k = scan_json(l, p + i, n - i, base + i);
                        break;
                default:
                        k = scan_structure(l, p[i]);
                        break;
                }
                if (k < 0)
                        return (int)k;
                i += (size_t)k;
        }
        return 0;
}

int catalog_list_read(CatalogList *l, const char *p, size_t n) {
        assert(l);
        size_t base = buffer_size(&l->raw);

        if (l->error)
                return l->error;
        if (n > l->max_bytes - MIN(base, l->max_bytes))
                return (l->error = -E2BIG);
        if (buffer_append(&l->raw, p, n) < 0)
                return (l->error = -ENOMEM);
        /* scanned where it was stored: an entry's text is kept as an offset into it */
        int r = scan(l, buffer_peek(&l->raw) + base, n, base);
        if (r < 0)
                l->error = r;
        return r;
}

int catalog_list_read_end(CatalogList *l) {
        assert(l);
        if (!l->error && (l->state != READ_TRAILER || !l->seen_data))
                l->error = -EBADMSG;
        if (l->error)
                return l->error;
        l->state = READ_DONE;
        pending_free(l);
        buffer_done(&l->key);
        json_tokener_free(l->tok);
        l->tok = NULL;
        return 0;
}

int catalog_list_parse(const char *body, size_t n, size_t max_entries, size_t max_bytes, CatalogList **ret) {
        _cleanup_(catalog_list_freep) CatalogList *l = NULL;
        int r;

        r = catalog_list_new(max_entries, max_bytes, &l);
        if (r < 0)
                return r;
        r = catalog_list_read(l, body, n);
        if (r < 0)
                return r;
        r = catalog_list_read_end(l);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(l);
        return 0;
}

size_t catalog_list_size(const CatalogList *l) {
        assert(l);
        return l->n_entries;
}

const char *catalog_list_entry(const CatalogList *l, size_t i, size_t *ret_len) {
        assert(l);
        *ret_len = l->entries[i].len;
        return entry_text(l, &l->entries[i]);
}

const char *catalog_list_id(const CatalogList *l, size_t i) {
        assert(l);
        return l->entries[i].id;
}

bool catalog_list_loading(const CatalogList *l, size_t i) {
        assert(l);
        return l->entries[i].loading;
}

bool catalog_list_cold(const CatalogList *l, size_t i) {
        assert(l);
        return l->entries[i].cold;
}

ssize_t catalog_list_find(const CatalogList *l, const char *id) {
        assert(l);
        CountMap *m = l->by_id;
        uint64_t *at = m ? count_map_get(&m, id, false) : NULL;

        return at && *at > 0 ? (ssize_t)(*at - 1) : -1;
}

bool catalog_list_has(const CatalogList *l, const char *key) {
        assert(l);
        CountMap *m = l->names;
        return m && count_map_get(&m, key, false);
}

char **catalog_list_ids(const CatalogList *l) {
        assert(l);
        char **ids = calloc(l->n_entries + 1, sizeof(char *));

        if (!ids)
                return NULL;
        for (size_t i = 0; i < l->n_entries; i++)
                if (!(ids[i] = strdup(l->entries[i].id))) {
                        strv_free(ids);
                        return NULL;
                }
        return ids;
}

bool catalog_list_equal(const CatalogList *a, const CatalogList *b) {
        assert(a);
        if (a->n_entries != b->n_entries)
                return false;
        for (size_t i = 0; i < a->n_entries; i++) {
                const ListEntry *x = &a->entries[i], *y = &b->entries[i];
                if (x->len != y->len || memcmp(entry_text(a, x), entry_text(b, y), x->len) != 0)
                        return false;
        }
        return true;
}

static int entry_apply(CatalogList *l, size_t i, const CatalogStatus *s) {
        const ListEntry *e = &l->entries[i];
        json_object *o;
        int r;

        if (!l->apply_tok && !(l->apply_tok = json_tokener_new()))
                return -ENOMEM;
        json_tokener_reset(l->apply_tok);
        l->entry_parses++;
        o = json_tokener_parse_ex(l->apply_tok, entry_text(l, e), (int)MIN(e->len, (size_t)INT32_MAX));
        if (!o)
                return 0; /* it parsed when it was read */
        r = catalog_status_apply_entry(o, s);
        if (r > 0) {
                int k = entry_write(l, i, o);
                if (k < 0)
                        r = k;
        }
        json_object_put(o);
        return r;
}

/* s for an entry not read yet: the last event per model is kept, and replaces the one before it; a load's
 * answer ("loading", if it is still unloaded) is older news than an event, and does not */
static int pending_add(CatalogList *l, const CatalogStatus *s) {
        uint64_t *at = l->pending_by_key ? count_map_get(&l->pending_by_key, s->key, false) : NULL;
        CatalogStatus copy = {
                .key = strdup(s->key),
                .status = strdup(s->status),
                .exit_code = s->exit_code,
                .percent = s->percent,
                .info = json_object_get(s->info),
                .only_unloaded = s->only_unloaded,
        };

        if (!copy.key || !copy.status) {
                catalog_status_done(&copy);
                return -ENOMEM;
        }
        if (at && *at > 0) {
                CatalogStatus *old = &l->pending[*at - 1];
                if (s->only_unloaded) {
                        catalog_status_done(&copy);
                        return 0;
                }
                /* what a loaded model told about itself stays until it unloads */
                if (!copy.info && !streq(copy.status, "unloaded"))
                        copy.info = TAKE_PTR(old->info);
                catalog_status_done(old);
                *old = copy;
                return 0;
        }
        if (l->n_pending >= l->max_entries) {
                catalog_status_done(&copy);
                return -ENOBUFS;
        }
        CatalogStatus *p = reallocarray(l->pending, l->n_pending + 1, sizeof(CatalogStatus));
        if (p)
                l->pending = p;
        at = p ? count_map_get(&l->pending_by_key, s->key, true) : NULL;
        if (!at) {
                catalog_status_done(&copy);
                return -ENOMEM;
        }
        l->pending[l->n_pending++] = copy;
        *at = l->n_pending;
        return 0;
}

int catalog_list_apply(CatalogList *l, const CatalogStatus *s) {
        assert(l);
        ssize_t i = catalog_list_find(l, s->key);

        if (i >= 0)
                return entry_apply(l, (size_t)i, s);
        if (l->state == READ_DONE || l->error)
                return 0;
        return pending_add(l, s);
}

uint64_t catalog_list_entry_parses(const CatalogList *l) {
        assert(l);
        return l->entry_parses;
}
