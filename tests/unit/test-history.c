/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* rule:history: the fields an access line writes are what a start reads back into /activity's ring (the
 * same entry, the client's words escaped and unescaped, a hidden model hidden); what is not an entry of the
 * ring is none; the history file keeps its whole records and cuts what a kill left half written. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <systemd/sd-event.h>
#include <unistd.h>

#include "modelgated/records/activity.h"
#include "modelgated/records/history.h"
#include "modelgated/api/access-line.h"
#include "shared/buffer.h"
#include "shared/fileio.h"
#include "tests.h"

#define str_span(s) ((Span){(s), sizeof(s) - 1})

/* The line's fields as the parser gets them from the journal */
static size_t fields_of(const RequestRecord *l, char *buf, size_t size, Span *spans) {
        struct iovec f[ACCESS_LINE_MAX_FIELDS];
        size_t n = access_line_fields(buf, size, f, l);

        for (size_t i = 0; i < n; i++)
                spans[i] = (Span){f[i].iov_base, f[i].iov_len};
        return n;
}

static Usage usage_of(int64_t in, int64_t cached, int64_t out) {
        Usage u = {.in = in,
                   .cached = cached,
                   .out = out,
                   .prompt_n = 40,
                   .prompt_ms = 100,
                   .predicted_n = 5,
                   .predicted_ms = 250};
        return u;
}

TEST(fields_of_a_line_make_its_ring_entry_again) {
        Usage u = usage_of(50, 10, 5);
        RequestRecord l = {
                .method = "POST",
                .model = "3090-laguna\"xs",
                .path = str_span("/v1/chat/completions"),
                .host = "3090",
                .peer = "127.0.0.1",
                .status = 200,
                .duration = 1234567,
                .key = "k-abc",
                .session = "0123456789ab",
                .engine = "mainline",
                .first_byte = 456789,
                .queued = 2000,
                .switched = 1500000,
                .usage = &u,
                .cut = true,
                .request_id = str_span("req \"1\""),
                .api = "chat",
                .stream = true,
                .done_at = 1700000000123456,
                .upstream_error_status = 500,
                .upstream_error = "generation \"failed\"",
        };
        char buf[2048];
        Span f[ACCESS_LINE_MAX_FIELDS];
        HistoryEntry e;
        size_t n = fields_of(&l, buf, sizeof(buf), f);

        ASSERT_OK(history_entry_parse(f, n, /* received= */ 1, &e));
        ASSERT_EQ(e.r.phase, ACTIVITY_DONE);
        /* rule:upstream-error: the engine's error inside its 200, its words unescaped again */
        ASSERT_EQ(e.r.upstream_error_status, 500);
        ASSERT_STREQ(e.r.upstream_error, "generation \"failed\"");
        ASSERT_STREQ(e.r.model, "3090-laguna\"xs"); /* escaped in the field, the client's again */
        ASSERT_TRUE(e.r.id.n == 7 && memcmp(e.r.id.p, "req \"1\"", 7) == 0);
        ASSERT_STREQ(e.r.host, "3090");
        ASSERT_STREQ(e.r.engine, "mainline");
        ASSERT_STREQ(e.r.key, "k-abc");
        ASSERT_STREQ(e.r.session, "0123456789ab");
        ASSERT_TRUE(e.r.fallback == NULL);
        ASSERT_STREQ(e.r.api, "chat");
        ASSERT_TRUE(e.r.stream && e.r.cut);
        ASSERT_EQ(e.r.status, 200);
        ASSERT_EQ(e.r.duration_ms, 1234);
        ASSERT_EQ(e.r.first_byte_ms, 456);
        ASSERT_EQ(e.r.queued_usec, 2000u);
        ASSERT_EQ(e.r.switch_usec, 1500000u);
        ASSERT_EQ(e.r.tokens_in, 50);
        ASSERT_EQ(e.r.tokens_cached, 10);
        ASSERT_EQ(e.r.tokens_prefilled, 40);
        ASSERT_EQ(e.r.tokens_out, 5);
        ASSERT_TRUE(e.r.prefill_tps == 400.0 && e.r.decode_tps == 20.0);
        /* its end as /activity showed it, not when the journal got it; its start the duration before */
        ASSERT_EQ(e.r.t, 1700000000123456u);
        ASSERT_EQ(e.r.started, 1700000000123456u - 1234567u);
        ASSERT_EQ(e.r.realtime, 0u);
}

