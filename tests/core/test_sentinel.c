/*
 * tests/core/test_sentinel.c — redis-sentinel:// handles and acknowledged
 * leases against a real topology started per test (tests/support/
 * sentinel_topology.c: a primary, a replica, three sentinels, each
 * stopped by pid): finding the primary, credentials apart for sentinels
 * and data nodes, a SENTINEL FAILOVER under load, READONLY, and a lease
 * acknowledged by a replica surviving the loss of its primary while an
 * unacknowledged one is lost.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include <wakuwaku/pool.h>

#include "support.h"

#define DATA_PW "data-secret"
#define SENTINEL_PW "sentinel-secret"

/* The WAIT timeout of acknowledged leases: short, for the acquires that
 * are meant to go unacknowledged (the test does not wait long for them). */
static int ack_timeout_ms = 200;

static wk_db *open_sentinel(const wk_test_sentinels *t, int lease_replicas, int timeout_ms,
                            int *rc_out, char *err, size_t errlen)
{
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = t->url;
    o.capability = wk_cap_read_write();
    o.password = t->data_password;
    o.sentinel_password = t->sentinel_password;
    o.connect_timeout_ms = timeout_ms;
    o.command_timeout_ms = timeout_ms;
    o.lease_replicas = lease_replicas;
    o.lease_ack_timeout_ms = ack_timeout_ms;
    wk_db *db = NULL;
    int rc = wk_db_open(&db, &o, err, errlen);
    if (rc_out)
        *rc_out = rc;
    return db;
}

static wk_db *must_open(const wk_test_sentinels *t, int lease_replicas)
{
    char err[512];
    int rc;
    wk_db *db = open_sentinel(t, lease_replicas, 3000, &rc, err, sizeof(err));
    cr_assert_eq(rc, WK_OK, "open %s: %s: %s", t->url, wk_err_name(rc), err);
    return db;
}

/* The length of the value of `key` on the node at port (raw); 0 when
 * missing. */
static size_t raw_strlen(const wk_test_sentinels *t, int port, const char *key, size_t klen)
{
    redisContext *c = wk_test_sentinels_raw(t, port);
    cr_assert(c, "raw connection to %d", port);
    redisReply *r = redisCommand(c, "STRLEN %b", key, klen);
    cr_assert(r && r->type == REDIS_REPLY_INTEGER);
    size_t n = (size_t)r->integer;
    freeReplyObject(r);
    redisFree(c);
    return n;
}

/* ------------------------------------------------------------------------
 * URLs
 * ---------------------------------------------------------------------- */

Test(sentinel, url_lists_sentinels_service_and_db, .timeout = 60)
{
    wk_url u;
    char err[200];
    cr_assert_eq(wk_url_parse(&u, "redis-sentinel://u:p%40ss@10.0.0.1:5000,[::1],h3:7/mysvc/3", err,
                              sizeof(err)),
                 WK_OK, "%s", err);
    cr_assert_eq(u.nsentinels, 3);
    cr_assert_str_eq(u.sentinels[0].host, "10.0.0.1");
    cr_assert_eq(u.sentinels[0].port, 5000);
    cr_assert_str_eq(u.sentinels[1].host, "::1");
    cr_assert_eq(u.sentinels[1].port, 26379, "the sentinel default port");
    cr_assert_str_eq(u.sentinels[2].host, "h3");
    cr_assert_eq(u.sentinels[2].port, 7);
    cr_assert_str_eq(u.service, "mysvc");
    cr_assert_eq(u.database, 3);
    cr_assert_str_eq(u.username, "u");
    cr_assert_str_eq(u.password, "p@ss");
    cr_assert_str_eq(u.host, "10.0.0.1", "host/port start as the first sentinel's");
    cr_assert_eq(u.port, 5000);
    cr_assert_not(u.tls);
    wk_url_free(&u);

    cr_assert_eq(wk_url_parse(&u, "redis-sentinel://s1/svc", err, sizeof(err)), WK_OK);
    cr_assert_eq(u.nsentinels, 1);
    cr_assert_eq(u.database, 0);
    cr_assert_null(u.password);
    wk_url_free(&u);

    /* Other schemes keep no sentinel fields. */
    cr_assert_eq(wk_url_parse(&u, "redis://h:1/2", err, sizeof(err)), WK_OK);
    cr_assert_null(u.service);
    cr_assert_eq(u.nsentinels, 0);
    wk_url_free(&u);

    const char *bad[] = {"redis-sentinel://s1",       "redis-sentinel://s1/",
                         "redis-sentinel://s1:0/svc", "redis-sentinel://s1,,s2/svc",
                         "redis-sentinel://s1/svc/x", "redis-sentinel://s1/svc?x=1",
                         "redis-sentinel://:pw@/svc", "redis-sentinel://[::1/svc"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cr_assert_eq(wk_url_parse(&u, bad[i], err, sizeof(err)), WK_EINVAL, "%s", bad[i]);
        cr_assert_null(strstr(err, "pw"), "never the password: %s", err);
    }
}

typedef struct seed_outcome {
    int status;
    char msg[512];
} seed_outcome;

static void on_seed_outcome(wk_async *a, int status, const char *msg, void *arg)
{
    (void)a;
    seed_outcome *o = arg;
    o->status = status;
    snprintf(o->msg, sizeof(o->msg), "%s", msg);
}

Test(sentinel, options_are_checked_at_open, .timeout = 60)
{
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.capability = wk_cap_read_write();
    o.url = "redis://127.0.0.1:1";
    o.sentinel_password = "x";
    wk_db *db = NULL;
    char err[256];
    cr_assert_eq(wk_db_open(&db, &o, err, sizeof(err)), WK_EINVAL);
    cr_assert(strstr(err, "redis-sentinel://"), "%s", err);
    o.sentinel_password = NULL;
    o.lease_replicas = 1;
    o.lease_ack_timeout_ms = 0;
    cr_assert_eq(wk_db_open(&db, &o, err, sizeof(err)), WK_EINVAL);
    cr_assert(strstr(err, "lease_ack_timeout_ms"), "%s", err);
    /* The event-loop handle takes a cluster's seed list (tests/core/
     * test_cluster.c); when no seed answers, the queries waiting for the
     * slot map fail with the reason, not sent. */
    wk_db_options a = WK_DB_OPTIONS_INIT;
    a.capability = wk_cap_read_write();
    a.url = "redis://127.0.0.1:1,127.0.0.1:2";
    wk_async *as = NULL;
    cr_assert_eq(wk_async_open(&as, &a, err, sizeof(err)), WK_OK, "%s", err);
    seed_outcome so = {.status = 12345};
    wk_entity lock = WK_LOCK_ENTITY("seeds", 1000);
    wk_token t;
    bool got = false;
    cr_assert_eq(
        wk_lock_try(wk_async_with(as, on_seed_outcome, &so), &lock, wk_name_str("a"), &t, &got),
        WK_OK);
    wk_test_async_drain(as);
    cr_assert(so.status == WK_EIO || so.status == WK_ETIMEDOUT, "%s: %s", wk_err_name(so.status),
              so.msg);
    cr_assert(strstr(so.msg, "slot map") && strstr(so.msg, "not sent"), "%s", so.msg);
    wk_async_close(as);
}

/* ------------------------------------------------------------------------
 * Discovery and credentials
 * ---------------------------------------------------------------------- */

