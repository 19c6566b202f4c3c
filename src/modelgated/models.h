/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* GET /v1/models and /models: each host's catalog snapshot, merged. Ids
 * become "<host>-<key>", each entry gets a "proxy" field, llama.cpp's status
 * is kept as the host sent it, hosts that are down are left out, and a
 * stopped engine's learned keys are listed as "unloaded". The first request
 * after a start waits (at most 2 s) for the first read of each host, and one
 * right after an engine came up for that engine's list; nothing else waits. */

#include <json-c/json.h>

#include "modelgated/conf.h"

typedef struct Manager Manager;
typedef struct ModelsMerge ModelsMerge;

typedef void (*ModelsMergeDone)(ModelsMerge *mm, const char *json, size_t n, void *userdata);

int models_merge_start(Manager *m, ModelsMergeDone done, void *userdata, ModelsMerge **ret);
ModelsMerge *models_merge_free(ModelsMerge *mm);
/* A host's first read ended: a merge that waited for every host's may answer now. */
void models_merge_catalogs_ready(ModelsMerge *mm);

/* Pure: adds host's entries from a /models body to the list 'data', naming 'engine' (or, when NULL, the
 * engine whose Models= matches) in each "proxy" field. 0, or -EBADMSG. */
int models_merge_host(const Config *c, const HostConf *h, const char *engine, const char *body, size_t n,
                      json_object *data);
