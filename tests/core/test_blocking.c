/*
 * tests/core/test_blocking.c — blocking handles (core/blocking.h), the
 * connection lock waiters and receivers block on: a reply may come after
 * the command timeout, another thread can end the wait, and queries keep
 * the handle's capability and database.
 */
#include <pthread.h>
#include <string.h>

#include "core/blocking.h"
#include "redis_fixture.h"

static const wk_entity inbox = WK_CUSTOM_ENTITY("Inbox", "blocking");

typedef struct popped {
    bool got;
    char value[64];
} popped;

static int parse_pop(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    popped *out = q->out;
    if (wk_reply_get_type(r) == WK_REPLY_NIL)
        return WK_OK;
    if (wk_reply_get_type(r) != WK_REPLY_ARRAY || wk_reply_count(r) != 2)
        return wk_diag_fail(d, WK_EPROTO, "BLPOP: not [key, value]");
    size_t len;
    const char *s = wk_reply_str(wk_reply_at(r, 1), &len);
    if (!s || len >= sizeof(out->value))
        return wk_diag_fail(d, WK_EPROTO, "BLPOP: bad value");
    memcpy(out->value, s, len);
    out->value[len] = '\0';
    out->got = true;
    return WK_OK;
}

/* BLPOP <inbox:name> <block_ms / 1000 s> on the blocking handle. */
static int blpop(wk_db *b, const char *name, int64_t block_ms, popped *out)
{
    char key[WK_KEY_MAX], secs[32];
    size_t key_len;
    wk_name n = wk_name_str(name);
    cr_assert_eq(wk_key_build(key, sizeof(key), &key_len, &inbox, &n, NULL), WK_OK);
    snprintf(secs, sizeof(secs), "%.3f", (double)block_ms / 1000.0);
    const char *argv[] = {"BLPOP", key, secs};
    size_t argvlen[] = {5, key_len, strlen(secs)};
    wk_access access = {&inbox, WK_WRITE}; /* a pop removes */
    wk_query q = {.name = "test.blpop",
                  .effect = {&access, 1},
                  .argc = 3,
                  .argv = argv,
                  .argvlen = argvlen,
                  .parse = parse_pop,
                  .out = out};
    memset(out, 0, sizeof(*out));
    return wk__blocking_process(b, &q, block_ms);
}

static wk_db *open_on(const char *url, const wk_cap *cap, int command_timeout_ms, int database)
{
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = url;
    o.capability = cap;
    o.connect_timeout_ms = 1000;
    o.command_timeout_ms = command_timeout_ms;
    o.database = database;
    wk_db *db = NULL;
    char err[256];
    cr_assert_eq(wk_db_open(&db, &o, err, sizeof(err)), WK_OK, "%s", err);
    return db;
}

static wk_db *open_with(const wk_cap *cap, int command_timeout_ms, int database)
{
    return open_on(wk_test_url(), cap, command_timeout_ms, database);
}

static wk_db *blocking_of(wk_db *db)
{
    wk_db *b = NULL;
    char err[256];
    int rc = wk__blocking_open(&b, db, err, sizeof(err));
    cr_assert_eq(rc, WK_OK, "%s", err);
    return b;
}

Test(blocking, a_reply_may_come_after_the_command_timeout, .timeout = 30)
{
    wk_db *db = open_with(wk_cap_read_write(), 100, -1);
    wk_db *b = blocking_of(db);
    popped out;
    /* 600 ms of server-side wait on a 100 ms command timeout: nil, WK_OK. */
    int rc = blpop(b, wk_test_ns("empty"), 600, &out);
    cr_assert_eq(rc, WK_OK, "%s: %s", wk_err_name(rc), wk_db_errmsg(b));
    cr_assert_not(out.got);
    /* Ordinary handles take no block time (their connection would be
     * held): refused, not sent. */
    cr_assert_eq(blpop(db, "x", 600, &out), WK_EINVAL);
    wk_db_close(b);
    wk_db_close(db);
}

typedef struct pusher {
    const char *key;
    int delay_ms;
} pusher;

