/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* GET /v1/models and /models: each host's catalog snapshot, merged. Ids
 * become "<host>-<key>", each entry gets a "proxy" field, llama.cpp's status
 * is kept as the host sent it, a stopped engine's learned keys and every
 * exact Models= name are listed as "unloaded" with what their host last said
 * of them (model-memory.h), every entry gets its context window, and a host
 * that is down lists only its configured and learned names (one without
 * engines nothing). The first request
 * after a start waits (at most 2 s) for the first read of each host, and one
 * right after an engine came up for that engine's list; nothing else waits.
 *
 * A snapshot may be megabytes, and clients list often: the hosts' part is
 * merged once and kept (ModelsCache) until a catalog's generation, a host's
 * state or running engine, or the configuration changes. The aliases' part
 * says what each alias would pick now, so it is made on every request. */

#include <json-c/json.h>

#include "shared/blob.h"
#include "modelgated/sched/alias-pick.h"
#include "modelgated/conf/conf.h"
#include "shared/buffer.h"

typedef struct Manager Manager;
typedef struct ModelsMerge ModelsMerge;
typedef struct ModelsCache ModelsCache;
typedef struct ModelsList ModelsList;
typedef struct CatalogList CatalogList;
typedef struct ModelMemory ModelMemory;

/* The merged list, shared with the listings whose bytes are the same (the callee takes a reference to
 * keep it); NULL: out of memory. */
typedef void (*ModelsMergeDone)(ModelsMerge *mm, Blob *json, void *userdata);
/* Whether the caller may see the model (or alias) id: a tier's Models= (rule:tier-models). */
typedef bool (*ModelsAllowed)(const char *id, void *userdata);

ModelsCache *models_cache_new(void);
ModelsCache *models_cache_free(ModelsCache *cache);
/* How many times the hosts' lists were parsed and merged (modelgate_models_merges_total). */
uint64_t models_cache_merges(const ModelsCache *cache);
/* A catalog became ready: when all are, the next spell of pending first reads gets its own wait. */
void models_cache_catalogs_ready(ModelsCache *cache, Manager *m);

/* allowed (NULL: every entry) and done get userdata. */
int models_merge_start(Manager *m, ModelsCache *cache, ModelsAllowed allowed, ModelsMergeDone done,
                       void *userdata, ModelsMerge **ret);
ModelsMerge *models_merge_free(ModelsMerge *mm);
/* A host's first read ended: a merge that waited for every host's may answer now. */
void models_merge_catalogs_ready(ModelsMerge *mm);

/* Pure: adds host's entries from a /models body to the list 'data', naming 'engine' (or, when NULL, the
 * engine whose Models= matches) in each "proxy" field. 0, or -EBADMSG. */
int models_merge_host(const Config *c, const HostConf *h, const char *engine, const char *body, size_t n,
                      json_object *data);

/* Pure: a listing's entries, each serialized once as it is added, found by id through a hash. */
ModelsList *models_list_new(void);
ModelsList *models_list_free(ModelsList *l);
DEFINE_TRIVIAL_CLEANUP_FUNC(ModelsList *, models_list_free);
/* models_merge_host()'s entries, from a host's list as the catalog keeps it (catalog-list.h), each with
 * its context window (rule:model-context), from mem (may be NULL) where the entry does not say it. 0 or
 * -ENOMEM. */
int models_list_add_host_list(ModelsList *l, const Config *c, const HostConf *h, const char *engine,
                              const ModelMemory *mem, const CatalogList *list);
/* The same from a /models answer's text. 0, -EBADMSG (nothing added) or -ENOMEM. */
int models_list_add_host(ModelsList *l, const Config *c, const HostConf *h, const char *engine,
                         const char *body, size_t n);
/* A stopped engine's learned keys, as llama.cpp lists a model it does not run ("unloaded"), each unless
 * the list has its id already. */
int models_list_add_learned(ModelsList *l, const char *host, const char *engine, char *const *keys);
/* The same, with what mem (may be NULL) remembers of each key: its meta, its args and its context window,
 * "proxy" marked "remembered" with the time it was "seen" (rule:remembered-context); down: the host is
 * down, "proxy" says "host_state":"down". */
int models_list_add_stopped(ModelsList *l, const char *host, const char *engine, char *const *keys,
                            const ModelMemory *mem, bool down);
/* Alias a with the state of each target (t), the one it would pick (-1: none) and why; the picked
 * target's "status" as 'hosts' has it. */
int models_list_add_alias(ModelsList *l, ModelsList *hosts, const AliasConf *a, const AliasTarget *t,
                          ssize_t pick, const char *why);
/* {"object":"list","data":[…]}: the entries of hosts, then of aliases, that allowed lets through. */
int models_list_render(const ModelsList *hosts, const ModelsList *aliases, ModelsAllowed allowed,
                       void *userdata, Buffer *out);
