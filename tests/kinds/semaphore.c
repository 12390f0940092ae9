/*
 * tests/kinds/semaphore.c — the test rows of Semaphore
 * (tests/kinds/kinds.h): every built-in query, the try+release cycle whose
 * allocations are counted, and the soak operation with its invariant
 * (never more holders of a name than its permits).
 */
#include <stdatomic.h>
#include <unistd.h>

#include <sodium.h>

#include "tests/kinds/kinds.h"

/* ------------------------------------------------------------------------
 * Queries
 * ---------------------------------------------------------------------- */

static wk_token any_token;

#define SEM_E(ns) wk_entity e = WK_SEMAPHORE_ENTITY(ns, 2, 5000)

static int q_try(wk_processor *p, const char *ns)
{
    SEM_E(ns);
    static wk_token t;
    static bool b;
    return wk_semaphore_try(p, &e, wk_test_name(), &t, &b);
}
static int q_release(wk_processor *p, const char *ns)
{
    SEM_E(ns);
    static bool b;
    return wk_semaphore_release(p, &e, wk_test_name(), &any_token, &b);
}
static int q_extend(wk_processor *p, const char *ns)
{
    SEM_E(ns);
    static bool b;
    return wk_semaphore_extend(p, &e, wk_test_name(), &any_token, &b);
}
static int q_owned(wk_processor *p, const char *ns)
{
    SEM_E(ns);
    static wk_lease_state st;
    return wk_semaphore_owned(p, &e, wk_test_name(), &any_token, &st);
}
static int q_inspect(wk_processor *p, const char *ns)
{
    SEM_E(ns);
    static wk_semaphore_state st;
    return wk_semaphore_inspect(p, &e, wk_test_name(), &st);
}
static int q_force_release(wk_processor *p, const char *ns)
{
    SEM_E(ns);
    static bool was_held;
    return wk_semaphore_force_release(p, &e, wk_test_name(), &was_held);
}

static const wk_test_query queries[] = {
    WK_TEST_ROW(WK_KIND_SEMAPHORE, semaphore, try, q_try, WK_TEST_TAKES_LEASE),
    WK_TEST_ROW(WK_KIND_SEMAPHORE, semaphore, release, q_release, 0),
    WK_TEST_ROW(WK_KIND_SEMAPHORE, semaphore, extend, q_extend, WK_TEST_LENGTHENS_LEASE),
    WK_TEST_ROW(WK_KIND_SEMAPHORE, semaphore, owned, q_owned, 0),
    WK_TEST_ROW(WK_KIND_SEMAPHORE, semaphore, inspect, q_inspect, 0),
    WK_TEST_ROW(WK_KIND_SEMAPHORE, semaphore, force_release, q_force_release, 0),
};

/* ------------------------------------------------------------------------
 * Allocations: a try+release cycle
 * ---------------------------------------------------------------------- */

static const wk_entity alloc_sem = WK_SEMAPHORE_ENTITY("alloc", 4, 10000);

static int sem_cycle(wk_processor *p, unsigned i)
{
    wk_token t;
    bool got = false, ok = false;
    int rc = wk_semaphore_try(p, &alloc_sem, wk_name_u64(i), &t, &got);
    if (rc == WK_OK)
        rc = wk_semaphore_release(p, &alloc_sem, wk_name_u64(i), &t, &ok);
    return rc != WK_OK ? rc : got && ok ? WK_OK : WK_TEST_WRONG_OUTCOME;
}

/* An uncontended acquire: its first attempt takes the permit, so no
 * wait (and no blocking connection) happens. */
/* Its own names: the suites run in parallel, and a try cycle on the same
 * names would make this acquire wait (and open its blocking connection). */
static const wk_entity alloc_sem_wait = WK_SEMAPHORE_ENTITY("alloc-acquire", 4, 10000);

static int sem_acquire_cycle(wk_processor *p, unsigned i)
{
    wk_token t;
    bool got = false, ok = false;
    int rc =
        wk_semaphore_acquire(p, &alloc_sem_wait, wk_name_u64(i), wk_deadline_in(10000), &t, &got);
    if (rc == WK_OK)
        rc = wk_semaphore_release(p, &alloc_sem_wait, wk_name_u64(i), &t, &ok);
    return rc != WK_OK ? rc : got && ok ? WK_OK : WK_TEST_WRONG_OUTCOME;
}

static const wk_test_alloc_case allocs[] = {
    {"semaphore try+release", NULL, sem_cycle},
    {"semaphore acquire+release (uncontended)", NULL, sem_acquire_cycle},
};

/* ------------------------------------------------------------------------
 * Soak: the bound
 * ---------------------------------------------------------------------- */

#define NAMES 2
#define PERMITS 3
#define LEASE_MS 3000 /* far longer than any stall the injector causes (≤ 0.6 s) */

static const wk_entity soak_sem = WK_SEMAPHORE_ENTITY("soak", PERMITS, LEASE_MS);

typedef struct sem_shared {
    atomic_int holders[NAMES];
    atomic_int most[NAMES]; /* the most holders seen at once */
} sem_shared;

static void sem_op(wk_processor *p, const wk_test_soak_env *env)
{
    sem_shared *s = env->shared;
    unsigned n = randombytes_uniform(NAMES);
    wk_token t;
    bool got = false, ok;
    /* One in four waits (woken by releases, over its own connection). */
    bool wait = randombytes_uniform(4) == 0;
    int rc = wait
                 ? wk_semaphore_acquire(p, &soak_sem, wk_name_u64(n), wk_deadline_in(200), &t, &got)
                 : wk_semaphore_try(p, &soak_sem, wk_name_u64(n), &t, &got);
    env->account(rc, wait ? "semaphore.acquire" : "semaphore.try");
    if (rc != WK_OK || !got)
        return;
    int now = atomic_fetch_add(&s->holders[n], 1) + 1;
    if (now > PERMITS)
        env->violation("%s %d has more holders than permits", "semaphore", (int)n);
    for (int m = atomic_load(&s->most[n]); now > m;)
        if (atomic_compare_exchange_weak(&s->most[n], &m, now))
            break;
    usleep(randombytes_uniform(500));
    atomic_fetch_sub(&s->holders[n], 1);
    env->account(wk_semaphore_release(p, &soak_sem, wk_name_u64(n), &t, &ok), "semaphore.release");
}

static void sem_report(const wk_test_soak_env *env, double elapsed_s)
{
    (void)elapsed_s;
    sem_shared *s = env->shared;
    printf("  semaphore holders: at most %d and %d at once (permits %d)\n",
           atomic_load(&s->most[0]), atomic_load(&s->most[1]), PERMITS);
}

static const wk_test_soak_op soak[] = {
    {"semaphore", 3, sizeof(sem_shared), sem_op, sem_report},
};

static wk_test_kind semaphore_rows = {
    .id = "semaphore",
    .ops = (const char *const[]){WK_SEMAPHORE_OPS(WK_TEST_OP_NAME) NULL},
    .queries = queries,
    .nqueries = WK_TEST_COUNT(queries),
    .allocs = allocs,
    .nallocs = WK_TEST_COUNT(allocs),
    .soak = soak,
    .nsoak = WK_TEST_COUNT(soak),
};
WK_TEST_KIND(semaphore_rows)
