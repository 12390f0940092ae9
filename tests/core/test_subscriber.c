/*
 * tests/core/test_subscriber.c — the Pub/Sub subscriber connection
 * (core/subscriber.h) against a fake peer that puts messages in the same
 * write as a confirmation or a reply: none may be lost or reordered.
 */
#include <criterion/criterion.h>
#include <string.h>

#include <wakuwaku/wakuwaku.h>

#include "core/subscriber.h"
#include "support.h"

/* One message on channel `c` ("ch") or `c2` ("ch2"), the payload a
 * one-letter string. */
#define MSG_CH(p) "*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$1\r\n" p "\r\n"
#define MSG_CH2(p) "*3\r\n$7\r\nmessage\r\n$3\r\nch2\r\n$1\r\n" p "\r\n"
#define SUBSCRIBED(ch, n) "*3\r\n$9\r\nsubscribe\r\n$" ch "\r\n:" n "\r\n"
#define PONG "*2\r\n$4\r\npong\r\n$0\r\n\r\n"

/* The peer's answers, read by read: the handle's handshake, the
 * subscriber's, then per test. */
static const char *script[8];

static void open_against(wk_test_peer *p, const char *const *replies, size_t n, wk_db **db,
                         wk__subscriber **s)
{
    script[0] = script[1] = WK_TEST_HELLO_REPLY;
    for (size_t i = 0; i < n; i++)
        script[2 + i] = replies[i];
    cr_assert_eq(wk_test_peer_start_many(p, NULL, 0, "", 0, true), 0);
    wk_test_peer_script(p, script, 2 + n);
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = p->url;
    o.capability = wk_cap_read_only();
    o.command_timeout_ms = 1000;
    char err[256] = "";
    cr_assert_eq(wk_db_open(db, &o, err, sizeof(err)), WK_OK, "%s", err);
    cr_assert_eq(wk__subscriber_open(s, *db, 0, err, sizeof(err)), WK_OK, "%s", err);
}

static void close_all(wk_test_peer *p, wk_db *db, wk__subscriber *s)
{
    wk__subscriber_close(s);
    wk_db_close(db);
    wk_test_peer_stop(p);
}

/* The next event is a message with payload `want`. */
static void expect_message(wk__subscriber *s, const char *want)
{
    wk__sub_event ev;
    int rc = wk__subscriber_poll(s, 1000, -1, &ev);
    cr_assert_eq(rc, WK_OK, "%s: %s", wk_err_name(rc), wk__subscriber_errmsg(s));
    cr_assert_eq(ev.type, WK__SUB_MESSAGE, "expected message %s, got event %d", want, ev.type);
    cr_assert(ev.len == strlen(want) && memcmp(ev.data, want, ev.len) == 0,
              "expected message %s, got %.*s", want, (int)ev.len, ev.data);
}

Test(subscriber, messages_in_the_read_of_the_confirmation_come_in_order, .timeout = 30)
{
    static const char *const replies[] = {SUBSCRIBED("2\r\nch", "1") MSG_CH("a") MSG_CH("b")};
    wk_test_peer p;
    wk_db *db;
    wk__subscriber *s;
    open_against(&p, replies, 1, &db, &s);
    int rc = wk__subscriber_subscribe(s, "ch", 2);
    cr_assert_eq(rc, WK_OK, "%s: %s", wk_err_name(rc), wk__subscriber_errmsg(s));
    expect_message(s, "a");
    expect_message(s, "b");
    close_all(&p, db, s);
}

Test(subscriber, messages_around_a_pong_keep_their_order, .timeout = 30)
{
    static const char *const replies[] = {SUBSCRIBED("2\r\nch", "1"),
                                          MSG_CH("a") PONG MSG_CH("b")};
    wk_test_peer p;
    wk_db *db;
    wk__subscriber *s;
    open_against(&p, replies, 2, &db, &s);
    cr_assert_eq(wk__subscriber_subscribe(s, "ch", 2), WK_OK, "%s", wk__subscriber_errmsg(s));
    cr_assert_eq(wk__subscriber_ping(s), WK_OK, "%s", wk__subscriber_errmsg(s));
    expect_message(s, "a");
    wk__sub_event ev;
    cr_assert_eq(wk__subscriber_poll(s, 1000, -1, &ev), WK_OK, "%s", wk__subscriber_errmsg(s));
    cr_assert_eq(ev.type, WK__SUB_PONG, "got event %d", ev.type);
    expect_message(s, "b");
    close_all(&p, db, s);
}

Test(subscriber, a_message_before_a_second_confirmation_is_kept, .timeout = 30)
{
    /* Subscribed to ch, a message of ch comes before the confirmation of
     * ch2, in the same read; one of ch2 right after it. */
    static const char *const replies[] = {SUBSCRIBED("2\r\nch", "1"),
                                          MSG_CH("a") SUBSCRIBED("3\r\nch2", "2") MSG_CH2("b")};
    wk_test_peer p;
    wk_db *db;
    wk__subscriber *s;
    open_against(&p, replies, 2, &db, &s);
    cr_assert_eq(wk__subscriber_subscribe(s, "ch", 2), WK_OK, "%s", wk__subscriber_errmsg(s));
    int rc = wk__subscriber_subscribe(s, "ch2", 3);
    cr_assert_eq(rc, WK_OK, "%s: %s", wk_err_name(rc), wk__subscriber_errmsg(s));
    expect_message(s, "a");
    expect_message(s, "b");
    close_all(&p, db, s);
}
