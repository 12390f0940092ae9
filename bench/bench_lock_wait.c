/*
 * bench/bench_lock_wait.c — how fast a waiting acquire gets a lock once
 * its holder releases it, and what waiting costs the server, on a
 * redis-server this program starts (or --url).
 *
 *   bench_lock_wait                  # 2 and 8 waiters, unfair and fair
 *   bench_lock_wait --handoffs 400   # handoffs measured per case
 *
 * Cases: W waiters plus one holder, W + 1 threads with a handle each, all
 * looping on one Lock name: wk_lock_acquire (deadline 10 s), hold
 * --hold-ms (default 20), release, then outside until another thread
 * has taken it (so every release is a handoff to a waiter). A *handoff* is an acquire that started
 * before the release it waited for; its latency runs from just before that release call to the
 * acquire's return, so it includes the release's own trip to the server. Printed next to the round
 * trip (PING) measured in the same run, as p50 and p99 in µs and in round trips.
 *
 * Load: the commands the acquires sent per handoff — every query through
 * the contenders' processors (counted by a wrapper processor) except the
 * releases, plus the server's BLPOP calls (INFO commandstats; BLPOP runs
 * on the handles' blocking connections, beside the processor) — and that
 * per waiter. The acquire that succeeds is included.
 *
 * Through the event loop: one waiter's handoff latency with
 * wk_lock_acquire through an event-loop handle (wakuwaku/async.h) beside
 * the same through a blocking handle, runs alternating.
 *
 * Uncontended: wk_lock_acquire+release against wk_lock_try+release on a
 * free lock, alternating, commands per cycle and the time ratio.
 *
 * The floor, also in the same run: raw hiredis RPUSH while another thread
 * is blocked in BLPOP, until that thread has the element — the wake-up a
 * handoff cannot beat (it adds the release's script and one attempt).
 *
 * Not a test: the machine is shared and noisy; compare ratios in one run.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include <wakuwaku/wakuwaku.h>

#define BENCH_PROG "bench_lock_wait"
#include "bench/bench_util.h"
#include "support.h" /* tests/support: a private redis-server */

static const char *url;

static int hold_ms = 20;

/* A wrapper processor that counts the queries it passes on. */
typedef struct counting {
    wk_processor base;
    wk_processor *inner;
    atomic_llong *count;
} counting;

static int counting_process(wk_processor *self, wk_query *q)
{
    counting *c = (counting *)self;
    atomic_fetch_add(c->count, 1);
    return wk_process(c->inner, q);
}

static long long cmdstat_calls(redisContext *c, const char *cmd)
{
    redisReply *r = redisCommand(c, "INFO commandstats");
    if (!r || r->type != REDIS_REPLY_STRING)
        die("INFO", c->errstr);
    char field[64];
    snprintf(field, sizeof(field), "cmdstat_%s:calls=", cmd);
    const char *p = strstr(r->str, field);
    long long n = p ? atoll(p + strlen(field)) : 0;
    freeReplyObject(r);
    return n;
}

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static double pct(int64_t *v, size_t n, double p)
{
    qsort(v, n, sizeof(*v), cmp_i64);
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return (double)v[i];
}

/* ------------------------------------------------------------------------
 * Round trip
 * ---------------------------------------------------------------------- */

static double round_trip_us(void)
{
    wk_db *db = bench_open_db(url);
    enum { N = 2000 };
    static int64_t t[N];
    for (int i = 0; i < N; i++) {
        int64_t t0 = now_us();
        if (wk_db_ping(db) != WK_OK)
            die("ping", wk_db_errmsg(db));
        t[i] = now_us() - t0;
    }
    wk_db_close(db);
    return pct(t, N, 0.5);
}

/* ------------------------------------------------------------------------
 * The floor: raw hiredis, one thread blocked in BLPOP, another pushes
 * ---------------------------------------------------------------------- */

typedef struct floor_run {
    atomic_llong woke; /* µs the popper got the element; 0: not yet */
    atomic_bool stop;
} floor_run;

static void *popper(void *arg)
{
    floor_run *f = arg;
    redisContext *c = bench_open_raw(url);
    while (!atomic_load(&f->stop)) {
        redisReply *r = redisCommand(c, "BLPOP bench_floor 1");
        if (!r)
            die("BLPOP", c->errstr);
        if (r->type == REDIS_REPLY_ARRAY)
            atomic_store(&f->woke, now_us());
        freeReplyObject(r);
    }
    redisFree(c);
    return NULL;
}

