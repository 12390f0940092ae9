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
extern const wk_script wk__fenced_lock_try_script;        /* lease, fence | token, ttl */
extern const wk__two_forms wk__fenced_lock_release_forms; /* lease, fence, q, e | token, w */
#define wk__fenced_lock_release_script (wk__fenced_lock_release_forms.script)
extern const wk_script wk__semaphore_try_script;        /* permits | token, ttl, N */
extern const wk__two_forms wk__semaphore_release_forms; /* permits, q, e | token, w */
#define wk__semaphore_release_script (wk__semaphore_release_forms.script)
/* permits, q, e | token, ttl, N, cap, w; its single-key form in semaphore.c */
extern const wk__two_forms wk__semaphore_acquire_forms;

/* ------------------------------------------------------------------------
 * While a slot migrates (core/private.h, wk__two_forms): the single-key
 * forms of the lease scripts, KEYS[1] = the item's first key, ARGV as the
 * full form's. None wakes a waiter (the wake keys are left out): a waiter
 * wakes at the end of its sleep, at the latest when the lease it waited
 * for would have run out, and attempts again. collection/lease_fallback.c.
 * ---------------------------------------------------------------------- */

extern const wk_script wk__lock_release_single;        /* lock | token, w */
extern const wk_script wk__lock_acquire_single;        /* lock | token, ttl, w, cap, fair */
extern const wk_script wk__reader_release_single;      /* sorted set | token, w */
extern const wk_script wk__fenced_lock_release_single; /* lease | token, w */

/* WK__QUERY_SINGLE_KEY when `script` is the full form of a wk__two_forms
 * above, else 0: the flag a query of it carries. */
unsigned wk__single_key_flag(const wk_script *script);

/* Runs the call as one query of c->e on `p`: wk_process()'s status. */
int wk__lease_script(wk_processor *p, const wk__lease_call *c);

#endif /* WK_COLLECTION_LEASE_SCRIPT_H */
