/*
** bench/bench_blake3.c — throughput of wakuwaku's BLAKE3, and of the
** reference b3sum on the same data.
**
**   bench_blake3 [--runs N] [--no-b3sum]
**
** Ours: 1 KiB, 64 KiB and 16 MiB inputs already in memory, hashed with
** wk_blake3() by every implementation this CPU supports (forced through
** the private core/blake3_internal.h). Each run repeats the hash until it has
** taken at least 50 ms; the figure is the median of N runs (default 7).
**
** b3sum: `b3sum --num-threads 1 FILE` on the same bytes written to
** temporary files (in the page cache after the first run), timed as whole
** processes, median of max(N, 11) runs interleaved across the files.
** The 1 KiB run measures start-up (its hashing takes ~1 us); for 1 KiB and
** 64 KiB start-up dominates, so no ratio is given there. For 16 MiB the ratio ours/b3sum is printed
*both against
** b3sum's raw time and against its time minus start-up (the stricter
** comparison). The first b3sum run of each file also checks that b3sum's
** hash equals ours.
**
** MB = 10^6 bytes.
*/
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/blake3_internal.h"
#include "wakuwaku/blake3.h"

extern char **environ;

#define KiB ((size_t)1024)
#define MiB (KiB * KiB)
#define MIN_RUN_SECONDS 0.05

static const struct {
    size_t len;
    const char *name;
} sizes[] = {{KiB, "1 KiB"}, {64 * KiB, "64 KiB"}, {16 * MiB, "16 MiB"}};
#define NSIZES (sizeof sizes / sizeof sizes[0])

static const char *const impls[] = {"portable", "sse41", "avx2", "avx512"};
#define NIMPLS (sizeof impls / sizeof impls[0])

static volatile uint8_t sink; /* keeps the hashing from being optimised out */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, size_t n)
{
    qsort(v, n, sizeof v[0], cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void to_hex(char *out, const uint8_t *in, size_t n)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", in[i]);
}

/* ------------------------------------------------------------------------
** Ours.
** --------------------------------------------------------------------- */

/* Median throughput (MB/s) of wk_blake3() on data[0..len). */
static double bench_ours(const uint8_t *data, size_t len, int runs)
{
    uint8_t out[WK_BLAKE3_OUT_LEN];
    double mbps[64];
    size_t reps = 1;

    /* Calibrate: double the repetitions until one run takes long enough. */
    for (;;) {
        double t0 = now();
        for (size_t r = 0; r < reps; r++) {
            wk_blake3(data, len, out);
            sink ^= out[0];
        }
        if (now() - t0 >= MIN_RUN_SECONDS)
            break;
        reps *= 2;
    }
    for (int i = 0; i < runs; i++) {
        double t0 = now();
        for (size_t r = 0; r < reps; r++) {
            wk_blake3(data, len, out);
            sink ^= out[0];
        }
        double t = now() - t0;
        mbps[i] = (double)len * (double)reps / t / 1e6;
    }
    return median(mbps, (size_t)runs);
}

/* ------------------------------------------------------------------------
** b3sum.
** --------------------------------------------------------------------- */

/* Run `b3sum --num-threads 1 path` once; return its wall time in seconds,
** or -1 if it could not run or failed. If hex is not NULL, capture the
** first 64 characters of its output there (NUL-terminated). */
static double run_b3sum(const char *path, char hex[65])
{
    char *argv[] = {"b3sum", "--num-threads", "1", (char *)path, NULL};
    posix_spawn_file_actions_t fa;
    int fds[2] = {-1, -1};
    pid_t pid;
    int status;

    if (posix_spawn_file_actions_init(&fa) != 0)
        return -1;
    if (hex != NULL) {
        if (pipe(fds) != 0) {
            posix_spawn_file_actions_destroy(&fa);
            return -1;
        }
        posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
        posix_spawn_file_actions_addclose(&fa, fds[0]);
        posix_spawn_file_actions_addclose(&fa, fds[1]);
    } else {
        posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    }

    double t0 = now();
    int rc = posix_spawnp(&pid, "b3sum", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
        if (hex != NULL) {
            close(fds[0]);
            close(fds[1]);
        }
        return -1;
    }
    if (hex != NULL) {
        size_t got = 0;
        ssize_t n;
        close(fds[1]);
        while (got < 64 && (n = read(fds[0], hex + got, 64 - got)) > 0)
            got += (size_t)n;
        hex[got] = '\0';
        char drain[256];
        while (read(fds[0], drain, sizeof drain) > 0)
            ;
        close(fds[0]);
    }
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR)
            return -1;
    }
    double t = now() - t0;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return -1;
    return t;
}

/* Median wall times of b3sum over files path[0..n), runs interleaved
** (file 0, 1, ..., n-1, 0, 1, ...) so that load changes on the machine
** affect every file alike. A first run of each file checks its hash
** against want[i] (64 hex digits). Returns -1 if b3sum could not run. */
static int bench_b3sum(char (*path)[64], char (*want)[65], size_t n, int runs, double *median_out)
{
    static double t[NSIZES + 1][64];
    char hex[65];

    for (size_t i = 0; i < n; i++) {
        if (run_b3sum(path[i], hex) < 0)
            return -1;
        if (strcmp(hex, want[i]) != 0) {
            fprintf(stderr, "b3sum disagrees on %s:\n  b3sum %s\n  ours  %s\n", path[i], hex,
                    want[i]);
            exit(1);
        }
    }
    for (int r = 0; r < runs; r++) {
        for (size_t i = 0; i < n; i++) {
            t[i][r] = run_b3sum(path[i], NULL);
            if (t[i][r] < 0)
                return -1;
        }
    }
    for (size_t i = 0; i < n; i++)
        median_out[i] = median(t[i], (size_t)runs);
    return 0;
}

