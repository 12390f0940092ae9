/*
 * tests/core/test_batch.c — pipelined batches: typed outcomes in order,
 * mixed kinds, refusals sending nothing, a connection dropping midway,
 * NOSCRIPT after SCRIPT FLUSH in the middle, a failing query in the middle;
 * hooks wrapped around a batch (they run at queue time).
 */
#include <string.h>

#include <criterion/criterion.h>

#include "support.h"

static wk_test_server server;

static void start(void)
{
    cr_assert_eq(wk_test_server_start(&server, NULL), 0);
}

static void stop(void)
{
    wk_test_server_stop(&server);
}

TestSuite(batch, .init = start, .fini = stop, .timeout = 60);

static const wk_entity counters = WK_CUSTOM_ENTITY("Counter", "batch");

/* A custom command query on the Counter entity (or none when `e` NULL). */
static int custom(wk_processor *p, const wk_entity *e, wk_mode mode, int argc, const char **argv,
                  wk_parse_fn parse, void *out)
{
    size_t lens[8];
    for (int i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);
    wk_access access = {e, mode};
    wk_query q = {.name = argv[0],
                  .effect = {&access, e ? 1 : 0},
                  .argc = argc,
                  .argv = argv,
                  .argvlen = lens,
                  .parse = parse,
                  .out = out};
    return wk_process(p, &q);
}

static int parse_ll(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    if (wk_reply_get_type(r) != WK_REPLY_INTEGER)
        return wk_diag_fail(d, WK_EPROTO, "expected an integer");
    *(long long *)q->out = wk_reply_integer(r);
    return WK_OK;
}

Test(batch, typed_outcomes_in_order_for_mixed_kinds)
{
    wk_db *db = wk_test_open_url(server.url, NULL);
    wk_entity lock = WK_LOCK_ENTITY("batch", 10000);
    wk_entity rw = WK_RWLOCK_ENTITY("batch", 10000);
    /* The lock's try is a script: loaded first, so that the batch runs
     * it in order (a query answered NOSCRIPT runs after the rest, 4.). */
    wk_token warm;
    bool warm_got;
    cr_assert_eq(wk_lock_try(wk_db_processor(db), &lock, wk_name_str("warm"), &warm, &warm_got),
                 WK_OK);
    wk_batch *b;
    cr_assert_eq(wk_batch_open(&b, db), WK_OK);
    wk_processor *p = wk_batch_processor(b);
    cr_assert(wk_processor_is_deferred(p));
    wk_token tokens[64];
    bool got[64];
    for (int i = 0; i < 64; i++) {
        got[i] = true;
        /* names 0..31 twice: the second try of each must fail */
        cr_assert_eq(wk_lock_try(p, &lock, wk_name_u64((uint64_t)(i % 32)), &tokens[i], &got[i]),
                     WK_OK);
        cr_assert_not(got[i], "outcome is not known before exec");
    }
    wk_token rt;
    bool rgot = false;
    long long n1 = -1, n2 = -1;
    wk_lock_state st = {0};
    const char *incr[] = {"INCR", "c"};
    cr_assert_eq(wk_rwlock_try_read(p, &rw, wk_name_str("doc"), &rt, &rgot), WK_OK);
    cr_assert_eq(custom(p, &counters, WK_WRITE, 2, incr, parse_ll, &n1), WK_OK);
    cr_assert_eq(custom(p, &counters, WK_WRITE, 2, incr, parse_ll, &n2), WK_OK);
    cr_assert_eq(wk_lock_inspect(p, &lock, wk_name_u64(3), &st), WK_OK);
    cr_assert_eq(wk_batch_count(b), 68);

    cr_assert_eq(wk_batch_exec(b), WK_OK, "%s", wk_db_errmsg(db));
    for (int i = 0; i < 64; i++)
        cr_assert_eq(got[i], i < 32, "query %d: got=%d", i, got[i]);
    cr_assert(rgot);
    cr_assert_eq(n1, 1);
    cr_assert_eq(n2, 2);
    cr_assert(st.held);
    for (size_t i = 0; i < wk_batch_count(b); i++)
        cr_assert_eq(wk_batch_status(b, i), WK_OK);
    cr_assert_eq(wk_batch_status(b, 68), WK_EINVAL);

    /* Tokens from the batch release through a second batch. */
    bool released[32];
    for (int i = 0; i < 32; i++)
        wk_lock_release(p, &lock, wk_name_u64((uint64_t)i), &tokens[i], &released[i]);
    cr_assert_eq(wk_batch_exec(b), WK_OK);
    for (int i = 0; i < 32; i++)
        cr_assert(released[i], "release %d", i);
    cr_assert_eq(wk_batch_exec(b), WK_OK, "empty batch is fine");
    wk_batch_close(b);
    wk_db_close(db);
}