Test(sentinel, finds_the_primary_with_separate_credentials, .timeout = 60)
{
    wk_test_sentinels t;
    cr_assert_eq(wk_test_sentinels_start(&t, DATA_PW, SENTINEL_PW), 0);
    /* The first sentinel is down: the next one answers. */
    kill(t.sentinel[0].pid, SIGSTOP);
    wk_db *db = must_open(&t, 0);
    kill(t.sentinel[0].pid, SIGCONT);
    wk_entity lock = WK_LOCK_ENTITY(wk_test_ns("sent"), 30000);
    wk_token token;
    bool got = false;
    cr_assert_eq(wk_lock_try(wk_db_processor(db), &lock, wk_name_str("a"), &token, &got), WK_OK,
                 "%s", wk_db_errmsg(db));
    cr_assert(got);
    char key[WK_KEY_MAX + 1];
    size_t klen;
    wk_name a = wk_name_str("a");
    cr_assert_eq(wk_key_build(key, sizeof(key), &klen, &lock, &a, NULL), WK_OK);
    cr_assert_eq(raw_strlen(&t, t.primary.port, key, klen), WK_TOKEN_LEN,
                 "the write went to the primary");

    /* A settings follower's connections (its handle, its subscriber) go
     * through the sentinels too. */
    wk_db_options fo = WK_DB_OPTIONS_INIT;
    fo.url = t.url;
    fo.capability = wk_cap_read_write();
    fo.password = DATA_PW;
    fo.sentinel_password = SENTINEL_PW;
    wk_entity settings = WK_SETTINGS_ENTITY(wk_test_ns("sset"));
    wk_settings_follower_options so = WK_SETTINGS_FOLLOWER_OPTIONS_INIT;
    so.db = &fo;
    so.settings = &settings;
    so.name = wk_name_str("cfg");
    wk_settings_follower *f = NULL;
    char ferr[256];
    cr_assert_eq(wk_settings_follower_start(&f, &so, ferr, sizeof(ferr)), WK_OK, "%s", ferr);
    int64_t version = 0;
    cr_assert_eq(wk_settings_put(wk_db_processor(db), &settings, wk_name_str("cfg"), "k", 1, "v", 1,
                                 &version),
                 WK_OK, "%s", wk_db_errmsg(db));
    bool reached = false;
    cr_assert_eq(wk_settings_follower_wait(f, version, 10000, &reached), WK_OK);
    cr_assert(reached, "the follower got the change through the primary");
    wk_settings_follower_free(f);
    wk_db_close(db);

    /* Sentinel credentials are not the data node's: without the sentinel
     * password the sentinels refuse, with the data password as sentinel
     * password too. */
    char err[512];
    int rc;
    t.sentinel_password = NULL;
    cr_assert_null(open_sentinel(&t, 0, 300, &rc, err, sizeof(err)));
    cr_assert_eq(rc, WK_EAUTH, "%s: %s", wk_err_name(rc), err);
    t.sentinel_password = DATA_PW;
    cr_assert_null(open_sentinel(&t, 0, 300, &rc, err, sizeof(err)));
    cr_assert_eq(rc, WK_EAUTH, "%s: %s", wk_err_name(rc), err);
    cr_assert_null(strstr(err, DATA_PW), "never the password: %s", err);
    /* A wrong data password is refused by the primary, at once. */
    t.sentinel_password = SENTINEL_PW;
    t.data_password = "wrong";
    cr_assert_null(open_sentinel(&t, 0, 300, &rc, err, sizeof(err)));
    cr_assert_eq(rc, WK_EAUTH, "%s: %s", wk_err_name(rc), err);
    t.data_password = DATA_PW;
    /* An unknown service: every sentinel says so, and the open fails. */
    char url[sizeof(t.url)];
    memcpy(url, t.url, sizeof(url));
    strcpy(strrchr(t.url, '/'), "/nosuch");
    cr_assert_null(open_sentinel(&t, 0, 300, &rc, err, sizeof(err)));
    cr_assert_eq(rc, WK_EIO, "%s: %s", wk_err_name(rc), err);
    cr_assert(strstr(err, "does not know the service"), "%s", err);
    memcpy(t.url, url, sizeof(url));
    wk_test_sentinels_stop(&t);
}

/* ------------------------------------------------------------------------
 * Failover under load
 * ---------------------------------------------------------------------- */

typedef struct load {
    wk_test_sentinels *t;
    wk_entity lock;
    atomic_bool stop;
    atomic_int ok, unknown, not_sent, other, after_switch_ok;
    atomic_bool switched;
    int last_other;
    char other_msg[512];
} load;

static void *lock_cycles(void *arg)
{
    load *l = arg;
    wk_db *db = must_open(l->t, 0);
    wk_processor *p = wk_db_processor(db);
    for (int i = 0; !atomic_load(&l->stop); i++) {
        wk_token token;
        bool got = false;
        int rc = wk_lock_try(p, &l->lock, wk_name_u64((uint64_t)i), &token, &got);
        if (rc == WK_OK && got) {
            bool released = false;
            rc = wk_lock_release(p, &l->lock, wk_name_u64((uint64_t)i), &token, &released);
        }
        if (rc == WK_OK) {
            atomic_fetch_add(&l->ok, 1);
            if (atomic_load(&l->switched))
                atomic_fetch_add(&l->after_switch_ok, 1);
        } else if (rc == WK_EUNKNOWN) {
            atomic_fetch_add(&l->unknown, 1);
        } else if (rc == WK_EIO || rc == WK_ETIMEDOUT) {
            atomic_fetch_add(&l->not_sent, 1);
        } else {
            if (atomic_fetch_add(&l->other, 1) == 0) {
                l->last_other = rc;
                snprintf(l->other_msg, sizeof(l->other_msg), "%s", wk_db_errmsg(db));
            }
        }
    }
    wk_db_close(db);
    return NULL;
}

Test(sentinel, failover_under_load_moves_writes_to_the_new_primary, .timeout = 60)
{
    wk_test_sentinels t;
    cr_assert_eq(wk_test_sentinels_start(&t, DATA_PW, SENTINEL_PW), 0);
    load l = {.t = &t, .lock = WK_LOCK_ENTITY(wk_test_ns("load"), 30000)};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, lock_cycles, &l), 0);
    while (atomic_load(&l.ok) < 200)
        wk_test_sleep_ms(5);
    int now = wk_test_sentinels_failover(&t, 20000);
    cr_assert_eq(now, t.replica.port, "the replica was promoted");
    /* The handles heard the failover notice (+switch-master) and left
     * the old primary, which the sentinels demote only seconds later:
     * once both workers have gone on, no write reaches it any more. */
    atomic_store(&l.switched, true);
    while (atomic_load(&l.after_switch_ok) < 100)
        wk_test_sleep_ms(5);
    redisContext *old = wk_test_sentinels_raw(&t, t.primary.port);
    cr_assert(old);
    long long before = wk_test_cmd_calls(old, "set");
    int ok_before = atomic_load(&l.after_switch_ok);
    while (atomic_load(&l.after_switch_ok) < ok_before + 200)
        wk_test_sleep_ms(5);
    cr_assert_eq(wk_test_cmd_calls(old, "set"), before,
                 "writes after the switch go to the new primary, not the old one");
    redisFree(old);
    atomic_store(&l.stop, true);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    cr_assert_eq(atomic_load(&l.other), 0,
                 "only connection outcomes during a failover (no READONLY error): %s %s",
                 wk_err_name(l.last_other), l.other_msg);
    cr_log_info("failover under load: %d ok, %d unknown, %d not sent", atomic_load(&l.ok),
                atomic_load(&l.unknown), atomic_load(&l.not_sent));
    /* A handle opened now writes to the new primary. */
    wk_db *db = must_open(&t, 0);
    wk_token token;
    bool got = false;
    cr_assert_eq(wk_lock_try(wk_db_processor(db), &l.lock, wk_name_str("after"), &token, &got),
                 WK_OK, "%s", wk_db_errmsg(db));
    cr_assert(got);
    char key[WK_KEY_MAX + 1];
    size_t klen;
    wk_name after = wk_name_str("after");
    cr_assert_eq(wk_key_build(key, sizeof(key), &klen, &l.lock, &after, NULL), WK_OK);
    cr_assert_eq(raw_strlen(&t, t.replica.port, key, klen), WK_TOKEN_LEN);
    wk_db_close(db);
    wk_test_sentinels_stop(&t);
}

/* ------------------------------------------------------------------------
 * READONLY: the node turned replica under the handle
 * ---------------------------------------------------------------------- */

static void raw_ok(const wk_test_sentinels *t, int port, const char *cmd)
{
    redisContext *c = wk_test_sentinels_raw(t, port);
    cr_assert(c);
    redisReply *r = redisCommand(c, cmd);
    cr_assert(r && r->type == REDIS_REPLY_STATUS, "%s: %s", cmd, r ? r->str : "no reply");
    freeReplyObject(r);
    redisFree(c);
}

/* Every sentinel forgets the service and watches the node on `port` as
 * its primary instead. */
