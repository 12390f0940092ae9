/*
 * bench/bench_live_view.c — LiveView commit and follow throughput, the
 * library against raw hiredis doing the same Redis work in the same run:
 * the same keys, the same commit script (EVALSHA of the library's own
 * source, collection/live_view_scripts.h), the same XREAD COUNT 128.
 *
 *   bench_live_view                     # starts its own redis-server
 *   bench_live_view --url redis://… --commits 20000 --reps 5
 *
 * Cases (each rep runs library then raw, on fresh names):
 *   commit      sequential commits (256-byte body, 16-byte diff, max_diffs 64)
 *   catch-up    a follower reading N committed diffs from version 1
 *               (resume + recv vs XREAD COUNT 128 loops copying each diff)
 *   live        one writer thread committing N while one follower (its own
 *               connection, blocking reads) receives them; the time until
 *               the follower has the last one
 * The table shows the median rate (operations per second) of the reps, the
 * ratio library/raw, and the client's CPU µs per operation (library, raw;
 * the live case counts writer and follower threads). Not a test: the machine is shared and noisy.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include <wakuwaku/wakuwaku.h>

#define BENCH_PROG "bench_live_view"
#include "bench/bench_util.h"
#include "collection/live_view_scripts.h"
#include "support.h" /* tests/support: a private redis-server */

#define BODY_LEN 256
#define DIFF_LEN 16

static const char *url;
static int commits = 20000, reps = 5, run_no;
static size_t consumed; /* bytes the followers saw, so no read is optimised away */
static char sha[41];
static uint8_t body[BODY_LEN], diff[DIFF_LEN];

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The client's CPU time (all its threads; the server is another process)
 * of the last timed section, per operation: it depends far less on the
 * machine's load than the wall time. */
static double cpu_start, last_cpu_us;

static void cpu_begin(void)
{
    cpu_start = clock_s(CLOCK_PROCESS_CPUTIME_ID);
}

static void cpu_end(void)
{
    last_cpu_us = (clock_s(CLOCK_PROCESS_CPUTIME_ID) - cpu_start) * 1e6 / commits;
}

typedef struct item {
    wk_entity e;
    char ns[32];
    wk_name name;
    char head[WK_KEY_MAX], log[WK_KEY_MAX];
    size_t head_len, log_len;
} item;

/* A fresh view for one run, created at version 1. */
static void fresh(item *it, wk_db *db, double max_diffs)
{
    snprintf(it->ns, sizeof(it->ns), "bench%d", run_no++);
    it->e = (wk_entity)WK_LIVE_VIEW_ENTITY(it->ns, max_diffs);
    it->name = wk_name_str("doc");
    wk_key_build(it->head, sizeof(it->head), &it->head_len, &it->e, &it->name, ":h");
    wk_key_build(it->log, sizeof(it->log), &it->log_len, &it->e, &it->name, ":l");
    bool created;
    if (wk_live_view_create(wk_db_processor(db), &it->e, it->name, body, BODY_LEN, &created) ||
        !created)
        die("create", wk_db_errmsg(db));
}

static void lib_commit(wk_db *db, const item *it, uint64_t parent)
{
    wk_live_view_commit_outcome out;
    if (wk_live_view_commit(wk_db_processor(db), &it->e, it->name, parent, diff, DIFF_LEN, body,
                            BODY_LEN, &out) ||
        out.result != WK_LIVE_VIEW_COMMITTED)
        die("commit", wk_db_errmsg(db));
}

static void raw_commit(redisContext *c, const item *it, uint64_t parent)
{
    char par[24], max[24];
    snprintf(par, sizeof(par), "%llu", (unsigned long long)parent);
    snprintf(max, sizeof(max), "%llu", (unsigned long long)it->e.capacity);
    const char *argv[9] = {"EVALSHA",          sha, "2", it->head, it->log, par, (const char *)diff,
                           (const char *)body, max};
    size_t len[9] = {7,           40,       1,        it->head_len, it->log_len,
                     strlen(par), DIFF_LEN, BODY_LEN, strlen(max)};
    redisReply *r = redisCommandArgv(c, 9, argv, len);
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0]->integer != 2)
        die("raw commit", r && r->type == REDIS_REPLY_ERROR ? r->str : "bad reply");
    freeReplyObject(r);
}

