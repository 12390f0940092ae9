/*
 * tests/core/test_pool.c — the connection pool (wakuwaku/pool.h) against
 * a private redis-server per test: 8 threads sharing 3 connections with
 * correct lock, limiter and cache results; the bounded wait (nothing
 * sent); batches on one borrowed connection; capability refusals; per-
 * thread messages; the helpers through the pool; reconnects after CLIENT
 * KILL and a restart; bad input; close with a handle still out.
 *
 * Worker threads never call cr_assert (criterion asserts belong to the
 * test's own thread): they count what went wrong and the test checks.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "core/core_internal.h"
#include "support.h"

#define THREADS 8
#define MAX_THREADS 64

static wk_test_server server;

static void start(void)
{
    cr_assert_eq(wk_test_server_start(&server, NULL), 0, "redis-server did not start");
}

static void stop(void)
{
    wk_test_server_stop(&server);
}

TestSuite(pool, .init = start, .fini = stop, .timeout = 60);

static wk_pool *open_pool(const wk_cap *cap, int size, int wait_ms, const char *client_name)
{
    return wk_test_open_pool(server.url, cap, size, wait_ms, client_name);
}

/* Run fn on n threads, thread i getting (char *)args + i * size, and join
 * them all. */
static void run_threads(int n, void *(*fn)(void *), void *args, size_t size)
{
    pthread_t th[MAX_THREADS];
    cr_assert_leq(n, MAX_THREADS);
    for (int i = 0; i < n; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, fn, (char *)args + (size_t)i * size), 0);
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
}

/* Clients of the server named `name` (CLIENT LIST). */
static int clients_named(redisContext *raw, const char *name)
{
    redisReply *r = wk_test_cmd(raw, "CLIENT LIST TYPE normal");
    char needle[96];
    snprintf(needle, sizeof(needle), " name=%s ", name);
    int n = 0;
    for (const char *s = r->str; (s = strstr(s, needle)) != NULL; s += strlen(needle))
        n++;
    freeReplyObject(r);
    return n;
}

/* CLIENT ID as a query of our own: touches no entity (empty effect). */
static int parse_id(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    if (wk_reply_get_type(r) != WK_REPLY_INTEGER)
        return wk_diag_fail(d, WK_EPROTO, "CLIENT ID: expected an integer");
    *(long long *)q->out = wk_reply_integer(r);
    return WK_OK;
}

static int client_id(wk_processor *p, long long *id)
{
    static const char *const argv[] = {"CLIENT", "ID"};
    static const size_t lens[] = {6, 2};
    wk_query q = {.name = "test.client_id",
                  .argc = 2,
                  .argv = argv,
                  .argvlen = lens,
                  .parse = parse_id,
                  .out = id};
    return wk_process(p, &q);
}

/* ------------------------------------------------------------------------
 * 8 threads, 3 connections
 * ---------------------------------------------------------------------- */

#define ROUNDS 150
#define BUCKET_CAPACITY 50

typedef struct shared_run {
    wk_processor *p;
    wk_entity lock, bucket, cache;
    atomic_int holders;      /* threads inside the lock right now */
    atomic_int acquired;     /* successful lock.try */
    atomic_int allowed;      /* limiter acquires allowed */
    atomic_int violations;   /* two holders at once, a lost release */
    atomic_int wrong_bodies; /* a cache get that did not return our put */
    atomic_int errors;       /* any status but WK_OK */
    char first_error[256];
    atomic_flag error_noted;
} shared_run;

typedef struct worker {
    shared_run *run;
    int id;
} worker;

static void note_error(shared_run *r, const char *what, int rc)
{
    atomic_fetch_add(&r->errors, 1);
    if (!atomic_flag_test_and_set(&r->error_noted))
        snprintf(r->first_error, sizeof(r->first_error), "%s: %s: %s", what, wk_err_name(rc),
                 wk_processor_errmsg(r->p));
}

static void *mixed_worker(void *arg)
{
    worker *w = arg;
    shared_run *r = w->run;
    for (int i = 0; i < ROUNDS; i++) {
        wk_token t;
        bool got, released;
        int rc = wk_lock_try(r->p, &r->lock, wk_name_str("shared"), &t, &got);
        if (rc) {
            note_error(r, "lock.try", rc);
        } else if (got) {
            atomic_fetch_add(&r->acquired, 1);
            if (atomic_fetch_add(&r->holders, 1) != 0)
                atomic_fetch_add(&r->violations, 1);
            atomic_fetch_sub(&r->holders, 1);
            rc = wk_lock_release(r->p, &r->lock, wk_name_str("shared"), &t, &released);
            if (rc)
                note_error(r, "lock.release", rc);
            else if (!released)
                atomic_fetch_add(&r->violations, 1);
        }

        wk_token_bucket_outcome out;
        rc = wk_token_bucket_acquire(r->p, &r->bucket, wk_name_str("shared"), 1, &out);
        if (rc)
            note_error(r, "token_bucket.acquire", rc);
        else if (out.allowed)
            atomic_fetch_add(&r->allowed, 1);

        char body[64];
        int n = snprintf(body, sizeof(body), "thread %d round %d", w->id, i);
        rc = wk_cache_put(r->p, &r->cache, wk_name_u64((uint64_t)w->id), body, (size_t)n);
        if (rc) {
            note_error(r, "cache.put", rc);
            continue;
        }
        wk_body got_body = WK_BODY_INIT;
        rc = wk_cache_get(r->p, &r->cache, wk_name_u64((uint64_t)w->id), &got_body);
        if (rc)
            note_error(r, "cache.get", rc);
        else if (!got_body.found || got_body.len != (size_t)n ||
                 memcmp(got_body.data, body, (size_t)n))
            atomic_fetch_add(&r->wrong_bodies, 1);
        wk_body_free(&got_body);
    }
    return NULL;
}

/* `threads` threads run the mixed workload through a pool of `size`
 * connections named `name`; every answer is checked. */
static void mixed_run(int threads, int size, const char *name)
{
    wk_pool *pool = open_pool(NULL, size, 5000, name);
    static shared_run r;
    memset(&r, 0, sizeof(r));
    atomic_flag_clear(&r.error_noted);
    r.p = wk_pool_processor(pool);
    r.lock = (wk_entity)WK_LOCK_ENTITY(name, 10000);
    /* One token an hour: nothing refills during the test. */
    r.bucket = (wk_entity)WK_TOKEN_BUCKET_ENTITY(name, BUCKET_CAPACITY, 1, 3600000);
    r.cache = (wk_entity)WK_CACHE_ENTITY(name, 60000);

    static worker w[MAX_THREADS];
    for (int i = 0; i < threads; i++)
        w[i] = (worker){&r, i};
    run_threads(threads, mixed_worker, w, sizeof(w[0]));

    cr_assert_eq(atomic_load(&r.errors), 0, "%d failures; first: %s", atomic_load(&r.errors),
                 r.first_error);
    cr_assert_eq(atomic_load(&r.violations), 0, "the lock had two holders or lost a release");
    cr_assert_gt(atomic_load(&r.acquired), 0);
    cr_assert_eq(atomic_load(&r.allowed), BUCKET_CAPACITY,
                 "the limiter allowed %d of %d attempts; its capacity is %d",
                 atomic_load(&r.allowed), threads * ROUNDS, BUCKET_CAPACITY);
    cr_assert_eq(atomic_load(&r.wrong_bodies), 0, "a get returned someone else's put");

    redisContext *raw = wk_test_raw(server.url);
    cr_assert_eq(clients_named(raw, name), size, "the pool's %d connections, no more", size);
    redisFree(raw);
    wk_pool_close(pool);
}

Test(pool, eight_threads_share_three_connections_with_correct_results)
{
    mixed_run(THREADS, 3, "wk-pool-mixed");
}

/* ------------------------------------------------------------------------
 * The bounded wait
 * ---------------------------------------------------------------------- */

typedef struct delayed_return {
    wk_pool *pool;
    wk_db *db;
    int after_ms;
    int rc;
} delayed_return;

static void *return_later(void *arg)
{
    delayed_return *d = arg;
    wk_test_sleep_ms(d->after_ms);
    d->rc = wk_pool_return(d->pool, d->db);
    return NULL;
}

