/*
 * bench/bench_redis.c — the library against raw hiredis doing exactly the
 * same Redis work, in one run, on a redis-server this program starts.
 *
 * For each case, sequential (one query per round trip) and batched (64
 * queries per round trip: wk_batch vs hiredis pipelining), it alternates
 * library and raw runs, takes the median ops/s of REPS repetitions of each,
 * and prints the ratio library/raw. The raw side builds the same keys,
 * draws the same random tokens and sends the same commands and scripts.
 *
 *   bench_redis                    # start a redis-server, run every case
 *   bench_redis --url redis://…    # use a running server instead
 *   bench_redis --reps 7 --quick   # fewer operations per repetition
 *   bench_redis --scripts          # only the server-time table per script
 *   bench_redis --no-scripts       # only the library/raw table
 *   bench_redis --case bucket      # only the cases whose name contains "bucket"
 *   bench_redis --callgrind N …    # only N library lock cycles (for valgrind)
 *   bench_redis --tls              # also: lock cycles over TLS vs plain TCP, the library's
 *                                  # and a raw OpenSSL client's against hiredis (bench_tls.c);
 *                                  # with --callgrind N: the N cycles go over TLS
 *   bench_redis --async            # also: 64 in flight on an event-loop handle vs batch-64
 *   bench_redis --replicas         # also: lock cycles with WAIT 1 (acknowledged leases) and
 *                                  # through redis-sentinel:// vs plain, on a Sentinel topology
 *                                  # (certificates made with `openssl`)
 *   bench_redis --pool             # only: 8 threads on a pool of 4 vs 8
 *                                  # threads with a handle each (bench_pool.c)
 *   bench_redis --cluster          # also: lock cycles and 64-query batches against a
 *                                  # 3-primary Redis Cluster vs the single server
 *                                  # (with --async: also 64 in flight on an event-loop
 *                                  # handle on the cluster vs its batches of 64)
 *
 * Then, per Lua script of the library, the server's own time per call
 * (INFO commandstats) next to the smallest script doing the same job
 * (bench_scripts.c).
 *
 * Not a test: the machines are shared and noisy; read ratios, not times.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>
#include <sodium.h>

#include <wakuwaku/wakuwaku.h>

#include "bench/bench_cases.h"
#include "bench/bench_util.h"
#include "support.h"                 /* tests/support: a private redis-server */
#include "collection/lock_scripts.h" /* the raw side runs the same Lua */
#include "core/core_internal.h"            /* wk__key_slot: the raw cluster side's routing */

#define BATCH 64

/* ------------------------------------------------------------------------
 * Shared state of a run
 * ---------------------------------------------------------------------- */

static void die(const char *what, const char *detail)
{
    fprintf(stderr, "bench: %s: %s\n", what, detail);
    exit(1);
}

void bench_check(int rc, bench_ctx *c, const char *what)
{
    if (rc != WK_OK)
        die(what, wk_db_errmsg(c->db));
}

redisReply *bench_raw_reply(bench_ctx *c)
{
    redisReply *r = NULL;
    if (c->raw_tls)
        r = bench_tls_raw_reply(c->raw_tls);
    else if (redisGetReply(c->raw, (void **)&r) != REDIS_OK || !r)
        die("raw reply", c->raw->errstr);
    if (r->type == REDIS_REPLY_ERROR)
        die("raw reply", r->str);
    return r;
}

void bench_raw_append(bench_ctx *c, int argc, const char **argv, const size_t *lens)
{
    if (c->raw_tls)
        bench_tls_raw_append(c->raw_tls, argc, argv, lens);
    else if (redisAppendCommandArgv(c->raw, argc, argv, lens) != REDIS_OK)
        die("raw append", c->raw->errstr);
}

void bench_raw_load(bench_ctx *c, const wk_script *s, char sha[41])
{
    redisReply *r = redisCommand(c->raw, "SCRIPT LOAD %s", s->source);
    if (!r || r->type != REDIS_REPLY_STRING || r->len != 40)
        die("SCRIPT LOAD", c->raw->errstr);
    memcpy(sha, r->str, 41);
    freeReplyObject(r);
}

size_t bench_key(char *buf, const char *kind, const char *ns, unsigned n, const char *suffix)
{
    if (suffix)
        return (size_t)sprintf(buf, "@@wakuwaku-entity:%s:{%s:%u}%s", kind, ns, n, suffix);
    return (size_t)sprintf(buf, "@@wakuwaku-entity:%s:%s:%u", kind, ns, n);
}

/* ------------------------------------------------------------------------
 * Lock try + release
 * ---------------------------------------------------------------------- */

static const wk_entity bench_lock = WK_LOCK_ENTITY("bench", 30000);
static char release_sha[41], try_sha[41];

