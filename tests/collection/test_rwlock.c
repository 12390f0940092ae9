/*
 * tests/collection/test_rwlock.c — RwLock: many readers, writer exclusion,
 * crashed readers expiring, reader release outcome.
 */
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "collection/wake.h"
#include "redis_fixture.h"

Test(rwlock, many_concurrent_readers_then_writer)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity rw = WK_RWLOCK_ENTITY(wk_test_ns("rw"), 10000);
    wk_token readers[20], w;
    bool got, ok;
    for (int i = 0; i < 20; i++) {
        cr_assert_eq(wk_rwlock_try_read(p, &rw, wk_name_str("doc"), &readers[i], &got), WK_OK);
        cr_assert(got, "reader %d refused", i);
    }
    wk_rwlock_state st;
    cr_assert_eq(wk_rwlock_inspect(p, &rw, wk_name_str("doc"), &st), WK_OK);
    cr_assert_eq(st.readers, 20);
    cr_assert_not(st.writer_held);
    cr_assert_eq(wk_rwlock_try_write(p, &rw, wk_name_str("doc"), &w, &got), WK_OK);
    cr_assert_not(got, "writer must be refused while readers run");
    for (int i = 0; i < 20; i++) {
        cr_assert_eq(wk_rwlock_release_read(p, &rw, wk_name_str("doc"), &readers[i], &ok), WK_OK);
        cr_assert(ok, "reader %d lease was running", i);
        if (i < 19) {
            cr_assert_eq(wk_rwlock_try_write(p, &rw, wk_name_str("doc"), &w, &got), WK_OK);
            cr_assert_not(got, "writer refused while %d readers remain", 19 - i);
        }
    }
    cr_assert_eq(wk_rwlock_try_write(p, &rw, wk_name_str("doc"), &w, &got), WK_OK);
    cr_assert(got, "writer acquires once all readers left");
    cr_assert_eq(wk_rwlock_try_read(p, &rw, wk_name_str("doc"), &readers[0], &got), WK_OK);
    cr_assert_not(got, "reader refused while a writer holds it");
    cr_assert_eq(wk_rwlock_inspect(p, &rw, wk_name_str("doc"), &st), WK_OK);
    cr_assert(st.writer_held);
    cr_assert(st.writer_ttl_ms > 0);
    cr_assert_eq(wk_rwlock_extend_write(p, &rw, wk_name_str("doc"), &w, &ok), WK_OK);
    cr_assert(ok);
    cr_assert_eq(wk_rwlock_release_write(p, &rw, wk_name_str("doc"), &w, &ok), WK_OK);
    cr_assert(ok);
    cr_assert_eq(wk_rwlock_release_write(p, &rw, wk_name_str("doc"), &w, &ok), WK_OK);
    cr_assert_not(ok);
    cr_assert_eq(wk_rwlock_try_read(p, &rw, wk_name_str("doc"), &readers[0], &got), WK_OK);
    cr_assert(got);
    wk_db_close(db);
}

Test(rwlock, readers_in_many_processes, .timeout = 60)
{
    const char *ns = wk_test_ns("rwproc");
    enum { KIDS = 6 };
    int go[2];
    cr_assert_eq(pipe(go), 0);
    pid_t kids[KIDS];
    for (int i = 0; i < KIDS; i++) {
        kids[i] = fork();
        if (kids[i] == 0) {
            wk_db *db = wk_test_open(NULL);
            wk_entity rw = WK_RWLOCK_ENTITY(ns, 10000);
            wk_token t;
            bool got = false;
            int rc = wk_rwlock_try_read(wk_db_processor(db), &rw, wk_name_str("n"), &t, &got);
            char c = (rc == WK_OK && got) ? 'y' : 'n';
            write(go[1], &c, 1);
            _exit(0); /* crash-like exit: the lease is left to expire */
        }
    }
    int yes = 0;
    for (int i = 0; i < KIDS; i++) {
        char c;
        cr_assert_eq(read(go[0], &c, 1), 1);
        yes += c == 'y';
        waitpid(kids[i], NULL, 0);
    }
    cr_assert_eq(yes, KIDS, "all readers share the lock");
    wk_db *db = wk_test_open(NULL);
    wk_entity rw = WK_RWLOCK_ENTITY(ns, 10000);
    wk_rwlock_state st;
    cr_assert_eq(wk_rwlock_inspect(wk_db_processor(db), &rw, wk_name_str("n"), &st), WK_OK);
    cr_assert_eq(st.readers, KIDS);
    wk_db_close(db);
}