static void repoint_sentinels(const wk_test_sentinels *t, int port)
{
    for (int i = 0; i < 3; i++) {
        char cmd[160];
        raw_ok(t, t->sentinel[i].port,
               (snprintf(cmd, sizeof(cmd), "SENTINEL REMOVE %s", t->service), cmd));
        raw_ok(t, t->sentinel[i].port,
               (snprintf(cmd, sizeof(cmd), "SENTINEL MONITOR %s 127.0.0.1 %d 2", t->service, port),
                cmd));
        raw_ok(t, t->sentinel[i].port,
               (snprintf(cmd, sizeof(cmd), "SENTINEL SET %s auth-pass %s", t->service,
                         t->data_password),
                cmd));
    }
}

/* The replication offset a node reports (INFO replication): the
 * primary's master_repl_offset, a replica's slave_repl_offset. */
static long long repl_offset(const wk_test_sentinels *t, int port, const char *field)
{
    redisContext *c = wk_test_sentinels_raw(t, port);
    cr_assert(c);
    redisReply *r = redisCommand(c, "INFO replication");
    cr_assert(r && r->type == REDIS_REPLY_STRING);
    const char *at = strstr(r->str, field);
    long long v = at ? atoll(at + strlen(field)) : -1;
    freeReplyObject(r);
    redisFree(c);
    return v;
}

/* Until the replica has every write the primary has (a failover promotes
 * it with what it has: a write it lacks would be lost, which is the
 * failover's nature, not what these tests are about). */
static void wait_replica_caught_up(const wk_test_sentinels *t)
{
    long long want = repl_offset(t, t->primary.port, "master_repl_offset:");
    for (int i = 0; i < 500 && repl_offset(t, t->replica.port, "slave_repl_offset:") < want; i++)
        wk_test_sleep_ms(10);
    cr_assert_geq(repl_offset(t, t->replica.port, "slave_repl_offset:"), want,
                  "the replica did not catch up");
}

/* Once the replica has caught up, it becomes the primary and the old
 * primary a replica of `old_follows` (the new primary's port, or one nobody listens on: then
 * it keeps its data, answers reads, and hears no write); the sentinels
 * name the new primary. */
static void switch_roles(const wk_test_sentinels *t, int old_follows)
{
    wait_replica_caught_up(t);
    raw_ok(t, t->replica.port, "REPLICAOF NO ONE");
    char cmd[64];
    snprintf(cmd, sizeof(cmd), "REPLICAOF 127.0.0.1 %d", old_follows);
    raw_ok(t, t->primary.port, cmd);
    repoint_sentinels(t, t->replica.port);
}

Test(sentinel, readonly_reply_did_not_run_and_goes_to_the_new_primary, .timeout = 60)
{
    wk_test_sentinels t;
    cr_assert_eq(wk_test_sentinels_start(&t, DATA_PW, SENTINEL_PW), 0);
    char err[512];
    int rc;
    wk_db *stuck = open_sentinel(&t, 0, 500, &rc, err, sizeof(err));
    cr_assert_eq(rc, WK_OK, "%s", err);
    wk_db *moved = must_open(&t, 0);
    wk_entity lock = WK_LOCK_ENTITY(wk_test_ns("ro"), 30000);
    wk_token token;
    bool got = false;
    cr_assert_eq(wk_lock_try(wk_db_processor(stuck), &lock, wk_name_str("a"), &token, &got), WK_OK);
    cr_assert_eq(wk_lock_try(wk_db_processor(moved), &lock, wk_name_str("b"), &token, &got), WK_OK);
    /* Swap the roles behind the sentinels' back (no client is killed):
     * both handles' next writes meet READONLY. */
    raw_ok(&t, t.replica.port, "REPLICAOF NO ONE");
    char cmd[64];
    snprintf(cmd, sizeof(cmd), "REPLICAOF 127.0.0.1 %d", t.replica.port);
    raw_ok(&t, t.primary.port, cmd);
    /* The sentinels still name the demoted node, ROLE says replica: no
     * primary within the timeout, and the write did not run. */
    rc = wk_lock_try(wk_db_processor(stuck), &lock, wk_name_str("c"), &token, &got);
    cr_assert(rc == WK_EIO || rc == WK_ETIMEDOUT,
              "a write a replica refused did not run: not sent, never %s (%s)", wk_err_name(rc),
              wk_db_errmsg(stuck));
    cr_assert(strstr(wk_db_errmsg(stuck), "not the primary"), "%s", wk_db_errmsg(stuck));
    cr_assert_not(got);
    /* Once the sentinels name the new primary, the refused write is sent
     * again there and runs, once. */
    repoint_sentinels(&t, t.replica.port);
    rc = wk_lock_try(wk_db_processor(moved), &lock, wk_name_str("d"), &token, &got);
    cr_assert_eq(rc, WK_OK, "%s: %s", wk_err_name(rc), wk_db_errmsg(moved));
    cr_assert(got, "re-sent on the new primary");
    char key[WK_KEY_MAX + 1];
    size_t klen;
    wk_name d = wk_name_str("d");
    cr_assert_eq(wk_key_build(key, sizeof(key), &klen, &lock, &d, NULL), WK_OK);
    cr_assert_eq(raw_strlen(&t, t.replica.port, key, klen), WK_TOKEN_LEN);
    wk_db_close(stuck);
    wk_db_close(moved);
    wk_test_sentinels_stop(&t);
}

/* ------------------------------------------------------------------------
 * The event-loop handle asks the sentinels too
 * ---------------------------------------------------------------------- */

static void async_status(wk_async *a, int status, const char *msg, void *arg)
{
    (void)a;
    int *out = arg;
    *out = status;
    if (status != WK_OK)
        cr_log_info("async: %s", msg);
}

/* One lock try through the loop: its status. */
static int async_try(wk_async *a, const wk_entity *lock, const char *name, bool *got)
{
    int status = 12345;
    wk_token token;
    cr_assert_eq(
        wk_lock_try(wk_async_with(a, async_status, &status), lock, wk_name_str(name), &token, got),
        WK_OK);
    wk_test_async_drain(a);
    return status;
}

static wk_async *open_async_sentinel(const char *url, const char *sentinel_password)
{
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = url;
    o.capability = wk_cap_read_write();
    o.password = DATA_PW;
    o.sentinel_password = sentinel_password;
    o.connect_timeout_ms = 3000;
    o.command_timeout_ms = 3000;
    wk_async *a = NULL;
    char err[256];
    cr_assert_eq(wk_async_open(&a, &o, err, sizeof(err)), WK_OK, "%s", err);
    return a;
}

Test(sentinel, event_loop_handle_asks_the_sentinels_and_follows_a_readonly_switch, .timeout = 60)
{
    wk_test_sentinels t;
    cr_assert_eq(wk_test_sentinels_start(&t, DATA_PW, SENTINEL_PW), 0);
    /* A first sentinel that is down: the search goes on to the next. */
    char url[256];
    snprintf(url, sizeof(url), "redis-sentinel://127.0.0.1:1,%s",
             t.url + strlen("redis-sentinel://"));
    wk_async *a = open_async_sentinel(url, SENTINEL_PW);
    wk_entity lock = WK_LOCK_ENTITY(wk_test_ns("async-sentinel"), 30000);
    bool got = false;
    int rc = async_try(a, &lock, "a", &got);
    cr_assert_eq(rc, WK_OK, "%s", wk_err_name(rc));
    cr_assert(got);
    char key[WK_KEY_MAX + 1];
    size_t klen;
    wk_name n = wk_name_str("a");
    cr_assert_eq(wk_key_build(key, sizeof(key), &klen, &lock, &n, NULL), WK_OK);
    cr_assert_eq(raw_strlen(&t, t.primary.port, key, klen), WK_TOKEN_LEN, "on the primary");

    /* The roles swap and the sentinels name the new primary: the next
     * write meets READONLY, did not run, and runs once on the new one. */
    switch_roles(&t, t.replica.port);
    got = false;
    rc = async_try(a, &lock, "b", &got);
    cr_assert_eq(rc, WK_OK, "%s", wk_err_name(rc));
    cr_assert(got, "re-sent on the new primary");
    n = wk_name_str("b");
    cr_assert_eq(wk_key_build(key, sizeof(key), &klen, &lock, &n, NULL), WK_OK);
    cr_assert_eq(raw_strlen(&t, t.replica.port, key, klen), WK_TOKEN_LEN, "on the new primary");
    wk_async_close(a);

    /* Without the sentinels' password the search ends at once: WK_EAUTH. */
    a = open_async_sentinel(t.url, NULL);
    rc = async_try(a, &lock, "c", &got);
    cr_assert_eq(rc, WK_EAUTH, "%s", wk_err_name(rc));
    wk_async_close(a);
    wk_test_sentinels_stop(&t);
}

