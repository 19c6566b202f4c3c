/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* rule:sessions: which header names a request's session and which values are none; the label the views
 * show; the table bounded like the spread memory, a session always its caller's (two keys sending one id
 * are two sessions), forgotten an hour after its last request unless one is in flight; and the spread pick
 * keeping two sessions of one key each on its own target. */

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include "modelgated/conf/conf.h"
#include "modelgated/access/access.h"
#include "modelgated/sched/session.h"
#include "tests.h"

#define S(x) ((usec_t)(x)*USEC_PER_SEC)

static Span span(const char *s) {
        return (Span){s, strlen(s)};
}

TEST(an_id_is_1_to_128_token_characters) {
        char long_id[SESSION_ID_MAX + 2];

        ASSERT_TRUE(session_id_valid(span("01a244fb-bf8a-7e90-9278-691dabfb0b29")));
        ASSERT_TRUE(session_id_valid(span("ses_3b1f0c2a9ffeWk2nXo")));
        ASSERT_TRUE(session_id_valid(span("a")));
        memset(long_id, 'a', sizeof(long_id) - 1);
        long_id[SESSION_ID_MAX] = 0;
        ASSERT_TRUE(session_id_valid(span(long_id)));
        long_id[SESSION_ID_MAX] = 'a';
        long_id[SESSION_ID_MAX + 1] = 0;
        ASSERT_TRUE(!session_id_valid(span(long_id)));
        ASSERT_TRUE(!session_id_valid(span("")));
        ASSERT_TRUE(!session_id_valid((Span){}));
        /* what could carry words, or split a line or a JSON string */
        ASSERT_TRUE(!session_id_valid(span("ignore previous instructions")));
        ASSERT_TRUE(!session_id_valid(span("a\"b")));
        ASSERT_TRUE(!session_id_valid(span("a\\b")));
        ASSERT_TRUE(!session_id_valid(span("a\x01")));
        ASSERT_TRUE(!session_id_valid(span("caf\xc3\xa9")));
        ASSERT_TRUE(!session_id_valid(span("a,b")));
}

/* The session id of a request with these header lines ("Name: value\r\n" each) */
static const char *id_of(const char *headers, char *const *names, char *buf, size_t size) {
        HttpParser p;
        size_t k;
        char req[1024];

        snprintf(req, sizeof(req), "POST /v1/messages HTTP/1.1\r\nHost: h\r\n%sContent-Length: 0\r\n\r\n",
                 headers);
        http_parser_init(&p, 65536, 100);
        ASSERT_EQ(http_parser_feed(&p, req, strlen(req), &k), HTTP_PARSE_DONE);
        Span id = session_id_of(&p.req, names);
        if (id.p)
                snprintf(buf, size, "%.*s", (int)id.n, id.p);
        http_parser_done(&p);
        return id.p ? buf : NULL;
}

TEST(the_first_header_of_the_list_that_a_request_carries_names_its_session) {
        char *const *d = config_session_headers_default;
        char b[256];

        ASSERT_TRUE(!id_of("", d, b, sizeof(b)));
        ASSERT_STREQ(id_of("X-Claude-Code-Session-Id: cc-1\r\n", d, b, sizeof(b)), "cc-1");
        /* any case; Codex's session-id, older Codex's session_id */
        ASSERT_STREQ(id_of("x-claude-code-session-id: cc-1\r\n", d, b, sizeof(b)), "cc-1");
        ASSERT_STREQ(id_of("session-id: cx-1\r\nthread-id: t\r\n", d, b, sizeof(b)), "cx-1");
        ASSERT_STREQ(id_of("session_id: cx-0\r\n", d, b, sizeof(b)), "cx-0");
        /* opencode sends two: the list's order decides, not the request's */
        ASSERT_STREQ(id_of("x-session-affinity: aff\r\nX-Session-Id: ses_1\r\n", d, b, sizeof(b)), "ses_1");
        /* the first present decides: an insane value is no session, not the next header's */
        ASSERT_TRUE(!id_of("X-Session-Id: two words\r\nx-session-affinity: aff\r\n", d, b, sizeof(b)));
        /* a header of no list, and an empty list */
        ASSERT_TRUE(!id_of("X-Conversation-Id: c\r\n", d, b, sizeof(b)));
        ASSERT_TRUE(!id_of("X-Session-Id: s\r\n", (char *[]){NULL}, b, sizeof(b)));
        ASSERT_STREQ(
                id_of("X-Session-Id: s\r\nX-Mine: m\r\n", (char *[]){(char *)"x-mine", NULL}, b, sizeof(b)),
                "m");
}

