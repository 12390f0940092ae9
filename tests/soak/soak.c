/*
 * tests/soak/soak.c — 8 processes mixing every kind's soak operations
 * (tests/kinds/kinds.h: lock, RwLock, limiter, HashedCache and Pipe today)
 * against one redis-server while a fault injector kills connections,
 * flushes scripts and stalls the server. Invariants are checked throughout
 * in memory shared by the workers, independent of Redis; each kind's file
 * checks its own:
 *
 *   mutual exclusion    never two holders of one lock name (lock.c);
 *   reader/writer       never a writer with readers or another writer
 *                       (lock.c);
 *   limiter bound       allowed ≤ capacity + rate × elapsed + 1
 *                       (token_bucket.c);
 *   cache integrity     every HashedCache body hashes to its stored hash
 *                       (cache.c);
 *   pipe delivery       a receiver never gets a message twice or out of
 *                       order, nor skips one sent for sure (pipe.c);
 *   data integrity      no corrupt or malformed reply (WK_ECORRUPT,
 *                       WK_EPROTO) and no status outside the table (here,
 *                       for every call).
 *
 * Faults make calls fail (connection errors are expected and counted);
 * they must never break an invariant. Prints the counts and exits non-zero
 * on any violation.
 *
 *   wk_soak [--seconds N] [--workers N] [--cluster]   (default 20 s, 8 workers)
 *
 * --cluster runs the same against a Redis Cluster it starts (three
 * primaries, three replicas: tests/support/cluster_topology.c): the
 * workers open the seed-list URL, each fault hits a node picked at random,
 * and a fifth fault is a CLUSTER FAILOVER of a random shard (a manual
 * failover loses no write, so every invariant still holds).
 *
 * .ci/run runs it briefly (and 15 s with --cluster); for a long run:
 * build/tests/wk_soak --seconds 600, build/tests/wk_soak --cluster --seconds 600
 */
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sodium.h>

#include "support.h"
#include "tests/kinds/kinds.h"

#define MAX_WORKERS 16
#define MAX_OPS 32

/* Memory shared by all workers (MAP_SHARED before fork); each soak
 * operation's own shared bytes follow it. */
typedef struct shared {
    atomic_long ops, conn_errors, other_errors, violations;
    char last_violation[256];
} shared;

static shared *S;

/* The soak operations of the registry, each with its environment. */
static const wk_test_soak_op *ops[MAX_OPS];
static wk_test_soak_env envs[MAX_OPS];
static size_t nops;
static unsigned total_weight;

static void violation(const char *fmt, const char *what, int n)
{
    atomic_fetch_add(&S->violations, 1);
    snprintf(S->last_violation, sizeof(S->last_violation), fmt, what, n);
    fprintf(stderr, "VIOLATION: ");
    fprintf(stderr, fmt, what, n);
    fprintf(stderr, "\n");
}

/* Classify a status: connection errors are what faults cause. */
static void account(int rc, const char *what)
{
    atomic_fetch_add(&S->ops, 1);
    if (rc == WK_OK)
        return;
    if (wk_is_connection_error(rc) || rc == WK_ENOMEM) {
        atomic_fetch_add(&S->conn_errors, 1);
    } else if (rc == WK_EREDIS) {
        /* e.g. a script error reply during a fault; not data corruption */
        atomic_fetch_add(&S->other_errors, 1);
    } else {
        violation("%s returned status %d", what, rc);
    }
}

static int worker(const char *url, int64_t until_ms)
{
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = url;
    o.capability = wk_cap_read_write();
    o.command_timeout_ms = 400;
    o.connect_timeout_ms = 400;
    wk_db *db;
    if (wk_db_open(&db, &o, NULL, 0) != WK_OK)
        return 2;
    wk_processor *p = wk_db_processor(db);
    while (wk_test_now_ms() < until_ms) {
        unsigned pick = randombytes_uniform(total_weight);
        size_t k = 0;
        while (pick >= ops[k]->weight)
            pick -= ops[k++]->weight;
        ops[k]->op(p, &envs[k]);
    }
    wk_db_close(db);
    return 0;
}

/* ------------------------------------------------------------------------
 * Fault injection (in the parent)
 * ---------------------------------------------------------------------- */

#define FAULTS 5
static long faults[FAULTS];
static const char *fault_names[FAULTS] = {"CLIENT KILL", "SCRIPT FLUSH", "server stalled (SIGSTOP)",
                                          "connections killed + scripts flushed",
                                          "CLUSTER FAILOVER"};

/* A manual failover of a random shard; false when none was possible. */
static bool failover(const wk_test_cluster *c)
{
    int prim[3];
    int n = wk_test_cluster_primaries(c, prim);
    if (n < 1)
        return false;
    int replica = wk_test_cluster_replica_of(c, prim[randombytes_uniform((uint32_t)n)]);
    return replica > 0 && wk_test_cluster_failover(c, replica, 10000) == 0;
}

/* One fault on the server `s` (a node of the cluster `c`, when not NULL:
 * then a failover may be picked too). */
