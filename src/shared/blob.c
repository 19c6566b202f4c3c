/* SPDX-License-Identifier: LGPL-2.1-or-later */

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "shared/blob.h"

Blob *blob_new(const void *p, size_t n) {
        assert(p);
        Blob *b = malloc(sizeof(Blob) + n);

        if (!b)
                return NULL;
        b->n_ref = 1;
        b->size = n;
        memcpy(b->data, p, n);
        return b;
}

Blob *blob_ref(Blob *b) {
        assert(b);
        if (b)
                b->n_ref++;
        return b;
}

Blob *blob_unref(Blob *b) {
        if (b && --b->n_ref == 0)
                free(b);
        return NULL;
}
