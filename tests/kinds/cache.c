/*
 * tests/kinds/cache.c — the test rows of Cache and HashedCache
 * (tests/kinds/kinds.h): every built-in query (typed wrappers and the local
 * copy run the same queries, so they have no rows of their own); the put
 * and get into the caller's buffer and an unchanged get-if-changed, whose
 * allocations are counted (plain wk_cache_get returns a heap body by
 * design; wk_cache_get_into is the allocation-free read); and the soak's
 * HashedCache puts of random bodies, gets and revalidations, each body
 * checked against its hash here too (the library checks it as well, and
 * reports WK_ECORRUPT).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include <sodium.h>

#include "tests/kinds/kinds.h"

/* ------------------------------------------------------------------------
 * Queries
 * ---------------------------------------------------------------------- */

#define CACHE_E(ns) wk_entity e = WK_CACHE_ENTITY(ns, 5000)
#define HCACHE_E(ns) wk_entity e = WK_HASHED_CACHE_ENTITY(ns, 5000)

static int q_cache_get(wk_processor *p, const char *ns)
{
    CACHE_E(ns);
    wk_body b = WK_BODY_INIT;
    int rc = wk_cache_get(p, &e, wk_test_name(), &b);
    wk_body_free(&b);
    return rc;
}
static int q_cache_get_into(wk_processor *p, const char *ns)
{
    CACHE_E(ns);
    char space[8];
    wk_buffer buf = {space, sizeof(space), 0, false};
    return wk_cache_get_into(p, &e, wk_test_name(), &buf);
}
static int q_cache_put(wk_processor *p, const char *ns)
{
    CACHE_E(ns);
    return wk_cache_put(p, &e, wk_test_name(), "body", 4);
}
static int q_cache_remove(wk_processor *p, const char *ns)
{
    CACHE_E(ns);
    bool removed;
    return wk_cache_remove(p, &e, wk_test_name(), &removed);
}
static int q_hcache_get(wk_processor *p, const char *ns)
{
    HCACHE_E(ns);
    wk_body b = WK_BODY_INIT;
    int rc = wk_hashed_cache_get(p, &e, wk_test_name(), &b);
    wk_body_free(&b);
    return rc;
}
static int q_hcache_hash(wk_processor *p, const char *ns)
{
    HCACHE_E(ns);
    wk_body b = WK_BODY_INIT;
    int rc = wk_hashed_cache_hash(p, &e, wk_test_name(), &b);
    wk_body_free(&b);
    return rc;
}
static int q_hcache_get_if_changed(wk_processor *p, const char *ns)
{
    HCACHE_E(ns);
    static const uint8_t known[WK_HASH_LEN] = {1};
    wk_body b = WK_BODY_INIT;
    int rc = wk_hashed_cache_get_if_changed(p, &e, wk_test_name(), known, &b);
    wk_body_free(&b);
    return rc;
}
static int q_hcache_put(wk_processor *p, const char *ns)
{
    HCACHE_E(ns);
    return wk_hashed_cache_put(p, &e, wk_test_name(), "body", 4, NULL);
}
static int q_hcache_remove(wk_processor *p, const char *ns)
{
    HCACHE_E(ns);
    bool removed;
    return wk_hashed_cache_remove(p, &e, wk_test_name(), &removed);
}

static const wk_test_query queries[] = {
    WK_TEST_ROW(WK_KIND_CACHE, cache, get, q_cache_get, 0),
    WK_TEST_ROW(WK_KIND_CACHE, cache, get_into, q_cache_get_into, 0),
    WK_TEST_ROW(WK_KIND_CACHE, cache, put, q_cache_put, 0),
    WK_TEST_ROW(WK_KIND_CACHE, cache, remove, q_cache_remove, 0),
    WK_TEST_ROW(WK_KIND_HASHED_CACHE, hashed_cache, get, q_hcache_get, 0),
    WK_TEST_ROW(WK_KIND_HASHED_CACHE, hashed_cache, hash, q_hcache_hash, 0),
    WK_TEST_ROW(WK_KIND_HASHED_CACHE, hashed_cache, get_if_changed, q_hcache_get_if_changed, 0),
    WK_TEST_ROW(WK_KIND_HASHED_CACHE, hashed_cache, put, q_hcache_put, 0),
    WK_TEST_ROW(WK_KIND_HASHED_CACHE, hashed_cache, remove, q_hcache_remove, 0),
};

/* ------------------------------------------------------------------------
 * Allocations
 * ---------------------------------------------------------------------- */

