/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Sessions (rule:sessions): the header that names a request's session, the id's checks, hash and label,
 * and the bounded table the views read. */

#include <arpa/inet.h>
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "modelgated/sched/session.h"
#include "shared/keys-file.h"

/* Claude Code, opencode (two), Codex (0.171 sends session-id; older ones session_id) */
const char *const session_headers_default[] = {
        "X-Claude-Code-Session-Id", "X-Session-Id", "x-session-affinity", "session-id", "session_id", NULL,
};

bool session_id_valid(Span id) {
        if (!id.p || id.n == 0 || id.n > SESSION_ID_MAX)
                return false;
        for (size_t i = 0; i < id.n; i++)
                if (!http_is_tchar((unsigned char)id.p[i]))
                        return false;
        return true;
}

Span session_id_of(const HttpRequest *r, char *const *names) {
        assert(r);
        uint32_t firsts = 0;

        if (!names || !names[0])
                return (Span){};
        /* the headers' first letters, as bits (a letter and its capital differ in bit 5 only): a name whose
         * first letter is none of them is passed over without a look at a header, as a rule all of them */
        for (size_t i = 0; i < r->n_headers; i++)
                if (r->headers[i].name_len > 0)
                        firsts |= UINT32_C(1) << (http_header_name(r, i).p[0] & 31);
        /* the earliest name wins, in the first header of that name */
        for (size_t k = 0; names[k]; k++) {
                if (!(firsts & (UINT32_C(1) << (names[k][0] & 31))))
                        continue;
                size_t l = strlen(names[k]);
                for (size_t i = 0; i < r->n_headers; i++) {
                        Span name = http_header_name(r, i);
                        if (name.n == l && strncasecmp(name.p, names[k], l) == 0) {
                                Span v = http_header_value(r, i);
                                return session_id_valid(v) ? v : (Span){};
                        }
                }
        }
        return (Span){};
}

#define FNV_SEED UINT64_C(14695981039346656037)
#define FNV_PRIME UINT64_C(1099511628211)

static uint64_t fnv(uint64_t h, const char *p, size_t n) {
        for (size_t i = 0; i < n; i++)
                h = (h ^ (uint8_t)p[i]) * FNV_PRIME;
        return h;
}

uint64_t session_id_hash(Span id) {
        uint64_t h = fnv(FNV_SEED, id.p ?: "", id.n);
        return h ?: 1;
}

int session_label(Span id, char ret[static SESSION_LABEL_LEN + 1]) {
        uint8_t d[SHA256_DIGEST_SIZE];
        static const char hex[] = "0123456789abcdef";

        if (sha256(id.p ?: "", id.n, d) < 0) {
                snprintf(ret, SESSION_LABEL_LEN + 1, "?");
                return -EIO;
        }
        for (size_t i = 0; i < SESSION_LABEL_LEN / 2; i++) {
                ret[2 * i] = hex[d[i] >> 4];
                ret[2 * i + 1] = hex[d[i] & 15];
        }
        ret[SESSION_LABEL_LEN] = 0;
        return 0;
}

/* The table: two parts of fixed slots, taken once so that a request never allocates for it. A part is
 * small enough to be searched from end to end: its slots' keys (the caller's name and the id's hash
 * mixed) lie side by side, so a search is a few hundred compares of one word, cheaper than a request's
 * headers. */
#define NAME_MAX_LEN (INET6_ADDRSTRLEN + 8) /* an address, a /64, a key's digest */

typedef struct Slot {
        char who[NAME_MAX_LEN], prefix[NAME_MAX_LEN];
        uint64_t hash; /* the id's */
        Session s;
} Slot;

typedef struct Part {
        uint64_t keys[SESSION_TABLE_ENTRIES]; /* 0: empty */
        Slot slots[SESSION_TABLE_ENTRIES];
} Part;

struct SessionTable {
        Part keyed, anonymous;
};

SessionTable *session_table_new(void) {
        return calloc(1, sizeof(SessionTable));
}

SessionTable *session_table_free(SessionTable *t) {
        free(t);
        return NULL;
}

static Part *part_of(SessionTable *t, const AliasClient *who) {
        return who->key ? &t->keyed : &t->anonymous;
}

/* The caller's name and the prefix it counts against, cut as a slot holds them */
static void who_names(const AliasClient *who, char name[static NAME_MAX_LEN],
                      char prefix[static NAME_MAX_LEN]) {
        assert(who->key || who->address);
        snprintf(name, NAME_MAX_LEN, "%s", who->key ?: who->address);
        snprintf(prefix, NAME_MAX_LEN, "%s", who->key ?: who->prefix ?: who->address);
}