static void lock_lib(bench_ctx *c, wk_processor *p, unsigned i, wk_token *t, bool *got)
{
    bench_check(wk_lock_try(p, &bench_lock, wk_name_u64(i), t, got), c, "lock.try");
}

static void lock_lib_release(bench_ctx *c, wk_processor *p, unsigned i, wk_token *t, bool *ok)
{
    bench_check(wk_lock_release(p, &bench_lock, wk_name_u64(i), t, ok), c, "lock.release");
}

static void lock_seq_lib(bench_ctx *c, unsigned i)
{
    wk_token t;
    bool got, ok;
    lock_lib(c, wk_db_processor(c->db), i, &t, &got);
    lock_lib_release(c, wk_db_processor(c->db), i, &t, &ok);
    if (!got || !ok)
        die("lock cycle", "not acquired/released");
}

/* The release script's wake keys (collection/wake.h): a key without a
 * hash tag and without '}' is the tag of its companions; a key with a tag
 * is their prefix. */
typedef struct wake_raw {
    char q[160], e[160], w[160];
    size_t ql, el, wl;
} wake_raw;

static void wake_raw_keys(wake_raw *k, const char *key, size_t klen, bool tagged)
{
    const char *open = tagged ? "" : "{", *close = tagged ? "" : "}";
    k->ql = (size_t)sprintf(k->q, "%s%.*s%s:q", open, (int)klen, key, close);
    k->el = (size_t)sprintf(k->e, "%s%.*s%s:e", open, (int)klen, key, close);
    k->wl = (size_t)sprintf(k->w, "%s%.*s%s:w:", open, (int)klen, key, close);
}

static void lock_raw_send(bench_ctx *c, unsigned i, unsigned char tok[16], char *key, size_t *klen)
{
    *klen = bench_key(key, "Lock", "bench", i, NULL);
    randombytes_buf(tok, 16);
    wake_raw k;
    wake_raw_keys(&k, key, *klen, false);
    /* The library's try: SET NX PX in a script that looks, when it fails,
     * for a lock handed to a waiter that never took it. */
    const char *argv[] = {"EVALSHA", try_sha, "1", key, (const char *)tok, "30000", k.w};
    size_t lens[] = {7, 40, 1, *klen, 16, 5, k.wl};
    bench_raw_append(c, 7, argv, lens);
}

static void lock_raw_release_send(bench_ctx *c, const unsigned char tok[16], const char *key,
                                  size_t klen)
{
    wake_raw k;
    wake_raw_keys(&k, key, klen, false);
    /* ARGV token, w, ttl: the library's (the ttl is read only when
     * somebody waits: the release then hands the lock over). */
    const char *argv[] = {"EVALSHA", release_sha, "3", key, k.q, k.e, (const char *)tok, k.w,
                          "30000"};
    size_t lens[] = {7, 40, 1, klen, k.ql, k.el, 16, k.wl, 5};
    bench_raw_append(c, 9, argv, lens);
}

/* The try script, then the release script; `acked`: WAIT 1 1000 in the same
 * send as the SET (two replies read) — the raw floor of an acknowledged
 * cycle (--replicas). */
static void lock_raw_cycle(bench_ctx *c, unsigned i, bool acked)
{
    unsigned char tok[16];
    char key[128];
    size_t klen;
    lock_raw_send(c, i, tok, key, &klen);
    if (acked) {
        const char *wait_argv[] = {"WAIT", "1", "1000"};
        size_t wait_lens[] = {4, 1, 4};
        bench_raw_append(c, 3, wait_argv, wait_lens);
    }
    redisReply *r = bench_raw_reply(c);
    if (r->type != REDIS_REPLY_INTEGER || r->integer != 1)
        die("raw lock", "not acquired");
    freeReplyObject(r);
    if (acked) {
        r = bench_raw_reply(c);
        if (r->type != REDIS_REPLY_INTEGER || r->integer < 1)
            die("raw WAIT", "not acknowledged by the replica");
        freeReplyObject(r);
    }
    lock_raw_release_send(c, tok, key, klen);
    r = bench_raw_reply(c);
    if (r->integer != 1)
        die("raw release", "not released");
    freeReplyObject(r);
}

static void lock_seq_raw(bench_ctx *c, unsigned i)
{
    lock_raw_cycle(c, i, false);
}

static void lock_seq_raw_acked(bench_ctx *c, unsigned i)
{
    lock_raw_cycle(c, i, true);
}

static void lock_batch_lib(bench_ctx *c, unsigned base)
{
    wk_token t[BATCH];
    bool got[BATCH], ok[BATCH];
    wk_processor *p = wk_batch_processor(c->batch);
    for (unsigned k = 0; k < BATCH; k++)
        lock_lib(c, p, base + k, &t[k], &got[k]);
    bench_check(wk_batch_exec(c->batch), c, "batch lock.try");
    for (unsigned k = 0; k < BATCH; k++)
        lock_lib_release(c, p, base + k, &t[k], &ok[k]);
    bench_check(wk_batch_exec(c->batch), c, "batch lock.release");
    for (unsigned k = 0; k < BATCH; k++)
        if (!got[k] || !ok[k])
            die("batch lock cycle", "not acquired/released");
}

