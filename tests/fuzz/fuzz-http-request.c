/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The client-side parser fed in pieces whose sizes come from the input's first byte, request after
 * request, as a connection would; plus the model lookup on each complete request. */
#include <stdint.h>
#include <stdlib.h>

#include "modelgated/http.h"
#include "modelgated/route.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        HttpParser p;
        size_t step, off = 1;

        if (size < 1)
                return 0;
        step = data[0] % 64 + 1;
        http_parser_init(&p, 4096, 65536);
        while (off < size) {
                size_t k = 0, n = size - off < step ? size - off : step;
                int r = http_parser_feed(&p, (const char *)data + off, n, &k);
                if (r < 0)
                        break;
                off += k;
                if (r == HTTP_PARSE_DONE) {
                        Span s;
                        char *m = NULL;
                        bool stream;
                        if (json_find_model(buffer_peek(&p.req.body), buffer_size(&p.req.body), &s, &m,
                                            &stream) == 0)
                                free(m);
                        if (query_find_model(http_request_url(&p.req), &s, &m) == 0)
                                free(m);
                        http_parser_next(&p);
                } else if (k == 0 && r != HTTP_PARSE_HEADERS)
                        break;
        }
        http_parser_done(&p);
        return 0;
}
