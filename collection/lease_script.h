/*
 * collection/lease_script.h — one script call of a lease kind (FencedLock,
 * Semaphore): the item's keys, optionally followed by its wake keys
 * (collection/wake.h), and the arguments. Not installed.
 */
#ifndef WK_COLLECTION_LEASE_SCRIPT_H
#define WK_COLLECTION_LEASE_SCRIPT_H

#include "collection/common.h"
#include "collection/wake.h"

/* What to send. KEYS are keys[0..nkeys) then, when `wake` is not NULL, its
 * q and e; ARGV are args[0..nargs) then the wake prefix w. nkeys ≤ 2 and
 * nargs ≤ 5. */
typedef struct wk__lease_call {
    const char *op;
    const wk_script *script;
    const wk_entity *e;
    wk_mode mode; /* a READ is sent as retry-safe */
    bool lease;   /* it takes or lengthens a lease (WK__QUERY_LEASE) */
    const char *const *keys;
    const size_t *key_lens;
    int nkeys;
    const wk__wake_keys *wake;
    const char *const *args;
    const size_t *arg_lens;
    int nargs;
    wk_parse_fn parse;
    void *out;
} wk__lease_call;

/* The scripts of the cycles the benchmark repeats with raw hiredis
 * (bench/bench_lease_kinds.c), KEYS and ARGV as documented beside them. */
extern const wk_script wk__fenced_lock_try_script;     /* lease, fence | token, ttl */
extern const wk_script wk__fenced_lock_release_script; /* lease, fence, q, e | token, w */
extern const wk_script wk__semaphore_try_script;       /* permits | token, ttl, N */
extern const wk_script wk__semaphore_release_script;   /* permits, q, e | token, w */

/* Runs the call as one query of c->e on `p`: wk_process()'s status. */
int wk__lease_script(wk_processor *p, const wk__lease_call *c);

#endif /* WK_COLLECTION_LEASE_SCRIPT_H */