static void lock_batch_raw(bench_ctx *c, unsigned base)
{
    unsigned char tok[BATCH][16];
    char key[BATCH][128];
    size_t klen[BATCH];
    for (unsigned k = 0; k < BATCH; k++)
        lock_raw_send(c, base + k, tok[k], key[k], &klen[k]);
    for (unsigned k = 0; k < BATCH; k++)
        freeReplyObject(bench_raw_reply(c));
    for (unsigned k = 0; k < BATCH; k++)
        lock_raw_release_send(c, tok[k], key[k], klen[k]);
    for (unsigned k = 0; k < BATCH; k++)
        freeReplyObject(bench_raw_reply(c));
}

/* ------------------------------------------------------------------------
 * RwLock read acquire + release
 * ---------------------------------------------------------------------- */

static const wk_entity bench_rw = WK_RWLOCK_ENTITY("bench", 30000);
static char try_read_sha[41], release_read_sha[41];

static void rw_seq_lib(bench_ctx *c, unsigned i)
{
    wk_token t;
    bool got, ok;
    wk_processor *p = wk_db_processor(c->db);
    bench_check(wk_rwlock_try_read(p, &bench_rw, wk_name_u64(i), &t, &got), c, "try_read");
    bench_check(wk_rwlock_release_read(p, &bench_rw, wk_name_u64(i), &t, &ok), c, "release_read");
    if (!got || !ok)
        die("rw cycle", "not acquired/released");
}

typedef struct rw_raw {
    unsigned char tok[16];
    char w[128], r[128];
    size_t wl, rl;
} rw_raw;

static void rw_raw_send(bench_ctx *c, unsigned i, rw_raw *s)
{
    s->wl = bench_key(s->w, "RwLock", "bench", i, ":w");
    s->rl = bench_key(s->r, "RwLock", "bench", i, ":r");
    randombytes_buf(s->tok, 16);
    wake_raw k;
    wake_raw_keys(&k, s->w, s->wl, true); /* the writer key's companions */
    const char *argv[] = {"EVALSHA", try_read_sha, "4",  s->w, k.q, k.e, s->r,
                          (const char *)s->tok, "30000", k.w, "-1"};
    size_t lens[] = {7, 40, 1, s->wl, k.ql, k.el, s->rl, 16, 5, k.wl, 2};
    bench_raw_append(c, 11, argv, lens);
}

static void rw_raw_release_send(bench_ctx *c, const rw_raw *s)
{
    wake_raw k;
    wake_raw_keys(&k, s->w, s->wl, true); /* the writer key's companions */
    const char *argv[] = {"EVALSHA", release_read_sha,     "4", s->r, k.q, k.e, s->w,
                          (const char *)s->tok, k.w, "30000"};
    size_t lens[] = {7, 40, 1, s->rl, k.ql, k.el, s->wl, 16, k.wl, 5};
    bench_raw_append(c, 10, argv, lens);
}

static void rw_seq_raw(bench_ctx *c, unsigned i)
{
    rw_raw s;
    rw_raw_send(c, i, &s);
    freeReplyObject(bench_raw_reply(c));
    rw_raw_release_send(c, &s);
    freeReplyObject(bench_raw_reply(c));
}

static void rw_batch_lib(bench_ctx *c, unsigned base)
{
    wk_token t[BATCH];
    bool got[BATCH], ok[BATCH];
    wk_processor *p = wk_batch_processor(c->batch);
    for (unsigned k = 0; k < BATCH; k++)
        wk_rwlock_try_read(p, &bench_rw, wk_name_u64(base + k), &t[k], &got[k]);
    bench_check(wk_batch_exec(c->batch), c, "batch try_read");
    for (unsigned k = 0; k < BATCH; k++)
        wk_rwlock_release_read(p, &bench_rw, wk_name_u64(base + k), &t[k], &ok[k]);
    bench_check(wk_batch_exec(c->batch), c, "batch release_read");
}

static void rw_batch_raw(bench_ctx *c, unsigned base)
{
    rw_raw s[BATCH];
    for (unsigned k = 0; k < BATCH; k++)
        rw_raw_send(c, base + k, &s[k]);
    for (unsigned k = 0; k < BATCH; k++)
        freeReplyObject(bench_raw_reply(c));
    for (unsigned k = 0; k < BATCH; k++)
        rw_raw_release_send(c, &s[k]);
    for (unsigned k = 0; k < BATCH; k++)
        freeReplyObject(bench_raw_reply(c));
}

