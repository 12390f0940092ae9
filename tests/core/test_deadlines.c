/*
 * tests/core/test_deadlines.c — every call has one deadline, fixed when it
 * starts (docs/GUARANTEES.md, "Connections"): a server that answers one
 * byte at a time (tests/support/trickle_server.c), one that never
 * answers, and a real redis-server stopped with SIGSTOP must not hold a
 * call past its deadline — the connect timeout for an open, the command
 * timeout for a query, a batch, a pool's query, an event-loop query and
 * a near-cache get.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "support.h"

/* How late a call may return after its deadline: 50 ms is the promise.
 * Under AddressSanitizer on a loaded 2-core machine a poll wake-up and
 * the instrumented code after it can take longer than the promise
 * itself, so sanitized builds allow 250 ms (still far below the seconds
 * a per-byte timeout costs); WK_TEST_DEADLINE_MARGIN_MS overrides both. */
static int64_t margin_ms(void)
{
    const char *env = getenv("WK_TEST_DEADLINE_MARGIN_MS");
    if (env && *env)
        return atoi(env);
#if defined(__SANITIZE_ADDRESS__)
    return 250;
#else
    return 50;
#endif
}

#define TRICKLE_MS 100 /* one byte per 100 ms: a 33-byte reply takes 3.3 s */
#define TIMEOUT_MS 500

static wk_db_options options_for(const char *url, int connect_ms, int command_ms)
{
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = url;
    o.capability = wk_cap_read_write();
    o.connect_timeout_ms = connect_ms;
    o.command_timeout_ms = command_ms;
    return o;
}

static wk_db *open_on(const char *url, int command_ms)
{
    wk_db_options o = options_for(url, 1000, command_ms);
    wk_db *db = NULL;
    char err[256];
    int rc = wk_db_open(&db, &o, err, sizeof(err));
    cr_assert_eq(rc, WK_OK, "open %s: %s", url, err);
    return db;
}

/* The call took at most its budget plus the margin. */
static void assert_in_time(const char *what, int64_t started, int64_t budget_ms)
{
    int64_t took = wk_monotonic_ms() - started;
    cr_assert_leq(took, budget_ms + margin_ms(), "%s took %lld ms; its deadline was %lld ms",
                  what, (long long)took, (long long)budget_ms);
}

static const wk_entity cache = WK_CACHE_ENTITY("deadlines", 60000);

/* ------------------------------------------------------------------------
 * Open: the connect timeout bounds the whole open
 * ---------------------------------------------------------------------- */

Test(deadlines, an_open_against_a_trickling_handshake_ends_at_the_connect_timeout, .timeout = 60)
{
    wk_test_trickle t;
    cr_assert_eq(wk_test_trickle_start(&t, WK_TEST_TRICKLE_ALL, TRICKLE_MS), 0);
    wk_db_options o = options_for(t.url, TIMEOUT_MS, TIMEOUT_MS);
    wk_db *db = NULL;
    char err[256];
    int64_t t0 = wk_monotonic_ms();
    int rc = wk_db_open(&db, &o, err, sizeof(err));
    assert_in_time("wk_db_open", t0, TIMEOUT_MS);
    cr_assert_eq(rc, WK_ETIMEDOUT, "%s: %s", wk_err_name(rc), err);
    cr_assert_null(db);
    cr_assert(strstr(err, "HELLO"), "the message names the step: %s", err);
    wk_test_trickle_stop(&t);
}

Test(deadlines, an_open_against_silence_ends_at_the_connect_timeout, .timeout = 60)
{
    wk_test_trickle t;
    cr_assert_eq(wk_test_trickle_start(&t, WK_TEST_TRICKLE_SILENT, TRICKLE_MS), 0);
    wk_db_options o = options_for(t.url, TIMEOUT_MS, 5000);
    wk_db *db = NULL;
    char err[256];
    int64_t t0 = wk_monotonic_ms();
    int rc = wk_db_open(&db, &o, err, sizeof(err));
    /* The connect timeout, not the (longer) command timeout, bounds the
     * handshake's wait. */
    assert_in_time("wk_db_open", t0, TIMEOUT_MS);
    cr_assert_eq(rc, WK_ETIMEDOUT, "%s: %s", wk_err_name(rc), err);
    wk_test_trickle_stop(&t);
}

/* ------------------------------------------------------------------------
 * Queries and batches: the command timeout bounds the call
 * ---------------------------------------------------------------------- */

Test(deadlines, a_query_against_a_trickling_reply_ends_at_the_command_timeout, .timeout = 60)
{
    wk_test_trickle t;
    cr_assert_eq(wk_test_trickle_start(&t, WK_TEST_TRICKLE_AFTER_HELLO, TRICKLE_MS), 0);
    wk_db *db = open_on(t.url, TIMEOUT_MS);
    wk_body b = WK_BODY_INIT;
    int64_t t0 = wk_monotonic_ms();
    int rc = wk_cache_get(wk_db_processor(db), &cache, wk_name_str("k"), &b);
    assert_in_time("wk_cache_get", t0, TIMEOUT_MS);
    cr_assert_eq(rc, WK_ETIMEDOUT, "%s: %s", wk_err_name(rc), wk_db_errmsg(db));
    wk_body_free(&b);
    wk_db_close(db);
    wk_test_trickle_stop(&t);
}

