/*
 * bench/bench_lock_wait.c — how fast a waiting acquire gets a lock once
 * its holder releases it, and what waiting costs the server, on a
 * redis-server this program starts (or --url).
 *
 *   bench_lock_wait                  # 2 and 8 waiters, unfair and fair
 *   bench_lock_wait --handoffs 400   # handoffs measured per run (150)
 *   bench_lock_wait --rounds 9       # runs per case (7)
 *   bench_lock_wait --kind rwlock    # lock, rwlock, semaphore or all (all)
 *   bench_lock_wait --cluster        # the loop / blocking handoff on a local
 *                                    # Redis Cluster (6 nodes) it starts
 *   bench_lock_wait --idle 10        # only: what 8 idle waiters cost the
 *                                    # server, commands per waiter per second
 *   bench_lock_wait --anatomy        # only: where a release script's time
 *                                    # goes (Lock's straight path, piece by
 *                                    # piece, against RPUSH; see anatomy())
 *
 * Cases: W waiters plus one holder, W + 1 threads with a handle each, all
 * looping on one item: a Lock, an RwLock's writer lease or the permit of
 * a one-permit Semaphore (so that every release hands over, as a Lock's
 * does): the kind's waiting acquire (deadline 10 s), hold
 * --hold-ms (default 20), release, then outside until another thread
 * has taken it (so every release is a handoff to a waiter). A *handoff* is an acquire that started
 * before the release it waited for; its latency runs from just before that release call to the
 * acquire's return, so it includes the release's own trip to the server. Printed next to the round
 * trip (PING) measured in the same run, as p50 and p99 in µs and in round trips.
 *
 * Each case runs --rounds times (default 7), each run right after a run of
 * the floor below, so that every ratio compares two figures taken on the
 * same (shared, noisy) machine within seconds: medians over the runs and
 * the spread (min–max) of the per-run ratios.
 *
 * Load: the handoff path — the release, the pops and the attempts made
 * after a pop, per handoff (the "at most two commands": the
 * release and the waiter's pop); and the acquire side's commands per
 * handoff — every query through the contenders' processors (counted by a
 * wrapper processor) except the releases, plus the server's BLPOP calls
 * (INFO commandstats; BLPOP runs on the handles' blocking connections,
 * beside the processor): the first try, the queueing attempt, the pops.
 *
 * Through the event loop: one waiter's handoff latency with
 * wk_lock_acquire through an event-loop handle (wakuwaku/async.h) beside
 * the same through a blocking handle, runs alternating. With --cluster,
 * only this case, both handles on the cluster's seed list (the loop
 * waiter's BLPOP on its slot's channel, the blocking waiter's on its own
 * connection to the slot's primary), beside the round trip of a PING
 * through a cluster handle; then the same on one redis-server, in the
 * same run.
 *
 * Uncontended: wk_lock_acquire+release against wk_lock_try+release on a
 * free lock, alternating, commands per cycle and the time ratio.
 *
 * The floor, also in the same run: raw hiredis RPUSH while another thread
 * is blocked in BLPOP, until that thread has the element — the wake-up a
 * handoff cannot beat (it adds the release's script) — each push after
 * the same idle gap as a handoff's (--hold-ms).
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
#include "collection/lock_scripts.h"
#include "support.h" /* tests/support: a private redis-server */

static const char *url;

static int hold_ms = 20;

/* A wrapper processor that counts the queries it passes on, and (one
 * thread's) the acquire-or-park attempts (`attempt`: "lock.acquire", …)
 * since `acq` was last reset: the first of a waiting acquire queues it,
 * any other comes after a wake-up. */
typedef struct counting {
    wk_processor base;
    wk_processor *inner;
    atomic_llong *count;
    long long acq;
    const char *attempt;
} counting;

static int counting_process(wk_processor *self, wk_query *q)
{
    counting *c = (counting *)self;
    atomic_fetch_add(c->count, 1);
    if (q->name && strcmp(q->name, c->attempt) == 0)
        c->acq++;
    return wk_process(c->inner, q);
}

/* The kind a handoff case waits on: its waiting acquire, its release, the
 * name of its acquire-or-park attempt. */
typedef struct kind_ops {
    const char *label;
    const char *attempt;
    int (*acquire)(wk_processor *p, const wk_entity *e, wk_name name, int64_t deadline,
                   wk_token *token, bool *acquired);
    int (*release)(wk_processor *p, const wk_entity *e, wk_name name, const wk_token *token,
                   bool *released);
    /* The raw handoff: its release script, its item key, and its shape
     * (a permit set; a writer key with a reader set beside it). */
    const wk_script *raw_release;
    const char *raw_key;
    bool raw_permits, raw_readers;
} kind_ops;

