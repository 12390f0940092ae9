/*
 * tests/reliability/test_faults.c — fault injection against redis-servers
 * the tests control: restarts under load, stalls, killed connections,
 * SCRIPT FLUSH and FLUSHALL while running, memory pressure.
 */
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "support.h"

static wk_db *open_fast(const char *url, int timeout_ms)
{
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = url;
    o.capability = wk_cap_read_write();
    o.connect_timeout_ms = timeout_ms;
    o.command_timeout_ms = timeout_ms;
    wk_db *db;
    cr_assert_eq(wk_db_open(&db, &o, NULL, 0), WK_OK);
    return db;
}

static const wk_entity lock = WK_LOCK_ENTITY("faults", 5000);
static const wk_entity bucket = WK_TOKEN_BUCKET_ENTITY("faults", 1000, 1000, 1000);
static const wk_entity cache = WK_CACHE_ENTITY("faults", 60000);

/* One mixed lock / limiter / cache operation; returns its first failure. */
static int mixed_op(wk_processor *p, unsigned i)
{
    wk_token t;
    bool got = false, ok;
    int rc = wk_lock_try(p, &lock, wk_name_u64(i % 16), &t, &got);
    if (rc == WK_OK && got)
        rc = wk_lock_release(p, &lock, wk_name_u64(i % 16), &t, &ok);
    if (rc == WK_OK) {
        wk_token_bucket_outcome o;
        rc = wk_token_bucket_acquire(p, &bucket, wk_name_u64(i % 4), 1, &o);
    }
    if (rc == WK_OK)
        rc = wk_cache_put(p, &cache, wk_name_u64(i % 8), "body", 4);
    if (rc == WK_OK) {
        char back[16];
        wk_buffer buf = {back, sizeof(back), 0, false};
        rc = wk_cache_get_into(p, &cache, wk_name_u64(i % 8), &buf);
        /* After FLUSHALL or a restart the item may be gone: a miss, never
         * a wrong body. */
        if (rc == WK_OK && buf.found && (buf.len != 4 || memcmp(back, "body", 4) != 0))
            rc = WK_ECORRUPT;
    }
    return rc;
}

Test(faults, restart_under_load_gives_ok_or_io_errors_then_recovers, .timeout = 60)
{
    wk_test_server s;
    cr_assert_eq(wk_test_server_start(&s, NULL), 0);
    wk_db *db = open_fast(s.url, 300);
    wk_processor *p = wk_db_processor(db);
    int ok = 0, io = 0;
    for (unsigned i = 0; i < 1500; i++) {
        if (i == 500) {
            wk_test_server_stop(&s);
        }
        if (i == 600)
            cr_assert_eq(wk_test_server_restart(&s, NULL), 0);
        int64_t t0 = wk_test_now_ms();
        int rc = mixed_op(p, i);
        int64_t took = wk_test_now_ms() - t0;
        cr_assert(rc == WK_OK || wk_is_connection_error(rc), "op %u: %s: %s", i, wk_err_name(rc),
                  wk_db_errmsg(db));
        /* Each call is bounded by its timeouts (3 round trips, one connect each). */
        cr_assert_lt(took, 4000, "op %u took %lld ms", i, (long long)took);
        if (rc == WK_OK)
            ok++;
        else
            io++;
    }
    fprintf(stderr, "restart under load: %d ok, %d connection errors\n", ok, io);
    cr_assert_gt(io, 0, "the server was down for 100 operations");
    cr_assert_eq(mixed_op(p, 0), WK_OK, "works again after the restart: %s", wk_db_errmsg(db));
    wk_db_close(db);
    wk_test_server_stop(&s);
}

