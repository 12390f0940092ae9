/*
 * tests/collection/test_cache.c — Cache against a real redis-server: the
 * key layout, get/put/remove, TTL and expiry, binary, empty and large
 * bodies, caller buffers, typed bodies through a codec, corruption (a key
 * of another type) and argument checks.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis_fixture.h"

static char *cache_key(const wk_entity *e, const char *name)
{
    static char key[512];
    snprintf(key, sizeof(key), "@@wakuwaku-entity:Cache:%s:%s", e->ns, name);
    return key;
}

Test(cache, key_layout_and_ttl_pinned)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity c = WK_CACHE_ENTITY(wk_test_ns("clayout"), 5000);
    cr_assert_eq(wk_cache_put(p, &c, wk_name_str("page"), "hello", 5), WK_OK);
    cr_assert_eq(wk_cache_put(p, &c, wk_name_u64(42), "int", 3), WK_OK);
    redisContext *raw = wk_test_raw(wk_test_url());
    redisReply *r = wk_test_cmd(raw, "TYPE %s", cache_key(&c, "page"));
    cr_assert_str_eq(r->str, "string");
    freeReplyObject(r);
    r = wk_test_cmd(raw, "GET %s", cache_key(&c, "page"));
    cr_assert_eq(r->type, REDIS_REPLY_STRING);
    cr_assert_eq(r->len, 5);
    cr_assert(memcmp(r->str, "hello", 5) == 0);
    freeReplyObject(r);
    r = wk_test_cmd(raw, "GET %s", cache_key(&c, "42"));
    cr_assert_eq(r->type, REDIS_REPLY_STRING, "integer names are written in decimal");
    cr_assert_str_eq(r->str, "int");
    freeReplyObject(r);
    r = wk_test_cmd(raw, "PTTL %s", cache_key(&c, "page"));
    cr_assert(r->integer > 4000 && r->integer <= 5000, "pttl %lld", r->integer);
    freeReplyObject(r);
    redisFree(raw);
    wk_db_close(db);
}

Test(cache, get_put_remove_cycle)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity c = WK_CACHE_ENTITY(wk_test_ns("ccycle"), 10000);
    wk_body b = WK_BODY_INIT;
    bool removed = true;
    cr_assert_eq(wk_cache_get(p, &c, wk_name_str("x"), &b), WK_OK);
    cr_assert_not(b.found, "a fresh name is a miss");
    cr_assert_null(b.data);
    cr_assert_eq(wk_cache_put(p, &c, wk_name_str("x"), "one", 3), WK_OK);
    cr_assert_eq(wk_cache_get(p, &c, wk_name_str("x"), &b), WK_OK);
    cr_assert(b.found);
    cr_assert_eq(b.len, 3);
    cr_assert_str_eq((char *)b.data, "one", "bodies are NUL-terminated for convenience");
    wk_body_free(&b);
    cr_assert_null(b.data, "wk_body_free resets the body");
    cr_assert_eq(wk_cache_put(p, &c, wk_name_str("x"), "second", 6), WK_OK);
    cr_assert_eq(wk_cache_get(p, &c, wk_name_str("x"), &b), WK_OK);
    cr_assert_str_eq((char *)b.data, "second", "put replaces");
    wk_body_free(&b);
    cr_assert_eq(wk_cache_remove(p, &c, wk_name_str("x"), &removed), WK_OK);
    cr_assert(removed);
    cr_assert_eq(wk_cache_remove(p, &c, wk_name_str("x"), &removed), WK_OK);
    cr_assert_not(removed, "second remove reports false");
    cr_assert_eq(wk_cache_remove(p, &c, wk_name_str("x"), NULL), WK_OK, "removed may be NULL");
    cr_assert_eq(wk_cache_get(p, &c, wk_name_str("x"), &b), WK_OK);
    cr_assert_not(b.found);
    wk_body_free(NULL);
    wk_db_close(db);
}

Test(cache, put_restarts_ttl_and_items_expire)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity c = WK_CACHE_ENTITY(wk_test_ns("cttl"), 1000);
    wk_body b = WK_BODY_INIT;
    /* Without a restart the PTTL is at most 1000 minus the first put's
     * age at the second; with one, at least 1000 minus the second put's
     * age at the PTTL. Judged when the second is the younger (a stalled
     * machine can make it older: then the pair is made again). */
    redisContext *raw = wk_test_raw(wk_test_url());
    bool judged = false;
    for (int attempt = 0; attempt < 5 && !judged; attempt++) {
        cr_assert_eq(wk_cache_put(p, &c, wk_name_str("t"), "v1", 2), WK_OK);
        int64_t first_done = wk_test_now_ms();
        wk_test_sleep_ms(600);
        int64_t second_sent = wk_test_now_ms();
        cr_assert_eq(wk_cache_put(p, &c, wk_name_str("t"), "v2", 2), WK_OK);
        redisReply *r = wk_test_cmd(raw, "PTTL %s", cache_key(&c, "t"));
        int64_t second_age = wk_test_now_ms() - second_sent, first_age = second_sent - first_done;
        if (second_age + 5 < first_age) { /* 5: ms rounding on both sides */
            judged = true;
            cr_assert(r->integer > 1000 - first_age && r->integer <= 1000,
                      "put restarts the TTL (pttl %lld, first put %lld ms old)", r->integer,
                      (long long)first_age);
        }
        freeReplyObject(r);
    }
    cr_assert(judged, "five stalls in a row");
    redisFree(raw);

    wk_entity shortlived = WK_CACHE_ENTITY(wk_test_ns("cexp"), 150);
    cr_assert_eq(wk_cache_put(p, &shortlived, wk_name_str("t"), "v", 1), WK_OK);
    cr_assert_eq(wk_cache_get(p, &shortlived, wk_name_str("t"), &b), WK_OK);
    cr_assert(b.found);
    wk_body_free(&b);
    wk_test_sleep_ms(500);
    cr_assert_eq(wk_cache_get(p, &shortlived, wk_name_str("t"), &b), WK_OK);
    cr_assert_not(b.found, "expired after the TTL");
    wk_db_close(db);
}

