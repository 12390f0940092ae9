/*
 * bench/bench_pool.c — `bench_redis --pool`: lock cycles (try + release)
 * from many threads through one wk_pool against the same threads each with
 * a handle of its own; both sides are the library, on the same server, in
 * the same run, and the ratio is pool / own handles.
 *
 *   8 threads, pool of 4   vs  8 threads, 8 handles  (the pool's use)
 *   64 threads, pool of 4  vs  8 threads, 8 handles  (many threads, coalesced)
 *   8 threads, pool of 4   vs  4 threads, 4 handles  (as many connections)
 *   8 threads, pool of 8   vs  8 threads, 8 handles  (the same, 8 each)
 *   1 thread,  pool of 1   vs  1 thread,  1 handle   (the pool's own cost)
 *   8 threads, pool of 4 without multiplexing vs 8 handles (one query per
 *              connection at a time: the queue the multiplexing replaces)
 *
 * The pools multiplex (wk_pool_options.multiplex, the default) except in
 * the last row. Every row does the same number of cycles on each side,
 * split evenly between that side's threads. Each row prints the median
 * of the repetitions and their spread (lowest–highest ratio of the
 * repetitions, each pool run against the handle run beside it); below the
 * table, the process's context switches (voluntary + involuntary,
 * getrusage) per cycle on each side.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <wakuwaku/wakuwaku.h>

#include "bench/bench_cases.h"
#include "bench/bench_util.h"

#define MAX_THREADS 64
#define MAX_HANDLES 8

static const wk_entity pool_lock = WK_LOCK_ENTITY("bench-pool", 30000);

typedef struct runner {
    wk_processor *p;
    unsigned first, ops;
    pthread_barrier_t *go;
    int failures;
} runner;

static void *cycles(void *arg)
{
    runner *r = arg;
    pthread_barrier_wait(r->go);
    for (unsigned i = r->first; i < r->first + r->ops; i++) {
        wk_token t;
        bool got, ok;
        if (wk_lock_try(r->p, &pool_lock, wk_name_u64(i), &t, &got) || !got ||
            wk_lock_release(r->p, &pool_lock, wk_name_u64(i), &t, &ok) || !ok)
            r->failures++;
    }
    return NULL;
}

/* What one side of a row cost, summed over its runs. */
typedef struct cost {
    long csw[2];       /* the process's context switches: all, voluntary */
    double client_us;  /* the process's CPU time, user + system */
    double server_us;  /* redis-server's main thread on a CPU (-1: unknown) */
} cost;

static long server_pid = -1;

static void sample(cost *c)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    c->csw[0] = ru.ru_nvcsw + ru.ru_nivcsw;
    c->csw[1] = ru.ru_nvcsw;
    c->client_us = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 +
                   (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
    long long ns[2];
    bench_cpu_ns(server_pid, ns);
    c->server_us = ns[0] < 0 ? -1 : (double)ns[0] / 1e3;
}

/* Cycles per second of `n` threads, thread k on procs[k], `ops` each;
 * adds what they cost to `sum`. */
static double timed_threads(wk_processor **procs, int n, unsigned ops, cost *sum)
{
    cost c0, c1;
    sample(&c0);
    pthread_t th[MAX_THREADS];
    runner r[MAX_THREADS];
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, (unsigned)n + 1);
    for (int k = 0; k < n; k++) {
        r[k] = (runner){procs[k], (unsigned)k * ops, ops, &go, 0};
        pthread_create(&th[k], NULL, cycles, &r[k]);
    }
    pthread_barrier_wait(&go);
    double t0 = now_s();
    int failures = 0;
    for (int k = 0; k < n; k++) {
        pthread_join(th[k], NULL);
        failures += r[k].failures;
    }
    double rate = (double)n * ops / (now_s() - t0);
    sample(&c1);
    sum->csw[0] += c1.csw[0] - c0.csw[0];
    sum->csw[1] += c1.csw[1] - c0.csw[1];
    sum->client_us += c1.client_us - c0.client_us;
    sum->server_us = c0.server_us < 0 || sum->server_us < 0 ? -1
                                                            : sum->server_us + c1.server_us -
                                                                  c0.server_us;
    pthread_barrier_destroy(&go);
    if (failures) {
        fprintf(stderr, "bench: %d lock cycles failed\n", failures);
        exit(1);
    }
    return rate;
}

static char notes[8][200]; /* context switches of each row */
static char cpu_notes[8][200]; /* CPU per cycle of each row */
static int nnotes;

/* `threads` threads on a pool of `size` against `own` threads with a
 * handle each, `ops` cycles per side; prints one row. */
