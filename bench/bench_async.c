/*
 * bench/bench_async.c — --async: lock try + release cycles with 64
 * queries in flight on one event-loop handle (wk_async, driven by a
 * poll() loop), against the same cycles as 64-query batches on a blocking
 * handle, in the same run (issue 15's target: ≥ 0.9).
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench_cases.h"
#include "bench_util.h"

#define IN_FLIGHT 64

static const wk_entity async_lock = WK_LOCK_ENTITY("bench-async", 30000);

static void fail(const char *what, const char *msg)
{
    fprintf(stderr, "bench_async: %s: %s\n", what, msg);
    exit(1);
}

static void on_done(wk_async *a, int status, const char *msg, void *arg)
{
    (void)a;
    (void)arg;
    if (status != WK_OK)
        fail("async query", msg);
}

/* Run the loop until nothing is pending. */
static void drain(wk_async *a)
{
    while (wk_async_pending(a))
        bench_async_turn(a, 1000);
}

/* `ops` lock cycles, IN_FLIGHT at a time: 64 tries in flight, then their
 * 64 releases. Returns cycles per second. */
static double async_cycles(wk_async *a, unsigned ops)
{
    wk_token t[IN_FLIGHT];
    bool got[IN_FLIGHT], ok[IN_FLIGHT];
    double t0 = now_s();
    for (unsigned base = 0; base < ops; base += IN_FLIGHT) {
        wk_processor *p = wk_async_with(a, on_done, NULL);
        for (unsigned k = 0; k < IN_FLIGHT; k++)
            wk_lock_try(p, &async_lock, wk_name_u64(base + k), &t[k], &got[k]);
        drain(a);
        for (unsigned k = 0; k < IN_FLIGHT; k++)
            wk_lock_release(p, &async_lock, wk_name_u64(base + k), &t[k], &ok[k]);
        drain(a);
        for (unsigned k = 0; k < IN_FLIGHT; k++)
            if (!got[k] || !ok[k])
                fail("async lock cycle", "not acquired/released");
    }
    return ops / (now_s() - t0);
}

static double batch_cycles(bench_ctx *c, unsigned ops)
{
    wk_token t[IN_FLIGHT];
    bool got[IN_FLIGHT], ok[IN_FLIGHT];
    wk_processor *p = wk_batch_processor(c->batch);
    double t0 = now_s();
    for (unsigned base = 0; base < ops; base += IN_FLIGHT) {
        for (unsigned k = 0; k < IN_FLIGHT; k++)
            wk_lock_try(p, &async_lock, wk_name_u64(base + k), &t[k], &got[k]);
        bench_check(wk_batch_exec(c->batch), c, "batch lock.try");
        for (unsigned k = 0; k < IN_FLIGHT; k++)
            wk_lock_release(p, &async_lock, wk_name_u64(base + k), &t[k], &ok[k]);
        bench_check(wk_batch_exec(c->batch), c, "batch lock.release");
        for (unsigned k = 0; k < IN_FLIGHT; k++)
            if (!got[k] || !ok[k])
                fail("batch lock cycle", "not acquired/released");
    }
    return ops / (now_s() - t0);
}

static double median_of(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void bench_async_run(bench_ctx *c, const char *url, int reps, unsigned ops)
{
    char err[256];
    wk_async *a = bench_async_open(url, err, sizeof(err));
    if (!a)
        fail("wk_async_open", err);
    double as[32], bs[32];
    async_cycles(a, ops / 4); /* warm-up: connected, scripts loaded, buffers grown */
    batch_cycles(c, ops / 4);
    for (int r = 0; r < reps; r++) {
        if (r % 2) {
            bs[r] = batch_cycles(c, ops);
            as[r] = async_cycles(a, ops);
        } else {
            as[r] = async_cycles(a, ops);
            bs[r] = batch_cycles(c, ops);
        }
    }
    /* The spread: each repetition's own ratio (loop and batch ran back to
     * back), before the medians sort the arrays. */
    double lo = 0, hi = 0;
    for (int r = 0; r < reps; r++) {
        double q = as[r] / bs[r];
        lo = r == 0 || q < lo ? q : lo;
        hi = r == 0 || q > hi ? q : hi;
    }
    double l = median_of(as, reps), w = median_of(bs, reps);
    printf("| %-38s | %-10s | %10s | %10s | %5s |\n", "case", "mode", "event loop", "batch",
           "ratio");
    printf("|%s|%s|%s|%s|%s|\n", "----------------------------------------", "------------",
           "------------", "------------", "-------");
    printf("| %-38s | %-10s | %10.0f | %10.0f | %5.3f |\n\n", "lock try + release (library)",
           "64 in flight", l, w, l / w);
    printf("ratio per repetition: %.3f to %.3f (%d repetitions)\n\n", lo, hi, reps);
    fflush(stdout);
    wk_async_close(a);
}
