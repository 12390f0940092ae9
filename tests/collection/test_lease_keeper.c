/*
 * tests/collection/test_lease_keeper.c — the lease keeper against a real
 * redis-server: it keeps a lease through work many TTLs long, tells the
 * work within one heartbeat period when the lock is stolen (key deleted or
 * overwritten from another connection), counts a connection outage as a
 * loss only once the lease could have run out, and survives a short one.
 *
 * Capability table: the keeper adds no Redis query; it sends lock.extend,
 * rwlock.extend_write / extend_read and the releases, whose rows are
 * already in tests/capability (a read-only keeper is refused here).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <wakuwaku/deadline.h>
#include <wakuwaku/lease_keeper.h>

#include "redis_fixture.h"

/* One timeout for the whole suite: criterion's runner leaks (LeakSanitizer)
 * when tests with different timeouts run side by side. */
TestSuite(lease_keeper, .timeout = 120);

/* Scheduling latency allowed on top of a heartbeat period. */
#define MARGIN_MS 250

static wk_db_options options_for(const char *url)
{
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = url;
    o.capability = wk_cap_read_write();
    return o;
}

static void lock_key(char *buf, size_t len, const char *ns, const char *name)
{
    snprintf(buf, len, "@@wakuwaku-entity:Lock:%s:%s", ns, name);
}

static bool key_holds(redisContext *raw, const char *key, const wk_token *t)
{
    redisReply *r = wk_test_cmd(raw, "GET %s", key);
    bool ok = r->type == REDIS_REPLY_STRING && r->len == WK_TOKEN_LEN &&
              memcmp(r->str, t->bytes, WK_TOKEN_LEN) == 0;
    freeReplyObject(r);
    return ok;
}

/* What the lost callback saw. */
typedef struct lost_seen {
    atomic_int calls;
    atomic_int status;
    atomic_llong at;
    _Atomic(wk_lease_keeper *) keeper; /* for the stop-from-callback check */
    atomic_int stop_rc;
} lost_seen;

static void on_lost(void *ctx, int status)
{
    lost_seen *s = ctx;
    atomic_store(&s->at, (long long)wk_monotonic_ms());
    atomic_store(&s->status, status);
    wk_lease_keeper *k = atomic_load(&s->keeper);
    if (k)
        atomic_store(&s->stop_rc, wk_lease_keeper_stop(k, NULL));
    atomic_fetch_add(&s->calls, 1);
}

/* ---- a lease kept through work of more than 5 TTLs */

typedef struct long_work {
    redisContext *raw;
    const char *key;
    wk_token token;
    int64_t run_ms;
    int checks, not_held, told_lost;
} long_work;

static int long_work_fn(wk_lease_keeper *k, void *arg)
{
    long_work *w = arg;
    int64_t end = wk_monotonic_ms() + w->run_ms;
    while (wk_monotonic_ms() < end) {
        w->checks++;
        if (wk_lease_keeper_lost(k))
            w->told_lost++;
        if (!key_holds(w->raw, w->key, &w->token))
            w->not_held++;
        wk_test_sleep_ms(50);
    }
    return 42;
}

