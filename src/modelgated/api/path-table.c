/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The table of paths (path-table.h). A row below a path (/v1/messages/...) holds what holds for all of
 * them; a row of an exact path under it repeats that, so that one row answers every question. */

#include <string.h>

#include "modelgated/api/path-table.h"

#define P(s) .path = s, .len = sizeof(s) - 1

/* Exact paths. The first rows are the ones nearly every request has: the scan compares lengths first.
 * rule:fallback-availability: the fallback serves inference only. rule:resumable-streams: only a
 * generation makes a session on the host. rule:probe: POST unless marked, llama-server's routes
 * (tools/server/server.cpp) and the APIs' token counts; any method but GET and HEAD counts as POST. */
static const PathRoute exact[] = {
        {P("/v1/chat/completions"), .fallback = true, .keeps_stream = true, .activity = "chat"},
        {P("/v1/messages"), .api = API_ANTHROPIC, .fallback = true, .keeps_stream = true,
         .activity = "messages"},
        /* rule:websocket-426: the Responses API's own paths (Codex's built-in provider) */
        {P("/v1/responses"), .api = API_RESPONSES, .fallback = true, .keeps_stream = true,
         .websocket_426 = true, .activity = "responses"},
        {P("/v1/completions"), .fallback = true, .keeps_stream = true, .activity = "completions"},
        {P("/v1/messages/count_tokens"), .api = API_ANTHROPIC, .probe = PATH_NOT_READ, .fallback = true,
         .activity = "messages"},
        /* rule:responses-api: its token count never streams, and its error bodies are OpenAI's either way */
        {P("/v1/responses/input_tokens"), .api = API_RESPONSES, .probe = PATH_NOT_READ, .fallback = true,
         .activity = "responses"},
        {P("/chat/completions"), .keeps_stream = true, .activity = "chat"},
        {P("/completions"), .keeps_stream = true, .activity = "completions"},
        {P("/responses"), .api = API_RESPONSES, .keeps_stream = true, .websocket_426 = true,
         .activity = "responses"},
        {P("/completion"), .keeps_stream = true},
        {P("/infill"), .keeps_stream = true},
        {P("/v1/audio/transcriptions"), .keeps_stream = true},
        {P("/audio/transcriptions"), .keeps_stream = true},
        {P("/responses/input_tokens"), .api = API_RESPONSES, .probe = PATH_NOT_READ,
         .activity = "responses"},
        {P("/v1/chat/completions/input_tokens"), .probe = PATH_NOT_READ},
        {P("/chat/completions/input_tokens"), .probe = PATH_NOT_READ},
        {P("/tokenize"), .probe = PATH_NOT_READ},
        {P("/detokenize"), .probe = PATH_NOT_READ},
        {P("/apply-template"), .probe = PATH_NOT_READ},
        {P("/props"), .probe = PATH_ANY},
        {P("/slots"), .probe = PATH_READ}, /* POST /slots/… saves and restores: not a probe */
        /* modelgate's own: anyone's (no admission, no body) */
        {P("/"), .own = PATH_OWN_ROOT, .own_methods = PATH_READ, .open = true},
        {P("/health"), .own = PATH_OWN_HEALTH, .own_methods = PATH_READ, .open = true},
        {P("/metrics"), .own = PATH_OWN_METRICS, .own_methods = PATH_READ, .open = true},
        /* ... a browser's (rule:ui-key) */
        {P("/ui"), .own = PATH_OWN_UI, .own_methods = PATH_READ, .browser = true},
        {P("/activity"), .own = PATH_OWN_ACTIVITY, .own_methods = PATH_READ, .browser = true},
        /* ... an admitted caller's */
        {P("/models"), .own = PATH_OWN_MODELS, .own_methods = PATH_READ, .models_call = true},
        {P("/v1/models"), .own = PATH_OWN_MODELS, .own_methods = PATH_READ},
        {P("/models/sse"), .own = PATH_OWN_FEED, .own_methods = PATH_READ, .models_call = true},
        {P("/running"), .own = PATH_OWN_RUNNING, .own_methods = PATH_READ},
        {P("/unload"), .own = PATH_OWN_UNLOAD, .own_methods = PATH_GET},
        {P("/api/models/unload"), .own = PATH_OWN_UNLOAD_API, .own_methods = PATH_POST},
        {P("/v1/stream"), .own = PATH_OWN_STREAM, .own_methods = PATH_GET | PATH_DELETE},
        {P("/v1/streams/lookup"), .own = PATH_OWN_STREAM_LOOKUP, .own_methods = PATH_POST},
        /* rule:list-never-stale: the host's list is read again after a load or an unload that worked */
        {P("/models/load"), .models_call = true, .catalog_call = PATH_CATALOG_LOAD},
        {P("/models/unload"), .models_call = true, .catalog_call = PATH_CATALOG_UNLOAD},
};

/* Paths below a path: their rows' paths end with '/' */
static const PathRoute below[] = {
        {P("/v1/messages/"), .match = PATH_BELOW, .api = API_ANTHROPIC, .activity = "messages"},
        {P("/v1/responses/"), .match = PATH_BELOW, .api = API_RESPONSES, .activity = "responses"},
        {P("/responses/"), .match = PATH_BELOW, .api = API_RESPONSES, .activity = "responses"},
        {P("/models/"), .match = PATH_BELOW, .models_call = true},
        {P("/api/models/unload/"), .match = PATH_UNDER, .own = PATH_OWN_UNLOAD_MODEL,
         .own_methods = PATH_POST},
};

static const PathRoute none = {.path = "", .api = API_OPENAI};

const PathRoute *path_route_none(void) {
        return &none;
}

const PathRoute *path_route_lookup(Span path) {
        if (path.n == 0 || path.p[0] != '/')
                return &none;
        for (const PathRoute *r = exact; r < exact + ELEMENTSOF(exact); r++)
                if (r->len == path.n && memcmp(r->path, path.p, path.n) == 0)
                        return r;
        for (const PathRoute *r = below; r < below + ELEMENTSOF(below); r++)
                if (path.n >= (size_t)r->len + (r->match == PATH_UNDER) &&
                    memcmp(r->path, path.p, r->len) == 0)
                        return r;
        return &none;
}
