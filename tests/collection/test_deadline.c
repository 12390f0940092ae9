/*
 * tests/collection/test_deadline.c — acquire with a deadline (Lock and
 * RwLock read/write) against a real redis-server: never gives up before
 * the deadline, never sleeps much past it, acquires soon after a release,
 * refuses batches, stops at the first error, and keeps exclusion when
 * several processes wait for the same lock.
 *
 * Capability table: these helpers add no Redis query of their own; every
 * try is lock.try / rwlock.try_read / rwlock.try_write, whose rows are
 * already in tests/capability (the read-only refusal is checked here too).
 */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <wakuwaku/deadline.h>

#include "redis_fixture.h"

/* One timeout for the whole suite: criterion's runner leaks (LeakSanitizer)
 * when tests with different timeouts run side by side. */
TestSuite(deadline, .timeout = 120);

/* Wake-up latency allowed past a deadline, and after a release beyond the
 * backoff cap. Generous: the machine is small and shared; the bugs these
 * catch (sleeping a whole backoff of up to 2 s past the deadline, waiting
 * for the deadline instead of retrying) are far larger. */
#define MARGIN_MS 150

Test(deadline, lock_times_out_at_the_deadline_not_before_nor_much_after)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity lock = WK_LOCK_ENTITY(wk_test_ns("dl"), 30000);
    wk_token held, t;
    bool got;
    cr_assert_eq(wk_lock_try(p, &lock, wk_name_str("x"), &held, &got), WK_OK);
    cr_assert(got);

    /* A large cap: a sleep that ignored the deadline would overshoot by up
     * to two seconds. */
    wk_backoff wide = {.initial_ms = 5, .max_ms = 2000};
    const int timeouts[] = {1, 50, 130, 270, 400, 610, 900};
    for (size_t i = 0; i < sizeof(timeouts) / sizeof(timeouts[0]); i++) {
        for (int b = 0; b < 2; b++) {
            int64_t deadline = wk_deadline_in(timeouts[i]);
            got = true;
            int rc = wk_lock_acquire(p, &lock, wk_name_str("x"), deadline, b ? &wide : NULL, &t,
                                     &got);
            int64_t end = wk_monotonic_ms();
            cr_assert_eq(rc, WK_OK, "%s: %s", wk_err_name(rc), wk_db_errmsg(db));
            cr_assert_not(got, "a held lock was acquired");
            cr_assert_geq(end, deadline, "gave up %lld ms before the deadline",
                          (long long)(deadline - end));
            cr_assert_leq(end - deadline, MARGIN_MS, "returned %lld ms after the deadline",
                          (long long)(end - deadline));
        }
    }
    wk_db_close(db);
}

Test(deadline, past_deadline_makes_exactly_one_try)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity lock = WK_LOCK_ENTITY(wk_test_ns("dlpast"), 30000);
    wk_token t1, t2;
    bool got = false;
    cr_assert_eq(wk_lock_acquire(p, &lock, wk_name_str("x"), wk_deadline_in(-5), NULL, &t1, &got),
                 WK_OK);
    cr_assert(got, "a free lock is taken even with a deadline already past");
    int64_t t0 = wk_monotonic_ms();
    cr_assert_eq(wk_lock_acquire(p, &lock, wk_name_str("x"), t0 - 1000, NULL, &t2, &got), WK_OK);
    cr_assert_not(got);
    cr_assert_lt(wk_monotonic_ms() - t0, 1000, "a past deadline must not wait");
    bool released;
    cr_assert_eq(wk_lock_release(p, &lock, wk_name_str("x"), &t1, &released), WK_OK);
    cr_assert(released, "the token from wk_lock_acquire holds the lock");
    wk_db_close(db);
}

/* ---- a holder on another thread (own handle) releasing after a while */

typedef struct holder {
    const char *ns;
    int kind; /* 0 lock, 1 rwlock writer, 2 rwlock reader */
    int hold_ms;
    int64_t before_release, after_release;
    bool ok;
    int ready[2];
} holder;