Test(rwlock, crashed_reader_stops_blocking_after_its_lease)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity rw = WK_RWLOCK_ENTITY(wk_test_ns("rwcrash"), 300);
    wk_token r, w;
    bool got, ok;
    cr_assert_eq(wk_rwlock_try_read(p, &rw, wk_name_u64(9), &r, &got), WK_OK);
    cr_assert(got);
    cr_assert_eq(wk_rwlock_try_write(p, &rw, wk_name_u64(9), &w, &got), WK_OK);
    cr_assert_not(got);
    /* The reader "crashes": never releases. */
    wk_test_sleep_ms(450);
    wk_rwlock_state st;
    cr_assert_eq(wk_rwlock_inspect(p, &rw, wk_name_u64(9), &st), WK_OK);
    cr_assert_eq(st.readers, 0, "expired reader no longer counted");
    cr_assert_eq(wk_rwlock_try_write(p, &rw, wk_name_u64(9), &w, &got), WK_OK);
    cr_assert(got, "writer acquires after the reader's lease");
    cr_assert_eq(wk_rwlock_release_read(p, &rw, wk_name_u64(9), &r, &ok), WK_OK);
    cr_assert_not(ok, "the expired reader's release reports its lease was over");
    wk_db_close(db);
}

Test(rwlock, reader_extend_only_renews_running_lease)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity rw = WK_RWLOCK_ENTITY(wk_test_ns("rwext"), 300);
    wk_token r1, r2, w;
    bool got, ok;
    cr_assert_eq(wk_rwlock_try_read(p, &rw, wk_name_str("a"), &r1, &got), WK_OK);
    cr_assert_eq(wk_rwlock_try_read(p, &rw, wk_name_str("a"), &r2, &got), WK_OK);
    for (int i = 0; i < 4; i++) {
        wk_test_sleep_ms(150);
        cr_assert_eq(wk_rwlock_extend_read(p, &rw, wk_name_str("a"), &r1, &ok), WK_OK);
        cr_assert(ok, "running lease renews (round %d)", i);
    }
    /* r2 was never extended: long expired now. */
    cr_assert_eq(wk_rwlock_extend_read(p, &rw, wk_name_str("a"), &r2, &ok), WK_OK);
    cr_assert_not(ok, "an expired reader is not revived");
    cr_assert_eq(wk_rwlock_try_write(p, &rw, wk_name_str("a"), &w, &got), WK_OK);
    cr_assert_not(got, "the extended reader still blocks the writer");
    cr_assert_eq(wk_rwlock_release_read(p, &rw, wk_name_str("a"), &r1, &ok), WK_OK);
    cr_assert(ok);
    cr_assert_eq(wk_rwlock_try_write(p, &rw, wk_name_str("a"), &w, &got), WK_OK);
    cr_assert(got);
    wk_db_close(db);
}

Test(rwlock, keys_share_a_slot_and_expire)
{
    wk_db *db = wk_test_open(NULL);
    wk_entity rw = WK_RWLOCK_ENTITY(wk_test_ns("rwkeys"), 5000);
    wk_token r;
    bool got;
    cr_assert_eq(wk_rwlock_try_read(wk_db_processor(db), &rw, wk_name_str("k"), &r, &got), WK_OK);
    redisContext *raw = wk_test_raw(wk_test_url());
    char key[256];
    snprintf(key, sizeof(key), "@@wakuwaku-entity:RwLock:{%s:k}:r", rw.ns);
    redisReply *rep = wk_test_cmd(raw, "TYPE %s", key);
    cr_assert_str_eq(rep->str, "zset");
    freeReplyObject(rep);
    rep = wk_test_cmd(raw, "PTTL %s", key);
    cr_assert(rep->integer > 0 && rep->integer <= 5000, "reader set expires: %lld", rep->integer);
    freeReplyObject(rep);
    redisFree(raw);
    wk_db_close(db);
}

/* A refusal of a missing argument names the argument the call takes:
 * inspect and force_release take no token. */
Test(rwlock, a_refusal_names_the_missing_argument)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity rw = WK_RWLOCK_ENTITY(wk_test_ns("rw"), 10000);
    bool b;
    cr_assert_eq(wk_rwlock_release_read(p, &rw, wk_name_str("doc"), NULL, &b), WK_EINVAL);
    cr_assert_str_eq(wk_db_errmsg(db), "rwlock.release_read: token and outcome are required");
    cr_assert_eq(wk_rwlock_inspect(p, &rw, wk_name_str("doc"), NULL), WK_EINVAL);
    cr_assert_str_eq(wk_db_errmsg(db), "rwlock.inspect: state is required");
    cr_assert_eq(wk_rwlock_force_release(p, &rw, wk_name_str("doc"), NULL), WK_EINVAL);
    cr_assert_str_eq(wk_db_errmsg(db), "rwlock.force_release: was_held is required");
    wk_db_close(db);
}