Test(deadlines, a_batch_against_a_trickling_reply_ends_at_the_command_timeout, .timeout = 60)
{
    wk_test_trickle t;
    cr_assert_eq(wk_test_trickle_start(&t, WK_TEST_TRICKLE_AFTER_HELLO, TRICKLE_MS), 0);
    wk_db *db = open_on(t.url, TIMEOUT_MS);
    wk_batch *batch = NULL;
    cr_assert_eq(wk_batch_open(&batch, db), WK_OK);
    wk_body b[4];
    for (int i = 0; i < 4; i++) {
        b[i] = (wk_body)WK_BODY_INIT;
        wk_cache_get(wk_batch_processor(batch), &cache, wk_name_u64((uint64_t)i), &b[i]);
    }
    int64_t t0 = wk_monotonic_ms();
    int rc = wk_batch_exec(batch);
    assert_in_time("wk_batch_exec", t0, TIMEOUT_MS);
    cr_assert_eq(rc, WK_ETIMEDOUT, "%s: %s", wk_err_name(rc), wk_db_errmsg(db));
    for (int i = 0; i < 4; i++)
        wk_body_free(&b[i]);
    wk_batch_close(batch);
    wk_db_close(db);
    wk_test_trickle_stop(&t);
}

Test(deadlines, a_pool_query_against_a_trickling_reply_ends_at_the_command_timeout, .timeout = 60)
{
    wk_test_trickle t;
    cr_assert_eq(wk_test_trickle_start(&t, WK_TEST_TRICKLE_AFTER_HELLO, TRICKLE_MS), 0);
    wk_db_options o = options_for(t.url, 1000, TIMEOUT_MS);
    wk_pool_options po = WK_POOL_OPTIONS_INIT;
    po.db = &o;
    po.size = 1;
    po.wait_ms = 100;
    wk_pool *pool = NULL;
    char err[256];
    cr_assert_eq(wk_pool_open(&pool, &po, err, sizeof(err)), WK_OK, "%s", err);
    wk_body b = WK_BODY_INIT;
    int64_t t0 = wk_monotonic_ms();
    int rc = wk_cache_get(wk_pool_processor(pool), &cache, wk_name_str("k"), &b);
    assert_in_time("a pool's wk_cache_get", t0, TIMEOUT_MS);
    cr_assert_eq(rc, WK_ETIMEDOUT, "%s: %s", wk_err_name(rc), wk_pool_errmsg(pool));
    wk_body_free(&b);
    wk_pool_close(pool);
    wk_test_trickle_stop(&t);
}

/* ------------------------------------------------------------------------
 * The event-loop handle
 * ---------------------------------------------------------------------- */

typedef struct async_done {
    int n, status;
    int64_t at;
} async_done;

static void on_done(wk_async *a, int status, const char *msg, void *arg)
{
    (void)a;
    (void)msg;
    async_done *d = arg;
    d->n++;
    d->status = status;
    d->at = wk_monotonic_ms();
}

Test(deadlines, an_event_loop_query_against_a_trickling_reply_ends_at_the_command_timeout,
     .timeout = 60)
{
    wk_test_trickle t;
    cr_assert_eq(wk_test_trickle_start(&t, WK_TEST_TRICKLE_AFTER_HELLO, TRICKLE_MS), 0);
    wk_db_options o = options_for(t.url, 1000, TIMEOUT_MS);
    wk_async *a = NULL;
    char err[256];
    cr_assert_eq(wk_async_open(&a, &o, err, sizeof(err)), WK_OK, "%s", err);
    while (wk_async_fd(a) < 0 || wk_async_timeout_ms(a) >= 0)
        wk_test_async_turn(a); /* connected and set up */
    async_done d = {0};
    wk_body b = WK_BODY_INIT;
    int64_t t0 = wk_monotonic_ms();
    wk_cache_get(wk_async_with(a, on_done, &d), &cache, wk_name_str("k"), &b);
    wk_test_async_drain(a);
    cr_assert_eq(d.n, 1);
    cr_assert_leq(d.at - t0, TIMEOUT_MS + margin_ms(), "the callback came after %lld ms",
                  (long long)(d.at - t0));
    cr_assert_eq(d.status, WK_ETIMEDOUT, "%s", wk_err_name(d.status));
    wk_body_free(&b);
    wk_async_close(a);
    wk_test_trickle_stop(&t);
}

/* The event-loop handle connects through the same set-up machine as
 * wk_db_open (core/conn_machine.c): the same deadline, and the same
 * message naming the step the server did not answer. */
