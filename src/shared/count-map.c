/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Open addressing with tombstones: entries come and go with connections, and the table never holds more
 * live entries than there are connections. */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "modelgated/address-count.h"
#include "shared/macro.h"

#define TOMBSTONE ((char *)1)

typedef struct Entry {
        char *address; /* NULL: free; TOMBSTONE: removed */
        size_t n;
} Entry;

struct AddressCount {
        Entry *e;
        size_t n_slots, n_used; /* used: live entries and tombstones */
};

static uint64_t hash(const char *s) {
        uint64_t h = 14695981039346656037ULL; /* FNV-1a */
        for (; *s; s++)
                h = (h ^ (unsigned char)*s) * 1099511628211ULL;
        return h;
}

static Entry *find(const AddressCount *t, const char *address, Entry **ret_free) {
        Entry *tomb = NULL;
        size_t i = (size_t)hash(address) & (t->n_slots - 1);

        for (;; i = (i + 1) & (t->n_slots - 1)) {
                Entry *e = &t->e[i];
                if (!e->address) {
                        if (ret_free)
                                *ret_free = tomb ?: e;
                        return NULL;
                }
                if (e->address == TOMBSTONE)
                        tomb = tomb ?: e;
                else if (streq(e->address, address))
                        return e;
        }
}

static int rehash(AddressCount *t, size_t n_slots) {
        Entry *old = t->e;
        size_t n_old = t->n_slots;

        t->e = calloc(n_slots, sizeof(Entry));
        if (!t->e) {
                t->e = old;
                return -ENOMEM;
        }
        t->n_slots = n_slots;
        t->n_used = 0;
        for (size_t i = 0; i < n_old; i++)
                if (old[i].address && old[i].address != TOMBSTONE) {
                        Entry *slot;
                        find(t, old[i].address, &slot);
                        *slot = old[i];
                        t->n_used++;
                }
        free(old);
        return 0;
}

AddressCount *address_count_free(AddressCount *t) {
        if (!t)
                return NULL;
        for (size_t i = 0; i < t->n_slots; i++)
                if (t->e[i].address != TOMBSTONE)
                        free(t->e[i].address);
        free(t->e);
        free(t);
        return NULL;
}

size_t address_count_add(AddressCount **tp, const char *address) {
        AddressCount *t = *tp;
        Entry *e, *slot;

        if (!t) {
                t = calloc(1, sizeof(AddressCount));
                if (!t)
                        return 0;
                if (rehash(t, 16) < 0) {
                        free(t);
                        return 0;
                }
                *tp = t;
        }
        e = find(t, address, &slot);
        if (e)
                return ++e->n;
        if ((t->n_used + 1) * 2 > t->n_slots) {
                size_t live = 0;
                for (size_t i = 0; i < t->n_slots; i++)
                        live += t->e[i].address && t->e[i].address != TOMBSTONE;
                /* grow when it is live entries that fill it, else only sweep the tombstones */
                if (rehash(t, (live + 1) * 4 > t->n_slots ? t->n_slots * 2 : t->n_slots) < 0)
                        return 0;
                find(t, address, &slot);
        }
        char *a = strdup(address);
        if (!a)
                return 0;
        if (!slot->address)
                t->n_used++;
        *slot = (Entry){a, 1};
        return 1;
}

void address_count_remove(AddressCount *t, const char *address) {
        Entry *e = t ? find(t, address, NULL) : NULL;

        if (!e)
                return;
        if (--e->n == 0) {
                free(e->address);
                e->address = TOMBSTONE;
        }
}
