/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <arpa/inet.h>
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "modelgated/sched/alias-pick.h"
#include "shared/macro.h"

static const char *const target_state_names[_ALIAS_TARGET_STATE_MAX] = {
        [ALIAS_TARGET_DOWN] = "down",
        [ALIAS_TARGET_OTHER] = "needs-switch",
        [ALIAS_TARGET_FREE] = "can-start",
        [ALIAS_TARGET_WARM] = "warm",
};

const char *alias_target_state_to_string(AliasTargetState s) {
        return s < _ALIAS_TARGET_STATE_MAX ? target_state_names[s] : NULL;
}

static bool untried(uint64_t tried, size_t i) {
        return !(tried & (UINT64_C(1) << i));
}

/* The first untried target in at least state 'min', or -1 */
static ssize_t first_at_least(const AliasTarget *t, size_t n, uint64_t tried, AliasTargetState min) {
        for (size_t i = 0; i < n; i++)
                if (untried(tried, i) && t[i].state >= min)
                        return (ssize_t)i;
        return -1;
}

static ssize_t pick_warm(const AliasTarget *t, size_t n, uint64_t tried, const char **ret_why) {
        static const char *const why[_ALIAS_TARGET_STATE_MAX] = {
                [ALIAS_TARGET_WARM] = "engine up",
                [ALIAS_TARGET_FREE] = "can start its engine without stopping another",
                [ALIAS_TARGET_OTHER] = "host up, waits for a switch",
        };
        for (AliasTargetState s = ALIAS_TARGET_WARM; s > ALIAS_TARGET_DOWN; s--)
                for (size_t i = 0; i < n; i++)
                        if (untried(tried, i) && t[i].state == s) {
                                *ret_why = why[s];
                                return (ssize_t)i;
                        }
        return -1;
}

/* Among the warm targets, the least loaded; the client's last one while it is warm and not the busiest */
static ssize_t pick_spread(const AliasTarget *t, size_t n, uint64_t tried, ssize_t last,
                           const char **ret_why) {
        ssize_t least = -1;
        unsigned max_other = 0;
        bool other = false;

        for (size_t i = 0; i < n; i++) {
                if (!untried(tried, i) || t[i].state != ALIAS_TARGET_WARM)
                        continue;
                if (least < 0 || t[i].load < t[least].load)
                        least = (ssize_t)i;
                if ((ssize_t)i != last) {
                        max_other = other && max_other > t[i].load ? max_other : t[i].load;
                        other = true;
                }
        }
        if (last >= 0 && (size_t)last < n && untried(tried, (size_t)last) &&
            t[last].state == ALIAS_TARGET_WARM && (!other || t[last].load <= max_other)) {
                *ret_why = "this client's last target";
                return last;
        }
        if (least >= 0)
                *ret_why = "fewest requests";
        return least;
}

ssize_t alias_pick(AliasPolicy policy, const AliasTarget *t, size_t n, uint64_t tried, ssize_t last,
                   const char **ret_why) {
        const char *why = NULL;
        ssize_t i = -1;

        n = n > ALIAS_TARGETS_MAX ? ALIAS_TARGETS_MAX : n;
        switch (policy) {
        case ALIAS_POLICY_ORDERED:
                i = first_at_least(t, n, tried, ALIAS_TARGET_OTHER);
                why = "first whose host is up";
                break;
        case ALIAS_POLICY_SPREAD:
                i = pick_spread(t, n, tried, last, &why);
                if (i < 0)
                        i = pick_warm(t, n, tried, &why);
                break;
        default:
                i = pick_warm(t, n, tried, &why);
                break;
        }
        if (i < 0) {
                i = first_at_least(t, n, tried, ALIAS_TARGET_DOWN);
                why = "every target left is down";
        }
        if (ret_why)
                *ret_why = i >= 0 ? why : "every target was tried";
        return i;
}

/* The memory is fixed arrays, taken once, so that storing never allocates or fails whatever clients
 * send; its lists run through them by index, 0 being none, so that a zeroed part is empty. */
#define NAME_MAX_LEN (INET6_ADDRSTRLEN + 8) /* an address, a /64, a key's digest */
#define BUCKETS (2 * ALIAS_MEMORY_ENTRIES)

typedef struct Link {
        uint32_t prev, next;
} Link;

typedef struct List {
        uint32_t head, tail, n; /* head: the most recent */
} List;

typedef struct Entry {
        char who[NAME_MAX_LEN];
        uint64_t alias;   /* hash of its name: two aliases of one file hashing alike only share a memory */
        uint64_t session; /* the client's session's id hash, 0: none */
        usec_t used;
        uint32_t hash_next, group;
        uint16_t target;
        bool protected;
} Entry;

