/*
 * tests/core/test_engine.c — the exchange machine (core/exchange.h) is
 * the one function that drives a connection for its whole life: a driver
 * that only polls what wk__engine_lane_events() names and steps the
 * machine gets its connection set up (dial, HELLO …) and its queries
 * run, in both modes; a machine whose connection is its owner's own
 * (no_reconnect: the subscriber's) fails what waits instead.
 */
#include <poll.h>
#include <string.h>

#include <criterion/criterion.h>

#include "core/exchange.h"
#include "redis_fixture.h"

static int parse_pong(const wk_query *q, const wk_reply *reply, wk_diag *d)
{
    (void)q;
    size_t len = 0;
    const char *s = wk_reply_str(reply, &len);
    if (len != 4 || memcmp(s, "PONG", 4) != 0)
        return wk_diag_fail(d, WK_EPROTO, "expected PONG");
    return WK_OK;
}

static const char *const ping_argv[] = {"PING"};
static const size_t ping_len[] = {4};
static const wk_query ping = {.name = "ping",
                              .flags = WK_QUERY_RETRY_SAFE,
                              .argc = 1,
                              .argv = ping_argv,
                              .argvlen = ping_len,
                              .parse = parse_pong};

static const wk_query *one_query(void *ctx, size_t i)
{
    (void)i;
    return ctx;
}

/* A handle whose connection is gone (the machine must set it up). */
static wk_db *open_dropped(void)
{
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = getenv("WK_TEST_REDIS_URL");
    o.capability = wk_cap_read_write();
    wk_db *db = NULL;
    char err[256];
    cr_assert_eq(wk_db_open(&db, &o, err, sizeof(err)), WK_OK, "%s", err);
    wk__conn_drop(db->conn);
    cr_assert_null(db->conn->link.ctx);
    return db;
}

/* The whole driver: poll the lanes the machine names until its deadline,
 * tell it what fired, step. Nothing else is ever asked of it. */
static void poll_once(wk__engine *m, int64_t deadline)
{
    struct pollfd p[4];
    size_t lane[4];
    nfds_t n = 0;
    for (size_t i = 0; i < wk__engine_lanes(m) && n < 4; i++) {
        int fd = -1;
        short ev = wk__engine_lane_events(m, i, &fd);
        if (ev) {
            lane[n] = i;
            p[n++] = (struct pollfd){.fd = fd, .events = ev};
        }
    }
    int64_t left = deadline ? deadline - wk__boot_ms() : 100;
    int got = poll(p, n, left < 0 ? 0 : (int)left);
    for (nfds_t j = 0; got > 0 && j < n; j++)
        wk__engine_ready(m, lane[j], p[j].revents);
}

Test(engine, a_driver_that_only_polls_and_steps_gets_its_connection_set_up, .timeout = 30)
{
    wk_db *db = open_dropped();
    wk__slot slot = {.state = WK__UNSENT};
    wk__exchange x = {.db = db, .slots = &slot, .count = 1, .query = one_query, .ctx = (void *)&ping};
    wk__engine m;
    wk__engine_begin(&m, &x, wk__boot_ms() + 5000);
    int steps = 0;
    for (wk__xwant w = wk__engine_step(&m); w.what != WK__X_DONE; w = wk__engine_step(&m)) {
        cr_assert_eq(w.what, WK__X_WAIT, "step %d asked the driver for %d", steps, (int)w.what);
        cr_assert_lt(++steps, 1000);
        poll_once(&m, w.deadline);
    }
    cr_assert_eq(wk__engine_end(&m), WK_OK, "%s", wk_db_errmsg(db));
    cr_assert_eq(slot.status, WK_OK);
    cr_assert_not_null(db->conn->link.ctx, "the machine's connection is the handle's");
    cr_assert_gt(steps, 0, "the set-up waited at least once");
    wk_db_close(db);
}

static void on_settled(void *arg, size_t i, int status, const char *msg)
{
    (void)i;
    (void)msg;
    *(int *)arg = status;
}

/* Continuous mode (the event loop's, the pool's): one query, stepped and
 * polled until it is settled. */
static int continuous_ping(wk_db *db, bool own_connection, bool *connecting)
{
    wk__kept k = {0};
    wk__exchange x = {.db = db, .query = wk__kept_query, .ctx = &k};
    wk__engine m;
    int status = 12345;
    wk__engine_open(&m, &x, on_settled, NULL, &status);
    m.no_reconnect = own_connection;
    cr_assert_eq(wk__kept_add(&k, db, &ping), WK_OK);
    x.slots = k.slots;
    x.count = k.count;
    /* on_settled sets status (a while: clang's -Wfor-loop-analysis cannot
     * see that). */
    int steps = 0;
    while (status == 12345) {
        wk__xwant w = wk__engine_step(&m);
        cr_assert_eq(w.what, WK__X_WAIT, "step %d asked the driver for %d", steps, (int)w.what);
        cr_assert_lt(steps++, 1000);
        *connecting |= wk__engine_connecting(&m);
        if (status == 12345)
            poll_once(&m, wk__engine_due(&m));
    }
    wk__engine_cancel(&m, WK_EIO, "done");
    wk__kept_free(&k);
    return status;
}

Test(engine, continuous_mode_sets_up_its_connection_when_a_query_waits, .timeout = 30)
{
    wk_db *db = open_dropped();
    bool connecting = false;
    cr_assert_eq(continuous_ping(db, false, &connecting), WK_OK, "%s", wk_db_errmsg(db));
    cr_assert(connecting, "it was set up by the machine");
    cr_assert_not_null(db->conn->link.ctx);
    wk_db_close(db);
}

Test(engine, an_own_connection_lost_is_a_failure_and_never_set_up_again, .timeout = 30)
{
    wk_db *db = open_dropped();
    bool connecting = false;
    cr_assert_eq(continuous_ping(db, true, &connecting), WK_EIO);
    cr_assert_not(connecting, "no set-up began");
    cr_assert_null(db->conn->link.ctx);
    wk_db_close(db);
}