/* A waiting acquire through the loop on a Sentinel URL: its waits
 * connection finds the primary through the sentinels too, and a release
 * by a blocking handle wakes it; the lock is then the loop's, on the
 * primary. */
Test(sentinel, event_loop_handle_waits_for_a_lock, .timeout = 60)
{
    wk_test_sentinels t;
    cr_assert_eq(wk_test_sentinels_start(&t, DATA_PW, SENTINEL_PW), 0);
    wk_async *a = open_async_sentinel(t.url, SENTINEL_PW);
    wk_db *db = must_open(&t, 0);
    wk_entity lock = WK_LOCK_ENTITY(wk_test_ns("async-sentinel-wait"), 30000);
    wk_token held;
    bool got = false;
    cr_assert_eq(wk_lock_try(wk_db_processor(db), &lock, wk_name_str("w"), &held, &got), WK_OK);
    cr_assert(got);
    int status = 12345;
    wk_token token;
    bool acquired = false;
    cr_assert_eq(wk_lock_acquire(wk_async_with(a, async_status, &status), &lock, wk_name_str("w"),
                                 wk_deadline_in(20000), NULL, &token, &acquired),
                 WK_OK, "%s", wk_async_errmsg(a));
    /* Turns until the waiter sleeps on its wake-up list (its attempt was
     * refused), with nothing completed. */
    int64_t until = wk_monotonic_ms() + 3000;
    while (wk_monotonic_ms() < until && status == 12345)
        wk_test_async_turn(a);
    cr_assert_eq(status, 12345, "still waiting: %s", wk_err_name(status));
    bool was_held = false;
    cr_assert_eq(wk_lock_release(wk_db_processor(db), &lock, wk_name_str("w"), &held, &was_held),
                 WK_OK);
    cr_assert(was_held);
    until = wk_monotonic_ms() + 10000;
    while (wk_monotonic_ms() < until && status == 12345)
        wk_test_async_turn(a);
    cr_assert_eq(status, WK_OK, "%s", wk_err_name(status));
    cr_assert(acquired, "woken by the release and acquired");
    wk_lease_state st;
    cr_assert_eq(wk_lock_owned(wk_db_processor(db), &lock, wk_name_str("w"), &token, &st), WK_OK);
    cr_assert(st.owned, "the loop's token holds the lock on the primary");
    wk_db_close(db);
    wk_async_close(a);
    wk_test_sentinels_stop(&t);
}

/* One receive of a loop receiver, run to its callback: its status. */
static int loop_recv(wk_async *a, wk_pipe_receiver *r, wk_pipe_message *m)
{
    int status = 12345;
    cr_assert_eq(wk_pipe_recv_async(r, m, async_status, &status), WK_OK, "%s",
                 wk_pipe_receiver_errmsg(r));
    for (int64_t until = wk_monotonic_ms() + 15000; wk_monotonic_ms() < until && status == 12345;)
        wk_test_async_turn(a);
    cr_assert_neq(status, 12345, "no callback within 15 s");
    return status;
}

/* A pipe followed through the loop on a Sentinel URL: the receiver's own
 * connection finds the primary through the sentinels; after the roles
 * swap, its take meets READONLY (it did not run), goes to the new
 * primary, and the messages sent there come once and in order. */
Test(sentinel, event_loop_receiver_follows_a_pipe_across_a_switch, .timeout = 60)
{
    wk_test_sentinels t;
    cr_assert_eq(wk_test_sentinels_start(&t, DATA_PW, SENTINEL_PW), 0);
    wk_async *a = open_async_sentinel(t.url, SENTINEL_PW);
    wk_db *db = must_open(&t, 0);
    wk_processor *p = wk_db_processor(db);
    wk_entity pipe = WK_PIPE_ENTITY(wk_test_ns("async-sentinel-pipe"), 60000);
    wk_name name = wk_name_str("jobs");
    int status = 12345;
    wk_pipe_receiver *r = NULL;
    cr_assert_eq(wk_pipe_receive(wk_async_with(a, async_status, &status), &pipe, name, &r), WK_OK,
                 "%s", wk_async_errmsg(a));
    for (int64_t until = wk_monotonic_ms() + 10000; wk_monotonic_ms() < until && status == 12345;)
        wk_test_async_turn(a);
    cr_assert_eq(status, WK_OK, "open: %s", wk_err_name(status));
    cr_assert_eq(wk_pipe_send(p, &pipe, name, "one", 3), WK_OK, "%s", wk_db_errmsg(db));
    wk_pipe_message m = {0};
    cr_assert_eq(loop_recv(a, r, &m), WK_OK);
    cr_assert(m.got == WK_PIPE_MESSAGE && m.len == 3 && memcmp(m.body, "one", 3) == 0);

    switch_roles(&t, t.replica.port);
    cr_assert_eq(wk_pipe_send(p, &pipe, name, "two", 3), WK_OK, "%s", wk_db_errmsg(db));
    cr_assert_eq(wk_pipe_send(p, &pipe, name, "three", 5), WK_OK, "%s", wk_db_errmsg(db));
    cr_assert_eq(wk_pipe_finish(p, &pipe, name), WK_OK, "%s", wk_db_errmsg(db));
    /* A receive may end WK_EIO while its connection is made anew (no
     * message lost: the next one takes it); nothing else. */
    const char *want[] = {"two", "three"};
    for (int k = 0, tries = 0; k < 2; tries++) {
        cr_assert_lt(tries, 10, "message %d never came", k);
        int st = loop_recv(a, r, &m);
        if (st != WK_OK) {
            cr_assert_eq(st, WK_EIO, "receive %d: %s", k, wk_err_name(st));
            continue;
        }
        cr_assert_eq(m.got, WK_PIPE_MESSAGE, "receive %d", k);
        cr_assert(m.len == strlen(want[k]) && memcmp(m.body, want[k], m.len) == 0,
                  "message %d once and in order", k);
        k++;
    }
    cr_assert_eq(loop_recv(a, r, &m), WK_OK);
    cr_assert_eq(m.got, WK_PIPE_END);
    wk_pipe_receiver_close(r);
    wk_db_close(db);
    wk_async_close(a);
    wk_test_sentinels_stop(&t);
}

/* A near cache on a Sentinel URL after a switch of roles: the node it
 * reads from turned replica — of a server that is not there, so no write
 * of the new primary ever reaches it, and its PINGs still answer. The
 * staleness bound is about writes to the service: a write completed on
 * the new primary must be seen within the bound (the heartbeat asks
 * ROLE; a node that is no longer the primary ends the session and the
 * near cache reads from the primary the sentinels name). */
Test(sentinel, near_cache_follows_a_switch_of_roles_within_its_bound, .timeout = 60)
{
    wk_test_sentinels t;
    cr_assert_eq(wk_test_sentinels_start(&t, DATA_PW, SENTINEL_PW), 0);
    wk_db *db = must_open(&t, 0);
    wk_processor *p = wk_db_processor(db);
    wk_entity cache = WK_CACHE_ENTITY(wk_test_ns("sentinel-near"), 600000);
    const wk_entity *served[] = {&cache};
    wk_near_cache_options no = WK_NEAR_CACHE_OPTIONS_INIT;
    no.entities = served;
    no.nentities = 1;
    no.staleness_ms = 300;
    wk_near_cache *nc = NULL;
    char err[512];
    cr_assert_eq(wk_near_cache_open(&nc, db, &no, err, sizeof(err)), WK_OK, "%s", err);
    wk_name k = wk_name_str("k");
    cr_assert_eq(wk_cache_put(p, &cache, k, "v1", 2), WK_OK, "%s", wk_db_errmsg(db));
    wk_body b = WK_BODY_INIT;
    cr_assert_eq(wk_near_cache_get(nc, &cache, k, &b), WK_OK, "%s", wk_near_cache_errmsg());
    cr_assert(b.found && b.len == 2 && memcmp(b.data, "v1", 2) == 0);

    /* The replica becomes the primary; the old primary a replica of a
     * port nobody listens on (it keeps its data and answers reads). */
    switch_roles(&t, wk_test_free_port());
    cr_assert_eq(wk_cache_put(p, &cache, k, "v2", 2), WK_OK, "%s", wk_db_errmsg(db));
    int64_t written = wk_monotonic_ms();
    /* Gets until well past the bound (the bound plus a heartbeat, plus
     * a reconnect through the sentinels): then the new body. */
    bool fresh = false;
    while (!fresh && wk_monotonic_ms() - written < 8000) {
        int rc = wk_near_cache_get(nc, &cache, k, &b);
        fresh = rc == WK_OK && b.found && b.len == 2 && memcmp(b.data, "v2", 2) == 0;
        if (!fresh)
            wk_test_sleep_ms(20);
    }
    cr_assert(fresh, "after the switch the near cache still served the old body %lld ms later",
              (long long)(wk_monotonic_ms() - written));
    wk_body_free(&b);
    wk_near_cache_close(nc);
    wk_db_close(db);
    wk_test_sentinels_stop(&t);
}