Test(pool, every_connection_borrowed_times_out_within_the_bound_and_sends_nothing)
{
    wk_pool *pool = open_pool(NULL, 2, 300, NULL);
    wk_processor *p = wk_pool_processor(pool);
    wk_entity lock = WK_LOCK_ENTITY("pool-wait", 10000);
    wk_db *a, *b, *c = (wk_db *)&c;
    cr_assert_eq(wk_pool_borrow(pool, &a), WK_OK);
    cr_assert_eq(wk_pool_borrow(pool, &b), WK_OK);
    cr_assert_neq(a, b);

    redisContext *raw = wk_test_raw(server.url);
    long long before = wk_test_total_calls(raw);
    wk_token t;
    bool got = true;
    int64_t t0 = wk_test_now_ms();
    int rc = wk_lock_try(p, &lock, wk_name_str("x"), &t, &got);
    int64_t took = wk_test_now_ms() - t0;
    cr_assert_eq(rc, WK_ETIMEDOUT, "got %s", wk_err_name(rc));
    cr_assert_geq(took, 295, "waited the whole bound (took %lld ms)", (long long)took);
    cr_assert_lt(took, 1500, "and not much longer (took %lld ms)", (long long)took);
    cr_assert_str_eq(wk_pool_errmsg(pool), "pool: no free connection within 300 ms");
    cr_assert_str_eq(wk_processor_errmsg(p), "pool: no free connection within 300 ms");
    cr_assert_eq(wk_test_total_calls(raw), before, "a query that found no connection was sent");

    /* wk_pool_borrow waits the same way. */
    t0 = wk_test_now_ms();
    cr_assert_eq(wk_pool_borrow(pool, &c), WK_ETIMEDOUT);
    cr_assert_null(c);
    cr_assert_geq(wk_test_now_ms() - t0, 295);
    cr_assert_str_eq(wk_pool_errmsg(pool), "pool: no free connection within 300 ms");

    cr_assert_eq(wk_pool_return(pool, a), WK_OK);
    cr_assert_eq(wk_pool_return(pool, b), WK_OK);
    redisFree(raw);
    wk_pool_close(pool);

    /* A connection coming back wakes a waiter long before the bound. */
    pool = open_pool(NULL, 1, 5000, NULL);
    p = wk_pool_processor(pool);
    cr_assert_eq(wk_pool_borrow(pool, &a), WK_OK);
    delayed_return d = {pool, a, 100, -1};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, return_later, &d), 0);
    t0 = wk_test_now_ms();
    rc = wk_lock_try(p, &lock, wk_name_str("x"), &t, &got);
    took = wk_test_now_ms() - t0;
    pthread_join(th, NULL);
    cr_assert_eq(d.rc, WK_OK);
    cr_assert_eq(rc, WK_OK, "%s: %s", wk_err_name(rc), wk_pool_errmsg(pool));
    cr_assert(got);
    cr_assert_str_empty(wk_pool_errmsg(pool), "a success clears the thread's message");
    cr_assert_geq(took, 80, "it waited for the return (took %lld ms)", (long long)took);
    cr_assert_lt(took, 2500, "and not for the bound (took %lld ms)", (long long)took);
    wk_pool_close(pool);
}

typedef struct queued {
    wk_pool *pool;
    atomic_int *served; /* how many were served before this one */
    int order, rc;
} queued;

static void *borrow_in_turn(void *arg)
{
    queued *q = arg;
    wk_db *db;
    q->rc = wk_pool_borrow(q->pool, &db);
    if (q->rc == WK_OK) {
        q->order = atomic_fetch_add(q->served, 1);
        wk_test_sleep_ms(20);
        q->rc = wk_pool_return(q->pool, db);
    }
    return NULL;
}

Test(pool, waiters_are_served_in_the_order_they_came)
{
    wk_pool *pool = open_pool(NULL, 1, 5000, NULL);
    wk_db *db;
    cr_assert_eq(wk_pool_borrow(pool, &db), WK_OK);
    atomic_int served = 0;
    queued q[4];
    pthread_t th[4];
    /* Each thread starts once the one before it is seen queued, so the
     * order they came in is known however loaded the machine is. */
    for (int i = 0; i < 4; i++) {
        q[i] = (queued){pool, &served, -1, -1};
        cr_assert_eq(pthread_create(&th[i], NULL, borrow_in_turn, &q[i]), 0);
        wk_pool_usage u = {0};
        for (int spins = 0; u.waiting < (size_t)i + 1 && spins < 10000; spins++) {
            cr_assert_eq(wk_pool_stats(pool, &u), WK_OK);
            if (u.waiting < (size_t)i + 1)
                wk_test_sleep_ms(1);
        }
        cr_assert_eq(u.waiting, (size_t)i + 1, "waiter %d queued", i);
    }
    cr_assert_eq(wk_pool_return(pool, db), WK_OK);
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        cr_assert_eq(q[i].rc, WK_OK, "waiter %d: %s", i, wk_err_name(q[i].rc));
        cr_assert_eq(q[i].order, i, "waiter %d was served %d-th", i, q[i].order);
    }
    wk_pool_close(pool);
}

Test(pool, zero_wait_fails_at_once)
{
    wk_pool *pool = open_pool(NULL, 1, 0, NULL);
    wk_db *db;
    cr_assert_eq(wk_pool_borrow(pool, &db), WK_OK);
    wk_entity lock = WK_LOCK_ENTITY("pool-nowait", 10000);
    wk_lock_state st;
    int64_t t0 = wk_test_now_ms();
    cr_assert_eq(wk_lock_inspect(wk_pool_processor(pool), &lock, wk_name_str("x"), &st),
                 WK_ETIMEDOUT);
    cr_assert_lt(wk_test_now_ms() - t0, 100);
    cr_assert_str_eq(wk_pool_errmsg(pool), "pool: no free connection within 0 ms");
    cr_assert_eq(wk_pool_return(pool, db), WK_OK);
    cr_assert_eq(wk_lock_inspect(wk_pool_processor(pool), &lock, wk_name_str("x"), &st), WK_OK);
    wk_pool_close(pool);
}

/* ------------------------------------------------------------------------
 * Batches stay on one borrowed connection
 * ---------------------------------------------------------------------- */

#define ID_ROUNDS 200

typedef struct id_worker {
    wk_processor *p;
    long long ids[ID_ROUNDS];
    int failures;
} id_worker;

static void *collect_ids(void *arg)
{
    id_worker *w = arg;
    for (int i = 0; i < ID_ROUNDS; i++)
        if (client_id(w->p, &w->ids[i]) != WK_OK)
            w->failures++;
    return NULL;
}

Test(pool, a_batch_on_a_borrowed_handle_stays_on_its_connection)
{
    wk_pool *pool = open_pool(NULL, 3, 5000, NULL);
    wk_db *db;
    cr_assert_eq(wk_pool_borrow(pool, &db), WK_OK);
    long long mine = -1;
    cr_assert_eq(client_id(wk_db_processor(db), &mine), WK_OK, "%s", wk_db_errmsg(db));

    /* Others keep the shared processor busy meanwhile. */
    static id_worker w[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        memset(&w[i], 0, sizeof(w[i]));
        w[i].p = wk_pool_processor(pool);
        cr_assert_eq(pthread_create(&th[i], NULL, collect_ids, &w[i]), 0);
    }

    wk_entity lock = WK_LOCK_ENTITY("pool-batch", 10000);
    for (int round = 0; round < 20; round++) {
        wk_batch *b;
        cr_assert_eq(wk_batch_open(&b, db), WK_OK);
        wk_processor *bp = wk_batch_processor(b);
        long long first = -1, last = -2;
        wk_token t[8];
        bool got[8];
        cr_assert_eq(client_id(bp, &first), WK_OK);
        for (int k = 0; k < 8; k++)
            cr_assert_eq(
                wk_lock_try(bp, &lock, wk_name_u64((uint64_t)(round * 8 + k)), &t[k], &got[k]),
                WK_OK);
        cr_assert_eq(client_id(bp, &last), WK_OK);
        cr_assert_eq(wk_batch_exec(b), WK_OK, "%s", wk_db_errmsg(db));
        cr_assert_eq(first, mine, "the batch ran on connection %lld, not the borrowed %lld", first,
                     mine);
        cr_assert_eq(last, mine, "the batch moved to connection %lld", last);
        for (int k = 0; k < 8; k++)
            cr_assert(got[k]);
        wk_batch_close(b);
    }

    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    long long seen[2] = {-1, -1};
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(w[i].failures, 0);
        for (int k = 0; k < ID_ROUNDS; k++) {
            cr_assert_neq(w[i].ids[k], mine, "a shared query ran on the borrowed connection");
            long long id = w[i].ids[k];
            if (id != seen[0] && id != seen[1]) {
                cr_assert(seen[0] == -1 || seen[1] == -1, "a fourth connection (%lld)", id);
                seen[seen[0] == -1 ? 0 : 1] = id;
            }
        }
    }
    cr_assert_eq(wk_pool_return(pool, db), WK_OK);
    wk_pool_close(pool);
}