static int write_file(const char *path, const uint8_t *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        return -1;
    size_t n = fwrite(data, 1, len, f);
    return (fclose(f) == 0 && n == len) ? 0 : -1;
}

/* ------------------------------------------------------------------------
** Main.
** --------------------------------------------------------------------- */

int main(int argc, char **argv)
{
    int runs = 7, use_b3sum = 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
            runs = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--no-b3sum") == 0) {
            use_b3sum = 0;
        } else {
            fprintf(stderr, "usage: %s [--runs N] [--no-b3sum]\n", argv[0]);
            return 2;
        }
    }
    if (runs < 5)
        runs = 5; /* the median of fewer runs is not worth printing */
    if (runs > 63)
        runs = 63;

    /* Deterministic pseudo-random bytes (xorshift64). */
    size_t max_len = sizes[NSIZES - 1].len;
    uint8_t *data = malloc(max_len);
    if (data == NULL) {
        perror("malloc");
        return 1;
    }
    uint64_t x = 0x9E3779B97F4A7C15u;
    for (size_t i = 0; i < max_len; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        data[i] = (uint8_t)(x >> 56);
    }

    const char *best = wk_blake3_implementation();
    printf("wakuwaku BLAKE3, median of %d runs (each >= %.0f ms), MB = 10^6 bytes\n", runs,
           MIN_RUN_SECONDS * 1000);
    printf("automatic choice on this CPU: %s\n\n", best);
    printf("%-10s %-8s %10s\n", "impl", "size", "MB/s");

    double ours_best[NSIZES] = {0};
    for (size_t i = 0; i < NIMPLS; i++) {
        if (wk__blake3_force(impls[i]) != 0) {
            printf("%-10s (not available on this CPU)\n", impls[i]);
            continue;
        }
        for (size_t s = 0; s < NSIZES; s++) {
            double mbps = bench_ours(data, sizes[s].len, runs);
            printf("%-10s %-8s %10.0f\n", impls[i], sizes[s].name, mbps);
            if (strcmp(impls[i], best) == 0)
                ours_best[s] = mbps;
        }
    }
    wk__blake3_force(NULL);

    if (!use_b3sum) {
        free(data);
        return 0;
    }

    /* b3sum on the same bytes, from files: path[0] is empty (start-up
    ** cost), path[1 + s] holds sizes[s]. */
    char dir[] = "/tmp/bench_blake3.XXXXXX";
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        free(data);
        return 1;
    }
    char path[NSIZES + 1][64], want[NSIZES + 1][65];
    double t[NSIZES + 1];
    int ok = 1;
    for (size_t i = 0; i <= NSIZES; i++) {
        size_t len = i == 0 ? 0 : sizes[i - 1].len;
        uint8_t out[WK_BLAKE3_OUT_LEN];
        snprintf(path[i], sizeof path[i], "%s/data-%zu", dir, len);
        ok &= write_file(path[i], data, len) == 0;
        wk_blake3(data, len, out);
        to_hex(want[i], out, sizeof out);
    }

    int b3runs = runs < 11 ? 11 : runs;
    if (!ok) {
        fprintf(stderr, "cannot write the data files in %s\n", dir);
    } else if (bench_b3sum(path, want, NSIZES + 1, b3runs, t) != 0) {
        printf("\nb3sum not found or failed; no comparison.\n");
    } else {
        printf("\nb3sum --num-threads 1 FILE (whole process, file in page cache), "
               "median of %d runs\n",
               b3runs);
        printf("%-8s %10s %10s %16s %18s\n", "size", "time ms", "MB/s", "MB/s w/o start",
               "ours/b3sum");
        /* Start-up: the 1 KiB run, whose hashing takes about a
        ** microsecond; it goes through the same file code as the others
        ** (the empty file is shown, but b3sum takes a slower path there). */
        double startup = t[1];
        printf("%-8s %10.2f %10s %16s %18s\n", "empty", t[0] * 1e3, "-", "-", "-");
        for (size_t s = 0; s < NSIZES; s++) {
            double ts = t[1 + s];
            double raw = (double)sizes[s].len / ts / 1e6;
            double net_t = ts - startup;
            /* Unless hashing takes a good part of the process time, the
            ** difference is mostly noise: no ratio. */
            if (net_t < startup / 2) {
                printf("%-8s %10.2f %10.1f %16s %18s\n", sizes[s].name, ts * 1e3, raw, "-",
                       "n/a (start-up)");
            } else {
                double net = (double)sizes[s].len / net_t / 1e6;
                char ratio[32];
                snprintf(ratio, sizeof ratio, "%.2f / %.2f", ours_best[s] / raw,
                         ours_best[s] / net);
                printf("%-8s %10.2f %10.0f %16.0f %18s\n", sizes[s].name, ts * 1e3, raw, net,
                       ratio);
            }
        }
        printf("MB/s w/o start: size / (time - time of the 1 KiB run).\n"
               "ratio: ours (%s) / b3sum raw, and / b3sum without start-up (stricter).\n"
               "b3sum's hashes matched ours on every file.\n",
               best);
    }

    for (size_t s = 0; s <= NSIZES; s++)
        remove(path[s]);
    rmdir(dir);
    free(data);
    return 0;
}
