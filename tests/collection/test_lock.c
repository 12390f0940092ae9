/*
 * tests/collection/test_lock.c — Lock semantics against a real
 * redis-server: exclusion under contention across processes, token-checked
 * release/extend, expiry of a killed holder, inspection.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "redis_fixture.h"

Test(lock, try_release_cycle)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity lock = WK_LOCK_ENTITY(wk_test_ns("lock"), 10000);
    wk_token t1, t2;
    bool got, released;
    cr_assert_eq(wk_lock_try(p, &lock, wk_name_u64(1), &t1, &got), WK_OK);
    cr_assert(got);
    cr_assert_eq(wk_lock_try(p, &lock, wk_name_u64(1), &t2, &got), WK_OK);
    cr_assert_not(got, "second try must not acquire a held lock");
    cr_assert_eq(wk_lock_try(p, &lock, wk_name_u64(2), &t2, &got), WK_OK);
    cr_assert(got, "another name is independent");
    cr_assert(memcmp(&t1, &t2, sizeof(t1)) != 0, "tokens are random");
    cr_assert_eq(wk_lock_release(p, &lock, wk_name_u64(1), &t2, &released), WK_OK);
    cr_assert_not(released, "a foreign token releases nothing");
    cr_assert_eq(wk_lock_release(p, &lock, wk_name_u64(1), &t1, &released), WK_OK);
    cr_assert(released);
    cr_assert_eq(wk_lock_release(p, &lock, wk_name_u64(1), &t1, &released), WK_OK);
    cr_assert_not(released, "second release reports false");
    cr_assert_eq(wk_lock_try(p, &lock, wk_name_u64(1), &t1, &got), WK_OK);
    cr_assert(got, "free again after release");
    wk_db_close(db);
}

Test(lock, token_stored_raw_with_ttl)
{
    wk_db *db = wk_test_open(NULL);
    wk_entity lock = WK_LOCK_ENTITY(wk_test_ns("lockraw"), 5000);
    wk_token t;
    bool got;
    cr_assert_eq(wk_lock_try(wk_db_processor(db), &lock, wk_name_str("a"), &t, &got), WK_OK);
    cr_assert(got);
    redisContext *raw = wk_test_raw(wk_test_url());
    char key[256];
    snprintf(key, sizeof(key), "@@wakuwaku-entity:Lock:%s:a", lock.ns);
    redisReply *r = wk_test_cmd(raw, "GET %s", key);
    cr_assert_eq(r->type, REDIS_REPLY_STRING);
    cr_assert_eq(r->len, 16);
    cr_assert(memcmp(r->str, t.bytes, 16) == 0);
    freeReplyObject(r);
    r = wk_test_cmd(raw, "PTTL %s", key);
    cr_assert(r->integer > 4000 && r->integer <= 5000, "pttl %lld", r->integer);
    freeReplyObject(r);
    redisFree(raw);
    wk_db_close(db);
}

Test(lock, extend_restarts_lease_and_inspect_reports_it)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity lock = WK_LOCK_ENTITY(wk_test_ns("lockext"), 1000);
    wk_token t;
    bool got, extended;
    wk_lock_state st;
    cr_assert_eq(wk_lock_inspect(p, &lock, wk_name_str("x"), &st), WK_OK);
    cr_assert_not(st.held);
    cr_assert_eq(st.ttl_ms, 0);
    cr_assert_eq(wk_lock_try(p, &lock, wk_name_str("x"), &t, &got), WK_OK);
    wk_test_sleep_ms(600);
    cr_assert_eq(wk_lock_extend(p, &lock, wk_name_str("x"), &t, &extended), WK_OK);
    cr_assert(extended);
    cr_assert_eq(wk_lock_inspect(p, &lock, wk_name_str("x"), &st), WK_OK);
    cr_assert(st.held);
    cr_assert(st.ttl_ms > 800 && st.ttl_ms <= 1000, "ttl %lld after extend", (long long)st.ttl_ms);
    wk_test_sleep_ms(600);
    cr_assert_eq(wk_lock_try(p, &lock, wk_name_str("x"), &t, &got), WK_OK);
    cr_assert_not(got, "extended lease still runs 1.2 s after acquire");
    wk_db_close(db);
}

Test(lock, release_and_extend_after_expiry_leave_new_holder_alone)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity lock = WK_LOCK_ENTITY(wk_test_ns("lockexp"), 150);
    wk_token old, fresh;
    bool got, ok;
    cr_assert_eq(wk_lock_try(p, &lock, wk_name_str("job"), &old, &got), WK_OK);
    cr_assert(got);
    wk_test_sleep_ms(300);
    cr_assert_eq(wk_lock_extend(p, &lock, wk_name_str("job"), &old, &ok), WK_OK);
    cr_assert_not(ok, "extending an expired lease reports false");
    cr_assert_eq(wk_lock_try(p, &lock, wk_name_str("job"), &fresh, &got), WK_OK);
    cr_assert(got, "expired lock is free");
    cr_assert_eq(wk_lock_release(p, &lock, wk_name_str("job"), &old, &ok), WK_OK);
    cr_assert_not(ok, "stale release reports false");
    cr_assert_eq(wk_lock_extend(p, &lock, wk_name_str("job"), &old, &ok), WK_OK);
    cr_assert_not(ok);
    wk_lock_state st;
    cr_assert_eq(wk_lock_inspect(p, &lock, wk_name_str("job"), &st), WK_OK);
    cr_assert(st.held, "new holder's lock untouched");
    cr_assert_eq(wk_lock_release(p, &lock, wk_name_str("job"), &fresh, &ok), WK_OK);
    cr_assert(ok);
    wk_db_close(db);
}

Test(lock, invalid_arguments)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity zero_ttl = WK_LOCK_ENTITY("x", 0);
    wk_entity good = WK_LOCK_ENTITY("x", 1000);
    wk_entity cache = WK_CACHE_ENTITY("x", 1000);
    wk_token t;
    bool got;
    cr_assert_eq(wk_lock_try(p, &zero_ttl, wk_name_str("a"), &t, &got), WK_EINVAL);
    cr_assert_eq(wk_lock_try(p, &good, wk_name_str(NULL), &t, &got), WK_EINVAL);
    cr_assert(strlen(wk_db_errmsg(db)) > 0);
    cr_assert_eq(wk_lock_try(p, &cache, wk_name_str("a"), &t, &got), WK_EINVAL);
    cr_assert_eq(wk_lock_try(p, NULL, wk_name_str("a"), &t, &got), WK_EINVAL);
    cr_assert_eq(wk_lock_try(p, &good, wk_name_str("a"), NULL, &got), WK_EINVAL);
    cr_assert_eq(wk_lock_try(NULL, &good, wk_name_str("a"), &t, &got), WK_EINVAL);
    cr_assert_eq(wk_lock_release(p, &good, wk_name_str("a"), NULL, &got), WK_EINVAL);
    wk_db_close(db);
}

/* ---- contention: 4 processes x 500 acquisitions, non-atomic increments */

