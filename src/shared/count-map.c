/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Open addressing with linear probing; removed entries leave tombstones, swept when the table is rebuilt,
 * so that entries that come and go (connections) never fill it. At most half full. */

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "shared/count-map.h"
#include "shared/macro.h"

#define TOMBSTONE ((char *)1)

typedef struct Entry {
        char *name; /* NULL: free; TOMBSTONE: removed */
        uint64_t n;
} Entry;

struct CountMap {
        Entry *e;
        size_t n_slots, n_used, n_live; /* used: live entries and tombstones */
};

static uint64_t hash(const char *s) {
        uint64_t h = 14695981039346656037ULL; /* FNV-1a */
        for (; *s; s++)
                h = (h ^ (unsigned char)*s) * 1099511628211ULL;
        return h;
}

static bool live(const Entry *e) {
        return e->name && e->name != TOMBSTONE;
}

/* The entry of name, or NULL with *ret_free (if given) the slot it would take */
static Entry *find(const CountMap *m, const char *name, Entry **ret_free) {
        Entry *tomb = NULL;

        for (size_t i = (size_t)hash(name) & (m->n_slots - 1);; i = (i + 1) & (m->n_slots - 1)) {
                Entry *e = &m->e[i];
                if (!e->name) {
                        if (ret_free)
                                *ret_free = tomb ?: e;
                        return NULL;
                }
                if (e->name == TOMBSTONE)
                        tomb = tomb ?: e;
                else if (streq(e->name, name))
                        return e;
        }
}

static int rebuild(CountMap *m, size_t n_slots) {
        Entry *old = m->e, *slot;
        size_t n_old = m->n_slots;

        m->e = calloc(n_slots, sizeof(Entry));
        if (!m->e) {
                m->e = old;
                return -ENOMEM;
        }
        m->n_slots = n_slots;
        m->n_used = m->n_live;
        for (size_t i = 0; i < n_old; i++)
                if (live(&old[i])) {
                        find(m, old[i].name, &slot);
                        *slot = old[i];
                }
        free(old);
        return 0;
}

CountMap *count_map_free(CountMap *m) {
        if (!m)
                return NULL;
        for (size_t i = 0; i < m->n_slots; i++)
                if (live(&m->e[i]))
                        free(m->e[i].name);
        free(m->e);
        free(m);
        return NULL;
}

uint64_t *count_map_get(CountMap **mp, const char *name, bool create) {
        assert(mp);
        CountMap *m = *mp;
        Entry *e, *slot;

        if (!m) {
                if (!create)
                        return NULL;
                m = calloc(1, sizeof(CountMap));
                if (!m)
                        return NULL;
                if (rebuild(m, 16) < 0) {
                        free(m);
                        return NULL;
                }
                *mp = m;
        }
        e = find(m, name, &slot);
        if (e || !create)
                return e ? &e->n : NULL;
        if ((m->n_used + 1) * 2 > m->n_slots) {
                /* grow when live entries fill it, else only sweep the tombstones */
                if (rebuild(m, (m->n_live + 1) * 4 > m->n_slots ? m->n_slots * 2 : m->n_slots) < 0)
                        return NULL;
                find(m, name, &slot);
        }
        char *copy = strdup(name);
        if (!copy)
                return NULL;
        if (!slot->name)
                m->n_used++;
        *slot = (Entry){copy, 0};
        m->n_live++;
        return &slot->n;
}

void count_map_remove(CountMap *m, const char *name) {
        Entry *e = m ? find(m, name, NULL) : NULL;

        if (!e)
                return;
        free(e->name);
        e->name = TOMBSTONE;
        m->n_live--;
}

size_t count_map_size(const CountMap *m) {
        return m ? m->n_live : 0;
}

bool count_map_next(const CountMap *m, size_t *i, const char **ret_name, uint64_t *ret_n) {
        for (; m && *i < m->n_slots; (*i)++)
                if (live(&m->e[*i])) {
                        *ret_name = m->e[*i].name;
                        *ret_n = m->e[*i].n;
                        (*i)++;
                        return true;
                }
        return false;
}
