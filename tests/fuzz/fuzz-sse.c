/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A host's event stream through the SSE filter in arbitrary pieces, and a host's error answer as an
 * error event. The filter passes complete lines on at once and holds at most one unfinished line, so the
 * output of a stream without error events must be the input, byte for byte, whatever the split. */
#include <assert.h>
#include <stdint.h>
#include <string.h>

#include "modelgated/api/sse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        _cleanup_(buffer_done) Buffer out = {}, event = {};
        SseFilter f;
        ApiKind api;
        size_t split;

        if (size < 2)
                return 0;
        api = (ApiKind)(data[0] % _API_KIND_MAX);
        split = data[1];
        data += 2, size -= 2;

        sse_filter_init(&f, api);
        for (size_t o = 0; o < size;) {
                size_t k = split ? MIN(split, size - o) : size - o;
                assert(sse_filter_feed(&f, (const char *)data + o, k, &out) >= 0);
                o += k;
        }
        assert(sse_filter_finish(&f, &out) >= 0);
        sse_filter_done(&f);
        if (!memmem(data, size, "error", 5))
                assert(buffer_size(&out) == size && memcmp(buffer_peek(&out), data, size) == 0);

        assert(sse_error_event_from_answer(api, 500, (const char *)data, size, &event) >= 0);
        assert(buffer_size(&event) > 0);
        return 0;
}