Test(lease_keeper, keeps_the_lock_through_work_longer_than_5_ttls)
{
    wk_db *db = wk_test_open(NULL);
    const int ttl = 600;
    wk_entity lock = WK_LOCK_ENTITY(wk_test_ns("lk"), ttl);
    wk_token t;
    bool got;
    cr_assert_eq(wk_lock_try(wk_db_processor(db), &lock, wk_name_str("job"), &t, &got), WK_OK);
    cr_assert(got);
    char key[256];
    lock_key(key, sizeof(key), lock.ns, "job");
    long_work w = {.raw = wk_test_raw(wk_test_url()), .key = key, .token = t, .run_ms = 6 * ttl};

    wk_db_options dbo = options_for(wk_test_url());
    wk_lease_keeper_options o = WK_LEASE_KEEPER_OPTIONS_INIT;
    o.db = &dbo;
    o.entity = &lock;
    o.name = wk_name_str("job");
    o.token = t;
    o.release = true;
    wk_lease_outcome out;
    char err[256];
    int rc = wk_lease_keeper_run(&o, long_work_fn, &w, &out, err, sizeof(err));
    cr_assert_eq(rc, WK_OK, "%s: %s", wk_err_name(rc), err);
    cr_assert(out.ran);
    cr_assert_eq(out.work_status, 42, "the work's status is passed back");
    cr_assert_geq(w.checks, 20);
    cr_assert_eq(w.not_held, 0, "the key lost our token %d times in %d checks", w.not_held,
                 w.checks);
    cr_assert_eq(w.told_lost, 0, "the work was told the lease was lost");
    cr_assert_not(out.lost, "lost (%s)", wk_err_name(out.lost_status));
    cr_assert_geq(out.extensions, 6, "only %llu extensions in 6 TTLs",
                  (unsigned long long)out.extensions);
    cr_assert(out.released, "release at the end");
    redisReply *r = wk_test_cmd(w.raw, "EXISTS %s", key);
    cr_assert_eq(r->integer, 0, "released lock is gone");
    freeReplyObject(r);
    redisFree(w.raw);
    wk_db_close(db);
}

Test(lease_keeper, keeps_rwlock_reader_and_writer_leases)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    const int ttl = 450;
    wk_entity rw = WK_RWLOCK_ENTITY(wk_test_ns("lkrw"), ttl);
    wk_token wt, rt;
    bool got;
    cr_assert_eq(wk_rwlock_try_write(p, &rw, wk_name_str("w"), &wt, &got), WK_OK);
    cr_assert(got);
    cr_assert_eq(wk_rwlock_try_read(p, &rw, wk_name_str("r"), &rt, &got), WK_OK);
    cr_assert(got);
    wk_db_options dbo = options_for(wk_test_url());
    wk_lease_keeper_options o = WK_LEASE_KEEPER_OPTIONS_INIT;
    o.db = &dbo;
    o.entity = &rw;
    o.kind = WK_LEASE_WRITE;
    o.name = wk_name_str("w");
    o.token = wt;
    wk_lease_keeper *kw, *kr;
    cr_assert_eq(wk_lease_keeper_start(&kw, &o, NULL, 0), WK_OK);
    o.kind = WK_LEASE_READ;
    o.name = wk_name_str("r");
    o.token = rt;
    cr_assert_eq(wk_lease_keeper_start(&kr, &o, NULL, 0), WK_OK);
    for (int i = 0; i < 12; i++) { /* 6 TTLs */
        wk_test_sleep_ms(ttl / 2);
        wk_rwlock_state st;
        cr_assert_eq(wk_rwlock_inspect(p, &rw, wk_name_str("w"), &st), WK_OK);
        cr_assert(st.writer_held, "writer lease ran out after %d ms", (i + 1) * ttl / 2);
        cr_assert_eq(wk_rwlock_inspect(p, &rw, wk_name_str("r"), &st), WK_OK);
        cr_assert_eq(st.readers, 1, "reader lease ran out after %d ms", (i + 1) * ttl / 2);
        cr_assert_not(wk_lease_keeper_lost(kw));
        cr_assert_not(wk_lease_keeper_lost(kr));
    }
    /* Steal the reader lease: remove its token from the set. */
    redisContext *raw = wk_test_raw(wk_test_url());
    redisReply *r = redisCommand(raw, "ZREM @@wakuwaku-entity:RwLock:{%s:r}:r %b", rw.ns,
                                 rt.bytes, (size_t)WK_TOKEN_LEN);
    cr_assert_eq(r->integer, 1);
    freeReplyObject(r);
    redisFree(raw);
    int64_t t0 = wk_monotonic_ms();
    while (!wk_lease_keeper_lost(kr) && wk_monotonic_ms() - t0 < 5000)
        wk_test_sleep_ms(5);
    cr_assert(wk_lease_keeper_lost(kr), "reader keeper never noticed");
    cr_assert_leq(wk_monotonic_ms() - t0, ttl / 3 + MARGIN_MS);
    cr_assert_not(wk_lease_keeper_lost(kw), "the writer keeper is independent");
    wk_lease_outcome out;
    cr_assert_eq(wk_lease_keeper_stop(kr, &out), WK_OK);
    cr_assert(out.lost);
    cr_assert_eq(out.lost_status, WK_OK);
    cr_assert_eq(wk_lease_keeper_stop(kw, &out), WK_OK);
    cr_assert_not(out.lost);
    wk_db_close(db);
}

