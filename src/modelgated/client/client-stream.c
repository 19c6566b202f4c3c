/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Resumable streams (rule:resumable-streams). A request with X-Conversation-Id is remembered with the host
 * and engine that served it and its owner (the key, or the address of a client without one); the host
 * gets the id under its owner's mark, never as the client sent it, so that no id of one owner names a
 * session of another there. GET and DELETE /v1/stream?conv_id= go to that engine with a query of
 * modelgate's own (its router finds the session by the id, no model is needed), POST /v1/streams/lookup
 * asks each host for its own ids and merges the answers, and an id that is unknown, or another owner's,
 * gets llama-server's router's own answer for an id it does not know. A client that leaves such a stream
 * leaves the engine producing it into the session's buffer: the rest of it is read here to its end, in
 * flight on the host meanwhile, so that no switch stops the engine under a session that a client is about
 * to resume. */

#include "modelgated/client/client-internal.h"
#include "modelgated/client/streams.h"
#include "modelgated/api/conversation.h"
#include "modelgated/api/route.h"
#include "shared/strv.h"

/* A host answers a lookup from its memory: one that takes longer is left out of the answer, as the
 * router leaves out a child that does not answer in 250 ms; ours are further away */
#define LOOKUP_TIMEOUT_USEC (2 * USEC_PER_SEC)
#define LOOKUP_BODY_MAX (1024 * 1024)

/* Whose the caller's conversations are: its key, or its address as the caps count it */
static const char *caller_owner(const Client *c, char buf[static 80]) {
        return access_caller_name(&c->req->caller, c->peer, buf);
}

bool client_stream_remember(Client *c, const HttpRequest *r, const char *engine) {
        Span id = http_request_header(r, "X-Conversation-Id");
        _cleanup_free_ char *cid = NULL;
        char owner[80];

        /* an alias's next target remembers it anew */
        c->req->stream.conv_id = mfree(c->req->stream.conv_id);
        c->req->stream.conv_host_id = mfree(c->req->stream.conv_host_id);
        /* an id not worth remembering goes no further: a session under it could not be found again */
        if (!conv_id_valid(id.p, id.n))
                return true;
        cid = strndup(id.p, id.n);
        if (cid)
                c->req->stream.conv_host_id = conv_host_id(caller_owner(c, owner), cid);
        if (!c->req->stream.conv_host_id)
                return false;
        /* only a generating request makes a session on the host: a header on a token count leaves it as
         * it is (under the owner's mark all the same: on a router the id names the model it served) */
        if (!path_route_keeps_stream(c->req->route, r->method))
                return true;
        /* out of memory: it goes on, not resumable here */
        if (manager_conv_remember(c->manager, owner, cid, c->req->host->name, engine) >= 0)
                c->req->stream.conv_id = TAKE_PTR(cid);
        return true;
}

void client_stream_touch(Client *c) {
        char owner[80];

        if (c->req->stream.conv_id)
                manager_conv_touch(c->manager, caller_owner(c, owner), c->req->stream.conv_id);
}

typedef struct ConvTarget {
        const HostConf *conf;
        Host *host;
        ssize_t engine; /* -1: a host without engines */
} ConvTarget;

/* Where the conversation id lives, for this caller: false for an id never routed, expired, another
 * owner's, or on a host or engine that a reload removed. All of them are "not found" to the client. */
static bool conv_target(Client *c, const char *id, ConvTarget *ret) {
        char owner[80];
        const ConvEntry *e = manager_conv_find(c->manager, caller_owner(c, owner), id);

        if (!e)
                return false;
        if (!c->req->config)
                c->req->config = config_ref(manager_config(c->manager));
        *ret = (ConvTarget){.conf = config_find_host(c->req->config, e->host), .engine = -1};
        ret->host = ret->conf ? manager_host(c->manager, ret->conf) : NULL;
        if (!ret->host)
                return false;
        if (!host_has_engines(ret->host))
                return !*e->engine;
        for (size_t i = 0; i < host_n_engines(ret->host); i++)
                if (streq(host_engine(ret->host, i)->conf->name, e->engine))
                        ret->engine = (ssize_t)i;
        return ret->engine >= 0;
}

static const HttpUrl *target_url(const ConvTarget *t) {
        return t->engine >= 0 ? host_engine(t->host, (size_t)t->engine)->url : &t->conf->url;
}

