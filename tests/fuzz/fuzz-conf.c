/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <stdint.h>

#include "modelgated/conf/conf.h"
#include "shared/log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static FILE *null;
        Config c;

        if (!null)
                null = fopen("/dev/null", "we");
        log_set_max_level(LOG_EMERG - 1);
        config_init(&c);
        if (config_parse_text(&c, "fuzz", (const char *)data, size) >= 0 && config_verify(&c) >= 0)
                config_dump(&c, null ?: stdout);
        config_done(&c);
        return 0;
}