static int lock_acquire(wk_processor *p, const wk_entity *e, wk_name name, int64_t deadline,
                        wk_token *token, bool *acquired)
{
    return wk_lock_acquire(p, e, name, deadline, NULL, token, acquired);
}

static int writer_acquire(wk_processor *p, const wk_entity *e, wk_name name, int64_t deadline,
                          wk_token *token, bool *acquired)
{
    return wk_rwlock_acquire_write(p, e, name, deadline, NULL, token, acquired);
}

static const kind_ops lock_kind = {"Lock",          "lock.acquire",
                                   lock_acquire,    wk_lock_release,
                                   &wk__lock_release_script, "bench_raw_lock",
                                   false,           false};
static const kind_ops writer_kind = {"RwLock w",      "rwlock.acquire_write",
                                     writer_acquire,  wk_rwlock_release_write,
                                     &wk__rwlock_release_write_forms.script, "bench_raw_rw",
                                     false,           true};
static const kind_ops sem_kind = {"Semaphore",          "semaphore.acquire",
                                  wk_semaphore_acquire, wk_semaphore_release,
                                  &wk__semaphore_release_script, "bench_raw_sem",
                                  true,                 false};

static long long cmdstat_calls(redisContext *c, const char *cmd)
{
    return (long long)bench_cmdstat(c, cmd, "calls");
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
    const char *list; /* what it pops */
    size_t list_len;
} floor_run;

static void *popper(void *arg)
{
    floor_run *f = arg;
    redisContext *c = bench_open_raw(url);
    while (!atomic_load(&f->stop)) {
        redisReply *r = redisCommand(c, "BLPOP %b 1", f->list, f->list_len);
        if (!r)
            die("BLPOP", c->errstr);
        if (r->type == REDIS_REPLY_ARRAY)
            atomic_store(&f->woke, now_us());
        freeReplyObject(r);
    }
    redisFree(c);
    return NULL;
}

/* The raw handoff: the kind's own release script (the library's) sent by
 * raw hiredis, handing the item to a thread blocked in BLPOP on its list
 * (the queue set up by raw commands before each gap): the floor plus the
 * script, without the library on either side. `kind` NULL: the floor
 * itself, a raw RPUSH, or (`script`) the script floor: a minimal script
 * that only does that RPUSH (MINIMAL_PUSH, by EVALSHA), the cost of
 * running any script apart from what the release script does. */
#define RAW_ID "raw-handoff-id-1" /* 16 bytes, a waiter's id */
#define MINIMAL_PUSH "return redis.call('RPUSH', KEYS[1], ARGV[1])"

/* One floor run: the wake-up's p50 and p99 (µs), and the server's own
 * time per push command (INFO commandstats, usec / calls of RPUSH or of
 * EVALSHA over the run: the script's whole run, its inner commands
 * included). */
typedef struct floor_fig {
    double p50, p99, server_us;
} floor_fig;

/* The companion keys of the raw item `key`, and the list of its raw
 * waiter RAW_ID (k->w_len + WK_TOKEN_LEN bytes at list). */
static void raw_waiter_list(const char *key, wk__wake_keys *k, char *list)
{
    if (wk__wake_keys_build(k, key, strlen(key)) != WK_OK)
        die("wake keys", key);
    memcpy(list, k->w, k->w_len);
    memcpy(list + k->w_len, RAW_ID, WK_TOKEN_LEN);
}

/* Push (the script floor, or the raw handoff of `kind`) → the blocked
 * client has it. */