static void inject(wk_test_server *s, const wk_test_cluster *c)
{
    unsigned f = randombytes_uniform(c ? FAULTS : FAULTS - 1);
    if (f == 4) {
        if (failover(c))
            faults[f]++;
        return;
    }
    redisContext *raw = NULL;
    if (f != 2) {
        struct timeval tv = {1, 0};
        raw = redisConnectWithTimeout("127.0.0.1", s->port, tv);
        if (!raw || raw->err) {
            if (raw)
                redisFree(raw);
            return;
        }
    }
    switch (f) {
    case 0:
        freeReplyObject(redisCommand(raw, "CLIENT KILL TYPE normal SKIPME yes"));
        break;
    case 1:
        freeReplyObject(redisCommand(raw, "SCRIPT FLUSH"));
        break;
    case 2:
        /* Longer than the workers' command timeout, shorter than leases
         * (and than a cluster's node timeout: no failover follows). */
        if (s->pid <= 0)
            return; /* never kill(0): that is our own process group */
        kill(s->pid, SIGSTOP);
        usleep(200000 + randombytes_uniform(400000));
        kill(s->pid, SIGCONT);
        break;
    case 3:
        freeReplyObject(redisCommand(raw, "SCRIPT FLUSH"));
        freeReplyObject(redisCommand(raw, "CLIENT KILL TYPE normal SKIPME yes"));
        break;
    }
    if (raw)
        redisFree(raw);
    faults[f]++;
}

int main(int argc, char **argv)
{
    int seconds = 20, workers = 8;
    bool cluster = false, usage = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--cluster"))
            cluster = true;
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            seconds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--workers") && i + 1 < argc)
            workers = atoi(argv[++i]);
        else
            usage = true;
    }
    if (usage || seconds < 1 || workers < 1 || workers > MAX_WORKERS) {
        fprintf(stderr, "usage: %s [--seconds N] [--workers 1..%d] [--cluster]\n", argv[0],
                MAX_WORKERS);
        return 2;
    }
    if (sodium_init() < 0)
        return 2;
    /* The registry's operations, and the shared memory: ours, then each
     * operation's own bytes, 64-byte aligned. */
    size_t size = (sizeof(*S) + 63) / 64 * 64, at[MAX_OPS];
    for (const wk_test_kind *kind = wk_test_kinds(); kind; kind = kind->next) {
        for (size_t i = 0; i < kind->nsoak; i++) {
            if (nops == MAX_OPS) {
                fprintf(stderr, "more than %d soak operations: raise MAX_OPS\n", MAX_OPS);
                return 2;
            }
            ops[nops] = &kind->soak[i];
            at[nops++] = size;
            size += (kind->soak[i].shared_size + 63) / 64 * 64;
            total_weight += kind->soak[i].weight;
        }
    }
    if (!total_weight) {
        fprintf(stderr, "no soak operations in the registry\n");
        return 2;
    }
    void *mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED)
        return 2;
    memset(mem, 0, size);
    S = mem;
    for (size_t k = 0; k < nops; k++)
        envs[k] = (wk_test_soak_env){account, violation, (char *)mem + at[k]};
    wk_test_server server = {0};
    wk_test_cluster topology = {0};
    const char *url;
    if (cluster) {
        if (wk_test_cluster_start(&topology) != 0) {
            fprintf(stderr, "cannot start a Redis Cluster\n");
            return 2;
        }
        url = topology.url;
    } else {
        if (wk_test_server_start(&server, NULL) != 0) {
            fprintf(stderr, "cannot start redis-server\n");
            return 2;
        }
        url = server.url;
    }
    int64_t start = wk_test_now_ms(), until = start + seconds * 1000L;
    pid_t kids[MAX_WORKERS];
    for (int i = 0; i < workers; i++) {
        kids[i] = fork();
        if (kids[i] == 0)
            _exit(worker(url, until));
    }
    while (wk_test_now_ms() < until - 500) {
        usleep(300000 + randombytes_uniform(700000));
        if (cluster) {
            /* A node at random: its port, and its pid for a stall. */
            int k = (int)randombytes_uniform(WK_TEST_CLUSTER_NODES);
            wk_test_server node = {.pid = topology.pid[k], .port = topology.port[k]};
            inject(&node, &topology);
        } else {
            inject(&server, NULL);
        }
    }
    int crashed = 0;
    for (int i = 0; i < workers; i++) {
        int status;
        waitpid(kids[i], &status, 0);
        crashed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    double elapsed_s = (double)(wk_test_now_ms() - start) / 1000.0;
    wk_test_server_stop(&server);
    wk_test_cluster_stop(&topology);

    long total_faults = 0;
    for (int f = 0; f < FAULTS; f++)
        total_faults += faults[f];
    printf("soak: %d workers, %.1f s%s\n", workers, elapsed_s,
           cluster ? ", against a 3-primary Redis Cluster" : "");
    printf("  operations:        %ld\n", atomic_load(&S->ops));
    printf("  faults injected:   %ld", total_faults);
    for (int f = 0; f < (cluster ? FAULTS : FAULTS - 1); f++)
        printf("%s%s %ld", f ? ", " : " (", fault_names[f], faults[f]);
    printf(")\n");
    printf("  connection errors: %ld (expected under faults)\n", atomic_load(&S->conn_errors));
    printf("  other errors:      %ld\n", atomic_load(&S->other_errors));
    for (size_t k = 0; k < nops; k++) {
        if (ops[k]->report)
            ops[k]->report(&envs[k], elapsed_s);
    }
    printf("  crashed workers:   %d\n", crashed);
    printf("  violations:        %ld\n", atomic_load(&S->violations));
    if (atomic_load(&S->violations) || crashed) {
        printf("  last violation: %s\n", S->last_violation);
        return 1;
    }
    if (atomic_load(&S->ops) < 100 * (long)seconds) {
        printf("  too few operations to mean anything\n");
        return 1;
    }
    return 0;
}
