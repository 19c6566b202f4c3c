/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* One event of a host's /models/sse feed, as the Catalog reads it: relabelled
 * for modelgate's own feed, and, for a status event, what it says about one
 * model and how a /models answer lists that afterwards. Pure. */

#include <json-c/json.h>
#include <stdbool.h>

#include "shared/buffer.h"

/* What one status event of a host's /models/sse says about one model. */
typedef struct CatalogStatus {
        char *key;         /* the event's "model" */
        char *status;      /* its data.status: "loading", "loaded", "unloaded", "sleeping", … */
        int exit_code;     /* "unloaded": data.exit_code (0: unloaded on purpose) */
        int percent;       /* "loading": data.progress.value in percent; -1: none said */
        json_object *info; /* "loaded": data.info, the model's own /v1/models entry (a reference), or NULL */
        bool only_unloaded; /* applies only to a model the list has as "unloaded" */
} CatalogStatus;

void catalog_status_done(CatalogStatus *s);
/* Applies s to a parsed /models answer as llama.cpp would list it afterwards: the entry whose id is s->key
 * gets s->status as its status value, "failed" and "exit_code" for an unload with a non-zero exit code,
 * and a loaded model's "info" fields where absent. 1: changed; 0: no such entry, or nothing to change;
 * -EBADMSG: not a model list. */
int catalog_status_apply(json_object *models, const CatalogStatus *s);
/* The same for one entry of such a list (an object; s->key is not compared): 1: changed; 0: nothing to
 * change; -ENOMEM. */
int catalog_status_apply_entry(json_object *entry, const CatalogStatus *s);

/* Reads one event of a host's /models/sse ("data: " stripped), parsed once, with tok (a tokener kept for
 * it: one per event would be most of an event's cost; NULL: one of its own).
 * The event relabelled: "model" becomes "<host>-<key>" ("<host>-*" for "" or "*") and
 * "proxy":{"host","key"} is added; "data: …\n\n" is appended to out. *ret_changes (optional) is set when
 * the event may change the model list (anything but download progress), *ret_model (optional) to the
 * client-visible name it is about ("<host>-<key>", to be freed), or NULL when it is about the whole host.
 * *ret_status is what a status event says about one model, or has a NULL key when the event sets none
 * (download progress, models_reload, …). 0; -EBADMSG: not an event; -ENOMEM. */
int catalog_event_read(json_tokener *tok, const char *host, const char *json, size_t n, Buffer *out,
                       bool *ret_changes, char **ret_model, CatalogStatus *ret_status);
