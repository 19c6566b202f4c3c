/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Who a request comes from, to the spread memory (rule:alias-order) and to the sessions (rule:sessions):
 * its key, else its address; and the session it names, read from its head once it is admitted. */

#include "modelgated/client/client-internal.h"

/* Who the client is to an alias's "spread" memory and to the sessions: its key, else its address, which
 * counts against its IPv6 /64 (or IPv4 address) as MaxConnectionsPerAddress= and [Access] count it; and
 * within it the session it names (rule:sessions) */
AliasClient client_identity(const Client *c) {
        if (c->req->caller.tier)
                return (AliasClient){.key = c->req->caller.digest, .session = c->req->session.hash};
        return (AliasClient){.address = c->peer, .prefix = c->address, .session = c->req->session.hash};
}

/* rule:sessions: the session the request names, if its header is sane: for the spread, the access line and
 * the activity; the label is the known session's, so that a session's later requests cost no hash */
void client_read_session(Client *c) {
        Request *req = c->req;
        Span id = session_id_of(&c->parser.req, config_session_headers(req->config));
        AliasClient who;

        if (!id.p)
                return;
        req->session.id = id;
        req->session.hash = session_id_hash(id);
        who = client_identity(c);
        activity_session_label(manager_activity(c->manager), &who, id, req->session.label, client_now(c));
}