/* ------------------------------------------------------------------------
 * Cases: each returns operations per second
 * ---------------------------------------------------------------------- */

static double commit_lib(void)
{
    wk_db *db = bench_open_db(url);
    item it;
    fresh(&it, db, 64);
    cpu_begin();
    double t = now_s();
    for (int i = 1; i <= commits; i++)
        lib_commit(db, &it, (uint64_t)i);
    t = now_s() - t;
    cpu_end();
    wk_db_close(db);
    return commits / t;
}

static double commit_raw(void)
{
    wk_db *db = bench_open_db(url);
    redisContext *c = bench_open_raw(url);
    item it;
    fresh(&it, db, 64);
    cpu_begin();
    double t = now_s();
    for (int i = 1; i <= commits; i++)
        raw_commit(c, &it, (uint64_t)i);
    t = now_s() - t;
    cpu_end();
    redisFree(c);
    wk_db_close(db);
    return commits / t;
}

/* Follow `it` from version 1 to 1 + commits with the library. */
static void lib_follow(wk_db *db, const item *it)
{
    wk_live_view_sub *sub;
    if (wk_live_view_resume(wk_db_processor(db), &it->e, it->name, 1, NULL, &sub))
        die("resume", wk_db_errmsg(db));
    wk_live_view_event ev = WK_LIVE_VIEW_EVENT_INIT;
    while (wk_live_view_sub_version(sub) < (uint64_t)commits + 1) {
        /* A follower that falls behind a squash gets a snapshot. */
        if (wk_live_view_recv(sub, &ev) ||
            (ev.type != WK_LIVE_VIEW_DIFF && ev.type != WK_LIVE_VIEW_SNAPSHOT))
            die("recv", wk_live_view_sub_errmsg(sub));
        consumed += ev.len;
    }
    wk_live_view_sub_close(sub);
}

/* The same with raw XREAD: each entry's ID parsed and its diff (or, past
 * a squash, its base) looked up, as the library's recv does. */
static void raw_follow(redisContext *c, const item *it)
{
    unsigned long long after = 1;
    char id[48];
    while (after < (unsigned long long)commits + 1) {
        snprintf(id, sizeof(id), "%llu-0", after);
        const char *argv[8] = {"XREAD", "COUNT", "128", "BLOCK", "2000", "STREAMS", it->log, id};
        size_t len[8] = {5, 5, 3, 5, 4, 7, it->log_len, strlen(id)};
        redisReply *r = redisCommandArgv(c, 8, argv, len);
        if (r && r->type == REDIS_REPLY_NIL) {
            freeReplyObject(r); /* the writer has not started yet */
            continue;
        }
        if (!r || r->type != REDIS_REPLY_ARRAY)
            die("raw xread", "bad reply");
        const redisReply *list = r->element[0]->element[1];
        for (size_t i = 0; i < list->elements; i++) {
            const redisReply *e = list->element[i];
            unsigned long long w = strtoull(e->element[0]->str, NULL, 10);
            const redisReply *f = e->element[1];
            const char *want = w == after + 1 ? "diff" : "base";
            const redisReply *found = NULL;
            for (size_t j = 0; j + 1 < f->elements && !found; j += 2) {
                if (f->element[j]->len == 4 && memcmp(f->element[j]->str, want, 4) == 0)
                    found = f->element[j + 1];
            }
            if (!found)
                die("raw xread", "an entry without its diff or base");
            consumed += found->len;
            after = w;
        }
        freeReplyObject(r);
    }
}

/* A view holding `commits` diffs after its base (no squash). */
static void prefill(wk_db *db, item *it)
{
    fresh(it, db, commits + 1);
    wk_batch *b;
    if (wk_batch_open(&b, db))
        die("batch", wk_db_errmsg(db));
    wk_live_view_commit_outcome *out = malloc(sizeof(*out) * 256);
    for (int i = 1; i <= commits;) {
        int n = 0;
        for (; n < 256 && i <= commits; n++, i++)
            wk_live_view_commit(wk_batch_processor(b), &it->e, it->name, (uint64_t)i, diff,
                                DIFF_LEN, body, BODY_LEN, &out[n]);
        if (wk_batch_exec(b))
            die("prefill", wk_db_errmsg(db));
    }
    free(out);
    wk_batch_close(b);
}

