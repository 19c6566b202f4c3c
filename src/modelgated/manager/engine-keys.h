/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* engine-keys.json in the state directory: the keys each engine served the
 * last time it ran, so that a stopped engine's keys still route after a
 * restart (rule:engine-for-key). One file for every host, so it belongs to whoever holds
 * every host: it is read for each host as the host is made, and written
 * whole whenever a host learns keys. */

#include <stddef.h>

typedef struct Host Host;

/* Hands h's catalog the keys the file remembers for h's engines. A missing file is no error; one that is
 * not a JSON object is logged and ignored. */
void engine_keys_load(Host *h);
/* Writes the keys of every engine of hosts; a failure is logged, and the keys still
 * route until a restart. */
void engine_keys_save(Host *const *hosts, size_t n_hosts);