static void *holder_main(void *arg)
{
    holder *h = arg;
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = wk_test_url();
    o.capability = wk_cap_read_write();
    wk_db *db;
    char c = 'n';
    if (wk_db_open(&db, &o, NULL, 0) != WK_OK) {
        (void)!write(h->ready[1], &c, 1);
        return NULL;
    }
    wk_processor *p = wk_db_processor(db);
    wk_entity lock = WK_LOCK_ENTITY(h->ns, 30000);
    wk_entity rw = WK_RWLOCK_ENTITY(h->ns, 30000);
    wk_token t;
    bool got = false, released = false;
    if (h->kind == 0)
        wk_lock_try(p, &lock, wk_name_str("x"), &t, &got);
    else if (h->kind == 1)
        wk_rwlock_try_write(p, &rw, wk_name_str("x"), &t, &got);
    else
        wk_rwlock_try_read(p, &rw, wk_name_str("x"), &t, &got);
    c = got ? 'y' : 'n';
    (void)!write(h->ready[1], &c, 1);
    wk_test_sleep_ms(h->hold_ms);
    h->before_release = wk_monotonic_ms();
    if (h->kind == 0)
        wk_lock_release(p, &lock, wk_name_str("x"), &t, &released);
    else if (h->kind == 1)
        wk_rwlock_release_write(p, &rw, wk_name_str("x"), &t, &released);
    else
        wk_rwlock_release_read(p, &rw, wk_name_str("x"), &t, &released);
    h->after_release = wk_monotonic_ms();
    h->ok = got && released;
    wk_db_close(db);
    return NULL;
}

/* kind of holder vs waiter: 0 lock/lock, 1 writer/read, 2 reader/write */
static void acquires_soon_after_release(int kind)
{
    holder h = {.ns = wk_test_ns("dlrel"), .kind = kind, .hold_ms = 600};
    cr_assert_eq(pipe(h.ready), 0);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, holder_main, &h), 0);
    char c = 0;
    cr_assert_eq(read(h.ready[0], &c, 1), 1);
    cr_assert_eq(c, 'y', "holder could not take the lock");

    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity lock = WK_LOCK_ENTITY(h.ns, 30000);
    wk_entity rw = WK_RWLOCK_ENTITY(h.ns, 30000);
    wk_token t;
    bool got = false;
    int64_t deadline = wk_deadline_in(20000);
    int rc = kind == 0   ? wk_lock_acquire(p, &lock, wk_name_str("x"), deadline, NULL, &t, &got)
             : kind == 1 ? wk_rwlock_acquire_read(p, &rw, wk_name_str("x"), deadline, NULL, &t, &got)
                         : wk_rwlock_acquire_write(p, &rw, wk_name_str("x"), deadline, NULL, &t,
                                                   &got);
    int64_t end = wk_monotonic_ms();
    pthread_join(th, NULL);
    cr_assert_eq(rc, WK_OK, "%s: %s", wk_err_name(rc), wk_db_errmsg(db));
    cr_assert(h.ok, "holder failed");
    cr_assert(got, "not acquired although released long before the deadline");
    cr_assert_geq(end, h.before_release, "acquired before the holder released");
    /* The next try comes at most one backoff cap (200 ms) after the release. */
    cr_assert_leq(end - h.after_release, 200 + MARGIN_MS, "acquired %lld ms after the release",
                  (long long)(end - h.after_release));
    wk_db_close(db);
}

Test(deadline, lock_acquired_soon_after_release)
{
    acquires_soon_after_release(0);
}

Test(deadline, rwlock_read_acquired_soon_after_writer_releases)
{
    acquires_soon_after_release(1);
}

Test(deadline, rwlock_write_acquired_soon_after_reader_releases)
{
    acquires_soon_after_release(2);
}