TEST(a_hidden_model_stays_hidden_and_unknown_numbers_stay_unknown) {
        RequestRecord l = {
                .method = "POST",
                .model = "gpt-*",
                .path = str_span("/v1/messages"),
                .host = "3090",
                .peer = "p",
                .status = 423,
                .duration = 2000,
                .request_id = str_span("abc"),
                .api = "messages",
                .model_hidden = true,
        };
        char buf[2048];
        Span f[ACCESS_LINE_MAX_FIELDS];
        HistoryEntry e;
        size_t n = fields_of(&l, buf, sizeof(buf), f);

        /* no MODELGATE_DONE_REALTIME_USEC: the journal's own time */
        n = n - 1;
        ASSERT_OK(history_entry_parse(f, n, 1700000000000000, &e));
        ASSERT_TRUE(e.r.model == NULL); /* rule:no-text-in-activity */
        ASSERT_STREQ(e.r.api, "messages");
        ASSERT_TRUE(!e.r.stream && !e.r.cut);
        ASSERT_EQ(e.r.status, 423);
        ASSERT_EQ(e.r.first_byte_ms, -1);
        ASSERT_EQ(e.r.tokens_in, -1);
        ASSERT_EQ(e.r.tokens_out, -1);
        ASSERT_TRUE(e.r.prefill_tps < 0 && e.r.decode_tps < 0);
        ASSERT_EQ(e.r.t, 1700000000000000u);
}

TEST(what_is_not_a_ring_entry_is_none) {
        HistoryEntry e;
        Span older[] = {str_span("MODELGATE_HOST=3090"), str_span("MODELGATE_STATUS=200"),
                        str_span("MODELGATE_DURATION_USEC=5")};
        Span bad_number[] = {str_span("MODELGATE_API=chat"), str_span("MODELGATE_STATUS=2x0"),
                             str_span("MODELGATE_DURATION_USEC=5")};
        Span no_status[] = {str_span("MODELGATE_API=chat"), str_span("MODELGATE_DURATION_USEC=5")};
        Span negative[] = {str_span("MODELGATE_API=chat"), str_span("MODELGATE_STATUS=200"),
                           str_span("MODELGATE_DURATION_USEC=-5")};
        Span unknown_api[] = {str_span("MODELGATE_API=<script>"), str_span("MODELGATE_STATUS=200"),
                              str_span("MODELGATE_DURATION_USEC=5"), str_span("MODELGATE_SOMETHING_NEW=1")};

        /* an older modelgate's line, or a request that reached no host: no MODELGATE_API= */
        ASSERT_EQ(history_entry_parse(older, ELEMENTSOF(older), 1, &e), -EBADMSG);
        ASSERT_EQ(history_entry_parse(bad_number, ELEMENTSOF(bad_number), 1, &e), -EBADMSG);
        ASSERT_EQ(history_entry_parse(no_status, ELEMENTSOF(no_status), 1, &e), -EBADMSG);
        ASSERT_EQ(history_entry_parse(negative, ELEMENTSOF(negative), 1, &e), -EBADMSG);
        ASSERT_EQ(history_entry_parse(NULL, 0, 1, &e), -EBADMSG);
        /* a name the ring does not know is "other", and fields of a later modelgate are passed over */
        ASSERT_OK(history_entry_parse(unknown_api, ELEMENTSOF(unknown_api), 1, &e));
        ASSERT_STREQ(e.r.api, "other");
}

static char *snapshot(Activity *a) {
        _cleanup_(buffer_done) Buffer b = {};

        ASSERT_OK(activity_render_snapshot(a, NULL, 0, &b));
        ASSERT_OK(buffer_append_str(&b, ""));
        char *s = strndup(buffer_peek(&b), buffer_size(&b));
        ASSERT_TRUE(s);
        return s;
}