/* Push → the blocked client has it, p50 and p99 in µs. */
static void push_wake_floor(double *p50, double *p99)
{
    enum { N = 400 };
    static int64_t t[N];
    floor_run f = {0};
    pthread_t th;
    pthread_create(&th, NULL, popper, &f);
    redisContext *c = bench_open_raw(url);
    for (int i = 0; i < N; i++) {
        wk_test_sleep_ms(2); /* the popper is blocked again */
        atomic_store(&f.woke, 0);
        int64_t t0 = now_us();
        freeReplyObject(redisCommand(c, "RPUSH bench_floor x"));
        int64_t w;
        while ((w = atomic_load(&f.woke)) == 0)
            ;
        t[i] = w - t0;
    }
    atomic_store(&f.stop, true);
    pthread_join(th, NULL);
    redisFree(c);
    *p50 = pct(t, N, 0.5);
    *p99 = pct(t, N, 0.99);
}

/* ------------------------------------------------------------------------
 * Handoffs
 * ---------------------------------------------------------------------- */

typedef struct run {
    const wk_entity *lock;
    int target;          /* handoffs to measure */
    atomic_int handoffs; /* measured so far */
    atomic_int acquires; /* successful acquires */
    atomic_int releases;
    atomic_llong released_at; /* µs, just before the last release call */
    atomic_llong queries;     /* through the contenders' processors */
    atomic_bool stop;
    int64_t *lat; /* target entries */
} run;

static void *contender(void *arg)
{
    run *r = arg;
    wk_db *db = bench_open_db(url);
    counting cp = {{counting_process, db, 0}, wk_db_processor(db), &r->queries};
    wk_processor *p = &cp.base;
    while (!atomic_load(&r->stop)) {
        wk_token t;
        bool got = false;
        int64_t started = now_us();
        int rc =
            wk_lock_acquire(p, r->lock, wk_name_str("h"), wk_deadline_in(10000), NULL, &t, &got);
        int64_t done = now_us();
        if (rc != WK_OK)
            die("acquire", wk_db_errmsg(db));
        if (!got)
            continue;
        int mine = atomic_fetch_add(&r->acquires, 1) + 1;
        int64_t rel = atomic_load(&r->released_at);
        if (rel > started) {
            int i = atomic_fetch_add(&r->handoffs, 1);
            if (i < r->target)
                r->lat[i] = done - rel;
            else
                atomic_store(&r->stop, true);
        }
        wk_test_sleep_ms(hold_ms); /* the work */
        bool ok;
        atomic_store(&r->released_at, now_us());
        if (wk_lock_release(p, r->lock, wk_name_str("h"), &t, &ok) != WK_OK)
            die("release", wk_db_errmsg(db));
        atomic_fetch_add(&r->releases, 1);
        /* Outside until a waiter has it (at most 1 s), so that every
         * release is a handoff and the releaser does not barge back. */
        for (int i = 0; i < 1000 && atomic_load(&r->acquires) == mine && !atomic_load(&r->stop);
             i++)
            wk_test_sleep_ms(1);
    }
    wk_db_close(db);
    return NULL;
}

static void handoff_case(const char *label, const wk_entity *lock, int waiters, int target,
                         double rtt)
{
    run r = {.lock = lock, .target = target};
    r.lat = calloc((size_t)target, sizeof(int64_t));
    redisContext *c = bench_open_raw(url);
    freeReplyObject(redisCommand(c, "FLUSHALL"));
    long long before = cmdstat_calls(c, "blpop");
    pthread_t th[16];
    for (int i = 0; i <= waiters; i++)
        pthread_create(&th[i], NULL, contender, &r);
    for (int i = 0; i <= waiters; i++)
        pthread_join(th[i], NULL);
    long long blpops = cmdstat_calls(c, "blpop") - before;
    redisFree(c);
    int n = atomic_load(&r.handoffs);
    if (n > target)
        n = target;
    long long waiting = atomic_load(&r.queries) - atomic_load(&r.releases) + blpops;
    double p50 = pct(r.lat, (size_t)n, 0.5), p99 = pct(r.lat, (size_t)n, 0.99);
    printf("| %-7s | %7d | %8d | %8.0f | %8.1f | %8.0f | %8.1f | %9.2f | %10.2f |\n", label,
           waiters, n, p50, p50 / rtt, p99, p99 / rtt, (double)waiting / n,
           (double)waiting / n / waiters);
    free(r.lat);
}

/* ------------------------------------------------------------------------
 * Through the event loop (wakuwaku/async.h) beside the blocking path
 * ---------------------------------------------------------------------- */

