/*
 * tests/reliability/test_edges.c — names and bodies at the edges: empty,
 * the limits exactly, one byte past them, binary with NUL, invalid UTF-8;
 * limits enforced with WK_EINVAL before anything is sent.
 */
#include <stdlib.h>
#include <string.h>

#include "redis_fixture.h"

static const char invalid_utf8[] = {'\xff', '\xfe', '\xc0', '\x80', 'a', '\0', '\xed', '\xa0'};

Test(edges, lock_names_empty_binary_invalid_utf8_and_maximal)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity lock = WK_LOCK_ENTITY(wk_test_ns("edge"), 5000);
    char *max = malloc(WK_NAME_MAX + 1);
    memset(max, 'm', WK_NAME_MAX + 1);
    wk_name names[] = {wk_name_str(""), wk_name_bytes(invalid_utf8, sizeof(invalid_utf8)),
                       wk_name_bytes(max, WK_NAME_MAX)};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        wk_token t;
        bool got, ok;
        cr_assert_eq(wk_lock_try(p, &lock, names[i], &t, &got), WK_OK, "name %zu: %s", i,
                     wk_db_errmsg(db));
        cr_assert(got);
        cr_assert_eq(wk_lock_release(p, &lock, names[i], &t, &ok), WK_OK);
        cr_assert(ok);
    }
    /* One byte past the limit: refused before anything is sent. */
    wk_token t;
    bool got;
    cr_assert_eq(wk_lock_try(p, &lock, wk_name_bytes(max, WK_NAME_MAX + 1), &t, &got), WK_EINVAL);
    cr_assert(strstr(wk_db_errmsg(db), "2048"), "message states the limit: %s", wk_db_errmsg(db));
    free(max);
    wk_db_close(db);
}

Test(edges, one_mebibyte_name_is_refused_not_sent)
{
    wk_test_server s;
    cr_assert_eq(wk_test_server_start(&s, NULL), 0);
    wk_db *db = wk_test_open_url(s.url, NULL);
    redisContext *raw = wk_test_raw(s.url);
    size_t n = 1 << 20;
    char *big = malloc(n);
    memset(big, 'x', n);
    long long before = wk_test_total_calls(raw);
    wk_entity cache = WK_CACHE_ENTITY("edge", 5000);
    wk_entity lock = WK_LOCK_ENTITY("edge", 5000);
    wk_token t;
    bool got;
    cr_assert_eq(wk_lock_try(wk_db_processor(db), &lock, wk_name_bytes(big, n), &t, &got),
                 WK_EINVAL);
    cr_assert_eq(wk_cache_put(wk_db_processor(db), &cache, wk_name_bytes(big, n), "b", 1),
                 WK_EINVAL);
    cr_assert_eq(wk_test_total_calls(raw), before, "nothing was sent");
    /* A 1 MiB body is fine. */
    cr_assert_eq(wk_cache_put(wk_db_processor(db), &cache, wk_name_str("big"), big, n), WK_OK);
    wk_body b = WK_BODY_INIT;
    cr_assert_eq(wk_cache_get(wk_db_processor(db), &cache, wk_name_str("big"), &b), WK_OK);
    cr_assert(b.found && b.len == n && memcmp(b.data, big, n) == 0);
    wk_body_free(&b);
    free(big);
    redisFree(raw);
    wk_db_close(db);
    wk_test_server_stop(&s);
}

Test(edges, bodies_empty_binary_and_invalid_utf8_round_trip)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity cache = WK_CACHE_ENTITY(wk_test_ns("edgebody"), 5000);
    wk_entity hc = WK_HASHED_CACHE_ENTITY(wk_test_ns("edgebody"), 5000);
    const struct {
        const void *data;
        size_t len;
    } bodies[] = {{"", 0}, {invalid_utf8, sizeof(invalid_utf8)}, {"a\0b\0", 4}};
    for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
        wk_body b = WK_BODY_INIT;
        cr_assert_eq(wk_cache_put(p, &cache, wk_name_u64(i), bodies[i].data, bodies[i].len), WK_OK);
        cr_assert_eq(wk_cache_get(p, &cache, wk_name_u64(i), &b), WK_OK);
        cr_assert(b.found && b.len == bodies[i].len);
        cr_assert(memcmp(b.data, bodies[i].data, b.len) == 0);
        cr_assert_eq(wk_hashed_cache_put(p, &hc, wk_name_u64(i), bodies[i].data, bodies[i].len,
                                         NULL),
                     WK_OK);
        cr_assert_eq(wk_hashed_cache_get(p, &hc, wk_name_u64(i), &b), WK_OK);
        cr_assert(b.found && b.len == bodies[i].len);
        wk_body_free(&b);
    }
    /* Past WK_BODY_MAX: refused without reading the (here unmapped) bytes. */
    cr_assert_eq(wk_cache_put(p, &cache, wk_name_str("huge"), "x", (size_t)WK_BODY_MAX + 1),
                 WK_EINVAL);
    cr_assert_eq(wk_cache_put(p, &cache, wk_name_str("null"), NULL, 5), WK_EINVAL);
    wk_db_close(db);
}

