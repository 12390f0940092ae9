/*
 * tests/kinds/lock.c — the test rows of Lock and RwLock (tests/kinds/kinds.h):
 * every built-in query, the try+release cycles whose allocations are
 * counted, and the soak's lock and RwLock operations with their invariants
 * (never two holders of a lock name; never a writer with readers or with
 * another writer).
 */
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include <sodium.h>

#include "tests/kinds/kinds.h"

/* ------------------------------------------------------------------------
 * Queries
 * ---------------------------------------------------------------------- */

static wk_token any_token;

#define LOCK_E(ns) wk_entity e = WK_LOCK_ENTITY(ns, 5000)
#define RW_E(ns) wk_entity e = WK_RWLOCK_ENTITY(ns, 5000)

static int q_lock_try(wk_processor *p, const char *ns)
{
    LOCK_E(ns);
    bool b;
    return wk_lock_try(p, &e, wk_test_name(), &any_token, &b);
}
static int q_lock_release(wk_processor *p, const char *ns)
{
    LOCK_E(ns);
    bool b;
    return wk_lock_release(p, &e, wk_test_name(), &any_token, &b);
}
static int q_lock_extend(wk_processor *p, const char *ns)
{
    LOCK_E(ns);
    bool b;
    return wk_lock_extend(p, &e, wk_test_name(), &any_token, &b);
}
static int q_lock_inspect(wk_processor *p, const char *ns)
{
    LOCK_E(ns);
    wk_lock_state st;
    return wk_lock_inspect(p, &e, wk_test_name(), &st);
}
static int q_rw_try_read(wk_processor *p, const char *ns)
{
    RW_E(ns);
    bool b;
    return wk_rwlock_try_read(p, &e, wk_test_name(), &any_token, &b);
}
static int q_rw_try_write(wk_processor *p, const char *ns)
{
    RW_E(ns);
    bool b;
    return wk_rwlock_try_write(p, &e, wk_test_name(), &any_token, &b);
}
static int q_rw_release_read(wk_processor *p, const char *ns)
{
    RW_E(ns);
    bool b;
    return wk_rwlock_release_read(p, &e, wk_test_name(), &any_token, &b);
}
static int q_rw_extend_read(wk_processor *p, const char *ns)
{
    RW_E(ns);
    bool b;
    return wk_rwlock_extend_read(p, &e, wk_test_name(), &any_token, &b);
}
static int q_rw_release_write(wk_processor *p, const char *ns)
{
    RW_E(ns);
    bool b;
    return wk_rwlock_release_write(p, &e, wk_test_name(), &any_token, &b);
}
static int q_rw_extend_write(wk_processor *p, const char *ns)
{
    RW_E(ns);
    bool b;
    return wk_rwlock_extend_write(p, &e, wk_test_name(), &any_token, &b);
}
static int q_rw_inspect(wk_processor *p, const char *ns)
{
    RW_E(ns);
    wk_rwlock_state st;
    return wk_rwlock_inspect(p, &e, wk_test_name(), &st);
}

#define FAIR_LOCK_E(ns) wk_entity e = WK_LOCK_FAIR_ENTITY(ns, 5000)
#define FAIR_RW_E(ns) wk_entity e = WK_RWLOCK_FAIR_ENTITY(ns, 5000)