static void *push_later(void *arg)
{
    pusher *p = arg;
    wk_test_sleep_ms(p->delay_ms);
    redisContext *c = wk_test_raw(wk_test_url());
    freeReplyObject(wk_test_cmd(c, "SELECT 3"));
    freeReplyObject(wk_test_cmd(c, "RPUSH %s hello", p->key));
    redisFree(c);
    return NULL;
}

Test(blocking, a_push_wakes_the_waiter_on_its_own_connection_in_the_handles_database, .timeout = 30)
{
    wk_db *db = open_with(wk_cap_read_write(), 200, 3);
    wk_db *b = blocking_of(db);
    const char *name = wk_test_ns("wake");
    char key[WK_KEY_MAX];
    size_t key_len;
    wk_name n = wk_name_str(name);
    cr_assert_eq(wk_key_build(key, sizeof(key) - 1, &key_len, &inbox, &n, NULL), WK_OK);
    key[key_len] = '\0';
    pusher p = {key, 300};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, push_later, &p), 0);
    popped out;
    int rc = blpop(b, name, 20000, &out);
    pthread_join(t, NULL);
    cr_assert_eq(rc, WK_OK, "%s", wk_db_errmsg(b));
    cr_assert(out.got);
    cr_assert_str_eq(out.value, "hello");
    /* The parent's connection was free all along. */
    cr_assert_eq(wk_db_ping(db), WK_OK);
    wk_db_close(b);
    wk_db_close(db);
}

static void *interrupt_later(void *arg)
{
    wk_test_sleep_ms(200);
    wk__blocking_interrupt(arg);
    return NULL;
}

/* The bound is the suite's timeout: without the interrupt this BLPOP
 * waits 120 s. */
Test(blocking, another_thread_ends_the_wait_and_the_next_query_reconnects, .timeout = 30)
{
    wk_db *db = open_with(wk_cap_read_write(), 200, -1);
    wk_db *b = blocking_of(db);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, interrupt_later, b), 0);
    popped out;
    int rc = blpop(b, wk_test_ns("stop"), 120000, &out);
    pthread_join(t, NULL);
    cr_assert(wk__blocking_interrupted(b));
    cr_assert_eq(rc, WK_EUNKNOWN, "a pop cut short may have run: %s (%s)", wk_err_name(rc),
                 wk_db_errmsg(b));
    cr_assert(strstr(wk_db_errmsg(b), "interrupted"), "%s", wk_db_errmsg(b));
    /* Still interrupted: the next wait ends at once, nothing blocks. */
    cr_assert_neq(blpop(b, wk_test_ns("stop"), 120000, &out), WK_OK);
    wk__blocking_reset(b);
    cr_assert_not(wk__blocking_interrupted(b));
    rc = blpop(b, wk_test_ns("after"), 100, &out);
    cr_assert_eq(rc, WK_OK, "%s", wk_db_errmsg(b));
    wk_db_close(b);
    wk_db_close(db);
}

Test(blocking, the_capability_is_the_handles, .timeout = 30)
{
    /* A server of its own: the other tests' BLPOPs do not move its count. */
    wk_test_server srv;
    cr_assert_eq(wk_test_server_start(&srv, NULL), 0);
    wk_db *db = open_on(srv.url, wk_cap_read_only(), 200, -1);
    wk_db *b = blocking_of(db);
    redisContext *raw = wk_test_raw(srv.url);
    long long before = wk_test_cmd_calls(raw, "blpop");
    popped out;
    int rc = blpop(b, wk_test_ns("denied"), 100, &out);
    cr_assert_eq(rc, WK_EDENIED, "%s", wk_err_name(rc));
    cr_assert_eq(wk_test_cmd_calls(raw, "blpop"), before, "refused before sending");
    redisFree(raw);
    wk_db_close(b);
    wk_db_close(db);
    wk_test_server_stop(&srv);
}

Test(blocking, bad_input, .timeout = 30)
{
    wk_db *b = NULL;
    char err[128];
    cr_assert_eq(wk__blocking_open(NULL, NULL, err, sizeof(err)), WK_EINVAL);
    cr_assert_eq(wk__blocking_open(&b, NULL, err, sizeof(err)), WK_EINVAL);
    cr_assert_null(b);
    wk__blocking_interrupt(NULL);
    cr_assert_not(wk__blocking_interrupted(NULL));
}
