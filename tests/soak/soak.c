/*
 * tests/soak/soak.c — 8 processes mixing lock, RwLock, limiter and
 * HashedCache queries against one redis-server while a fault injector
 * kills connections, flushes scripts and stalls the server. Invariants are
 * checked throughout in memory shared by the workers, independent of Redis:
 *
 *   mutual exclusion    never two holders of one lock name;
 *   reader/writer       never a writer with readers or another writer;
 *   limiter bound       allowed ≤ capacity + rate × elapsed + 1;
 *   cache integrity     every HashedCache body hashes to its stored hash;
 *   data integrity      no corrupt or malformed reply (WK_ECORRUPT,
 *                       WK_EPROTO) and no status outside the table.
 *
 * Faults make calls fail (connection errors are expected and counted);
 * they must never break an invariant. Prints the counts and exits non-zero
 * on any violation.
 *
 *   wk_soak [--seconds N] [--workers N]      (default 20 s, 8 workers)
 *
 * .ci/run runs it briefly; for a long run: build/tests/wk_soak --seconds 600
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

#include "soak_more.h"

#define MAX_WORKERS 16
#define LOCK_NAMES 4
#define RW_NAMES 3
#define LEASE_MS 3000 /* far longer than any stall the injector causes (≤ 0.6 s) */

/* Memory shared by all workers (MAP_SHARED before fork). */
typedef struct shared {
    atomic_int lock_holders[LOCK_NAMES];
    atomic_int readers[RW_NAMES], writers[RW_NAMES];
    atomic_long ops, conn_errors, other_errors, violations;
    atomic_long limiter_allowed;
    atomic_long cache_checks;
    char last_violation[256];
} shared;

static shared *S;

static const wk_entity soak_lock = WK_LOCK_ENTITY("soak", LEASE_MS);
static const wk_entity soak_rw = WK_RWLOCK_ENTITY("soak", LEASE_MS);
#define BUCKET_CAPACITY 20.0
#define BUCKET_RATE 50.0 /* per second */
static const wk_entity soak_bucket = WK_TOKEN_BUCKET_ENTITY("soak", BUCKET_CAPACITY, 50, 1000);

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

static void lock_op(wk_processor *p)
{
    unsigned n = randombytes_uniform(LOCK_NAMES);
    wk_token t;
    bool got = false, released;
    int rc = wk_lock_try(p, &soak_lock, wk_name_u64(n), &t, &got);
    account(rc, "lock.try");
    if (rc != WK_OK || !got)
        return;
    if (atomic_fetch_add(&S->lock_holders[n], 1) != 0)
        violation("%s %d has two holders", "lock", (int)n);
    usleep(randombytes_uniform(300));
    atomic_fetch_sub(&S->lock_holders[n], 1);
    account(wk_lock_release(p, &soak_lock, wk_name_u64(n), &t, &released), "lock.release");
}

static void rw_op(wk_processor *p)
{
    unsigned n = randombytes_uniform(RW_NAMES);
    wk_token t;
    bool got = false, ok;
    if (randombytes_uniform(4) == 0) {
        int rc = wk_rwlock_try_write(p, &soak_rw, wk_name_u64(n), &t, &got);
        account(rc, "rwlock.try_write");
        if (rc != WK_OK || !got)
            return;
        if (atomic_fetch_add(&S->writers[n], 1) != 0)
            violation("%s %d has two writers", "rwlock", (int)n);
        if (atomic_load(&S->readers[n]) != 0)
            violation("%s %d has a writer and readers", "rwlock", (int)n);
        usleep(randombytes_uniform(300));
        atomic_fetch_sub(&S->writers[n], 1);
        account(wk_rwlock_release_write(p, &soak_rw, wk_name_u64(n), &t, &ok), "release_write");
    } else {
        int rc = wk_rwlock_try_read(p, &soak_rw, wk_name_u64(n), &t, &got);
        account(rc, "rwlock.try_read");
        if (rc != WK_OK || !got)
            return;
        atomic_fetch_add(&S->readers[n], 1);
        if (atomic_load(&S->writers[n]) != 0)
            violation("%s %d has a reader and a writer", "rwlock", (int)n);
        usleep(randombytes_uniform(300));
        atomic_fetch_sub(&S->readers[n], 1);
        account(wk_rwlock_release_read(p, &soak_rw, wk_name_u64(n), &t, &ok), "release_read");
    }
}

