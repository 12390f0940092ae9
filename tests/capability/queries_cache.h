/*
 * tests/capability/queries_cache.h — capability table rows for Cache and
 * HashedCache: one runner per built-in query (typed wrappers and the local
 * copy run the same queries, so they have no rows of their own).
 */
#ifndef WK_TEST_QUERIES_CACHE_H
#define WK_TEST_QUERIES_CACHE_H

#include <string.h>

#include <wakuwaku/hashed_cache.h>

#define CACHE_E(ns) wk_entity e = WK_CACHE_ENTITY(ns, 5000)
#define HCACHE_E(ns) wk_entity e = WK_HASHED_CACHE_ENTITY(ns, 5000)

static int q_cache_get(wk_processor *p, const char *ns)
{
    CACHE_E(ns);
    wk_body b = WK_BODY_INIT;
    int rc = wk_cache_get(p, &e, wk_name_str("n"), &b);
    wk_body_free(&b);
    return rc;
}
static int q_cache_get_into(wk_processor *p, const char *ns)
{
    CACHE_E(ns);
    char space[8];
    wk_buffer buf = {space, sizeof(space), 0, false};
    return wk_cache_get_into(p, &e, wk_name_str("n"), &buf);
}
static int q_cache_put(wk_processor *p, const char *ns)
{
    CACHE_E(ns);
    return wk_cache_put(p, &e, wk_name_str("n"), "body", 4);
}
static int q_cache_remove(wk_processor *p, const char *ns)
{
    CACHE_E(ns);
    bool removed;
    return wk_cache_remove(p, &e, wk_name_str("n"), &removed);
}
static int q_hcache_get(wk_processor *p, const char *ns)
{
    HCACHE_E(ns);
    wk_body b = WK_BODY_INIT;
    int rc = wk_hashed_cache_get(p, &e, wk_name_str("n"), &b);
    wk_body_free(&b);
    return rc;
}
static int q_hcache_hash(wk_processor *p, const char *ns)
{
    HCACHE_E(ns);
    wk_body b = WK_BODY_INIT;
    int rc = wk_hashed_cache_hash(p, &e, wk_name_str("n"), &b);
    wk_body_free(&b);
    return rc;
}
static int q_hcache_get_if_changed(wk_processor *p, const char *ns)
{
    HCACHE_E(ns);
    static const uint8_t known[WK_HASH_LEN] = {1};
    wk_body b = WK_BODY_INIT;
    int rc = wk_hashed_cache_get_if_changed(p, &e, wk_name_str("n"), known, &b);
    wk_body_free(&b);
    return rc;
}
static int q_hcache_put(wk_processor *p, const char *ns)
{
    HCACHE_E(ns);
    return wk_hashed_cache_put(p, &e, wk_name_str("n"), "body", 4, NULL);
}
static int q_hcache_remove(wk_processor *p, const char *ns)
{
    HCACHE_E(ns);
    bool removed;
    return wk_hashed_cache_remove(p, &e, wk_name_str("n"), &removed);
}

#define CACHE_QUERIES                                                  \
    {"cache.get", WK_READ, q_cache_get},                               \
    {"cache.get_into", WK_READ, q_cache_get_into},                     \
    {"cache.put", WK_WRITE, q_cache_put},                              \
    {"cache.remove", WK_WRITE, q_cache_remove},                        \
    {"hashed_cache.get", WK_READ, q_hcache_get},                       \
    {"hashed_cache.hash", WK_READ, q_hcache_hash},                     \
    {"hashed_cache.get_if_changed", WK_READ, q_hcache_get_if_changed}, \
    {"hashed_cache.put", WK_WRITE, q_hcache_put},                      \
    {"hashed_cache.remove", WK_WRITE, q_hcache_remove},

#define CACHE_KIND(q)                                     \
    (strncmp((q), "cache.", 6) == 0          ? WK_KIND_CACHE \
     : strncmp((q), "hashed_cache.", 13) == 0 ? WK_KIND_HASHED_CACHE \
                                              : NULL)

#endif /* WK_TEST_QUERIES_CACHE_H */