static floor_fig push_wake_floor_as(const struct kind_ops *kind, bool script)
{
    enum { N = 150 };
    static int64_t t[N];
    const char *key = kind ? kind->raw_key : "bench_floor";
    wk__wake_keys k;
    char list[WK__WAKE_KEY_MAX];
    raw_waiter_list(key, &k, list);
    floor_run f = {.list = kind ? list : "bench_floor",
                   .list_len = kind ? k.w_len + WK_TOKEN_LEN : strlen("bench_floor")};
    pthread_t th;
    pthread_create(&th, NULL, popper, &f);
    redisContext *c = bench_open_raw(url);
    char sha[64] = "";
    if (kind || script)
        bench_script_load(c, kind ? kind->raw_release->source : MINIMAL_PUSH, sha);
    freeReplyObject(redisCommand(c, "CONFIG RESETSTAT"));
    for (int i = 0; i < N; i++) {
        if (kind) {
            /* The item held by "holder", RAW_ID queued. */
            if (kind->raw_permits) {
                freeReplyObject(redisCommand(c, "DEL %s", key));
                freeReplyObject(redisCommand(c, "ZADD %s 9999999999999 holder", key));
            } else
                freeReplyObject(redisCommand(c, "SET %s holder PX 60000", key));
            freeReplyObject(redisCommand(c, "ZADD %b 1 %s", k.q, k.q_len, RAW_ID));
            freeReplyObject(redisCommand(c, "ZADD %b 9999999999999 %s", k.e, k.e_len, RAW_ID));
        }
        /* The popper is blocked again, and everything has been idle as
         * long as a holder holds before its release (--hold-ms): the
         * same cold start for the server and the woken thread as a
         * handoff's (a 2 ms gap made the floor 2-4x faster here). */
        wk_test_sleep_ms(hold_ms);
        atomic_store(&f.woke, 0);
        int64_t t0 = now_us();
        if (!kind && !script)
            freeReplyObject(redisCommand(c, "RPUSH bench_floor x"));
        else if (!kind)
            freeReplyObject(redisCommand(c, "EVALSHA %s 1 bench_floor x", sha));
        else if (kind->raw_permits) /* permits, q, e | token, w, ttl, N */
            freeReplyObject(redisCommand(c, "EVALSHA %s 3 %s %b %b holder %b 60000 1", sha, key,
                                         k.q, k.q_len, k.e, k.e_len, k.w, k.w_len));
        else if (kind->raw_readers) /* w, q, e, r | token, w, ttl */
            freeReplyObject(redisCommand(c, "EVALSHA %s 4 %s %b %b %s:r holder %b 60000", sha, key,
                                         k.q, k.q_len, k.e, k.e_len, key, k.w, k.w_len));
        else /* lock, q, e | token, w, ttl */
            freeReplyObject(redisCommand(c, "EVALSHA %s 3 %s %b %b holder %b 60000", sha, key,
                                         k.q, k.q_len, k.e, k.e_len, k.w, k.w_len));
        int64_t w;
        while ((w = atomic_load(&f.woke)) == 0)
            ;
        t[i] = w - t0;
    }
    atomic_store(&f.stop, true);
    pthread_join(th, NULL);
    floor_fig out = {pct(t, N, 0.5), pct(t, N, 0.99),
                     bench_cmdstat(c, kind || script ? "evalsha" : "rpush", "usec_per_call")};
    redisFree(c);
    return out;
}

static floor_fig push_wake_floor(void)
{
    return push_wake_floor_as(NULL, false);
}

/* ------------------------------------------------------------------------
 * Handoffs
 * ---------------------------------------------------------------------- */

typedef struct run {
    const kind_ops *kind;
    const wk_entity *lock;
    int target;          /* handoffs to measure */
    atomic_int handoffs; /* measured so far */
    atomic_int acquires; /* successful acquires */
    atomic_int releases;
    atomic_llong released_at; /* µs, just before the last release call */
    atomic_llong queries;     /* through the contenders' processors */
    atomic_llong after_pop;   /* attempts after a wake-up (not the one that queued) */
    atomic_bool stop;
    int64_t *lat; /* target entries */
} run;