Test(cache, binary_and_empty_bodies_and_names)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity c = WK_CACHE_ENTITY(wk_test_ns("cbin"), 10000);
    uint8_t all[256];
    for (int i = 0; i < 256; i++)
        all[i] = (uint8_t)(255 - i);
    const char bin_name[] = {'a', 0, '}', ':', 'b'};
    wk_body b = WK_BODY_INIT;
    cr_assert_eq(wk_cache_put(p, &c, wk_name_bytes(bin_name, sizeof(bin_name)), all, 256), WK_OK);
    cr_assert_eq(wk_cache_get(p, &c, wk_name_bytes(bin_name, sizeof(bin_name)), &b),
                 WK_OK);
    cr_assert(b.found);
    cr_assert_eq(b.len, 256);
    cr_assert(memcmp(b.data, all, 256) == 0, "every byte value, NUL included, survives");
    wk_body_free(&b);

    /* The empty body is a hit, distinct from a miss. */
    cr_assert_eq(wk_cache_put(p, &c, wk_name_str("empty"), NULL, 0), WK_OK);
    cr_assert_eq(wk_cache_get(p, &c, wk_name_str("empty"), &b), WK_OK);
    cr_assert(b.found, "an empty body is a hit");
    cr_assert_eq(b.len, 0);
    cr_assert_not_null(b.data, "data is never NULL on a hit");
    cr_assert_eq(b.data[0], 0);
    wk_body_free(&b);
    wk_db_close(db);
}

Test(cache, large_body_round_trip_and_limit, .timeout = 120)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity c = WK_CACHE_ENTITY(wk_test_ns("clarge"), 20000);
    size_t n = (size_t)16 * 1024 * 1024 + 7;
    uint8_t *big = malloc(n);
    cr_assert_not_null(big);
    uint32_t x = 2463534242u;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        big[i] = (uint8_t)x;
    }
    cr_assert_eq(wk_cache_put(p, &c, wk_name_str("big"), big, n), WK_OK, "%s", wk_db_errmsg(db));
    wk_body b = WK_BODY_INIT;
    cr_assert_eq(wk_cache_get(p, &c, wk_name_str("big"), &b), WK_OK);
    cr_assert(b.found);
    cr_assert_eq(b.len, n);
    cr_assert(memcmp(b.data, big, n) == 0);
    wk_body_free(&b);
    /* Over the limit: refused before sending (the length alone decides, so
     * the buffer is never read). */
    cr_assert_eq(wk_cache_put(p, &c, wk_name_str("huge"), big, WK_BODY_MAX + 1), WK_EINVAL);
    cr_assert(strstr(wk_db_errmsg(db), "WK_BODY_MAX"), "%s", wk_db_errmsg(db));
    cr_assert_eq(wk_cache_get(p, &c, wk_name_str("huge"), &b), WK_OK);
    cr_assert_not(b.found);
    free(big);
    wk_db_close(db);
}

