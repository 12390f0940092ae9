/*
 * tests/core/test_outcomes.c — "what happened to my write": the outcome
 * rule every query follows, single or batched (docs/GUARANTEES.md,
 * "Outcomes"). A write that was sent and whose reply never came — the
 * connection dropped or the server stalled past the timeout — is
 * WK_EUNKNOWN, never reported failed; nothing is re-sent if re-sending could
 * undo another client's write; a write that never ran is never WK_OK.
 *
 * Replies are lost at exact points with a loopback proxy (tests/support/
 * proxy.c) or by stopping a private redis-server with SIGSTOP.
 */
#include <signal.h>
#include <string.h>

#include <criterion/criterion.h>

#include "support.h"

static wk_db *open_on(const char *url, int command_timeout_ms)
{
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = url;
    o.capability = wk_cap_read_write();
    o.connect_timeout_ms = 1000;
    o.command_timeout_ms = command_timeout_ms;
    wk_db *db = NULL;
    char err[256];
    int rc = wk_db_open(&db, &o, err, sizeof(err));
    cr_assert_eq(rc, WK_OK, "open %s: %s", url, err);
    return db;
}

/* ------------------------------------------------------------------------
 * A write whose reply timed out (finding 6)
 * ---------------------------------------------------------------------- */

Test(outcomes, timed_out_lock_acquire_is_unknown_and_its_token_may_hold_the_lock, .timeout = 30)
{
    wk_test_server s;
    cr_assert_eq(wk_test_server_start(&s, NULL), 0);
    wk_db *db = open_on(s.url, 300);
    wk_entity lock = WK_LOCK_ENTITY("stalled", 30000);
    wk_token token;
    bool acquired = true;
    /* The try is a script: loaded first, so that the stalled server runs
     * the EVALSHA it reads on resuming instead of answering NOSCRIPT. */
    cr_assert_eq(wk_lock_try(wk_db_processor(db), &lock, wk_name_str("warm"), &token, &acquired),
                 WK_OK, "%s", wk_db_errmsg(db));
    kill(s.pid, SIGSTOP);
    int rc = wk_lock_try(wk_db_processor(db), &lock, wk_name_str("job"), &token, &acquired);
    kill(s.pid, SIGCONT);
    cr_assert_eq(rc, WK_EUNKNOWN, "a sent write without reply: got %s (%s)", wk_err_name(rc),
                 wk_db_errmsg(db));
    cr_assert(strstr(wk_db_errmsg(db), "may or may not"), "%s", wk_db_errmsg(db));
    cr_assert_not(acquired, "never claims the lock it cannot know it holds");
    /* The stalled server runs the SET once it resumes: the token holds the
     * lock, and releasing with it (what db.h tells callers to do) frees it. */
    wk_lock_state st = {0};
    for (int i = 0; i < 100 && !st.held; i++) {
        cr_assert_eq(wk_lock_inspect(wk_db_processor(db), &lock, wk_name_str("job"), &st), WK_OK);
        if (!st.held)
            wk_test_sleep_ms(20);
    }
    cr_assert(st.held, "the acquire ran after all");
    bool released = false;
    rc = wk_lock_release(wk_db_processor(db), &lock, wk_name_str("job"), &token, &released);
    cr_assert_eq(rc, WK_OK, "%s", wk_db_errmsg(db));
    cr_assert(released, "the acquire had run");
    wk_db_close(db);
    wk_test_server_stop(&s);
}

