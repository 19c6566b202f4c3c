/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The client-side parser fed in pieces whose sizes come from the input's first byte, request after
 * request, as a connection would; plus the model lookup on each complete request. The invariant, not
 * just "no crash": whatever is accepted, what goes on to a host never carries a credential, a Host
 * of the client's, or a header name with whitespace, and the target is plain ASCII. */
#include <stdint.h>
#include <stdlib.h>
#include <strings.h>

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
                        Buffer fwd = {};
                        Span url = http_request_url(&p.req);
                        for (size_t i = 0; i < url.n; i++)
                                if ((unsigned char)url.p[i] <= 0x20 || (unsigned char)url.p[i] >= 0x7f ||
                                    url.p[i] == '#')
                                        abort();
                        if (http_request_append_forwarded_headers(&p.req, &fwd) < 0)
                                abort();
                        /* line by line: "name: value" */
                        for (const char *l = buffer_peek(&fwd), *e = l + buffer_size(&fwd); l < e;) {
                                const char *eol = memmem(l, (size_t)(e - l), "\r\n", 2);
                                const char *colon = memchr(l, ':', (size_t)(eol - l));
                                if (!eol || !colon || colon == l)
                                        abort();
                                Span name = {l, (size_t)(colon - l)};
                                for (size_t i = 0; i < name.n; i++)
                                        if (!http_is_tchar((unsigned char)name.p[i]))
                                                abort();
                                if (http_header_is_credential(name) || span_caseeq(name, "Host") ||
                                    span_caseeq(name, "Transfer-Encoding") ||
                                    span_caseeq(name, "Content-Length"))
                                        abort();
                                if (memchr(colon, '\n', (size_t)(eol - colon)) ||
                                    memchr(colon, '\r', (size_t)(eol - colon)))
                                        abort();
                                l = eol + 2;
                        }
                        buffer_done(&fwd);
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