static uint64_t slot_key(const char *name, uint64_t hash) {
        uint64_t k = fnv(FNV_SEED, name, strlen(name)) ^ hash;
        return k ?: 1;
}

static bool forgotten(const Session *s, usec_t now) {
        return s->in_flight == 0 && now >= s->last + SESSION_TABLE_USEC;
}

static ssize_t part_find(const Part *p, const char *name, uint64_t hash) {
        uint64_t k = slot_key(name, hash);

        for (size_t i = 0; i < SESSION_TABLE_ENTRIES; i++)
                if (p->keys[i] == k && p->slots[i].hash == hash && streq(p->slots[i].who, name))
                        return (ssize_t)i;
        return -1;
}

Session *session_table_find(SessionTable *t, const AliasClient *who, uint64_t hash, usec_t now) {
        assert(t && who);
        Part *p = part_of(t, who);
        char name[NAME_MAX_LEN], prefix[NAME_MAX_LEN];

        who_names(who, name, prefix);
        ssize_t i = part_find(p, name, hash);
        return i >= 0 && !forgotten(&p->slots[i].s, now) ? &p->slots[i].s : NULL;
}

/* Whether slot a should go before slot b: one with nothing in flight before one with, then the older */
static bool evict_before(const Session *a, const Session *b) {
        if ((a->in_flight == 0) != (b->in_flight == 0))
                return a->in_flight == 0;
        return a->last < b->last;
}

/* The room for a new session of prefix: the caller's own oldest once it holds its share; else an empty
 * or forgotten slot; else the part's oldest (one with nothing in flight first) */
static size_t part_room(const Part *p, const char *prefix, usec_t now) {
        ssize_t free_slot = -1, oldest = -1, own_oldest = -1;
        unsigned own = 0;

        for (size_t i = 0; i < SESSION_TABLE_ENTRIES; i++) {
                const Slot *s = &p->slots[i];
                if (p->keys[i] == 0 || forgotten(&s->s, now)) {
                        if (free_slot < 0)
                                free_slot = (ssize_t)i;
                        continue;
                }
                if (oldest < 0 || evict_before(&s->s, &p->slots[oldest].s))
                        oldest = (ssize_t)i;
                if (streq(s->prefix, prefix)) {
                        own++;
                        if (own_oldest < 0 || evict_before(&s->s, &p->slots[own_oldest].s))
                                own_oldest = (ssize_t)i;
                }
        }
        if (own >= SESSION_TABLE_PER_CALLER)
                return (size_t)own_oldest;
        return (size_t)(free_slot >= 0 ? free_slot : oldest);
}

Session *session_table_get(SessionTable *t, const AliasClient *who, uint64_t hash, const char *label,
                           usec_t now) {
        assert(t && who && label);
        Part *p = part_of(t, who);
        char name[NAME_MAX_LEN], prefix[NAME_MAX_LEN];

        who_names(who, name, prefix);
        ssize_t i = part_find(p, name, hash);
        if (i >= 0 && !forgotten(&p->slots[i].s, now))
                return &p->slots[i].s;
        if (i < 0)
                i = (ssize_t)part_room(p, prefix, now);
        Slot *s = &p->slots[i];
        *s = (Slot){.hash = hash};
        memcpy(s->who, name, sizeof(s->who));
        memcpy(s->prefix, prefix, sizeof(s->prefix));
        snprintf(s->s.label, sizeof(s->s.label), "%s", label);
        s->s.first = s->s.last = now;
        p->keys[i] = slot_key(name, hash);
        return &s->s;
}

static int by_last_desc(const void *a, const void *b) {
        const Session *x = *(const Session *const *)a, *y = *(const Session *const *)b;
        return x->last < y->last ? 1 : x->last > y->last ? -1 : 0;
}

size_t session_table_list(SessionTable *t, usec_t now, const Session **ret, size_t max) {
        assert(t);
        const Session *all[2 * SESSION_TABLE_ENTRIES];
        size_t n = 0;

        Part *parts[] = {&t->keyed, &t->anonymous};

        for (size_t k = 0; k < ELEMENTSOF(parts); k++)
                for (size_t i = 0; i < SESSION_TABLE_ENTRIES; i++)
                        if (parts[k]->keys[i] != 0 && !forgotten(&parts[k]->slots[i].s, now))
                                all[n++] = &parts[k]->slots[i].s;
        qsort(all, n, sizeof(all[0]), by_last_desc);
        n = MIN(n, max);
        memcpy(ret, all, n * sizeof(all[0]));
        return n;
}