Test(cache, get_into_caller_buffer)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity c = WK_CACHE_ENTITY(wk_test_ns("cinto"), 10000);
    char space[8];
    wk_buffer buf = {space, sizeof(space), 99, true};
    cr_assert_eq(wk_cache_get_into(p, &c, wk_name_str("k"), &buf), WK_OK);
    cr_assert_not(buf.found);
    cr_assert_eq(buf.len, 0);
    cr_assert_eq(wk_cache_put(p, &c, wk_name_str("k"), "12345678", 8), WK_OK);
    cr_assert_eq(wk_cache_get_into(p, &c, wk_name_str("k"), &buf), WK_OK);
    cr_assert(buf.found);
    cr_assert_eq(buf.len, 8);
    cr_assert(memcmp(space, "12345678", 8) == 0);
    cr_assert_eq(wk_cache_put(p, &c, wk_name_str("k"), "123456789", 9), WK_OK);
    memset(space, 'z', sizeof(space));
    cr_assert_eq(wk_cache_get_into(p, &c, wk_name_str("k"), &buf), WK_EINVAL,
                 "a body that does not fit is refused");
    cr_assert(buf.found);
    cr_assert_eq(buf.len, 9, "and the needed length reported");
    cr_assert_eq(space[0], 'z', "nothing copied");
    wk_buffer probe = {NULL, 0, 0, false};
    cr_assert_eq(wk_cache_get_into(p, &c, wk_name_str("k"), &probe), WK_EINVAL);
    cr_assert_eq(probe.len, 9, "a NULL buffer of 0 bytes asks for the length");
    wk_buffer bad = {NULL, 4, 0, false};
    cr_assert_eq(wk_cache_get_into(p, &c, wk_name_str("k"), &bad), WK_EINVAL);
    cr_assert_eq(wk_cache_get_into(p, &c, wk_name_str("k"), NULL), WK_EINVAL);
    wk_db_close(db);
}

Test(cache, wrong_type_is_corrupt_and_put_repairs)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity c = WK_CACHE_ENTITY(wk_test_ns("ccorrupt"), 10000);
    redisContext *raw = wk_test_raw(wk_test_url());
    freeReplyObject(wk_test_cmd(raw, "HSET %s f v", cache_key(&c, "h")));
    wk_body b = WK_BODY_INIT;
    cr_assert_eq(wk_cache_get(p, &c, wk_name_str("h"), &b), WK_ECORRUPT);
    cr_assert_not(b.found);
    cr_assert_null(b.data);
    cr_assert(strstr(wk_db_errmsg(db), cache_key(&c, "h")), "message names the key: %s",
              wk_db_errmsg(db));
    char space[4];
    wk_buffer buf = {space, sizeof(space), 0, false};
    cr_assert_eq(wk_cache_get_into(p, &c, wk_name_str("h"), &buf), WK_ECORRUPT);
    cr_assert_not(buf.found);
    cr_assert_eq(wk_cache_put(p, &c, wk_name_str("h"), "ok", 2), WK_OK);
    cr_assert_eq(wk_cache_get(p, &c, wk_name_str("h"), &b), WK_OK);
    cr_assert(b.found);
    cr_assert_str_eq((char *)b.data, "ok", "put replaces a key of another type");
    wk_body_free(&b);
    redisFree(raw);
    wk_db_close(db);
}

