/*
 * bench/bench_codegen.c — how long wk-codegen takes on a big schema: 1,000
 * entities of every kind (a typed body on every cache), 50 records and 20
 * capabilities, generated into a temporary directory. Reports the best
 * and median wall time of several runs of the real program (process start
 * included) and the size of the output. The target is under a second; this
 * is a report, not a test.
 *
 *   bench_codegen [entities] [runs]     (default 1000 entities, 7 runs)
 */
#define _POSIX_C_SOURCE 200809L
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"

#ifndef WK_CODEGEN_PATH
#define WK_CODEGEN_PATH "codegen/wk-codegen"
#endif

extern char **environ;

static const char *const kinds[] = {"Lock", "RwLock", "Cache", "HashedCache", "TokenBucket"};
static const char *const names[] = {"u64", "str", "i64", "bytes"};

static void write_schema(const char *path, int n_entities, int n_records, int n_caps)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        exit(1);
    }
    fprintf(f, "{\n  \"service\": \"big\",\n  \"entities\": [\n");
    for (int i = 0; i < n_entities; i++) {
        const char *kind = kinds[i % 5];
        fprintf(f, "    {\"id\": \"e%d\", \"kind\": \"%s\", \"namespace\": \"ns%d\", "
                   "\"name\": \"%s\"",
                i, kind, i, names[i % 4]);
        if (strcmp(kind, "TokenBucket") == 0)
            fprintf(f, ", \"capacity\": %d, \"rate\": 1.5, \"period\": \"3s\"", 10 + i % 7);
        else
            fprintf(f, ", \"ttl\": \"%ds\"", 1 + i % 60);
        if (strstr(kind, "Cache"))
            fprintf(f, ", \"body\": \"r%d\"", i % n_records);
        fprintf(f, "}%s\n", i + 1 < n_entities ? "," : "");
    }
    fprintf(f, "  ],\n  \"records\": [\n");
    for (int r = 0; r < n_records; r++) {
        fprintf(f, "    {\"id\": \"r%d\", \"fields\": [\n", r);
        fprintf(f, "      {\"name\": \"id\", \"type\": \"u64\"},\n"
                   "      {\"name\": \"title\", \"type\": \"string\"},\n"
                   "      {\"name\": \"score\", \"type\": \"f64\", \"optional\": true},\n"
                   "      {\"name\": \"tags\", \"type\": \"string\", \"array\": true},\n"
                   "      {\"name\": \"blob\", \"type\": \"bytes\", \"optional\": true}");
        if (r > 0)
            fprintf(f, ",\n      {\"name\": \"prev\", \"type\": \"r%d\", \"array\": true}",
                    r - 1);
        fprintf(f, "\n    ]}%s\n", r + 1 < n_records ? "," : "");
    }
    fprintf(f, "  ],\n  \"capabilities\": [\n");
    for (int c = 0; c < n_caps; c++) {
        fprintf(f, "    {\"id\": \"c%d\", \"default\": \"%s\", \"grants\": {", c,
                c % 2 ? "read" : "none");
        for (int k = 0; k < 10; k++)
            fprintf(f, "%s\"e%d\": \"write\"", k ? ", " : "", (c * 37 + k * 11) % n_entities);
        fprintf(f, "}}%s\n", c + 1 < n_caps ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
    fclose(f);
}

static long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 1000;
    int runs = argc > 2 ? atoi(argv[2]) : 7;
    if (n < 1 || runs < 1 || runs > 100) {
        fprintf(stderr, "usage: bench_codegen [entities] [runs]\n");
        return 2;
    }
    char dir[] = "/tmp/wk-bench-codegen-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    char schema[256], out_h[256], out_c[256];
    snprintf(schema, sizeof(schema), "%s/schema.json", dir);
    snprintf(out_h, sizeof(out_h), "%s/big.h", dir);
    snprintf(out_c, sizeof(out_c), "%s/big.c", dir);
    write_schema(schema, n, 50, 20);

    double times[100];
    for (int r = 0; r < runs; r++) {
        char *args[] = {(char *)WK_CODEGEN_PATH, schema, (char *)"-o", dir, NULL};
        double t0 = now_s();
        pid_t pid;
        if (posix_spawn(&pid, WK_CODEGEN_PATH, NULL, NULL, args, environ) != 0) {
            perror(WK_CODEGEN_PATH);
            return 1;
        }
        int status;
        waitpid(pid, &status, 0);
        times[r] = now_s() - t0;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "wk-codegen failed (status %d)\n", status);
            return 1;
        }
    }
    qsort(times, (size_t)runs, sizeof(double), cmp_double);
    long hs = file_size(out_h), cs = file_size(out_c);
    printf("wk-codegen on %d entities, 50 records, 20 capabilities (schema %ld bytes):\n", n,
           file_size(schema));
    printf("  best %.1f ms, median %.1f ms over %d runs (target: < 1000 ms) -> %s\n",
           times[0] * 1e3, times[runs / 2] * 1e3, runs, times[runs / 2] < 1.0 ? "ok" : "SLOW");
    printf("  output: big.h %ld bytes, big.c %ld bytes\n", hs, cs);
    remove(schema);
    remove(out_h);
    remove(out_c);
    rmdir(dir);
    return 0;
}
