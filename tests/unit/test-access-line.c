/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "modelgated/rules/access-line.h"
#include "tests.h"

#define LIT(s) ((Span){"" s, sizeof(s) - 1})

static const char *format(const AccessLine *l, char *buf, size_t size) {
        size_t n = access_line_format(buf, size - 1, l);
        buf[n] = 0;
        return buf;
}

TEST(a_proxied_request) {
        char b[512];
        AccessLine l = {.method = "POST",
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
        AccessLine l = {.method = "POST",
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

TEST(early_answer_key_fallback_and_note) {
        char b[512];
        AccessLine l = {.method = "POST",
                        .path = LIT("/v1/messages"),
                        .model = "h-m",
                        .host = "h",
                        .peer = "p",
                        .status = 200,
                        .early = true,
                        .error_status = 502,
                        .key = "k:ab12",
                        .fallback = "cloud",
                        .note = "cut=client"};

        ASSERT_TRUE(strstr(format(&l, b, sizeof(b)),
                           "\" early=200 error=502 key=k:ab12 via=fallback/cloud cut=client"));
}

TEST(a_line_longer_than_its_buffer_is_cut_not_overrun) {
        char b[33];
        AccessLine l = {.method = "GET", .path = LIT("/a-rather-long-path-that-does-not-fit"), .peer = "p"};

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
        AccessLine l = {.method = "POST",
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

TESTS_MAIN