#define WORKERS 4
#define ACQUISITIONS 500
#define HOT_NAMES 3

static int contention_worker(const char *ns, int id)
{
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = wk_test_url();
    o.capability = wk_cap_read_write();
    wk_db *db;
    if (wk_db_open(&db, &o, NULL, 0) != WK_OK)
        return 2;
    redisContext *raw = wk_test_raw(wk_test_url());
    wk_entity lock = WK_LOCK_ENTITY(ns, 5000);
    srand((unsigned)getpid());
    for (int done = 0; done < ACQUISITIONS;) {
        int n = (done + id) % HOT_NAMES;
        wk_token t;
        bool got, released;
        if (wk_lock_try(wk_db_processor(db), &lock, wk_name_u64((uint64_t)n), &t, &got) != WK_OK)
            return 3;
        if (!got)
            continue;
        /* Read-increment-write with a window in the middle: only the lock
         * keeps two holders from losing each other's update. */
        redisReply *r = redisCommand(raw, "GET %s:counter:%d", ns, n);
        long v = r->type == REDIS_REPLY_STRING ? atol(r->str) : 0;
        freeReplyObject(r);
        if (rand() % 4 == 0)
            usleep(100);
        freeReplyObject(redisCommand(raw, "SET %s:counter:%d %ld", ns, n, v + 1));
        if (wk_lock_release(wk_db_processor(db), &lock, wk_name_u64((uint64_t)n), &t, &released) !=
                WK_OK ||
            !released)
            return 4;
        done++;
    }
    redisFree(raw);
    wk_db_close(db);
    return 0;
}