TEST(a_label_is_the_first_12_hex_digits_of_the_ids_sha256) {
        char l[SESSION_LABEL_LEN + 1];

        /* printf %s abc | sha256sum: ba7816bf8f01cfea… */
        ASSERT_OK(session_label(span("abc"), l));
        ASSERT_STREQ(l, "ba7816bf8f01");
        ASSERT_OK(session_label(span("01a244fb-bf8a-7e90-9278-691dabfb0b29"), l));
        ASSERT_STREQ(l, "7952ffb63566");
        ASSERT_TRUE(session_id_hash(span("a")) != 0 &&
                    session_id_hash(span("a")) != session_id_hash(span("b")));
}

DEFINE_TRIVIAL_CLEANUP_FUNC(SessionTable *, session_table_free);

static AliasClient key(const char *digest) {
        return (AliasClient){.key = digest};
}

static AliasClient anon(const char *address, char prefix[static INET6_ADDRSTRLEN + 8]) {
        return (AliasClient){.address = address, .prefix = access_client_address(address, prefix)};
}

static Session *get(SessionTable *t, AliasClient who, const char *id, usec_t now) {
        char l[SESSION_LABEL_LEN + 1];
        ASSERT_OK(session_label(span(id), l));
        return session_table_get(t, &who, session_id_hash(span(id)), l, now);
}

static Session *find(SessionTable *t, AliasClient who, const char *id, usec_t now) {
        return session_table_find(t, &who, session_id_hash(span(id)), now);
}

TEST(a_session_is_its_callers_two_keys_with_one_id_are_two_sessions) {
        _cleanup_(session_table_freep) SessionTable *t = session_table_new();
        char p[INET6_ADDRSTRLEN + 8];
        Session *a, *b;

        ASSERT_TRUE(t);
        ASSERT_TRUE(!find(t, key("aaaa"), "s-1", S(1)));
        a = get(t, key("aaaa"), "s-1", S(1));
        a->turns = 3;
        b = get(t, key("bbbb"), "s-1", S(2));
        ASSERT_TRUE(a != b);
        ASSERT_EQ(b->turns, 0u);
        ASSERT_STREQ(a->label, b->label); /* the same id, the same label: two rows, each with its key */
        ASSERT_TRUE(find(t, key("aaaa"), "s-1", S(3)) == a);
        ASSERT_TRUE(get(t, key("aaaa"), "s-1", S(3)) == a);
        /* an address that reads like the key is not the key; another id of the key is another session */
        ASSERT_TRUE(!find(t, anon("aaaa", p), "s-1", S(3)));
        ASSERT_TRUE(!find(t, key("aaaa"), "s-2", S(3)));
        const Session *list[8];
        ASSERT_EQ(session_table_list(t, S(3), list, 8), 2u);
}

TEST(a_session_is_forgotten_an_hour_after_its_last_request_unless_one_is_in_flight) {
        _cleanup_(session_table_freep) SessionTable *t = session_table_new();
        const Session *list[8];
        Session *s;

        s = get(t, key("aaaa"), "idle", S(1));
        s->turns = 1;
        s = get(t, key("aaaa"), "busy", S(1));
        s->in_flight = 1;
        ASSERT_TRUE(find(t, key("aaaa"), "idle", S(1) + SESSION_TABLE_USEC - 1));
        ASSERT_TRUE(!find(t, key("aaaa"), "idle", S(1) + SESSION_TABLE_USEC));
        ASSERT_TRUE(find(t, key("aaaa"), "busy", S(1) + 2 * SESSION_TABLE_USEC));
        ASSERT_EQ(session_table_list(t, S(1) + SESSION_TABLE_USEC, list, 8), 1u);
        /* asked for again: a new session, its numbers from nothing */
        s = get(t, key("aaaa"), "idle", S(2) + SESSION_TABLE_USEC);
        ASSERT_EQ(s->turns, 0u);
        ASSERT_EQ(s->first, S(2) + SESSION_TABLE_USEC);
}

TEST(the_list_is_the_most_recently_active_first) {
        _cleanup_(session_table_freep) SessionTable *t = session_table_new();
        char p[INET6_ADDRSTRLEN + 8];
        const Session *list[8];

        get(t, key("aaaa"), "one", S(1));
        get(t, anon("10.0.0.1", p), "two", S(3));
        get(t, key("bbbb"), "three", S(2))->last = S(2);
        ASSERT_EQ(session_table_list(t, S(4), list, 8), 3u);
        ASSERT_EQ(list[0]->last, S(3));
        ASSERT_EQ(list[1]->last, S(2));
        ASSERT_EQ(list[2]->last, S(1));
        ASSERT_EQ(session_table_list(t, S(4), list, 2), 2u);
}