/* A read-only follower of `cfg` on the topology's Sentinel URL, named
 * "follower-under-test", checking every check_ms (keep-alive as given). */
static wk_settings_follower *start_follower(const wk_test_sentinels *t, const wk_entity *settings,
                                            wk_name cfg, int check_ms, int keepalive_ms)
{
    wk_db_options fo = WK_DB_OPTIONS_INIT;
    fo.url = t->url;
    fo.capability = wk_cap_read_only();
    fo.password = DATA_PW;
    fo.sentinel_password = SENTINEL_PW;
    fo.client_name = "follower-under-test";
    wk_settings_follower_options so = WK_SETTINGS_FOLLOWER_OPTIONS_INIT;
    so.db = &fo;
    so.settings = settings;
    so.name = cfg;
    so.check_ms = check_ms;
    so.keepalive_ms = keepalive_ms;
    wk_settings_follower *f = NULL;
    char ferr[256];
    cr_assert_eq(wk_settings_follower_start(&f, &so, ferr, sizeof(ferr)), WK_OK, "%s", ferr);
    return f;
}

/* The settings follower on a Sentinel URL after a switch of roles that
 * leaves its node a replica of nobody (it still answers, and its PINGs,
 * version reads and subscription all look healthy, but no change of the
 * new primary reaches it): the change must still arrive, within the
 * periodic check plus a reconnect. */
Test(sentinel, settings_follower_leaves_a_node_turned_replica, .timeout = 60)
{
    wk_test_sentinels t;
    cr_assert_eq(wk_test_sentinels_start(&t, DATA_PW, SENTINEL_PW), 0);
    wk_db *db = must_open(&t, 0);
    wk_entity settings = WK_SETTINGS_ENTITY(wk_test_ns("fsrole"));
    wk_name cfg = wk_name_str("cfg");
    int64_t version = 0;
    cr_assert_eq(wk_settings_put(wk_db_processor(db), &settings, cfg, "k", 1, "v1", 2, &version),
                 WK_OK, "%s", wk_db_errmsg(db));
    wk_settings_follower *f = start_follower(&t, &settings, cfg, 300, 5000);
    cr_assert_eq(wk_settings_follower_version(f), version);

    switch_roles(&t, wk_test_free_port());
    int64_t v2 = 0;
    cr_assert_eq(wk_settings_put(wk_db_processor(db), &settings, cfg, "k", 1, "v2", 2, &v2), WK_OK,
                 "%s", wk_db_errmsg(db));
    int64_t written = wk_monotonic_ms();
    while (wk_settings_follower_version(f) < v2 && wk_monotonic_ms() - written < 8000)
        wk_test_sleep_ms(10);
    cr_assert_geq(wk_settings_follower_version(f), v2,
                  "the change on the new primary never reached the follower (%lld ms)",
                  (long long)(wk_monotonic_ms() - written));
    char value[8];
    size_t vlen = 0;
    bool found = false;
    cr_assert_eq(wk_settings_follower_get(f, "k", 1, value, sizeof(value), &vlen, &found), WK_OK);
    cr_assert(found && vlen == 2 && !memcmp(value, "v2", 2));
    wk_settings_follower_free(f);
    wk_db_close(db);
    wk_test_sentinels_stop(&t);
}

/* A pool (multiplexed, and exclusive) on a Sentinel URL across a switch of
 * roles: its shared connections meet READONLY on the old primary (the
 * write did not run) and go to the one the sentinels name; every lock
 * taken through it afterwards is on the new primary. */
Test(sentinel, pool_follows_a_switch_of_roles, .timeout = 60)
{
    wk_test_sentinels t;
    cr_assert_eq(wk_test_sentinels_start(&t, DATA_PW, SENTINEL_PW), 0);
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = t.url;
    o.capability = wk_cap_read_write();
    o.password = DATA_PW;
    o.sentinel_password = SENTINEL_PW;
    o.command_timeout_ms = 3000;
    wk_pool *pools[2];
    for (int m = 0; m < 2; m++) {
        wk_pool_options po = WK_POOL_OPTIONS_INIT;
        po.db = &o;
        po.size = 2;
        po.multiplex = m == 0;
        char err[256];
        cr_assert_eq(wk_pool_open(&pools[m], &po, err, sizeof(err)), WK_OK, "%s", err);
    }
    wk_entity lock = WK_LOCK_ENTITY(wk_test_ns("sentinel-pool"), 30000);
    switch_roles(&t, t.replica.port);
    for (int m = 0; m < 2; m++)
        for (int i = 0; i < 6; i++) {
            wk_name n = wk_name_u64((uint64_t)(m * 100 + i));
            wk_token tk;
            bool got = false;
            int rc = wk_lock_try(wk_pool_processor(pools[m]), &lock, n, &tk, &got);
            cr_assert_eq(rc, WK_OK, "%s pool, lock %d: %s: %s", m ? "exclusive" : "multiplexed", i,
                         wk_err_name(rc), wk_pool_errmsg(pools[m]));
            cr_assert(got);
            char key[WK_KEY_MAX + 1];
            size_t klen;
            cr_assert_eq(wk_key_build(key, sizeof(key), &klen, &lock, &n, NULL), WK_OK);
            cr_assert_eq(raw_strlen(&t, t.replica.port, key, klen), WK_TOKEN_LEN,
                         "lock %d is on the new primary", i);
        }
    wk_pool_close(pools[0]);
    wk_pool_close(pools[1]);
    wk_test_sentinels_stop(&t);
}

typedef struct blocking_waiter {
    const wk_test_sentinels *t;
    const wk_entity *lock;
    wk_token token;
    bool acquired;
    int rc;
    char msg[256];
} blocking_waiter;

static void *wait_blocking(void *arg)
{
    blocking_waiter *w = arg;
    wk_db *db = must_open(w->t, 0);
    w->rc = wk_lock_acquire(wk_db_processor(db), w->lock, wk_name_str("sw"), wk_deadline_in(30000),
                            NULL, &w->token, &w->acquired);
    snprintf(w->msg, sizeof(w->msg), "%s", wk_db_errmsg(db));
    wk_db_close(db);
    return NULL;
}

/* Waiters parked on the old primary when the roles switch — one through
 * the event loop, one blocking — are not stranded there: the holder's
 * release on the new primary ends with both served in turn (each holds
 * the lock on the new primary once, never both at once). */