/* DELETE of an id the router does not know is its 204 too: a stop is idempotent */
static void respond_204(Client *c) {
        c->req->answer.status = 204;
        if (client_queue_head(c, 204, "") < 0)
                c->close_after_response = true;
        c->req->answer.bytes = 0;
        client_response_complete(c, NULL);
}

/* The table's row in the shape of llama-server's router, which is what a client of the server's resumable
 * streams (its WebUI) reads: "code" is the status, as a number */
static void stream_answer(Client *c, Answer a) {
        const AnswerRow *row = answer_row(a);
        _cleanup_free_ char *j = NULL;
        int n;

        n = asprintf(&j, "{\"error\":{\"message\":\"%s\",\"type\":\"%s\",\"code\":%d}}", row->format,
                     row->status == 404 ? "not_found_error" : "invalid_request_error", row->status);
        if (n < 0)
                return client_answer(c, ANSWER_OUT_OF_MEMORY);
        client_respond(c, row->status, "application/json; charset=utf-8", j, (size_t)n, NULL);
}

static void answer_unknown(Client *c, bool get) {
        if (get)
                stream_answer(c, ANSWER_STREAM_NOT_FOUND);
        else
                respond_204(c);
}

/* A caller over its cap is refused these as any request; they are not counted, as they go on with a
 * request that was */
static bool stream_within_cap(Client *c) {
        Access *access = manager_access(c->manager);
        AccessDenial d;

        if (!c->req->caller.admitted || !access ||
            access_check(access, c->req->config, &c->req->caller, c->peer, &d) != ACCESS_OVER_CAP)
                return true;
        client_answer_message(c, d.answer, /* status= */ 0, d.retry_after, d.message);
        return false;
}

/* GET /v1/stream (a resume, from=N bytes into the session) or DELETE (a stop) to the engine that holds
 * the session: in flight there while it lasts, never a reason to start or switch an engine. The query the
 * host gets is modelgate's own: the id under its owner's mark, and a resume's offset. */
static void stream_forward(Client *c, Span url, bool get) {
        _cleanup_free_ char *id = NULL, *from = NULL, *host_id = NULL, *own_url = NULL;
        HostRefusal refusal;
        ConvTarget t;
        Span span;
        int k;

        if (!stream_within_cap(c))
                return;
        k = query_find_param(url, "conv_id", &span, &id);
        if (k == -ENOMEM)
                return client_answer(c, ANSWER_OUT_OF_MEMORY);
        if (k != MODEL_FOUND || !*id)
                return stream_answer(c, ANSWER_STREAM_NO_CONV_ID);
        if (!conv_target(c, id, &t))
                return answer_unknown(c, get);
        k = get ? query_find_param(url, "from", &span, &from) : MODEL_ABSENT;
        if (k == -ENOMEM)
                return client_answer(c, ANSWER_OUT_OF_MEMORY);
        if (k != MODEL_ABSENT && (k != MODEL_FOUND || !conv_from_valid(from)))
                return stream_answer(c, ANSWER_STREAM_BAD_FROM);
        char owner[80];
        host_id = conv_host_id(caller_owner(c, owner), id);
        own_url = host_id ? conv_stream_url(host_id, k == MODEL_FOUND ? from : NULL) : NULL;
        if (!own_url)
                return client_answer(c, ANSWER_OUT_OF_MEMORY);
        c->req->host = t.conf;
        c->req->attempt.target = target_url(&t);
        c->req->attempt.engine_name =
                t.engine >= 0 ? host_engine(t.host, (size_t)t.engine)->conf->name : NULL;
        c->req->ask.stream = get;
        if (client_build_request(c, c->req->attempt.target, (Span){own_url, strlen(own_url)}, (Span){"", 0},
                                 (Span){}, NULL, (Span){}, &c->req->attempt.pending) < 0)
                return client_answer(c, ANSWER_OUT_OF_MEMORY);
        HostAcquire a = t.engine >= 0 ? host_join(t.host, (size_t)t.engine, &c->req->attempt.waiter,
                                                  client_host_went_down, NULL, &refusal)
                                      : host_attach(t.host, &c->req->attempt.waiter, client_host_went_down,
                                                    NULL, &refusal);
        if (a == HOST_REFUSED) {
                /* the engine that held the session is not up: the session went with it */
                if (refusal.status == 404)
                        return answer_unknown(c, get);
                (void)client_attempt_failed(c, attempt_failure_of_refusal(refusal.status), refusal.status,
                                            refusal.message);
                return;
        }
        manager_conv_touch(c->manager, owner, id);
        client_go(c);
}
/* One host's part of a lookup */
typedef struct LookupPart {
        StreamLookup *lookup;
        ConvTarget target;
        char **ids;
        Upstream *upstream;
        Buffer body;
        int status;
} LookupPart;