/* ---- stolen: the work is told within one heartbeat period */

typedef struct steal_work {
    const char *key;
    int64_t hold_before_ms;
    int64_t stolen_at, told_at;
} steal_work;

static int steal_work_fn(wk_lease_keeper *k, void *arg)
{
    steal_work *w = arg;
    wk_test_sleep_ms((int)w->hold_before_ms);
    if (wk_lease_keeper_lost(k))
        return 1;
    /* Another connection deletes the key. */
    redisContext *raw = wk_test_raw(wk_test_url());
    freeReplyObject(wk_test_cmd(raw, "DEL %s", w->key));
    w->stolen_at = wk_monotonic_ms();
    redisFree(raw);
    while (!wk_lease_keeper_lost(k) && wk_monotonic_ms() - w->stolen_at < 10000)
        wk_test_sleep_ms(2);
    w->told_at = wk_monotonic_ms();
    return 0;
}

Test(lease_keeper, key_deleted_the_work_is_told_within_one_period)
{
    wk_db *db = wk_test_open(NULL);
    const int ttl = 1500, period = ttl / 3;
    wk_entity lock = WK_LOCK_ENTITY(wk_test_ns("lkdel"), ttl);
    wk_token t;
    bool got;
    cr_assert_eq(wk_lock_try(wk_db_processor(db), &lock, wk_name_str("job"), &t, &got), WK_OK);
    cr_assert(got);
    char key[256];
    lock_key(key, sizeof(key), lock.ns, "job");
    steal_work w = {.key = key, .hold_before_ms = 2 * ttl};
    lost_seen seen = {0};
    wk_db_options dbo = options_for(wk_test_url());
    wk_lease_keeper_options o = WK_LEASE_KEEPER_OPTIONS_INIT;
    o.db = &dbo;
    o.entity = &lock;
    o.name = wk_name_str("job");
    o.token = t;
    o.on_lost = on_lost;
    o.ctx = &seen;
    wk_lease_outcome out;
    char err[256];
    int rc = wk_lease_keeper_run(&o, steal_work_fn, &w, &out, err, sizeof(err));
    cr_assert_eq(rc, WK_OK, "%s: %s", wk_err_name(rc), err);
    cr_assert_eq(out.work_status, 0, "the lease was lost before it was stolen");
    cr_assert(out.lost);
    cr_assert_eq(out.lost_status, WK_OK, "an extension found it gone: %s",
                 wk_err_name(out.lost_status));
    int64_t told = w.told_at - w.stolen_at;
    cr_assert_leq(told, period + MARGIN_MS, "told %lld ms after the steal (period %d)",
                  (long long)told, period);
    cr_assert_eq(atomic_load(&seen.calls), 1, "the callback runs once");
    cr_assert_eq(atomic_load(&seen.status), WK_OK);
    cr_assert_leq(atomic_load(&seen.at) - w.stolen_at, period + MARGIN_MS);
    wk_db_close(db);
}

