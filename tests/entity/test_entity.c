/*
 * tests/entity/test_entity.c — descriptor checks name the field and the
 * rule that failed (wk_entity_check_msg()), and the built-in queries put
 * that text in the handle's detail message (wk_db_errmsg()) when they
 * refuse a descriptor or a name, before anything is sent.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "entity/kind.h"
#include "redis_fixture.h"

static char long_ns[WK_NAMESPACE_MAX + 2];
static char long_kind[WK_KIND_MAX + 2];

static void fill_long(void)
{
    memset(long_ns, 'n', WK_NAMESPACE_MAX + 1);
    long_ns[WK_NAMESPACE_MAX + 1] = '\0';
    memset(long_kind, 'K', WK_KIND_MAX + 1);
    long_kind[WK_KIND_MAX + 1] = '\0';
}

#define SEPARATORS                                                                          \
    " (':', '{' and '}' separate the parts of a key, so such a namespace would share keys " \
    "with another one)"

static void expect_msg(const wk_entity *e, const char *want)
{
    char msg[WK_ENTITY_MSG_MAX];
    memset(msg, 'x', sizeof(msg));
    cr_assert_eq(wk_entity_check_msg(e, msg, sizeof(msg)), WK_EINVAL, "want: %s", want);
    cr_assert_str_eq(msg, want);
    cr_assert_eq(wk_entity_check(e), WK_EINVAL, "wk_entity_check agrees: %s", want);
}

Test(entity, check_msg_names_the_field_and_the_rule)
{
    fill_long();
    expect_msg(NULL, "entity is NULL");

    wk_entity lock = WK_LOCK_ENTITY("jobs", 0);
    expect_msg(&lock, "ttl_ms must be > 0 (got 0)");
    lock.ttl_ms = -250;
    expect_msg(&lock, "ttl_ms must be > 0 (got -250)");
    wk_entity rw = WK_RWLOCK_ENTITY("jobs", 0), cache = WK_CACHE_ENTITY("jobs", 0),
              hc = WK_HASHED_CACHE_ENTITY("jobs", 0);
    expect_msg(&rw, "ttl_ms must be > 0 (got 0)");
    expect_msg(&cache, "ttl_ms must be > 0 (got 0)");
    expect_msg(&hc, "ttl_ms must be > 0 (got 0)");

    wk_entity no_ns = WK_LOCK_ENTITY(NULL, 1000);
    expect_msg(&no_ns, "namespace is NULL");
    wk_entity empty_ns = WK_LOCK_ENTITY("", 1000);
    expect_msg(&empty_ns, "namespace is empty");
    wk_entity big_ns = WK_LOCK_ENTITY(long_ns, 1000);
    expect_msg(&big_ns, "namespace is 129 bytes, more than WK_NAMESPACE_MAX (128)");
    wk_entity colon = WK_LOCK_ENTITY("jobs:billing", 1000);
    expect_msg(&colon, "namespace \"jobs:billing\" contains ':'" SEPARATORS);
    wk_entity open = WK_CACHE_ENTITY("a{b", 1000);
    expect_msg(&open, "namespace \"a{b\" contains '{'" SEPARATORS);
    wk_entity close = WK_SETTINGS_ENTITY("ab}");
    expect_msg(&close, "namespace \"ab}\" contains '}'" SEPARATORS);
    wk_entity shown = WK_SETTINGS_ENTITY("q\"\n:");
    expect_msg(&shown, "namespace \"q\\x22\\x0a:\" contains ':'" SEPARATORS);

    wk_entity no_kind = WK_CUSTOM_ENTITY(NULL, "jobs");
    expect_msg(&no_kind, "kind is NULL");
    wk_entity empty_kind = WK_CUSTOM_ENTITY("", "jobs");
    expect_msg(&empty_kind, "kind is empty");
    wk_entity big_kind = WK_CUSTOM_ENTITY(long_kind, "jobs");
    expect_msg(&big_kind, "kind is 65 bytes, more than WK_KIND_MAX (64)");
    wk_entity colon_kind = WK_CUSTOM_ENTITY("Lock:jobs", "billing");
    expect_msg(&colon_kind, "kind \"Lock:jobs\" contains ':' (':', '{' and '}' separate the "
                            "parts of a key, so such a kind would share keys with another one)");

    wk_entity b = WK_TOKEN_BUCKET_ENTITY("login", 0, 1, 1000);
    expect_msg(&b, "capacity must be a finite number > 0 (got 0)");
    b.capacity = -2.5;
    expect_msg(&b, "capacity must be a finite number > 0 (got -2.5)");
    b.capacity = INFINITY;
    expect_msg(&b, "capacity must be a finite number > 0 (got inf)");
    b = (wk_entity)WK_TOKEN_BUCKET_ENTITY("login", 10, 0, 1000);
    expect_msg(&b, "rate must be a finite number > 0 (got 0)");
    b.rate = INFINITY;
    expect_msg(&b, "rate must be a finite number > 0 (got inf)");
    b = (wk_entity)WK_TOKEN_BUCKET_ENTITY("login", 10, 1, 0);
    expect_msg(&b, "period_ms must be > 0 (got 0)");
    b.period_ms = -5;
    expect_msg(&b, "period_ms must be > 0 (got -5)");
    /* NaN's sign is the platform's business: only the rule is pinned. */
    b = (wk_entity)WK_TOKEN_BUCKET_ENTITY("login", NAN, 1, 1000);
    char msg[WK_ENTITY_MSG_MAX];
    cr_assert_eq(wk_entity_check_msg(&b, msg, sizeof(msg)), WK_EINVAL);
    cr_assert(strncmp(msg, "capacity must be a finite number > 0 (got ", 42) == 0 &&
                  strstr(msg, "nan)"),
              "%s", msg);
}

