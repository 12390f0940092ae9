/*
 * bench/bench_cache.h — Cache put+get (1 KiB) and HashedCache
 * get-if-changed on an unchanged 64 KiB body (included by bench_limiter_cache.c).
 */
static const wk_entity bench_cache = WK_CACHE_ENTITY("bench", 60000);
static char cache_body[1024];

static void cache_seq_lib(bench_ctx *c, unsigned i)
{
    char back[2048];
    wk_buffer buf = {back, sizeof(back), 0, false};
    wk_processor *p = wk_db_processor(c->db);
    bench_check(wk_cache_put(p, &bench_cache, wk_name_u64(i % 1024), cache_body, sizeof(cache_body)),
                c, "cache.put");
    bench_check(wk_cache_get_into(p, &bench_cache, wk_name_u64(i % 1024), &buf), c, "cache.get");
}

static void cache_raw_send(bench_ctx *c, unsigned i, bool get)
{
    char key[128];
    size_t klen = bench_key(key, "Cache", "bench", i % 1024, NULL);
    if (get) {
        const char *argv[] = {"GET", key};
        size_t lens[] = {3, klen};
        bench_raw_append(c, 2, argv, lens);
    } else {
        const char *argv[] = {"SET", key, cache_body, "PX", "60000"};
        size_t lens[] = {3, klen, sizeof(cache_body), 2, 5};
        bench_raw_append(c, 5, argv, lens);
    }
}

static void cache_seq_raw(bench_ctx *c, unsigned i)
{
    cache_raw_send(c, i, false);
    freeReplyObject(bench_raw_reply(c));
    cache_raw_send(c, i, true);
    freeReplyObject(bench_raw_reply(c));
}

static void cache_batch_lib(bench_ctx *c, unsigned base)
{
    static char back[BATCH][2048];
    wk_buffer buf[BATCH];
    wk_processor *p = wk_batch_processor(c->batch);
    for (unsigned k = 0; k < BATCH; k++)
        wk_cache_put(p, &bench_cache, wk_name_u64((base + k) % 1024), cache_body,
                     sizeof(cache_body));
    bench_check(wk_batch_exec(c->batch), c, "batch cache.put");
    for (unsigned k = 0; k < BATCH; k++) {
        buf[k] = (wk_buffer){back[k], sizeof(back[k]), 0, false};
        wk_cache_get_into(p, &bench_cache, wk_name_u64((base + k) % 1024), &buf[k]);
    }
    bench_check(wk_batch_exec(c->batch), c, "batch cache.get");
}

static void cache_batch_raw(bench_ctx *c, unsigned base)
{
    for (unsigned k = 0; k < BATCH; k++)
        cache_raw_send(c, base + k, false);
    for (unsigned k = 0; k < BATCH; k++)
        freeReplyObject(bench_raw_reply(c));
    for (unsigned k = 0; k < BATCH; k++)
        cache_raw_send(c, base + k, true);
    for (unsigned k = 0; k < BATCH; k++)
        freeReplyObject(bench_raw_reply(c));
}

static void cache_setup(bench_ctx *c)
{
    (void)c;
    memset(cache_body, 'c', sizeof(cache_body));
}

/* ---- HashedCache get-if-changed, unchanged 64 KiB ---- */

static const wk_entity bench_hcache = WK_HASHED_CACHE_ENTITY("bench", 600000);
static uint8_t hc_hash[WK_HASH_LEN];
static bench_learned hc_learned;

static void hc_seq_lib(bench_ctx *c, unsigned i)
{
    wk_body out = WK_BODY_INIT;
    bench_check(wk_hashed_cache_get_if_changed(wk_db_processor(c->db), &bench_hcache,
                                               wk_name_u64(i % 16), hc_hash, &out),
                c, "hashed_cache.get_if_changed");
    if (out.change != WK_ITEM_UNCHANGED) {
        fprintf(stderr, "bench: hashed cache item changed\n");
        exit(1);
    }
    wk_body_free(&out);
}

static void hc_raw_send(bench_ctx *c, unsigned i)
{
    char key[128];
    size_t klen = bench_key(key, "HashedCache", "bench", i % 16, NULL);
    bench_learned_send(c, &hc_learned, key, klen);
}

static void hc_seq_raw(bench_ctx *c, unsigned i)
{
    hc_raw_send(c, i);
    freeReplyObject(bench_raw_reply(c));
}

static void hc_batch_lib(bench_ctx *c, unsigned base)
{
    wk_body out[BATCH];
    for (unsigned k = 0; k < BATCH; k++) {
        out[k] = (wk_body)WK_BODY_INIT;
        wk_hashed_cache_get_if_changed(wk_batch_processor(c->batch), &bench_hcache,
                                       wk_name_u64((base + k) % 16), hc_hash, &out[k]);
    }
    bench_check(wk_batch_exec(c->batch), c, "batch get_if_changed");
    for (unsigned k = 0; k < BATCH; k++)
        wk_body_free(&out[k]);
}

static void hc_batch_raw(bench_ctx *c, unsigned base)
{
    for (unsigned k = 0; k < BATCH; k++)
        hc_raw_send(c, base + k);
    for (unsigned k = 0; k < BATCH; k++)
        freeReplyObject(bench_raw_reply(c));
}

static void hc_setup(bench_ctx *c)
{
    static char big[64 * 1024];
    memset(big, 'h', sizeof(big));
    for (unsigned n = 0; n < 16; n++)
        bench_check(wk_hashed_cache_put(wk_db_processor(c->db), &bench_hcache, wk_name_u64(n), big,
                                        sizeof(big), hc_hash),
                    c, "hashed_cache.put");
    bench_learn(c, hc_seq_lib, &hc_learned);
}

#define BENCH_CACHE_CASES                                                                   \
    {"cache put+get (1 KiB)", cache_setup, cache_seq_lib, cache_seq_raw, cache_batch_lib,   \
     cache_batch_raw},                                                                      \
    {"hashed get-if-changed (64 KiB, same)", hc_setup, hc_seq_lib, hc_seq_raw, hc_batch_lib, \
     hc_batch_raw},
