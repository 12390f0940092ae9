/*
 * tests/perf/alloc_more.h — allocation counts for the limiter and cache
 * paths (included by test_allocations.c, which defines count_ops()).
 */
static const wk_entity bucket = WK_TOKEN_BUCKET_ENTITY("alloc", 1000000, 1000000, 1000);

static void bucket_acquire(wk_processor *p, unsigned i)
{
    wk_token_bucket_outcome o;
    cr_assert_eq(wk_token_bucket_acquire(p, &bucket, wk_name_u64(i % 8), 1, &o), WK_OK);
    cr_assert(o.allowed);
}

Test(allocations, limiter_acquire_allocates_nothing_of_its_own)
{
    count_ops("token bucket acquire", bucket_acquire, 200);
}

#include "alloc_cache.h"
