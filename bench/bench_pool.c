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

#define MAX_THREADS 64
#define MAX_HANDLES 8

static const wk_entity pool_lock = WK_LOCK_ENTITY("bench-pool", 30000);

typedef struct runner {
    wk_processor *p;
    unsigned first, ops;
    pthread_barrier_t *go;
    int failures;
} runner;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

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

/* The process's context switches: [0] all, [1] voluntary. */
static void switches(long out[2])
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    out[0] = ru.ru_nvcsw + ru.ru_nivcsw;
    out[1] = ru.ru_nvcsw;
}

/* Cycles per second of `n` threads, thread k on procs[k], `ops` each;
 * adds the context switches to csw ([0] all, [1] voluntary). */
static double timed_threads(wk_processor **procs, int n, unsigned ops, long csw[2])
{
    long csw0[2], csw1[2];
    switches(csw0);
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
    switches(csw1);
    csw[0] += csw1[0] - csw0[0];
    csw[1] += csw1[1] - csw0[1];
    pthread_barrier_destroy(&go);
    if (failures) {
        fprintf(stderr, "bench: %d lock cycles failed\n", failures);
        exit(1);
    }
    return rate;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static char notes[8][200]; /* context switches of each row */
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
    long pool_csw[2] = {0, 0}, own_csw[2] = {0, 0};
    timed_threads(pool_p, threads, pool_ops / 4, pool_csw); /* warm-up: scripts loaded */
    timed_threads(own_p, own, own_ops / 4, own_csw);
    pool_csw[0] = pool_csw[1] = own_csw[0] = own_csw[1] = 0;
    for (int r = 0; r < reps; r++) {
        /* Alternate the order so drift on a shared machine hits both. */
        if (r % 2) {
            own_rate[r] = timed_threads(own_p, own, own_ops, own_csw);
            pool_rate[r] = timed_threads(pool_p, threads, pool_ops, pool_csw);
        } else {
            pool_rate[r] = timed_threads(pool_p, threads, pool_ops, pool_csw);
            own_rate[r] = timed_threads(own_p, own, own_ops, own_csw);
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
    if (nnotes < 8)
        snprintf(notes[nnotes++], sizeof(notes[0]),
                 "%s vs %s: %.2f vs %.2f (voluntary %.2f vs %.2f)", name, mode,
                 (double)pool_csw[0] / per_pool, (double)own_csw[0] / per_own,
                 (double)pool_csw[1] / per_pool, (double)own_csw[1] / per_own);
    for (int k = 0; k < own; k++)
        wk_db_close(dbs[k]);
    wk_pool_close(pool);
}

void bench_pool_run(const char *url, int reps, unsigned ops)
{
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
    printf("\n");
}