Test(lock, mutual_exclusion_under_contention, .timeout = 120)
{
    const char *ns = wk_test_ns("contend");
    pid_t kids[WORKERS];
    for (int i = 0; i < WORKERS; i++) {
        kids[i] = fork();
        cr_assert_geq(kids[i], 0);
        if (kids[i] == 0)
            _exit(contention_worker(ns, i));
    }
    for (int i = 0; i < WORKERS; i++) {
        int status;
        waitpid(kids[i], &status, 0);
        cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "worker %d failed (%d)", i,
                  status);
    }
    redisContext *raw = wk_test_raw(wk_test_url());
    long total = 0;
    for (int n = 0; n < HOT_NAMES; n++) {
        redisReply *r = wk_test_cmd(raw, "GET %s:counter:%d", ns, n);
        total += r->type == REDIS_REPLY_STRING ? atol(r->str) : 0;
        freeReplyObject(r);
    }
    redisFree(raw);
    long lost = (long)WORKERS * ACQUISITIONS - total;
    cr_log_info("lock contention: %d increments, %ld lost updates", WORKERS * ACQUISITIONS, lost);
    fprintf(stderr, "lock contention: %d increments, %ld lost updates\n", WORKERS * ACQUISITIONS,
            lost);
    cr_assert_eq(lost, 0, "%ld lost updates", lost);
}

/* ---- a holder killed with SIGKILL blocks others for at most its TTL */

Test(lock, killed_holder_blocks_at_most_ttl, .timeout = 120)
{
    const char *ns = wk_test_ns("killed");
    const int ttl = 800;
    int ready[2];
    cr_assert_eq(pipe(ready), 0);
    pid_t holder = fork();
    if (holder == 0) {
        wk_db_options o = WK_DB_OPTIONS_INIT;
        o.url = wk_test_url();
        o.capability = wk_cap_read_write();
        wk_db *db;
        wk_entity lock = WK_LOCK_ENTITY(ns, ttl);
        wk_token t;
        bool got = false;
        if (wk_db_open(&db, &o, NULL, 0) == WK_OK)
            wk_lock_try(wk_db_processor(db), &lock, wk_name_str("job"), &t, &got);
        char c = got ? 'y' : 'n';
        write(ready[1], &c, 1);
        pause();
        _exit(0);
    }
    char c = 0;
    cr_assert_eq(read(ready[0], &c, 1), 1);
    int64_t acquired_at = wk_test_now_ms();
    cr_assert_eq(c, 'y', "holder could not take the lock");
    kill(holder, SIGKILL);
    waitpid(holder, NULL, 0);

    wk_db *db = wk_test_open(NULL);
    wk_entity lock = WK_LOCK_ENTITY(ns, ttl);
    wk_token t;
    bool got = false;
    cr_assert_eq(wk_lock_try(wk_db_processor(db), &lock, wk_name_str("job"), &t, &got), WK_OK);
    cr_assert_not(got, "the dead holder's lease still runs right after the kill");
    while (!got && wk_test_now_ms() - acquired_at < ttl + 2000) {
        wk_test_sleep_ms(10);
        cr_assert_eq(wk_lock_try(wk_db_processor(db), &lock, wk_name_str("job"), &t, &got), WK_OK);
    }
    int64_t blocked = wk_test_now_ms() - acquired_at;
    cr_assert(got, "lock still blocked %lld ms after a holder with TTL %d died",
              (long long)blocked, ttl);
    /* The server's expiry, not the client: never free before the TTL. */
    cr_assert_geq(blocked, ttl - 50, "freed after %lld ms, before the TTL", (long long)blocked);
    wk_db_close(db);
}

/* ------------------------------------------------------------------------
 * Acknowledged leases: the message names the query once
 * ---------------------------------------------------------------------- */

/* `msg` is `head` exactly (tail NULL), or starts with `head` and ends
 * with `tail` (the server's own words between them vary by version). */