/* ------------------------------------------------------------------------
 * Capabilities and messages
 * ---------------------------------------------------------------------- */

typedef struct denied_worker {
    wk_processor *p;
    int denied_rc, read_rc;
    char denied_msg[256], after_read_msg[256];
} denied_worker;

static void *deny_then_read(void *arg)
{
    denied_worker *w = arg;
    wk_entity lock = WK_LOCK_ENTITY("pool-thread", 10000);
    wk_token t;
    bool got;
    wk_lock_state st;
    w->denied_rc = wk_lock_try(w->p, &lock, wk_name_str("x"), &t, &got);
    snprintf(w->denied_msg, sizeof(w->denied_msg), "%s", wk_processor_errmsg(w->p));
    w->read_rc = wk_lock_inspect(w->p, &lock, wk_name_str("x"), &st);
    snprintf(w->after_read_msg, sizeof(w->after_read_msg), "%s", wk_processor_errmsg(w->p));
    return NULL;
}

Test(pool, refusals_are_the_handles_sent_nothing_and_wait_for_nothing)
{
    wk_pool *pool = open_pool(wk_cap_read_only(), 2, 1000, NULL);
    wk_processor *p = wk_pool_processor(pool);
    cr_assert_not(wk_processor_is_deferred(p));
    cr_assert_str_eq(wk_cap_name(wk_db_capability(p->db)), "read-only");
    wk_entity lock = WK_LOCK_ENTITY("pool-cap", 10000);
    wk_token t;
    bool got;
    wk_lock_state st;
    redisContext *raw = wk_test_raw(server.url);

    /* Every connection out: a refusal still comes at once. */
    wk_db *a, *b;
    cr_assert_eq(wk_pool_borrow(pool, &a), WK_OK);
    cr_assert_eq(wk_pool_borrow(pool, &b), WK_OK);
    long long before = wk_test_total_calls(raw);
    int64_t t0 = wk_test_now_ms();
    cr_assert_eq(wk_lock_try(p, &lock, wk_name_str("x"), &t, &got), WK_EDENIED);
    cr_assert_lt(wk_test_now_ms() - t0, 500, "a refusal waited for a connection");
    cr_assert_str_eq(wk_pool_errmsg(pool),
                     "capability \"read-only\" may not WRITE Lock:pool-cap (lock.try)");
    cr_assert_eq(wk_test_total_calls(raw), before, "a refused query reached Redis");

    /* A borrowed handle refuses as any handle, in a batch too. */
    cr_assert_eq(wk_lock_try(wk_db_processor(a), &lock, wk_name_str("x"), &t, &got), WK_EDENIED);
    cr_assert(strstr(wk_db_errmsg(a), "may not WRITE Lock:pool-cap"), "%s", wk_db_errmsg(a));
    wk_batch *batch;
    cr_assert_eq(wk_batch_open(&batch, b), WK_OK);
    cr_assert_eq(wk_lock_inspect(wk_batch_processor(batch), &lock, wk_name_str("x"), &st), WK_OK);
    cr_assert_eq(wk_lock_try(wk_batch_processor(batch), &lock, wk_name_str("x"), &t, &got),
                 WK_EDENIED);
    cr_assert_eq(wk_batch_exec(batch), WK_EDENIED);
    wk_batch_close(batch);
    cr_assert_eq(wk_test_total_calls(raw), before, "a refused batch reached Redis");
    cr_assert_eq(wk_pool_return(pool, a), WK_OK);
    cr_assert_eq(wk_pool_return(pool, b), WK_OK);

    /* Reads pass. */
    cr_assert_eq(wk_lock_inspect(p, &lock, wk_name_str("x"), &st), WK_OK);
    cr_assert_gt(wk_test_total_calls(raw), before);

    /* Messages are per thread: this thread's failure survives another's. */
    cr_assert_eq(wk_lock_try(p, &lock, wk_name_str("x"), NULL, &got), WK_EINVAL);
    const char *mine = "lock.try: token and acquired are required";
    cr_assert_str_eq(wk_pool_errmsg(pool), mine);
    denied_worker w = {.p = p};
    run_threads(1, deny_then_read, &w, sizeof(w));
    cr_assert_eq(w.denied_rc, WK_EDENIED);
    cr_assert_str_eq(w.denied_msg,
                     "capability \"read-only\" may not WRITE Lock:pool-thread (lock.try)");
    cr_assert_eq(w.read_rc, WK_OK);
    cr_assert_str_eq(w.after_read_msg, "");
    cr_assert_str_eq(wk_pool_errmsg(pool), mine, "another thread's queries changed ours");
    cr_assert_str_eq(wk_db_errmsg(p->db), mine);

    redisFree(raw);
    wk_pool_close(pool);
}

/* ------------------------------------------------------------------------
 * Helpers through the shared processor
 * ---------------------------------------------------------------------- */

typedef struct fill_run {
    wk_processor *p;
    wk_entity cache, lock;
    atomic_int fills;
    int rc[THREADS];
    wk_fill_outcome outcome[THREADS];
    bool body_ok[THREADS];
} fill_run;

typedef struct fill_worker {
    fill_run *run;
    int id;
} fill_worker;

static int slow_fill(void *arg, wk_body *out)
{
    fill_run *r = arg;
    atomic_fetch_add(&r->fills, 1);
    wk_test_sleep_ms(150);
    out->data = malloc(6);
    memcpy(out->data, "filled", 6);
    out->len = 6;
    return WK_OK;
}

static void *fill_worker_main(void *arg)
{
    fill_worker *w = arg;
    fill_run *r = w->run;
    wk_fill_options fo = WK_FILL_OPTIONS_INIT;
    fo.wait_ms = 10000;
    wk_body body = WK_BODY_INIT;
    r->rc[w->id] = wk_cache_fill_once(r->p, &r->cache, wk_name_str("item"), &r->lock, slow_fill, r,
                                      &fo, &body, &r->outcome[w->id]);
    r->body_ok[w->id] = body.found && body.len == 6 && memcmp(body.data, "filled", 6) == 0;
    wk_body_free(&body);
    return NULL;
}

static int failing_fill(void *arg, wk_body *out)
{
    (void)arg;
    (void)out;
    return WK_ECORRUPT;
}