static const wk_entity alloc_cache = WK_CACHE_ENTITY("alloc", 60000);
static char body_1k[1024];

static int put_body_1k(wk_processor *p)
{
    (void)p;
    memset(body_1k, 'b', sizeof(body_1k));
    return WK_OK;
}

static int cache_put_get(wk_processor *p, unsigned i)
{
    char back[2048];
    wk_buffer buf = {back, sizeof(back), 0, false};
    int rc = wk_cache_put(p, &alloc_cache, wk_name_u64(i % 8), body_1k, sizeof(body_1k));
    if (rc == WK_OK)
        rc = wk_cache_get_into(p, &alloc_cache, wk_name_u64(i % 8), &buf);
    return rc != WK_OK                               ? rc
           : buf.found && buf.len == sizeof(body_1k) ? WK_OK
                                                     : WK_TEST_WRONG_OUTCOME;
}

static const wk_entity alloc_hcache = WK_HASHED_CACHE_ENTITY("alloc", 60000);
static uint8_t known_hash[WK_HASH_LEN];

static int put_big(wk_processor *p)
{
    static char big[64 * 1024];
    memset(big, 'h', sizeof(big));
    return wk_hashed_cache_put(p, &alloc_hcache, wk_name_str("big"), big, sizeof(big), known_hash);
}

static int revalidate(wk_processor *p, unsigned i)
{
    (void)i;
    wk_body out = WK_BODY_INIT;
    int rc = wk_hashed_cache_get_if_changed(p, &alloc_hcache, wk_name_str("big"), known_hash, &out);
    bool unchanged = out.change == WK_ITEM_UNCHANGED;
    wk_body_free(&out);
    return rc != WK_OK ? rc : unchanged ? WK_OK : WK_TEST_WRONG_OUTCOME;
}

/* A near cache whose hits are counted: opened once from the suite's
 * handle (its thread allocates on its own thread, which is not counted)
 * and left open until the process ends. */
static const wk_entity alloc_near = WK_CACHE_ENTITY("alloc-near", 600000);
static wk_near_cache *alloc_nc;

static int open_near(wk_processor *p)
{
    memset(body_1k, 'n', sizeof(body_1k));
    int rc = wk_cache_put(p, &alloc_near, wk_name_str("hit"), body_1k, sizeof(body_1k));
    const wk_entity *ents[] = {&alloc_near};
    wk_near_cache_options o = WK_NEAR_CACHE_OPTIONS_INIT;
    o.entities = ents;
    o.nentities = 1;
    o.staleness_ms = 600000; /* verified through the whole window, whatever the load */
    if (rc == WK_OK)
        rc = wk_near_cache_open(&alloc_nc, p->db, &o, NULL, 0);
    return rc;
}

/* A hit, then the round trip it saves (so that the counter, which must
 * see hiredis allocate, has a reply to see). */
static int near_hit(wk_processor *p, unsigned i)
{
    (void)i;
    char back[2048], trip[2048];
    wk_buffer buf = {back, sizeof(back), 0, false}, rt = {trip, sizeof(trip), 0, false};
    int rc = wk_near_cache_get_into(alloc_nc, &alloc_near, wk_name_str("hit"), &buf);
    if (rc == WK_OK)
        rc = wk_cache_get_into(p, &alloc_near, wk_name_str("hit"), &rt);
    return rc != WK_OK                                           ? rc
           : buf.found && buf.len == sizeof(body_1k) && rt.found ? WK_OK
                                                                 : WK_TEST_WRONG_OUTCOME;
}

static const wk_test_alloc_case allocs[] = {
    {"cache put+get_into (1 KiB)", put_body_1k, cache_put_get},
    {"hashed cache get-if-changed, unchanged (64 KiB)", put_big, revalidate},
    {"near cache hit + the get_into it saves (1 KiB)", open_near, near_hit},
};

/* ------------------------------------------------------------------------
 * Soak: every HashedCache body hashes to its stored hash
 * ---------------------------------------------------------------------- */

static const wk_entity soak_hcache = WK_HASHED_CACHE_ENTITY("soak", 30000);

typedef struct hcache_shared {
    atomic_long checks;
} hcache_shared;

