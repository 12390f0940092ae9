/*
 * bench/bench_token.c — what a lease token costs (core/token.c).
 *
 *   bench_token [--runs N]
 *
 * Three figures, each the median of N runs (default 9):
 *   - wk_token_random() in a loop of 1,000,000 draws on one thread, in ns
 *     per token (the per-thread stream, its refills every 32 tokens
 *     included);
 *   - randombytes_buf() of 16 bytes in a loop of 200,000, in ns per call
 *     (the getrandom system call a token cost before the stream, and
 *     still costs where the stream cannot be kept);
 *   - a new thread's first token, in ns: the stream's set-up (its state
 *     mapped, its key drawn, its first block), timed inside each of 200
 *     threads started one after another;
 *   - a thread's life, pthread_create to pthread_join, when it draws one
 *     token and when it draws none, in ns (the difference: the set-up
 *     above and the stream's release when the thread exits).
 * No Redis.
 */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include <wakuwaku/token.h>

#include "bench_util.h"

enum { DRAWS = 1000000, SYSCALLS = 200000, THREADS = 200 };

static double per_token_ns(void)
{
    wk_token t;
    unsigned char sink = 0;
    double t0 = now_s();
    for (int i = 0; i < DRAWS; i++) {
        wk_token_random(&t);
        sink ^= t.bytes[0];
    }
    double ns = (now_s() - t0) * 1e9 / DRAWS;
    __asm__ volatile("" : : "r"(sink));
    return ns;
}

static double per_randombytes_ns(void)
{
    unsigned char b[16];
    unsigned char sink = 0;
    double t0 = now_s();
    for (int i = 0; i < SYSCALLS; i++) {
        randombytes_buf(b, sizeof(b));
        sink ^= b[0];
    }
    double ns = (now_s() - t0) * 1e9 / SYSCALLS;
    __asm__ volatile("" : : "r"(sink));
    return ns;
}

static void *first_token(void *arg)
{
    wk_token t;
    double t0 = now_s();
    wk_token_random(&t);
    *(double *)arg = (now_s() - t0) * 1e9;
    return NULL;
}

static void *no_token(void *arg)
{
    *(double *)arg = 0;
    return NULL;
}

/* THREADS threads one after another, each running `body`: the median of
 * what they wrote (first_token: its time) or, with `life`, of the time
 * from pthread_create to pthread_join. */
static double per_thread_ns(void *(*body)(void *), int life)
{
    double each[THREADS];
    for (int i = 0; i < THREADS; i++) {
        pthread_t th;
        double t0 = now_s();
        if (pthread_create(&th, NULL, body, &each[i]) != 0) {
            fprintf(stderr, "bench_token: pthread_create failed\n");
            exit(1);
        }
        pthread_join(th, NULL);
        if (life)
            each[i] = (now_s() - t0) * 1e9;
    }
    qsort(each, THREADS, sizeof(each[0]), cmp_double);
    return each[THREADS / 2];
}

int main(int argc, char **argv)
{
    int runs = 9;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc && atoi(argv[i + 1]) > 0) {
            runs = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: bench_token [--runs N]\n");
            return 2;
        }
    }
    if (sodium_init() < 0) {
        fprintf(stderr, "bench_token: sodium_init failed\n");
        return 1;
    }
    double *tok = calloc((size_t)runs, sizeof(double));
    double *sys = calloc((size_t)runs, sizeof(double));
    double *first = calloc((size_t)runs, sizeof(double));
    double *life = calloc((size_t)runs, sizeof(double));
    double *bare = calloc((size_t)runs, sizeof(double));
    if (!tok || !sys || !first || !life || !bare)
        return 1;
    for (int r = 0; r < runs; r++) {
        tok[r] = per_token_ns();
        sys[r] = per_randombytes_ns();
        first[r] = per_thread_ns(first_token, 0);
        life[r] = per_thread_ns(first_token, 1);
        bare[r] = per_thread_ns(no_token, 1);
    }
    double *all[] = {tok, sys, first, life, bare};
    for (size_t k = 0; k < sizeof(all) / sizeof(all[0]); k++)
        qsort(all[k], (size_t)runs, sizeof(double), cmp_double);
    printf("wk_token_random          %8.1f ns per token (median of %d runs of %d)\n", tok[runs / 2],
           runs, DRAWS);
    printf("randombytes_buf(16)      %8.1f ns per call  (median of %d runs of %d)\n", sys[runs / 2],
           runs, SYSCALLS);
    printf(
        "a new thread's 1st token %8.1f ns           (median of %d runs' medians of %d threads)\n",
        first[runs / 2], runs, THREADS);
    printf("thread life, 1 token     %8.1f ns           (create to join; same medians)\n",
           life[runs / 2]);
    printf("thread life, no token    %8.1f ns\n", bare[runs / 2]);
    for (size_t k = 0; k < sizeof(all) / sizeof(all[0]); k++)
        free(all[k]);
    return 0;
}
