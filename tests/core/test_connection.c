/*
 * tests/core/test_connection.c — connecting, timeouts, reconnects, AUTH
 * and SELECT, each against a private redis-server the test controls.
 */
#include <signal.h>
#include <string.h>

#include <criterion/criterion.h>

#include "support.h"

static wk_db *open_with(const char *url, int command_timeout_ms, int *rc_out, char *err, size_t n)
{
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = url;
    o.capability = wk_cap_read_write();
    o.connect_timeout_ms = 500;
    o.command_timeout_ms = command_timeout_ms;
    wk_db *db = NULL;
    *rc_out = wk_db_open(&db, &o, err, n);
    return db;
}

Test(connection, server_down_is_eio_without_hang, .timeout = 30)
{
    wk_test_server s;
    cr_assert_eq(wk_test_server_start(&s, NULL), 0);
    char url[64];
    snprintf(url, sizeof(url), "%s", s.url);
    int rc;
    char err[256];
    wk_db *db = open_with(url, 500, &rc, err, sizeof(err));
    cr_assert_eq(rc, WK_OK, "%s", err);
    wk_test_server_stop(&s);

    wk_entity lock = WK_LOCK_ENTITY("down", 1000);
    wk_token t;
    bool got;
    int64_t start = wk_test_now_ms();
    rc = wk_lock_try(wk_db_processor(db), &lock, wk_name_str("x"), &t, &got);
    cr_assert(wk_is_connection_error(rc), "got %s", wk_err_name(rc));
    rc = wk_lock_try(wk_db_processor(db), &lock, wk_name_str("x"), &t, &got);
    cr_assert_eq(rc, WK_EIO, "reconnect to a dead server: %s", wk_err_name(rc));
    cr_assert(strstr(wk_db_errmsg(db), "cannot connect"), "%s", wk_db_errmsg(db));
    cr_assert_lt(wk_test_now_ms() - start, 5000, "no hang");
    wk_db_close(db);

    /* Opening against a dead server fails cleanly too. */
    db = open_with(url, 500, &rc, err, sizeof(err));
    cr_assert_eq(rc, WK_EIO);
    cr_assert_null(db);
    cr_assert(strlen(err) > 0);
}

Test(connection, stalled_server_times_out_then_recovers, .timeout = 30)
{
    wk_test_server s;
    cr_assert_eq(wk_test_server_start(&s, NULL), 0);
    int rc;
    char err[256];
    wk_db *db = open_with(s.url, 300, &rc, err, sizeof(err));
    cr_assert_eq(rc, WK_OK, "%s", err);
    wk_entity lock = WK_LOCK_ENTITY("stall", 5000);
    wk_lock_state st;
    kill(s.pid, SIGSTOP);
    int64_t start = wk_test_now_ms();
    rc = wk_lock_inspect(wk_db_processor(db), &lock, wk_name_str("x"), &st);
    int64_t took = wk_test_now_ms() - start;
    cr_assert_eq(rc, WK_ETIMEDOUT, "got %s: %s", wk_err_name(rc), wk_db_errmsg(db));
    cr_assert_lt(took, 3000, "bounded by the command timeout, took %lld ms", (long long)took);
    kill(s.pid, SIGCONT);
    /* The late reply must not be mistaken for the next query's. */
    rc = wk_lock_inspect(wk_db_processor(db), &lock, wk_name_str("x"), &st);
    cr_assert_eq(rc, WK_OK, "%s: %s", wk_err_name(rc), wk_db_errmsg(db));
    cr_assert_not(st.held);
    wk_db_close(db);
    wk_test_server_stop(&s);
}

Test(connection, restart_between_queries_reconnects_transparently, .timeout = 30)
{
    wk_test_server s;
    cr_assert_eq(wk_test_server_start(&s, NULL), 0);
    int rc;
    char err[256];
    wk_db *db = open_with(s.url, 1000, &rc, err, sizeof(err));
    cr_assert_eq(rc, WK_OK, "%s", err);
    wk_entity lock = WK_LOCK_ENTITY("restart", 5000);
    wk_token t;
    bool got;
    cr_assert_eq(wk_lock_try(wk_db_processor(db), &lock, wk_name_str("a"), &t, &got), WK_OK);
    wk_test_server_stop(&s);
    cr_assert_eq(wk_test_server_restart(&s, NULL), 0);
    wk_test_sleep_ms(1100); /* idle long enough to be probed */
    rc = wk_lock_try(wk_db_processor(db), &lock, wk_name_str("a"), &t, &got);
    cr_assert_eq(rc, WK_OK, "a write after a restart goes to a new connection: %s: %s",
                 wk_err_name(rc), wk_db_errmsg(db));
    cr_assert(got, "the restarted server (no persistence) has no lock");
    /* Scripts were lost with the restart: NOSCRIPT recovery. */
    bool released;
    cr_assert_eq(wk_lock_release(wk_db_processor(db), &lock, wk_name_str("a"), &t, &released),
                 WK_OK);
    cr_assert(released);
    wk_db_close(db);
    wk_test_server_stop(&s);
}