Test(outcomes, timed_out_limiter_acquire_is_unknown, .timeout = 30)
{
    wk_test_server s;
    cr_assert_eq(wk_test_server_start(&s, NULL), 0);
    wk_db *db = open_on(s.url, 300);
    wk_entity bucket = WK_TOKEN_BUCKET_ENTITY("stalled", 10, 1, 60000);
    wk_token_bucket_outcome out;
    /* Load the script first, or the stalled EVALSHA would meet NOSCRIPT. */
    cr_assert_eq(wk_token_bucket_acquire(wk_db_processor(db), &bucket, wk_name_str("ip"), 1, &out),
                 WK_OK);
    kill(s.pid, SIGSTOP);
    int rc = wk_token_bucket_acquire(wk_db_processor(db), &bucket, wk_name_str("ip"), 4, &out);
    kill(s.pid, SIGCONT);
    cr_assert_eq(rc, WK_EUNKNOWN, "got %s (%s)", wk_err_name(rc), wk_db_errmsg(db));
    /* The tokens were spent although the reply never came (the resumed
     * server runs the acquire, maybe after our next command: wait for it). */
    wk_token_bucket_state st = {0};
    for (int i = 0; i < 100; i++) {
        cr_assert_eq(wk_token_bucket_peek(wk_db_processor(db), &bucket, wk_name_str("ip"), &st),
                     WK_OK, "%s", wk_db_errmsg(db));
        if (st.available < 9)
            break;
        wk_test_sleep_ms(20);
    }
    cr_assert_eq(st.available, 5, "1 + 4 of 10 tokens spent");
    wk_db_close(db);
    wk_test_server_stop(&s);
}

Test(outcomes, timed_out_read_is_etimedout, .timeout = 30)
{
    wk_test_server s;
    cr_assert_eq(wk_test_server_start(&s, NULL), 0);
    wk_db *db = open_on(s.url, 300);
    wk_entity lock = WK_LOCK_ENTITY("stalled", 30000);
    wk_lock_state st;
    kill(s.pid, SIGSTOP);
    int rc = wk_lock_inspect(wk_db_processor(db), &lock, wk_name_str("job"), &st);
    kill(s.pid, SIGCONT);
    cr_assert_eq(rc, WK_ETIMEDOUT, "a read has no outcome to doubt: %s", wk_err_name(rc));
    wk_db_close(db);
    wk_test_server_stop(&s);
}

/* ------------------------------------------------------------------------
 * A write whose reply was lost is not re-sent blindly (finding 5)
 * ---------------------------------------------------------------------- */

typedef struct newer_writer {
    const char *url;
    const char *command; /* run by another client while the reply is lost: */
    const char *key;     /* its one %s */
} newer_writer;

static void write_newer(void *arg)
{
    newer_writer *w = arg;
    redisContext *c = wk_test_raw(w->url);
    freeReplyObject(wk_test_cmd(c, w->command, w->key));
    redisFree(c);
}