Test(sentinel, waiters_parked_on_the_old_primary_are_served_after_a_switch, .timeout = 60)
{
    wk_test_sentinels t;
    cr_assert_eq(wk_test_sentinels_start(&t, DATA_PW, SENTINEL_PW), 0);
    wk_db *db = must_open(&t, 0);
    wk_entity lock = WK_LOCK_ENTITY(wk_test_ns("sentinel-switch-wait"), 60000);
    wk_token held;
    bool got = false;
    cr_assert_eq(wk_lock_try(wk_db_processor(db), &lock, wk_name_str("sw"), &held, &got), WK_OK);
    cr_assert(got);
    wk_async *a = open_async_sentinel(t.url, SENTINEL_PW);
    int status = 12345;
    wk_token loop_token;
    bool loop_acquired = false;
    cr_assert_eq(wk_lock_acquire(wk_async_with(a, async_status, &status), &lock, wk_name_str("sw"),
                                 wk_deadline_in(30000), NULL, &loop_token, &loop_acquired),
                 WK_OK, "%s", wk_async_errmsg(a));
    blocking_waiter bw = {.t = &t, .lock = &lock, .rc = 12345};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, wait_blocking, &bw), 0);
    for (int64_t until = wk_monotonic_ms() + 1500; wk_monotonic_ms() < until;)
        wk_test_async_turn(a); /* both parked on the primary */
    cr_assert_eq(status, 12345);

    switch_roles(&t, t.replica.port);
    bool was = false;
    cr_assert_eq(wk_lock_release(wk_db_processor(db), &lock, wk_name_str("sw"), &held, &was), WK_OK,
                 "%s", wk_db_errmsg(db));
    cr_assert(was, "the lock was replicated before the switch and released on the new primary");
    /* One of them holds it now; the other gets it when that one lets go. */
    int64_t until = wk_monotonic_ms() + 20000;
    while (wk_monotonic_ms() < until && status == 12345 && bw.rc == 12345)
        wk_test_async_turn(a);
    cr_assert(status != 12345 || bw.rc != 12345, "nobody was served after the release");
    bool loop_first = status != 12345;
    if (loop_first) {
        cr_assert_eq(status, WK_OK, "%s", wk_err_name(status));
        cr_assert(loop_acquired);
        cr_assert_eq(bw.rc, 12345, "never two holders");
        int rs = 12345;
        cr_assert_eq(wk_lock_release(wk_async_with(a, async_status, &rs), &lock, wk_name_str("sw"),
                                     &loop_token, &was),
                     WK_OK);
        while (rs == 12345)
            wk_test_async_turn(a);
        cr_assert_eq(rs, WK_OK);
        pthread_join(th, NULL);
        cr_assert_eq(bw.rc, WK_OK, "%s: %s", wk_err_name(bw.rc), bw.msg);
        cr_assert(bw.acquired, "the blocking waiter got it after the loop's release");
    } else {
        pthread_join(th, NULL);
        cr_assert_eq(bw.rc, WK_OK, "%s: %s", wk_err_name(bw.rc), bw.msg);
        cr_assert(bw.acquired);
        cr_assert_eq(status, 12345, "never two holders");
        cr_assert_eq(wk_lock_release(wk_db_processor(db), &lock, wk_name_str("sw"), &bw.token, &was),
                     WK_OK);
        cr_assert(was);
        while (wk_monotonic_ms() < until + 20000 && status == 12345)
            wk_test_async_turn(a);
        cr_assert_eq(status, WK_OK, "%s", wk_err_name(status));
        cr_assert(loop_acquired, "the loop waiter got it after the blocking one's release");
    }
    wk_async_close(a);
    wk_db_close(db);
    wk_test_sentinels_stop(&t);
}

typedef struct pool_writer {
    wk_pool *pool;
    const wk_entity *lock;
    int id, ok, unknown, other;
    _Atomic bool *stop;
    char msg[256];
} pool_writer;

static void *write_through_pool(void *arg)
{
    pool_writer *w = arg;
    for (int i = 0; !atomic_load(w->stop) && i < 100000; i++) {
        wk_token tk;
        bool got = false;
        int rc = wk_lock_try(wk_pool_processor(w->pool), w->lock,
                             wk_name_u64((uint64_t)w->id * 1000000 + (uint64_t)i), &tk, &got);
        if (rc == WK_OK && got)
            w->ok++;
        else if (rc == WK_EUNKNOWN)
            w->unknown++;
        else if (w->other++ == 0)
            snprintf(w->msg, sizeof(w->msg), "%s: %s", wk_err_name(rc),
                     wk_pool_errmsg(w->pool));
    }
    return NULL;
}

/* Eight threads writing through a multiplexed pool of two connections on
 * a Sentinel URL while the roles switch: the writes in flight on a
 * connection when one of them meets READONLY are not cut off with it —
 * each write either ran (OK) or did not run and went to the new primary;
 * none is left unknown, none fails. */
Test(sentinel, writes_multiplexed_on_a_pool_survive_a_switch_of_roles, .timeout = 60)
{
    wk_test_sentinels t;
    cr_assert_eq(wk_test_sentinels_start(&t, DATA_PW, SENTINEL_PW), 0);
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = t.url;
    o.capability = wk_cap_read_write();
    o.password = DATA_PW;
    o.sentinel_password = SENTINEL_PW;
    o.command_timeout_ms = 5000;
    wk_pool_options po = WK_POOL_OPTIONS_INIT;
    po.db = &o;
    po.size = 2;
    wk_pool *pool = NULL;
    char err[256];
    cr_assert_eq(wk_pool_open(&pool, &po, err, sizeof(err)), WK_OK, "%s", err);
    wk_entity lock = WK_LOCK_ENTITY(wk_test_ns("sentinel-mux"), 30000);
    enum { N = 8 };
    _Atomic bool stop = false;
    pool_writer w[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        w[i] = (pool_writer){.pool = pool, .lock = &lock, .id = i, .stop = &stop};
        cr_assert_eq(pthread_create(&th[i], NULL, write_through_pool, &w[i]), 0);
    }
    wk_test_sleep_ms(300);
    switch_roles(&t, t.replica.port);
    wk_test_sleep_ms(700);
    atomic_store(&stop, true);
    int ok = 0;
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        ok += w[i].ok;
        cr_assert_eq(w[i].unknown, 0, "thread %d: %d writes left unknown", i, w[i].unknown);
        cr_assert_eq(w[i].other, 0, "thread %d: %d failed, the first %s", i, w[i].other,
                     w[i].msg);
    }
    cr_log_info("%d locks taken across the switch", ok);
    cr_assert_gt(ok, N, "the writers ran");
    wk_pool_close(pool);
    wk_test_sentinels_stop(&t);
}

/* The same switch under a follower started through the event loop: its
 * check asks ROLE through the loop; the node's "slave" drops the handle's
 * connection and the follower subscribes and loads again, from the
 * primary the sentinels name. */
Test(sentinel, loop_settings_follower_leaves_a_node_turned_replica, .timeout = 60)
{
    wk_test_sentinels t;
    cr_assert_eq(wk_test_sentinels_start(&t, DATA_PW, SENTINEL_PW), 0);
    wk_db *db = must_open(&t, 0);
    wk_entity settings = WK_SETTINGS_ENTITY(wk_test_ns("lfsrole"));
    wk_name cfg = wk_name_str("cfg");
    int64_t version = 0;
    cr_assert_eq(wk_settings_put(wk_db_processor(db), &settings, cfg, "k", 1, "v1", 2, &version),
                 WK_OK, "%s", wk_db_errmsg(db));
    wk_async *a = open_async_sentinel(t.url, SENTINEL_PW);
    wk_settings_follower_options so = WK_SETTINGS_FOLLOWER_OPTIONS_INIT;
    so.settings = &settings;
    so.name = cfg;
    so.check_ms = 300;
    wk_settings_follower *f = NULL;
    int started = 12345;
    char ferr[256];
    cr_assert_eq(wk_settings_follower_start_async(&f, wk_async_with(a, async_status, &started), &so,
                                                  ferr, sizeof(ferr)),
                 WK_OK, "%s", ferr);
    for (int64_t until = wk_monotonic_ms() + 10000; wk_monotonic_ms() < until && started == 12345;)
        wk_test_async_turn(a);
    cr_assert_eq(started, WK_OK, "%s", wk_err_name(started));
    cr_assert_eq(wk_settings_follower_version(f), version);

    switch_roles(&t, wk_test_free_port());
    int64_t v2 = 0;
    cr_assert_eq(wk_settings_put(wk_db_processor(db), &settings, cfg, "k", 1, "v2", 2, &v2), WK_OK,
                 "%s", wk_db_errmsg(db));
    int64_t written = wk_monotonic_ms();
    while (wk_settings_follower_version(f) < v2 && wk_monotonic_ms() - written < 8000)
        wk_test_async_turn(a);
    cr_assert_geq(wk_settings_follower_version(f), v2,
                  "the change on the new primary never reached the loop follower (%lld ms)",
                  (long long)(wk_monotonic_ms() - written));
    wk_settings_follower_free(f);
    wk_async_close(a);
    wk_db_close(db);
    wk_test_sentinels_stop(&t);
}

/* ------------------------------------------------------------------------
 * Acknowledged leases
 * ---------------------------------------------------------------------- */