static int q_lock_try_fair(wk_processor *p, const char *ns)
{
    FAIR_LOCK_E(ns);
    bool b;
    return wk_lock_try(p, &e, wk_test_name(), &any_token, &b);
}
static int q_lock_owned(wk_processor *p, const char *ns)
{
    LOCK_E(ns);
    wk_lease_state st;
    return wk_lock_owned(p, &e, wk_test_name(), &any_token, &st);
}
static int q_lock_force_release(wk_processor *p, const char *ns)
{
    LOCK_E(ns);
    bool b;
    return wk_lock_force_release(p, &e, wk_test_name(), &b);
}
static int q_rw_try_read_fair(wk_processor *p, const char *ns)
{
    FAIR_RW_E(ns);
    bool b;
    return wk_rwlock_try_read(p, &e, wk_test_name(), &any_token, &b);
}
static int q_rw_try_write_fair(wk_processor *p, const char *ns)
{
    FAIR_RW_E(ns);
    bool b;
    return wk_rwlock_try_write(p, &e, wk_test_name(), &any_token, &b);
}
static int q_rw_owned_write(wk_processor *p, const char *ns)
{
    RW_E(ns);
    wk_lease_state st;
    return wk_rwlock_owned_write(p, &e, wk_test_name(), &any_token, &st);
}
static int q_rw_owned_read(wk_processor *p, const char *ns)
{
    RW_E(ns);
    wk_lease_state st;
    return wk_rwlock_owned_read(p, &e, wk_test_name(), &any_token, &st);
}
static int q_rw_force_release(wk_processor *p, const char *ns)
{
    RW_E(ns);
    bool b;
    return wk_rwlock_force_release(p, &e, wk_test_name(), &b);
}

static const wk_test_query queries[] = {
    WK_TEST_VARIANT(WK_KIND_LOCK, lock, try, " (fair)", q_lock_try_fair, WK_TEST_TAKES_LEASE),
    WK_TEST_ROW(WK_KIND_LOCK, lock, owned, q_lock_owned, 0),
    WK_TEST_ROW(WK_KIND_LOCK, lock, force_release, q_lock_force_release, 0),
    WK_TEST_VARIANT(WK_KIND_RWLOCK, rwlock, try_read, " (fair)", q_rw_try_read_fair,
                    WK_TEST_TAKES_LEASE),
    WK_TEST_VARIANT(WK_KIND_RWLOCK, rwlock, try_write, " (fair)", q_rw_try_write_fair,
                    WK_TEST_TAKES_LEASE),
    WK_TEST_ROW(WK_KIND_RWLOCK, rwlock, owned_write, q_rw_owned_write, 0),
    WK_TEST_ROW(WK_KIND_RWLOCK, rwlock, owned_read, q_rw_owned_read, 0),
    WK_TEST_ROW(WK_KIND_RWLOCK, rwlock, force_release, q_rw_force_release, 0),
    WK_TEST_ROW(WK_KIND_LOCK, lock, try, q_lock_try, WK_TEST_TAKES_LEASE),
    WK_TEST_ROW(WK_KIND_LOCK, lock, release, q_lock_release, 0),
    WK_TEST_ROW(WK_KIND_LOCK, lock, extend, q_lock_extend, WK_TEST_LENGTHENS_LEASE),
    WK_TEST_ROW(WK_KIND_LOCK, lock, inspect, q_lock_inspect, 0),
    WK_TEST_ROW(WK_KIND_RWLOCK, rwlock, try_read, q_rw_try_read, WK_TEST_TAKES_LEASE),
    WK_TEST_ROW(WK_KIND_RWLOCK, rwlock, try_write, q_rw_try_write, WK_TEST_TAKES_LEASE),
    WK_TEST_ROW(WK_KIND_RWLOCK, rwlock, release_read, q_rw_release_read, 0),
    WK_TEST_ROW(WK_KIND_RWLOCK, rwlock, extend_read, q_rw_extend_read, WK_TEST_LENGTHENS_LEASE),
    WK_TEST_ROW(WK_KIND_RWLOCK, rwlock, release_write, q_rw_release_write, 0),
    WK_TEST_ROW(WK_KIND_RWLOCK, rwlock, extend_write, q_rw_extend_write, WK_TEST_LENGTHENS_LEASE),
    WK_TEST_ROW(WK_KIND_RWLOCK, rwlock, inspect, q_rw_inspect, 0),
};

/* ------------------------------------------------------------------------
 * Allocations: a try+release cycle
 * ---------------------------------------------------------------------- */

static const wk_entity alloc_lock = WK_LOCK_ENTITY("alloc", 10000);
static const wk_entity alloc_rw = WK_RWLOCK_ENTITY("alloc", 10000);

