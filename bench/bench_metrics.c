/*
 * bench/bench_metrics.c — what the metrics wrapper (wakuwaku/metrics.h)
 * costs per query.
 *
 *   bench_metrics                       ratios, same run: wrapped / unwrapped
 *   bench_metrics --callgrind N MODE    N queries only, for
 *                                       bench/callgrind_metrics.sh. MODE:
 *                                       plain|wrapped — custom queries;
 *                                       op-plain|op-wrapped — a library
 *                                       operation (lock.inspect), built by
 *                                       the op runner
 *
 * The inner processor is a stub that returns at once, so what is timed is
 * the wrapper itself (two clock reads, the series lookup, four relaxed
 * atomic adds), not a round trip. A second case times lock.inspect
 * against a real redis-server started on a free port, wrapped and not,
 * alternating, to show the overhead next to a round trip.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <wakuwaku/wakuwaku.h>

#include "support.h"

static int stub_process(wk_processor *self, wk_query *q)
{
    (void)self;
    (void)q;
    return WK_OK;
}

static const wk_entity reports = WK_CUSTOM_ENTITY("Report", "monthly");

static __attribute__((noinline)) void run_queries(wk_processor *p, long n)
{
    static const char *const names[4] = {"report.get", "report.put", "report.scan",
                                         "report.del"};
    wk_access a = {&reports, WK_READ};
    for (long i = 0; i < n; i++) {
        wk_query q = {.name = names[i & 3], .effect = {&a, 1}};
        wk_process(p, &q);
    }
}

static const wk_entity bench_lock = WK_LOCK_ENTITY("bench-metrics", 30000);

/* The same through the op runner: its queries are flagged as a library
 * operation's, whose labels the wrapper confirms by the namespace only. */
static __attribute__((noinline)) void run_ops(wk_processor *p, long n)
{
    wk_lock_state st;
    for (long i = 0; i < n; i++)
        wk_lock_inspect(p, &bench_lock, wk_name_u64((uint64_t)i & 3), &st);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    wk_processor stub = {stub_process, NULL, 0};
    wk_metrics *m;
    if (wk_metrics_open(&m, &stub) != WK_OK)
        return 1;
    if (argc == 4 && !strcmp(argv[1], "--callgrind")) {
        long n = atol(argv[2]);
        const char *mode = argv[3];
        bool ops = !strncmp(mode, "op-", 3);
        wk_processor *p = !strcmp(mode + (ops ? 3 : 0), "wrapped") ? wk_metrics_processor(m) : &stub;
        if (ops)
            run_ops(p, n);
        else
            run_queries(p, n);
        wk_metrics_close(m);
        return 0;
    }

    enum { REPS = 7 };
    const long n = 2000000;
    double plain[REPS], wrapped[REPS];
    run_queries(wk_metrics_processor(m), 1000); /* the series exist */
    for (int r = 0; r < REPS; r++) {
        double t0 = now_s();
        run_queries(&stub, n);
        double t1 = now_s();
        run_queries(wk_metrics_processor(m), n);
        double t2 = now_s();
        plain[r] = (t1 - t0) / (double)n * 1e9;
        wrapped[r] = (t2 - t1) / (double)n * 1e9;
    }
    qsort(plain, REPS, sizeof(double), cmp_d);
    qsort(wrapped, REPS, sizeof(double), cmp_d);
    printf("| case | unwrapped ns/query | wrapped ns/query | overhead ns | ratio |\n");
    printf("|---|---|---|---|---|\n");
    printf("| stub processor (median of %d × %ld) | %.1f | %.1f | %.1f | %.2f |\n", REPS, n,
           plain[REPS / 2], wrapped[REPS / 2], wrapped[REPS / 2] - plain[REPS / 2],
           wrapped[REPS / 2] / plain[REPS / 2]);

    fflush(stdout); /* the server is a fork */
    wk_test_server srv;
    if (wk_test_server_start(&srv, NULL) != 0) {
        fprintf(stderr, "no redis-server: the round-trip case is skipped\n");
        wk_metrics_close(m);
        return 0;
    }
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = srv.url;
    o.capability = wk_cap_read_write();
    wk_db *db;
    char err[256];
    if (wk_db_open(&db, &o, err, sizeof(err)) == WK_OK) {
        wk_metrics *mr;
        wk_metrics_open(&mr, wk_db_processor(db));
        const wk_entity lock = bench_lock;
        const long k = 5000;
        double pr[REPS], wr[REPS];
        for (int r = 0; r < REPS; r++) {
            wk_lock_state st;
            double t0 = now_s();
            for (long i = 0; i < k; i++)
                wk_lock_inspect(wk_db_processor(db), &lock, wk_name_u64(1), &st);
            double t1 = now_s();
            for (long i = 0; i < k; i++)
                wk_lock_inspect(wk_metrics_processor(mr), &lock, wk_name_u64(1), &st);
            double t2 = now_s();
            pr[r] = (t1 - t0) / (double)k * 1e9;
            wr[r] = (t2 - t1) / (double)k * 1e9;
        }
        qsort(pr, REPS, sizeof(double), cmp_d);
        qsort(wr, REPS, sizeof(double), cmp_d);
        printf("| lock.inspect, redis round trip (median of %d × %ld) | %.0f | %.0f | %.0f | %.3f "
               "|\n",
               REPS, k, pr[REPS / 2], wr[REPS / 2], wr[REPS / 2] - pr[REPS / 2],
               wr[REPS / 2] / pr[REPS / 2]);
        wk_metrics_close(mr);
        wk_db_close(db);
    }
    wk_test_server_stop(&srv);
    wk_metrics_close(m);
    return 0;
}