Test(cache, body_is_reused_across_reads_and_batches_fill_it_at_exec)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity c = WK_CACHE_ENTITY(wk_test_ns("cbatch"), 10000);
    /* One body through many reads: each read frees the previous data
     * (the sanitizer build and valgrind see a leak otherwise). */
    wk_body b = WK_BODY_INIT;
    for (int i = 0; i < 5; i++) {
        char v[16];
        int n = snprintf(v, sizeof(v), "value %d", i);
        cr_assert_eq(wk_cache_put(p, &c, wk_name_u64((uint64_t)i), v, (size_t)n), WK_OK);
        cr_assert_eq(wk_cache_get(p, &c, wk_name_u64((uint64_t)i), &b), WK_OK);
        cr_assert_str_eq((char *)b.data, v);
    }
    wk_body_free(&b);

    /* In a batch, OUT values are written when the batch executes. */
    wk_batch *batch;
    cr_assert_eq(wk_batch_open(&batch, db), WK_OK);
    wk_processor *bp = wk_batch_processor(batch);
    wk_body got[3] = {WK_BODY_INIT, WK_BODY_INIT, WK_BODY_INIT};
    bool removed = false;
    char space[16];
    wk_buffer into = {space, sizeof(space), 0, false};
    cr_assert_eq(wk_cache_put(bp, &c, wk_name_str("b1"), "first", 5), WK_OK);
    cr_assert_eq(wk_cache_get(bp, &c, wk_name_str("b1"), &got[0]), WK_OK);
    cr_assert_eq(wk_cache_get(bp, &c, wk_name_str("absent"), &got[1]), WK_OK);
    cr_assert_eq(wk_cache_get_into(bp, &c, wk_name_str("b1"), &into), WK_OK);
    cr_assert_eq(wk_cache_remove(bp, &c, wk_name_str("b1"), &removed), WK_OK);
    cr_assert_eq(wk_cache_get(bp, &c, wk_name_str("b1"), &got[2]), WK_OK);
    cr_assert_not(got[0].found, "nothing is read before exec");
    cr_assert_eq(wk_batch_exec(batch), WK_OK, "%s", wk_db_errmsg(db));
    cr_assert(got[0].found);
    cr_assert_str_eq((char *)got[0].data, "first");
    cr_assert_not(got[1].found);
    cr_assert(into.found);
    cr_assert_eq(into.len, 5);
    cr_assert(memcmp(space, "first", 5) == 0);
    cr_assert(removed);
    cr_assert_not(got[2].found, "removed earlier in the same batch");
    for (int i = 0; i < 3; i++)
        wk_body_free(&got[i]);

    wk_batch_close(batch);
    wk_db_close(db);
}

/* ---- typed bodies through a codec ---------------------------------- */

typedef struct profile {
    int id;
    char name[32];
} profile;

/* "id|name" as text. */
static int profile_encode(const wk_codec *codec, const void *value, uint8_t **bytes, size_t *len)
{
    (void)codec;
    const profile *v = value;
    if (v->id < 0)
        return WK_EINVAL;
    char tmp[64];
    int n = snprintf(tmp, sizeof(tmp), "%d|%s", v->id, v->name);
    *bytes = malloc((size_t)n);
    if (!*bytes)
        return WK_ENOMEM;
    memcpy(*bytes, tmp, (size_t)n);
    *len = (size_t)n;
    return WK_OK;
}

static int profile_decode(const wk_codec *codec, const uint8_t *bytes, size_t len, void *value)
{
    (void)codec;
    profile *v = value;
    char tmp[64];
    if (len >= sizeof(tmp))
        return WK_ECORRUPT;
    memcpy(tmp, bytes, len);
    tmp[len] = '\0';
    char *bar = strchr(tmp, '|');
    if (!bar || bar == tmp || strlen(bar + 1) >= sizeof(v->name))
        return WK_ECORRUPT;
    *bar = '\0';
    v->id = atoi(tmp);
    strcpy(v->name, bar + 1);
    return WK_OK;
}

static int freed_bytes;
static void profile_free_bytes(const wk_codec *codec, uint8_t *bytes)
{
    (void)codec;
    freed_bytes++;
    free(bytes);
}

static const wk_codec profile_codec = {"profile", profile_encode, profile_decode,
                                       profile_free_bytes};