Test(edges, namespaces_and_kinds_at_their_limits)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    char ns[WK_NAMESPACE_MAX + 2];
    memset(ns, 'n', sizeof(ns));
    ns[WK_NAMESPACE_MAX] = '\0';
    wk_entity at_limit = WK_LOCK_ENTITY(ns, 5000);
    wk_lock_state st;
    cr_assert_eq(wk_lock_inspect(p, &at_limit, wk_name_str("a"), &st), WK_OK);
    ns[WK_NAMESPACE_MAX] = 'n';
    ns[WK_NAMESPACE_MAX + 1] = '\0';
    wk_entity too_long = WK_LOCK_ENTITY(ns, 5000);
    cr_assert_eq(wk_lock_inspect(p, &too_long, wk_name_str("a"), &st), WK_EINVAL);
    wk_entity negative_ttl = WK_LOCK_ENTITY("edge", -1);
    cr_assert_eq(wk_lock_inspect(p, &negative_ttl, wk_name_str("a"), &st), WK_EINVAL);
    wk_entity nan_bucket = WK_TOKEN_BUCKET_ENTITY("edge", 0.0 / 0.0, 1, 1000);
    wk_token_bucket_outcome o;
    cr_assert_eq(wk_token_bucket_acquire(p, &nan_bucket, wk_name_str("a"), 1, &o), WK_EINVAL);
    wk_db_close(db);
}

/*
 * Issue 10: Lock:jobs:billing + "daily" and Lock:jobs + "billing:daily"
 * were the same Redis key, so a handle refused on Lock:jobs:billing took
 * that lock through Lock:jobs (and likewise reset TokenBucket:api:strict
 * through TokenBucket:api). Namespaces holding ':' are now refused, so the
 * key can only be reached as Lock:jobs's item, and the capability row that
 * meant to protect it is refused instead of silently protecting nothing.
 */
Test(edges, namespace_with_colon_cannot_alias_another_namespace)
{
    wk_test_server s;
    cr_assert_eq(wk_test_server_start(&s, NULL), 0);
    redisContext *raw = wk_test_raw(s.url);

    wk_cap_entry rows[] = {{WK_KIND_LOCK, "jobs:billing", WK_GRANT_NONE},
                           {WK_KIND_TOKEN_BUCKET, "api:strict", WK_GRANT_NONE}};
    wk_cap *cap = (wk_cap *)1;
    cr_assert_eq(wk_cap_new(&cap, "worker", WK_GRANT_WRITE, rows, 1), WK_EINVAL,
                 "a grant on Lock:jobs:billing cannot be honoured: refused");
    cr_assert_null(cap);
    cr_assert_eq(wk_cap_new(&cap, "worker", WK_GRANT_WRITE, rows + 1, 1), WK_EINVAL);
    cr_assert_null(cap);

    /* Even a read-write handle cannot use the namespace: refused, nothing
     * sent, with a message naming the rule. */
    wk_db *db = wk_test_open_url(s.url, wk_cap_read_write());
    wk_processor *p = wk_db_processor(db);
    long long before = wk_test_total_calls(raw);
    wk_entity billing = WK_LOCK_ENTITY("jobs:billing", 5000);
    wk_token t;
    bool got = true;
    cr_assert_eq(wk_lock_try(p, &billing, wk_name_str("daily"), &t, &got), WK_EINVAL);
    cr_assert_str_eq(wk_db_errmsg(db),
                     "lock.try: invalid Lock entity: namespace \"jobs:billing\" contains ':' "
                     "(':', '{' and '}' separate the parts of a key, so such a namespace "
                     "would share keys with another one)");
    wk_entity strict = WK_TOKEN_BUCKET_ENTITY("api:strict", 5, 1, 1000);
    bool was_used;
    cr_assert_eq(wk_token_bucket_reset(p, &strict, wk_name_str("10.0.0.1"), &was_used),
                 WK_EINVAL);
    cr_assert(strstr(wk_db_errmsg(db), "namespace \"api:strict\" contains ':'"), "%s",
              wk_db_errmsg(db));
    wk_entity braces = WK_LOCK_ENTITY("{jobs}", 5000);
    cr_assert_eq(wk_lock_try(p, &braces, wk_name_str("daily"), &t, &got), WK_EINVAL);
    cr_assert(strstr(wk_db_errmsg(db), "namespace \"{jobs}\" contains '{'"), "%s",
              wk_db_errmsg(db));
    cr_assert_eq(wk_test_total_calls(raw), before, "nothing was sent");
    redisReply *r = wk_test_cmd(raw, "EXISTS @@wakuwaku-entity:Lock:jobs:billing:daily");
    cr_assert_eq(r->integer, 0);
    freeReplyObject(r);
    wk_db_close(db);

    /* The key is Lock:jobs's item "billing:daily", and a capability
     * refusing Lock:jobs refuses it. */
    wk_cap_entry jobs_row = {WK_KIND_LOCK, "jobs", WK_GRANT_NONE};
    cr_assert_eq(wk_cap_new(&cap, "worker", WK_GRANT_WRITE, &jobs_row, 1), WK_OK);
    db = wk_test_open_url(s.url, cap);
    wk_cap_free(cap);
    wk_entity jobs = WK_LOCK_ENTITY("jobs", 5000);
    cr_assert_eq(wk_lock_try(wk_db_processor(db), &jobs, wk_name_str("billing:daily"), &t, &got),
                 WK_EDENIED);
    r = wk_test_cmd(raw, "EXISTS @@wakuwaku-entity:Lock:jobs:billing:daily");
    cr_assert_eq(r->integer, 0);
    freeReplyObject(r);
    wk_db_close(db);

    redisFree(raw);
    wk_test_server_stop(&s);
}
