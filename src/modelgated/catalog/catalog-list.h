/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* A host's /models answer as the catalog keeps it: its entries, each as its own text (the host's bytes,
 * or json-c's once a status event changed it), found by id through a hash, with the ids and aliases a
 * request's key is looked up in. It is read as it arrives (catalog_list_read()), one entry at a time, so
 * that each read of the host costs its own bytes and never the whole list again, and a list longer than
 * its bounds is refused as soon as it is. A status event re-reads and re-writes the one entry it names
 * (catalog_list_apply()); one for an entry not read yet is kept, the last per model, and applied when
 * that entry comes. Pure: no I/O, no logging. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "modelgated/catalog/catalog-event.h"
#include "shared/macro.h"

typedef struct CatalogList CatalogList;

/* An empty list, to be read: at most max_entries entries and max_bytes bytes of answer. */
int catalog_list_new(size_t max_entries, size_t max_bytes, CatalogList **ret);
CatalogList *catalog_list_free(CatalogList *l);
DEFINE_TRIVIAL_CLEANUP_FUNC(CatalogList *, catalog_list_free);

/* The next n bytes of the answer. 0; -EBADMSG: it is not a model list ({"data":[…], …} with nothing after
 * it); -E2BIG: it has more than max_entries entries or max_bytes bytes; -ENOMEM. After an error, every
 * later call returns the same error and reads nothing. */
int catalog_list_read(CatalogList *l, const char *p, size_t n);
/* The answer has ended: 0 when it was a whole model list, else as catalog_list_read(). What was kept for
 * entries that never came is dropped. */
int catalog_list_read_end(CatalogList *l);
/* catalog_list_new(), catalog_list_read() and catalog_list_read_end() in one. */
int catalog_list_parse(const char *body, size_t n, size_t max_entries, size_t max_bytes, CatalogList **ret);

/* The entries with a string "id" (the others are read and dropped, as a listing leaves them out) */
size_t catalog_list_size(const CatalogList *l);
/* Entry i as JSON text (not NUL-terminated) */
const char *catalog_list_entry(const CatalogList *l, size_t i, size_t *ret_len);
const char *catalog_list_id(const CatalogList *l, size_t i);
/* Whether entry i's status.value is "loading" */
bool catalog_list_loading(const CatalogList *l, size_t i);
/* Whether entry i has a status.value other than "loaded" (a router lists every model with one; a plain
 * llama-server lists its one model with none: always serving) */
bool catalog_list_cold(const CatalogList *l, size_t i);
/* The first entry whose id is id, or -1 */
ssize_t catalog_list_find(const CatalogList *l, const char *id);
/* Whether key is an entry's id or one of its aliases */
bool catalog_list_has(const CatalogList *l, const char *key);
/* The ids in order, NULL-terminated; NULL when out of memory */
char **catalog_list_ids(const CatalogList *l);
/* The same entries, byte for byte, in the same order */
bool catalog_list_equal(const CatalogList *a, const CatalogList *b);

/* Applies s (catalog_status_apply_entry()) to the first entry whose id is s->key: that entry's text is
 * parsed and written again, and nothing else. 1: changed; 0: no such entry, or nothing changed; -ENOMEM.
 * While the list is being read, an entry not read yet gets s when it comes (0 now): the last event per
 * model is kept, at most max_entries of them; -ENOBUFS when there is no room for another model. */
int catalog_list_apply(CatalogList *l, const CatalogStatus *s);
/* How many entry texts catalog_list_apply() parsed since the list was made (for tests: one per applied
 * event, whatever the list's length) */
uint64_t catalog_list_entry_parses(const CatalogList *l);