static void locks_setup(bench_ctx *c)
{
    bench_raw_load(c, &wk__lock_release_script, release_sha);
    bench_raw_load(c, &wk__lock_try_script, try_sha);
    bench_raw_load(c, &wk__rwlock_try_read_script, try_read_sha);
    bench_raw_load(c, &wk__rwlock_release_read_script, release_read_sha);
}

static const bench_case lock_cases[] = {
    {"lock try+release", locks_setup, lock_seq_lib, lock_seq_raw, lock_batch_lib, lock_batch_raw},
    {"rwlock read acquire+release", NULL, rw_seq_lib, rw_seq_raw, rw_batch_lib, rw_batch_raw},
};

/* ------------------------------------------------------------------------
 * The runner
 * ---------------------------------------------------------------------- */


static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

typedef void (*op_fn)(bench_ctx *, unsigned);

/* ops/s of `ops` operations done by `fn` in steps of `step`. */
static double timed(bench_ctx *c, op_fn fn, unsigned ops, unsigned step)
{
    double t0 = now_s();
    for (unsigned i = 0; i < ops; i += step)
        fn(c, i);
    return ops / (now_s() - t0);
}

static const char *case_filter; /* --case: a substring of the names to run */

/* ------------------------------------------------------------------------
 * --tls: the same sequential lock cycle over rediss:// and redis:// to one
 * server, library and raw (the ratio TLS/TCP of each)
 * ---------------------------------------------------------------------- */

static char tls_dir[64];

/* One side of the TLS table: a context, its cycle, its rates and the CPU
 * time spent by this thread [0] and by the server's main thread [1]. */
typedef struct tls_side {
    const char *name;
    bench_ctx *c;
    op_fn fn;
    double rate[32];
    long long cpu[2];
} tls_side;

static void tls_side_run(tls_side *s, int r, unsigned ops, long server_pid)
{
    long long me0[2], me1[2], sv0[2], sv1[2];
    bench_cpu_ns(getpid(), me0);
    bench_cpu_ns(server_pid, sv0);
    s->rate[r] = timed(s->c, s->fn, ops, 1);
    bench_cpu_ns(getpid(), me1);
    bench_cpu_ns(server_pid, sv1);
    s->cpu[0] += me1[0] - me0[0];
    s->cpu[1] += sv1[0] - sv0[0];
}

/* One row: a against b, the median rates, their ratio and the lowest and
 * highest ratio of one repetition's pair. */
static void tls_row(const char *name, const tls_side *a, const tls_side *b, int reps)
{
    double ra[32], rb[32], q[32];
    for (int r = 0; r < reps; r++) {
        ra[r] = a->rate[r];
        rb[r] = b->rate[r];
        q[r] = a->rate[r] / b->rate[r];
    }
    double x = median(ra, reps), y = median(rb, reps);
    median(q, reps); /* sorted: the spread is q[0]..q[reps - 1] */
    printf("| %-46s | %9.0f | %9.0f | %5.3f | %.3f-%.3f |\n", name, x, y, x / y, q[0], q[reps - 1]);
}

/* `c` with its handle replaced by one over TLS to the same server. */
static bench_ctx tls_ctx(const bench_ctx *c, const char *tls_port_line)
{
    char url[64], ca[128], err[256];
    snprintf(url, sizeof(url), "rediss://127.0.0.1:%s", tls_port_line + strlen("tls-port "));
    snprintf(ca, sizeof(ca), "%s/ca.crt", tls_dir);
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = url;
    o.capability = wk_cap_read_write();
    o.tls_ca_file = ca;
    bench_ctx t = *c;
    if (wk_db_open(&t.db, &o, err, sizeof(err)) != WK_OK)
        die("wk_db_open (TLS)", err);
    return t;
}

/* The library's lock cycle over TLS and over TCP, and the raw floor's
 * (a minimal OpenSSL client, bench_tls.c, and hiredis) doing the same
 * commands; the four runs of a repetition in a rotating order. */
