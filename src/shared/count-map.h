/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* How many connections each client address has open, for MaxConnectionsPerAddress=: a hash table of
 * address strings (IPv6 per /64, as access_client_address() gives them). No I/O, no logging. */

#include <stddef.h>

typedef struct AddressCount AddressCount;

AddressCount *address_count_free(AddressCount *t);
/* Adds one connection of address; returns how many it has now, or 0 when out of memory. The table is
 * made on first use (*t may be NULL). */
size_t address_count_add(AddressCount **t, const char *address);
/* Removes one connection of address (that was added). */
void address_count_remove(AddressCount *t, const char *address);