Test(lease_keeper, key_overwritten_the_keeper_stops_and_leaves_it_alone)
{
    const int ttl = 1200, period = ttl / 3;
    wk_db *db = wk_test_open(NULL);
    wk_entity lock = WK_LOCK_ENTITY(wk_test_ns("lkover"), ttl);
    wk_token t;
    bool got;
    cr_assert_eq(wk_lock_try(wk_db_processor(db), &lock, wk_name_str("job"), &t, &got), WK_OK);
    cr_assert(got);
    char key[256];
    lock_key(key, sizeof(key), lock.ns, "job");
    lost_seen seen = {0};
    wk_db_options dbo = options_for(wk_test_url());
    wk_lease_keeper_options o = WK_LEASE_KEEPER_OPTIONS_INIT;
    o.db = &dbo;
    o.entity = &lock;
    o.name = wk_name_str("job");
    o.token = t;
    o.on_lost = on_lost;
    o.ctx = &seen;
    o.release = true;
    wk_lease_keeper *k;
    cr_assert_eq(wk_lease_keeper_start(&k, &o, NULL, 0), WK_OK);
    atomic_store(&seen.keeper, k); /* the callback tries to stop it: must be refused */
    atomic_store(&seen.stop_rc, 1);
    wk_test_sleep_ms(2 * ttl);
    cr_assert_not(wk_lease_keeper_lost(k));
    cr_assert_gt(wk_lease_keeper_valid_until(k), wk_monotonic_ms());
    redisContext *raw = wk_test_raw(wk_test_url());
    freeReplyObject(wk_test_cmd(raw, "SET %s intruder PX 60000", key));
    int64_t stolen = wk_monotonic_ms();
    while (!wk_lease_keeper_lost(k) && wk_monotonic_ms() - stolen < 10000)
        wk_test_sleep_ms(2);
    int64_t told = wk_monotonic_ms() - stolen;
    cr_assert(wk_lease_keeper_lost(k));
    cr_assert_leq(told, period + MARGIN_MS, "told %lld ms after the steal", (long long)told);
    cr_assert_eq(wk_lease_keeper_valid_until(k), 0);
    while (atomic_load(&seen.calls) == 0 && wk_monotonic_ms() - stolen < 10000)
        wk_test_sleep_ms(2);
    cr_assert_eq(atomic_load(&seen.calls), 1);
    cr_assert_eq(atomic_load(&seen.stop_rc), WK_EINVAL, "stop from the callback is refused");
    wk_test_sleep_ms(2 * period); /* the keeper must not touch the intruder's key */
    wk_lease_outcome out;
    cr_assert_eq(wk_lease_keeper_stop(k, &out), WK_OK);
    cr_assert(out.lost);
    cr_assert_not(out.released, "the intruder's lock is not ours to release");
    redisReply *r = wk_test_cmd(raw, "GET %s", key);
    cr_assert_str_eq(r->str, "intruder");
    freeReplyObject(r);
    r = wk_test_cmd(raw, "PTTL %s", key);
    cr_assert_gt(r->integer, 50000, "the intruder's TTL was changed");
    freeReplyObject(r);
    redisFree(raw);
    wk_db_close(db);
}

/* ---- connection outages */