static int lock_cycle(wk_processor *p, unsigned i)
{
    wk_token t;
    bool got = false, ok = false;
    int rc = wk_lock_try(p, &alloc_lock, wk_name_u64(i), &t, &got);
    if (rc == WK_OK)
        rc = wk_lock_release(p, &alloc_lock, wk_name_u64(i), &t, &ok);
    return rc != WK_OK ? rc : got && ok ? WK_OK : WK_TEST_WRONG_OUTCOME;
}

static int rw_cycle(wk_processor *p, unsigned i)
{
    wk_token t;
    bool got, ok;
    int rc = wk_rwlock_try_read(p, &alloc_rw, wk_name_u64(i), &t, &got);
    if (rc == WK_OK)
        rc = wk_rwlock_release_read(p, &alloc_rw, wk_name_u64(i), &t, &ok);
    return rc;
}

static const wk_entity alloc_fair = WK_LOCK_FAIR_ENTITY("alloc-fair", 10000);

/* A free lock: the waiting acquire is its plain try. */
/* Its own names: the suites run in parallel, and a try cycle on the same
 * names would make this acquire wait (and open its blocking connection). */
static const wk_entity alloc_lock_wait = WK_LOCK_ENTITY("alloc-acquire", 10000);

static int lock_acquire_cycle(wk_processor *p, unsigned i)
{
    wk_token t;
    bool got = false, ok = false;
    int rc =
        wk_lock_acquire(p, &alloc_lock_wait, wk_name_u64(i), wk_deadline_in(1000), NULL, &t, &got);
    if (rc == WK_OK)
        rc = wk_lock_release(p, &alloc_lock_wait, wk_name_u64(i), &t, &ok);
    return rc != WK_OK ? rc : got && ok ? WK_OK : WK_TEST_WRONG_OUTCOME;
}

static int fair_cycle(wk_processor *p, unsigned i)
{
    wk_token t;
    bool got = false, ok = false;
    int rc = wk_lock_try(p, &alloc_fair, wk_name_u64(i), &t, &got);
    if (rc == WK_OK)
        rc = wk_lock_release(p, &alloc_fair, wk_name_u64(i), &t, &ok);
    return rc != WK_OK ? rc : got && ok ? WK_OK : WK_TEST_WRONG_OUTCOME;
}

static int owned_op(wk_processor *p, unsigned i)
{
    wk_lease_state st;
    return wk_lock_owned(p, &alloc_lock, wk_name_u64(i), &any_token, &st);
}

static const wk_test_alloc_case allocs[] = {
    {"lock try+release", NULL, lock_cycle},
    {"rwlock read cycle", NULL, rw_cycle},
    {"lock acquire (free)+release", NULL, lock_acquire_cycle},
    {"fair lock try+release", NULL, fair_cycle},
    {"lock owned", NULL, owned_op},
};

/* ------------------------------------------------------------------------
 * Soak: mutual exclusion, reader/writer exclusion
 * ---------------------------------------------------------------------- */

#define LOCK_NAMES 4
#define RW_NAMES 3
#define LEASE_MS 3000 /* far longer than any stall the injector causes (≤ 0.6 s) */

static const wk_entity soak_lock = WK_LOCK_ENTITY("soak", LEASE_MS);
static const wk_entity soak_rw = WK_RWLOCK_ENTITY("soak", LEASE_MS);

typedef struct lock_shared {
    atomic_int holders[LOCK_NAMES];
} lock_shared;

typedef struct rw_shared {
    atomic_int readers[RW_NAMES], writers[RW_NAMES];
} rw_shared;

static void lock_op(wk_processor *p, const wk_test_soak_env *env)
{
    lock_shared *s = env->shared;
    unsigned n = randombytes_uniform(LOCK_NAMES);
    wk_token t;
    bool got = false, released;
    int rc = wk_lock_try(p, &soak_lock, wk_name_u64(n), &t, &got);
    env->account(rc, "lock.try");
    if (rc != WK_OK || !got)
        return;
    if (atomic_fetch_add(&s->holders[n], 1) != 0)
        env->violation("%s %d has two holders", "lock", (int)n);
    usleep(randombytes_uniform(300));
    atomic_fetch_sub(&s->holders[n], 1);
    env->account(wk_lock_release(p, &soak_lock, wk_name_u64(n), &t, &released), "lock.release");
}

