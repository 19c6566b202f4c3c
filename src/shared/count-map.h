/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Counts by name: a hash table of strings (open addressing, tombstones for removal), for what a peer
 * can make many of (connections per address, requests per key or address a day). No I/O, no logging. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct CountMap CountMap;

CountMap *count_map_free(CountMap *m);
/* The count of name; with create, made at 0 when absent (the map itself too, *m may be NULL). NULL when
 * absent, or out of memory. The pointer holds until the next change of the map. */
uint64_t *count_map_get(CountMap **m, const char *name, bool create);
/* Forgets name. */
void count_map_remove(CountMap *m, const char *name);
size_t count_map_size(const CountMap *m);
/* Iteration: *i starts at 0; false at the end. */
bool count_map_next(const CountMap *m, size_t *i, const char **ret_name, uint64_t *ret_n);