Test(lease_keeper, server_gone_lost_once_the_lease_could_have_run_out)
{
    wk_test_server s;
    cr_assert_eq(wk_test_server_start(&s, NULL), 0);
    wk_db *db = wk_test_open_url(s.url, NULL);
    const int ttl = 3000, period = ttl / 3;
    wk_entity lock = WK_LOCK_ENTITY("lkgone", ttl);
    wk_token t;
    bool got;
    cr_assert_eq(wk_lock_try(wk_db_processor(db), &lock, wk_name_str("job"), &t, &got), WK_OK);
    cr_assert(got);
    lost_seen seen = {0};
    wk_db_options dbo = options_for(s.url);
    wk_lease_keeper_options o = WK_LEASE_KEEPER_OPTIONS_INIT;
    o.db = &dbo;
    o.entity = &lock;
    o.name = wk_name_str("job");
    o.token = t;
    o.on_lost = on_lost;
    o.ctx = &seen;
    wk_lease_keeper *k;
    cr_assert_eq(wk_lease_keeper_start(&k, &o, NULL, 0), WK_OK);
    wk_test_sleep_ms(ttl + period / 2);
    cr_assert_not(wk_lease_keeper_lost(k));
    int64_t gone = wk_monotonic_ms();
    wk_test_server_stop(&s);
    /* The last successful extension was sent before `gone`, so the lease
     * could have run out by gone + ttl at the latest: lost() must say so
     * by then, whatever the heartbeat thread is doing. */
    while (!wk_lease_keeper_lost(k) && wk_monotonic_ms() < gone + ttl + 2000)
        wk_test_sleep_ms(2);
    int64_t told = wk_monotonic_ms() - gone;
    cr_assert(wk_lease_keeper_lost(k), "still held %lld ms after the server went away",
              (long long)told);
    cr_assert_leq(told, ttl, "reported held %lld ms after the server went, TTL %d",
                  (long long)told, ttl);
    /* …but not at the first failed extension: the lease surely ran until
     * at least (last extension ≥ gone − period) + ttl − drift. */
    cr_assert_geq(told, ttl - period - (ttl / 100 + 2) - 300,
                  "gave up after %lld ms, while the lease surely still ran", (long long)told);
    cr_assert(wk_is_connection_error(wk_lease_keeper_status(k)), "status %s",
              wk_err_name(wk_lease_keeper_status(k)));
    while (atomic_load(&seen.calls) == 0 && wk_monotonic_ms() - gone < ttl + 5000)
        wk_test_sleep_ms(5);
    cr_assert_eq(atomic_load(&seen.calls), 1);
    cr_assert(wk_is_connection_error(atomic_load(&seen.status)));
    wk_lease_outcome out;
    wk_lease_keeper_stop(k, &out);
    cr_assert(out.lost);
    wk_db_close(db);
}

Test(lease_keeper, short_outage_does_not_lose_the_lease)
{
    wk_test_server s;
    cr_assert_eq(wk_test_server_start(&s, NULL), 0);
    wk_db *db = wk_test_open_url(s.url, NULL);
    const int ttl = 3000, period = 500, pause_ms = 1500;
    wk_entity lock = WK_LOCK_ENTITY("lkpause", ttl);
    wk_token t;
    bool got;
    cr_assert_eq(wk_lock_try(wk_db_processor(db), &lock, wk_name_str("job"), &t, &got), WK_OK);
    cr_assert(got);
    wk_db_options dbo = options_for(s.url);
    wk_lease_keeper_options o = WK_LEASE_KEEPER_OPTIONS_INIT;
    o.db = &dbo;
    o.entity = &lock;
    o.name = wk_name_str("job");
    o.token = t;
    o.period_ms = period;
    wk_lease_keeper *k;
    cr_assert_eq(wk_lease_keeper_start(&k, &o, NULL, 0), WK_OK);
    wk_test_sleep_ms(period + period / 2);
    /* Writes (scripts included) block for three periods: extensions time
     * out (the keeper's command timeout is capped at its period) and are
     * retried. The lease surely runs until ≥ pause − period + TTL − drift,
     * well after the pause ends, so it must not count as lost. */
    redisContext *raw = wk_test_raw(s.url);
    freeReplyObject(wk_test_cmd(raw, "CLIENT PAUSE %d WRITE", pause_ms));
    int64_t paused = wk_monotonic_ms();
    while (wk_monotonic_ms() - paused < pause_ms + 3 * period) {
        cr_assert_not(wk_lease_keeper_lost(k), "lost %lld ms after a %d ms pause began (%s)",
                      (long long)(wk_monotonic_ms() - paused), pause_ms,
                      wk_err_name(wk_lease_keeper_status(k)));
        wk_test_sleep_ms(20);
    }
    cr_assert(key_holds(raw, "@@wakuwaku-entity:Lock:lkpause:job", &t));
    wk_lease_outcome out;
    wk_lease_keeper_stop(k, &out);
    cr_assert_not(out.lost);
    cr_assert_geq(out.extensions, 3, "extensions resumed after the pause");
    redisFree(raw);
    wk_db_close(db);
    wk_test_server_stop(&s);
}

/* ---- start-up cases and arguments */

static int never_called(wk_lease_keeper *k, void *arg)
{
    (void)k;
    *(int *)arg = 1;
    return 0;
}