static void expect_msg(const char *msg, const char *head, const char *tail, const char *what)
{
    if (!tail) {
        cr_assert_str_eq(msg, head, "%s: \"%s\"", what, msg);
        return;
    }
    size_t n = strlen(msg), t = strlen(tail);
    cr_assert(!strncmp(msg, head, strlen(head)) && n >= t && !strcmp(msg + n - t, tail),
              "%s: \"%s\"", what, msg);
}

/* A plain handle and a pool (both lease_replicas 1, nobody to
 * acknowledge: no replica, or a user that may not run WAIT) on `url`:
 * the try and the extend fail WK_ENOTREPLICATED with the messages
 * `try_msg` and `extend_msg` (expect_msg's head) followed by any text
 * and `try_tail` / `extend_tail` (NULL: nothing). */
static void expect_not_replicated(const char *url, const char *try_msg, const char *try_tail,
                                  const char *extend_msg, const char *extend_tail)
{
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = url;
    o.capability = wk_cap_read_write();
    o.lease_replicas = 1;
    o.lease_ack_timeout_ms = 100;
    wk_db *db = NULL;
    char err[256];
    cr_assert_eq(wk_db_open(&db, &o, err, sizeof(err)), WK_OK, "%s", err);
    wk_pool_options po = WK_POOL_OPTIONS_INIT;
    po.db = &o;
    po.size = 2;
    wk_pool *pool = NULL;
    cr_assert_eq(wk_pool_open(&pool, &po, err, sizeof(err)), WK_OK, "%s", err);
    /* The extend needs a lease held: taken without acknowledgement. */
    wk_db *plain = wk_test_open_url(url, NULL);
    wk_entity lock = WK_LOCK_ENTITY(wk_test_ns("acked"), 10000);
    wk_processor *procs[] = {wk_db_processor(db), wk_pool_processor(pool)};
    const char *what[] = {"a handle", "a pool"};
    for (int i = 0; i < 2; i++) {
        wk_processor *p = procs[i];
        wk_token t;
        bool got = true;
        int rc = wk_lock_try(p, &lock, wk_name_u64((uint64_t)i), &t, &got);
        cr_assert_eq(rc, WK_ENOTREPLICATED, "%s: %s", what[i], wk_err_name(rc));
        cr_assert_not(got);
        expect_msg(wk_processor_errmsg(p), try_msg, try_tail, what[i]);
        cr_assert_eq(wk_lock_try(wk_db_processor(plain), &lock, wk_name_u64((uint64_t)i), &t, &got),
                     WK_OK);
        cr_assert(got);
        bool extended = true;
        rc = wk_lock_extend(p, &lock, wk_name_u64((uint64_t)i), &t, &extended);
        cr_assert_eq(rc, WK_ENOTREPLICATED, "%s: %s", what[i], wk_err_name(rc));
        cr_assert_not(extended);
        expect_msg(wk_processor_errmsg(p), extend_msg, extend_tail, what[i]);
    }
    wk_db_close(plain);
    wk_pool_close(pool);
    wk_db_close(db);
}

Test(lock, a_lease_not_acknowledged_names_its_query_once, .timeout = 120)
{
    expect_not_replicated(
        wk_test_url(),
        "lock.try: 0 of 1 replica(s) acknowledged the lease within 100 ms; released, not acquired",
        NULL, "lock.extend: 0 of 1 replica(s) acknowledged the lease within 100 ms", NULL);
}

Test(lock, a_lease_whose_wait_fails_names_its_query_once, .timeout = 120)
{
    /* A server of its own: a user that may run everything but WAIT. */
    wk_test_server s;
    cr_assert_eq(wk_test_server_start(&s, NULL), 0);
    redisContext *raw = wk_test_raw(s.url);
    freeReplyObject(wk_test_cmd(raw, "ACL SETUSER nowait on >pw ~* &* +@all -wait"));
    char url[128];
    snprintf(url, sizeof(url), "redis://nowait:pw@127.0.0.1:%d", s.port);
    /* (Redis words the refusal after NOPERM as its version does.) */
    expect_not_replicated(url, "lock.try: the lease's WAIT failed: NOPERM ",
                          "run the 'wait' command; released, not acquired",
                          "lock.extend: the lease's WAIT failed: NOPERM ",
                          "run the 'wait' command");
    redisFree(raw);
    wk_test_server_stop(&s);
}