static void append_one(HistoryFile *f, const char *id, usec_t done_at) {
        RequestRecord l = {.method = "POST",
                        .model = "m",
                        .path = str_span("/v1/chat/completions"),
                        .host = "3090",
                        .peer = "p",
                        .status = 200,
                        .duration = 1000,
                        .request_id = (Span){id, strlen(id)},
                        .api = "chat",
                        .done_at = done_at};
        struct iovec v[ACCESS_LINE_MAX_FIELDS];
        char buf[2048];

        history_file_append(f, v, access_line_fields(buf, sizeof(buf), v, &l));
}

TEST(the_history_file_keeps_whole_records_and_cuts_a_torn_one) {
        char dir[] = "/tmp/test-history-XXXXXX", path[64], old[80];
        _cleanup_free_ char *text = NULL, *snap = NULL;
        sd_event *event = NULL;
        Activity *a = NULL;
        HistoryFile *f = NULL;
        size_t size;
        usec_t now = now_usec(CLOCK_REALTIME);

        ASSERT_TRUE(mkdtemp(dir));
        snprintf(path, sizeof(path), "%s/history", dir);
        snprintf(old, sizeof(old), "%s/history.old", dir);
        ASSERT_OK(sd_event_new(&event));
        ASSERT_OK(activity_new(event, &a));
        ASSERT_OK(history_file_open(path, a, now - HISTORY_MAX_AGE, &f));
        append_one(f, "too-old", now - HISTORY_MAX_AGE - USEC_PER_SEC);
        append_one(f, "first", now - 2);
        append_one(f, "second", now - 1);
        f = history_file_free(f);
        /* a write the machine cut halfway */
        int fd = open(path, O_WRONLY | O_APPEND);
        ASSERT_TRUE(fd >= 0);
        ASSERT_TRUE(write(fd, "MODELGATE_API=chat\nMODELGATE_STA", 32) == 32);
        close(fd);
        activity_free(a);

        ASSERT_OK(activity_new(event, &a));
        ASSERT_OK(history_file_open(path, a, now - HISTORY_MAX_AGE, &f));
        snap = snapshot(a);
        ASSERT_TRUE(!strstr(snap, "too-old"));
        ASSERT_TRUE(strstr(snap, "\"id\":\"first\"") && strstr(snap, "\"id\":\"second\""));
        ASSERT_TRUE(strstr(snap, "\"id\":\"first\"") < strstr(snap, "\"id\":\"second\"")); /* oldest first */
        /* cut at the last whole record: the next one is whole after it */
        append_one(f, "third", now);
        ASSERT_OK(read_full_file(path, &text, &size));
        ASSERT_TRUE(!strstr(text, "MODELGATE_STA\n") && !strstr(text, "MODELGATE_STAMODELGATE"));
        ASSERT_TRUE(size >= 2 && memcmp(text + size - 2, "\n\n", 2) == 0);

        /* bounded: ACTIVITY_RECENT records make it the old file, and a start reads both */
        for (unsigned i = 0; i < ACTIVITY_RECENT; i++)
                append_one(f, "many", now);
        struct stat st;
        ASSERT_OK(stat(old, &st));
        ASSERT_OK(stat(path, &st));
        ASSERT_TRUE(st.st_size > 0 && st.st_size < 4096);
        f = history_file_free(f);
        activity_free(a);
        ASSERT_OK(activity_new(event, &a));
        ASSERT_OK(history_file_open(path, a, now - HISTORY_MAX_AGE, &f));
        free(snap);
        snap = snapshot(a);
        ASSERT_TRUE(!strstr(snap, "\"id\":\"first\"") && strstr(snap, "\"id\":\"many\""));
        history_file_free(f);
        activity_free(a);
        sd_event_unref(event);
        unlink(path);
        unlink(old);
        rmdir(dir);
}

TESTS_MAIN