/* Every built-in kind is in the registry that wk_entity_check() consults
 * (collected from the kinds' WK__KIND() lines), and a kind is found by its
 * bytes, not only by the address of its WK_KIND_X literal. */
Test(entity, every_builtin_kind_is_registered)
{
    const char *const builtin[] = {WK_KIND_LOCK,         WK_KIND_RWLOCK,       WK_KIND_CACHE,
                                   WK_KIND_HASHED_CACHE, WK_KIND_TOKEN_BUCKET, WK_KIND_SETTINGS,
                                   WK_KIND_PIPE,         WK_KIND_STREAM_BUFFER};
    size_t n = 0;
    for (const wk__kind *const *k = wk__kinds; *k; k++)
        n++;
    /* At least these (a kind added later registers itself without an edit
     * here); no kind twice. */
    cr_assert_geq(n, sizeof(builtin) / sizeof(builtin[0]));
    for (const wk__kind *const *k = wk__kinds; *k; k++)
        cr_assert_eq(wk__kind_find((*k)->name), *k, "%s is registered once", (*k)->name);
    for (size_t i = 0; i < sizeof(builtin) / sizeof(builtin[0]); i++) {
        char copy[WK_KIND_MAX + 1];
        strcpy(copy, builtin[i]);
        const wk__kind *k = wk__kind_find(copy);
        cr_assert(k != NULL, "%s is registered", builtin[i]);
        cr_assert_str_eq(k->name, builtin[i]);
    }
    cr_assert_null(wk__kind_find("MyOwnKind"), "a custom kind is not registered");

    char lock_kind[] = "Lock"; /* not the WK_KIND_LOCK literal */
    wk_entity lock = WK_CUSTOM_ENTITY(lock_kind, "jobs");
    expect_msg(&lock, "ttl_ms must be > 0 (got 0)");
    wk_entity mine = WK_CUSTOM_ENTITY("MyOwnKind", "jobs");
    cr_assert_eq(wk_entity_check(&mine), WK_OK, "a custom kind has no parameters to check");
}