Test(pool, helpers_work_through_the_shared_processor)
{
    wk_pool *pool = open_pool(NULL, 3, 5000, NULL);
    wk_processor *p = wk_pool_processor(pool);

    /* Fill once: 8 threads miss at once, exactly one fills. */
    static fill_run r;
    memset(&r, 0, sizeof(r));
    r.p = p;
    r.cache = (wk_entity)WK_CACHE_ENTITY("pool-fill", 60000);
    r.lock = (wk_entity)WK_LOCK_ENTITY("pool-fill", 10000);
    fill_worker w[THREADS];
    for (int i = 0; i < THREADS; i++)
        w[i] = (fill_worker){&r, i};
    run_threads(THREADS, fill_worker_main, w, sizeof(w[0]));
    cr_assert_eq(atomic_load(&r.fills), 1, "the fill ran %d times", atomic_load(&r.fills));
    int filled = 0;
    for (int i = 0; i < THREADS; i++) {
        cr_assert_eq(r.rc[i], WK_OK, "thread %d: %s", i, wk_err_name(r.rc[i]));
        cr_assert(r.body_ok[i], "thread %d got no body", i);
        filled += r.outcome[i] == WK_FILL_FILLED;
    }
    cr_assert_eq(filled, 1);

    /* A failing fill: its message reaches this thread through the pool. */
    wk_body body = WK_BODY_INIT;
    wk_fill_outcome outcome;
    cr_assert_eq(wk_cache_fill_once(p, &r.cache, wk_name_str("other"), &r.lock, failing_fill, NULL,
                                    NULL, &body, &outcome),
                 WK_ECORRUPT);
    cr_assert(strstr(wk_pool_errmsg(pool), "the fill function failed (WK_ECORRUPT)"), "%s",
              wk_pool_errmsg(pool));

    /* Deadline acquire waits for a holder, each try on any connection. */
    wk_entity lock = WK_LOCK_ENTITY("pool-deadline", 10000);
    wk_db *holder;
    cr_assert_eq(wk_pool_borrow(pool, &holder), WK_OK);
    wk_token held, t;
    bool got;
    cr_assert_eq(wk_lock_try(wk_db_processor(holder), &lock, wk_name_str("x"), &held, &got), WK_OK);
    cr_assert(got);
    wk_backoff bo = WK_BACKOFF_INIT;
    cr_assert_eq(wk_lock_acquire(p, &lock, wk_name_str("x"), wk_deadline_in(200), &bo, &t, &got),
                 WK_OK);
    cr_assert_not(got, "held by the borrowed handle");
    bool released;
    cr_assert_eq(
        wk_lock_release(wk_db_processor(holder), &lock, wk_name_str("x"), &held, &released), WK_OK);
    cr_assert(released);
    cr_assert_eq(wk_pool_return(pool, holder), WK_OK);
    cr_assert_eq(wk_lock_acquire(p, &lock, wk_name_str("x"), wk_deadline_in(2000), &bo, &t, &got),
                 WK_OK);
    cr_assert(got);
    wk_pool_close(pool);
}

/* Settings name their Pub/Sub channel after the handle's database: through
 * the shared processor it is the connections' database too. */
Test(pool, settings_through_the_pool_publish_on_the_databases_channel)
{
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = server.url;
    o.capability = wk_cap_read_write();
    o.database = 3;
    wk_pool_options po = WK_POOL_OPTIONS_INIT;
    po.db = &o;
    po.size = 2;
    wk_pool *pool;
    cr_assert_eq(wk_pool_open(&pool, &po, NULL, 0), WK_OK);
    wk_processor *p = wk_pool_processor(pool);
    wk_entity st = WK_SETTINGS_ENTITY("pool-settings");
    char chan[WK_KEY_MAX];
    size_t len;
    wk_name app = wk_name_str("app");
    cr_assert_eq(wk_key_build(chan, sizeof(chan), &len, &st, &app, ":chan:3"), WK_OK);

    redisContext *sub = wk_test_raw(server.url);
    struct timeval tv = {5, 0};
    redisSetTimeout(sub, tv);
    freeReplyObject(wk_test_cmd(sub, "SUBSCRIBE %b", chan, len));
    int64_t version;
    cr_assert_eq(wk_settings_put(p, &st, wk_name_str("app"), "k", 1, "v", 1, &version), WK_OK, "%s",
                 wk_pool_errmsg(pool));
    redisReply *m = NULL;
    cr_assert_eq(redisGetReply(sub, (void **)&m), REDIS_OK, "nothing published on %s", chan);
    cr_assert(m->type == REDIS_REPLY_ARRAY && m->elements == 3);
    cr_assert_eq(m->element[1]->len, len);
    cr_assert_eq(memcmp(m->element[1]->str, chan, len), 0);
    freeReplyObject(m);
    redisFree(sub);

    wk_settings_map *snap;
    cr_assert_eq(wk_settings_snapshot(p, &st, wk_name_str("app"), &snap), WK_OK);
    cr_assert_eq(snap->count, 1);
    cr_assert_eq(snap->version, version);
    wk_settings_map_free(snap);
    wk_pool_close(pool);
}

/* ------------------------------------------------------------------------
 * Reconnects
 * ---------------------------------------------------------------------- */

/* Borrow every connection; CLIENT ID of each into ids[]. */
static void ids_of_all(wk_pool *pool, int n, long long *ids)
{
    wk_db *db[8];
    for (int i = 0; i < n; i++) {
        cr_assert_eq(wk_pool_borrow(pool, &db[i]), WK_OK);
        wk_entity lock = WK_LOCK_ENTITY("pool-ids", 10000);
        wk_lock_state st;
        /* A read first: after a kill it is re-sent on a new connection. */
        int rc = wk_lock_inspect(wk_db_processor(db[i]), &lock, wk_name_str("x"), &st);
        cr_assert_eq(rc, WK_OK, "connection %d: %s: %s", i, wk_err_name(rc), wk_db_errmsg(db[i]));
        cr_assert_eq(client_id(wk_db_processor(db[i]), &ids[i]), WK_OK);
    }
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < i; k++)
            cr_assert_neq(ids[i], ids[k]);
        cr_assert_eq(wk_pool_return(pool, db[i]), WK_OK);
    }
}

Test(pool, connections_reconnect_after_client_kill)
{
    wk_pool *pool = open_pool(NULL, 3, 2000, "wk-pool-kill");
    wk_processor *p = wk_pool_processor(pool);
    redisContext *raw = wk_test_raw(server.url);
    long long before[3], after[3];
    ids_of_all(pool, 3, before);

    redisReply *kr = wk_test_cmd(raw, "CLIENT KILL TYPE normal SKIPME yes");
    cr_assert_eq(kr->integer, 3);
    freeReplyObject(kr);
    ids_of_all(pool, 3, after);
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 3; k++)
            cr_assert_neq(after[i], before[k], "connection %d was not replaced", i);
    cr_assert_eq(clients_named(raw, "wk-pool-kill"), 3);

    /* A write meeting a killed connection keeps the handle's outcome (not
     * re-sent elsewhere), and the next write runs. */
    kr = wk_test_cmd(raw, "CLIENT KILL TYPE normal SKIPME yes");
    freeReplyObject(kr);
    wk_entity lock = WK_LOCK_ENTITY("pool-kill", 10000);
    wk_token t;
    bool got;
    int rc = wk_lock_try(p, &lock, wk_name_str("x"), &t, &got);
    /* WK_OK only if the connection sat idle long enough to be probed. */
    cr_assert(rc == WK_EUNKNOWN || rc == WK_EIO || rc == WK_OK, "got %s", wk_err_name(rc));
    if (rc)
        cr_assert(wk_pool_errmsg(pool)[0], "the handle's message reaches the thread");
    rc = wk_lock_try(p, &lock, wk_name_str("y"), &t, &got);
    cr_assert_eq(rc, WK_OK, "%s: %s", wk_err_name(rc), wk_pool_errmsg(pool));
    cr_assert(got);
    redisFree(raw);
    wk_pool_close(pool);
}

typedef struct cycle_worker {
    wk_processor *p;
    int id, failures;
} cycle_worker;

static void *lock_cycles(void *arg)
{
    cycle_worker *w = arg;
    wk_entity lock = WK_LOCK_ENTITY("pool-restart", 10000);
    for (int i = 0; i < 50; i++) {
        wk_token t;
        bool got, released;
        wk_name name = wk_name_u64((uint64_t)(w->id * 1000 + i));
        if (wk_lock_try(w->p, &lock, name, &t, &got) || !got ||
            wk_lock_release(w->p, &lock, name, &t, &released) || !released)
            w->failures++;
    }
    return NULL;
}