static void rw_op(wk_processor *p, const wk_test_soak_env *env)
{
    rw_shared *s = env->shared;
    unsigned n = randombytes_uniform(RW_NAMES);
    wk_token t;
    bool got = false, ok;
    if (randombytes_uniform(4) == 0) {
        int rc = wk_rwlock_try_write(p, &soak_rw, wk_name_u64(n), &t, &got);
        env->account(rc, "rwlock.try_write");
        if (rc != WK_OK || !got)
            return;
        if (atomic_fetch_add(&s->writers[n], 1) != 0)
            env->violation("%s %d has two writers", "rwlock", (int)n);
        if (atomic_load(&s->readers[n]) != 0)
            env->violation("%s %d has a writer and readers", "rwlock", (int)n);
        usleep(randombytes_uniform(300));
        atomic_fetch_sub(&s->writers[n], 1);
        env->account(wk_rwlock_release_write(p, &soak_rw, wk_name_u64(n), &t, &ok),
                     "release_write");
    } else {
        int rc = wk_rwlock_try_read(p, &soak_rw, wk_name_u64(n), &t, &got);
        env->account(rc, "rwlock.try_read");
        if (rc != WK_OK || !got)
            return;
        atomic_fetch_add(&s->readers[n], 1);
        if (atomic_load(&s->writers[n]) != 0)
            env->violation("%s %d has a reader and a writer", "rwlock", (int)n);
        usleep(randombytes_uniform(300));
        atomic_fetch_sub(&s->readers[n], 1);
        env->account(wk_rwlock_release_read(p, &soak_rw, wk_name_u64(n), &t, &ok), "release_read");
    }
}

/* Waiting acquires (wake on release) on names of their own, unfair and
 * fair: under faults they keep exclusion (their own holders' counts). */
static const wk_entity soak_wait[2] = {WK_LOCK_ENTITY("soak-wait", LEASE_MS),
                                       WK_LOCK_FAIR_ENTITY("soak-fair", LEASE_MS)};

typedef struct wait_shared {
    atomic_int holders[2][LOCK_NAMES];
} wait_shared;

static void wait_op(wk_processor *p, const wk_test_soak_env *env)
{
    wait_shared *s = env->shared;
    unsigned n = randombytes_uniform(LOCK_NAMES), fair = randombytes_uniform(2);
    const wk_entity *e = &soak_wait[fair];
    atomic_int *holders = &s->holders[fair][n];
    wk_token t;
    bool got = false, released;
    int rc = wk_lock_acquire(p, e, wk_name_u64(n), wk_deadline_in(300), NULL, &t, &got);
    env->account(rc, "lock.acquire");
    if (rc != WK_OK || !got)
        return;
    if (atomic_fetch_add(holders, 1) != 0)
        env->violation("%s %d has two holders", "lock (waiting)", (int)n);
    usleep(randombytes_uniform(300));
    atomic_fetch_sub(holders, 1);
    env->account(wk_lock_release(p, e, wk_name_u64(n), &t, &released), "lock.release");
}

static const wk_test_soak_op soak[] = {
    {"lock", 4, sizeof(lock_shared), lock_op, NULL},
    {"lock.acquire", 2, sizeof(wait_shared), wait_op, NULL},
    {"rwlock", 3, sizeof(rw_shared), rw_op, NULL},
};

static wk_test_kind lock_rows = {
    .id = "lock",
    .ops = (const char *const[]){WK_LOCK_OPS(WK_TEST_OP_NAME) WK_RWLOCK_OPS(WK_TEST_OP_NAME) NULL},
    .queries = queries,
    .nqueries = WK_TEST_COUNT(queries),
    .allocs = allocs,
    .nallocs = WK_TEST_COUNT(allocs),
    .soak = soak,
    .nsoak = WK_TEST_COUNT(soak),
};
WK_TEST_KIND(lock_rows)