Test(deadline, rwlock_read_and_write_time_out)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity rw = WK_RWLOCK_ENTITY(wk_test_ns("dlrw"), 30000);
    wk_token w, r1, r2, t;
    bool got;
    /* A writer holds "a": readers time out. */
    cr_assert_eq(wk_rwlock_try_write(p, &rw, wk_name_str("a"), &w, &got), WK_OK);
    cr_assert(got);
    int64_t deadline = wk_deadline_in(300);
    int rc = wk_rwlock_acquire_read(p, &rw, wk_name_str("a"), deadline, NULL, &t, &got);
    cr_assert_eq(rc, WK_OK, "%s: %s", wk_err_name(rc), wk_db_errmsg(db));
    cr_assert_not(got);
    cr_assert_geq(wk_monotonic_ms(), deadline);
    /* A reader holds "b": another reader gets in at once, a writer times out. */
    cr_assert_eq(wk_rwlock_try_read(p, &rw, wk_name_str("b"), &r1, &got), WK_OK);
    cr_assert(got);
    cr_assert_eq(wk_rwlock_acquire_read(p, &rw, wk_name_str("b"), wk_deadline_in(5000), NULL,
                                        &r2, &got),
                 WK_OK);
    cr_assert(got, "readers share");
    deadline = wk_deadline_in(300);
    rc = wk_rwlock_acquire_write(p, &rw, wk_name_str("b"), deadline, NULL, &t, &got);
    int64_t end = wk_monotonic_ms();
    cr_assert_eq(rc, WK_OK, "%s: %s", wk_err_name(rc), wk_db_errmsg(db));
    cr_assert_not(got, "a writer got in while readers hold the lock");
    cr_assert_geq(end, deadline);
    cr_assert_leq(end - deadline, MARGIN_MS);
    wk_db_close(db);
}

Test(deadline, refuses_a_batch_and_bad_arguments)
{
    wk_db *db = wk_test_open(NULL);
    wk_entity lock = WK_LOCK_ENTITY(wk_test_ns("dlinv"), 1000);
    wk_entity rw = WK_RWLOCK_ENTITY(wk_test_ns("dlinv"), 1000);
    wk_token t;
    bool got = true;
    wk_batch *b;
    cr_assert_eq(wk_batch_open(&b, db), WK_OK);
    wk_processor *bp = wk_batch_processor(b);
    int64_t d = wk_deadline_in(1000);
    cr_assert_eq(wk_lock_acquire(bp, &lock, wk_name_str("x"), d, NULL, &t, &got), WK_EINVAL);
    cr_assert_not(got);
    cr_assert_eq(wk_rwlock_acquire_read(bp, &rw, wk_name_str("x"), d, NULL, &t, &got), WK_EINVAL);
    cr_assert_eq(wk_rwlock_acquire_write(bp, &rw, wk_name_str("x"), d, NULL, &t, &got),
                 WK_EINVAL);
    cr_assert_eq(wk_batch_count(b), 0, "nothing may be queued");
    cr_assert(strstr(wk_db_errmsg(db), "cannot wait through a batch") != NULL, "message: %s", wk_db_errmsg(db));
    wk_batch_close(b);

    wk_processor *p = wk_db_processor(db);
    wk_backoff bad = {.initial_ms = 0, .max_ms = 10};
    cr_assert_eq(wk_lock_acquire(p, &lock, wk_name_str("x"), d, &bad, &t, &got), WK_EINVAL);
    bad = (wk_backoff){.initial_ms = 50, .max_ms = 10};
    cr_assert_eq(wk_lock_acquire(p, &lock, wk_name_str("x"), d, &bad, &t, &got), WK_EINVAL);
    cr_assert_eq(wk_lock_acquire(p, &lock, wk_name_str("x"), d, NULL, NULL, &got), WK_EINVAL);
    cr_assert_eq(wk_lock_acquire(p, &lock, wk_name_str("x"), d, NULL, &t, NULL), WK_EINVAL);
    cr_assert_eq(wk_lock_acquire(NULL, &lock, wk_name_str("x"), d, NULL, &t, &got), WK_EINVAL);
    cr_assert_eq(wk_lock_acquire(p, &rw, wk_name_str("x"), d, NULL, &t, &got), WK_EINVAL,
                 "an RwLock entity is not a Lock");
    cr_assert_eq(wk_lock_acquire(p, &lock, wk_name_str(NULL), d, NULL, &t, &got), WK_EINVAL);
    wk_db_close(db);
}