Test(sentinel, acknowledged_lease_survives_failover_unacknowledged_is_lost, .timeout = 60)
{
    wk_test_sentinels t;
    cr_assert_eq(wk_test_sentinels_start(&t, DATA_PW, SENTINEL_PW), 0);
    wk_db *acked = must_open(&t, 1), *plain = must_open(&t, 0);
    /* The leases meant to be acknowledged wait long (a healthy replica
     * answers at once; a loaded machine may take more than 200 ms). */
    ack_timeout_ms = 10000;
    wk_db *patient = must_open(&t, 1);
    ack_timeout_ms = 200;
    wk_entity lock = WK_LOCK_ENTITY(wk_test_ns("ack"), 60000);
    wk_entity rw = WK_RWLOCK_ENTITY(wk_test_ns("ackrw"), 60000);
    wk_token a, b, b2, r;
    bool got = false;
    cr_assert_eq(wk_lock_try(wk_db_processor(patient), &lock, wk_name_str("A"), &a, &got), WK_OK,
                 "%s", wk_db_errmsg(patient));
    cr_assert(got, "a replica acknowledged A");
    cr_assert_eq(wk_rwlock_try_write(wk_db_processor(patient), &rw, wk_name_str("W"), &r, &got),
                 WK_OK, "%s", wk_db_errmsg(patient));
    cr_assert(got);
    wk_db_close(patient);

    /* Cut the replica off: stopped, its link closed by the primary. */
    kill(t.replica.pid, SIGSTOP);
    redisContext *c = wk_test_sentinels_raw(&t, t.primary.port);
    cr_assert(c);
    freeReplyObject(redisCommand(c, "CLIENT KILL TYPE replica"));
    /* No replica acknowledges now: the acknowledged acquire gives B2 back. */
    int rc = wk_lock_try(wk_db_processor(acked), &lock, wk_name_str("B2"), &b2, &got);
    cr_assert_eq(rc, WK_ENOTREPLICATED, "%s (%s)", wk_err_name(rc), wk_db_errmsg(acked));
    cr_assert_not(got);
    cr_assert(strstr(wk_db_errmsg(acked), "0 of 1 replica"), "%s", wk_db_errmsg(acked));
    wk_lock_state st;
    cr_assert_eq(wk_lock_inspect(wk_db_processor(acked), &lock, wk_name_str("B2"), &st), WK_OK);
    cr_assert_not(st.held, "released, not left behind");
    rc = wk_rwlock_try_read(wk_db_processor(acked), &rw, wk_name_str("R"), &b2, &got);
    cr_assert_eq(rc, WK_ENOTREPLICATED, "%s", wk_err_name(rc));
    wk_rwlock_state rs;
    cr_assert_eq(wk_rwlock_inspect(wk_db_processor(acked), &rw, wk_name_str("R"), &rs), WK_OK);
    cr_assert_eq(rs.readers, 0, "the reader lease was released");
    /* The plain handle takes B; only the primary has it. */
    cr_assert_eq(wk_lock_try(wk_db_processor(plain), &lock, wk_name_str("B"), &b, &got), WK_OK);
    cr_assert(got);
    /* The primary dies, the replica resumes and is promoted. */
    redisFree(c);
    wk_test_server_stop(&t.primary);
    kill(t.replica.pid, SIGCONT);
    cr_assert_eq(wk_test_sentinels_failover(&t, 20000), t.replica.port);

    wk_db *db = must_open(&t, 0);
    wk_processor *p = wk_db_processor(db);
    wk_token other;
    cr_assert_eq(wk_lock_try(p, &lock, wk_name_str("A"), &other, &got), WK_OK, "%s",
                 wk_db_errmsg(db));
    cr_assert_not(got, "the acknowledged lease A survived the failover");
    bool released = false;
    cr_assert_eq(wk_lock_release(p, &lock, wk_name_str("A"), &a, &released), WK_OK);
    cr_assert(released, "and its holder's token still holds it");
    cr_assert_eq(wk_rwlock_release_write(p, &rw, wk_name_str("W"), &r, &released), WK_OK);
    cr_assert(released, "the acknowledged writer lease survived too");
    cr_assert_eq(wk_lock_try(p, &lock, wk_name_str("B"), &other, &got), WK_OK);
    cr_assert(got, "the unacknowledged lease B was lost: someone else takes it");
    cr_assert_eq(wk_lock_release(wk_db_processor(plain), &lock, wk_name_str("B"), &b, &released),
                 WK_OK, "%s", wk_db_errmsg(plain));
    cr_assert_not(released, "B's first holder no longer holds it");
    wk_db_close(db);
    wk_db_close(plain);
    wk_db_close(acked);
    wk_test_sentinels_stop(&t);
}

/* A batch's lease is acknowledged too (it was refused with WK_EINVAL
 * before the WAIT rode behind the write): with no replica the queued try
 * is WK_ENOTREPLICATED, not acquired, and its token is the caller's to
 * release; the immediate try gives the lease back itself. */
Test(sentinel, acknowledged_leases_through_a_batch, .timeout = 60)
{
    wk_test_server s;
    cr_assert_eq(wk_test_server_start(&s, NULL), 0);
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = s.url;
    o.capability = wk_cap_read_write();
    o.lease_replicas = 1;
    o.lease_ack_timeout_ms = 50;
    wk_db *db = NULL;
    char err[256];
    cr_assert_eq(wk_db_open(&db, &o, err, sizeof(err)), WK_OK, "%s", err);
    wk_batch *b = NULL;
    cr_assert_eq(wk_batch_open(&b, db), WK_OK);
    wk_entity lock = WK_LOCK_ENTITY(wk_test_ns("batch"), 30000);
    wk_token token;
    bool got = true;
    cr_assert_eq(wk_lock_try(wk_batch_processor(b), &lock, wk_name_str("x"), &token, &got), WK_OK);
    cr_assert_eq(wk_batch_exec(b), WK_ENOTREPLICATED, "%s", wk_db_errmsg(db));
    cr_assert_eq(wk_batch_status(b, 0), WK_ENOTREPLICATED);
    cr_assert_not(got);
    bool released = false;
    cr_assert_eq(wk_lock_release(wk_db_processor(db), &lock, wk_name_str("x"), &token, &released),
                 WK_OK);
    cr_assert(released, "the batch's unacknowledged lease was the caller's to release");
    /* No replica at all: the immediate try is given back. */
    int rc = wk_lock_try(wk_db_processor(db), &lock, wk_name_str("x"), &token, &got);
    cr_assert_eq(rc, WK_ENOTREPLICATED, "%s", wk_db_errmsg(db));
    cr_assert_not(got);
    cr_assert(strstr(wk_db_errmsg(db), "released"), "%s", wk_db_errmsg(db));
    released = true;
    cr_assert_eq(wk_lock_release(wk_db_processor(db), &lock, wk_name_str("x"), &token, &released),
                 WK_OK);
    cr_assert_not(released, "already given back");
    cr_assert_str_eq(wk_err_name(WK_ENOTREPLICATED), "WK_ENOTREPLICATED");
    wk_batch_close(b);
    wk_db_close(db);
    wk_test_server_stop(&s);
}

/* A holder that releases after a while, so the acquire below has to
 * wait and takes the item through the wake-on-release path. */
typedef struct later_release {
    const char *url;
    int kind; /* 0 Lock, 1 RwLock writer, 2 FencedLock, 3 Semaphore of 1 */
    const wk_entity *e;
} later_release;

static void *hold_then_release(void *arg)
{
    later_release *l = arg;
    wk_db *db = wk_test_open_url(l->url, NULL);
    wk_processor *p = wk_db_processor(db);
    wk_token t;
    bool got = false, done = false;
    wk_fenced_lease fl;
    switch (l->kind) {
    case 0:
        cr_assert_eq(wk_lock_try(p, l->e, wk_name_str("w"), &t, &got), WK_OK);
        break;
    case 1:
        cr_assert_eq(wk_rwlock_try_write(p, l->e, wk_name_str("w"), &t, &got), WK_OK);
        break;
    case 2:
        cr_assert_eq(wk_fenced_lock_try(p, l->e, wk_name_str("w"), &fl), WK_OK);
        got = fl.acquired;
        t = fl.token;
        break;
    default:
        cr_assert_eq(wk_semaphore_try(p, l->e, wk_name_str("w"), &t, &got), WK_OK);
    }
    cr_assert(got);
    wk_test_sleep_ms(300);
    switch (l->kind) {
    case 0:
        wk_lock_release(p, l->e, wk_name_str("w"), &t, &done);
        break;
    case 1:
        wk_rwlock_release_write(p, l->e, wk_name_str("w"), &t, &done);
        break;
    case 2:
        wk_fenced_lock_release(p, l->e, wk_name_str("w"), &t, &done);
        break;
    default:
        wk_semaphore_release(p, l->e, wk_name_str("w"), &t, &done);
    }
    wk_db_close(db);
    return NULL;
}