/* One waiter thread and the main thread as holder, taking turns on one
 * Lock: the holder takes it, lets the waiter start its acquire (and
 * sleep), releases; the handoff runs from just before that release to the
 * waiter having it — returned from wk_lock_acquire, or its loop callback
 * run. Then the waiter releases, and so on. */
typedef struct turn {
    bool loop;
    const wk_entity *lock;
    int n;
    atomic_int go, done;
    atomic_llong got_at;
} turn;

typedef struct loop_req {
    turn *t;
    wk_token token;
    bool acquired, released, called;
} loop_req;

static void loop_acquired(wk_async *a, int status, const char *msg, void *arg)
{
    (void)a;
    loop_req *r = arg;
    atomic_store(&r->t->got_at, now_us());
    if (status != WK_OK || !r->acquired)
        die("loop acquire", msg[0] ? msg : "not acquired");
    r->called = true;
}

static void wait_for(atomic_int *v, int want)
{
    while (atomic_load(v) < want)
        wk_test_sleep_ms(0);
}

static void *turn_waiter(void *arg)
{
    turn *t = arg;
    wk_db *db = t->loop ? NULL : bench_open_db(url);
    char err[256];
    wk_async *a = t->loop ? bench_async_open(url, err, sizeof(err)) : NULL;
    if (t->loop && !a)
        die("wk_async_open", err);
    for (int i = 1; i <= t->n; i++) {
        wait_for(&t->go, i);
        bool ok;
        if (t->loop) {
            loop_req r = {.t = t};
            if (wk_lock_acquire(wk_async_with(a, loop_acquired, &r), t->lock, wk_name_str("turn"),
                                wk_deadline_in(10000), NULL, &r.token, &r.acquired) != WK_OK)
                die("loop acquire", wk_async_errmsg(a));
            while (!r.called)
                bench_async_turn(a, 100);
            wk_lock_release(wk_async_with(a, NULL, NULL), t->lock, wk_name_str("turn"), &r.token,
                            &r.released);
            while (wk_async_pending(a))
                bench_async_turn(a, 100);
        } else {
            wk_token tok;
            bool got = false;
            if (wk_lock_acquire(wk_db_processor(db), t->lock, wk_name_str("turn"),
                                wk_deadline_in(10000), NULL, &tok, &got) != WK_OK || !got)
                die("acquire", wk_db_errmsg(db));
            atomic_store(&t->got_at, now_us());
            wk_lock_release(wk_db_processor(db), t->lock, wk_name_str("turn"), &tok, &ok);
        }
        atomic_store(&t->done, i);
    }
    wk_async_close(a);
    wk_db_close(db);
    return NULL;
}

/* The median handoff of one run of n, in µs. */
static double turn_run(bool loop, int n)
{
    static const wk_entity lock = WK_LOCK_ENTITY("bench_turn", 10000);
    turn t = {.loop = loop, .lock = &lock, .n = n};
    int64_t *lat = calloc((size_t)n, sizeof(*lat));
    wk_db *db = bench_open_db(url);
    pthread_t th;
    pthread_create(&th, NULL, turn_waiter, &t);
    for (int i = 1; i <= n; i++) {
        wk_token tok;
        bool got = false, ok;
        while (!got) /* the waiter has released */
            if (wk_lock_try(wk_db_processor(db), &lock, wk_name_str("turn"), &tok, &got) != WK_OK)
                die("try", wk_db_errmsg(db));
        atomic_store(&t.go, i);
        wk_test_sleep_ms(3); /* the waiter has tried and sleeps on its wake-up list */
        int64_t t0 = now_us();
        wk_lock_release(wk_db_processor(db), &lock, wk_name_str("turn"), &tok, &ok);
        wait_for(&t.done, i);
        lat[i - 1] = atomic_load(&t.got_at) - t0;
    }
    pthread_join(th, NULL);
    wk_db_close(db);
    double p50 = pct(lat, (size_t)n, 0.5);
    free(lat);
    return p50;
}

static void loop_beside_blocking(double rtt)
{
    enum { RUNS = 7, N = 60 };
    int64_t med[2][RUNS];
    for (int r = 0; r < RUNS; r++)
        for (int loop = 0; loop < 2; loop++)
            med[loop][r] = (int64_t)turn_run(loop, N);
    printf("\nhandoff, one waiter, holder releasing from another handle (median of %d runs × %d "
           "handoffs; spread = min–max of the runs' medians):\n",
           RUNS, N);
    for (int loop = 0; loop < 2; loop++) {
        double m = pct(med[loop], RUNS, 0.5);
        printf("  %-30s p50 %6.0f µs (%4.1f RT), spread %lld–%lld µs\n",
               loop ? "event loop (wk_async_with)" : "blocking (wk_db_processor)", m, m / rtt,
               (long long)med[loop][0], (long long)med[loop][RUNS - 1]);
    }
}