Test(deadline, an_error_ends_the_wait_at_once_and_sends_nothing_when_denied)
{
    wk_db *ro = wk_test_open(wk_cap_read_only());
    wk_entity lock = WK_LOCK_ENTITY(wk_test_ns("dlro"), 1000);
    wk_entity rw = WK_RWLOCK_ENTITY(wk_test_ns("dlro"), 1000);
    wk_token t;
    bool got = true;
    redisContext *raw = wk_test_raw(wk_test_url());
    int64_t t0 = wk_monotonic_ms();
    cr_assert_eq(wk_lock_acquire(wk_db_processor(ro), &lock, wk_name_str("x"),
                                 wk_deadline_in(10000), NULL, &t, &got),
                 WK_EDENIED);
    cr_assert_eq(wk_rwlock_acquire_read(wk_db_processor(ro), &rw, wk_name_str("x"),
                                        wk_deadline_in(10000), NULL, &t, &got),
                 WK_EDENIED);
    cr_assert_eq(wk_rwlock_acquire_write(wk_db_processor(ro), &rw, wk_name_str("x"),
                                         wk_deadline_in(10000), NULL, &t, &got),
                 WK_EDENIED);
    cr_assert_lt(wk_monotonic_ms() - t0, 5000, "a refusal must not wait for the deadline");
    cr_assert_not(got);
    cr_assert(strstr(wk_db_errmsg(ro), "may not WRITE") != NULL, "%s", wk_db_errmsg(ro));
    /* Other suites run in parallel on the shared server, so only this
     * suite's own names are checked: nothing was stored. */
    redisReply *r = wk_test_cmd(raw, "EXISTS @@wakuwaku-entity:Lock:%s:x", lock.ns);
    cr_assert_eq(r->integer, 0);
    freeReplyObject(r);
    redisFree(raw);

    /* A dead server: the connection error comes back, not a time-out. */
    wk_test_server s;
    cr_assert_eq(wk_test_server_start(&s, NULL), 0);
    wk_db *db = wk_test_open_url(s.url, NULL);
    wk_test_server_stop(&s);
    t0 = wk_monotonic_ms();
    int rc = wk_lock_acquire(wk_db_processor(db), &lock, wk_name_str("x"), wk_deadline_in(10000),
                             NULL, &t, &got);
    cr_assert(wk_is_connection_error(rc), "got %s", wk_err_name(rc));
    cr_assert_lt(wk_monotonic_ms() - t0, 5000, "a connection error must not wait for the deadline");
    wk_db_close(db);
    wk_db_close(ro);
}

/* ---- a try whose reply is lost: the token that may hold the lock is left */

/* kind: 0 lock, 1 rwlock writer, 2 rwlock reader */
static int acquire_kind(wk_processor *p, int kind, const char *ns, int64_t deadline, wk_token *t,
                        bool *got)
{
    wk_entity lock = WK_LOCK_ENTITY(ns, 30000);
    wk_entity rw = WK_RWLOCK_ENTITY(ns, 30000);
    return kind == 0   ? wk_lock_acquire(p, &lock, wk_name_str("x"), deadline, NULL, t, got)
           : kind == 1 ? wk_rwlock_acquire_write(p, &rw, wk_name_str("x"), deadline, NULL, t, got)
                       : wk_rwlock_acquire_read(p, &rw, wk_name_str("x"), deadline, NULL, t, got);
}

static int release_kind(wk_processor *p, int kind, const char *ns, const wk_token *t,
                        bool *released)
{
    wk_entity lock = WK_LOCK_ENTITY(ns, 30000);
    wk_entity rw = WK_RWLOCK_ENTITY(ns, 30000);
    return kind == 0   ? wk_lock_release(p, &lock, wk_name_str("x"), t, released)
           : kind == 1 ? wk_rwlock_release_write(p, &rw, wk_name_str("x"), t, released)
                       : wk_rwlock_release_read(p, &rw, wk_name_str("x"), t, released);
}

/* A private server (the test stops it) and a handle on it. */
static wk_db *open_private(wk_test_server *s, int command_timeout_ms)
{
    cr_assert_eq(wk_test_server_start(s, NULL), 0);
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = s->url;
    o.capability = wk_cap_read_write();
    o.command_timeout_ms = command_timeout_ms;
    wk_db *db;
    cr_assert_eq(wk_db_open(&db, &o, NULL, 0), WK_OK);
    return db;
}

