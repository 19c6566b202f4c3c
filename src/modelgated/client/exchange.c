/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The Exchange's life: made empty, and ended with everything the request still holds. Its storage is the
 * connection's, so that a request costs no allocation of its own. */

#include <assert.h>
#include <stddef.h>
#include <string.h>

#include "modelgated/client/request.h"
#include "modelgated/client/models.h"
#include "modelgated/client/streams.h"
#include "modelgated/upstream/upstream.h"

void request_init(Request *req, Client *client) {
        assert(x);
        /* up to usage only: what follows is written where it is first used (exchange.h) */
        memset(x, 0, offsetof(Exchange, usage));
        req->client = client;
        req->method = REQUEST_NO_METHOD;
        req->attempt.mode = MODE_PASS;
        req->activity.entry.owner = NULL;
}

void request_done(Request *req) {
        /* first: the record points at the names freed below, and releasing the host may show the activity */
        if (req->activity.entry.owner) /* a request that never logged its end */
                activity_request_forget(&req->activity.entry);
        access_wait_cancel(&req->access_wait); /* before the configuration it points into */
        free(req->model);
        config_unref(req->config);
        sd_event_source_disable_unref(req->attempt.budget);
        sd_event_source_disable_unref(req->answer.keepalive);
        upstream_cancel(req->attempt.upstream);
        host_release(&req->attempt.waiter);
        buffer_done(&req->attempt.pending);
        models_merge_free(req->own.merge);
        sd_event_source_disable_unref(req->own.health_wait);
        stream_lookup_free(req->stream.lookup);
        free(req->stream.conv_id);
        free(req->stream.conv_host_id);
        sse_filter_done(&req->attempt.sse);
        buffer_done(&req->attempt.held);
        request_init(x, req->client);
}

const char *request_method_name(const Request *req) {
        assert(x);
        if (req->method == REQUEST_NO_METHOD)
                return NULL;
        if (req->method == REQUEST_METHOD_UNPARSED)
                return "-";
        return llhttp_method_name(req->method);
}
