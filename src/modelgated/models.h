/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* GET /v1/models and /models: each host's own /models, fetched now, merged.
 * Ids become "<host>-<key>", each entry gets a "proxy" field, and a host that
 * does not answer in time is left out. (The catalog issue replaces the fetch
 * with a snapshot kept fresh; the merge itself stays.) */

#include <json-c/json.h>

#include "modelgated/conf.h"

typedef struct Manager Manager;
typedef struct ModelsMerge ModelsMerge;

typedef void (*ModelsMergeDone)(ModelsMerge *mm, const char *json, size_t n, void *userdata);

int models_merge_start(Manager *m, ModelsMergeDone done, void *userdata, ModelsMerge **ret);
ModelsMerge *models_merge_free(ModelsMerge *mm);

/* Pure: adds host's entries from a /models body to the list 'data'. 0, or -EBADMSG. */
int models_merge_host(const Config *c, const HostConf *h, const char *body, size_t n, json_object *data);