typedef struct Group {
        char prefix[NAME_MAX_LEN];
        uint32_t hash_next; /* or, free, the next free group */
        List entries;
} Group;

typedef struct Part {
        Entry e[ALIAS_MEMORY_ENTRIES + 1];
        Link lru[ALIAS_MEMORY_ENTRIES + 1];      /* in probation or protected */
        Link in_group[ALIAS_MEMORY_ENTRIES + 1]; /* in its group's entries */
        Group g[ALIAS_MEMORY_ENTRIES + 1];       /* never more groups than entries */
        uint32_t e_bucket[BUCKETS], g_bucket[BUCKETS];
        List probation, protected;
        uint32_t n_entries, n_groups, free_groups; /* slots taken (an evicted entry's is reused at once) */
} Part;

struct AliasMemory {
        Part keyed, anonymous;
};

static void list_remove(List *l, Link *link, uint32_t i) {
        if (link[i].prev)
                link[link[i].prev].next = link[i].next;
        else
                l->head = link[i].next;
        if (link[i].next)
                link[link[i].next].prev = link[i].prev;
        else
                l->tail = link[i].prev;
        link[i] = (Link){};
        l->n--;
}

static void list_push(List *l, Link *link, uint32_t i) {
        link[i] = (Link){.next = l->head};
        if (l->head)
                link[l->head].prev = i;
        else
                l->tail = i;
        l->head = i;
        l->n++;
}

/* FNV-1a, from seed */
static uint64_t hash(uint64_t h, const char *s) {
        for (; *s; s++)
                h = (h ^ (uint8_t)*s) * UINT64_C(1099511628211);
        return h;
}
#define FNV_SEED UINT64_C(14695981039346656037)

static size_t entry_bucket(uint64_t alias, const char *who, uint64_t session) {
        return (hash(alias, who) ^ session) % BUCKETS;
}

static size_t group_bucket(const char *prefix) {
        return hash(FNV_SEED, prefix) % BUCKETS;
}

static uint32_t entry_find(const Part *p, uint64_t alias, const char *who, uint64_t session) {
        uint32_t i = p->e_bucket[entry_bucket(alias, who, session)];
        while (i && (p->e[i].alias != alias || p->e[i].session != session || !streq(p->e[i].who, who)))
                i = p->e[i].hash_next;
        return i;
}

static uint32_t group_find(const Part *p, const char *prefix) {
        uint32_t i = p->g_bucket[group_bucket(prefix)];
        while (i && !streq(p->g[i].prefix, prefix))
                i = p->g[i].hash_next;
        return i;
}

static void entry_unhash(Part *p, uint32_t i) {
        uint32_t *at = &p->e_bucket[entry_bucket(p->e[i].alias, p->e[i].who, p->e[i].session)];
        while (*at != i)
                at = &p->e[*at].hash_next;
        *at = p->e[i].hash_next;
}

static void group_unhash(Part *p, uint32_t i) {
        uint32_t *at = &p->g_bucket[group_bucket(p->g[i].prefix)];
        while (*at != i)
                at = &p->g[*at].hash_next;
        *at = p->g[i].hash_next;
}

static bool expired(const Entry *e, usec_t now) {
        return now >= e->used + ALIAS_MEMORY_USEC;
}

/* Forgets entry i, and its group with its last entry; its slot is the caller's */
static void entry_evict(Part *p, uint32_t i) {
        Entry *e = &p->e[i];
        Group *g = &p->g[e->group];

        entry_unhash(p, i);
        list_remove(e->protected ? &p->protected : &p->probation, p->lru, i);
        list_remove(&g->entries, p->in_group, i);
        if (g->entries.n == 0) {
                group_unhash(p, e->group);
                *g = (Group){.hash_next = p->free_groups};
                p->free_groups = e->group;
        }
        *e = (Entry){};
}

static uint32_t group_get(Part *p, const char *prefix) {
        uint32_t i = group_find(p, prefix), *b;

        if (i)
                return i;
        if (p->free_groups) {
                i = p->free_groups;
                p->free_groups = p->g[i].hash_next;
        } else
                i = ++p->n_groups; /* live groups never outnumber live entries */
        b = &p->g_bucket[group_bucket(prefix)];
        p->g[i] = (Group){.hash_next = *b};
        snprintf(p->g[i].prefix, sizeof(p->g[i].prefix), "%s", prefix);
        *b = i;
        return i;
}

/* A client seen again: protected, the protected segment's oldest back on probation past its share. An
 * entry unused for longer than the memory lasts counts as new. */
