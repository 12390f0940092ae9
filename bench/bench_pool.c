/*
 * bench/bench_pool.c — `bench_redis --pool`: lock cycles (try + release)
 * from many threads through one wk_pool against the same threads each with
 * a handle of its own; both sides are the library, on the same server, in
 * the same run, and the ratio is pool / own handles.
 *
 *   8 threads, pool of 4  vs  8 threads, 8 handles   (the pool's use)
 *   8 threads, pool of 4  vs  4 threads, 4 handles   (as many connections)
 *   8 threads, pool of 8  vs  8 threads, 8 handles   (the same, 8 each)
 *   1 thread,  pool of 1  vs  1 thread,  1 handle    (the borrow's cost)
 *
 * Every row does the same number of cycles on each side, split evenly
 * between that side's threads. Below the table, the process's voluntary
 * context switches per cycle on each side (getrusage), which is where a
 * queue for connections costs.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

#include <wakuwaku/wakuwaku.h>

#include "bench/bench_cases.h"

#define MAX_THREADS 8

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

static long switches(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_nvcsw;
}

/* Cycles per second of `n` threads, thread k on procs[k], `ops` each;
 * adds the voluntary context switches to *csw. */
static double timed_threads(wk_processor **procs, int n, unsigned ops, long *csw)
{
    long csw0 = switches();
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
    *csw += switches() - csw0;
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

static char notes[4][160]; /* context switches of each row */
static int nnotes;

/* `threads` threads on a pool of `size` against `own` threads with a
 * handle each, `ops` cycles per side; prints one row. */
static void one_row(const wk_db_options *o, int threads, int size, int own, int reps,
                    unsigned ops)
{
    wk_db *dbs[MAX_THREADS];
    wk_processor *own_p[MAX_THREADS], *pool_p[MAX_THREADS];
    char err[256];
    wk_pool_options po = WK_POOL_OPTIONS_INIT;
    po.db = o;
    po.size = size;
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
    double pool_rate[32], own_rate[32];
    long pool_csw = 0, own_csw = 0;
    timed_threads(pool_p, threads, pool_ops / 4, &pool_csw); /* warm-up: scripts loaded */
    timed_threads(own_p, own, own_ops / 4, &own_csw);
    pool_csw = own_csw = 0;
    for (int r = 0; r < reps; r++) {
        /* Alternate the order so drift on a shared machine hits both. */
        if (r % 2) {
            own_rate[r] = timed_threads(own_p, own, own_ops, &own_csw);
            pool_rate[r] = timed_threads(pool_p, threads, pool_ops, &pool_csw);
        } else {
            pool_rate[r] = timed_threads(pool_p, threads, pool_ops, &pool_csw);
            own_rate[r] = timed_threads(own_p, own, own_ops, &own_csw);
        }
    }
    qsort(pool_rate, (size_t)reps, sizeof(double), cmp_double);
    qsort(own_rate, (size_t)reps, sizeof(double), cmp_double);
    double l = pool_rate[reps / 2], w = own_rate[reps / 2];
    char name[64], mode[32];
    snprintf(name, sizeof(name), "%d thread%s on a pool of %d", threads, threads > 1 ? "s" : "",
             size);
    snprintf(mode, sizeof(mode), "%d handle%s", own, own > 1 ? "s" : "");
    printf("| %-38s | %-10s | %10.0f | %10.0f | %5.3f |\n", name, mode, l, w, l / w);
    fflush(stdout);
    if (nnotes < 4)
        snprintf(notes[nnotes++], sizeof(notes[0]), "%s vs %s: %.2f vs %.2f", name, mode,
                 (double)pool_csw / ((double)pool_ops * threads * reps),
                 (double)own_csw / ((double)own_ops * own * reps));
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
    printf("| %-38s | %-10s | %10s | %10s | %5s |\n", "pool", "vs", "pool", "handles", "ratio");
    printf("|%s|%s|%s|%s|%s|\n", "----------------------------------------", "------------",
           "------------", "------------", "-------");
    one_row(&o, MAX_THREADS, 4, MAX_THREADS, reps, ops);
    one_row(&o, MAX_THREADS, 4, 4, reps, ops);
    one_row(&o, MAX_THREADS, 8, MAX_THREADS, reps, ops);
    one_row(&o, 1, 1, 1, reps, ops);
    printf("\nvoluntary context switches per cycle (pool vs handles):\n");
    for (int i = 0; i < nnotes; i++)
        printf("  %s\n", notes[i]);
    printf("\n");
}