Test(connection, retry_safe_read_survives_a_killed_connection, .timeout = 30)
{
    wk_test_server s;
    cr_assert_eq(wk_test_server_start(&s, NULL), 0);
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = s.url;
    o.capability = wk_cap_read_write();
    o.client_name = "wk-victim";
    wk_db *db;
    cr_assert_eq(wk_db_open(&db, &o, NULL, 0), WK_OK);
    redisContext *raw = wk_test_raw(s.url);
    wk_entity lock = WK_LOCK_ENTITY("killed", 5000);
    wk_lock_state st;
    cr_assert_eq(wk_lock_inspect(wk_db_processor(db), &lock, wk_name_str("a"), &st), WK_OK);
    redisReply *r = wk_test_cmd(raw, "CLIENT KILL TYPE normal SKIPME yes");
    cr_assert_geq(r->integer, 1);
    freeReplyObject(r);
    /* Not idle: no probe; the read fails once and is retried on a new connection. */
    cr_assert_eq(wk_lock_inspect(wk_db_processor(db), &lock, wk_name_str("a"), &st), WK_OK,
                 "%s", wk_db_errmsg(db));
    /* A write is not retried: its outcome would be unknown. */
    r = wk_test_cmd(raw, "CLIENT KILL TYPE normal SKIPME yes");
    freeReplyObject(r);
    wk_token t;
    bool got;
    int rc = wk_lock_try(wk_db_processor(db), &lock, wk_name_str("a"), &t, &got);
    cr_assert(rc == WK_EUNKNOWN || rc == WK_EIO, "got %s", wk_err_name(rc));
    cr_assert_eq(wk_lock_try(wk_db_processor(db), &lock, wk_name_str("a"), &t, &got), WK_OK);
    redisFree(raw);
    wk_db_close(db);
    wk_test_server_stop(&s);
}

Test(connection, acl_user_auth_and_select, .timeout = 30)
{
    wk_test_server s;
    cr_assert_eq(wk_test_server_start(&s, NULL), 0);
    redisContext *raw = wk_test_raw(s.url);
    freeReplyObject(wk_test_cmd(raw, "ACL SETUSER svc on >s3cr%%t@pw ~* &* +@all"));
    freeReplyObject(wk_test_cmd(raw, "ACL SETUSER noscript on >pw ~* &* +@all -evalsha -eval"));
    char url[256];
    int rc;
    char err[256];
    /* '%' and '@' percent-encoded in the URL. */
    snprintf(url, sizeof(url), "redis://svc:s3cr%%25t%%40pw@127.0.0.1:%d/2", s.port);
    wk_db *db = open_with(url, 1000, &rc, err, sizeof(err));
    cr_assert_eq(rc, WK_OK, "%s", err);
    wk_entity lock = WK_LOCK_ENTITY("acl", 5000);
    wk_token t;
    bool got;
    cr_assert_eq(wk_lock_try(wk_db_processor(db), &lock, wk_name_str("a"), &t, &got), WK_OK);
    freeReplyObject(wk_test_cmd(raw, "SELECT 2"));
    redisReply *r = wk_test_cmd(raw, "EXISTS @@wakuwaku-entity:Lock:acl:a");
    cr_assert_eq(r->integer, 1, "SELECT 2 applied");
    freeReplyObject(r);
    wk_db_close(db);

    snprintf(url, sizeof(url), "redis://svc:wrong-s3cret@127.0.0.1:%d", s.port);
    db = open_with(url, 1000, &rc, err, sizeof(err));
    cr_assert_eq(rc, WK_EAUTH, "%s", err);
    cr_assert_null(strstr(err, "wrong-s3cret"), "password leaked: %s", err);

    snprintf(url, sizeof(url), "redis://noscript:pw@127.0.0.1:%d", s.port);
    db = open_with(url, 1000, &rc, err, sizeof(err));
    cr_assert_eq(rc, WK_OK, "%s", err);
    bool released;
    rc = wk_lock_release(wk_db_processor(db), &lock, wk_name_str("a"), &t, &released);
    cr_assert_eq(rc, WK_EREDIS, "%s", wk_err_name(rc));
    cr_assert(strstr(wk_db_errmsg(db), "NOPERM"), "%s", wk_db_errmsg(db));
    cr_assert_null(strstr(wk_db_errmsg(db), "pw@"));
    wk_db_close(db);
    redisFree(raw);
    wk_test_server_stop(&s);
}

Test(connection, options_are_validated)
{
    wk_db *db = (wk_db *)1;
    wk_db_options o = WK_DB_OPTIONS_INIT;
    char err[256];
    cr_assert_eq(wk_db_open(&db, &o, err, sizeof(err)), WK_EINVAL, "capability required");
    cr_assert_null(db);
    cr_assert(strstr(err, "capability"));
    o.capability = wk_cap_read_only();
    o.url = "http://nope";
    cr_assert_eq(wk_db_open(&db, &o, err, sizeof(err)), WK_EINVAL);
    o.url = NULL;
    o.command_timeout_ms = 0;
    cr_assert_eq(wk_db_open(&db, &o, err, sizeof(err)), WK_EINVAL);
    cr_assert_eq(wk_db_open(&db, NULL, NULL, 0), WK_EINVAL);
    wk_db_close(NULL);
}