static void entry_touch(Part *p, uint32_t i, usec_t now) {
        Entry *e = &p->e[i];
        bool protect = !expired(e, now);

        list_remove(e->protected ? &p->protected : &p->probation, p->lru, i);
        e->protected = protect;
        list_push(protect ? &p->protected : &p->probation, p->lru, i);
        if (p->protected.n > ALIAS_MEMORY_PROTECTED) {
                uint32_t old = p->protected.tail;
                list_remove(&p->protected, p->lru, old);
                p->e[old].protected = false;
                list_push(&p->probation, p->lru, old);
        }
        list_remove(&p->g[e->group].entries, p->in_group, i);
        list_push(&p->g[e->group].entries, p->in_group, i);
}

/* The slot for a new entry of prefix: the prefix's own oldest at its quota; else a free one; else the
 * oldest protected entry if forgotten by now, or the oldest on probation (never empty when full, as the
 * protected segment holds less than all) */
static uint32_t entry_slot(Part *p, const char *prefix, usec_t now) {
        uint32_t g = group_find(p, prefix), i;

        if (g && p->g[g].entries.n >= ALIAS_MEMORY_PER_PREFIX)
                i = p->g[g].entries.tail;
        else if (p->n_entries < ALIAS_MEMORY_ENTRIES)
                return ++p->n_entries;
        else if (p->protected.tail && expired(&p->e[p->protected.tail], now))
                i = p->protected.tail;
        else
                i = p->probation.tail;
        entry_evict(p, i);
        return i;
}

/* The client's name and prefix, cut as an entry holds them so that a longer one finds itself again */
static void client_names(const AliasClient *c, char who[static NAME_MAX_LEN], char *prefix) {
        assert(c->key || c->address);
        snprintf(who, NAME_MAX_LEN, "%s", c->key ?: c->address);
        if (prefix)
                snprintf(prefix, NAME_MAX_LEN, "%s", c->key ?: c->prefix ?: c->address);
}

ssize_t alias_memory_recall(const AliasMemory *m, const char *alias, const AliasClient *client, usec_t now) {
        assert(m);
        const Part *p = client->key ? &m->keyed : &m->anonymous;
        char who[NAME_MAX_LEN];
        uint32_t i;

        client_names(client, who, /* prefix= */ NULL);
        i = entry_find(p, hash(FNV_SEED, alias), who, client->session);
        return i && !expired(&p->e[i], now) ? p->e[i].target : -1;
}

void alias_memory_store(AliasMemory *m, const char *alias, const AliasClient *client, size_t target,
                        usec_t now) {
        assert(m);
        Part *p = client->key ? &m->keyed : &m->anonymous;
        char who[NAME_MAX_LEN], prefix[NAME_MAX_LEN];
        uint64_t a = hash(FNV_SEED, alias);
        uint32_t i, *b;

        client_names(client, who, prefix);
        i = entry_find(p, a, who, client->session);

        if (i) {
                entry_touch(p, i, now);
        } else {
                i = entry_slot(p, prefix, now);
                b = &p->e_bucket[entry_bucket(a, who, client->session)];
                p->e[i] = (Entry){.alias = a,
                                  .session = client->session,
                                  .hash_next = *b,
                                  .group = group_get(p, prefix)};
                snprintf(p->e[i].who, sizeof(p->e[i].who), "%s", who);
                *b = i;
                list_push(&p->probation, p->lru, i);
                list_push(&p->g[p->e[i].group].entries, p->in_group, i);
        }
        p->e[i].used = now;
        p->e[i].target = (uint16_t)target;
}

AliasMemory *alias_memory_new(void) {
        return calloc(1, sizeof(AliasMemory));
}

AliasMemory *alias_memory_free(AliasMemory *m) {
        free(m);
        return NULL;
}

/* only what was used: the pages a memory never filled stay untouched */
static void part_clear(Part *p) {
        memset(p->e, 0, (p->n_entries + 1) * sizeof(p->e[0]));
        memset(p->lru, 0, (p->n_entries + 1) * sizeof(p->lru[0]));
        memset(p->in_group, 0, (p->n_entries + 1) * sizeof(p->in_group[0]));
        memset(p->g, 0, (p->n_groups + 1) * sizeof(p->g[0]));
        memset(p->e_bucket, 0, sizeof(p->e_bucket));
        memset(p->g_bucket, 0, sizeof(p->g_bucket));
        p->probation = p->protected = (List){};
        p->n_entries = p->n_groups = p->free_groups = 0;
}

void alias_memory_clear(AliasMemory *m) {
        assert(m);
        part_clear(&m->keyed);
        part_clear(&m->anonymous);
}

size_t alias_memory_size(const AliasMemory *m) {
        assert(m);
        return m->keyed.probation.n + m->keyed.protected.n + m->anonymous.probation.n +
               m->anonymous.protected.n;
}
