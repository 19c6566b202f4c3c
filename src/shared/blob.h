/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Immutable bytes with a reference count: one answer that several connections send, each from its own
 * offset, without a copy each. */

#include <stddef.h>

#include "shared/macro.h"

typedef struct Blob {
        unsigned n_ref;
        size_t size;
        char data[];
} Blob;

/* A new blob with a copy of n bytes at p; NULL when out of memory. */
Blob *blob_new(const void *p, size_t n);
Blob *blob_ref(Blob *b);
Blob *blob_unref(Blob *b);
DEFINE_TRIVIAL_CLEANUP_FUNC(Blob *, blob_unref);