Test(pool, a_restarted_server_is_reached_again)
{
    wk_pool *pool = open_pool(NULL, 2, 2000, NULL);
    wk_processor *p = wk_pool_processor(pool);
    long long ids[2];
    ids_of_all(pool, 2, ids);

    wk_test_server_stop(&server);
    wk_entity lock = WK_LOCK_ENTITY("pool-restart", 10000);
    wk_lock_state st;
    int rc = wk_lock_inspect(p, &lock, wk_name_str("x"), &st);
    cr_assert(wk_is_connection_error(rc), "server down: %s", wk_err_name(rc));
    cr_assert(wk_pool_errmsg(pool)[0], "the failure has a message");

    cr_assert_eq(wk_test_server_restart(&server, NULL), 0);
    wk_test_sleep_ms(1100); /* idle long enough to be probed */
    wk_db *db[2];
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(wk_pool_borrow(pool, &db[i]), WK_OK);
        wk_token t;
        bool got;
        rc = wk_lock_try(wk_db_processor(db[i]), &lock, wk_name_u64((uint64_t)i), &t, &got);
        cr_assert_eq(rc, WK_OK, "connection %d after the restart: %s: %s", i, wk_err_name(rc),
                     wk_db_errmsg(db[i]));
        cr_assert(got);
    }
    for (int i = 0; i < 2; i++)
        cr_assert_eq(wk_pool_return(pool, db[i]), WK_OK);

    cycle_worker w[4];
    for (int i = 0; i < 4; i++)
        w[i] = (cycle_worker){p, i + 1, 0};
    run_threads(4, lock_cycles, w, sizeof(w[0]));
    for (int i = 0; i < 4; i++)
        cr_assert_eq(w[i].failures, 0, "thread %d", i);
    wk_pool_close(pool);
}

/* ------------------------------------------------------------------------
 * Bad input, the shared handle, close
 * ---------------------------------------------------------------------- */

static int try_open(wk_pool **out, const wk_db_options *o, int size, int wait_ms, char *err,
                    size_t n)
{
    wk_pool_options po = WK_POOL_OPTIONS_INIT;
    po.db = o;
    po.size = size;
    po.wait_ms = wait_ms;
    return wk_pool_open(out, &po, err, n);
}

Test(pool, bad_options_are_refused_and_leave_nothing)
{
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = server.url;
    o.capability = wk_cap_read_write();
    wk_pool *pool = (wk_pool *)&pool;
    char err[512];

    cr_assert_eq(wk_pool_open(NULL, NULL, err, sizeof(err)), WK_EINVAL);
    cr_assert_eq(wk_pool_open(&pool, NULL, err, sizeof(err)), WK_EINVAL);
    cr_assert_null(pool);
    cr_assert_str_eq(err, "pool: options are NULL");
    cr_assert_eq(try_open(&pool, NULL, 2, 100, err, sizeof(err)), WK_EINVAL);
    cr_assert(strstr(err, "options.db is NULL"), "%s", err);
    cr_assert_eq(try_open(&pool, &o, 0, 100, err, sizeof(err)), WK_EINVAL);
    cr_assert_str_eq(err, "pool: size must be 1..1024 connections (got 0)");
    cr_assert_eq(try_open(&pool, &o, WK_POOL_MAX_SIZE + 1, 100, err, sizeof(err)), WK_EINVAL);
    cr_assert_eq(try_open(&pool, &o, 2, -1, err, sizeof(err)), WK_EINVAL);
    cr_assert_str_eq(err, "pool: wait_ms must be >= 0 (got -1)");
    cr_assert_null(pool);
    cr_assert_eq(try_open(&pool, &o, 1, 0, NULL, 0), WK_OK, "NULL err is allowed");
    wk_pool_close(pool);

    /* wk_db_open's own checks, naming the connection. */
    wk_db_options nocap = o;
    nocap.capability = NULL;
    cr_assert_eq(try_open(&pool, &nocap, 2, 100, err, sizeof(err)), WK_EINVAL);
    cr_assert(strstr(err, "pool: connection 1 of 2: options.capability is required"), "%s", err);

    /* Nobody listening. */
    char dead[64];
    snprintf(dead, sizeof(dead), "redis://127.0.0.1:%d", wk_test_free_port());
    wk_db_options down = o;
    down.url = dead;
    down.connect_timeout_ms = 500;
    cr_assert_eq(try_open(&pool, &down, 2, 100, err, sizeof(err)), WK_EIO);
    cr_assert_null(pool);
    cr_assert(strstr(err, "connection 1 of 2") && strstr(err, "cannot connect"), "%s", err);

    /* The third connection is refused: the two opened are closed again. */
    wk_test_server small;
    const char *cfg[] = {"maxclients 2", NULL};
    cr_assert_eq(wk_test_server_start(&small, cfg), 0);
    wk_db_options two = o;
    two.url = small.url;
    two.client_name = "wk-pool-partial";
    int rc = try_open(&pool, &two, 3, 100, err, sizeof(err));
    cr_assert_neq(rc, WK_OK);
    cr_assert_null(pool);
    cr_assert(strstr(err, "pool: connection 3 of 3"), "%s", err);
    int left = -1;
    for (int tries = 0; tries < 50 && left != 0; tries++) {
        wk_test_sleep_ms(20);
        redisContext *raw = wk_test_raw(small.url);
        left = clients_named(raw, "wk-pool-partial");
        redisFree(raw);
    }
    cr_assert_eq(left, 0, "a failed open left %d connections open", left);
    wk_test_server_stop(&small);

    /* NULLs elsewhere. */
    wk_pool_close(NULL);
    cr_assert_null(wk_pool_processor(NULL));
    wk_db *db = (wk_db *)&db;
    cr_assert_eq(wk_pool_borrow(NULL, &db), WK_EINVAL);
    cr_assert_null(db);
    cr_assert_eq(wk_pool_return(NULL, NULL), WK_EINVAL);
    cr_assert_str_eq(wk_pool_errmsg(NULL), "");
}

Test(pool, returns_are_checked_and_the_shared_handle_does_no_io_of_its_own)
{
    wk_pool *pool = open_pool(NULL, 2, 200, NULL);
    wk_processor *p = wk_pool_processor(pool);
    wk_db *db, *other = wk_test_open_url(server.url, NULL);
    cr_assert_eq(wk_pool_borrow(NULL, NULL), WK_EINVAL);
    cr_assert_eq(wk_pool_borrow(pool, NULL), WK_EINVAL);
    cr_assert_eq(wk_pool_borrow(pool, &db), WK_OK);
    cr_assert_eq(wk_pool_return(pool, NULL), WK_EINVAL);
    cr_assert_eq(wk_pool_return(pool, other), WK_EINVAL, "not the pool's");
    cr_assert_eq(wk_pool_return(pool, p->db), WK_EINVAL, "the shared handle is never borrowed");
    cr_assert_eq(wk_pool_return(pool, db), WK_OK);
    cr_assert_eq(wk_pool_return(pool, db), WK_EINVAL, "returned twice");
    /* Still two connections, not three. */
    wk_db *a, *b, *c;
    cr_assert_eq(wk_pool_borrow(pool, &a), WK_OK);
    cr_assert_eq(wk_pool_borrow(pool, &b), WK_OK);
    cr_assert_eq(wk_pool_borrow(pool, &c), WK_ETIMEDOUT);
    cr_assert_eq(wk_pool_return(pool, a), WK_OK);
    cr_assert_eq(wk_pool_return(pool, b), WK_OK);

    /* The shared processor's handle: no batch, no narrowing, no close. */
    wk_batch *batch = (wk_batch *)&batch;
    cr_assert_eq(wk_batch_open(&batch, p->db), WK_EINVAL);
    cr_assert_null(batch);
    cr_assert(strstr(wk_pool_errmsg(pool), "wk_pool_borrow()"), "%s", wk_pool_errmsg(pool));
    wk_db *view = (wk_db *)&view;
    cr_assert_eq(wk_db_narrow(&view, p->db, wk_cap_read_only(), NULL), WK_EINVAL);
    cr_assert_null(view);
    cr_assert(strstr(wk_db_errmsg(p->db), "cannot be narrowed"), "%s", wk_db_errmsg(p->db));
    cr_assert_eq(wk_db_errmsg(p->db), wk_pool_errmsg(pool), "one buffer per thread");
    wk_db_close(p->db); /* does nothing */
    cr_assert_eq(wk_db_ping(p->db), WK_OK, "ping borrows a connection");
    wk_entity lock = WK_LOCK_ENTITY("pool-shared", 10000);
    wk_token t;
    bool got;
    cr_assert_eq(wk_lock_try(p, &lock, wk_name_str("x"), &t, &got), WK_OK);
    cr_assert(got);

    /* Through a hooks wrapper, messages still reach this thread. */
    wk_hooks hooks;
    wk_hooks_init(&hooks, p);
    cr_assert_eq(wk_lock_try(&hooks.base, &lock, wk_name_str("x"), NULL, &got), WK_EINVAL);
    cr_assert_str_eq(wk_processor_errmsg(&hooks.base), "lock.try: token and acquired are required");

    wk_db_close(other);
    wk_pool_close(pool);
}