Test(deadline, lost_reply_leaves_the_token_that_may_hold_the_lock)
{
    /* A private server, stopped (SIGSTOP) while a try is in flight: the
     * write reaches its socket, the reply does not come within the command
     * timeout. Once it runs again the server applies the write, so the
     * lock IS held — by the token the call left in its OUT parameter. */
    wk_test_server s;
    wk_db *db = open_private(&s, 300);
    wk_processor *p = wk_db_processor(db);
    for (int kind = 0; kind < 3; kind++) {
        /* Load the kind's script first (EVALSHA would find it missing on
         * the server, and the retry with the script's text would never be
         * sent): the lost try then surely runs once the server resumes. */
        const char *warm = wk_test_ns("dlwarm");
        wk_token t;
        bool got = false, released = false;
        cr_assert_eq(acquire_kind(p, kind, warm, wk_deadline_in(5000), &t, &got), WK_OK);
        cr_assert(got);
        cr_assert_eq(release_kind(p, kind, warm, &t, &released), WK_OK);
        const char *ns = wk_test_ns("dllost");
        memset(&t, 0, sizeof(t));
        got = true;
        cr_assert_eq(kill(s.pid, SIGSTOP), 0);
        int rc = acquire_kind(p, kind, ns, wk_deadline_in(5000), &t, &got);
        cr_assert_eq(kill(s.pid, SIGCONT), 0);
        /* WK_EUNKNOWN: the outcome of a write whose reply did not arrive. */
        cr_assert_eq(rc, WK_EUNKNOWN, "kind %d: got %s", kind, wk_err_name(rc));
        cr_assert_not(got, "kind %d: an unknown outcome is not an acquisition", kind);
        /* The connection is back: the token releases what the lost try
         * took (the server ran the write after SIGCONT). */
        released = false;
        for (int i = 0; i < 50 && !released; i++) {
            rc = release_kind(p, kind, ns, &t, &released);
            if (rc != WK_OK || !released)
                wk_test_sleep_ms(20);
        }
        cr_assert_eq(rc, WK_OK, "kind %d: release: %s", kind, wk_err_name(rc));
        cr_assert(released, "kind %d: the OUT token does not hold the lock the lost try took",
                  kind);
    }
    wk_db_close(db);
    wk_test_server_stop(&s);
}

/* ---- a machine too slow to end the wait in time */

/* In a child: stop the server at D-100 ms, this test's process at D-50,
 * resume the process at D+100 (past the acquire's end, D+25) and the
 * server at D+150; start_ms is when the child was forked, D = start_ms +
 * wait_ms. */
static void stall_around_the_deadline(pid_t server, pid_t test, int wait_ms)
{
    const struct {
        int at_ms;
        pid_t who;
        int sig;
    } steps[] = {{wait_ms - 100, server, SIGSTOP},
                 {wait_ms - 50, test, SIGSTOP},
                 {wait_ms + 100, test, SIGCONT},
                 {wait_ms + 150, server, SIGCONT}};
    int64_t start = wk_monotonic_ms();
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        int64_t left = start + steps[i].at_ms - wk_monotonic_ms();
        if (left > 0)
            wk_test_sleep_ms((int)left);
        kill(steps[i].who, steps[i].sig);
    }
}