static void tls_vs_tcp(bench_ctx *c, const char *tls_port_line, int reps, unsigned ops,
                       long server_pid)
{
    char ca[128];
    snprintf(ca, sizeof(ca), "%s/ca.crt", tls_dir);
    locks_setup(c); /* the raw cycle's release script */
    bench_ctx lib_tls = tls_ctx(c, tls_port_line), raw_tls = *c;
    raw_tls.raw_tls = bench_tls_raw_open(atoi(tls_port_line + strlen("tls-port ")), ca);
    tls_side side[4] = {{"library TLS", &lib_tls, lock_seq_lib, {0}, {0}},
                        {"library TCP", c, lock_seq_lib, {0}, {0}},
                        {"raw TLS", &raw_tls, lock_seq_raw, {0}, {0}},
                        {"raw TCP", c, lock_seq_raw, {0}, {0}}};
    for (int k = 0; k < 4; k++)
        timed(side[k].c, side[k].fn, ops / 4, 1); /* warm-up */
    for (int r = 0; r < reps; r++)
        for (int k = 0; k < 4; k++)
            tls_side_run(&side[(r + k) % 4], r, ops, server_pid);
    printf("Lock try + release, sequential, %d repetitions of %u cycles, median cycles/s\n\n",
           reps, ops);
    printf("| %-46s | %9s | %9s | %5s | %-11s |\n", "case", "a", "b", "a/b", "spread");
    printf("|%s|%s|%s|%s|%s|\n", "------------------------------------------------",
           "-----------", "-----------", "-------", "-------------");
    tls_row("library: TLS (a) vs TCP (b)", &side[0], &side[1], reps);
    tls_row("raw floor: OpenSSL TLS (a) vs hiredis TCP (b)", &side[2], &side[3], reps);
    tls_row("over TLS: library (a) vs raw OpenSSL (b)", &side[0], &side[2], reps);
    /* Where the time goes: CPU per cycle of each process (schedstat). */
    double n = (double)ops * reps * 1000.0;
    printf("\nCPU µs per cycle (this thread / redis-server's main thread):");
    for (int k = 0; k < 4; k++)
        printf("%s %s %.1f / %.1f", k ? ";" : "", side[k].name, side[k].cpu[0] / n,
               side[k].cpu[1] / n);
    printf("\n\n");
    fflush(stdout);
    bench_tls_raw_close(raw_tls.raw_tls);
    wk_db_close(lib_tls.db);
}

/* ------------------------------------------------------------------------
 * --replicas: on a primary + replica + 3 sentinels (tests/support), the
 * sequential lock cycle plain (redis:// to the primary), with WAIT 1
 * behind each acquire (lease_replicas = 1), and through
 * redis-sentinel:// (library; ratios against plain, same run); then raw
 * hiredis doing the same two cycles (lock.try, and lock.try + WAIT 1 in
 * one send): the floor the acknowledged cycle is measured against.
 * ---------------------------------------------------------------------- */

enum { REPL_CASES = 5 };

static void replicas_run(int reps, unsigned ops)
{
    wk_test_sentinels t;
    if (wk_test_sentinels_start(&t, NULL, NULL) != 0)
        die("sentinel topology", "could not start it");
    const char *urls[3] = {t.primary.url, t.primary.url, t.url};
    const char *names[REPL_CASES] = {
        "lock try + release (plain)", "  with WAIT 1 (lease_replicas = 1)",
        "  through redis-sentinel://", "raw hiredis: lock.try + release",
        "raw hiredis: + WAIT 1 in the same send"};
    bench_ctx h[REPL_CASES] = {{0}};
    op_fn fn[REPL_CASES] = {lock_seq_lib, lock_seq_lib, lock_seq_lib, lock_seq_raw,
                            lock_seq_raw_acked};
    for (int k = 0; k < 3; k++) {
        wk_db_options o = WK_DB_OPTIONS_INIT;
        o.url = urls[k];
        o.capability = wk_cap_read_write();
        o.lease_replicas = k == 1 ? 1 : 0;
        char err[256];
        if (wk_db_open(&h[k].db, &o, err, sizeof(err)) != WK_OK)
            die("wk_db_open (replicas)", err);
    }
    for (int k = 3; k < REPL_CASES; k++) {
        h[k].raw = wk_test_sentinels_raw(&t, t.primary.port);
        if (!h[k].raw)
            die("raw connect", "the primary");
        bench_raw_load(&h[k], &wk__lock_release_script, release_sha);
        bench_raw_load(&h[k], &wk__lock_try_script, try_sha);
    }
    for (int k = 0; k < REPL_CASES; k++)
        timed(&h[k], fn[k], ops / 4, 1);
    double rate[REPL_CASES][32];
    for (int r = 0; r < reps; r++)
        for (int k = 0; k < REPL_CASES; k++) {
            int at = (k + r) % REPL_CASES; /* rotate the order: drift hits all */
            rate[at][r] = timed(&h[at], fn[at], ops, 1);
        }
    printf("| %-40s | %-10s | %10s | %8s | %8s |\n", "case (primary + 1 replica)", "mode",
           "ops/s", "/ plain", "/ raw");
    printf("|%s|%s|%s|%s|%s|\n", "------------------------------------------", "------------",
           "------------", "----------", "----------");
    double m[REPL_CASES];
    for (int k = 0; k < REPL_CASES; k++)
        m[k] = median(rate[k], reps);
    /* The library's rows against the raw row doing the same Redis work. */
    const int raw_of[REPL_CASES] = {3, 4, 3, 3, 4};
    for (int k = 0; k < REPL_CASES; k++) {
        printf("| %-40s | %-10s | %10.0f | %8.3f | %8.3f |\n", names[k], "sequential", m[k],
               m[k] / m[k < 3 ? 0 : 3], m[k] / m[raw_of[k]]);
        if (h[k].db)
            wk_db_close(h[k].db);
        if (h[k].raw)
            redisFree(h[k].raw);
    }
    printf("\n");
    fflush(stdout);
    wk_test_sentinels_stop(&t);
}