static double catchup_lib(void)
{
    wk_db *db = bench_open_db(url);
    item it;
    prefill(db, &it);
    cpu_begin();
    double t = now_s();
    lib_follow(db, &it);
    t = now_s() - t;
    cpu_end();
    wk_db_close(db);
    return commits / t;
}

static double catchup_raw(void)
{
    wk_db *db = bench_open_db(url);
    redisContext *c = bench_open_raw(url);
    item it;
    prefill(db, &it);
    cpu_begin();
    double t = now_s();
    raw_follow(c, &it);
    t = now_s() - t;
    cpu_end();
    redisFree(c);
    wk_db_close(db);
    return commits / t;
}

typedef struct writer {
    const item *it;
    bool raw;
} writer;

static void *write_all(void *arg)
{
    writer *w = arg;
    if (w->raw) {
        redisContext *c = bench_open_raw(url);
        for (int i = 1; i <= commits; i++)
            raw_commit(c, w->it, (uint64_t)i);
        redisFree(c);
    } else {
        wk_db *db = bench_open_db(url);
        for (int i = 1; i <= commits; i++)
            lib_commit(db, w->it, (uint64_t)i);
        wk_db_close(db);
    }
    return NULL;
}

static double live(bool raw)
{
    wk_db *db = bench_open_db(url);
    redisContext *c = bench_open_raw(url);
    item it;
    fresh(&it, db, 64);
    writer w = {&it, raw};
    pthread_t t;
    cpu_begin();
    double t0 = now_s();
    pthread_create(&t, NULL, write_all, &w);
    if (raw)
        raw_follow(c, &it);
    else
        lib_follow(db, &it);
    pthread_join(t, NULL);
    double dt = now_s() - t0;
    cpu_end();
    redisFree(c);
    wk_db_close(db);
    return commits / dt;
}

static double live_lib(void)
{
    return live(false);
}

static double live_raw(void)
{
    return live(true);
}

/* ------------------------------------------------------------------------ */

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void run_case(const char *what, double (*lib)(void), double (*raw)(void))
{
    double l[64], r[64], lc[64], rc[64];
    for (int i = 0; i < reps; i++) {
        l[i] = lib();
        lc[i] = last_cpu_us;
        r[i] = raw();
        rc[i] = last_cpu_us;
    }
    qsort(l, (size_t)reps, sizeof(double), cmp_d);
    qsort(r, (size_t)reps, sizeof(double), cmp_d);
    qsort(lc, (size_t)reps, sizeof(double), cmp_d);
    qsort(rc, (size_t)reps, sizeof(double), cmp_d);
    double lm = l[reps / 2], rm = r[reps / 2], lcm = lc[reps / 2], rcm = rc[reps / 2];
    printf("| %-10s | %10.0f | %10.0f | %5.3f | %7.2f | %7.2f |\n", what, lm, rm, lm / rm, lcm,
           rcm);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--url") == 0 && i + 1 < argc)
            url = argv[++i];
        else if (strcmp(argv[i], "--commits") == 0 && i + 1 < argc)
            commits = atoi(argv[++i]);
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps = atoi(argv[++i]);
        else
            die("usage", "bench_live_view [--url URL] [--commits N] [--reps N]");
    }
    if (commits < 1 || reps < 1 || reps > 64)
        die("usage", "--commits >= 1, --reps 1..64");
    wk_test_server server = {0};
    if (!url) {
        if (wk_test_server_start(&server, NULL) != 0)
            die("redis-server", "cannot start");
        url = server.url;
    }
    for (int i = 0; i < BODY_LEN; i++)
        body[i] = (uint8_t)('a' + i % 26);
    memset(diff, 'd', sizeof(diff));
    redisContext *c = bench_open_raw(url);
    bench_script_load(c, wk__live_view_commit_script.source, sha);
    redisFree(c);

    printf("%d commits per run, %d reps (median), ops/s\n\n", commits, reps);
    printf("| case       |    library |        raw | ratio | lib CPU | raw CPU |\n");
    printf("|------------|------------|------------|-------|---------|---------|\n");
    run_case("commit", commit_lib, commit_raw);
    run_case("catch-up", catchup_lib, catchup_raw);
    run_case("live", live_lib, live_raw);
    fprintf(stderr, "(%zu bytes followed)\n", consumed);
    if (server.pid)
        wk_test_server_stop(&server);
    return 0;
}