Test(entity, check_msg_buffer_rules)
{
    wk_entity ok = WK_LOCK_ENTITY("jobs", 1000);
    char msg[16];
    memset(msg, 'x', sizeof(msg));
    cr_assert_eq(wk_entity_check_msg(&ok, msg, sizeof(msg)), WK_OK);
    cr_assert_str_empty(msg, "\"\" on success");
    wk_entity custom = WK_CUSTOM_ENTITY("Job", "nightly");
    cr_assert_eq(wk_entity_check_msg(&custom, msg, sizeof(msg)), WK_OK, "no TTL for custom kinds");
    wk_entity bad = WK_LOCK_ENTITY("jobs", 0);
    cr_assert_eq(wk_entity_check_msg(&bad, NULL, 0), WK_EINVAL, "no buffer: status only");
    cr_assert_eq(wk_entity_check_msg(&bad, msg, 0), WK_EINVAL);
    cr_assert_eq(msg[0], '\0', "len 0: nothing written");
    cr_assert_eq(wk_entity_check_msg(&bad, msg, sizeof(msg)), WK_EINVAL);
    cr_assert_str_eq(msg, "ttl_ms must be ", "cut to fit, NUL-terminated");
}

/* ------------------------------------------------------------------------
 * Through the queries: the message reaches wk_db_errmsg()
 * ---------------------------------------------------------------------- */

static void expect_errmsg(wk_db *db, int rc, const char *want)
{
    cr_assert_eq(rc, WK_EINVAL, "%s: got %s", want, wk_err_name(rc));
    cr_assert_str_eq(wk_db_errmsg(db), want);
}

Test(entity, query_refusals_name_the_field_in_wk_db_errmsg)
{
    fill_long();
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    redisContext *raw = wk_test_raw(wk_test_url());
    long long before = wk_test_total_calls(raw);
    wk_token t;
    bool got;

    wk_entity zero_ttl = WK_LOCK_ENTITY("invoice", 0);
    expect_errmsg(db, wk_lock_try(p, &zero_ttl, wk_name_str("a"), &t, &got),
                  "lock.try: invalid entity Lock:invoice: ttl_ms must be > 0 (got 0)");
    wk_entity lock = WK_LOCK_ENTITY("invoice", 1000);
    expect_errmsg(db, wk_lock_try(p, &lock, wk_name_str(NULL), &t, &got),
                  "lock.try: invalid name for Lock:invoice: name is NULL");
    static char big[WK_NAME_MAX + 1];
    memset(big, 'b', sizeof(big));
    expect_errmsg(db, wk_lock_try(p, &lock, wk_name_bytes(big, sizeof(big)), &t, &got),
                  "lock.try: invalid name for Lock:invoice: name is 2049 bytes, more than "
                  "WK_NAME_MAX (2048)");
    expect_errmsg(db, wk_lock_try(p, &lock, wk_name_bytes(NULL, 3), &t, &got),
                  "lock.try: invalid name for Lock:invoice: name bytes are NULL but its length "
                  "is 3");
    wk_entity no_ns = WK_LOCK_ENTITY(NULL, 1000);
    expect_errmsg(db, wk_lock_try(p, &no_ns, wk_name_str("a"), &t, &got),
                  "lock.try: invalid Lock entity: namespace is NULL");
    wk_entity big_ns = WK_LOCK_ENTITY(long_ns, 1000);
    expect_errmsg(db, wk_lock_try(p, &big_ns, wk_name_str("a"), &t, &got),
                  "lock.try: invalid Lock entity: namespace is 129 bytes, more than "
                  "WK_NAMESPACE_MAX (128)");
    expect_errmsg(db, wk_lock_try(p, NULL, wk_name_str("a"), &t, &got),
                  "lock.try: invalid Lock entity: entity is NULL");
    wk_entity cache = WK_CACHE_ENTITY("invoice", 1000);
    expect_errmsg(db, wk_lock_try(p, &cache, wk_name_str("a"), &t, &got),
                  "lock.try: entity Cache:invoice is not a Lock");

    wk_entity rw = WK_RWLOCK_ENTITY("catalog", -1);
    expect_errmsg(db, wk_rwlock_try_read(p, &rw, wk_name_str("a"), &t, &got),
                  "rwlock.try_read: invalid entity RwLock:catalog: ttl_ms must be > 0 (got -1)");
    wk_entity hc = WK_HASHED_CACHE_ENTITY("profile", 0);
    wk_body body = WK_BODY_INIT;
    expect_errmsg(db, wk_hashed_cache_get(p, &hc, wk_name_u64(7), &body),
                  "hashed_cache.get: invalid entity HashedCache:profile: ttl_ms must be > 0 "
                  "(got 0)");
    wk_entity page = WK_CACHE_ENTITY("pa:ge", 1000);
    expect_errmsg(db, wk_cache_put(p, &page, wk_name_str("a"), "b", 1),
                  "cache.put: invalid Cache entity: namespace \"pa:ge\" contains ':'" SEPARATORS);

    wk_token_bucket_outcome o;
    wk_entity cap0 = WK_TOKEN_BUCKET_ENTITY("login", 0, 1, 1000);
    expect_errmsg(db, wk_token_bucket_acquire(p, &cap0, wk_name_str("a"), 1, &o),
                  "token_bucket.acquire: invalid entity TokenBucket:login: capacity must be a "
                  "finite number > 0 (got 0)");
    wk_entity rate_inf = WK_TOKEN_BUCKET_ENTITY("login", 10, INFINITY, 1000);
    wk_token_bucket_state st;
    expect_errmsg(db, wk_token_bucket_peek(p, &rate_inf, wk_name_str("a"), &st),
                  "token_bucket.peek: invalid entity TokenBucket:login: rate must be a finite "
                  "number > 0 (got inf)");
    wk_entity period = WK_TOKEN_BUCKET_ENTITY("login", 10, 1, -5);
    bool used;
    expect_errmsg(db, wk_token_bucket_reset(p, &period, wk_name_str("a"), &used),
                  "token_bucket.reset: invalid entity TokenBucket:login: period_ms must be > 0 "
                  "(got -5)");

    wk_entity flags = WK_SETTINGS_ENTITY("fl{ags");
    int64_t version;
    expect_errmsg(db, wk_settings_put(p, &flags, wk_name_str("main"), "k", 1, "v", 1, &version),
                  "settings.put: invalid Settings entity: namespace \"fl{ags\" contains '{'"
                  SEPARATORS);

    cr_assert_eq(wk_test_total_calls(raw), before, "nothing was sent");
    redisFree(raw);
    wk_db_close(db);
}