Test(lease_keeper, lease_gone_at_start_work_not_run)
{
    wk_entity lock = WK_LOCK_ENTITY(wk_test_ns("lkgone0"), 1000);
    wk_token t;
    wk_token_random(&t); /* holds nothing */
    wk_db_options dbo = options_for(wk_test_url());
    wk_lease_keeper_options o = WK_LEASE_KEEPER_OPTIONS_INIT;
    o.db = &dbo;
    o.entity = &lock;
    o.name = wk_name_str("job");
    o.token = t;
    int called = 0;
    wk_lease_outcome out;
    cr_assert_eq(wk_lease_keeper_run(&o, never_called, &called, &out, NULL, 0), WK_OK);
    cr_assert_eq(called, 0);
    cr_assert_not(out.ran);
    cr_assert(out.lost);
    cr_assert_eq(out.lost_status, WK_OK);
    wk_lease_keeper *k;
    cr_assert_eq(wk_lease_keeper_start(&k, &o, NULL, 0), WK_OK);
    cr_assert(wk_lease_keeper_lost(k));
    cr_assert_eq(wk_lease_keeper_stop(k, NULL), WK_OK);
}

Test(lease_keeper, invalid_options_and_denied_capability)
{
    wk_entity lock = WK_LOCK_ENTITY(wk_test_ns("lkinv"), 900);
    wk_entity rw = WK_RWLOCK_ENTITY(wk_test_ns("lkinv"), 900);
    wk_db_options dbo = options_for(wk_test_url());
    wk_lease_keeper_options o = WK_LEASE_KEEPER_OPTIONS_INIT;
    o.db = &dbo;
    o.entity = &lock;
    o.name = wk_name_str("job");
    wk_lease_keeper *k = (wk_lease_keeper *)&o;
    char err[256];
    o.db = NULL;
    cr_assert_eq(wk_lease_keeper_start(&k, &o, err, sizeof(err)), WK_EINVAL);
    cr_assert_null(k);
    o.db = &dbo;
    o.period_ms = 900;
    cr_assert_eq(wk_lease_keeper_start(&k, &o, err, sizeof(err)), WK_EINVAL);
    cr_assert(strstr(err, "period_ms 900 must be ≤") != NULL, "%s", err);
    o.period_ms = -1;
    cr_assert_eq(wk_lease_keeper_start(&k, &o, err, sizeof(err)), WK_EINVAL);
    o.period_ms = 0;
    o.kind = WK_LEASE_READ; /* an RwLock kind on a Lock entity */
    cr_assert_eq(wk_lease_keeper_start(&k, &o, err, sizeof(err)), WK_EINVAL);
    o.entity = &rw;
    o.kind = WK_LEASE_LOCK;
    cr_assert_eq(wk_lease_keeper_start(&k, &o, err, sizeof(err)), WK_EINVAL);
    o.entity = &lock;
    o.name = wk_name_str(NULL);
    cr_assert_eq(wk_lease_keeper_start(&k, &o, err, sizeof(err)), WK_EINVAL);
    o.name = wk_name_str("job");
    dbo.capability = wk_cap_read_only();
    cr_assert_eq(wk_lease_keeper_start(&k, &o, err, sizeof(err)), WK_EDENIED);
    cr_assert(strstr(err, "may not WRITE") != NULL, "%s", err);
    cr_assert_null(k);
    wk_lease_outcome out;
    cr_assert_eq(wk_lease_keeper_run(&o, never_called, NULL, NULL, NULL, 0), WK_EINVAL);
    cr_assert_eq(wk_lease_keeper_run(&o, NULL, NULL, &out, NULL, 0), WK_EINVAL);
    cr_assert_eq(wk_lease_keeper_stop(NULL, &out), WK_OK);
    cr_assert(wk_lease_keeper_lost(NULL));
}

/* ---- the period must leave an extension time to be confirmed */

