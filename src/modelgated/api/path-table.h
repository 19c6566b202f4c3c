/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* What a URL path means to modelgate, in one table: its API's shape (rule:error-shape), whether modelgate
 * answers it itself and before any admission, whether a browser reads it (rule:ui-key), whether it is a
 * probe (rule:probe), the fallback's path for it (rule:fallback-availability), whether it keeps a stream
 * (rule:resumable-streams), and the /models/... calls that are the host's to judge (rule:unlisted-key-404).
 * A request looks its path up once (path_route_lookup()), and every question about its path reads that row.
 * Pure. */

#include <stdbool.h>
#include <stdint.h>

#include "modelgated/http/http.h"
#include "modelgated/api/api-error.h"
#include "shared/macro.h"

/* Sets of methods, one bit a method: an attribute of a row holds for the methods of its set */
enum {
        PATH_GET = 1 << 0,
        PATH_HEAD = 1 << 1,
        PATH_POST = 1 << 2,
        PATH_DELETE = 1 << 3,
        PATH_OTHER = 1 << 4, /* any other method */
        PATH_READ = PATH_GET | PATH_HEAD,
        PATH_ANY = PATH_READ | PATH_POST | PATH_DELETE | PATH_OTHER,
        PATH_NOT_READ = PATH_ANY & ~PATH_READ,
};

static inline unsigned path_method(llhttp_method_t m) {
        switch (m) {
        case HTTP_GET:
                return PATH_GET;
        case HTTP_HEAD:
                return PATH_HEAD;
        case HTTP_POST:
                return PATH_POST;
        case HTTP_DELETE:
                return PATH_DELETE;
        default:
                return PATH_OTHER;
        }
}

/* modelgate's own endpoints: client_dispatch() has one handler for each */
typedef enum PathOwn {
        PATH_OWN_NONE, /* the host's */
        PATH_OWN_ROOT,
        PATH_OWN_HEALTH,
        PATH_OWN_METRICS,
        PATH_OWN_UI,
        PATH_OWN_FEED, /* GET /models/sse */
        PATH_OWN_ACTIVITY,
        PATH_OWN_RUNNING,       /* rule:swap-running */
        PATH_OWN_UNLOAD,        /* GET /unload (rule:swap-unload) */
        PATH_OWN_UNLOAD_API,    /* POST /api/models/unload */
        PATH_OWN_UNLOAD_MODEL,  /* POST /api/models/unload/<model> */
        PATH_OWN_MODELS,        /* GET /models, /v1/models */
        PATH_OWN_STREAM,        /* GET, DELETE /v1/stream (rule:resumable-streams) */
        PATH_OWN_STREAM_LOOKUP, /* POST /v1/streams/lookup */
        _PATH_OWN_MAX,
} PathOwn;

typedef enum PathMatch {
        PATH_EXACT,
        PATH_BELOW, /* the row's path (which ends with '/') and anything after it */
        PATH_UNDER, /* the row's path (which ends with '/') and at least one byte after it */
} PathMatch;

typedef enum PathCatalogCall {
        PATH_CATALOG_NONE,
        PATH_CATALOG_LOAD,   /* POST /models/load: rule:list-never-stale */
        PATH_CATALOG_UNLOAD, /* POST /models/unload */
} PathCatalogCall;

typedef struct PathRoute {
        const char *path;   /* the fallback sends this string, never the client's bytes */
        uint8_t len, match; /* PathMatch */
        uint8_t api;        /* ApiKind */
        uint8_t own;        /* PathOwn, for the methods of own_methods */
        uint8_t own_methods;
        bool open;     /* the own endpoint is anyone's: no admission, no body (GET /, /health, /metrics) */
        bool browser;  /* the own endpoint is a browser's: Basic credentials count (rule:ui-key) */
        uint8_t probe; /* methods for which it is a probe (rule:probe) */
        bool fallback; /* a POST to it may go to the fallback, to this very path */
        bool keeps_stream;    /* a POST to it generates: its stream may be resumed */
        bool websocket_426;   /* rule:websocket-426 */
        bool models_call;     /* /models and below: the host's to judge (rule:unlisted-key-404) */
        uint8_t catalog_call; /* PathCatalogCall */
        const char *activity; /* the API as /activity names it */
} PathRoute;

/* The row of a request's path: never NULL (a path of no row gets one that says nothing of it) */
const PathRoute *path_route_lookup(Span path);
/* The row that says nothing: for a request with no path (yet) */
const PathRoute *path_route_none(void);

/* The own endpoint a request of method m to the row's path is, or PATH_OWN_NONE */
static inline PathOwn path_route_own(const PathRoute *r, llhttp_method_t m) {
        return (r->own_methods & path_method(m)) ? (PathOwn)r->own : PATH_OWN_NONE;
}

/* What modelgate answers itself, for anyone: no admission */
static inline bool path_route_open(const PathRoute *r, llhttp_method_t m) {
        return r->open && path_route_own(r, m) != PATH_OWN_NONE;
}

/* The pages a browser reads with its own credentials (rule:ui-key): GET /ui and GET /activity, which
 * change nothing and which another site's page cannot read */
static inline bool path_route_browser(const PathRoute *r, llhttp_method_t m) {
        return r->browser && path_route_own(r, m) != PATH_OWN_NONE;
}

static inline bool path_route_probe(const PathRoute *r, llhttp_method_t m) {
        return (r->probe & path_method(m)) != 0;
}

/* The fallback's own path for the request (inference only), or NULL */
static inline const char *path_route_fallback(const PathRoute *r, llhttp_method_t m) {
        return r->fallback && m == HTTP_POST ? r->path : NULL;
}

static inline bool path_route_keeps_stream(const PathRoute *r, llhttp_method_t m) {
        return r->keeps_stream && m == HTTP_POST;
}

static inline ApiKind path_route_api(const PathRoute *r) {
        return (ApiKind)r->api;
}

/* The API as /activity names it: chat, completions, messages, responses or other */
static inline const char *path_route_activity(const PathRoute *r) {
        return r->activity ?: "other";
}
