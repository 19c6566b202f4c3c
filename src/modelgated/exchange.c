/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The Exchange's life: made empty, and freed with everything the request still holds. */

#include <stdlib.h>

#include "modelgated/exchange.h"
#include "modelgated/models.h"
#include "modelgated/upstream.h"

Exchange *exchange_new(Client *client) {
        Exchange *x = calloc(1, sizeof(Exchange));

        if (!x)
                return NULL;
        x->client = client;
        x->mode = MODE_PASS;
        return x;
}

Exchange *exchange_free(Exchange *x) {
        if (!x)
                return NULL;
        free(x->method);
        free(x->path);
        free(x->model);
        free(x->user_agent);
        config_unref(x->config);
        sd_event_source_disable_unref(x->budget);
        sd_event_source_disable_unref(x->keepalive);
        upstream_cancel(x->upstream);
        host_release(&x->waiter);
        buffer_done(&x->pending);
        models_merge_free(x->merge);
        sse_filter_done(&x->sse);
        buffer_done(&x->held);
        return mfree(x);
}