Test(cache, typed_bodies_through_a_codec)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity c = WK_CACHE_ENTITY(wk_test_ns("ctyped"), 10000);
    profile in = {7, "ada"}, out = {0, ""};
    bool found = true;
    cr_assert_eq(wk_cache_get_typed(p, &c, wk_name_u64(7), &profile_codec, &out, &found), WK_OK);
    cr_assert_not(found);
    cr_assert_eq(out.id, 0, "a miss leaves the value alone");
    freed_bytes = 0;
    cr_assert_eq(wk_cache_put_typed(p, &c, wk_name_u64(7), &profile_codec, &in), WK_OK);
    cr_assert_eq(freed_bytes, 1, "encoded bytes released through the codec");
    cr_assert_eq(wk_cache_get_typed(p, &c, wk_name_u64(7), &profile_codec, &out, &found), WK_OK);
    cr_assert(found);
    cr_assert_eq(out.id, 7);
    cr_assert_str_eq(out.name, "ada");

    /* The stored bytes are the codec's. */
    redisContext *raw = wk_test_raw(wk_test_url());
    redisReply *r = wk_test_cmd(raw, "GET %s", cache_key(&c, "7"));
    cr_assert_str_eq(r->str, "7|ada");
    freeReplyObject(r);

    /* Bytes that do not decode: the decoder's status, the key named. */
    freeReplyObject(wk_test_cmd(raw, "SET %s garbage", cache_key(&c, "8")));
    cr_assert_eq(wk_cache_get_typed(p, &c, wk_name_u64(8), &profile_codec, &out, &found),
                 WK_ECORRUPT);
    cr_assert_not(found);
    cr_assert(strstr(wk_db_errmsg(db), cache_key(&c, "8")), "%s", wk_db_errmsg(db));
    cr_assert(strstr(wk_db_errmsg(db), "profile"), "%s", wk_db_errmsg(db));

    /* An encoder failure is returned and nothing is stored. */
    profile bad = {-1, "x"};
    cr_assert_eq(wk_cache_put_typed(p, &c, wk_name_u64(9), &profile_codec, &bad), WK_EINVAL);
    r = wk_test_cmd(raw, "EXISTS %s", cache_key(&c, "9"));
    cr_assert_eq(r->integer, 0);
    freeReplyObject(r);

    /* Typed get needs its outcome at once: refused in a batch; typed put
     * is one query and works there. */
    wk_batch *batch;
    cr_assert_eq(wk_batch_open(&batch, db), WK_OK);
    cr_assert_eq(wk_cache_get_typed(wk_batch_processor(batch), &c, wk_name_u64(7), &profile_codec,
                                    &out, &found),
                 WK_EINVAL);
    profile later = {10, "grace"};
    cr_assert_eq(wk_cache_put_typed(wk_batch_processor(batch), &c, wk_name_u64(10),
                                    &profile_codec, &later),
                 WK_OK);
    cr_assert_eq(wk_batch_exec(batch), WK_OK, "%s", wk_db_errmsg(db));
    wk_batch_close(batch);
    cr_assert_eq(wk_cache_get_typed(p, &c, wk_name_u64(10), &profile_codec, &out, &found), WK_OK);
    cr_assert(found);
    cr_assert_str_eq(out.name, "grace");

    wk_codec no_decode = {"half", profile_encode, NULL, NULL};
    cr_assert_eq(wk_cache_put_typed(p, &c, wk_name_u64(9), &no_decode, &in), WK_EINVAL);
    cr_assert_eq(wk_cache_get_typed(p, &c, wk_name_u64(9), NULL, &out, &found), WK_EINVAL);
    redisFree(raw);
    wk_db_close(db);
}

/* A hand-written decoder that says why, through wk_codec_fail(). */
static int reasoned_decode(const wk_codec *codec, const uint8_t *bytes, size_t len, void *value)
{
    (void)codec;
    (void)value;
    if (!memchr(bytes, '|', len))
        return wk_codec_fail(WK_ECORRUPT, "no '|' in %zu bytes", len);
    return WK_OK;
}

static const wk_codec reasoned_codec = {"reasoned", profile_encode, reasoned_decode, NULL};

/* A decoder that records its reason, then runs a typed call of its own
 * whose decoder records another: its own reason must survive. */
static wk_processor *nested_p;
static const wk_entity *nested_cache;

static int nesting_decode(const wk_codec *codec, const uint8_t *bytes, size_t len, void *value)
{
    (void)codec;
    (void)bytes;
    (void)len;
    int rc = wk_codec_fail(WK_ECORRUPT, "the outer reason");
    bool found;
    profile inner;
    cr_assert_eq(wk_cache_get_typed(nested_p, nested_cache, wk_name_u64(8), &reasoned_codec,
                                    &inner, &found),
                 WK_ECORRUPT);
    (void)value;
    return rc;
}

static const wk_codec nesting_codec = {"nesting", profile_encode, nesting_decode, NULL};