Test(lease_keeper, period_the_loss_rule_cannot_honour_is_refused)
{
    /* TTL 1000: drift 12 ms, 50 ms allowed for the extension's reply, so
     * the last extension that can be confirmed before valid_until goes out
     * 938 ms after the previous one. A period of 995 used to be accepted
     * and then lose a healthy lease at its first heartbeat (lost, and the
     * lock lapsed). */
    wk_db *db = wk_test_open(NULL);
    wk_entity lock = WK_LOCK_ENTITY(wk_test_ns("lkperiod"), 1000);
    wk_token t;
    bool got;
    cr_assert_eq(wk_lock_try(wk_db_processor(db), &lock, wk_name_str("job"), &t, &got), WK_OK);
    cr_assert(got);
    wk_db_options dbo = options_for(wk_test_url());
    wk_lease_keeper_options o = WK_LEASE_KEEPER_OPTIONS_INIT;
    o.db = &dbo;
    o.entity = &lock;
    o.name = wk_name_str("job");
    o.token = t;
    char err[256];
    const int64_t refused[] = {995, 939, 988, 999};
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        wk_lease_keeper *k = (wk_lease_keeper *)&o;
        o.period_ms = refused[i];
        int rc = wk_lease_keeper_start(&k, &o, err, sizeof(err));
        if (rc == WK_OK) {
            /* What it used to do: show the loss it causes. */
            wk_test_sleep_ms(1100);
            wk_lease_outcome out;
            wk_lease_keeper_stop(k, &out);
            cr_assert_fail("period %lld accepted for ttl 1000: lost=%d after 1.1 s", (long long)refused[i],
                    out.lost);
        }
        cr_assert_eq(rc, WK_EINVAL, "period %lld: %s", (long long)refused[i], wk_err_name(rc));
        cr_assert_null(k);
        char want[64];
        snprintf(want, sizeof(want), "period_ms %lld must be ≤ 938 for ttl_ms 1000",
                 (long long)refused[i]);
        cr_assert(strstr(err, want) != NULL, "message: %s", err);
    }
    /* At the limit it starts, and the lease is still ours. */
    o.period_ms = 938;
    wk_lease_keeper *k;
    cr_assert_eq(wk_lease_keeper_start(&k, &o, err, sizeof(err)), WK_OK, "%s", err);
    cr_assert_not(wk_lease_keeper_lost(k));
    cr_assert_eq(wk_lease_keeper_stop(k, NULL), WK_OK);
    /* Tiny TTLs keep their default period (ttl/3) … */
    const int64_t ttls[] = {4, 10, 30, 100};
    for (size_t i = 0; i < sizeof(ttls) / sizeof(ttls[0]); i++) {
        wk_entity small = WK_LOCK_ENTITY(wk_test_ns("lktiny"), ttls[i]);
        o.entity = &small;
        o.period_ms = 0;
        wk_lease_keeper *kk;
        int rc = wk_lease_keeper_start(&kk, &o, err, sizeof(err));
        cr_assert_eq(rc, WK_OK, "ttl %lld: %s (%s)", (long long)ttls[i], wk_err_name(rc), err);
        wk_lease_keeper_stop(kk, NULL); /* the random token held nothing: lost at start */
    }
    /* … and a TTL no extension can keep is refused whatever the period. */
    wk_entity too_short = WK_LOCK_ENTITY(wk_test_ns("lktiny"), 3);
    o.entity = &too_short;
    cr_assert_eq(wk_lease_keeper_start(&k, &o, err, sizeof(err)), WK_EINVAL);
    cr_assert(strstr(err, "ttl_ms 3") != NULL, "message: %s", err);
    wk_db_close(db);
}

/* ---- lifecycle: start / halt / free (stop is the deprecated halt + free) */

