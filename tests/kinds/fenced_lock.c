/*
 * tests/kinds/fenced_lock.c — the test rows of FencedLock
 * (tests/kinds/kinds.h): every built-in query, the try+release cycle whose
 * allocations are counted, and the soak operation with its invariants
 * (never two holders of a name; each holder's fence greater than every
 * earlier holder's of that name).
 */
#include <stdatomic.h>
#include <unistd.h>

#include <sodium.h>

#include "tests/kinds/kinds.h"

/* ------------------------------------------------------------------------
 * Queries
 * ---------------------------------------------------------------------- */

static wk_token any_token;

#define FENCED_E(ns) wk_entity e = WK_FENCED_LOCK_ENTITY(ns, 5000)

static int q_try(wk_processor *p, const char *ns)
{
    FENCED_E(ns);
    /* A batch writes the outcome later: static, not on this frame. */
    static wk_fenced_lease lease;
    return wk_fenced_lock_try(p, &e, wk_test_name(), &lease);
}
static int q_release(wk_processor *p, const char *ns)
{
    FENCED_E(ns);
    static bool b;
    return wk_fenced_lock_release(p, &e, wk_test_name(), &any_token, &b);
}
static int q_extend(wk_processor *p, const char *ns)
{
    FENCED_E(ns);
    static bool b;
    return wk_fenced_lock_extend(p, &e, wk_test_name(), &any_token, &b);
}
static int q_owned(wk_processor *p, const char *ns)
{
    FENCED_E(ns);
    static wk_fenced_lock_ownership st;
    return wk_fenced_lock_owned(p, &e, wk_test_name(), &any_token, &st);
}
static int q_inspect(wk_processor *p, const char *ns)
{
    FENCED_E(ns);
    static wk_fenced_lock_state st;
    return wk_fenced_lock_inspect(p, &e, wk_test_name(), &st);
}
static int q_force_release(wk_processor *p, const char *ns)
{
    FENCED_E(ns);
    static bool b;
    return wk_fenced_lock_force_release(p, &e, wk_test_name(), &b);
}

static const wk_test_query queries[] = {
    WK_TEST_ROW(WK_KIND_FENCED_LOCK, fenced_lock, try, q_try, WK_TEST_TAKES_LEASE),
    WK_TEST_ROW(WK_KIND_FENCED_LOCK, fenced_lock, release, q_release, 0),
    WK_TEST_ROW(WK_KIND_FENCED_LOCK, fenced_lock, extend, q_extend, WK_TEST_LENGTHENS_LEASE),
    WK_TEST_ROW(WK_KIND_FENCED_LOCK, fenced_lock, owned, q_owned, 0),
    WK_TEST_ROW(WK_KIND_FENCED_LOCK, fenced_lock, inspect, q_inspect, 0),
    WK_TEST_ROW(WK_KIND_FENCED_LOCK, fenced_lock, force_release, q_force_release, 0),
};

/* ------------------------------------------------------------------------
 * Allocations: a try+owned+release cycle
 * ---------------------------------------------------------------------- */

static const wk_entity alloc_fenced = WK_FENCED_LOCK_ENTITY("alloc", 10000);

static int fenced_cycle(wk_processor *p, unsigned i)
{
    wk_fenced_lease lease;
    wk_fenced_lock_ownership own = {false, 0, 0};
    bool ok = false;
    int rc = wk_fenced_lock_try(p, &alloc_fenced, wk_name_u64(i), &lease);
    if (rc == WK_OK)
        rc = wk_fenced_lock_owned(p, &alloc_fenced, wk_name_u64(i), &lease.token, &own);
    if (rc == WK_OK)
        rc = wk_fenced_lock_release(p, &alloc_fenced, wk_name_u64(i), &lease.token, &ok);
    return rc != WK_OK                                                     ? rc
           : lease.acquired && own.owned && own.fence == lease.fence && ok ? WK_OK
                                                                           : WK_TEST_WRONG_OUTCOME;
}

/* An uncontended acquire: its first attempt takes the lock, so no wait
 * (and no blocking connection) happens. */
