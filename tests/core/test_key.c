/*
 * tests/core/test_key.c — key layout pinned byte for byte (compatibility
 * with the Rust wakuwaku-entity crate depends on these exact bytes).
 */
#include <string.h>

#include <criterion/criterion.h>

#include <wakuwaku/key.h>

static void expect_key(const wk_entity *e, wk_name name, const char *suffix, const char *want,
                       size_t want_len)
{
    char buf[WK_KEY_MAX];
    size_t len = 0;
    cr_assert_eq(wk_key_build(buf, sizeof(buf), &len, e, &name, suffix), WK_OK);
    cr_assert_eq(len, want_len, "length %zu, want %zu", len, want_len);
    cr_assert(memcmp(buf, want, want_len) == 0, "key bytes differ: got %.*s", (int)len, buf);
}

#define EXPECT(e, name, suffix, lit) expect_key(e, name, suffix, lit, sizeof(lit) - 1)

Test(key, string_name_single_key)
{
    wk_entity lock = WK_LOCK_ENTITY("invoice", 1000);
    EXPECT(&lock, wk_name_str("inv-42"), NULL, "@@wakuwaku-entity:Lock:invoice:inv-42");
}

Test(key, integer_names_in_decimal)
{
    wk_entity lock = WK_LOCK_ENTITY("invoice", 1000);
    EXPECT(&lock, wk_name_u64(42), NULL, "@@wakuwaku-entity:Lock:invoice:42");
    EXPECT(&lock, wk_name_u64(UINT64_MAX), NULL,
           "@@wakuwaku-entity:Lock:invoice:18446744073709551615");
    EXPECT(&lock, wk_name_i64(-7), NULL, "@@wakuwaku-entity:Lock:invoice:-7");
    EXPECT(&lock, wk_name_i64(INT64_MIN), NULL,
           "@@wakuwaku-entity:Lock:invoice:-9223372036854775808");
    EXPECT(&lock, wk_name_i64(0), NULL, "@@wakuwaku-entity:Lock:invoice:0");
}

Test(key, byte_string_with_nul_and_brace_verbatim)
{
    wk_entity cache = WK_CACHE_ENTITY("blob", 1000);
    static const char raw[] = {'a', '\0', '}', '{', ':', '\xff'};
    EXPECT(&cache, wk_name_bytes(raw, sizeof(raw)), NULL,
           "@@wakuwaku-entity:Cache:blob:a\0}{:\xff");
}

Test(key, multi_key_layout_uses_braces)
{
    wk_entity rw = WK_RWLOCK_ENTITY("catalog", 1000);
    EXPECT(&rw, wk_name_str("shoes"), ":w", "@@wakuwaku-entity:RwLock:{catalog:shoes}:w");
    EXPECT(&rw, wk_name_u64(7), ":r", "@@wakuwaku-entity:RwLock:{catalog:7}:r");
    static const char raw[] = {'x', '}', '\0'};
    EXPECT(&rw, wk_name_bytes(raw, 3), ":r", "@@wakuwaku-entity:RwLock:{catalog:x}\0}:r");
}

Test(key, every_builtin_kind_spelled_like_rust)
{
    wk_entity hc = WK_HASHED_CACHE_ENTITY("profile", 1000);
    wk_entity tb = WK_TOKEN_BUCKET_ENTITY("login", 10, 1, 1000);
    wk_entity st = WK_SETTINGS_ENTITY("flags");
    EXPECT(&hc, wk_name_str("u1"), NULL, "@@wakuwaku-entity:HashedCache:profile:u1");
    EXPECT(&tb, wk_name_str("1.2.3.4"), NULL, "@@wakuwaku-entity:TokenBucket:login:1.2.3.4");
    EXPECT(&st, wk_name_str("main"), NULL, "@@wakuwaku-entity:Settings:flags:main");
}

Test(key, empty_name_allowed)
{
    wk_entity lock = WK_LOCK_ENTITY("n", 1000);
    EXPECT(&lock, wk_name_str(""), NULL, "@@wakuwaku-entity:Lock:n:");
}

Test(key, rejects_bad_input)
{
    wk_entity lock = WK_LOCK_ENTITY("invoice", 1000);
    char buf[WK_KEY_MAX];
    size_t len;
    wk_name null_name = wk_name_str(NULL);
    cr_assert_eq(wk_key_build(buf, sizeof(buf), &len, &lock, &null_name, NULL), WK_EINVAL);
    static char big[WK_NAME_MAX + 1];
    memset(big, 'a', sizeof(big));
    wk_name too_long = wk_name_bytes(big, sizeof(big));
    cr_assert_eq(wk_key_build(buf, sizeof(buf), &len, &lock, &too_long, NULL), WK_EINVAL);
    wk_name max = wk_name_bytes(big, WK_NAME_MAX);
    cr_assert_eq(wk_key_build(buf, sizeof(buf), &len, &lock, &max, NULL), WK_OK);
    wk_name ok = wk_name_str("x");
    cr_assert_eq(wk_key_build(buf, 10, &len, &lock, &ok, NULL), WK_EINVAL, "buffer too small");
    wk_entity no_ns = WK_LOCK_ENTITY(NULL, 1000);
    cr_assert_eq(wk_key_build(buf, sizeof(buf), &len, &no_ns, &ok, NULL), WK_EINVAL);
    wk_entity empty_ns = WK_LOCK_ENTITY("", 1000);
    cr_assert_eq(wk_key_build(buf, sizeof(buf), &len, &empty_ns, &ok, NULL), WK_EINVAL);
}