Test(pool, close_with_a_handle_out_frees_the_pool_when_it_returns)
{
    wk_pool *pool = open_pool(NULL, 2, 200, NULL);
    wk_db *db;
    cr_assert_eq(wk_pool_borrow(pool, &db), WK_OK);
    wk_pool_close(pool);
    /* The borrower finishes its work; the handle is still open. */
    wk_entity lock = WK_LOCK_ENTITY("pool-close", 10000);
    wk_token t;
    bool got;
    cr_assert_eq(wk_lock_try(wk_db_processor(db), &lock, wk_name_str("x"), &t, &got), WK_OK, "%s",
                 wk_db_errmsg(db));
    cr_assert(got);
    cr_assert_eq(wk_pool_return(pool, db), WK_OK); /* frees the pool (ASan: no leak) */
}

/* Waiting acquires from several threads through the shared processor:
 * each wait takes a blocking connection of its own (the shared handle
 * keeps none, which two threads would share) and gives it back to the
 * pool, which keeps at most its size of them until it closes. */
typedef struct waiter_arg {
    wk_pool *pool;
    const wk_entity *lock;
    int got; /* acquisitions */
} waiter_arg;

static void *acquire_release_loop(void *arg)
{
    waiter_arg *w = arg;
    wk_processor *p = wk_pool_processor(w->pool);
    for (int i = 0; i < 5; i++) {
        wk_token t;
        bool got = false, released = false;
        int rc =
            wk_lock_acquire(p, w->lock, wk_name_str("one"), wk_deadline_in(20000), NULL, &t, &got);
        cr_assert_eq(rc, WK_OK, "%s", wk_pool_errmsg(w->pool));
        cr_assert(got);
        wk_test_sleep_ms(5); /* held: the others wait */
        cr_assert_eq(wk_lock_release(p, w->lock, wk_name_str("one"), &t, &released), WK_OK);
        cr_assert(released);
        w->got++;
    }
    return NULL;
}

Test(pool, waiting_acquires_from_many_threads_each_wait_on_a_connection_of_their_own)
{
    wk_pool *pool = open_pool(NULL, 2, 5000, "pool-waiters");
    wk_entity lock = WK_LOCK_ENTITY("pool-waiters", 10000);
    waiter_arg args[4];
    for (int i = 0; i < 4; i++)
        args[i] = (waiter_arg){pool, &lock, 0};
    run_threads(4, acquire_release_loop, args, sizeof(args[0]));
    for (int i = 0; i < 4; i++)
        cr_assert_eq(args[i].got, 5);
    /* Nothing left open beyond the pool's own connections and the
     * blocking ones it keeps (at most its size), and nothing once it
     * closes (the server sees the closes soon after). */
    redisContext *raw = wk_test_raw(server.url);
    int open = clients_named(raw, "pool-waiters");
    cr_assert(open >= 2 && open <= 4, "%d connections", open);
    wk_pool_close(pool);
    for (int i = 0; i < 200 && (open = clients_named(raw, "pool-waiters")) > 0; i++)
        wk_test_sleep_ms(10);
    cr_assert_eq(open, 0, "%d connections left after wk_pool_close", open);
    redisFree(raw);
}

/* ------------------------------------------------------------------------
 * Multiplexing (wk_pool_options.multiplex, the default): many threads'
 * queries in flight on one connection, each by the rules of a handle.
 * The proxy in front of the server freezes (nothing forwarded) while the
 * queries go out, so what is in flight at once is exact.
 * ---------------------------------------------------------------------- */

#define INFLIGHT 8

typedef struct inflight {
    wk_processor *p;
    const wk_entity *lock;
    uint64_t name;
    bool write;
    int bound_ms; /* > 0: the call's deadline, this many ms from its start */
    atomic_int *started;
    int rc;
    bool got;
    wk_token token;
    wk_lock_state st;
    int64_t took_ms;
    char msg[256];
} inflight;

static void *inflight_query(void *arg)
{
    inflight *f = arg;
    atomic_fetch_add(f->started, 1);
    int64_t t0 = wk_test_now_ms();
    wk_db *front = f->p->db;
    int64_t outer = f->bound_ms > 0 ? wk__db_bound(front, wk__add_ms(wk__boot_ms(), f->bound_ms))
                                    : 0;
    if (f->write)
        f->rc = wk_lock_try(f->p, f->lock, wk_name_u64(f->name), &f->token, &f->got);
    else
        f->rc = wk_lock_inspect(f->p, f->lock, wk_name_u64(f->name), &f->st);
    if (f->bound_ms > 0)
        wk__db_bound(front, outer);
    f->took_ms = wk_test_now_ms() - t0;
    snprintf(f->msg, sizeof(f->msg), "%s", wk_processor_errmsg(f->p));
    return NULL;
}

static void wait_started(atomic_int *started, int n)
{
    while (atomic_load(started) < n)
        wk_test_sleep_ms(5);
    wk_test_sleep_ms(150); /* … and their commands written into the frozen proxy */
}

/* A pool of one connection through a proxy, its scripts loaded (a
 * NOSCRIPT round would blur what is in flight). A 10 s command timeout:
 * the deadlines the tests look at are their own bounds, and a 24 MB put
 * under ThreadSanitizer needs more than the default 2 s. */
static wk_pool *proxied_pool(wk_test_proxy **px, int wait_ms, const wk_entity *lock)
{
    cr_assert_eq(wk_test_proxy_start(px, server.port), 0);
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = wk_test_proxy_url(*px);
    o.capability = wk_cap_read_write();
    o.command_timeout_ms = 10000;
    wk_pool_options po = WK_POOL_OPTIONS_INIT;
    po.db = &o;
    po.size = 1;
    po.wait_ms = wait_ms;
    wk_pool *pool = NULL;
    char err[256];
    cr_assert_eq(wk_pool_open(&pool, &po, err, sizeof(err)), WK_OK, "%s", err);
    wk_token t;
    bool got, ok;
    wk_processor *p = wk_pool_processor(pool);
    cr_assert_eq(wk_lock_try(p, lock, wk_name_str("warm"), &t, &got), WK_OK);
    cr_assert_eq(wk_lock_release(p, lock, wk_name_str("warm"), &t, &ok), WK_OK);
    return pool;
}

/* A case of the tests below: a lock, a pool of one connection through a
 * proxy, and the count of threads that started their query. */
typedef struct mux_case {
    wk_entity lock;
    wk_test_proxy *px;
    wk_pool *pool;
    atomic_int started;
} mux_case;

static void mux_begin(mux_case *c, const char *ns)
{
    c->lock = (wk_entity)WK_LOCK_ENTITY(wk_test_ns(ns), 60000);
    c->pool = proxied_pool(&c->px, 5000, &c->lock);
    atomic_init(&c->started, 0);
}

static void mux_end(mux_case *c)
{
    wk_pool_close(c->pool);
    wk_test_proxy_stop(c->px);
}

/* A query on lock `name` of case c (a try when `write`, else an inspect),
 * bounded by `bound_ms` when > 0. */
static inflight query_of(mux_case *c, uint64_t name, bool write, int bound_ms)
{
    return (inflight){.p = wk_pool_processor(c->pool), .lock = &c->lock, .name = name,
                      .write = write, .bound_ms = bound_ms, .started = &c->started};
}

static void lock_held(const wk_entity *lock, uint64_t name, bool held)
{
    wk_db *db = wk_test_open_url(server.url, NULL);
    wk_lock_state st;
    cr_assert_eq(wk_lock_inspect(wk_db_processor(db), lock, wk_name_u64(name), &st), WK_OK);
    cr_assert_eq(st.held, held, "lock %llu held: %d", (unsigned long long)name, st.held);
    wk_db_close(db);
}

/* INFLIGHT threads of case c, writes and reads in turn, each with its
 * query started (and written into the proxy); with `first_leads`, the
 * others start only once the first is asleep in poll as the leader. */