/* ------------------------------------------------------------------------
 * --cluster: on a 3-primary Redis Cluster (tests/support), the sequential
 * lock cycle and the batch of 64 (try + release of 64 names, which spread
 * over the three primaries). First against the same on the single server
 * of the run (both library; the ratio is cluster / single), then against
 * raw hiredis on the same cluster: a connection per primary, each command
 * sent to its slot's primary, a batch written to every node before any
 * reply is read (the ratio is library / raw).
 * ---------------------------------------------------------------------- */

typedef struct raw_cluster {
    bench_ctx node[3]; /* .raw: a connection to each primary */
    int slot_node[16384];
} raw_cluster;

static raw_cluster rawc;

/* The primary of lock name i, as raw hiredis sees it. */
static bench_ctx *raw_node(unsigned i)
{
    char key[128];
    size_t klen = bench_key(key, "Lock", "bench", i, NULL);
    return &rawc.node[rawc.slot_node[wk__key_slot(key, klen)]];
}

static void lock_seq_raw_cluster(bench_ctx *c, unsigned i)
{
    (void)c;
    lock_seq_raw(raw_node(i), i);
}

/* Write what each node's context has queued, all nodes before any read. */
static void raw_flush_all(void)
{
    for (int n = 0; n < 3; n++)
        for (int done = 0; !done;)
            if (redisBufferWrite(rawc.node[n].raw, &done) != REDIS_OK)
                die("raw write", rawc.node[n].raw->errstr);
}

static void lock_batch_raw_cluster(bench_ctx *c, unsigned base)
{
    (void)c;
    unsigned char tok[BATCH][16];
    char key[BATCH][128];
    size_t klen[BATCH];
    bench_ctx *at[BATCH];
    for (unsigned k = 0; k < BATCH; k++) {
        at[k] = raw_node(base + k);
        lock_raw_send(at[k], base + k, tok[k], key[k], &klen[k]);
    }
    raw_flush_all();
    for (unsigned k = 0; k < BATCH; k++)
        freeReplyObject(bench_raw_reply(at[k]));
    for (unsigned k = 0; k < BATCH; k++)
        lock_raw_release_send(at[k], tok[k], key[k], klen[k]);
    raw_flush_all();
    for (unsigned k = 0; k < BATCH; k++)
        freeReplyObject(bench_raw_reply(at[k]));
}

/* One row: `a` against `b`, alternating, median of `reps`; `ops`
 * operations in steps of `step` per repetition. */
static void vs_row(const char *name, const char *mode, bench_ctx *ca, op_fn a, bench_ctx *cb,
                   op_fn b, int reps, unsigned ops, unsigned step)
{
    double ra[32], rb[32];
    timed(ca, a, ops / 4, step); /* warm-up: nodes connected, scripts loaded, buffers grown */
    timed(cb, b, ops / 4, step);
    for (int r = 0; r < reps; r++) {
        /* Alternate the order so drift on a shared machine hits both. */
        if (r % 2) {
            rb[r] = timed(cb, b, ops, step);
            ra[r] = timed(ca, a, ops, step);
        } else {
            ra[r] = timed(ca, a, ops, step);
            rb[r] = timed(cb, b, ops, step);
        }
    }
    double x = median(ra, reps), y = median(rb, reps);
    printf("| %-38s | %-10s | %10.0f | %10.0f | %5.3f |\n", name, mode, x, y, x / y);
    fflush(stdout);
}

static void vs_header(const char *a, const char *b)
{
    printf("| %-38s | %-10s | %10s | %10s | %5s |\n", "case", "mode", a, b, "ratio");
    printf("|%s|%s|%s|%s|%s|\n", "----------------------------------------", "------------",
           "------------", "------------", "-------");
}