Test(faults, flushall_and_script_flush_while_running, .timeout = 60)
{
    wk_test_server s;
    cr_assert_eq(wk_test_server_start(&s, NULL), 0);
    wk_db *db = open_fast(s.url, 1000);
    wk_processor *p = wk_db_processor(db);
    redisContext *raw = wk_test_raw(s.url);
    for (unsigned i = 0; i < 600; i++) {
        if (i % 100 == 50)
            freeReplyObject(wk_test_cmd(raw, "SCRIPT FLUSH"));
        if (i % 150 == 75)
            freeReplyObject(wk_test_cmd(raw, "FLUSHALL"));
        cr_assert_eq(mixed_op(p, i), WK_OK, "op %u: %s", i, wk_db_errmsg(db));
    }
    /* Outcomes stay right after a flush: a held lock, flushed away, is free. */
    wk_token t1, t2;
    bool got;
    cr_assert_eq(wk_lock_try(p, &lock, wk_name_str("x"), &t1, &got), WK_OK);
    cr_assert(got);
    freeReplyObject(wk_test_cmd(raw, "FLUSHALL"));
    freeReplyObject(wk_test_cmd(raw, "SCRIPT FLUSH"));
    bool released;
    cr_assert_eq(wk_lock_release(p, &lock, wk_name_str("x"), &t1, &released), WK_OK);
    cr_assert_not(released, "FLUSHALL removed the lease: release reports it");
    cr_assert_eq(wk_lock_try(p, &lock, wk_name_str("x"), &t2, &got), WK_OK);
    cr_assert(got);
    redisFree(raw);
    wk_db_close(db);
    wk_test_server_stop(&s);
}

Test(faults, stalled_server_calls_fail_in_bounded_time, .timeout = 60)
{
    wk_test_server s;
    cr_assert_eq(wk_test_server_start(&s, NULL), 0);
    wk_db *db = open_fast(s.url, 250);
    wk_processor *p = wk_db_processor(db);
    cr_assert_eq(mixed_op(p, 1), WK_OK);
    kill(s.pid, SIGSTOP);
    for (unsigned i = 0; i < 5; i++) {
        int64_t t0 = wk_test_now_ms();
        int rc = mixed_op(p, i);
        int64_t took = wk_test_now_ms() - t0;
        /* The first write sent into the stall has no reply: unknown. Later
         * calls cannot even finish the handshake: nothing sent, timed out. */
        if (i == 0)
            cr_assert_eq(rc, WK_EUNKNOWN, "got %s", wk_err_name(rc));
        else
            cr_assert(rc == WK_ETIMEDOUT || rc == WK_EIO, "got %s", wk_err_name(rc));
        cr_assert_lt(took, 2000, "bounded by the timeouts, took %lld ms", (long long)took);
    }
    kill(s.pid, SIGCONT);
    int rc = WK_EIO;
    for (int i = 0; i < 3 && rc != WK_OK; i++)
        rc = mixed_op(p, 2);
    cr_assert_eq(rc, WK_OK, "recovered after SIGCONT: %s", wk_db_errmsg(db));
    wk_db_close(db);
    wk_test_server_stop(&s);
}

Test(faults, client_kill_between_queries, .timeout = 60)
{
    wk_test_server s;
    cr_assert_eq(wk_test_server_start(&s, NULL), 0);
    wk_db *db = open_fast(s.url, 1000);
    wk_processor *p = wk_db_processor(db);
    redisContext *raw = wk_test_raw(s.url);
    int failures = 0;
    for (unsigned i = 0; i < 200; i++) {
        if (i % 20 == 10)
            freeReplyObject(wk_test_cmd(raw, "CLIENT KILL TYPE normal SKIPME yes"));
        int rc = mixed_op(p, i);
        cr_assert(rc == WK_OK || wk_is_connection_error(rc), "%s", wk_err_name(rc));
        failures += rc != WK_OK;
    }
    /* A kill costs at most the one query in flight. */
    cr_assert_leq(failures, 10);
    redisFree(raw);
    wk_db_close(db);
    wk_test_server_stop(&s);
}

Test(faults, maxmemory_noeviction_write_fails_with_redis_error, .timeout = 60)
{
    const char *config[] = {"maxmemory-policy noeviction", NULL};
    wk_test_server s;
    cr_assert_eq(wk_test_server_start(&s, config), 0);
    wk_db *db = open_fast(s.url, 2000);
    redisContext *raw = wk_test_raw(s.url);
    /* Store 4 MiB, then lower maxmemory below it: every write is refused
     * from then on (filling up to the limit instead leaves it to chance
     * whether the next small write still fits). */
    static char blob[4096];
    memset(blob, 'x', sizeof(blob));
    for (int i = 0; i < 1024; i++)
        freeReplyObject(wk_test_cmd(raw, "SET fill:%d %b", i, blob, sizeof(blob)));
    freeReplyObject(wk_test_cmd(raw, "CONFIG SET maxmemory 1mb"));
    wk_token t;
    bool got = true;
    int rc = wk_lock_try(wk_db_processor(db), &lock, wk_name_str("oom"), &t, &got);
    cr_assert_eq(rc, WK_EREDIS, "got %s", wk_err_name(rc));
    cr_assert(strstr(wk_db_errmsg(db), "OOM"), "names the Redis error: %s", wk_db_errmsg(db));
    cr_assert_not(got);
    /* Reads still work. */
    wk_lock_state st;
    cr_assert_eq(wk_lock_inspect(wk_db_processor(db), &lock, wk_name_str("oom"), &st), WK_OK);
    cr_assert_not(st.held);
    redisFree(raw);
    wk_db_close(db);
    wk_test_server_stop(&s);
}