struct StreamLookup {
        Client *client;
        LookupPart *parts;
        size_t n_parts, n_pending;
        json_object *merged;
        char prefix[CONV_HOST_PREFIX_LEN + 1]; /* the caller's mark on its ids at the hosts */
};

StreamLookup *stream_lookup_free(StreamLookup *l) {
        if (!l)
                return NULL;
        for (size_t i = 0; i < l->n_parts; i++) {
                upstream_cancel(l->parts[i].upstream);
                strv_free(l->parts[i].ids);
                buffer_done(&l->parts[i].body);
        }
        free(l->parts);
        json_object_put(l->merged);
        return mfree(l);
}

static void lookup_respond(Client *c, StreamLookup *l) {
        _cleanup_free_ char *j = NULL;
        size_t n = 0;

        j = json_to_string_dup(l->merged, JSON_C_TO_STRING_PLAIN, &n);
        if (!j)
                return client_answer(c, ANSWER_OUT_OF_MEMORY);
        /* llama-server's router's type, for a client that compares */
        client_respond(c, 200, "application/json; charset=utf-8", j, n, NULL);
}

/* A part is over: the answer goes out with the last. l may be freed on the way (the answer ends the
 * request), so nothing of it is touched after. */
static void lookup_part_done(LookupPart *p) {
        StreamLookup *l = p->lookup;
        p->upstream = NULL;
        if (--l->n_pending > 0)
                return;
        _cleanup_(client_unrefp) Client *c = client_ref(l->client);
        lookup_respond(c, l);
        client_flush(c);
        client_process(c);
}

static int lookup_headers(Upstream *u, const UpstreamResponse *resp, void *userdata) {
        LookupPart *p = userdata;
        p->status = resp->status;
        return resp->status == 200 ? 0 : -1; /* a host that cannot say is left out */
}

static int lookup_body(Upstream *u, const char *d, size_t n, void *userdata) {
        LookupPart *p = userdata;
        if (buffer_size(&p->body) + n > LOOKUP_BODY_MAX)
                return -1;
        return buffer_append(&p->body, d, n) < 0 ? -1 : 0;
}

static void lookup_complete(Upstream *u, void *userdata) {
        LookupPart *p = userdata;
        /* an answer that is not an array of sessions adds nothing */
        (void)conv_lookup_merge(p->lookup->merged, buffer_peek(&p->body), buffer_size(&p->body),
                                p->lookup->prefix, p->ids);
        lookup_part_done(p);
}

static void lookup_error(Upstream *u, int error, bool started, void *userdata) {
        LookupPart *p = userdata;
        _cleanup_free_ char *e = log_escape_dup(p->target.conf->name);
        log_notice("host %s: its part of a stream lookup is left out: %s", strna(e),
                   p->status > 0 && p->status != 200 ? "it did not answer 200" : upstream_strerror(error));
        lookup_part_done(p);
}

static const UpstreamCallbacks lookup_callbacks = {
        .on_headers = lookup_headers,
        .on_body = lookup_body,
        .on_complete = lookup_complete,
        .on_error = lookup_error,
};

/* The ids, grouped by the engine that holds them; ids unknown to this caller are in none. -ENOMEM */
static int lookup_group(Client *c, StreamLookup *l, char *const *ids) {
        size_t n = strv_length(ids);
        char owner[80];
        ConvTarget t;

        l->parts = calloc(MAX(n, (size_t)1), sizeof(LookupPart));
        if (!l->parts)
                return -ENOMEM;
        STRV_FOREACH (id, ids) {
                LookupPart *p = NULL;
                if (!conv_target(c, *id, &t))
                        continue;
                /* an engine that is not up holds no session any more */
                if (t.engine >= 0 && host_engine_up(t.host) != t.engine)
                        continue;
                for (size_t i = 0; i < l->n_parts && !p; i++)
                        if (l->parts[i].target.host == t.host && l->parts[i].target.engine == t.engine)
                                p = &l->parts[i];
                if (!p) {
                        p = &l->parts[l->n_parts++];
                        *p = (LookupPart){.lookup = l, .target = t};
                }
                if (strv_extend(&p->ids, *id) < 0)
                        return -ENOMEM;
                manager_conv_touch(c->manager, caller_owner(c, owner), *id);
        }
        return 0;
}