static void cluster_run(bench_ctx *single, int reps, unsigned seq_ops, unsigned batch_ops,
                        bool async)
{
    wk_test_cluster t;
    int ports[16384], prim[3];
    if (wk_test_cluster_start(&t) != 0 || wk_test_cluster_slot_table(&t, ports) != 0 ||
        wk_test_cluster_primaries(&t, prim) != 3)
        die("cluster topology", "could not start it");
    bench_ctx cl = {0};
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = t.url;
    o.capability = wk_cap_read_write();
    char err[256];
    if (wk_db_open(&cl.db, &o, err, sizeof(err)) != WK_OK)
        die("wk_db_open (cluster)", err);
    if (wk_db_cluster_primaries(cl.db) != 3)
        die("wk_db_open (cluster)", "not a 3-primary cluster handle");
    if (wk_batch_open(&cl.batch, cl.db) != WK_OK)
        die("wk_batch_open (cluster)", "failed");
    for (int n = 0; n < 3; n++) {
        struct timeval tv = {5, 0};
        rawc.node[n].raw = redisConnectWithTimeout("127.0.0.1", prim[n], tv);
        if (!rawc.node[n].raw || rawc.node[n].raw->err)
            die("raw connect (cluster)", "failed");
        bench_raw_load(&rawc.node[n], &wk__lock_release_script, release_sha);
        bench_raw_load(&rawc.node[n], &wk__lock_try_script, try_sha);
    }
    for (int s = 0; s < 16384; s++)
        for (int n = 0; n < 3; n++)
            if (ports[s] == prim[n])
                rawc.slot_node[s] = n;

    printf("3-primary Redis Cluster (3 replicas) vs one server, library on both\n\n");
    vs_header("cluster", "single");
    vs_row("lock try+release", "sequential", &cl, lock_seq_lib, single, lock_seq_lib, reps, seq_ops,
           1);
    vs_row("lock try+release", "batch 64", &cl, lock_batch_lib, single, lock_batch_lib, reps,
           batch_ops, BATCH);
    /* The cluster's primaries also feed a replica each: the same against
     * one server that feeds one. */
    wk_test_server primary, replica;
    char replicaof[64];
    bench_ctx one = {0};
    if (wk_test_server_start(&primary, NULL) != 0)
        die("redis-server", "could not start one");
    snprintf(replicaof, sizeof(replicaof), "replicaof 127.0.0.1 %d", primary.port);
    const char *rconf[] = {replicaof, NULL};
    if (wk_test_server_start(&replica, rconf) != 0)
        die("redis-server", "could not start a replica");
    o.url = primary.url;
    if (wk_db_open(&one.db, &o, err, sizeof(err)) != WK_OK || wk_batch_open(&one.batch, one.db))
        die("wk_db_open (primary + replica)", err);
    for (int k = 0; k < 500; k++) {
        redisContext *r = redisConnect("127.0.0.1", replica.port);
        redisReply *info = r && !r->err ? redisCommand(r, "INFO replication") : NULL;
        bool up =
            info && info->type == REDIS_REPLY_STRING && strstr(info->str, "master_link_status:up");
        if (info)
            freeReplyObject(info);
        if (r)
            redisFree(r);
        if (up)
            break;
        usleep(20000);
    }
    printf("\nthe same cluster vs one server with a replica, library on both\n\n");
    vs_header("cluster", "replicated");
    vs_row("lock try+release", "sequential", &cl, lock_seq_lib, &one, lock_seq_lib, reps, seq_ops,
           1);
    vs_row("lock try+release", "batch 64", &cl, lock_batch_lib, &one, lock_batch_lib, reps,
           batch_ops, BATCH);
    wk_batch_close(one.batch);
    wk_db_close(one.db);
    wk_test_server_stop(&replica);
    wk_test_server_stop(&primary);
    printf("\nthe same cluster: library vs raw hiredis (a connection per primary)\n\n");
    vs_header("library", "raw");
    vs_row("lock try+release", "sequential", &cl, lock_seq_lib, &cl, lock_seq_raw_cluster, reps,
           seq_ops, 1);
    vs_row("lock try+release", "batch 64", &cl, lock_batch_lib, &cl, lock_batch_raw_cluster, reps,
           batch_ops, BATCH);
    printf("\n");
    if (async) {
        printf("the same cluster: an event-loop handle (64 in flight over the primaries) vs "
               "batches of 64\n\n");
        bench_async_run(&cl, t.url, reps, batch_ops);
    }
    for (int n = 0; n < 3; n++)
        redisFree(rawc.node[n].raw);
    wk_batch_close(cl.batch);
    wk_db_close(cl.db);
    wk_test_cluster_stop(&t);
}

static void run_case(bench_ctx *c, const bench_case *bc, int reps, unsigned seq_ops,
                     unsigned batch_ops)
{
    if (case_filter && !strstr(bc->name, case_filter))
        return;
    if (bc->setup)
        bc->setup(c);
    for (int mode = 0; mode < 2; mode++) {
        op_fn lib = mode ? bc->batch_lib : bc->seq_lib;
        op_fn raw = mode ? bc->batch_raw : bc->seq_raw;
        vs_row(bc->name, mode ? "batch 64" : "sequential", c, lib, c, raw, reps,
               mode ? batch_ops : seq_ops, mode ? BATCH : 1);
    }
}

