/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The Exchange's life: made empty, and ended with everything the request still holds. Its storage is the
 * connection's, so that a request costs no allocation of its own. */

#include <assert.h>
#include <stddef.h>
#include <string.h>

#include "modelgated/client/exchange.h"
#include "modelgated/client/models.h"
#include "modelgated/client/streams.h"
#include "modelgated/upstream/upstream.h"

void exchange_init(Exchange *x, Client *client) {
        assert(x);
        /* up to usage only: what follows is written where it is first used (exchange.h) */
        memset(x, 0, offsetof(Exchange, usage));
        x->client = client;
        x->method = EXCHANGE_NO_METHOD;
        x->mode = MODE_PASS;
        x->activity.owner = NULL;
}

void exchange_done(Exchange *x) {
        /* first: the record points at the names freed below, and releasing the host may show the activity */
        if (x->activity.owner) /* a request that never logged its end */
                activity_request_forget(&x->activity);
        access_wait_cancel(&x->access_wait); /* before the configuration it points into */
        free(x->model);
        config_unref(x->config);
        sd_event_source_disable_unref(x->budget);
        sd_event_source_disable_unref(x->keepalive);
        upstream_cancel(x->upstream);
        host_release(&x->waiter);
        buffer_done(&x->pending);
        models_merge_free(x->merge);
        sd_event_source_disable_unref(x->health_wait);
        stream_lookup_free(x->lookup);
        free(x->conv_id);
        free(x->conv_host_id);
        sse_filter_done(&x->sse);
        buffer_done(&x->held);
        exchange_init(x, x->client);
}

const char *exchange_method_name(const Exchange *x) {
        assert(x);
        if (x->method == EXCHANGE_NO_METHOD)
                return NULL;
        if (x->method == EXCHANGE_METHOD_UNPARSED)
                return "-";
        return llhttp_method_name(x->method);
}