static void one_row(const wk_db_options *o, int threads, int size, bool multiplex, int own,
                    int reps, unsigned ops)
{
    wk_db *dbs[MAX_HANDLES];
    wk_processor *own_p[MAX_HANDLES], *pool_p[MAX_THREADS];
    char err[256];
    wk_pool_options po = WK_POOL_OPTIONS_INIT;
    po.db = o;
    po.size = size;
    po.multiplex = multiplex;
    wk_pool *pool;
    if (wk_pool_open(&pool, &po, err, sizeof(err)) != WK_OK) {
        fprintf(stderr, "bench: wk_pool_open: %s\n", err);
        exit(1);
    }
    for (int k = 0; k < threads; k++)
        pool_p[k] = wk_pool_processor(pool);
    for (int k = 0; k < own; k++) {
        if (wk_db_open(&dbs[k], o, err, sizeof(err)) != WK_OK) {
            fprintf(stderr, "bench: wk_db_open: %s\n", err);
            exit(1);
        }
        own_p[k] = wk_db_processor(dbs[k]);
    }
    unsigned pool_ops = ops / (unsigned)threads, own_ops = ops / (unsigned)own;
    double pool_rate[32], own_rate[32], ratio[32];
    cost pool_cost = {{0, 0}, 0, 0}, own_cost = {{0, 0}, 0, 0};
    timed_threads(pool_p, threads, pool_ops / 4, &pool_cost); /* warm-up: scripts loaded */
    timed_threads(own_p, own, own_ops / 4, &own_cost);
    pool_cost = own_cost = (cost){{0, 0}, 0, 0};
    for (int r = 0; r < reps; r++) {
        /* Alternate the order so drift on a shared machine hits both. */
        if (r % 2) {
            own_rate[r] = timed_threads(own_p, own, own_ops, &own_cost);
            pool_rate[r] = timed_threads(pool_p, threads, pool_ops, &pool_cost);
        } else {
            pool_rate[r] = timed_threads(pool_p, threads, pool_ops, &pool_cost);
            own_rate[r] = timed_threads(own_p, own, own_ops, &own_cost);
        }
        ratio[r] = pool_rate[r] / own_rate[r];
    }
    qsort(ratio, (size_t)reps, sizeof(double), cmp_double);
    qsort(pool_rate, (size_t)reps, sizeof(double), cmp_double);
    qsort(own_rate, (size_t)reps, sizeof(double), cmp_double);
    double l = pool_rate[reps / 2], w = own_rate[reps / 2];
    char name[64], mode[32];
    snprintf(name, sizeof(name), "%d thread%s on a pool of %d%s", threads, threads > 1 ? "s" : "",
             size, multiplex ? "" : ", one at a time");
    snprintf(mode, sizeof(mode), "%d handle%s", own, own > 1 ? "s" : "");
    printf("| %-38s | %-10s | %10.0f | %10.0f | %5.3f | %5.3f-%5.3f |\n", name, mode, l, w, l / w,
           ratio[0], ratio[reps - 1]);
    fflush(stdout);
    double per_pool = (double)pool_ops * threads * reps, per_own = (double)own_ops * own * reps;
    if (nnotes < 8) {
        int i = nnotes++;
        snprintf(notes[i], sizeof(notes[0]), "%s vs %s: %.2f vs %.2f (voluntary %.2f vs %.2f)",
                 name, mode, (double)pool_cost.csw[0] / per_pool,
                 (double)own_cost.csw[0] / per_own, (double)pool_cost.csw[1] / per_pool,
                 (double)own_cost.csw[1] / per_own);
        if (pool_cost.server_us >= 0 && own_cost.server_us >= 0) {
            /* The server runs commands on one thread: 1e6 / its µs per
             * cycle is the most cycles/s any client can get out of it. */
            double sp = pool_cost.server_us / per_pool, so = own_cost.server_us / per_own;
            snprintf(cpu_notes[i], sizeof(cpu_notes[0]),
                     "%s vs %s: client %.1f vs %.1f, server %.1f vs %.1f (server's bound %.0f "
                     "cycles/s = %.2f x the handles' median)",
                     name, mode, pool_cost.client_us / per_pool, own_cost.client_us / per_own,
                     sp, so, 1e6 / sp, 1e6 / sp / w);
        }
    }
    for (int k = 0; k < own; k++)
        wk_db_close(dbs[k]);
    wk_pool_close(pool);
}

void bench_pool_run(const char *url, int reps, unsigned ops, long pid)
{
    server_pid = pid;
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = url;
    o.capability = wk_cap_read_write();
    printf("lock try+release through a pool vs threads with a handle each (cycles/s of all "
           "threads; median of %d)\n\n",
           reps);
    printf("| %-38s | %-10s | %10s | %10s | %5s | %-11s |\n", "pool", "vs", "pool", "handles",
           "ratio", "spread");
    printf("|%s|%s|%s|%s|%s|%s|\n", "----------------------------------------", "------------",
           "------------", "------------", "-------", "-------------");
    one_row(&o, 8, 4, true, 8, reps, ops);
    one_row(&o, 64, 4, true, 8, reps, ops);
    one_row(&o, 8, 4, true, 4, reps, ops);
    one_row(&o, 8, 8, true, 8, reps, ops);
    one_row(&o, 1, 1, true, 1, reps, ops);
    one_row(&o, 8, 4, false, 8, reps, ops);
    printf("\ncontext switches (voluntary + involuntary) per cycle (pool vs handles):\n");
    for (int i = 0; i < nnotes; i++)
        printf("  %s\n", notes[i]);
    printf("\nCPU µs per cycle (client process: user + system, getrusage; redis-server's main "
           "thread: schedstat), pool vs handles:\n");
    for (int i = 0; i < nnotes; i++)
        if (cpu_notes[i][0])
            printf("  %s\n", cpu_notes[i]);
    printf("\n");
}