int main(int argc, char **argv)
{
    char url[128] = "";
    int reps = 7, callgrind_ops = 0;
    bool quick = false, table = true, scripts = true, tls = false, async = false, pool = false,
         replicas = false, cluster = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--url") && i + 1 < argc)
            snprintf(url, sizeof(url), "%s", argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--callgrind") && i + 1 < argc)
            callgrind_ops = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--quick"))
            quick = true;
        else if (!strcmp(argv[i], "--async"))
            async = true;
        else if (!strcmp(argv[i], "--tls"))
            tls = true;
        else if (!strcmp(argv[i], "--pool"))
            pool = true;
        else if (!strcmp(argv[i], "--replicas"))
            replicas = true;
        else if (!strcmp(argv[i], "--cluster"))
            cluster = true;
        else if (!strcmp(argv[i], "--scripts"))
            table = false;
        else if (!strcmp(argv[i], "--no-scripts"))
            scripts = false;
        else if (!strcmp(argv[i], "--case") && i + 1 < argc)
            case_filter = argv[++i];
        else {
            fprintf(stderr,
                    "usage: %s [--url URL] [--reps N] [--quick] [--scripts | --no-scripts] "
                    "[--case NAME] [--callgrind N] [--tls] [--async] [--pool] [--replicas] "
                    "[--cluster]\n",
                    argv[0]);
            return 2;
        }
    }
    if (reps < 5 || reps > 32)
        reps = reps < 5 ? 5 : 32;
    if (sodium_init() < 0)
        die("libsodium", "init failed");
    wk_test_server server = {0};
    const char *tls_lines[5] = {NULL};
    if (tls && url[0])
        die("--tls", "needs the redis-server this program starts (no --url)");
    if (tls)
        bench_tls_certs(tls_dir, sizeof(tls_dir), tls_lines);
    if (!url[0]) {
        /* The same private-server helper the tests use (tests/support). */
        if (wk_test_server_start(&server, tls ? tls_lines : NULL) != 0)
            die("redis-server", "could not start one");
        snprintf(url, sizeof(url), "%s", server.url);
    }

    bench_ctx c = {0};
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = url;
    o.capability = wk_cap_read_write();
    char err[256];
    if (wk_db_open(&c.db, &o, err, sizeof(err)) != WK_OK)
        die("wk_db_open", err);
    if (wk_batch_open(&c.batch, c.db) != WK_OK)
        die("wk_batch_open", "failed");
    wk_url u;
    wk_url_parse(&u, url, NULL, 0);
    struct timeval tv = {5, 0};
    c.raw = redisConnectWithTimeout(u.host, u.port, tv);
    wk_url_free(&u);
    if (!c.raw || c.raw->err)
        die("raw connect", c.raw ? c.raw->errstr : "oom");

    if (pool) {
        bench_pool_run(url, reps, quick ? 2000 : 32000, server.pid > 0 ? (long)server.pid : -1);
    } else if (callgrind_ops > 0) {
        /* Only library lock cycles: valgrind counts their instructions
         * (with --tls: over TLS). */
        bench_ctx t = tls ? tls_ctx(&c, tls_lines[0]) : c;
        for (int i = 0; i < callgrind_ops; i++)
            lock_seq_lib(&t, (unsigned)i);
        if (tls)
            wk_db_close(t.db);
    } else {
        unsigned seq_ops = quick ? 1000 : 4000, batch_ops = quick ? 64 * 40 : 64 * 200;
        if (tls)
            tls_vs_tcp(&c, tls_lines[0], reps, seq_ops, (long)server.pid);
        if (async)
            bench_async_run(&c, url, reps, batch_ops);
        if (replicas)
            replicas_run(reps, seq_ops);
        if (cluster)
            cluster_run(&c, reps, seq_ops, batch_ops, async);
        if (table) {
            printf("wakuwaku %s vs raw hiredis, %d repetitions, median ops/s\n\n", wk_version(),
                   reps);
            printf("| %-38s | %-10s | %10s | %10s | %5s |\n", "case", "mode", "library", "raw",
                   "ratio");
            printf("|%s|%s|%s|%s|%s|\n", "----------------------------------------", "------------",
                   "------------", "------------", "-------");
            for (size_t i = 0; i < sizeof(lock_cases) / sizeof(lock_cases[0]); i++)
                run_case(&c, &lock_cases[i], reps, seq_ops, batch_ops);
            for (size_t i = 0; i < bench_lease_kinds_cases_count; i++)
                run_case(&c, &bench_lease_kinds_cases[i], reps, seq_ops, batch_ops);
            for (size_t i = 0; i < bench_limiter_cache_cases_count; i++)
                run_case(&c, &bench_limiter_cache_cases[i], reps, seq_ops, batch_ops);
            for (size_t i = 0; i < bench_minimal_cases_count; i++)
                run_case(&c, &bench_minimal_cases[i], reps, seq_ops, batch_ops);
            printf("\n");
        }
        if (scripts)
            bench_scripts_run(&c, reps, quick ? 64 * 10 : 64 * 25, case_filter);
    }
    redisFree(c.raw);
    wk_batch_close(c.batch);
    wk_db_close(c.db);
    wk_test_server_stop(&server);
    if (tls) {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tls_dir);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", tls_dir);
    }
    return 0;
}