static wk_lease_keeper *start_held(const char *ns, const char *name, bool release,
                                   wk_entity *lock, wk_db_options *dbo, char *key, size_t keylen)
{
    *lock = (wk_entity)WK_LOCK_ENTITY(wk_test_ns(ns), 1000);
    wk_db *db = wk_test_open(NULL);
    wk_token t;
    bool got;
    cr_assert_eq(wk_lock_try(wk_db_processor(db), lock, wk_name_str(name), &t, &got), WK_OK);
    cr_assert(got);
    wk_db_close(db);
    lock_key(key, keylen, lock->ns, name);
    *dbo = options_for(wk_test_url());
    wk_lease_keeper_options o = WK_LEASE_KEEPER_OPTIONS_INIT;
    o.db = dbo;
    o.entity = lock;
    o.name = wk_name_str(name);
    o.token = t;
    o.release = release;
    wk_lease_keeper *k;
    char err[256];
    int rc = wk_lease_keeper_start(&k, &o, err, sizeof(err));
    cr_assert_eq(rc, WK_OK, "%s: %s", wk_err_name(rc), err);
    cr_assert_not(wk_lease_keeper_lost(k));
    return k;
}

Test(lease_keeper, halt_then_free)
{
    wk_entity lock;
    wk_db_options dbo;
    char key[256];
    wk_lease_keeper *k = start_held("lkhalt", "job", true, &lock, &dbo, key, sizeof(key));
    wk_lease_outcome out;
    cr_assert_eq(wk_lease_keeper_halt(k, &out), WK_OK);
    cr_assert_not(out.lost);
    cr_assert(out.released, "halt releases when asked");
    cr_assert_geq(out.extensions, 1);
    redisContext *raw = wk_test_raw(wk_test_url());
    redisReply *r = wk_test_cmd(raw, "EXISTS %s", key);
    cr_assert_eq(r->integer, 0, "released by halt");
    freeReplyObject(r);

    /* Halted, not freed: the keeper still answers, and a second halt
     * repeats the first one's outcome without doing anything. */
    wk_lease_keeper_status(k);
    wk_lease_outcome again;
    cr_assert_eq(wk_lease_keeper_halt(k, &again), WK_OK);
    cr_assert_eq(again.released, out.released);
    cr_assert_eq(again.extensions, out.extensions);
    wk_lease_keeper_free(k);
    redisFree(raw);
}

Test(lease_keeper, free_of_a_running_keeper_halts_it)
{
    wk_entity lock;
    wk_db_options dbo;
    char key[256];
    wk_lease_keeper *k = start_held("lkfree", "job", true, &lock, &dbo, key, sizeof(key));
    wk_lease_keeper_free(k); /* joins the thread, releases, frees: ASan/TSan check the rest */
    redisContext *raw = wk_test_raw(wk_test_url());
    redisReply *r = wk_test_cmd(raw, "EXISTS %s", key);
    cr_assert_eq(r->integer, 0, "free of a running keeper halts it first (and so releases)");
    freeReplyObject(r);
    redisFree(raw);
}

Test(lease_keeper, stop_alias_still_halts_and_frees)
{
    wk_entity lock;
    wk_db_options dbo;
    char key[256];
    wk_lease_keeper *k = start_held("lkstop", "job", false, &lock, &dbo, key, sizeof(key));
    wk_lease_outcome out;
    cr_assert_eq(wk_lease_keeper_stop(k, &out), WK_OK); /* freed: not touched again */
    cr_assert_not(out.lost);
    cr_assert_not(out.released, "release was not asked");
    redisContext *raw = wk_test_raw(wk_test_url());
    redisReply *r = wk_test_cmd(raw, "EXISTS %s", key);
    cr_assert_eq(r->integer, 1, "left to run out");
    freeReplyObject(r);
    redisFree(raw);
}

Test(lease_keeper, null_halt_free_stop_are_harmless)
{
    wk_lease_outcome out;
    memset(&out, 0xff, sizeof(out));
    cr_assert_eq(wk_lease_keeper_halt(NULL, &out), WK_OK);
    cr_assert_not(out.lost);
    cr_assert_eq(out.extensions, 0);
    cr_assert_eq(wk_lease_keeper_halt(NULL, NULL), WK_OK);
    wk_lease_keeper_free(NULL);
    cr_assert_eq(wk_lease_keeper_stop(NULL, NULL), WK_OK);
}