Test(batch, refused_query_refuses_batch_and_sends_nothing)
{
    wk_db *db = wk_test_open_url(server.url, wk_cap_read_only());
    redisContext *raw = wk_test_raw(server.url);
    wk_batch *b;
    cr_assert_eq(wk_batch_open(&b, db), WK_OK);
    wk_processor *p = wk_batch_processor(b);
    wk_entity lock = WK_LOCK_ENTITY("guarded", 10000);
    wk_lock_state st;
    wk_token t;
    bool got;
    long long before = wk_test_total_calls(raw);
    cr_assert_eq(wk_lock_inspect(p, &lock, wk_name_str("a"), &st), WK_OK);
    cr_assert_eq(wk_lock_try(p, &lock, wk_name_str("a"), &t, &got), WK_EDENIED);
    cr_assert_eq(wk_lock_inspect(p, &lock, wk_name_str("b"), &st), WK_OK);
    cr_assert_eq(wk_batch_exec(b), WK_EDENIED);
    cr_assert(strstr(wk_db_errmsg(db), "lock.try"), "names the query: %s", wk_db_errmsg(db));
    cr_assert(strstr(wk_db_errmsg(db), "may not WRITE Lock:guarded"), "%s", wk_db_errmsg(db));
    cr_assert_eq(wk_test_total_calls(raw), before, "nothing reached Redis");
    cr_assert_eq(wk_batch_status(b, 0), WK_EDENIED);
    /* The next batch starts clean. */
    cr_assert_eq(wk_lock_inspect(p, &lock, wk_name_str("a"), &st), WK_OK);
    cr_assert_eq(wk_batch_exec(b), WK_OK);
    cr_assert_gt(wk_test_total_calls(raw), before);
    redisFree(raw);
    wk_batch_close(b);
    wk_db_close(db);
}

Test(batch, failing_query_in_the_middle_does_not_stop_the_rest)
{
    wk_db *db = wk_test_open_url(server.url, NULL);
    redisContext *raw = wk_test_raw(server.url);
    freeReplyObject(wk_test_cmd(raw, "HSET notanumber f v"));
    wk_batch *b;
    cr_assert_eq(wk_batch_open(&b, db), WK_OK);
    wk_processor *p = wk_batch_processor(b);
    long long a = 0, bad = 0, c = 0;
    const char *incr_a[] = {"INCR", "mid-a"}, *incr_bad[] = {"INCR", "notanumber"},
               *incr_c[] = {"INCR", "mid-c"};
    custom(p, &counters, WK_WRITE, 2, incr_a, parse_ll, &a);
    custom(p, &counters, WK_WRITE, 2, incr_bad, parse_ll, &bad);
    custom(p, &counters, WK_WRITE, 2, incr_c, parse_ll, &c);
    cr_assert_eq(wk_batch_exec(b), WK_EREDIS);
    cr_assert(strstr(wk_db_errmsg(db), "batch query 1"), "%s", wk_db_errmsg(db));
    cr_assert(strstr(wk_db_errmsg(db), "WRONGTYPE"), "%s", wk_db_errmsg(db));
    cr_assert_eq(wk_batch_status(b, 0), WK_OK);
    cr_assert_eq(wk_batch_status(b, 1), WK_EREDIS);
    cr_assert_eq(wk_batch_status(b, 2), WK_OK);
    cr_assert_eq(a, 1);
    cr_assert_eq(c, 1, "query after the failure still ran");
    redisFree(raw);
    wk_batch_close(b);
    wk_db_close(db);
}