static int lookup_send(Client *c, LookupPart *p) {
        const HttpUrl *url = target_url(&p->target);
        _cleanup_(buffer_done) Buffer req = {};
        _cleanup_free_ char *body = NULL;
        size_t n = 0;
        int k;

        body = conv_lookup_body(p->lookup->prefix, p->ids, &n);
        if (!body)
                return -ENOMEM;
        static const char path[] = "/v1/streams/lookup";
        if (http_write_request_line(&req, "POST", url->base_path, path, sizeof(path) - 1, url->authority) <
                    0 ||
            buffer_append_str(&req, "Content-Type: application/json\r\n") < 0 ||
            http_write_content_length(&req, n) < 0 || buffer_append_str(&req, "\r\n") < 0 ||
            buffer_append(&req, body, n) < 0)
                return -ENOMEM;
        k = upstream_start(manager_pool(c->manager), url, &req, false, &lookup_callbacks, p, &p->upstream);
        if (k < 0)
                return k;
        /* it only reads: a pooled connection the host closed meanwhile is no reason to leave it out */
        upstream_set_idempotent(p->upstream);
        (void)upstream_set_deadline(p->upstream, LOOKUP_TIMEOUT_USEC);
        return 0;
}

static void stream_lookup_go(Client *c) {
        HttpRequest *r = &c->parser.req;
        _cleanup_strv_free_ char **ids = NULL;
        StreamLookup *l;
        char owner[80];

        if (conv_lookup_ids(buffer_peek(&r->body), buffer_size(&r->body), &ids) < 0)
                return client_answer(c, ANSWER_OUT_OF_MEMORY);
        l = c->req->stream.lookup = calloc(1, sizeof(StreamLookup));
        if (!l || conv_host_prefix(caller_owner(c, owner), l->prefix) < 0 ||
            !(l->merged = json_object_new_array()) || lookup_group(c, l, ids) < 0)
                return client_answer(c, ANSWER_OUT_OF_MEMORY);
        l->client = c;
        /* one more than the parts, this loop's own: no answer goes out before every part is sent */
        l->n_pending = l->n_parts + 1;
        for (size_t i = 0; i < l->n_parts; i++)
                if (lookup_send(c, &l->parts[i]) < 0)
                        l->n_pending--; /* left out, as a host that does not answer */
        /* with no part (none of the ids is this caller's on an engine that is up), the router's answer to
         * ids it does not know: [] */
        if (--l->n_pending == 0)
                lookup_respond(c, l);
}

/* rule:shared-counts: Redis counted the lookup (or refused it) */
static void lookup_admitted(AccessWait *w, int verdict, const AccessDenial *d) {
        _cleanup_(client_unrefp) Client *c = client_ref(container_of(w, Request, access_wait)->client);

        if (verdict == ACCESS_OVER_CAP)
                client_answer_message(c, d->answer, /* status= */ 0, d->retry_after, d->message);
        else
                stream_lookup_go(c);
        client_flush(c);
        client_process(c);
}

/* A lookup is a request of the caller's day (rule:daily-cap), whatever it finds: every id it names costs
 * the hosts a look */
static void stream_lookup(Client *c) {
        Access *access = manager_access(c->manager);
        AccessDenial d;
        int k;

        /* a body that came whole with its head was not held against the bound on the way */
        if (buffer_size(&c->parser.req.body) > CONV_LOOKUP_BODY_MAX)
                return client_answer(c, ANSWER_LOOKUP_TOO_LARGE); /* its words hold the bound */
        if (c->req->caller.admitted) {
                c->req->access_wait.fn = lookup_admitted;
                k = access ? access_admit(access, c->req->config, &c->req->caller, c->peer, &d,
                                          &c->req->access_wait)
                           : -ENOMEM;
                if (k == ACCESS_PENDING)
                        return;
                if (k == ACCESS_OVER_CAP)
                        return client_answer_message(c, d.answer, /* status= */ 0, d.retry_after, d.message);
                if (k < 0)
                        return client_answer(c, ANSWER_OUT_OF_MEMORY);
        }
        stream_lookup_go(c);
}

/* A lookup's body is small whoever sends it, and read no further than its bound */
bool client_stream_limit_lookup(Client *c, AnswerWords *w) {
        if (http_parser_limit_body(&c->parser, CONV_LOOKUP_BODY_MAX,
                                   answer_row(ANSWER_LOOKUP_TOO_LARGE)->format) >= 0)
                return true;
        answer_words_0(w, ANSWER_LOOKUP_TOO_LARGE);
        return false;
}

