/*
 * tests/kinds/counter.c — the test rows of Counter (tests/kinds/kinds.h):
 * every operation, run by the capability test, the fuzzer, the allocation
 * test, the guarantee matrix and the cluster suite; incr is a hot path.
 */
#include "tests/kinds/kinds.h"

static int q_counter_incr(wk_processor *p, const char *ns)
{
    wk_entity e = WK_COUNTER_ENTITY(ns, 60000);
    int64_t v;
    return wk_counter_incr(p, &e, wk_test_name(), 2, &v);
}

static int q_counter_get(wk_processor *p, const char *ns)
{
    wk_entity e = WK_COUNTER_ENTITY(ns, 0);
    int64_t v;
    return wk_counter_get(p, &e, wk_test_name(), &v);
}

static const wk_test_query queries[] = {
    WK_TEST_ROW(WK_KIND_COUNTER, counter, incr, q_counter_incr, 0),
    WK_TEST_ROW(WK_KIND_COUNTER, counter, get, q_counter_get, 0),
};

/* Counts from 1 by one: the value read back after each increment. */
static int alloc_incr(wk_processor *p, unsigned i)
{
    static const wk_entity e = WK_COUNTER_ENTITY("alloc", 0);
    int64_t v = 0, got = -1;
    wk_name name = wk_name_str("alloc-counter");
    int rc = wk_counter_incr(p, &e, name, 1, &v);
    if (!rc)
        rc = wk_counter_get(p, &e, name, &got);
    (void)i;
    return rc ? rc : got == v ? WK_OK : WK_TEST_WRONG_OUTCOME;
}

static const wk_test_alloc_case allocs[] = {{"counter incr+get", NULL, alloc_incr}};

static wk_test_kind counter_rows = {
    .id = "counter", .ops = (const char *const[]){WK_COUNTER_OPS(WK_TEST_OP_NAME) NULL},
    .queries = queries, .nqueries = WK_TEST_COUNT(queries),
    .allocs = allocs, .nallocs = WK_TEST_COUNT(allocs)};
WK_TEST_KIND(counter_rows)