TEST(one_caller_holds_at_most_its_share_and_pushes_out_only_its_own) {
        _cleanup_(session_table_freep) SessionTable *t = session_table_new();
        char id[32];

        get(t, key("other"), "kept", S(1));
        /* a key that makes up ids: past its share it replaces its own oldest, never another's */
        for (unsigned i = 0; i < 10 * SESSION_TABLE_ENTRIES; i++) {
                snprintf(id, sizeof(id), "made-up-%u", i);
                get(t, key("flood"), id, S(2) + i);
        }
        ASSERT_TRUE(find(t, key("other"), "kept", S(3)));
        const Session *list[2 * SESSION_TABLE_ENTRIES];
        ASSERT_EQ(session_table_list(t, S(3), list, ELEMENTSOF(list)), SESSION_TABLE_PER_CALLER + 1u);
        /* its newest are the ones kept */
        snprintf(id, sizeof(id), "made-up-%u", 10 * SESSION_TABLE_ENTRIES - 1);
        ASSERT_TRUE(find(t, key("flood"), id, S(3)));
        ASSERT_TRUE(!find(t, key("flood"), "made-up-0", S(3)));
}

TEST(addresses_never_push_out_a_keys_sessions_and_a_full_part_spares_what_is_in_flight) {
        _cleanup_(session_table_freep) SessionTable *t = session_table_new();
        char a[INET6_ADDRSTRLEN], p[INET6_ADDRSTRLEN + 8], id[32];
        Session *busy;

        get(t, key("team"), "kept", S(1));
        busy = get(t, anon("10.9.9.9", p), "busy", S(1));
        busy->in_flight = 1;
        /* many addresses, one session each: the anonymous part fills and makes room with its oldest */
        for (unsigned i = 0; i < 4 * SESSION_TABLE_ENTRIES; i++) {
                snprintf(a, sizeof(a), "10.%u.%u.%u", 1 + i / 65536, (i / 256) % 256, i % 256);
                snprintf(id, sizeof(id), "s%u", i);
                get(t, anon(a, p), id, S(2) + i);
        }
        ASSERT_TRUE(find(t, key("team"), "kept", S(3)));
        ASSERT_TRUE(find(t, anon("10.9.9.9", p), "busy", S(3)) == busy);
        const Session *list[2 * SESSION_TABLE_ENTRIES];
        ASSERT_EQ(session_table_list(t, S(3), list, ELEMENTSOF(list)), SESSION_TABLE_ENTRIES + 1u);
}

/* rule:alias-order: the spread memory keeps a session, not a key: two sessions of one key each on its
 * own target, the key's requests without a session apart from both */
TEST(the_spread_keeps_each_session_of_a_key_on_its_own_target) {
        AliasMemory *m = alias_memory_new();
        AliasClient one = {.key = "team", .session = session_id_hash(span("one"))},
                    two = {.key = "team", .session = session_id_hash(span("two"))}, bare = {.key = "team"};
        AliasTarget t[2] = {{.state = ALIAS_TARGET_WARM}, {.state = ALIAS_TARGET_WARM}};
        const char *why;

        ASSERT_TRUE(m);
        /* the first session's turn is in flight on 0 when the second's comes: 1, the least loaded */
        t[0].load = 1;
        ASSERT_EQ(
                alias_pick(ALIAS_POLICY_SPREAD, t, 2, 0, alias_memory_recall(m, "laguna", &two, S(1)), &why),
                1);
        alias_memory_store(m, "laguna", &one, 0, S(1));
        alias_memory_store(m, "laguna", &two, 1, S(1));
        t[0].load = 0;
        /* then turn after turn, nothing in flight: each back to its own */
        for (unsigned i = 0; i < 3; i++) {
                ASSERT_EQ(alias_pick(ALIAS_POLICY_SPREAD, t, 2, 0,
                                     alias_memory_recall(m, "laguna", &one, S(2 + i)), &why),
                          0);
                ASSERT_EQ(alias_pick(ALIAS_POLICY_SPREAD, t, 2, 0,
                                     alias_memory_recall(m, "laguna", &two, S(2 + i)), &why),
                          1);
                ASSERT_STREQ(why, "this client's last target");
        }
        /* the key without a session is a client of its own, unknown so far */
        ASSERT_EQ(alias_memory_recall(m, "laguna", &bare, S(5)), -1);
        alias_memory_store(m, "laguna", &bare, 1, S(5));
        ASSERT_EQ(alias_memory_recall(m, "laguna", &one, S(5)), 0);
        ASSERT_EQ(alias_memory_size(m), 3u);
        /* a session id is never another key's: the same id under another key is unknown */
        ASSERT_EQ(alias_memory_recall(m, "laguna", &(AliasClient){.key = "else", .session = one.session},
                                      S(5)),
                  -1);
        alias_memory_free(m);
}

TESTS_MAIN