/* Its own names: the suites run in parallel, and a try cycle on the same
 * names would make this acquire wait (and open its blocking connection). */
static const wk_entity alloc_fenced_wait = WK_FENCED_LOCK_ENTITY("alloc-acquire", 10000);

static int fenced_acquire_cycle(wk_processor *p, unsigned i)
{
    wk_fenced_lease lease;
    bool ok = false;
    int rc = wk_fenced_lock_acquire(p, &alloc_fenced_wait, wk_name_u64(i), wk_deadline_in(10000),
                                    &lease);
    if (rc == WK_OK)
        rc = wk_fenced_lock_release(p, &alloc_fenced_wait, wk_name_u64(i), &lease.token, &ok);
    return rc != WK_OK ? rc : lease.acquired && ok ? WK_OK : WK_TEST_WRONG_OUTCOME;
}

static const wk_test_alloc_case allocs[] = {
    {"fenced_lock try+owned+release", NULL, fenced_cycle},
    {"fenced_lock acquire+release (uncontended)", NULL, fenced_acquire_cycle},
};

/* ------------------------------------------------------------------------
 * Soak: exclusion and fencing monotonicity
 * ---------------------------------------------------------------------- */

#define NAMES 3
#define LEASE_MS 3000 /* far longer than any stall the injector causes (≤ 0.6 s) */

static const wk_entity soak_fenced = WK_FENCED_LOCK_ENTITY("soak", LEASE_MS);

typedef struct fenced_shared {
    atomic_int holders[NAMES];
    atomic_llong last_fence[NAMES]; /* the fence of the latest holder */
    atomic_long acquired;
} fenced_shared;

static void fenced_op(wk_processor *p, const wk_test_soak_env *env)
{
    fenced_shared *s = env->shared;
    unsigned n = randombytes_uniform(NAMES);
    wk_fenced_lease lease;
    bool released;
    /* One in four waits (woken by releases, over its own connection). */
    bool wait = randombytes_uniform(4) == 0;
    int rc =
        wait ? wk_fenced_lock_acquire(p, &soak_fenced, wk_name_u64(n), wk_deadline_in(200), &lease)
             : wk_fenced_lock_try(p, &soak_fenced, wk_name_u64(n), &lease);
    env->account(rc, wait ? "fenced_lock.acquire" : "fenced_lock.try");
    if (rc != WK_OK || !lease.acquired)
        return;
    if (atomic_fetch_add(&s->holders[n], 1) != 0)
        env->violation("%s %d has two holders", "fenced_lock", (int)n);
    /* Holders follow each other, so each fence must beat the last one
     * seen. A try lost to a fault may have spent a fence: gaps are fine. */
    if (lease.fence <= atomic_load(&s->last_fence[n]))
        env->violation("%s %d: a fence did not increase", "fenced_lock", (int)n);
    atomic_store(&s->last_fence[n], lease.fence);
    atomic_fetch_add(&s->acquired, 1);
    usleep(randombytes_uniform(300));
    atomic_fetch_sub(&s->holders[n], 1);
    env->account(wk_fenced_lock_release(p, &soak_fenced, wk_name_u64(n), &lease.token, &released),
                 "fenced_lock.release");
}

static void fenced_report(const wk_test_soak_env *env, double elapsed_s)
{
    (void)elapsed_s;
    fenced_shared *s = env->shared;
    printf("  fenced acquired:   %ld (fences checked increasing per name)\n",
           atomic_load(&s->acquired));
}

static const wk_test_soak_op soak[] = {
    {"fenced_lock", 3, sizeof(fenced_shared), fenced_op, fenced_report},
};

static wk_test_kind fenced_lock_rows = {
    .id = "fenced_lock",
    .ops = (const char *const[]){WK_FENCED_LOCK_OPS(WK_TEST_OP_NAME) NULL},
    .queries = queries,
    .nqueries = WK_TEST_COUNT(queries),
    .allocs = allocs,
    .nallocs = WK_TEST_COUNT(allocs),
    .soak = soak,
    .nsoak = WK_TEST_COUNT(soak),
};
WK_TEST_KIND(fenced_lock_rows)