static void start_inflight(mux_case *c, inflight f[INFLIGHT], pthread_t th[INFLIGHT],
                           bool first_leads)
{
    for (int i = 0; i < INFLIGHT; i++) {
        f[i] = query_of(c, (uint64_t)i, i % 2 == 0, 0);
        cr_assert_eq(pthread_create(&th[i], NULL, inflight_query, &f[i]), 0);
        if (i == 0 && first_leads)
            wait_started(&c->started, 1);
    }
    wait_started(&c->started, INFLIGHT);
}

Test(pool, threads_share_one_connection_in_flight_and_each_lost_write_is_unknown)
{
    static mux_case c;
    mux_begin(&c, "mux-lost");
    inflight f[INFLIGHT];
    pthread_t th[INFLIGHT];
    wk_test_proxy_freeze(c.px, true);
    start_inflight(&c, f, th, false);
    /* Every command is on the one connection now: the server runs them
     * all, and the replies to all of them are lost at once. */
    wk_test_proxy_drop_next_reply(c.px, NULL, NULL);
    wk_test_proxy_freeze(c.px, false);
    for (int i = 0; i < INFLIGHT; i++)
        pthread_join(th[i], NULL);
    cr_assert_eq(wk_test_proxy_drops(c.px), 1);
    for (int i = 0; i < INFLIGHT; i++) {
        if (f[i].write) {
            /* Sent, ran, reply lost: unknown — never "not sent", never OK. */
            cr_assert_eq(f[i].rc, WK_EUNKNOWN, "write %d: %s: %s", i, wk_err_name(f[i].rc),
                         f[i].msg);
            cr_assert(strstr(f[i].msg, "may or may not have happened"), "%s", f[i].msg);
            lock_held(&c.lock, (uint64_t)i, true);
        } else {
            /* A retry-safe read is sent once more on a new connection. */
            cr_assert_eq(f[i].rc, WK_OK, "read %d: %s: %s", i, wk_err_name(f[i].rc), f[i].msg);
            cr_assert_eq(f[i].st.held, false, "read %d", i);
        }
    }
    mux_end(&c);
}

/* A query written at once while the leader sleeps in poll has its reply
 * come on the socket the leader polls: the leader is not woken for it.
 * (It was, once per such query — the events compared were those before
 * the write, with the unstaged query's POLLOUT — a context switch of the
 * leader per query.) */
Test(pool, queries_written_while_the_leader_polls_do_not_wake_it)
{
    static mux_case c;
    mux_begin(&c, "mux-kicks");
    inflight f[INFLIGHT];
    pthread_t th[INFLIGHT];
    wk_test_proxy_freeze(c.px, true);
    uint64_t before = wk__pool_leader_kicks(c.pool);
    start_inflight(&c, f, th, true);
    uint64_t kicks = wk__pool_leader_kicks(c.pool) - before;
    wk_test_proxy_freeze(c.px, false);
    for (int i = 0; i < INFLIGHT; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < INFLIGHT; i++)
        cr_assert_eq(f[i].rc, WK_OK, "query %d: %s: %s", i, wk_err_name(f[i].rc), f[i].msg);
    cr_assert_eq(kicks, 0, "the leader was woken %llu times for %d queries written at once",
                 (unsigned long long)kicks, INFLIGHT - 1);
    mux_end(&c);
}

Test(pool, a_query_past_its_deadline_leaves_its_slot_and_the_next_reply_is_the_next_query_s)
{
    static mux_case c;
    mux_begin(&c, "mux-deadline");
    inflight a = query_of(&c, 1, true, 300), b = query_of(&c, 1, false, 0);
    pthread_t ta, tb;
    wk_test_proxy_freeze(c.px, true);
    cr_assert_eq(pthread_create(&ta, NULL, inflight_query, &a), 0);
    wait_started(&c.started, 1);
    cr_assert_eq(pthread_create(&tb, NULL, inflight_query, &b), 0); /* written behind a's */
    pthread_join(ta, NULL);
    /* a's deadline passed with its write in flight: unknown, by its own
     * deadline, while b still waits on the same connection. */
    cr_assert_eq(a.rc, WK_EUNKNOWN, "%s: %s", wk_err_name(a.rc), a.msg);
    cr_assert(strstr(a.msg, "timed out waiting for Redis (the write may or may not have happened)"),
              "%s", a.msg);
    cr_assert_lt(a.took_ms, 1500, "a returned by its deadline (took %lld ms)",
                 (long long)a.took_ms);
    wk_test_proxy_freeze(c.px, false);
    pthread_join(tb, NULL);
    /* b got its own reply (PTTL of the lock a's try took), not a's. */
    cr_assert_eq(b.rc, WK_OK, "%s: %s", wk_err_name(b.rc), b.msg);
    cr_assert(b.st.held, "b saw the lock a's try took (it ran before b's inspect)");
    /* a's reply (its try took the lock) came after a returned: its parse
     * did not run, `got` is still the false it was left at. */
    cr_assert_eq(a.got, false, "a's OUT parameter was written after it returned");
    mux_end(&c);
}

static void freeze_proxy(void *px)
{
    wk_test_proxy_freeze(px, true);
}

/* The pool's connection is lost under a caller with a short deadline: the
 * read is sent again on a new connection, whose set-up (the proxy froze)
 * cannot end by then. The caller gives up at its own deadline; the
 * set-up runs by the connect timeout and serves the next query: one new
 * connection in all. Before, the set-up was bounded by the deadline of
 * the caller that began it, ended with it, and the next query set up
 * another. */
Test(pool, a_set_up_outlives_the_deadline_of_the_caller_that_began_it)
{
    static mux_case c;
    mux_begin(&c, "mux-setup");
    int sessions = wk_test_proxy_accepted(c.px);
    wk_test_proxy_drop_next_reply(c.px, freeze_proxy, c.px);
    inflight a = query_of(&c, 1, false, 300);
    inflight_query(&a);
    cr_assert_neq(a.rc, WK_OK, "a's set-up cannot end while the proxy is frozen");
    cr_assert_lt(a.took_ms, 1500, "a returned by its deadline (took %lld ms): %s",
                 (long long)a.took_ms, a.msg);
    cr_assert_eq(wk_test_proxy_accepted(c.px), sessions + 1, "a's resend began a set-up");
    wk_test_proxy_freeze(c.px, false);
    inflight b = query_of(&c, 1, false, 0);
    inflight_query(&b);
    cr_assert_eq(b.rc, WK_OK, "%s: %s", wk_err_name(b.rc), b.msg);
    cr_assert_eq(wk_test_proxy_accepted(c.px), sessions + 1,
                 "b was served by the set-up a began (%d connections in all)",
                 wk_test_proxy_accepted(c.px) - sessions);
    mux_end(&c);
}

typedef struct bucket_take {
    inflight base; /* the processor, the name, the start count; rc, msg */
    const wk_entity *bucket;
    wk_token_bucket_outcome out;
} bucket_take;

static void *take_token(void *arg)
{
    bucket_take *t = arg;
    atomic_fetch_add(t->base.started, 1);
    t->base.rc = wk_token_bucket_acquire(t->base.p, t->bucket, wk_name_u64(t->base.name), 1,
                                         &t->out);
    snprintf(t->base.msg, sizeof(t->base.msg), "%s", wk_processor_errmsg(t->base.p));
    return NULL;
}

Test(pool, noscript_replies_to_queries_in_flight_together_send_each_again_as_eval)
{
    static mux_case c;
    mux_begin(&c, "mux-noscript");
    wk_entity bucket = WK_TOKEN_BUCKET_ENTITY(wk_test_ns("mux-noscript"), 1, 1, 3600000);
    redisContext *raw = wk_test_raw(server.url);
    freeReplyObject(wk_test_cmd(raw, "SCRIPT FLUSH"));
    freeReplyObject(wk_test_cmd(raw, "CONFIG RESETSTAT"));
    bucket_take t[INFLIGHT];
    pthread_t th[INFLIGHT];
    wk_test_proxy_freeze(c.px, true);
    for (int i = 0; i < INFLIGHT; i++) {
        t[i] = (bucket_take){.base = query_of(&c, (uint64_t)i, true, 0), .bucket = &bucket};
        cr_assert_eq(pthread_create(&th[i], NULL, take_token, &t[i]), 0);
    }
    wait_started(&c.started, INFLIGHT);
    wk_test_proxy_freeze(c.px, false); /* every EVALSHA is answered NOSCRIPT */
    for (int i = 0; i < INFLIGHT; i++) {
        pthread_join(th[i], NULL);
        cr_assert_eq(t[i].base.rc, WK_OK, "%d: %s: %s", i, wk_err_name(t[i].base.rc),
                     t[i].base.msg);
        cr_assert(t[i].out.allowed, "%d: each ran once, as EVAL, and took its token", i);
    }
    redisReply *r = wk_test_cmd(raw, "INFO errorstats");
    const char *n = strstr(r->str, "errorstat_NOSCRIPT:count=");
    cr_assert(n && atoi(n + strlen("errorstat_NOSCRIPT:count=")) == INFLIGHT, "%s", r->str);
    freeReplyObject(r);
    redisFree(raw);
    mux_end(&c);
}