Test(faults, allkeys_lru_can_evict_a_held_lock, .timeout = 60)
{
    /* Documented in docs/GUARANTEES.md: under an evicting policy Redis may
     * drop a lock key before its TTL. The holder learns it at release or
     * extend (false); in between, another replica can take the lock. */
    const char *config[] = {"maxmemory 2mb", "maxmemory-policy allkeys-lru", NULL};
    wk_test_server s;
    cr_assert_eq(wk_test_server_start(&s, config), 0);
    wk_db *db = open_fast(s.url, 2000);
    wk_processor *p = wk_db_processor(db);
    wk_token t;
    bool got;
    cr_assert_eq(wk_lock_try(p, &lock, wk_name_str("evictme"), &t, &got), WK_OK);
    cr_assert(got);
    redisContext *raw = wk_test_raw(s.url);
    static char blob[64 * 1024];
    memset(blob, 'y', sizeof(blob));
    for (int i = 0; i < 200; i++)
        freeReplyObject(wk_test_cmd(raw, "SET fill:%d %b", i, blob, sizeof(blob)));
    wk_lock_state st;
    cr_assert_eq(wk_lock_inspect(p, &lock, wk_name_str("evictme"), &st), WK_OK);
    bool extended, released;
    cr_assert_eq(wk_lock_extend(p, &lock, wk_name_str("evictme"), &t, &extended), WK_OK);
    cr_assert_eq(extended, st.held, "extend tells the truth about the lease");
    if (!st.held) {
        cr_assert_eq(wk_lock_release(p, &lock, wk_name_str("evictme"), &t, &released), WK_OK);
        cr_assert_not(released, "an evicted lease reports false, never a false success");
    }
    fprintf(stderr, "allkeys-lru: lock key %s after 12 MiB of writes into 2 MiB\n",
            st.held ? "survived" : "was evicted");
    redisFree(raw);
    wk_db_close(db);
    wk_test_server_stop(&s);
}

Test(faults, stalled_server_lease_keeper_reports_lost_not_held, .timeout = 60)
{
    wk_test_server s;
    cr_assert_eq(wk_test_server_start(&s, NULL), 0);
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = s.url;
    o.capability = wk_cap_read_write();
    o.connect_timeout_ms = 200;
    o.command_timeout_ms = 200;
    wk_db *db;
    cr_assert_eq(wk_db_open(&db, &o, NULL, 0), WK_OK);
    const wk_entity lease = WK_LOCK_ENTITY("stall-lease", 900);
    wk_token t;
    bool got;
    cr_assert_eq(wk_lock_try(wk_db_processor(db), &lease, wk_name_str("job"), &t, &got), WK_OK);
    cr_assert(got);
    wk_lease_keeper_options ko = WK_LEASE_KEEPER_OPTIONS_INIT;
    ko.db = &o;
    ko.entity = &lease;
    ko.name = wk_name_str("job");
    ko.token = t;
    wk_lease_keeper *k;
    char err[256];
    cr_assert_eq(wk_lease_keeper_start(&k, &ko, err, sizeof(err)), WK_OK, "%s", err);
    cr_assert_not(wk_lease_keeper_lost(k));
    /* Stall the server far past the lease: no extension can succeed. */
    int64_t stalled_at = wk_test_now_ms();
    kill(s.pid, SIGSTOP);
    bool lost = false;
    while (!lost && wk_test_now_ms() - stalled_at < 3000) {
        wk_test_sleep_ms(10);
        lost = wk_lease_keeper_lost(k);
    }
    int64_t told_after = wk_test_now_ms() - stalled_at;
    kill(s.pid, SIGCONT);
    cr_assert(lost, "the keeper must report the lease lost while the server is stalled");
    /* It may not claim the lease past the point where it could have run out. */
    cr_assert_leq(told_after, 900 + 100, "told %lld ms into a stall, lease 900 ms",
                  (long long)told_after);
    wk_lease_outcome out;
    wk_lease_keeper_stop(k, &out);
    cr_assert(out.lost);
    wk_db_close(db);
    wk_test_server_stop(&s);
}