void client_dispatch_stream(Client *c, Span url) {
        if (path_route_own(c->req->route, c->parser.req.method) == PATH_OWN_STREAM_LOOKUP)
                stream_lookup(c);
        else
                stream_forward(c, url, c->parser.req.method == HTTP_GET);
}

/* The rest of a stream whose client left, read to its end */
struct StreamDrain {
        LIST_FIELDS(StreamDrain, drains);
        ClientSet *set;
        Upstream *upstream;
        HostWaiter waiter; /* in flight on the engine until the stream ends */
        char *conv_id, *owner, *host;
        uint64_t bytes;
        /* rule:usage: the answer's tokens, read on from where the client's request left them (or from the
         * head, when the client left before it) and counted whole at the end for the caller, once: the
         * request's access line did not count them */
        bool usage_on, sse_on;
        Usage usage;
        SseFilter sse;
        Buffer scratch;
        ApiKind api;
        RequestAsk ask;
        Config *config; /* caller.tier is in it */
        AccessCaller caller;
        char *peer, *engine, *model_label;
};

static void drain_free(StreamDrain *d) {
        if (d->set)
                LIST_REMOVE(drains, d->set->drains, d);
        upstream_cancel(d->upstream);
        host_release(&d->waiter);
        sse_filter_done(&d->sse);
        buffer_done(&d->scratch);
        config_unref(d->config);
        free(d->conv_id);
        free(d->owner);
        free(d->host);
        free(d->peer);
        free(d->engine);
        free(d->model_label);
        free(d);
}

/* complete: the host ended its answer (else it was cut) */
static void drain_end(StreamDrain *d, const char *why, bool complete) {
        _cleanup_free_ char *e = log_escape_dup(d->conv_id);
        char counts[128], tokens[160] = "", key[80];
        bool cut = false;

        d->upstream = NULL;
        if (d->sse_on) {
                buffer_clear(&d->scratch);
                (void)sse_filter_finish(&d->sse, &d->scratch); /* a last line without its end */
        }
        if (d->usage_on) {
                /* as client_log_access() settles an answer's: what arrived of a cut one, and
                 * rule:usage-charge for what was not said (only generations make sessions) */
                cut = !complete || (d->sse_on && !d->sse.saw_done && !d->usage.ended);
                if (cut)
                        usage_cut(&d->usage);
                usage_charge(&d->usage, d->ask.bytes, d->ask.limited ? d->ask.max_out : -1);
                (void)usage_format(counts, sizeof(counts), &d->usage);
                (void)snprintf(tokens, sizeof(tokens), ", tokens=%s%s", counts, cut ? "(cut)" : "");
        }
        log_info("host %s: conversation %s: its stream ended (%s), %" PRIu64
                 " bytes after its client left%s%s%s",
                 d->host, strna(e), why ?: "complete", d->bytes, tokens, d->caller.admitted ? " key=" : "",
                 d->caller.admitted ? access_caller_id(&d->caller, key) : "");
        if (d->usage_on)
                client_count_usage(d->set->manager, d->config, &d->caller, d->peer, d->host, d->engine,
                                   d->model_label, &d->usage);
        manager_conv_touch(d->set->manager, d->owner, d->conv_id);
        drain_free(d);
}

static int drain_headers(Upstream *u, const UpstreamResponse *resp, void *userdata) {
        StreamDrain *d = userdata;
        Span ct = upstream_response_header(resp, "Content-Type");
        bool sse = ct.p && ct.n >= 17 && strncasecmp(ct.p, "text/event-stream", 17) == 0;

        /* whatever the status, the rest is read all the same; a generation's 200 (a stream or a JSON body,
         * as relay_usage_start() reads them) is read for its tokens too */
        if (resp->status != 200 ||
            !(sse || (ct.p && ct.n >= 16 && strncasecmp(ct.p, "application/json", 16) == 0)))
                return 0;
        usage_init(&d->usage, sse);
        d->usage_on = true;
        if (sse) {
                sse_filter_init(&d->sse, d->api);
                d->sse.usage = &d->usage;
                d->sse_on = true;
        }
        return 0;
}

static int drain_body(Upstream *u, const char *p, size_t n, void *userdata) {
        StreamDrain *d = userdata;
        d->bytes += n; /* the session on the host has them; nobody here wants them, but for their count */
        if (d->sse_on) {
                buffer_clear(&d->scratch);
                (void)sse_filter_feed(&d->sse, p, n, &d->scratch); /* out of memory: what was read stays */
        } else if (d->usage_on)
                usage_body_feed(&d->usage, p, n);
        return d->bytes > CONV_DRAIN_MAX_BYTES ? -EFBIG : 0; /* on_error(-ECANCELED) follows */
}

