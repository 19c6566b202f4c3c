/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* What each host said about each of its models the last time its list was read while one of its engines
 * ran (rule:remembered-context): the model's own "meta" (a loaded model's n_ctx, n_ctx_train, …), its
 * "status.args" (the command line the router runs it with), the engine that listed it, and when. Kept per
 * host and key, at most MODEL_MEMORY_KEYS_MAX keys per host (the one seen longest ago goes first), and
 * written to and read from JSON text (the state file, models-seen.json). With it, a listing gives every
 * model its context window (rule:model-context), the running engine's own entries first. Pure: no I/O,
 * the time is handed in. */

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shared/macro.h"
#include "shared/time-util.h"

/* as many as a host's list may have (catalog.c reads at most 2048 models) */
#define MODEL_MEMORY_KEYS_MAX 2048
/* a meta object or an argument list longer than this is not kept (llama.cpp's are a few hundred bytes) */
#define MODEL_MEMORY_PART_MAX (16 * 1024)

typedef struct ModelMemory ModelMemory;

ModelMemory *model_memory_new(void);
ModelMemory *model_memory_free(ModelMemory *m);
DEFINE_TRIVIAL_CLEANUP_FUNC(ModelMemory *, model_memory_free);

/* Replaces what m remembers with the text of a file model_memory_format() wrote. 0; -EBADMSG: it is not
 * one (m is left empty); -ENOMEM. Records that are not well formed are dropped one by one. */
int model_memory_parse(ModelMemory *m, const char *text, size_t n);
/* The text to keep (malloc'ed), or NULL when out of memory. */
char *model_memory_format(const ModelMemory *m);

/* Learns entry, one element of host's /models answer (its id the host's key), listed by the running
 * engine at now (CLOCK_REALTIME): its meta when it has one with an n_ctx (a loaded model); its args; else
 * the meta learned before, as long as the args are the same but for the port. 1: what a listing shows of
 * it changed other than the time; 0: only the time; -EINVAL: not an entry with an id; -ENOMEM. */
int model_memory_learn(ModelMemory *m, const char *host, const char *engine, json_object *entry, usec_t now);
/* The host listed key again, as it was (its list did not change) at now: only the time is learned.
 * false: nothing is remembered of it. */
bool model_memory_touch(ModelMemory *m, const char *host, const char *key, usec_t now);
/* The record of host's key ({"engine","meta","args","seen"}, borrowed), or NULL. */
json_object *model_memory_get(const ModelMemory *m, const char *host, const char *key);
/* The keys host listed, those engine listed (engine NULL: every engine's), into *ret (NULL: none). 0 or
 * -ENOMEM. */
int model_memory_keys(const ModelMemory *m, const char *host, const char *engine, char ***ret);
/* Bumped by every change of what m remembers but model_memory_touch()'s. */
uint64_t model_memory_generation(const ModelMemory *m);

/* The context window a command line gives: -c/--ctx-size N (N > 0), unless slots split it (-np/--parallel
 * K > 1 without -kvu/--kv-unified, or --kv-unified-per-slot). 0: it does not say. */
int64_t model_args_n_ctx(json_object *args);
/* Two command lines are the same, but for the value of --port (a running model's is its own, an
 * unloaded one's 0). */
bool model_args_same(json_object *a, json_object *b);

/* Gives entry (a listing's, as the host sent it or made from a record) its context window
 * (rule:model-context): its own meta.n_ctx; else the record's meta, when the args are the same (or the
 * entry has none and takes the record's); else what its args say. The window goes in meta.n_ctx (where it
 * is absent), "context_length" and "max_model_len". record may be NULL. 1: something came from the
 * record; 0: nothing did; -ENOMEM. */
int model_context_apply(json_object *entry, json_object *record);
/* record's "seen" as RFC 3339 UTC ("2026-01-31T12:00:00Z") in buf; false: it has none */
bool model_record_seen(json_object *record, char buf[static 32]);