Test(outcomes, lost_cache_put_reply_never_overwrites_a_newer_value, .timeout = 30)
{
    wk_test_server s;
    cr_assert_eq(wk_test_server_start(&s, NULL), 0);
    wk_test_proxy *proxy;
    cr_assert_eq(wk_test_proxy_start(&proxy, s.port), 0);
    wk_db *db = open_on(wk_test_proxy_url(proxy), 2000);
    wk_entity cache = WK_CACHE_ENTITY("lost", 60000);
    newer_writer w = {s.url, "SET %s from-B PX 60000", "@@wakuwaku-entity:Cache:lost:doc"};
    wk_test_proxy_drop_next_reply(proxy, write_newer, &w);
    int rc = wk_cache_put(wk_db_processor(db), &cache, wk_name_str("doc"), "from-A", 6);
    cr_assert_eq(wk_test_proxy_drops(proxy), 1);
    cr_assert_eq(rc, WK_EUNKNOWN, "the put ran, its reply was lost: got %s (%s)",
                 wk_err_name(rc), wk_db_errmsg(db));
    redisContext *raw = wk_test_raw(s.url);
    redisReply *r = wk_test_cmd(raw, "GET @@wakuwaku-entity:Cache:lost:doc");
    cr_assert_str_eq(r->str, "from-B", "B's newer value survives");
    freeReplyObject(r);

    /* The same for a HashedCache put, and for a remove that a re-sent put
     * would undo. */
    wk_entity hcache = WK_HASHED_CACHE_ENTITY("lost", 60000);
    newer_writer unlink = {s.url, "UNLINK %s", "@@wakuwaku-entity:HashedCache:lost:doc"};
    /* Reconnect and load the script first, so the drop hits the put's own
     * reply (not the handshake's, not a NOSCRIPT). */
    cr_assert_eq(wk_hashed_cache_put(wk_db_processor(db), &hcache, wk_name_str("other"), "", 0,
                                     NULL),
                 WK_OK, "%s", wk_db_errmsg(db));
    wk_test_proxy_drop_next_reply(proxy, write_newer, &unlink);
    rc = wk_hashed_cache_put(wk_db_processor(db), &hcache, wk_name_str("doc"), "v1", 2, NULL);
    cr_assert_eq(rc, WK_EUNKNOWN, "got %s (%s)", wk_err_name(rc), wk_db_errmsg(db));
    r = wk_test_cmd(raw, "EXISTS @@wakuwaku-entity:HashedCache:lost:doc");
    cr_assert_eq(r->integer, 0, "the remove that came after the put stays");
    freeReplyObject(r);

    /* Reads are re-sent: a lost reply costs nothing. (Reconnect first.) */
    cr_assert_eq(wk_db_ping(db), WK_OK, "%s", wk_db_errmsg(db));
    wk_test_proxy_drop_next_reply(proxy, NULL, NULL);
    wk_body body = WK_BODY_INIT;
    rc = wk_cache_get(wk_db_processor(db), &cache, wk_name_str("doc"), &body);
    cr_assert_eq(rc, WK_OK, "%s", wk_db_errmsg(db));
    cr_assert(body.found && body.len == 6 && memcmp(body.data, "from-B", 6) == 0);
    wk_body_free(&body);
    cr_assert_eq(wk_test_proxy_drops(proxy), 3);
    redisFree(raw);
    wk_db_close(db);
    wk_test_proxy_stop(proxy);
    wk_test_server_stop(&s);
}

/* ------------------------------------------------------------------------
 * A batched write that never ran is never WK_OK (finding 8)
 * ---------------------------------------------------------------------- */

static int custom(wk_processor *p, int argc, const char **argv)
{
    size_t lens[8];
    for (int i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);
    wk_query q = {.name = argv[0], .argc = argc, .argv = argv, .argvlen = lens};
    return wk_process(p, &q);
}

Test(outcomes, batched_write_answered_noscript_then_cut_off_is_not_ok, .timeout = 30)
{
    wk_test_server s;
    cr_assert_eq(wk_test_server_start(&s, NULL), 0);
    wk_db *db = open_on(s.url, 2000);
    redisContext *raw = wk_test_raw(s.url);
    freeReplyObject(wk_test_cmd(raw, "SCRIPT FLUSH"));
    wk_entity hcache = WK_HASHED_CACHE_ENTITY("noscript", 60000);
    wk_entity lock = WK_LOCK_ENTITY("noscript", 60000);
    wk_batch *b;
    cr_assert_eq(wk_batch_open(&b, db), WK_OK);
    wk_processor *p = wk_batch_processor(b);
    /* Query 0 meets NOSCRIPT (did not run); QUIT's reply comes, then the
     * server closes, so query 2's reply is lost before any re-send. */
    cr_assert_eq(wk_hashed_cache_put(p, &hcache, wk_name_str("doc"), "body", 4, NULL), WK_OK);
    const char *quit[] = {"QUIT"};
    cr_assert_eq(custom(p, 1, quit), WK_OK);
    wk_token token;
    bool got = false;
    cr_assert_eq(wk_lock_try(p, &lock, wk_name_str("job"), &token, &got), WK_OK);
    int rc = wk_batch_exec(b);
    cr_assert(wk_is_connection_error(rc), "got %s", wk_err_name(rc));
    redisReply *r = wk_test_cmd(raw, "EXISTS @@wakuwaku-entity:HashedCache:noscript:doc");
    bool exists = r->integer == 1;
    freeReplyObject(r);
    int st0 = wk_batch_status(b, 0);
    cr_assert_eq(st0 == WK_OK, exists, "status %s but the item %s (%s)", wk_err_name(st0),
                 exists ? "exists" : "does not exist", wk_db_errmsg(db));
    cr_assert_eq(wk_batch_status(b, 1), WK_OK);
    cr_assert_eq(wk_batch_status(b, 2), WK_EUNKNOWN, "sent, reply lost");
    wk_batch_close(b);
    redisFree(raw);
    wk_db_close(db);
    wk_test_server_stop(&s);
}

