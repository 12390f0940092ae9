/*
 * tests/core/test_hostile_server.c — a fake peer on loopback that passes
 * the open handshake, then answers every command with bytes chosen by the
 * test: a broken or hostile server, not Redis. Replies of the wrong shape
 * must give clear errors, never a crash, a hang or a huge allocation.
 */
#include <string.h>

#include <criterion/criterion.h>

#include "support.h"

static int inspect_against(const char *reply, size_t len, wk_lock_state *st, char *msg, size_t n)
{
    wk_test_peer p;
    cr_assert_eq(wk_test_peer_start(&p, WK_TEST_HELLO_REPLY, sizeof(WK_TEST_HELLO_REPLY) - 1,
                                    reply, len),
                 0);
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = p.url;
    o.capability = wk_cap_read_only();
    o.command_timeout_ms = 500;
    wk_db *db;
    cr_assert_eq(wk_db_open(&db, &o, NULL, 0), WK_OK);
    wk_entity lock = WK_LOCK_ENTITY("hostile", 1000);
    int rc = wk_lock_inspect(wk_db_processor(db), &lock, wk_name_str("x"), st);
    snprintf(msg, n, "%s", wk_db_errmsg(db));
    wk_db_close(db);
    wk_test_peer_stop(&p);
    return rc;
}

#define INSPECT(lit, st, msg) inspect_against(lit, sizeof(lit) - 1, st, msg, sizeof(msg))

Test(hostile_server, huge_array_header_is_refused_not_allocated, .timeout = 20)
{
    wk_lock_state st;
    char msg[512];
    int rc = INSPECT("*233333333\r\n:5\r\n", &st, msg);
    cr_assert(rc == WK_ENOMEM || rc == WK_EPROTO, "got %s: %s", wk_err_name(rc), msg);
}

Test(hostile_server, wrong_reply_types_are_eproto, .timeout = 20)
{
    wk_lock_state st;
    char msg[512];
    cr_assert_eq(INSPECT("$5\r\nhello\r\n", &st, msg), WK_EPROTO);
    cr_assert(strstr(msg, "lock.inspect"), "%s", msg);
    cr_assert_eq(INSPECT("*0\r\n", &st, msg), WK_EPROTO);
    cr_assert_eq(INSPECT("$-1\r\n", &st, msg), WK_EPROTO);
    cr_assert_eq(INSPECT(":42\r\n", &st, msg), WK_OK, "a good reply still parses");
    cr_assert(st.held && st.ttl_ms == 42);
}

Test(hostile_server, garbage_is_a_protocol_error, .timeout = 20)
{
    wk_lock_state st;
    char msg[512];
    int rc = INSPECT("!!!! not resp\r\n", &st, msg);
    cr_assert_eq(rc, WK_EPROTO, "got %s: %s", wk_err_name(rc), msg);
}

Test(hostile_server, silence_is_a_timeout, .timeout = 20)
{
    wk_lock_state st;
    char msg[512];
    int64_t t0 = wk_test_now_ms();
    int rc = inspect_against("", 0, &st, msg, sizeof(msg));
    cr_assert_eq(rc, WK_ETIMEDOUT, "got %s: %s", wk_err_name(rc), msg);
    cr_assert_lt(wk_test_now_ms() - t0, 5000);
}