Test(batch, connection_drop_midway_reports_unknown_outcomes)
{
    wk_db *db = wk_test_open_url(server.url, NULL);
    wk_batch *b;
    cr_assert_eq(wk_batch_open(&b, db), WK_OK);
    wk_processor *p = wk_batch_processor(b);
    wk_entity lock = WK_LOCK_ENTITY("drop", 10000);
    wk_token t1, t2;
    bool g1 = false, g2 = false;
    wk_lock_state st;
    const char *quit[] = {"QUIT"};
    wk_lock_try(p, &lock, wk_name_str("a"), &t1, &g1);
    custom(p, NULL, WK_READ, 1, quit, NULL, NULL); /* the server closes after replying */
    wk_lock_try(p, &lock, wk_name_str("b"), &t2, &g2);
    wk_lock_inspect(p, &lock, wk_name_str("a"), &st);
    int rc = wk_batch_exec(b);
    cr_assert(wk_is_connection_error(rc), "got %s", wk_err_name(rc));
    cr_assert_eq(wk_batch_status(b, 0), WK_OK);
    cr_assert(g1);
    cr_assert_eq(wk_batch_status(b, 1), WK_OK);
    cr_assert_eq(wk_batch_status(b, 2), WK_EUNKNOWN, "a write without reply: unknown");
    cr_assert_eq(wk_batch_status(b, 3), WK_OK, "a retry-safe read is re-sent once: %s",
                 wk_err_name(wk_batch_status(b, 3)));
    cr_assert(st.held, "and sees the lock query 0 took");
    /* The handle reconnects for the next query. */
    cr_assert_eq(wk_lock_inspect(wk_db_processor(db), &lock, wk_name_str("a"), &st), WK_OK);
    cr_assert(st.held);
    wk_batch_close(b);
    wk_db_close(db);
}

static const wk_script bump = {"test.bump", "return redis.call('INCR', KEYS[1])"};

static int run_bump(wk_processor *p, long long *out)
{
    const char *argv[] = {"bumps"};
    size_t lens[] = {5};
    wk_access access = {&counters, WK_WRITE};
    wk_query q = {.name = "test.bump",
                  .effect = {&access, 1},
                  .script = &bump,
                  .nkeys = 1,
                  .argc = 1,
                  .argv = argv,
                  .argvlen = lens,
                  .parse = parse_ll,
                  .out = out};
    return wk_process(p, &q);
}

Test(batch, noscript_after_flush_midway_runs_each_script_once)
{
    wk_db *db = wk_test_open_url(server.url, NULL);
    redisContext *raw = wk_test_raw(server.url);
    freeReplyObject(wk_test_cmd(raw, "DEL bumps"));
    long long first = 0;
    cr_assert_eq(run_bump(wk_db_processor(db), &first), WK_OK); /* loads the script */
    cr_assert_eq(first, 1);
    wk_batch *b;
    cr_assert_eq(wk_batch_open(&b, db), WK_OK);
    wk_processor *p = wk_batch_processor(b);
    long long out[6] = {0};
    const char *flush[] = {"SCRIPT", "FLUSH"};
    for (int i = 0; i < 3; i++)
        run_bump(p, &out[i]);
    custom(p, NULL, WK_WRITE, 2, flush, NULL, NULL);
    for (int i = 3; i < 6; i++)
        run_bump(p, &out[i]);
    cr_assert_eq(wk_batch_exec(b), WK_OK, "%s", wk_db_errmsg(db));
    redisReply *r = wk_test_cmd(raw, "GET bumps");
    cr_assert_str_eq(r->str, "7", "each script ran exactly once (1 + 6)");
    freeReplyObject(r);
    for (int i = 0; i < 6; i++)
        cr_assert(out[i] >= 2 && out[i] <= 7, "outcome %d = %lld", i, out[i]);
    cr_assert_eq(out[0], 2);
    cr_assert_eq(out[2], 4);
    cr_assert_gt(wk_test_cmd_calls(raw, "eval"), 0, "re-sent as EVAL");
    redisFree(raw);
    wk_batch_close(b);
    wk_db_close(db);
}