static int fill_nothing(void *arg, wk_body *out)
{
    (void)arg;
    (void)out;
    return WK_OK;
}

Test(entity, helpers_name_the_field_too)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity cache = WK_CACHE_ENTITY("invoice", 1000);
    wk_entity zero_lock = WK_LOCK_ENTITY("invoice", 0);
    wk_body body = WK_BODY_INIT;
    wk_fill_outcome fo;
    expect_errmsg(db,
                  wk_cache_fill_once(p, &cache, wk_name_str("a"), &zero_lock, fill_nothing, NULL,
                                     NULL, &body, &fo),
                  "cache.fill_once: invalid Lock entity: ttl_ms must be > 0 (got 0)");

    char err[256];
    wk_lease_keeper *k = (wk_lease_keeper *)1;
    wk_db_options dbo = WK_DB_OPTIONS_INIT;
    dbo.url = wk_test_url();
    wk_lease_keeper_options ko = WK_LEASE_KEEPER_OPTIONS_INIT;
    ko.db = &dbo;
    ko.entity = &zero_lock;
    ko.name = wk_name_str("a");
    cr_assert_eq(wk_lease_keeper_start(&k, &ko, err, sizeof(err)), WK_EINVAL);
    cr_assert_str_eq(err, "lease keeper: invalid Lock entity: ttl_ms must be > 0 (got 0)");
    cr_assert_null(k);

    wk_settings_follower *f = (wk_settings_follower *)1;
    wk_settings_follower_options fopts = WK_SETTINGS_FOLLOWER_OPTIONS_INIT;
    wk_entity flags = WK_SETTINGS_ENTITY("flags:beta");
    fopts.db = &dbo;
    fopts.settings = &flags;
    fopts.name = wk_name_str("main");
    cr_assert_eq(wk_settings_follower_start(&f, &fopts, err, sizeof(err)), WK_EINVAL);
    cr_assert_str_eq(err, "settings follower: invalid Settings entity: namespace \"flags:beta\" "
                          "contains ':'" SEPARATORS);
    cr_assert_null(f);
    wk_db_close(db);
}