Test(cache, decoder_reasons_reach_wk_db_errmsg)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity c = WK_CACHE_ENTITY(wk_test_ns("creason"), 10000);
    redisContext *raw = wk_test_raw(wk_test_url());
    freeReplyObject(wk_test_cmd(raw, "SET %s garbage", cache_key(&c, "8")));
    profile out = {0, ""};
    bool found = true;
    char want[1024];

    /* A codec that says nothing: the status only, as before. */
    cr_assert_eq(wk_cache_get_typed(p, &c, wk_name_u64(8), &profile_codec, &out, &found),
                 WK_ECORRUPT);
    snprintf(want, sizeof(want), "cache.get: the body of \"%s\" does not decode as profile "
                                 "(WK_ECORRUPT)",
             cache_key(&c, "8"));
    cr_assert_str_eq(wk_db_errmsg(db), want);

    /* A codec that says why. */
    cr_assert_eq(wk_cache_get_typed(p, &c, wk_name_u64(8), &reasoned_codec, &out, &found),
                 WK_ECORRUPT);
    cr_assert_not(found);
    snprintf(want, sizeof(want), "cache.get: the body of \"%s\" does not decode as reasoned: "
                                 "no '|' in 7 bytes (WK_ECORRUPT)",
             cache_key(&c, "8"));
    cr_assert_str_eq(wk_db_errmsg(db), want);

    /* Nested typed calls keep each reason with its own call. */
    nested_p = p;
    nested_cache = &c;
    cr_assert_eq(wk_cache_get_typed(p, &c, wk_name_u64(8), &nesting_codec, &out, &found),
                 WK_ECORRUPT);
    snprintf(want, sizeof(want), "cache.get: the body of \"%s\" does not decode as nesting: "
                                 "the outer reason (WK_ECORRUPT)",
             cache_key(&c, "8"));
    cr_assert_str_eq(wk_db_errmsg(db), want);

    /* Outside a codec callback it only returns the status. */
    cr_assert_eq(wk_codec_fail(WK_ECORRUPT, "nobody listens"), WK_ECORRUPT);
    cr_assert_eq(wk_codec_fail(WK_OK, NULL), WK_OK);
    redisFree(raw);
    wk_db_close(db);
}

Test(cache, invalid_arguments)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity good = WK_CACHE_ENTITY("x", 1000);
    wk_entity zero_ttl = WK_CACHE_ENTITY("x", 0);
    wk_entity lock = WK_LOCK_ENTITY("x", 1000);
    wk_entity hashed = WK_HASHED_CACHE_ENTITY("x", 1000);
    wk_body b = WK_BODY_INIT;
    cr_assert_eq(wk_cache_get(p, &zero_ttl, wk_name_str("a"), &b), WK_EINVAL);
    cr_assert_eq(wk_cache_get(p, &lock, wk_name_str("a"), &b), WK_EINVAL);
    cr_assert_eq(wk_cache_get(p, &hashed, wk_name_str("a"), &b), WK_EINVAL);
    cr_assert_eq(wk_cache_get(p, &good, wk_name_str(NULL), &b), WK_EINVAL);
    cr_assert_eq(wk_cache_get(p, NULL, wk_name_str("a"), &b), WK_EINVAL);
    cr_assert_eq(wk_cache_get(NULL, &good, wk_name_str("a"), &b), WK_EINVAL);
    cr_assert_eq(wk_cache_get(p, &good, wk_name_str("a"), NULL), WK_EINVAL);
    cr_assert_eq(wk_cache_put(p, &good, wk_name_str("a"), NULL, 3), WK_EINVAL);
    cr_assert(strlen(wk_db_errmsg(db)) > 0);
    cr_assert_eq(wk_cache_put(p, &lock, wk_name_str("a"), "x", 1), WK_EINVAL);
    cr_assert_eq(wk_cache_remove(p, &zero_ttl, wk_name_str("a"), NULL), WK_EINVAL);
    wk_db_close(db);
}

Test(cache, read_only_handle_reads_but_never_writes)
{
    wk_db *rw = wk_test_open(NULL);
    wk_db *ro = wk_test_open(wk_cap_read_only());
    wk_entity c = WK_CACHE_ENTITY(wk_test_ns("cro"), 10000);
    cr_assert_eq(wk_cache_put(wk_db_processor(rw), &c, wk_name_str("k"), "v", 1), WK_OK);
    wk_body b = WK_BODY_INIT;
    bool removed;
    cr_assert_eq(wk_cache_get(wk_db_processor(ro), &c, wk_name_str("k"), &b), WK_OK);
    cr_assert(b.found);
    wk_body_free(&b);
    cr_assert_eq(wk_cache_put(wk_db_processor(ro), &c, wk_name_str("k"), "w", 1), WK_EDENIED);
    cr_assert_eq(wk_cache_remove(wk_db_processor(ro), &c, wk_name_str("k"), &removed),
                 WK_EDENIED);
    cr_assert_eq(wk_cache_get(wk_db_processor(ro), &c, wk_name_str("k"), &b), WK_OK);
    cr_assert_str_eq((char *)b.data, "v");
    wk_body_free(&b);
    wk_db_close(ro);
    wk_db_close(rw);
}