/* lease_replicas covers a lease taken after waiting too: with no replica
 * the waiting acquire of every lease kind is WK_ENOTREPLICATED, not
 * acquired, and the item is free again. */
Test(sentinel, acknowledged_leases_cover_waiting_acquires, .timeout = 60)
{
    wk_test_server s;
    cr_assert_eq(wk_test_server_start(&s, NULL), 0);
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = s.url;
    o.capability = wk_cap_read_write();
    o.lease_replicas = 1;
    o.lease_ack_timeout_ms = 50;
    wk_db *db = NULL;
    char err[256];
    cr_assert_eq(wk_db_open(&db, &o, err, sizeof(err)), WK_OK, "%s", err);
    wk_processor *p = wk_db_processor(db);
    wk_entity lock = WK_LOCK_ENTITY("acked-wait", 30000);
    wk_entity rw = WK_RWLOCK_ENTITY("acked-wait", 30000);
    wk_entity fenced = WK_FENCED_LOCK_ENTITY("acked-wait", 30000);
    wk_entity sem = WK_SEMAPHORE_ENTITY("acked-wait", 1, 30000);
    const wk_entity *es[4] = {&lock, &rw, &fenced, &sem};
    for (int kind = 0; kind < 4; kind++) {
        later_release l = {s.url, kind, es[kind]};
        pthread_t th;
        cr_assert_eq(pthread_create(&th, NULL, hold_then_release, &l), 0);
        wk_test_sleep_ms(100); /* held before the acquire starts */
        int64_t deadline = wk_monotonic_ms() + 20000;
        wk_token t;
        bool got = true;
        wk_fenced_lease fl;
        int rc;
        switch (kind) {
        case 0:
            rc = wk_lock_acquire(p, &lock, wk_name_str("w"), deadline, NULL, &t, &got);
            break;
        case 1:
            rc = wk_rwlock_acquire_write(p, &rw, wk_name_str("w"), deadline, NULL, &t, &got);
            break;
        case 2:
            rc = wk_fenced_lock_acquire(p, &fenced, wk_name_str("w"), deadline, &fl);
            got = fl.acquired;
            break;
        default:
            rc = wk_semaphore_acquire(p, &sem, wk_name_str("w"), deadline, &t, &got);
        }
        pthread_join(th, NULL);
        cr_assert_eq(rc, WK_ENOTREPLICATED, "kind %d: %s (%s)", kind, wk_err_name(rc),
                     wk_db_errmsg(db));
        cr_assert_not(got, "kind %d", kind);
    }
    /* Given back: every item is free. */
    redisContext *raw = wk_test_raw(s.url);
    redisReply *r = wk_test_cmd(raw, "DBSIZE");
    long long left = r->integer;
    freeReplyObject(r);
    r = wk_test_cmd(raw, "KEYS *");
    for (size_t i = 0; i < r->elements; i++)
        cr_assert(strstr(r->element[i]->str, ":fence"), "left held: %s (of %lld keys)",
                  r->element[i]->str, left);
    freeReplyObject(r);
    redisFree(raw);
    wk_db_close(db);
    wk_test_server_stop(&s);
}

/* ------------------------------------------------------------------------
 * A settings follower across a failover
 * ---------------------------------------------------------------------- */

/* The pub/sub clients named `name` on the node at `port` (CLIENT LIST
 * TYPE pubsub). */
static int pubsub_clients_named(const wk_test_sentinels *t, int port, const char *name)
{
    redisContext *c = wk_test_sentinels_raw(t, port);
    cr_assert(c, "raw connection to %d", port);
    redisReply *r = redisCommand(c, "CLIENT LIST TYPE pubsub");
    cr_assert(r && r->type == REDIS_REPLY_STRING, "CLIENT LIST");
    char needle[96];
    snprintf(needle, sizeof(needle), " name=%s ", name);
    int n = 0;
    for (const char *p = r->str; (p = strstr(p, needle)); p++)
        n++;
    freeReplyObject(r);
    redisFree(c);
    return n;
}

/* The follower's subscriber follows the failover: after SENTINEL
 * FAILOVER, a put through a writer handle (which goes to the new
 * primary) reaches the mirror, and later puts arrive as messages on a
 * subscriber connection to the new primary. The periodic check and the
 * keep-alive are off, and the old primary is paused before the sentinels
 * demote it (which would close its pub/sub clients): only the failover
 * notice can move the subscriber. */
Test(sentinel, settings_follower_follows_a_failover, .timeout = 60)
{
    wk_test_sentinels t;
    cr_assert_eq(wk_test_sentinels_start(&t, DATA_PW, SENTINEL_PW), 0);
    wk_db *db = must_open(&t, 0);
    wk_entity settings = WK_SETTINGS_ENTITY(wk_test_ns("fsset"));
    wk_name cfg = wk_name_str("cfg");
    int64_t version = 0;
    cr_assert_eq(wk_settings_put(wk_db_processor(db), &settings, cfg, "k", 1, "v1", 2, &version),
                 WK_OK, "%s", wk_db_errmsg(db));

    wk_settings_follower *f = start_follower(&t, &settings, cfg, 0, 0);
    cr_assert_eq(wk_settings_follower_version(f), version);
    cr_assert_eq(pubsub_clients_named(&t, t.primary.port, "follower-under-test"), 1);

    wait_replica_caught_up(&t);
    int now = wk_test_sentinels_failover(&t, 20000);
    cr_assert_eq(now, t.replica.port, "the replica was promoted");
    /* The old primary answers nothing from now on (longer than the suite
     * runs), so the sentinels cannot reconfigure it nor close its
     * clients. */
    redisContext *old = wk_test_sentinels_raw(&t, t.primary.port);
    cr_assert(old);
    redisReply *r = redisCommand(old, "CLIENT PAUSE 120000 ALL");
    cr_assert(r && r->type == REDIS_REPLY_STATUS, "CLIENT PAUSE");
    freeReplyObject(r);
    redisFree(old);
    int64_t v2 = 0;
    cr_assert_eq(wk_settings_put(wk_db_processor(db), &settings, cfg, "k", 1, "v2", 2, &v2), WK_OK,
                 "%s", wk_db_errmsg(db));
    cr_assert_eq(v2, version + 1);
    /* Bounded by the suite's timeout. */
    while (wk_settings_follower_version(f) < v2)
        wk_test_sleep_ms(10);
    char value[8];
    size_t vlen = 0;
    bool found = false;
    cr_assert_eq(wk_settings_follower_get(f, "k", 1, value, sizeof(value), &vlen, &found), WK_OK);
    cr_assert(found && vlen == 2 && !memcmp(value, "v2", 2));

    wk_settings_stats st;
    cr_assert_eq(wk_settings_follower_stats(f, &st, NULL, 0), WK_OK);
    cr_assert_geq(st.reconnects, 1, "the subscriber was opened again");
    /* Its subscriber is on the new primary now, and the next change comes
     * as a message there (applied, not reloaded). */
    while (pubsub_clients_named(&t, now, "follower-under-test") != 1)
        wk_test_sleep_ms(10);
    uint64_t applied = st.applied;
    int64_t v3 = 0;
    cr_assert_eq(wk_settings_put(wk_db_processor(db), &settings, cfg, "k", 1, "v3", 2, &v3), WK_OK,
                 "%s", wk_db_errmsg(db));
    bool reached = false;
    cr_assert_eq(wk_settings_follower_wait(f, v3, -1, &reached), WK_OK);
    cr_assert(reached);
    cr_assert_eq(wk_settings_follower_stats(f, &st, NULL, 0), WK_OK);
    cr_assert_eq(st.applied, applied + 1, "v3 came as a message");
    cr_log_info("follower across a failover: %llu reconnects, %llu snapshots",
                (unsigned long long)st.reconnects, (unsigned long long)st.snapshots);
    wk_settings_follower_free(f);
    wk_db_close(db);
    wk_test_sentinels_stop(&t);
}