/* ---- hooks over a batch: both run when a query is queued (hooks.h) */

typedef struct hook_seen {
    int before, after;
    int after_status[4];
    bool out_written_at_after[4];
    const bool *got; /* the OUT parameter of the query being queued */
} hook_seen;

static int seen_before(void *ud, const wk_query *q, int st)
{
    (void)q;
    (void)st;
    ((hook_seen *)ud)->before++;
    return 0;
}

static int seen_after(void *ud, const wk_query *q, int st)
{
    (void)q;
    hook_seen *s = ud;
    if (s->after < 4) {
        s->after_status[s->after] = st;
        s->out_written_at_after[s->after] = *s->got;
    }
    s->after++;
    return 0;
}

Test(batch, hooks_over_a_batch_run_at_queue_time_with_the_queue_status)
{
    wk_entity lock = WK_LOCK_ENTITY("batchhooks", 10000);
    wk_db *db = wk_test_open_url(server.url, NULL);
    wk_db *ro = wk_test_open_url(server.url, wk_cap_read_only());
    wk_batch *b, *rb;
    cr_assert_eq(wk_batch_open(&b, db), WK_OK);
    cr_assert_eq(wk_batch_open(&rb, ro), WK_OK);

    hook_seen s = {0};
    bool got = false;
    s.got = &got;
    wk_hooks h;
    wk_hooks_init(&h, wk_batch_processor(b));
    h.before_write = seen_before;
    h.after_write = seen_after;
    h.userdata = &s;
    cr_assert(wk_processor_is_deferred(&h.base), "the wrapper copies the batch's flags");
    wk_token t;
    cr_assert_eq(wk_lock_try(&h.base, &lock, wk_name_str("a"), &t, &got), WK_OK);
    cr_assert_eq(s.before, 1);
    cr_assert_eq(s.after, 1, "after_write ran when the query was queued");
    cr_assert_eq(s.after_status[0], WK_OK, "with the status of queuing");
    cr_assert_not(s.out_written_at_after[0], "before the query ran");
    cr_assert_eq(wk_batch_exec(b), WK_OK, "%s", wk_db_errmsg(db));
    cr_assert(got, "the batch ran it");
    cr_assert_eq(wk_batch_status(b, 0), WK_OK, "its own result");
    cr_assert_eq(s.after, 1, "exec runs no hook");
    cr_assert_eq(s.before, 1);

    /* Refused when queued: after_write gets the refusal. */
    wk_hooks rh;
    wk_hooks_init(&rh, wk_batch_processor(rb));
    rh.before_write = seen_before;
    rh.after_write = seen_after;
    rh.userdata = &s;
    cr_assert_eq(wk_lock_try(&rh.base, &lock, wk_name_str("b"), &t, &got), WK_EDENIED);
    cr_assert_eq(s.after, 2);
    cr_assert_eq(s.after_status[1], WK_EDENIED);
    cr_assert_eq(wk_batch_exec(rb), WK_EDENIED);
    cr_assert_eq(s.after, 2, "exec runs no hook");
    wk_batch_close(rb);
    wk_batch_close(b);
    wk_db_close(ro);
    wk_db_close(db);
}