static void drain_complete(Upstream *u, void *userdata) {
        drain_end(userdata, NULL, /* complete= */ true);
}

static void drain_error(Upstream *u, int error, bool started, void *userdata) {
        StreamDrain *d = userdata;
        drain_end(d,
                  d->bytes > CONV_DRAIN_MAX_BYTES ? "cut: over 64 MiB read"
                  : error == -ETIMEDOUT           ? "cut: read for 30min"
                                                  : upstream_strerror(error),
                  /* complete= */ false);
}

static const UpstreamCallbacks drain_callbacks = {
        .on_headers = drain_headers,
        .on_body = drain_body,
        .on_complete = drain_complete,
        .on_error = drain_error,
};

static void drain_host_down(HostWaiter *w) {
        StreamDrain *d = container_of(w, StreamDrain, waiter);
        d->upstream = upstream_cancel(d->upstream);
        drain_end(d, "host down", /* complete= */ false);
}

bool client_stream_drains(const Client *c) {
        const Request *req = c->req;

        /* the engine has the session from the moment it has the request, whatever of the answer came */
        return req->stream.conv_id && req->attempt.upstream && !req->attempt.via_fallback &&
               req->attempt.waiter.host && !req->answer.complete && !c->set->closing &&
               !manager_stopping(c->manager);
}

/* What the client's request read of the answer so far goes on in the drain, and what counting it needs.
 * -ENOMEM */
static int drain_take_usage(StreamDrain *d, Client *c) {
        Request *req = c->req;

        d->api = req->api;
        d->ask = req->ask;
        d->caller = req->caller;
        d->config = req->config ? config_ref(req->config) : NULL;
        if (!(d->peer = strdup(c->peer)) ||
            (req->attempt.engine_name && !(d->engine = strdup(req->attempt.engine_name))) ||
            (req->model_label && !(d->model_label = strdup(req->model_label))))
                return -ENOMEM;
        if (!client_usage_hand_over(c, &d->usage))
                return 0; /* its head is still to come (drain_headers()), or its answer is not read */
        d->usage_on = true;
        if (req->attempt.mode == MODE_SSE) {
                /* the filter with its unfinished line: the request's ends without it */
                d->sse = req->attempt.sse;
                req->attempt.sse.line = (Buffer){};
                d->sse.usage = &d->usage;
                d->sse_on = true;
        }
        return 0;
}

void client_stream_drain(Client *c) {
        Request *req = c->req;
        HostRefusal refusal;
        Host *h = req->attempt.waiter.host;
        _cleanup_free_ char *e = NULL;
        StreamDrain *d = NULL;
        HostAcquire a;

        if (!client_stream_drains(c))
                goto fail;
        d = calloc(1, sizeof(StreamDrain));
        char owner[80];
        if (!d || !(d->conv_id = strdup(req->stream.conv_id)) ||
            !(d->owner = strdup(caller_owner(c, owner))) || !(d->host = strdup(host_conf(h)->name)))
                goto fail;
        /* joined before the request lets go of its own: the count never falls to zero between */
        a = req->attempt.waiter.engine >= 0 ? host_join(h, (size_t)req->attempt.waiter.engine, &d->waiter,
                                                        drain_host_down, NULL, &refusal)
                                            : host_attach(h, &d->waiter, drain_host_down, NULL, &refusal);
        if (a != HOST_ACQUIRED || drain_take_usage(d, c) < 0)
                goto fail;
        d->set = c->set;
        d->upstream = TAKE_PTR(req->attempt.upstream);
        upstream_set_owner(d->upstream, &drain_callbacks, d);
        upstream_set_reading(d->upstream, true);
        (void)upstream_set_deadline(d->upstream, CONV_DRAIN_MAX_USEC); /* else bounded by its idle timeout */
        LIST_PREPEND(drains, c->set->drains, d);
        manager_conv_touch(c->manager, d->owner, d->conv_id);
        e = log_escape_dup(d->conv_id);
        log_info("host %s: conversation %s: its client left mid-stream; the rest is read to its end, in "
                 "flight meanwhile",
                 d->host, strna(e));
        return;
fail:
        if (d)
                drain_free(d);
        client_count_owed(c); /* what the access line left to a drain */
}

void client_stream_drains_free(ClientSet *set) {
        while (set->drains)
                drain_free(set->drains);
}
