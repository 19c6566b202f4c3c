/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <sys/uio.h>

#include "modelgated/api/access-line.h"
#include "tests.h"

#define LIT(s) ((Span){"" s, sizeof(s) - 1})

static const char *format(const RequestRecord *l, char *buf, size_t size) {
        size_t n = access_line_format(buf, size - 1, l);
        buf[n] = 0;
        return buf;
}

TEST(a_proxied_request) {
        char b[512];
        RequestRecord l = {.method = "POST",
                        .path = LIT("/v1/chat/completions"),
                        .model = "3090-laguna-xs",
                        .user_agent = LIT("curl/7.88.1"),
                        .host = "3090",
                        .peer = "127.0.0.1",
                        .status = 200,
                        .bytes = 378,
                        .duration = 52 * USEC_PER_MSEC};

        ASSERT_STREQ(format(&l, b, sizeof(b)),
                     "POST /v1/chat/completions model=\"3090-laguna-xs\" host=3090 status=200 bytes=378 "
                     "dur=0.052s from=127.0.0.1 ua=\"curl/7.88.1\"");
}

TEST(what_the_client_sent_cannot_forge_a_line) {
        char b[512];
        RequestRecord l = {.method = "POST",
                        .path = LIT("/v1/x\ty"),
                        .model = "h-foo\n<3>modelgated: forged\x1b[2J",
                        .user_agent = LIT("a\"b"),
                        .peer = "::1",
                        .status = 404,
                        .duration = 1500 * USEC_PER_MSEC};

        format(&l, b, sizeof(b));
        ASSERT_TRUE(!strchr(b, '\n'));
        ASSERT_TRUE(!strchr(b, '\t'));
        ASSERT_TRUE(!strchr(b, '\x1b'));
        ASSERT_TRUE(strstr(b, " host=- status=404 bytes=0 dur=1.500s from=::1 "));
}

TEST(seconds_to_the_millisecond) {
        static const struct {
                usec_t t;
                const char *want;
        } cases[] = {
                {0, " dur=0.000s "},
                {999, " dur=0.000s "}, /* cut, not rounded: a duration is never shown longer than it was */
                {1000, " dur=0.001s "},
                {9999999, " dur=9.999s "},
                {10 * USEC_PER_SEC, " dur=10.000s "},
                {3723 * USEC_PER_SEC + 45 * USEC_PER_MSEC, " dur=3723.045s "},
        };
        char b[512];

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                RequestRecord l = {
                        .method = "GET", .path = LIT("/health"), .peer = "::1", .duration = cases[i].t};
                format(&l, b, sizeof(b));
                if (!strstr(b, cases[i].want))
                        FAIL("%llu us: '%s' is not in '%s'", (unsigned long long)cases[i].t, cases[i].want,
                             b);
        }
}

TEST(early_answer_key_fallback_and_note) {
        char b[512];
        RequestRecord l = {.method = "POST",
                        .path = LIT("/v1/messages"),
                        .model = "h-m",
                        .host = "h",
                        .peer = "p",
                        .status = 200,
                        .early = true,
                        .error_status = 502,
                        .key = "k:ab12",
                        .session = "7952ffb63566",
                        .fallback = "cloud",
                        .note = "cut=client"};

        /* rule:sessions: the session by its label, after the key */
        ASSERT_TRUE(strstr(
                format(&l, b, sizeof(b)),
                "\" early=200 error=502 key=k:ab12 session=7952ffb63566 via=fallback/cloud cut=client"));
}

TEST(a_line_longer_than_its_buffer_is_cut_not_overrun) {
        char b[33];
        RequestRecord l = {.method = "GET", .path = LIT("/a-rather-long-path-that-does-not-fit"), .peer = "p"};

        ASSERT_EQ(access_line_format(b, 32, &l), 32u);
}