/* ------------------------------------------------------------------------
 * Uncontended
 * ---------------------------------------------------------------------- */

static void uncontended(double rtt)
{
    static const wk_entity lock = WK_LOCK_ENTITY("bench_free", 10000);
    wk_db *db = bench_open_db(url);
    atomic_llong queries = 0;
    counting cp = {{counting_process, db, 0}, wk_db_processor(db), &queries};
    wk_processor *p = &cp.base;
    enum { N = 3000, REPS = 5 };
    double t_acq[REPS], t_try[REPS];
    long long c_acq = 0, c_try = 0;
    for (int rep = 0; rep < REPS; rep++) {
        for (int mode = 0; mode < 2; mode++) {
            long long before = atomic_load(&queries);
            int64_t t0 = now_us();
            for (int i = 0; i < N; i++) {
                wk_token t;
                bool got = false, ok;
                int rc = mode ? wk_lock_try(p, &lock, wk_name_u64((unsigned)i), &t, &got)
                              : wk_lock_acquire(p, &lock, wk_name_u64((unsigned)i),
                                                wk_deadline_in(1000), NULL, &t, &got);
                if (rc != WK_OK || !got)
                    die("uncontended", wk_db_errmsg(db));
                wk_lock_release(p, &lock, wk_name_u64((unsigned)i), &t, &ok);
            }
            double us = (double)(now_us() - t0) / N;
            long long cmds = atomic_load(&queries) - before;
            if (mode) {
                t_try[rep] = us;
                c_try = cmds;
            } else {
                t_acq[rep] = us;
                c_acq = cmds;
            }
        }
    }
    int64_t a[REPS], b[REPS];
    for (int i = 0; i < REPS; i++) {
        a[i] = (int64_t)(t_acq[i] * 1000);
        b[i] = (int64_t)(t_try[i] * 1000);
    }
    double ma = pct(a, REPS, 0.5) / 1000, mb = pct(b, REPS, 0.5) / 1000;
    printf("\nuncontended cycle (+release), median of %d × %d: acquire %.1f µs (%.2f commands), "
           "try %.1f µs (%.2f commands), ratio %.3f; round trip %.1f µs\n",
           REPS, N, ma, (double)c_acq / N, mb, (double)c_try / N, ma / mb, rtt);
    wk_db_close(db);
}

int main(int argc, char **argv)
{
    int target = 300;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--url") == 0 && i + 1 < argc)
            url = argv[++i];
        else if (strcmp(argv[i], "--handoffs") == 0 && i + 1 < argc)
            target = atoi(argv[++i]);
        else if (strcmp(argv[i], "--hold-ms") == 0 && i + 1 < argc)
            hold_ms = atoi(argv[++i]);
        else
            die("usage", "bench_lock_wait [--url redis://…] [--handoffs N] [--hold-ms N]");
    }
    if (target < 10)
        die("usage", "--handoffs must be ≥ 10");
    wk_test_server server = {0};
    if (!url) {
        if (wk_test_server_start(&server, NULL) != 0)
            die("redis-server", "did not start");
        url = server.url;
    }
    double rtt = round_trip_us(), f50, f99;
    push_wake_floor(&f50, &f99);
    printf("round trip (PING, median): %.1f µs; hold %d ms\n", rtt, hold_ms);
    printf("floor (raw hiredis RPUSH → a thread blocked in BLPOP has it): p50 %.0f µs, p99 %.0f "
           "µs\n\n",
           f50, f99);
    printf("| mode    | waiters | handoffs | p50 (µs) | p50 (RT) | p99 (µs) | p99 (RT) | cmds/hoff "
           "| cmds/hoff/w |\n");
    printf("|---------|---------|----------|----------|----------|----------|----------|-----------"
           "|-------------|\n");
    static const wk_entity unfair = WK_LOCK_ENTITY("bench_wait", 10000);
#ifdef WK_ENTITY_FAIR
    static const wk_entity fair = WK_LOCK_FAIR_ENTITY("bench_wait_fair", 10000);
#endif
    int counts[2] = {2, 8};
    for (int i = 0; i < 2; i++) {
        handoff_case("unfair", &unfair, counts[i], target, rtt);
#ifdef WK_ENTITY_FAIR
        handoff_case("fair", &fair, counts[i], target, rtt);
#endif
    }
    uncontended(rtt);
    loop_beside_blocking(rtt);
    if (server.pid)
        wk_test_server_stop(&server);
    return 0;
}