/* A cache put large enough to fill the socket's buffers while the proxy
 * forwards nothing: the connection's write stays unfinished. */
#define BIG_BODY (24u << 20)

typedef struct big_put {
    wk_processor *p;
    const wk_entity *cache;
    atomic_int *started;
    int rc;
} big_put;

static void *put_big(void *arg)
{
    big_put *b = arg;
    char *body = malloc(BIG_BODY);
    memset(body, 'x', BIG_BODY);
    atomic_fetch_add(b->started, 1);
    b->rc = wk_cache_put(b->p, b->cache, wk_name_str("big"), body, BIG_BODY);
    free(body);
    return NULL;
}

Test(pool, a_query_not_written_by_its_deadline_is_never_sent)
{
    static mux_case c;
    mux_begin(&c, "mux-unsent");
    wk_entity cache = WK_CACHE_ENTITY(wk_test_ns("mux-unsent"), 60000);
    big_put big = {.p = wk_pool_processor(c.pool), .cache = &cache, .started = &c.started};
    inflight b = query_of(&c, 1, true, 300);
    pthread_t tbig, tb;
    wk_test_proxy_freeze(c.px, true);
    cr_assert_eq(pthread_create(&tbig, NULL, put_big, &big), 0);
    wait_started(&c.started, 1);
    /* … formatted (twice 24 MB: slow under the sanitizers) and its write
     * stuck half way, before b comes */
    wk_test_sleep_ms(1000);
    cr_assert_eq(pthread_create(&tb, NULL, inflight_query, &b), 0);
    pthread_join(tb, NULL);
    cr_assert_eq(b.rc, WK_ETIMEDOUT, "%s: %s", wk_err_name(b.rc), b.msg);
    cr_assert(strstr(b.msg, "timed out before it could be sent (not sent: the write did not happen)"),
              "%s", b.msg);
    wk_test_proxy_freeze(c.px, false);
    pthread_join(tbig, NULL);
    cr_assert_eq(big.rc, WK_OK, "%s", wk_err_name(big.rc));
    /* The put went through, and b's try never reached the server. */
    lock_held(&c.lock, 1, false); /* the write reported not sent did not run */
    mux_end(&c);
}

typedef struct borrow_later {
    wk_pool *pool;
    atomic_bool *thawed;
    bool thawed_before;
    int rc;
    wk_db *db;
} borrow_later;

static void *borrow_and_note(void *arg)
{
    borrow_later *b = arg;
    b->rc = wk_pool_borrow(b->pool, &b->db);
    b->thawed_before = atomic_load(b->thawed);
    return NULL;
}

Test(pool, a_borrow_waits_for_the_shared_queries_in_flight_and_reads_the_abandoned_replies)
{
    static mux_case m;
    mux_begin(&m, "mux-borrow");
    atomic_bool thawed = false;
    inflight a = query_of(&m, 1, true, 200), c = query_of(&m, 2, true, 0);
    pthread_t ta, tc, tb;
    wk_test_proxy_freeze(m.px, true);
    cr_assert_eq(pthread_create(&ta, NULL, inflight_query, &a), 0);
    pthread_join(ta, NULL);
    cr_assert_eq(a.rc, WK_EUNKNOWN, "%s: %s", wk_err_name(a.rc), a.msg); /* its reply still due */
    cr_assert_eq(pthread_create(&tc, NULL, inflight_query, &c), 0);
    wait_started(&m.started, 2);
    borrow_later b = {.pool = m.pool, .thawed = &thawed};
    cr_assert_eq(pthread_create(&tb, NULL, borrow_and_note, &b), 0);
    wk_test_sleep_ms(200);
    atomic_store(&thawed, true);
    wk_test_proxy_freeze(m.px, false);
    pthread_join(tb, NULL);
    pthread_join(tc, NULL);
    cr_assert_eq(b.rc, WK_OK, "%s", wk_err_name(b.rc));
    cr_assert(b.thawed_before, "the borrow came before the shared queries' replies");
    cr_assert_eq(c.rc, WK_OK, "%s: %s", wk_err_name(c.rc), c.msg);
    cr_assert(c.got);
    /* The borrowed connection's replies are its own (a's was read). */
    wk_lock_state st;
    cr_assert_eq(wk_lock_inspect(wk_db_processor(b.db), &m.lock, wk_name_u64(1), &st), WK_OK,
                 "%s", wk_db_errmsg(b.db));
    cr_assert(st.held, "a's write ran");
    cr_assert_eq(wk_lock_inspect(wk_db_processor(b.db), &m.lock, wk_name_u64(3), &st), WK_OK);
    cr_assert(!st.held);
    cr_assert_eq(wk_pool_return(m.pool, b.db), WK_OK);
    mux_end(&m);
}

/* 64 threads on one connection: the lock, the limiter and the cache
 * answer as on a handle each (the mixed workload above). */
Test(pool, sixty_four_threads_on_one_connection_with_correct_results)
{
    mixed_run(MAX_THREADS, 1, "wk-pool-many");
}

/* Waits through the shared processor: each takes a blocking connection
 * for itself, and gives it back to the pool for the next wait instead of
 * closing it (before: every waiting acquire through a pool opened and
 * closed a connection of its own). Two threads wait at once, so two are
 * kept; more waits open none. */
typedef struct pooled_wait {
    wk_pool *pool;
    const wk_entity *lock;
    int rc;
} pooled_wait;

static void *wait_and_time_out(void *arg)
{
    pooled_wait *w = arg;
    for (int i = 0; i < 4 && w->rc == WK_OK; i++) {
        wk_token t;
        bool got = true;
        w->rc = wk_lock_acquire(wk_pool_processor(w->pool), w->lock, wk_name_str("x"),
                                wk_deadline_in(60), NULL, &t, &got);
        if (w->rc == WK_OK && got)
            w->rc = WK_EPROTO; /* a held lock acquired */
        wk_test_sleep_ms(150); /* the abandoned pop's late reply has come */
    }
    return NULL;
}

Test(pool, waits_through_the_pool_reuse_their_blocking_connections)
{
    wk_pool *pool = open_pool(NULL, 2, 1000, NULL);
    wk_processor *p = wk_pool_processor(pool);
    wk_entity lock = WK_LOCK_ENTITY(wk_test_ns("poolwait"), 30000);
    wk_token held;
    bool got = false;
    cr_assert_eq(wk_lock_try(p, &lock, wk_name_str("x"), &held, &got), WK_OK);
    cr_assert(got);
    redisContext *raw = wk_test_raw(server.url);
    long long before = wk_test_info(raw, "stats", "total_connections_received");
    pooled_wait w[2] = {{pool, &lock, WK_OK}, {pool, &lock, WK_OK}};
    run_threads(2, wait_and_time_out, w, sizeof(w[0]));
    cr_assert_eq(w[0].rc, WK_OK, "%s", wk_err_name(w[0].rc));
    cr_assert_eq(w[1].rc, WK_OK, "%s", wk_err_name(w[1].rc));
    long long opened = wk_test_info(raw, "stats", "total_connections_received") - before;
    cr_assert_leq(opened, 2, "8 waits through the pool opened %lld connections", opened);
    bool released = false;
    cr_assert_eq(wk_lock_release(p, &lock, wk_name_str("x"), &held, &released), WK_OK);
    cr_assert(released);
    redisFree(raw);
    wk_pool_close(pool);
}
