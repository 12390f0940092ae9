/*
 * tests/perf/alloc_cache.h — allocation counts for the cache paths: put and
 * get into the caller's buffer, and an unchanged get-if-changed. (Plain
 * wk_cache_get returns a heap body by design; wk_cache_get_into is the
 * allocation-free read.)
 */
static const wk_entity cache = WK_CACHE_ENTITY("alloc", 60000);
static char body_1k[1024];

static void cache_put_get(wk_processor *p, unsigned i)
{
    char back[2048];
    wk_buffer buf = {back, sizeof(back), 0, false};
    cr_assert_eq(wk_cache_put(p, &cache, wk_name_u64(i % 8), body_1k, sizeof(body_1k)), WK_OK);
    cr_assert_eq(wk_cache_get_into(p, &cache, wk_name_u64(i % 8), &buf), WK_OK);
    cr_assert(buf.found && buf.len == sizeof(body_1k));
}

Test(allocations, cache_put_and_get_into_allocate_nothing_of_their_own)
{
    memset(body_1k, 'b', sizeof(body_1k));
    count_ops("cache put+get_into (1 KiB)", cache_put_get, 200);
}

static const wk_entity hcache = WK_HASHED_CACHE_ENTITY("alloc", 60000);
static uint8_t known_hash[WK_HASH_LEN];

static void revalidate(wk_processor *p, unsigned i)
{
    (void)i;
    wk_body out = WK_BODY_INIT;
    cr_assert_eq(wk_hashed_cache_get_if_changed(p, &hcache, wk_name_str("big"), known_hash, &out),
                 WK_OK);
    cr_assert_eq(out.change, WK_ITEM_UNCHANGED);
    wk_body_free(&out);
}

Test(allocations, unchanged_revalidation_allocates_nothing_of_its_own)
{
    static char big[64 * 1024];
    memset(big, 'h', sizeof(big));
    wk_db *db = wk_test_open(NULL);
    cr_assert_eq(wk_hashed_cache_put(wk_db_processor(db), &hcache, wk_name_str("big"), big,
                                     sizeof(big), known_hash),
                 WK_OK);
    wk_db_close(db);
    count_ops("hashed cache get-if-changed, unchanged (64 KiB)", revalidate, 200);
}
