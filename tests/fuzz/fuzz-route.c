/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* rule:model-rewrite: whatever the input, a body or query from which a model
 * was found, rewritten with the key, must yield exactly that key when searched again, and every byte
 * outside the model's value must be the client's. The first byte picks body or query. */
#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "modelgated/api/route.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static Config c;
        static HostConf hosts[3];
        _cleanup_free_ char *model = NULL, *again = NULL, *quoted = NULL, *out = NULL;
        const char *key;
        Span span;
        size_t n;
        bool query;
        int r;

        if (size == 0)
                return 0;
        if (!c.hosts) {
                hosts[0].name = (char *)"3090";
                hosts[1].name = (char *)"3090-big";
                hosts[2].name = (char *)"a9";
                c.hosts = hosts;
                c.n_hosts = 3;
        }
        query = data[0] & 1;
        data++, size--;

        if (query) {
                Span url = {(const char *)data, size};
                r = query_find_model(url, &span, &model);
                if (r != MODEL_FOUND)
                        return 0;
                quoted = query_escape(model);
        } else {
                r = json_find_model((const char *)data, size, &span, &model, NULL);
                if (r != MODEL_FOUND)
                        return 0;
                quoted = json_quote(model);
        }
        assert(quoted);
        assert(span.p >= (const char *)data && span.p + span.n <= (const char *)data + size);

        /* the routing of the decoded name, and the rewrite with its key */
        if (!config_host_of_model(&c, model, &key))
                key = model;
        free(quoted);
        quoted = query ? query_escape(key) : json_quote(key);
        assert(quoted);
        out = span_replace((Span){(const char *)data, size}, span, quoted, &n);
        assert(out);
        size_t before = (size_t)(span.p - (const char *)data), after = size - before - span.n;
        assert(n == before + strlen(quoted) + after);
        assert(memcmp(out, data, before) == 0);
        assert(memcmp(out + n - after, span.p + span.n, after) == 0);

        Span span2;
        if (query)
                r = query_find_model((Span){out, n}, &span2, &again);
        else
                r = json_find_model(out, n, &span2, &again, NULL);
        assert(r == 0);
        assert(strcmp(again, key) == 0);
        return 0;
}