static void limiter_op(wk_processor *p)
{
    wk_token_bucket_outcome o;
    int rc = wk_token_bucket_acquire(p, &soak_bucket, wk_name_str("shared"), 1, &o);
    account(rc, "token_bucket.acquire");
    if (rc == WK_OK && o.allowed)
        atomic_fetch_add(&S->limiter_allowed, 1);
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
        unsigned pick = randombytes_uniform(10);
        if (pick < 4)
            lock_op(p);
        else if (pick < 7)
            rw_op(p);
        else if (pick < 9)
            limiter_op(p);
        else
            soak_more_op(p, account, violation);
    }
    wk_db_close(db);
    return 0;
}

/* ------------------------------------------------------------------------
 * Fault injection (in the parent)
 * ---------------------------------------------------------------------- */

static long faults[4];
static const char *fault_names[4] = {"CLIENT KILL", "SCRIPT FLUSH", "server stalled (SIGSTOP)",
                                     "connections killed + scripts flushed"};

static void inject(wk_test_server *s)
{
    unsigned f = randombytes_uniform(4);
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
        /* Longer than the workers' command timeout, shorter than leases. */
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
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--seconds"))
            seconds = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--workers"))
            workers = atoi(argv[i + 1]);
    }
    if (seconds < 1 || workers < 1 || workers > MAX_WORKERS) {
        fprintf(stderr, "usage: %s [--seconds N] [--workers 1..%d]\n", argv[0], MAX_WORKERS);
        return 2;
    }
    if (sodium_init() < 0)
        return 2;
    S = mmap(NULL, sizeof(*S), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (S == MAP_FAILED)
        return 2;
    memset(S, 0, sizeof(*S));
    soak_cache_checks = &S->cache_checks;
    wk_test_server server;
    if (wk_test_server_start(&server, NULL) != 0) {
        fprintf(stderr, "cannot start redis-server\n");
        return 2;
    }
    int64_t start = wk_test_now_ms(), until = start + seconds * 1000L;
    pid_t kids[MAX_WORKERS];
    for (int i = 0; i < workers; i++) {
        kids[i] = fork();
        if (kids[i] == 0)
            _exit(worker(server.url, until));
    }
    while (wk_test_now_ms() < until - 500) {
        usleep(300000 + randombytes_uniform(700000));
        inject(&server);
    }
    int crashed = 0;
    for (int i = 0; i < workers; i++) {
        int status;
        waitpid(kids[i], &status, 0);
        crashed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    double elapsed_s = (double)(wk_test_now_ms() - start) / 1000.0;
    wk_test_server_stop(&server);

    long allowed = atomic_load(&S->limiter_allowed);
    double bound = BUCKET_CAPACITY + BUCKET_RATE * elapsed_s + 1;
    if (allowed > bound)
        violation("%s allowed more than its bound (%d)", "limiter", (int)allowed);

    long total_faults = faults[0] + faults[1] + faults[2] + faults[3];
    printf("soak: %d workers, %.1f s\n", workers, elapsed_s);
    printf("  operations:        %ld\n", atomic_load(&S->ops));
    printf("  faults injected:   %ld", total_faults);
    for (int f = 0; f < 4; f++)
        printf("%s%s %ld", f ? ", " : " (", fault_names[f], faults[f]);
    printf(")\n");
    printf("  connection errors: %ld (expected under faults)\n", atomic_load(&S->conn_errors));
    printf("  other errors:      %ld\n", atomic_load(&S->other_errors));
    printf("  limiter allowed:   %ld (bound %.0f)\n", allowed, bound);
    soak_more_report();
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