Test(deadline, a_pop_cut_at_the_deadline_of_a_stalled_process_is_followed_by_its_attempt)
{
    /* The wake-up pop is cut by the deadline (the server's own timeout
     * fires up to a timer tick late), so it may have taken a handed-over
     * lock: only an attempt says whose the lock is. Here the process is
     * stopped across the deadline and resumes past the acquire's end (the
     * server, stopped too, cannot answer the pop before the cut). The
     * acquire used to give up with WK_EUNKNOWN ("a wake-up pop's reply was
     * lost and no attempt could follow"); the attempt now comes anyway and
     * says the lock is still the holder's. */
    wk_test_server s;
    wk_db *db = open_private(&s, 3000);
    wk_processor *p = wk_db_processor(db);
    const int wait_ms = 500;
    for (int kind = 0; kind < 3; kind++) {
        const char *ns = wk_test_ns("dlstall");
        wk_token held, t;
        bool got = false;
        /* The holder: a writer for both RwLock kinds. */
        cr_assert_eq(acquire_kind(p, kind ? 1 : 0, ns, wk_deadline_in(1000), &held, &got), WK_OK);
        cr_assert(got);
        int64_t deadline = wk_deadline_in(wait_ms);
        pid_t test = getpid();
        pid_t child = fork();
        cr_assert_geq(child, 0);
        if (child == 0) {
            stall_around_the_deadline(s.pid, test, wait_ms);
            _exit(0);
        }
        got = true;
        int rc = acquire_kind(p, kind, ns, deadline, &t, &got);
        int status;
        cr_assert_eq(waitpid(child, &status, 0), child);
        kill(s.pid, SIGCONT); /* whatever happened, the server runs again */
        cr_assert_eq(rc, WK_OK, "kind %d: %s: %s", kind, wk_err_name(rc), wk_db_errmsg(db));
        cr_assert_not(got, "kind %d: the held lock was acquired", kind);
        cr_assert_geq(wk_monotonic_ms(), deadline, "kind %d: gave up before the deadline", kind);
        bool released = false;
        cr_assert_eq(release_kind(p, kind ? 1 : 0, ns, &held, &released), WK_OK);
        cr_assert(released, "kind %d: the holder lost the lock", kind);
    }
    wk_db_close(db);
    wk_test_server_stop(&s);
}

/* ---- a wait that times out keeps its connection */

/* A release of `t` from a handle of its own, 100 ms from now. */
typedef struct late_release {
    const char *url, *ns;
    int kind;
    wk_token t;
    bool released;
} late_release;

static void *release_later(void *arg)
{
    late_release *r = arg;
    wk_test_sleep_ms(100);
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = r->url;
    o.capability = wk_cap_read_write();
    wk_db *db = NULL;
    if (wk_db_open(&db, &o, NULL, 0) == WK_OK)
        release_kind(wk_db_processor(db), r->kind, r->ns, &r->t, &r->released);
    wk_db_close(db);
    return NULL;
}

Test(deadline, waits_that_time_out_keep_their_blocking_connection)
{
    /* The server's own BLPOP timeout fires up to a timer tick (100 ms)
     * late, so the deadline ends nearly every wait that times out. It used
     * to cut the pop, dropping the blocking connection: every acquire that
     * timed out opened a new one (8 here, and over TLS 8 handshakes). The
     * pop is now abandoned, its late reply dropped when it comes, and the
     * next wait goes on the same connection. */
    wk_test_server s;
    wk_db *db = open_private(&s, 2000);
    wk_processor *p = wk_db_processor(db);
    redisContext *raw = wk_test_raw(s.url);
    for (int kind = 0; kind < 3; kind++) {
        const char *ns = wk_test_ns("dlkeep");
        wk_token held, t;
        bool got = false;
        cr_assert_eq(acquire_kind(p, kind ? 1 : 0, ns, wk_deadline_in(1000), &held, &got), WK_OK);
        cr_assert(got);
        long long before = wk_test_info(raw, "stats", "total_connections_received");
        for (int i = 0; i < 8; i++) {
            got = true;
            int rc = acquire_kind(p, kind, ns, wk_deadline_in(60), &t, &got);
            cr_assert_eq(rc, WK_OK, "kind %d, wait %d: %s: %s", kind, i, wk_err_name(rc),
                         wk_db_errmsg(db));
            cr_assert_not(got);
            /* Past the server's late timeout: the abandoned pop's reply
             * has come (a wait right behind would take a new connection
             * rather than queue behind a pop still blocked). */
            wk_test_sleep_ms(150);
        }
        long long opened = wk_test_info(raw, "stats", "total_connections_received") - before;
        /* At most the first wait's (the handle's blocking connection is
         * opened once, by the first wait of the first kind). */
        cr_assert_leq(opened, kind == 0 ? 1 : 0, "kind %d: 8 timed-out waits opened %lld connections",
                      kind, opened);
        /* The connection kept serves a wait that is woken: the holder's
         * release, from another handle while the waiter sleeps, hands the
         * lease over through it. */
        late_release r = {.url = s.url, .kind = kind ? 1 : 0, .ns = ns, .t = held};
        pthread_t th;
        cr_assert_eq(pthread_create(&th, NULL, release_later, &r), 0);
        got = false;
        int rc = acquire_kind(p, kind, ns, wk_deadline_in(5000), &t, &got);
        pthread_join(th, NULL);
        cr_assert_eq(rc, WK_OK, "kind %d: %s", kind, wk_err_name(rc));
        cr_assert(r.released && got, "kind %d: not woken by the release", kind);
        cr_assert_eq(wk_test_info(raw, "stats", "total_connections_received") - before - opened, 1,
                     "kind %d: only the releaser's handle connects", kind);
        bool released = false;
        cr_assert_eq(release_kind(p, kind, ns, &t, &released), WK_OK);
    }
    redisFree(raw);
    wk_db_close(db);
    wk_test_server_stop(&s);
}

