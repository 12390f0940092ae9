/*
 * bench/bench_cases.h — what a benchmark case is, and the helpers its raw
 * hiredis side shares. Cases beyond the locks live in bench_limiter_cache.c.
 */
#ifndef WK_BENCH_CASES_H
#define WK_BENCH_CASES_H

#include <hiredis/hiredis.h>

#include <wakuwaku/wakuwaku.h>

typedef struct bench_tls_raw bench_tls_raw;

typedef struct bench_ctx {
    wk_db *db;
    wk_batch *batch;
    redisContext *raw;
    /* Non-NULL: the raw side talks over this TLS connection instead of
     * `raw` (bench_tls.c, `--tls`). */
    bench_tls_raw *raw_tls;
} bench_ctx;

/*
 * One case: a setup (may be NULL), then one operation with the library
 * and the same Redis work with raw hiredis, sequentially (argument: the
 * operation's index) and in a batch of 64 (argument: the first index).
 */
typedef struct bench_case {
    const char *name;
    void (*setup)(bench_ctx *c);
    void (*seq_lib)(bench_ctx *c, unsigned i);
    void (*seq_raw)(bench_ctx *c, unsigned i);
    void (*batch_lib)(bench_ctx *c, unsigned base);
    void (*batch_raw)(bench_ctx *c, unsigned base);
} bench_case;

extern const bench_case bench_limiter_cache_cases[];
extern const size_t bench_limiter_cache_cases_count;
/* FencedLock and Semaphore try+release (bench_lease_kinds.c). */
extern const bench_case bench_lease_kinds_cases[];
extern const size_t bench_lease_kinds_cases_count;
/* The limiter and hashed revalidation against raw hiredis sending the
 * smallest scripts doing the same job (bench_scripts.c). */
extern const bench_case bench_minimal_cases[];
extern const size_t bench_minimal_cases_count;

/* The server-time table: every library script next to its minimal
 * counterpart, `n` calls per run, median of `reps` (bench_scripts.c);
 * `filter` (may be NULL): only scripts whose name contains it. */
void bench_scripts_run(bench_ctx *c, int reps, unsigned n, const char *filter);

/* --async: lock cycles with 64 in flight on an event-loop handle to
 * `url` vs 64-query batches on c's handle (bench_async.c). */
void bench_async_run(bench_ctx *c, const char *url, int reps, unsigned ops);
/* --pool: lock cycles from 8 threads through a pool of 4 against 8
 * handles, and 1 thread through a pool of 1 against a handle, `ops`
 * cycles per row, median of `reps`; with the server's pid (else -1), the
 * server's CPU per cycle too (bench_pool.c). */
void bench_pool_run(const char *url, int reps, unsigned ops, long server_pid);

/* Exit with the handle's message unless rc is WK_OK. */
void bench_check(int rc, bench_ctx *c, const char *what);
/* Raw hiredis: queue a command, read a reply (exits on error replies). */
void bench_raw_append(bench_ctx *c, int argc, const char **argv, const size_t *lens);
redisReply *bench_raw_reply(bench_ctx *c);
/* SCRIPT LOAD a library script on the raw connection. */
void bench_raw_load(bench_ctx *c, const wk_script *s, char sha[41]);
/* The key the library builds for integer name n (suffix NULL: single-key). */
size_t bench_key(char *buf, const char *kind, const char *ns, unsigned n, const char *suffix);

/* A script call of the library, learned from the slow log (bench_limiter_cache.c). */
typedef struct bench_learned {
    char sha[41];
    int nkeys, argc;
    char args[8][64];
    size_t lens[8];
} bench_learned;

void bench_learn(bench_ctx *c, void (*op)(bench_ctx *, unsigned), bench_learned *out);
/* Send the learned call on one key (nkeys must be 1). */
void bench_learned_send(bench_ctx *c, const bench_learned *l, const char *key, size_t klen);

/* --tls (bench_tls.c): a CA and a server certificate for 127.0.0.1 made
 * with `openssl` in a new directory (its path into dir), and the server's
 * config lines into lines[5] (static storage, NULL-terminated). */
void bench_tls_certs(char *dir, size_t dirlen, const char **lines);
/* The raw floor of TLS: a minimal blocking OpenSSL client to 127.0.0.1
 * on `port`, the certificate verified against `ca_file`. Exits on
 * failure. Commands are queued and sent in one SSL_write at the next
 * reply, as hiredis does. */
bench_tls_raw *bench_tls_raw_open(int port, const char *ca_file);
void bench_tls_raw_close(bench_tls_raw *t);
void bench_tls_raw_append(bench_tls_raw *t, int argc, const char **argv, const size_t *lens);
redisReply *bench_tls_raw_reply(bench_tls_raw *t);

#endif /* WK_BENCH_CASES_H */
