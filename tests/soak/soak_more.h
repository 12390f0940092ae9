/*
 * tests/soak/soak_more.h — the soak's cache operations: HashedCache puts of
 * random bodies, gets and revalidations, each body checked against its hash
 * here too (the library checks it as well, and reports WK_ECORRUPT).
 */
#ifndef WK_SOAK_MORE_H
#define WK_SOAK_MORE_H

#include <wakuwaku/blake3.h>
#include <wakuwaku/hashed_cache.h>

typedef void (*soak_account_fn)(int rc, const char *what);
typedef void (*soak_violation_fn)(const char *fmt, const char *what, int n);

static const wk_entity soak_hcache = WK_HASHED_CACHE_ENTITY("soak", 30000);
static atomic_long *soak_cache_checks;

static void soak_more_op(wk_processor *p, soak_account_fn account, soak_violation_fn violation)
{
    static uint8_t body[4096];
    unsigned n = randombytes_uniform(4);
    if (randombytes_uniform(3) == 0) {
        size_t len = randombytes_uniform(sizeof(body));
        randombytes_buf(body, len);
        account(wk_hashed_cache_put(p, &soak_hcache, wk_name_u64(n), body, len, NULL),
                "hashed_cache.put");
        return;
    }
    wk_body out = WK_BODY_INIT;
    int rc = wk_hashed_cache_get(p, &soak_hcache, wk_name_u64(n), &out);
    account(rc, "hashed_cache.get");
    if (rc == WK_OK && out.found) {
        uint8_t h[WK_BLAKE3_OUT_LEN];
        wk_blake3(out.data, out.len, h);
        if (memcmp(h, out.hash, sizeof(h)) != 0)
            violation("%s %d: body does not match its hash", "hashed cache", (int)n);
        uint8_t known[WK_HASH_LEN];
        memcpy(known, out.hash, sizeof(known));
        rc = wk_hashed_cache_get_if_changed(p, &soak_hcache, wk_name_u64(n), known, &out);
        account(rc, "hashed_cache.get_if_changed");
        if (rc == WK_OK && out.change == WK_ITEM_CHANGED) {
            wk_blake3(out.data, out.len, h);
            if (memcmp(h, out.hash, sizeof(h)) != 0)
                violation("%s %d: changed body does not match its hash", "hashed cache", (int)n);
        }
        if (soak_cache_checks)
            atomic_fetch_add(soak_cache_checks, 1);
    }
    wk_body_free(&out);
}

static void soak_more_report(void)
{
    if (soak_cache_checks)
        printf("  cache hash checks: %ld\n", atomic_load(soak_cache_checks));
}

#endif