static int parse_id(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    if (wk_reply_get_type(r) != WK_REPLY_INTEGER)
        return wk_diag_fail(d, WK_EPROTO, "expected an integer");
    *(long long *)q->out = wk_reply_integer(r);
    return WK_OK;
}

typedef struct killer {
    const char *url;
    long long id;
} killer;

/* Kills client `id` from another connection once the batch is blocked. */
static void *kill_later(void *arg)
{
    killer *k = arg;
    wk_test_sleep_ms(300);
    redisContext *raw = wk_test_raw(k->url);
    freeReplyObject(wk_test_cmd(raw, "CLIENT KILL ID %lld", k->id));
    redisFree(raw);
    return NULL;
}

Test(faults, client_kill_during_a_batch, .timeout = 60)
{
    wk_test_server s;
    cr_assert_eq(wk_test_server_start(&s, NULL), 0);
    wk_db *db = open_fast(s.url, 3000);
    long long id = 0;
    const char *id_argv[] = {"CLIENT", "ID"};
    size_t id_lens[] = {6, 2};
    wk_query who = {.name = "client.id", .argc = 2, .argv = id_argv, .argvlen = id_lens,
                    .parse = parse_id, .out = &id};
    cr_assert_eq(wk_process(wk_db_processor(db), &who), WK_OK);
    /* A batch that blocks halfway (BLPOP on an empty list) while another
     * connection kills this one: the server ran the first half only. */
    wk_batch *b;
    cr_assert_eq(wk_batch_open(&b, db), WK_OK);
    wk_processor *p = wk_batch_processor(b);
    wk_token t[4];
    bool got[4] = {false, false, false, false};
    wk_lock_try(p, &lock, wk_name_str("k0"), &t[0], &got[0]);
    wk_lock_try(p, &lock, wk_name_str("k1"), &t[1], &got[1]);
    const char *block_argv[] = {"BLPOP", "nothing-here", "2"};
    size_t block_lens[] = {5, 12, 1};
    wk_query block = {.name = "blpop", .argc = 3, .argv = block_argv, .argvlen = block_lens};
    cr_assert_eq(wk_process(p, &block), WK_OK);
    wk_lock_try(p, &lock, wk_name_str("k2"), &t[2], &got[2]);
    wk_lock_try(p, &lock, wk_name_str("k3"), &t[3], &got[3]);
    killer k = {s.url, id};
    pthread_t th;
    pthread_create(&th, NULL, kill_later, &k);
    int rc = wk_batch_exec(b);
    pthread_join(th, NULL);
    cr_assert(wk_is_connection_error(rc), "got %s: %s", wk_err_name(rc), wk_db_errmsg(db));
    cr_assert_eq(wk_batch_status(b, 0), WK_OK);
    cr_assert_eq(wk_batch_status(b, 1), WK_OK);
    cr_assert(got[0] && got[1]);
    cr_assert_eq(wk_batch_status(b, 2), WK_EIO, "a read without reply: I/O error");
    cr_assert_eq(wk_batch_status(b, 3), WK_EUNKNOWN, "a write without reply: outcome unknown");
    cr_assert_eq(wk_batch_status(b, 4), WK_EUNKNOWN);
    cr_assert_not(got[2] || got[3]);
    /* The server never ran them; the handle reconnects. */
    wk_lock_state st;
    cr_assert_eq(wk_lock_inspect(wk_db_processor(db), &lock, wk_name_str("k3"), &st), WK_OK);
    cr_assert_not(st.held);
    cr_assert_eq(wk_lock_inspect(wk_db_processor(db), &lock, wk_name_str("k1"), &st), WK_OK);
    cr_assert(st.held);
    wk_batch_close(b);
    wk_db_close(db);
    wk_test_server_stop(&s);
}
