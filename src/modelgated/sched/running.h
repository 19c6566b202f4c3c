/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* GET /running (rule:swap-running): the models the hosts' engines serve now, in llama-swap's shape,
 * {"running":[{"model":…,"state":…}, …]}, so that the scripts and dashboards written for llama-swap read
 * it unchanged; modelgate's names ("<host>-<key>") in "model", and where it runs beside them. Pure. */

#include <stddef.h>

typedef struct RunningModel {
        const char *host;   /* the host's name: "model" is "<host>-<key>" */
        const char *key;    /* the model as the host lists it */
        const char *state;  /* llama-swap's words: "ready" */
        const char *engine; /* the [Engine]'s Name= */
        const char *unit;   /* its Unit= */
        const char *url;    /* where it answers: llama-swap's "proxy" */
} RunningModel;

/* The body for n models, malloc'ed in *ret (NUL-terminated), its length in *ret_size. 0 or -ENOMEM. */
int running_render(const RunningModel *models, size_t n, char **ret, size_t *ret_size);
