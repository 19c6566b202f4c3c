/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The Request's life and its Attempt's: made empty, and ended with everything they still hold. The
 * Request's storage is the connection's, so that a request costs no allocation of its own. */

#include <assert.h>
#include <stddef.h>
#include <string.h>

#include "modelgated/client/models.h"
#include "modelgated/client/request.h"
#include "modelgated/client/streams.h"
#include "modelgated/upstream/upstream.h"

void attempt_done(Attempt *a) {
        assert(a);
        a->upstream = upstream_cancel(a->upstream);
        host_release(&a->waiter);
        a->budget = sd_event_source_disable_unref(a->budget);
        buffer_done(&a->pending);
        sse_filter_done(&a->sse);
        buffer_done(&a->held);
        /* target, engine and via_fallback stay: they name the last target tried, for the record, until
         * the next attempt names its own */
        a->awaiting_first_token = false;
        a->first_byte_seen = false;
        a->held_framing = NULL;
        a->mode = MODE_PASS;
        a->error_status = 0;
}

void request_init(Request *req, Client *client) {
        assert(req);
        /* up to the parts that are not emptied whole (request.h); but an SSE error's text (a quarter of the
         * bytes) is only made an empty string: sse_filter_init() writes it whole when a stream begins */
        size_t hole = offsetof(Request, attempt.sse.upstream_error),
               after = hole + sizeof(req->attempt.sse.upstream_error);
        memset(req, 0, hole);
        req->attempt.sse.upstream_error[0] = '\0';
        memset((char *)req + after, 0, offsetof(Request, usage) - after);
        req->client = client;
        req->method = REQUEST_NO_METHOD;
        req->attempt.mode = MODE_PASS;
        req->usage.on = req->usage.body = req->usage.owed = false;
        req->id.span = (Span){};
        req->session.id = (Span){};
        req->session.hash = 0;
        req->activity.entry.owner = NULL;
        req->activity.shown_host = NULL;
}

void request_done(Request *req) {
        assert(req);
        /* first: the record points at the names freed below, and releasing the host may show the activity */
        if (req->activity.entry.owner) /* a request that never logged its end */
                activity_request_forget(&req->activity.entry);
        access_wait_cancel(&req->access_wait); /* before the configuration it points into */
        attempt_done(&req->attempt);
        sd_event_source_disable_unref(req->answer.keepalive);
        models_merge_free(req->own.merge);
        sd_event_source_disable_unref(req->own.health_wait);
        stream_lookup_free(req->stream.lookup);
        free(req->stream.conv_id);
        free(req->stream.conv_host_id);
        free(req->model);
        config_unref(req->config);
        request_init(req, req->client);
}

const char *request_method_name(const Request *req) {
        assert(req);
        if (req->method == REQUEST_NO_METHOD)
                return NULL;
        if (req->method == REQUEST_METHOD_UNPARSED)
                return "-";
        return llhttp_method_name(req->method);
}