/* ------------------------------------------------------------------------
 * Open checks the server (one round trip after AUTH and SELECT)
 * ---------------------------------------------------------------------- */

static int open_peer(const char *first, size_t first_len, char *err, size_t errlen)
{
    wk_test_peer peer;
    cr_assert_eq(wk_test_peer_start(&peer, first, first_len, first, first_len), 0);
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = peer.url;
    o.capability = wk_cap_read_write();
    o.command_timeout_ms = 500;
    wk_db *db = (wk_db *)1;
    int rc = wk_db_open(&db, &o, err, errlen);
    if (rc == WK_OK)
        wk_db_close(db);
    else
        cr_assert_null(db);
    wk_test_peer_stop(&peer);
    return rc;
}

#define OPEN_PEER(lit, err) open_peer(lit, sizeof(lit) - 1, err, sizeof(err))

Test(outcomes, open_refuses_what_is_not_redis, .timeout = 30)
{
    char err[256];
    int rc = OPEN_PEER("HTTP/1.1 400 Bad Request\r\n\r\n", err);
    cr_assert_eq(rc, WK_EPROTO, "got %s: %s", wk_err_name(rc), err);
    cr_assert(strstr(err, "not a Redis server"), "%s", err);
    rc = OPEN_PEER("", err); /* silence */
    cr_assert_eq(rc, WK_ETIMEDOUT, "got %s: %s", wk_err_name(rc), err);
}

Test(outcomes, open_refuses_a_server_too_old, .timeout = 30)
{
    char err[256];
    int rc = OPEN_PEER("-ERR unknown command 'HELLO'\r\n", err);
    cr_assert_eq(rc, WK_EPROTO, "got %s: %s", wk_err_name(rc), err);
    cr_assert(strstr(err, "6.0"), "names the minimum: %s", err);
    rc = OPEN_PEER("*4\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$5\r\n5.0.7\r\n", err);
    cr_assert_eq(rc, WK_EPROTO, "got %s: %s", wk_err_name(rc), err);
    cr_assert(strstr(err, "5.0.7") && strstr(err, "6.0"), "names both versions: %s", err);
    rc = OPEN_PEER(WK_TEST_HELLO_REPLY, err);
    cr_assert_eq(rc, WK_OK, "7.0.15 is fine: %s", err);
}

Test(outcomes, open_without_the_password_is_eauth, .timeout = 30)
{
    static const char *const config[] = {"requirepass sekret", NULL};
    wk_test_server s;
    cr_assert_eq(wk_test_server_start(&s, config), 0);
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = s.url;
    o.capability = wk_cap_read_write();
    wk_db *db = (wk_db *)1;
    char err[256];
    int rc = wk_db_open(&db, &o, err, sizeof(err));
    cr_assert_eq(rc, WK_EAUTH, "got %s: %s", wk_err_name(rc), err);
    cr_assert(strstr(err, "password"), "%s", err);
    cr_assert_null(db);
    o.password = "sekret";
    rc = wk_db_open(&db, &o, err, sizeof(err));
    cr_assert_eq(rc, WK_OK, "%s", err);
    wk_db_close(db);
    wk_test_server_stop(&s);
}