Test(deadlines, an_event_loop_connect_against_a_trickling_handshake_ends_at_the_connect_timeout,
     .timeout = 60)
{
    wk_test_trickle t;
    cr_assert_eq(wk_test_trickle_start(&t, WK_TEST_TRICKLE_ALL, TRICKLE_MS), 0);
    wk_db_options o = options_for(t.url, TIMEOUT_MS, TIMEOUT_MS);
    wk_async *a = NULL;
    char err[256];
    int64_t t0 = wk_monotonic_ms();
    cr_assert_eq(wk_async_open(&a, &o, err, sizeof(err)), WK_OK, "%s", err);
    async_done d = {0};
    wk_body b = WK_BODY_INIT;
    wk_cache_get(wk_async_with(a, on_done, &d), &cache, wk_name_str("k"), &b);
    wk_test_async_drain(a);
    cr_assert_eq(d.n, 1);
    cr_assert_leq(d.at - t0, TIMEOUT_MS + margin_ms(), "the callback came after %lld ms",
                  (long long)(d.at - t0));
    cr_assert_eq(d.status, WK_ETIMEDOUT, "%s", wk_err_name(d.status));
    cr_assert(strstr(wk_async_errmsg(a), "did not answer HELLO before the deadline"),
              "the message names the step: %s", wk_async_errmsg(a));
    wk_body_free(&b);
    wk_async_close(a);
    wk_test_trickle_stop(&t);
}

/* ------------------------------------------------------------------------
 * A stopped server (SIGSTOP): a timeout, said truthfully
 * ---------------------------------------------------------------------- */

Test(deadlines, a_near_cache_get_on_a_stopped_server_ends_at_the_command_timeout, .timeout = 60)
{
    wk_test_server s;
    cr_assert_eq(wk_test_server_start(&s, NULL), 0);
    wk_db *db = open_on(s.url, TIMEOUT_MS);
    const wk_entity *const entities[] = {&cache};
    wk_near_cache_options no = WK_NEAR_CACHE_OPTIONS_INIT;
    no.entities = entities;
    no.nentities = 1;
    wk_near_cache *nc = NULL;
    char err[256];
    cr_assert_eq(wk_near_cache_open(&nc, db, &no, err, sizeof(err)), WK_OK, "%s", err);
    wk_body b = WK_BODY_INIT;
    cr_assert_eq(wk_near_cache_get(nc, &cache, wk_name_str("k"), &b), WK_OK, "%s",
                 wk_near_cache_errmsg());
    kill(s.pid, SIGSTOP);
    int64_t t0 = wk_monotonic_ms();
    int rc = wk_near_cache_get(nc, &cache, wk_name_str("other"), &b);
    int64_t took = wk_monotonic_ms() - t0;
    char msg[512];
    snprintf(msg, sizeof(msg), "%s", wk_near_cache_errmsg());
    kill(s.pid, SIGCONT);
    cr_assert_leq(took, TIMEOUT_MS + margin_ms(), "wk_near_cache_get took %lld ms: %s",
                  (long long)took, msg);
    cr_assert_eq(rc, WK_ETIMEDOUT, "%s: %s", wk_err_name(rc), msg);
    cr_assert_null(strstr(msg, "is it a Redis server"), "a stopped server is a timeout: %s", msg);
    wk_body_free(&b);
    wk_near_cache_close(nc);
    wk_db_close(db);
    wk_test_server_stop(&s);
}

Test(deadlines, a_reconnect_on_a_stopped_server_spends_the_querys_deadline, .timeout = 60)
{
    wk_test_server s;
    cr_assert_eq(wk_test_server_start(&s, NULL), 0);
    wk_db_options o = options_for(s.url, TIMEOUT_MS, TIMEOUT_MS);
    wk_db *db = NULL;
    char err[256];
    cr_assert_eq(wk_db_open(&db, &o, err, sizeof(err)), WK_OK, "%s", err);
    kill(s.pid, SIGSTOP);
    /* The first query times out and drops the connection; the second
     * reconnects (the kernel accepts for the stopped server) and its
     * handshake must fit in the query's own deadline. */
    wk_body b = WK_BODY_INIT;
    wk_cache_get(wk_db_processor(db), &cache, wk_name_str("k"), &b);
    int64_t t0 = wk_monotonic_ms();
    int rc = wk_cache_get(wk_db_processor(db), &cache, wk_name_str("k"), &b);
    int64_t took = wk_monotonic_ms() - t0;
    char msg[512];
    snprintf(msg, sizeof(msg), "%s", wk_db_errmsg(db));
    kill(s.pid, SIGCONT);
    cr_assert_leq(took, TIMEOUT_MS + margin_ms(), "the query took %lld ms: %s", (long long)took,
                  msg);
    cr_assert_eq(rc, WK_ETIMEDOUT, "%s: %s", wk_err_name(rc), msg);
    cr_assert_null(strstr(msg, "is it a Redis server"), "a stopped server is a timeout: %s", msg);
    wk_body_free(&b);
    wk_db_close(db);
    wk_test_server_stop(&s);
}
