/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* A POST /v1/streams/lookup on its way (rule:resumable-streams): one request to each host that served
 * some of the ids asked for, the answers merged. The Request holds it, and ending the request ends it. */

typedef struct StreamLookup StreamLookup;

/* Its requests to the hosts are cancelled; NULL */
StreamLookup *stream_lookup_free(StreamLookup *l);