TEST(engine_first_byte_tokens_speeds_and_id) {
        char b[1024];
        Usage u = {.in = 812,
                   .cached = 640,
                   .out = 95,
                   .prompt_n = 172,
                   .prompt_ms = 113.9,
                   .predicted_n = 95,
                   .predicted_ms = 2305.8};
        RequestRecord l = {.method = "POST",
                        .path = LIT("/v1/chat/completions"),
                        .model = "3090-laguna-xs",
                        .host = "3090",
                        .peer = "p",
                        .status = 200,
                        .engine = "mainline",
                        .first_byte = 12 * USEC_PER_MSEC,
                        .usage = &u,
                        .request_id = LIT("req-1")};

        ASSERT_TRUE(strstr(format(&l, b, sizeof(b)),
                           " ua=\"\" engine=mainline first_byte=0.012s tokens=in:812,cached:640,out:95 "
                           "prefill=1510.1t/s decode=41.2t/s id=req-1"));

        /* a cut stream, and the fallback's answer (no engine, no timings, unknown parts) */
        u = (Usage){.in = -1, .cached = -1, .out = 3, .prompt_n = -1, .predicted_n = -1};
        l.engine = NULL;
        l.cut = true;
        l.status = 499;
        l.note = "cut=client";
        ASSERT_TRUE(strstr(format(&l, b, sizeof(b)), " status=499 ") &&
                    strstr(b, " cut=client first_byte=0.012s tokens=in:?,cached:?,out:3(cut) id=req-1"));
        l.cut = false;
        l.note = NULL;
        l.fallback = "cloud";
        u = (Usage){.in = 20, .cached = -1, .out = 5, .prompt_n = -1, .predicted_n = -1};
        ASSERT_TRUE(strstr(format(&l, b, sizeof(b)), " tokens=in:20,cached:?,out:5(cloud) id=req-1"));

        /* nothing known, no usage: no tokens field; a client's id is escaped */
        u = (Usage){.in = -1, .cached = -1, .out = -1, .prompt_n = -1, .predicted_n = -1};
        l.request_id = LIT("a\"b");
        format(&l, b, sizeof(b));
        ASSERT_TRUE(!strstr(b, "tokens="));
        ASSERT_TRUE(strstr(b, " id=a\\x22b"));
}

TEST(queued_and_switch) {
        char b[1024];
        RequestRecord l = {.method = "POST",
                        .path = LIT("/v1/chat/completions"),
                        .model = "3090-flint-40b",
                        .host = "3090",
                        .peer = "p",
                        .status = 200,
                        .engine = "fork",
                        .queued = 2500 * USEC_PER_MSEC,
                        .switched = 41 * USEC_PER_SEC + 7 * USEC_PER_MSEC,
                        .first_byte = 43600 * USEC_PER_MSEC};

        ASSERT_TRUE(strstr(format(&l, b, sizeof(b)),
                           " engine=fork queued=2.500s switch=41.007s first_byte=43.600s"));
        /* a request that went at once says neither */
        l.queued = l.switched = 0;
        format(&l, b, sizeof(b));
        ASSERT_TRUE(!strstr(b, "queued=") && !strstr(b, "switch="));
        /* nor one whose parts are under the line's millisecond, which would read "0.000s" */
        l.queued = l.switched = USEC_PER_MSEC - 1;
        format(&l, b, sizeof(b));
        ASSERT_TRUE(!strstr(b, "queued=") && !strstr(b, "switch="));
        l.queued = USEC_PER_MSEC;
        ASSERT_TRUE(strstr(format(&l, b, sizeof(b)), " queued=0.001s first_byte="));
}

static const char *field(const struct iovec *f, size_t n, const char *name, char *out, size_t size) {
        size_t l = strlen(name);
        for (size_t i = 0; i < n; i++)
                if (f[i].iov_len > l && memcmp(f[i].iov_base, name, l) == 0 &&
                    ((char *)f[i].iov_base)[l] == '=') {
                        snprintf(out, size, "%.*s", (int)(f[i].iov_len - l - 1),
                                 (char *)f[i].iov_base + l + 1);
                        return out;
                }
        return NULL;
}

