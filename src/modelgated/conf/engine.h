/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* An engine as the modules that talk to it see it: its [Engine] section and
 * the URL its server answers on. A header of its own, below both the Host
 * and its Catalog, because the Host hands its engines down to the Catalog,
 * which must not know the Host. */

#include "modelgated/conf/conf.h"

typedef struct HostEngine {
        const EngineConf *conf;
        const HttpUrl *url; /* the engine's, else the host's */
} HostEngine;