/* A waiting acquire in a thread of its own (its own handle). */
typedef struct rw_waiter {
    const wk_entity *e;
    const char *name;
    bool writer;
    int rc;
    bool got;
    wk_token t;
    int64_t at; /* when it returned */
} rw_waiter;

static void *rw_wait(void *arg)
{
    rw_waiter *w = arg;
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = wk_test_url();
    o.capability = wk_cap_read_write();
    wk_db *db = NULL;
    w->rc = wk_db_open(&db, &o, NULL, 0);
    if (w->rc == WK_OK) {
        wk_processor *p = wk_db_processor(db);
        wk_name n = wk_name_str(w->name);
        int64_t deadline = wk_deadline_in(20000);
        w->rc = w->writer ? wk_rwlock_acquire_write(p, w->e, n, deadline, NULL, &w->t, &w->got)
                          : wk_rwlock_acquire_read(p, w->e, n, deadline, NULL, &w->t, &w->got);
    }
    w->at = wk_monotonic_ms();
    wk_db_close(db);
    return NULL;
}

/* A reader's release by a token that reads nothing — a lease that ran
 * out, or the token of an acquire that ended WK_EUNKNOWN without one,
 * which the caller releases as told — while a writer holds and others
 * wait: it hands nothing. (It once handed the readers at the head read
 * leases beside the writer, and a waiting writer the holder's writer
 * key; found by tests/guarantees/test_liveness.c.) */
static void release_read_beside_a_writer(bool waiters_write)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity rw = WK_RWLOCK_ENTITY(wk_test_ns("rw-stranger"), 30000);
    const char *name = "doc";
    wk_name n = wk_name_str(name);
    char key[WK_KEY_MAX];
    size_t len;
    cr_assert_eq(wk_key_build(key, sizeof(key), &len, &rw, &n, ":w"), WK_OK);
    wk_token held, stranger;
    bool got = false, ok = true;
    cr_assert_eq(wk_rwlock_try_write(p, &rw, n, &held, &got), WK_OK);
    cr_assert(got);
    wk__wake_keys k;
    cr_assert_eq(wk__wake_keys_build(&k, key, len), WK_OK);
    rw_waiter w[2] = {{.e = &rw, .name = name, .writer = waiters_write},
                      {.e = &rw, .name = name, .writer = waiters_write}};
    pthread_t th[2];
    redisContext *raw = wk_test_raw(wk_test_url());
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(pthread_create(&th[i], NULL, rw_wait, &w[i]), 0);
        for (long long q = 0; q <= i;) { /* until it is queued */
            redisReply *r = wk_test_cmd(raw, "ZCARD %b", k.q, k.q_len);
            q = r->integer;
            freeReplyObject(r);
            if (q <= i)
                wk_test_sleep_ms(5);
        }
    }
    wk_token_random(&stranger);
    cr_assert_eq(wk_rwlock_release_read(p, &rw, n, &stranger, &ok), WK_OK);
    cr_assert_not(ok, "the stranger read nothing");
    wk_lease_state st;
    cr_assert_eq(wk_rwlock_owned_write(p, &rw, n, &held, &st), WK_OK);
    cr_assert(st.owned, "the writer still holds its lease");
    wk_rwlock_state is;
    cr_assert_eq(wk_rwlock_inspect(p, &rw, n, &is), WK_OK);
    cr_assert_eq(is.readers, 0, "no reader beside the writer (%lld)", (long long)is.readers);
    wk_test_sleep_ms(100); /* a waiter handed anything would return now */
    int64_t released = wk_monotonic_ms();
    cr_assert_eq(wk_rwlock_release_write(p, &rw, n, &held, &ok), WK_OK);
    cr_assert(ok);
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        cr_assert_eq(w[i].rc, WK_OK);
        if (w[i].got)
            cr_assert_geq(w[i].at, released, "waiter %d got it before the writer's release", i);
    }
    cr_assert(w[0].got || w[1].got, "the writer's release hands it on");
    redisFree(raw);
    wk_db_close(db);
}

Test(rwlock, a_reader_release_by_a_token_that_reads_nothing_hands_nothing_beside_a_writer,
     .timeout = 60)
{
    release_read_beside_a_writer(false); /* readers wait */
    release_read_beside_a_writer(true);  /* writers wait */
}