TEST(journal_fields_only_those_known_and_escaped) {
        char b[1024], v[256];
        struct iovec f[ACCESS_LINE_MAX_FIELDS];
        Usage u = {
                .in = 812, .cached = 640, .out = 95, .prompt_n = 172, .prompt_ms = 113.9, .predicted_n = -1};
        RequestRecord l = {.method = "POST",
                        .path = LIT("/v1/chat/completions"),
                        .model = "3090-a\"\nb",
                        .host = "3090",
                        .peer = "p",
                        .status = 200,
                        .duration = 3 * USEC_PER_SEC,
                        .engine = "fork",
                        .key = "team",
                        .session = "7952ffb63566",
                        .queued = 5,
                        .switched = 7,
                        .first_byte = 9,
                        .usage = &u,
                        .request_id = LIT("id\x01")};
        size_t n = access_line_fields(b, sizeof(b), f, &l);

        ASSERT_STREQ(field(f, n, "MODELGATE_HOST", v, sizeof(v)), "3090");
        ASSERT_STREQ(field(f, n, "MODELGATE_ENGINE", v, sizeof(v)), "fork");
        ASSERT_STREQ(field(f, n, "MODELGATE_MODEL", v, sizeof(v)), "3090-a\\x22\\x0ab");
        ASSERT_STREQ(field(f, n, "MODELGATE_STATUS", v, sizeof(v)), "200");
        ASSERT_STREQ(field(f, n, "MODELGATE_REQUEST_ID", v, sizeof(v)), "id\\x01");
        ASSERT_STREQ(field(f, n, "MODELGATE_KEY", v, sizeof(v)), "team");
        ASSERT_STREQ(field(f, n, "MODELGATE_SESSION", v, sizeof(v)), "7952ffb63566");
        ASSERT_STREQ(field(f, n, "MODELGATE_DURATION_USEC", v, sizeof(v)), "3000000");
        ASSERT_STREQ(field(f, n, "MODELGATE_FIRST_BYTE_USEC", v, sizeof(v)), "9");
        ASSERT_STREQ(field(f, n, "MODELGATE_QUEUED_USEC", v, sizeof(v)), "5");
        ASSERT_STREQ(field(f, n, "MODELGATE_SWITCH_USEC", v, sizeof(v)), "7");
        ASSERT_STREQ(field(f, n, "MODELGATE_TOKENS_IN", v, sizeof(v)), "812");
        ASSERT_STREQ(field(f, n, "MODELGATE_TOKENS_CACHED", v, sizeof(v)), "640");
        ASSERT_STREQ(field(f, n, "MODELGATE_TOKENS_OUT", v, sizeof(v)), "95");
        ASSERT_STREQ(field(f, n, "MODELGATE_PREFILL_TPS", v, sizeof(v)), "1510.1");
        ASSERT_TRUE(!field(f, n, "MODELGATE_DECODE_TPS", v, sizeof(v)));
        ASSERT_TRUE(!field(f, n, "MODELGATE_FALLBACK", v, sizeof(v)));

        /* modelgate's own answer: no host, no engine, no usage, no times it did not have */
        l = (RequestRecord){.method = "GET", .path = LIT("/health"), .peer = "p", .status = 200};
        n = access_line_fields(b, sizeof(b), f, &l);
        ASSERT_TRUE(!field(f, n, "MODELGATE_HOST", v, sizeof(v)) &&
                    !field(f, n, "MODELGATE_ENGINE", v, sizeof(v)) &&
                    !field(f, n, "MODELGATE_QUEUED_USEC", v, sizeof(v)) &&
                    !field(f, n, "MODELGATE_TOKENS_IN", v, sizeof(v)));
        ASSERT_STREQ(field(f, n, "MODELGATE_STATUS", v, sizeof(v)), "200");
        ASSERT_TRUE(n <= ACCESS_LINE_MAX_FIELDS);
}

/* rule:upstream-error: the engine's own error inside its 200, with its words, escaped */
TEST(an_engines_error_in_mid_stream) {
        char b[512], fb[1024];
        struct iovec f[ACCESS_LINE_MAX_FIELDS];
        RequestRecord l = {.method = "POST",
                        .path = LIT("/v1/chat/completions"),
                        .model = "3090-laguna-xs",
                        .user_agent = LIT("curl"),
                        .host = "3090",
                        .peer = "127.0.0.1",
                        .status = 200,
                        .bytes = 448,
                        .duration = 52 * USEC_PER_MSEC,
                        .upstream_error_status = 500,
                        .upstream_error = "generation \"failed\"\n"};

        ASSERT_STREQ(format(&l, b, sizeof(b)),
                     "POST /v1/chat/completions model=\"3090-laguna-xs\" host=3090 status=200 bytes=448 "
                     "dur=0.052s from=127.0.0.1 ua=\"curl\" upstream_error=500 "
                     "upstream_message=\"generation \\x22failed\\x22\\x0a\"");
        size_t n = access_line_fields(fb, sizeof(fb), f, &l);
        bool seen = false;
        for (size_t i = 0; i < n; i++)
                if (f[i].iov_len == strlen("MODELGATE_UPSTREAM_ERROR=500") &&
                    memcmp(f[i].iov_base, "MODELGATE_UPSTREAM_ERROR=500", f[i].iov_len) == 0)
                        seen = true;
        ASSERT_TRUE(seen);
}

TESTS_MAIN
