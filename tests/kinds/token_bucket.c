/*
 * tests/kinds/token_bucket.c — the test rows of TokenBucket
 * (tests/kinds/kinds.h): every built-in query, the acquire whose
 * allocations are counted, and the soak's limiter with its bound (allowed
 * ≤ capacity + rate × elapsed + 1).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "tests/kinds/kinds.h"

/* ------------------------------------------------------------------------
 * Queries
 * ---------------------------------------------------------------------- */

#define TB_E(ns) wk_entity e = WK_TOKEN_BUCKET_ENTITY(ns, 10, 1, 1000)

static int q_token_bucket_acquire(wk_processor *p, const char *ns)
{
    TB_E(ns);
    wk_token_bucket_outcome o;
    return wk_token_bucket_acquire(p, &e, wk_test_name(), 1, &o);
}
static int q_token_bucket_peek(wk_processor *p, const char *ns)
{
    TB_E(ns);
    wk_token_bucket_state st;
    return wk_token_bucket_peek(p, &e, wk_test_name(), &st);
}
static int q_token_bucket_reset(wk_processor *p, const char *ns)
{
    TB_E(ns);
    bool used;
    return wk_token_bucket_reset(p, &e, wk_test_name(), &used);
}

static const wk_test_query queries[] = {
    WK_TEST_ROW(WK_KIND_TOKEN_BUCKET, token_bucket, acquire, q_token_bucket_acquire, 0),
    WK_TEST_ROW(WK_KIND_TOKEN_BUCKET, token_bucket, peek, q_token_bucket_peek, 0),
    WK_TEST_ROW(WK_KIND_TOKEN_BUCKET, token_bucket, reset, q_token_bucket_reset, 0),
};

/* ------------------------------------------------------------------------
 * Allocations: an acquire
 * ---------------------------------------------------------------------- */

static const wk_entity bucket = WK_TOKEN_BUCKET_ENTITY("alloc", 1000000, 1000000, 1000);

static int bucket_acquire(wk_processor *p, unsigned i)
{
    wk_token_bucket_outcome o;
    int rc = wk_token_bucket_acquire(p, &bucket, wk_name_u64(i % 8), 1, &o);
    return rc != WK_OK ? rc : o.allowed ? WK_OK : WK_TEST_WRONG_OUTCOME;
}

static const wk_test_alloc_case allocs[] = {
    {"token bucket acquire", NULL, bucket_acquire},
};

/* ------------------------------------------------------------------------
 * Soak: the limiter's bound
 * ---------------------------------------------------------------------- */

#define BUCKET_CAPACITY 20.0
#define BUCKET_RATE 50.0 /* per second */
static const wk_entity soak_bucket = WK_TOKEN_BUCKET_ENTITY("soak", BUCKET_CAPACITY, 50, 1000);

typedef struct limiter_shared {
    atomic_long allowed;
} limiter_shared;

static void limiter_op(wk_processor *p, const wk_test_soak_env *env)
{
    limiter_shared *s = env->shared;
    wk_token_bucket_outcome o;
    int rc = wk_token_bucket_acquire(p, &soak_bucket, wk_name_str("shared"), 1, &o);
    env->account(rc, "token_bucket.acquire");
    if (rc == WK_OK && o.allowed)
        atomic_fetch_add(&s->allowed, 1);
}

static void limiter_report(const wk_test_soak_env *env, double elapsed_s)
{
    limiter_shared *s = env->shared;
    long allowed = atomic_load(&s->allowed);
    double bound = BUCKET_CAPACITY + BUCKET_RATE * elapsed_s + 1;
    if (allowed > bound)
        env->violation("%s allowed more than its bound (%d)", "limiter", (int)allowed);
    printf("  limiter allowed:   %ld (bound %.0f)\n", allowed, bound);
}

static const wk_test_soak_op soak[] = {
    {"limiter", 2, sizeof(limiter_shared), limiter_op, limiter_report},
};

static wk_test_kind token_bucket_rows = {
    .id = "token_bucket",
    .ops = (const char *const[]){WK_TOKEN_BUCKET_OPS(WK_TEST_OP_NAME) NULL},
    .queries = queries,
    .nqueries = WK_TEST_COUNT(queries),
    .allocs = allocs,
    .nallocs = WK_TEST_COUNT(allocs),
    .soak = soak,
    .nsoak = WK_TEST_COUNT(soak),
};
WK_TEST_KIND(token_bucket_rows)