static void hcache_op(wk_processor *p, const wk_test_soak_env *env)
{
    hcache_shared *s = env->shared;
    static uint8_t body[4096];
    unsigned n = randombytes_uniform(4);
    if (randombytes_uniform(3) == 0) {
        size_t len = randombytes_uniform(sizeof(body));
        randombytes_buf(body, len);
        env->account(wk_hashed_cache_put(p, &soak_hcache, wk_name_u64(n), body, len, NULL),
                     "hashed_cache.put");
        return;
    }
    wk_body out = WK_BODY_INIT;
    int rc = wk_hashed_cache_get(p, &soak_hcache, wk_name_u64(n), &out);
    env->account(rc, "hashed_cache.get");
    if (rc == WK_OK && out.found) {
        uint8_t h[WK_BLAKE3_OUT_LEN];
        wk_blake3(out.data, out.len, h);
        if (memcmp(h, out.hash, sizeof(h)) != 0)
            env->violation("%s %d: body does not match its hash", "hashed cache", (int)n);
        uint8_t known[WK_HASH_LEN];
        memcpy(known, out.hash, sizeof(known));
        rc = wk_hashed_cache_get_if_changed(p, &soak_hcache, wk_name_u64(n), known, &out);
        env->account(rc, "hashed_cache.get_if_changed");
        if (rc == WK_OK && out.change == WK_ITEM_CHANGED) {
            wk_blake3(out.data, out.len, h);
            if (memcmp(h, out.hash, sizeof(h)) != 0)
                env->violation("%s %d: changed body does not match its hash", "hashed cache",
                               (int)n);
        }
        atomic_fetch_add(&s->checks, 1);
    }
    wk_body_free(&out);
}

static void hcache_report(const wk_test_soak_env *env, double elapsed_s)
{
    (void)elapsed_s;
    hcache_shared *s = env->shared;
    printf("  cache hash checks: %ld\n", atomic_load(&s->checks));
}

/* A near cache per worker over the same items: under the faults (kills,
 * flushes, stalls) it serves only bodies that match their hash, and its
 * reads fail only with connection errors. Opened at the first operation
 * from the worker's handle and kept for the worker's life. */
typedef struct near_shared {
    atomic_long served, hits;
} near_shared;

static void near_op(wk_processor *p, const wk_test_soak_env *env)
{
    static wk_near_cache *nc;
    near_shared *s = env->shared;
    if (wk_db_cluster_primaries(p->db) > 0)
        return; /* not in a Redis Cluster yet: wk_near_cache_open refuses it */
    if (!nc) {
        const wk_entity *ents[] = {&soak_hcache};
        wk_near_cache_options o = WK_NEAR_CACHE_OPTIONS_INIT;
        o.entities = ents;
        o.nentities = 1;
        o.staleness_ms = 500;
        int rc = wk_near_cache_open(&nc, p->db, &o, NULL, 0);
        env->account(rc, "near_cache.open");
        if (rc)
            return;
    }
    unsigned n = randombytes_uniform(4);
    wk_body out = WK_BODY_INIT;
    uint64_t hits_before = 0;
    wk_near_stats st;
    if (wk_near_cache_stats(nc, &st) == WK_OK)
        hits_before = st.hits;
    int rc = wk_near_cache_get(nc, &soak_hcache, wk_name_u64(n), &out);
    env->account(rc, "near_cache.get");
    if (rc == WK_OK && out.found) {
        uint8_t h[WK_BLAKE3_OUT_LEN];
        wk_blake3(out.data, out.len, h);
        if (memcmp(h, out.hash, sizeof(h)) != 0)
            env->violation("%s %d: body does not match its hash", "near cache", (int)n);
        atomic_fetch_add(&s->served, 1);
        if (wk_near_cache_stats(nc, &st) == WK_OK && st.hits > hits_before)
            atomic_fetch_add(&s->hits, 1);
    }
    wk_body_free(&out);
}

static void near_report(const wk_test_soak_env *env, double elapsed_s)
{
    (void)elapsed_s;
    near_shared *s = env->shared;
    printf("  near cache bodies served: %ld (%ld from memory), all matching their hash\n",
           atomic_load(&s->served), atomic_load(&s->hits));
}

static const wk_test_soak_op soak[] = {
    {"hashed cache", 1, sizeof(hcache_shared), hcache_op, hcache_report},
    {"near cache", 1, sizeof(near_shared), near_op, near_report},
};

static wk_test_kind cache_rows = {
    .id = "cache",
    .ops = (const char *const[]){WK_CACHE_OPS(WK_TEST_OP_NAME)
                                   WK_HASHED_CACHE_OPS(WK_TEST_OP_NAME) NULL},
    .queries = queries,
    .nqueries = WK_TEST_COUNT(queries),
    .allocs = allocs,
    .nallocs = WK_TEST_COUNT(allocs),
    .soak = soak,
    .nsoak = WK_TEST_COUNT(soak),
};
WK_TEST_KIND(cache_rows)