static void *contender(void *arg)
{
    run *r = arg;
    wk_db *db = bench_open_db(url);
    counting cp = {{counting_process, db, 0}, wk_db_processor(db), &r->queries, 0,
                   r->kind->attempt};
    wk_processor *p = &cp.base;
    while (!atomic_load(&r->stop)) {
        wk_token t;
        bool got = false;
        int64_t started = now_us();
        cp.acq = 0;
        int rc = r->kind->acquire(p, r->lock, wk_name_str("h"), wk_deadline_in(10000), &t, &got);
        int64_t done = now_us();
        if (cp.acq > 1)
            atomic_fetch_add(&r->after_pop, cp.acq - 1);
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
        if (r->kind->release(p, r->lock, wk_name_str("h"), &t, &ok) != WK_OK)
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

/* One run of a case: handoff p50/p99 (µs), the acquire side's commands
 * per handoff (every query of the contenders but the releases, plus the
 * BLPOPs), and the handoff path's: the release, the pops and the
 * attempts after a pop, per handoff. */
typedef struct case_run {
    double p50, p99, cmds, path;
} case_run;

static case_run handoff_case(const kind_ops *kind, const wk_entity *lock, int waiters, int target)
{
    run r = {.kind = kind, .lock = lock, .target = target};
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
    /* Every acquire after the first was a handoff (the releaser stays out). */
    double acquired = atomic_load(&r.acquires) - 1;
    case_run out = {pct(r.lat, (size_t)n, 0.5), pct(r.lat, (size_t)n, 0.99), 0, 0};
    out.cmds = (double)waiting / acquired;
    out.path = 1 + (double)(blpops + atomic_load(&r.after_pop)) / acquired;
    free(r.lat);
    return out;
}

/* The median of v[0..n) (sorts it). */
static double median_of(double *v, int n)
{
    int64_t t[16];
    for (int i = 0; i < n; i++)
        t[i] = (int64_t)(v[i] * 1000);
    double m = pct(t, (size_t)n, 0.5) / 1000;
    return m;
}

static void min_max(const double *v, int n, double *lo, double *hi)
{
    *lo = *hi = v[0];
    for (int i = 1; i < n; i++) {
        *lo = v[i] < *lo ? v[i] : *lo;
        *hi = v[i] > *hi ? v[i] : *hi;
    }
}

/* A ratio's cell: the median of the per-run ratios and their spread. */
static void print_ratio(const double *v, int n)
{
    double lo, hi, m[16];
    memcpy(m, v, sizeof(double) * (size_t)n);
    min_max(v, n, &lo, &hi);
    printf(" %5.2f (%4.2f–%4.2f) |", median_of(m, n), lo, hi);
}

/* `rounds` runs of a case, each right after a run of the raw floor, of
 * the script floor and of the raw handoff: medians over the runs and the
 * spread (min–max) of the per-run ratios. */
static void case_rounds(const kind_ops *kind, const char *label, const wk_entity *lock,
                        int waiters, int target, int rounds)
{
    double h50[16] = {0}, h99[16] = {0}, f50[16] = {0}, f99[16] = {0}, r50[16] = {0}, r99[16] = {0},
           cmds[16] = {0}, path[16] = {0}, s50[16] = {0}, rs50[16] = {0}, m50[16] = {0},
           rm50[16] = {0}, hm50[16] = {0}, srv[3][16] = {{0}};
    for (int i = 0; i < rounds; i++) {
        floor_fig fl = push_wake_floor(), min = push_wake_floor_as(NULL, true),
                  raw = push_wake_floor_as(kind, false);
        f50[i] = fl.p50, f99[i] = fl.p99, m50[i] = min.p50, s50[i] = raw.p50;
        srv[0][i] = fl.server_us, srv[1][i] = min.server_us, srv[2][i] = raw.server_us;
        rs50[i] = s50[i] / f50[i];
        rm50[i] = m50[i] / f50[i];
        case_run cr = handoff_case(kind, lock, waiters, target);
        h50[i] = cr.p50, h99[i] = cr.p99, cmds[i] = cr.cmds, path[i] = cr.path;
        r50[i] = h50[i] / f50[i];
        r99[i] = h99[i] / f99[i];
        hm50[i] = h50[i] / m50[i];
    }
    printf("| %-9s | %-6s | %7d | %6.0f | %6.0f |", kind->label, label, waiters,
           median_of(h50, rounds), median_of(f50, rounds));
    print_ratio(r50, rounds);
    printf(" %6.0f | %6.0f |", median_of(h99, rounds), median_of(f99, rounds));
    print_ratio(r99, rounds);
    printf(" %5.2f | %5.2f | %6.0f |", median_of(path, rounds), median_of(cmds, rounds),
           median_of(m50, rounds));
    print_ratio(rm50, rounds);
    print_ratio(hm50, rounds);
    printf(" %6.0f |", median_of(s50, rounds));
    print_ratio(rs50, rounds);
    printf(" %4.1f · %4.1f · %4.1f |\n", median_of(srv[0], rounds), median_of(srv[1], rounds),
           median_of(srv[2], rounds));
    fflush(stdout);
}

/* ------------------------------------------------------------------------
 * Anatomy (--anatomy): where a release script's time goes
 * ---------------------------------------------------------------------- */

/* The pieces of Lock's straight release path (collection/lock.c,
 * RELEASE_HAND_FAST), rebuilt here so that each can be left out: a
 * variant is the path with some pieces missing (its reply then no longer
 * right: only the time counts). Always there: the compare with `now`, the
 * LPUSH of the notice to the head's list, the reply. */
enum {
    PC_GET = 1, PC_EXISTS = 2, PC_TIME = 4, PC_ZRANGE = 8, PC_ZSCORE = 16, PC_SET = 32,
    PC_ZREM = 64, PC_FORMAT = 128, PC_PEXPIRE = 256, PC_ALL = 511
};

static void anatomy_source(char *out, size_t cap, int pieces)
{
    static const struct {
        int piece;
        const char *with, *without;
    } frag[] = {
        {PC_GET, "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end\n", ""},
        {PC_EXISTS, "if redis.call('EXISTS', KEYS[2]) ~= 1 then return 0 end\n", ""},
        {PC_TIME, "local t = redis.call('TIME')\nlocal now = t[1] * 1000 + math.floor(t[2] / 1000)\n",
         "local now = 0\n"},
        {PC_ZRANGE, "local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]\n",
         "local head = ARGV[4]\n"},
        {PC_ZSCORE, "local ends = tonumber(redis.call('ZSCORE', KEYS[3], head) or '0')\n",
         "local ends = 9999999999999\n"},
        {0, "if ends <= now then return 0 end\n", ""},
        {PC_SET, "redis.call('SET', KEYS[1], head, 'PX', ARGV[3])\n", ""},
        {PC_ZREM, "redis.call('ZREM', KEYS[3], head)\nredis.call('ZREM', KEYS[2], head)\n", ""},
        {PC_FORMAT, "local notice = 'h' .. string.format('%.0f', ends) .. ':'\n",
         "local notice = 'h9999999999999:'\n"},
        {0, "local n = redis.pcall('LPUSH', ARGV[2] .. head, notice)\n", ""},
        {PC_PEXPIRE, "if type(n) == 'number' then redis.pcall('PEXPIRE', ARGV[2] .. head, ARGV[3]) end\n",
         ""},
        {0, "return 1\n", ""},
    };
    out[0] = '\0';
    for (size_t i = 0; i < sizeof(frag) / sizeof(frag[0]); i++)
        strncat(out, !frag[i].piece || (pieces & frag[i].piece) ? frag[i].with : frag[i].without,
                cap - strlen(out) - 1);
}

typedef struct anatomy_variant {
    const char *label;
    int pieces;    /* -1: raw RPUSH; -2: the library's own release; else anatomy_source */
    char sha[64];
    int64_t wake[1024], server[1024];
    int n_server;
    double wake50[16], server50[16];
} anatomy_variant;

/* Every variant `n` times per round, interleaved (one push of each in
 * turn, each after the idle gap of --hold-ms, the item set up as for the
 * raw handoff), `rounds` rounds: per variant the wake-up's p50 (median over
 * the rounds and their spread), its excess over the floor's, and the
 * server's own time per call (SLOWLOG with a 0 µs threshold: each call's
 * duration, p50), which the floor's RPUSH and the scripts pay alike. */
static void anatomy(int n, int rounds)
{
    static anatomy_variant v[] = {
        {.label = "floor: RPUSH", .pieces = -1},
        {.label = "minimal script: LPUSH only", .pieces = 0},
        {.label = "GET, SET, LPUSH (the least a handing release does)", .pieces = PC_GET | PC_SET},
        {.label = "straight path, all pieces", .pieces = PC_ALL},
        {.label = "  without GET", .pieces = PC_ALL & ~PC_GET},
        {.label = "  without EXISTS", .pieces = PC_ALL & ~PC_EXISTS},
        {.label = "  without TIME", .pieces = PC_ALL & ~PC_TIME},
        {.label = "  without ZRANGE", .pieces = PC_ALL & ~PC_ZRANGE},
        {.label = "  without ZSCORE", .pieces = PC_ALL & ~PC_ZSCORE},
        {.label = "  without SET", .pieces = PC_ALL & ~PC_SET},
        {.label = "  without ZREM x2", .pieces = PC_ALL & ~PC_ZREM},
        {.label = "  without string.format", .pieces = PC_ALL & ~PC_FORMAT},
        {.label = "  without PEXPIRE", .pieces = PC_ALL & ~PC_PEXPIRE},
        {.label = "lock.release (the library's script)", .pieces = -2},
    };
    enum { NV = sizeof(v) / sizeof(v[0]) };
    if (n > 1024)
        n = 1024;
    const char *key = lock_kind.raw_key;
    wk__wake_keys k;
    char list[WK__WAKE_KEY_MAX];
    raw_waiter_list(key, &k, list);
    redisContext *c = bench_open_raw(url);
    for (int j = 0; j < NV; j++) {
        char src[2048];
        anatomy_source(src, sizeof(src), v[j].pieces);
        if (v[j].pieces != -1)
            bench_script_load(c, v[j].pieces == -2 ? lock_kind.raw_release->source : src,
                              v[j].sha);
    }
    freeReplyObject(redisCommand(c, "CONFIG SET slowlog-log-slower-than 0"));
    freeReplyObject(redisCommand(c, "CONFIG SET slowlog-max-len 65536"));
    for (int r = 0; r < rounds; r++) {
        floor_run f = {.list = list, .list_len = k.w_len + WK_TOKEN_LEN};
        pthread_t th;
        pthread_create(&th, NULL, popper, &f);
        freeReplyObject(redisCommand(c, "SLOWLOG RESET"));
        for (int i = 0; i < n; i++)
            for (int j = 0; j < NV; j++) {
                freeReplyObject(redisCommand(c, "SET %s holder PX 60000", key));
                freeReplyObject(redisCommand(c, "ZADD %b 1 %s", k.q, k.q_len, RAW_ID));
                freeReplyObject(
                    redisCommand(c, "ZADD %b 9999999999999 %s", k.e, k.e_len, RAW_ID));
                wk_test_sleep_ms(hold_ms);
                atomic_store(&f.woke, 0);
                int64_t t0 = now_us();
                redisReply *rep =
                    v[j].pieces == -1
                        ? redisCommand(c, "RPUSH %b h9999999999999:", list, f.list_len)
                        : redisCommand(c, "EVALSHA %s 3 %s %b %b holder %b 60000 %s", v[j].sha, key,
                                       k.q, k.q_len, k.e, k.e_len, k.w, k.w_len, RAW_ID);
                if (!rep || rep->type == REDIS_REPLY_ERROR)
                    die(v[j].label, rep ? rep->str : c->errstr);
                freeReplyObject(rep);
                int64_t w;
                while ((w = atomic_load(&f.woke)) == 0)
                    ;
                v[j].wake[i] = w - t0;
            }
        atomic_store(&f.stop, true);
        pthread_join(th, NULL);
        redisReply *log = redisCommand(c, "SLOWLOG GET 65536");
        if (!log || log->type != REDIS_REPLY_ARRAY)
            die("SLOWLOG", c->errstr);
        for (int j = 0; j < NV; j++)
            v[j].n_server = 0;
        for (size_t i = 0; i < log->elements; i++) {
            const redisReply *e = log->element[i], *args = e->element[3];
            const char *cmd = args->element[0]->str;
            for (int j = 0; j < NV; j++) {
                bool mine = v[j].pieces == -1 ? strcasecmp(cmd, "RPUSH") == 0
                                              : strcasecmp(cmd, "EVALSHA") == 0 &&
                                                    strcmp(args->element[1]->str, v[j].sha) == 0;
                if (mine && v[j].n_server < 1024)
                    v[j].server[v[j].n_server++] = e->element[2]->integer;
            }
        }
        freeReplyObject(log);
        for (int j = 0; j < NV; j++) {
            v[j].wake50[r] = pct(v[j].wake, (size_t)n, 0.5);
            v[j].server50[r] = v[j].n_server ? pct(v[j].server, (size_t)v[j].n_server, 0.5) : 0;
        }
    }
    freeReplyObject(redisCommand(c, "CONFIG SET slowlog-log-slower-than 10000"));
    freeReplyObject(redisCommand(c, "CONFIG SET slowlog-max-len 128"));
    redisFree(c);
    printf("anatomy of a release: %d rounds × %d pushes per variant, interleaved, each after %d ms "
           "idle; wake p50: median of the rounds' p50 (spread); server: SLOWLOG duration p50 "
           "(median of the rounds)\n\n",
           rounds, n, hold_ms);
    printf("| variant | wake p50 µs | over the floor µs | server µs per call |\n|---|---|---|---|\n");
    double floor50 = median_of(v[0].wake50, rounds);
    for (int j = 0; j < NV; j++) {
        double lo, hi, m = median_of(v[j].wake50, rounds);
        min_max(v[j].wake50, rounds, &lo, &hi);
        printf("| %s | %4.0f (%4.0f–%4.0f) | %+5.0f | %5.1f |\n", v[j].label, m, lo, hi, m - floor50,
               median_of(v[j].server50, rounds));
    }
    fflush(stdout);
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
    int64_t med[2][RUNS], ratio[RUNS]; /* ratio: the run's loop / blocking, ×1000 */
    for (int r = 0; r < RUNS; r++) {
        for (int loop = 0; loop < 2; loop++)
            med[loop][r] = (int64_t)turn_run(loop, N);
        ratio[r] = med[0][r] ? med[1][r] * 1000 / med[0][r] : 0;
    }
    printf("\nhandoff, one waiter, holder releasing from another handle (median of %d runs × %d "
           "handoffs; spread = min–max of the runs' medians):\n",
           RUNS, N);
    for (int loop = 0; loop < 2; loop++) {
        double m = pct(med[loop], RUNS, 0.5);
        printf("  %-30s p50 %6.0f µs (%4.1f RT), spread %lld–%lld µs\n",
               loop ? "event loop (wk_async_with)" : "blocking (wk_db_processor)", m, m / rtt,
               (long long)med[loop][0], (long long)med[loop][RUNS - 1]);
    }
    double q = pct(ratio, RUNS, 0.5);
    printf("  loop / blocking, each run's pair: median %.2f, spread %.2f–%.2f\n", q / 1000,
           (double)ratio[0] / 1000, (double)ratio[RUNS - 1] / 1000);
    fflush(stdout); /* before any fork: a child must not print it again */
}

/* ------------------------------------------------------------------------
 * Uncontended
 * ---------------------------------------------------------------------- */

static void uncontended(double rtt)
{
    static const wk_entity lock = WK_LOCK_ENTITY("bench_free", 10000);
    wk_db *db = bench_open_db(url);
    atomic_llong queries = 0;
    counting cp = {{counting_process, db, 0}, wk_db_processor(db), &queries, 0, "lock.acquire"};
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

/* What waiting costs the server while nothing happens (issue 36): `n`
 * waiters, each on a handle of its own, wait for a Lock held for the
 * whole run; the commands the server runs in `secs` seconds, after the
 * waiters have queued, per waiter per second (every waiter renews its
 * registration at least once per WK__WAKE_RENEW_MS: a pop that times out
 * and an attempt). */
typedef struct idle_waiter {
    const wk_entity *e;
    int64_t deadline;
    atomic_int *done;
} idle_waiter;

static void *idle_wait(void *arg)
{
    idle_waiter *w = arg;
    wk_db *db = bench_open_db(url);
    wk_token t;
    bool got = false;
    wk_lock_acquire(wk_db_processor(db), w->e, wk_name_str("idle"), w->deadline, NULL, &t, &got);
    wk_db_close(db);
    atomic_fetch_add(w->done, 1);
    return NULL;
}

static void idle_cost(int n, int secs)
{
    static const wk_entity lock = WK_LOCK_ENTITY("bench_idle", 600000);
    wk_db *db = bench_open_db(url);
    wk_token held;
    bool got = false;
    if (wk_lock_try(wk_db_processor(db), &lock, wk_name_str("idle"), &held, &got) || !got)
        die("idle", "the holder's try");
    redisContext *raw = bench_open_raw(url);
    atomic_int done = 0;
    pthread_t th[64];
    idle_waiter w = {&lock, wk_deadline_in((secs + 4) * 1000), &done};
    for (int i = 0; i < n; i++)
        pthread_create(&th[i], NULL, idle_wait, &w);
    struct timespec settle = {2, 0}; /* every waiter queued and asleep */
    nanosleep(&settle, NULL);
    long long pops = cmdstat_calls(raw, "blpop"), evals = cmdstat_calls(raw, "evalsha");
    struct timespec span = {secs, 0};
    nanosleep(&span, NULL);
    pops = cmdstat_calls(raw, "blpop") - pops;
    evals = cmdstat_calls(raw, "evalsha") - evals;
    printf("idle waiting: %d waiters for %d s on a held Lock: %lld BLPOP + %lld EVALSHA = %.2f "
           "commands per waiter per second (renewal every %d ms, grace %d ms)\n",
           n, secs, pops, evals, (double)(pops + evals) / n / secs, WK__WAKE_RENEW_MS,
           WK__WAKE_GRACE_MS);
    bool ok;
    wk_lock_release(wk_db_processor(db), &lock, wk_name_str("idle"), &held, &ok);
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
    redisFree(raw);
    wk_db_close(db);
}

int main(int argc, char **argv)
{
    int target = 150, rounds = 7;
    const char *kinds = "all";
    bool cluster = false, anatomy_only = false;
    int idle_secs = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--url") == 0 && i + 1 < argc)
            url = argv[++i];
        else if (strcmp(argv[i], "--handoffs") == 0 && i + 1 < argc)
            target = atoi(argv[++i]);
        else if (strcmp(argv[i], "--hold-ms") == 0 && i + 1 < argc)
            hold_ms = atoi(argv[++i]);
        else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (strcmp(argv[i], "--kind") == 0 && i + 1 < argc)
            kinds = argv[++i];
        else if (strcmp(argv[i], "--cluster") == 0)
            cluster = true;
        else if (strcmp(argv[i], "--anatomy") == 0)
            anatomy_only = true;
        else if (strcmp(argv[i], "--idle") == 0 && i + 1 < argc)
            idle_secs = atoi(argv[++i]);
        else
            die("usage", "bench_lock_wait [--url redis://…] [--handoffs N] [--hold-ms N] "
                         "[--rounds N] [--kind lock|rwlock|semaphore|all] [--cluster] [--anatomy] "
                         "[--idle SECONDS]");
    }
    if (target < 10)
        die("usage", "--handoffs must be ≥ 10");
    if (rounds < 1 || rounds > 16)
        die("usage", "--rounds must be 1..16");
    if (cluster) {
        wk_test_cluster topo = {0};
        if (wk_test_cluster_start(&topo) != 0)
            die("redis cluster", "did not start");
        url = topo.url;
        double rtt = round_trip_us();
        printf("local Redis Cluster (3 primaries, 3 replicas); round trip (PING through a cluster "
               "handle, median): %.1f µs\n",
               rtt);
        loop_beside_blocking(rtt);
        wk_test_cluster_stop(&topo);
        /* The same on one server, in the same run, for comparison. */
        wk_test_server one = {0};
        if (wk_test_server_start(&one, NULL) != 0)
            die("redis-server", "did not start");
        url = one.url;
        rtt = round_trip_us();
        printf("\none redis-server; round trip (PING, median): %.1f µs\n", rtt);
        loop_beside_blocking(rtt);
        wk_test_server_stop(&one);
        return 0;
    }
    wk_test_server server = {0};
    if (!url) {
        if (wk_test_server_start(&server, NULL) != 0)
            die("redis-server", "did not start");
        url = server.url;
    }
    if (idle_secs > 0) {
        idle_cost(8, idle_secs);
        if (server.pid)
            wk_test_server_stop(&server);
        return 0;
    }
    if (anatomy_only) {
        anatomy(target, rounds);
        if (server.pid)
            wk_test_server_stop(&server);
        return 0;
    }
    double rtt = round_trip_us();
    floor_fig fl = push_wake_floor(), min = push_wake_floor_as(NULL, true);
    printf("round trip (PING, median): %.1f µs; hold %d ms\n", rtt, hold_ms);
    printf("floor (raw hiredis RPUSH → a thread blocked in BLPOP has it): p50 %.0f µs, p99 %.0f "
           "µs, server %.1f µs per RPUSH\n",
           fl.p50, fl.p99, fl.server_us);
    printf("script floor (the same RPUSH in a minimal script, EVALSHA: %s): p50 %.0f µs, p99 "
           "%.0f µs, server %.1f µs per EVALSHA\n\n",
           MINIMAL_PUSH, min.p50, min.p99, min.server_us);
    printf("%d runs per case, each right after a run of the floor, of the script floor and of "
           "the raw handoff; medians over the runs, the ratios' spread (min–max) in brackets. "
           "path: commands from the release to the new holder (the release, the pops, attempts "
           "after a pop) per handoff; acq: the acquire side's commands per handoff (try, queueing "
           "attempt, pops, attempts); script floor: the floor's RPUSH inside a minimal script "
           "(the cost of running any script); raw handoff: the kind's release script sent by raw "
           "hiredis to a raw BLPOP (the floor plus the script, no library on either side); "
           "server µs: INFO commandstats usec_per_call of the floor's RPUSH, the minimal "
           "script's and the release script's EVALSHA in those runs (each after the idle "
           "gap).\n\n",
           rounds);
    printf("| kind | mode   | waiters | p50 µs | floor | p50 / floor | p99 µs | floor | p99 / floor "
           "| path | acq | script floor p50 µs | script floor / floor | p50 / script floor | raw "
           "handoff p50 µs | raw / floor | server µs RPUSH · script · release |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    static const wk_entity unfair = WK_LOCK_ENTITY("bench_wait", 10000);
    static const wk_entity fair = WK_LOCK_FAIR_ENTITY("bench_wait_fair", 10000);
    static const wk_entity rw = WK_RWLOCK_ENTITY("bench_wait", 10000);
    static const wk_entity rw_fair = WK_RWLOCK_FAIR_ENTITY("bench_wait_fair", 10000);
    static const wk_entity sem = WK_SEMAPHORE_ENTITY("bench_wait", 1, 10000);
    int counts[2] = {2, 8};
    for (int i = 0; i < 2; i++) {
        if (!strcmp(kinds, "all") || !strcmp(kinds, "lock")) {
            case_rounds(&lock_kind, "unfair", &unfair, counts[i], target, rounds);
            case_rounds(&lock_kind, "fair", &fair, counts[i], target, rounds);
        }
        if (!strcmp(kinds, "all") || !strcmp(kinds, "rwlock")) {
            case_rounds(&writer_kind, "unfair", &rw, counts[i], target, rounds);
            case_rounds(&writer_kind, "fair", &rw_fair, counts[i], target, rounds);
        }
        if (!strcmp(kinds, "all") || !strcmp(kinds, "semaphore"))
            case_rounds(&sem_kind, "unfair", &sem, counts[i], target, rounds);
    }
    if (!strcmp(kinds, "all") || !strcmp(kinds, "lock")) {
        uncontended(rtt);
        loop_beside_blocking(rtt);
    }
    if (server.pid)
        wk_test_server_stop(&server);
    return 0;
}