/* ---- deadlines far away saturate instead of overflowing */

Test(deadline, huge_timeouts_saturate)
{
    int64_t now = wk_monotonic_ms();
    /* now + INT64_MAX overflowed: undefined behaviour (the ASan+UBSan
     * build halts), a deadline in the past elsewhere. */
    cr_assert_eq(wk_deadline_in(INT64_MAX), INT64_MAX);
    cr_assert_geq(wk_deadline_in(INT64_MAX - 5), now);
    cr_assert_leq(wk_deadline_in(INT64_MIN), now, "a negative timeout is a deadline past");
    cr_assert_geq(wk_deadline_in(0), now);
    /* A far deadline still acquires a free lock at once. */
    wk_db *db = wk_test_open(NULL);
    wk_token t;
    bool got = false;
    cr_assert_eq(acquire_kind(wk_db_processor(db), 0, wk_test_ns("dlhuge"),
                              wk_deadline_in(INT64_MAX), &t, &got),
                 WK_OK);
    cr_assert(got);
    wk_db_close(db);
}

/* ---- several processes waiting for one lock: each gets it in turn */

#define PROCS 4
#define ROUNDS 15

static int waiter(const char *ns)
{
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = wk_test_url();
    o.capability = wk_cap_read_write();
    wk_db *db;
    if (wk_db_open(&db, &o, NULL, 0) != WK_OK)
        return 2;
    redisContext *raw = wk_test_raw(wk_test_url());
    wk_entity lock = WK_LOCK_ENTITY(ns, 10000);
    for (int i = 0; i < ROUNDS; i++) {
        wk_token t;
        bool got = false, released = false;
        int rc = wk_lock_acquire(wk_db_processor(db), &lock, wk_name_str("hot"),
                                 wk_deadline_in(30000), NULL, &t, &got);
        if (rc != WK_OK)
            return 3;
        if (!got)
            return 4;
        /* Read, hold a while, write: only the lock keeps updates. */
        redisReply *r = redisCommand(raw, "GET %s:counter", ns);
        long v = r->type == REDIS_REPLY_STRING ? atol(r->str) : 0;
        freeReplyObject(r);
        usleep(5000);
        freeReplyObject(redisCommand(raw, "SET %s:counter %ld", ns, v + 1));
        if (wk_lock_release(wk_db_processor(db), &lock, wk_name_str("hot"), &t, &released) !=
                WK_OK ||
            !released)
            return 5;
    }
    redisFree(raw);
    wk_db_close(db);
    return 0;
}

Test(deadline, processes_waiting_for_one_lock_take_turns)
{
    const char *ns = wk_test_ns("dlproc");
    pid_t kids[PROCS];
    for (int i = 0; i < PROCS; i++) {
        kids[i] = fork();
        cr_assert_geq(kids[i], 0);
        if (kids[i] == 0)
            _exit(waiter(ns));
    }
    for (int i = 0; i < PROCS; i++) {
        int status;
        waitpid(kids[i], &status, 0);
        cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "waiter %d failed (%d)", i,
                  status);
    }
    redisContext *raw = wk_test_raw(wk_test_url());
    redisReply *r = wk_test_cmd(raw, "GET %s:counter", ns);
    cr_assert_eq(r->type, REDIS_REPLY_STRING);
    cr_assert_eq(atol(r->str), PROCS * ROUNDS, "lost updates: %s of %d", r->str, PROCS * ROUNDS);
    freeReplyObject(r);
    redisFree(raw);
}
