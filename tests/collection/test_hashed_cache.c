/*
 * tests/collection/test_hashed_cache.c — HashedCache against a real
 * redis-server: the hash layout (fields, BLAKE3 bytes, TTL), get / hash /
 * get-if-changed / put / remove, proof from the server's own byte counter
 * that an unchanged copy costs no body transfer, every corrupted shape
 * reported as WK_ECORRUPT naming the key, and the local copy's refresh
 * cycle.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis_fixture.h"

static char *hkey(const wk_entity *e, const char *name)
{
    static char key[512];
    snprintf(key, sizeof(key), "@@wakuwaku-entity:HashedCache:%s:%s", e->ns, name);
    return key;
}

static void unhex(const char *hex, uint8_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        sscanf(hex + 2 * i, "%2x", &v);
        out[i] = (uint8_t)v;
    }
}

/* BLAKE3 known answers (reference b3sum). */
#define B3_EMPTY "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"
#define B3_ABC "6437b3ac38465133ffb63b75273a8db548c558465d79db03fd359c6cd5bd9d85"

Test(hashed_cache, layout_pinned_fields_hash_and_ttl)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity h = WK_HASHED_CACHE_ENTITY(wk_test_ns("hlayout"), 5000);
    uint8_t hash[WK_HASH_LEN], want[WK_HASH_LEN];
    cr_assert_eq(wk_hashed_cache_put(p, &h, wk_name_str("doc"), "abc", 3, hash), WK_OK);
    unhex(B3_ABC, want, WK_HASH_LEN);
    cr_assert(memcmp(hash, want, WK_HASH_LEN) == 0, "put outputs BLAKE3(body)");

    redisContext *raw = wk_test_raw(wk_test_url());
    redisReply *r = wk_test_cmd(raw, "TYPE %s", hkey(&h, "doc"));
    cr_assert_str_eq(r->str, "hash");
    freeReplyObject(r);
    r = wk_test_cmd(raw, "HGETALL %s", hkey(&h, "doc"));
    cr_assert_eq(r->type, REDIS_REPLY_ARRAY);
    cr_assert_eq(r->elements, 4, "exactly the fields body and hash");
    bool saw_body = false, saw_hash = false;
    for (size_t i = 0; i < 4; i += 2) {
        const redisReply *f = r->element[i], *v = r->element[i + 1];
        if (strcmp(f->str, "body") == 0) {
            saw_body = true;
            cr_assert_eq(v->len, 3);
            cr_assert(memcmp(v->str, "abc", 3) == 0);
        } else {
            cr_assert_str_eq(f->str, "hash");
            saw_hash = true;
            cr_assert_eq(v->len, 32, "the hash is 32 raw bytes");
            cr_assert(memcmp(v->str, want, 32) == 0);
        }
    }
    cr_assert(saw_body && saw_hash);
    freeReplyObject(r);
    r = wk_test_cmd(raw, "PTTL %s", hkey(&h, "doc"));
    cr_assert(r->integer > 4000 && r->integer <= 5000, "pttl %lld", r->integer);
    freeReplyObject(r);

    /* The empty body is stored with BLAKE3("") and is a hit. */
    cr_assert_eq(wk_hashed_cache_put(p, &h, wk_name_u64(0), NULL, 0, hash), WK_OK);
    unhex(B3_EMPTY, want, WK_HASH_LEN);
    cr_assert(memcmp(hash, want, WK_HASH_LEN) == 0);
    r = wk_test_cmd(raw, "HGET %s hash", hkey(&h, "0"));
    cr_assert_eq(r->len, 32);
    cr_assert(memcmp(r->str, want, 32) == 0);
    freeReplyObject(r);
    wk_body b = WK_BODY_INIT;
    cr_assert_eq(wk_hashed_cache_get(p, &h, wk_name_u64(0), &b), WK_OK);
    cr_assert(b.found);
    cr_assert_eq(b.len, 0);
    cr_assert_not_null(b.data);
    cr_assert(memcmp(b.hash, want, 32) == 0);
    wk_body_free(&b);
    redisFree(raw);
    wk_db_close(db);
}

Test(hashed_cache, get_hash_put_remove_cycle)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity h = WK_HASHED_CACHE_ENTITY(wk_test_ns("hcycle"), 10000);
    wk_body b = WK_BODY_INIT;
    uint8_t put_hash[WK_HASH_LEN], want[WK_HASH_LEN];
    bool removed;
    cr_assert_eq(wk_hashed_cache_get(p, &h, wk_name_str("k"), &b), WK_OK);
    cr_assert_not(b.found);
    cr_assert_eq(b.change, WK_ITEM_MISSING);
    cr_assert_null(b.data);
    cr_assert_eq(wk_hashed_cache_hash(p, &h, wk_name_str("k"), &b), WK_OK);
    cr_assert_not(b.found);

    uint8_t body[1000];
    for (size_t i = 0; i < sizeof(body); i++)
        body[i] = (uint8_t)(i * 7);
    body[10] = 0;
    cr_assert_eq(wk_hashed_cache_put(p, &h, wk_name_str("k"), body, sizeof(body), put_hash), WK_OK);
    wk_blake3(body, sizeof(body), want);
    cr_assert(memcmp(put_hash, want, 32) == 0);
    cr_assert_eq(wk_hashed_cache_get(p, &h, wk_name_str("k"), &b), WK_OK);
    cr_assert(b.found);
    cr_assert_eq(b.change, WK_ITEM_CHANGED);
    cr_assert_eq(b.len, sizeof(body));
    cr_assert(memcmp(b.data, body, sizeof(body)) == 0);
    cr_assert(memcmp(b.hash, want, 32) == 0);

    /* hash only: found and the hash, no body (the previous one is freed). */
    cr_assert_eq(wk_hashed_cache_hash(p, &h, wk_name_str("k"), &b), WK_OK);
    cr_assert(b.found);
    cr_assert_null(b.data);
    cr_assert_eq(b.len, 0);
    cr_assert(memcmp(b.hash, want, 32) == 0);

    cr_assert_eq(wk_hashed_cache_put(p, &h, wk_name_str("k"), "new", 3, NULL), WK_OK);
    cr_assert_eq(wk_hashed_cache_get(p, &h, wk_name_str("k"), &b), WK_OK);
    cr_assert_str_eq((char *)b.data, "new", "put replaces");
    wk_blake3("new", 3, want);
    cr_assert(memcmp(b.hash, want, 32) == 0, "and the hash with it");

    cr_assert_eq(wk_hashed_cache_remove(p, &h, wk_name_str("k"), &removed), WK_OK);
    cr_assert(removed);
    cr_assert_eq(wk_hashed_cache_remove(p, &h, wk_name_str("k"), &removed), WK_OK);
    cr_assert_not(removed);
    cr_assert_eq(wk_hashed_cache_get(p, &h, wk_name_str("k"), &b), WK_OK);
    cr_assert_not(b.found);
    cr_assert_null(b.data);
    wk_db_close(db);
}

Test(hashed_cache, get_if_changed_outcomes)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity h = WK_HASHED_CACHE_ENTITY(wk_test_ns("hgic"), 10000);
    wk_body b = WK_BODY_INIT;
    uint8_t v1[WK_HASH_LEN], v2[WK_HASH_LEN];

    cr_assert_eq(wk_hashed_cache_get_if_changed(p, &h, wk_name_str("s"), NULL, &b), WK_OK);
    cr_assert_eq(b.change, WK_ITEM_MISSING);
    cr_assert_not(b.found);
    cr_assert_null(b.data);

    cr_assert_eq(wk_hashed_cache_put(p, &h, wk_name_str("s"), "version one", 11, v1), WK_OK);
    /* No known hash: any item is changed. */
    cr_assert_eq(wk_hashed_cache_get_if_changed(p, &h, wk_name_str("s"), NULL, &b), WK_OK);
    cr_assert_eq(b.change, WK_ITEM_CHANGED);
    cr_assert(b.found);
    cr_assert_str_eq((char *)b.data, "version one");
    cr_assert(memcmp(b.hash, v1, 32) == 0);

    /* known may point into the OUT body itself. */
    cr_assert_eq(wk_hashed_cache_get_if_changed(p, &h, wk_name_str("s"), b.hash, &b), WK_OK);
    cr_assert_eq(b.change, WK_ITEM_UNCHANGED);
    cr_assert(b.found);
    cr_assert_null(b.data, "no body for an unchanged item");
    cr_assert(memcmp(b.hash, v1, 32) == 0, "the hash output is the known hash");

    cr_assert_eq(wk_hashed_cache_put(p, &h, wk_name_str("s"), "version two", 11, v2), WK_OK);
    cr_assert_eq(wk_hashed_cache_get_if_changed(p, &h, wk_name_str("s"), v1, &b), WK_OK);
    cr_assert_eq(b.change, WK_ITEM_CHANGED);
    cr_assert_str_eq((char *)b.data, "version two");
    cr_assert(memcmp(b.hash, v2, 32) == 0);

    cr_assert_eq(wk_hashed_cache_remove(p, &h, wk_name_str("s"), NULL), WK_OK);
    cr_assert_eq(wk_hashed_cache_get_if_changed(p, &h, wk_name_str("s"), v2, &b), WK_OK);
    cr_assert_eq(b.change, WK_ITEM_MISSING, "removed");
    cr_assert_not(b.found);

    wk_entity quick = WK_HASHED_CACHE_ENTITY(wk_test_ns("hgicexp"), 150);
    cr_assert_eq(wk_hashed_cache_put(p, &quick, wk_name_str("s"), "x", 1, v1), WK_OK);
    cr_assert_eq(wk_hashed_cache_get_if_changed(p, &quick, wk_name_str("s"), v1, &b), WK_OK);
    cr_assert_eq(b.change, WK_ITEM_UNCHANGED);
    wk_test_sleep_ms(500);
    cr_assert_eq(wk_hashed_cache_get_if_changed(p, &quick, wk_name_str("s"), v1, &b), WK_OK);
    cr_assert_eq(b.change, WK_ITEM_MISSING, "expired");
    wk_body_free(&b);
    wk_db_close(db);
}

Test(hashed_cache, reads_in_a_batch_are_filled_at_exec)
{
    wk_db *db = wk_test_open(NULL);
    wk_entity h = WK_HASHED_CACHE_ENTITY(wk_test_ns("hbatch"), 10000);
    wk_batch *batch;
    cr_assert_eq(wk_batch_open(&batch, db), WK_OK);
    wk_processor *bp = wk_batch_processor(batch);
    uint8_t v1[WK_HASH_LEN], other[WK_HASH_LEN] = {0};
    wk_body got = WK_BODY_INIT, hash_only = WK_BODY_INIT, same = WK_BODY_INIT,
            differs = WK_BODY_INIT;
    bool removed = false;
    cr_assert_eq(wk_hashed_cache_put(bp, &h, wk_name_str("a"), "payload", 7, v1), WK_OK);
    cr_assert_eq(wk_hashed_cache_get(bp, &h, wk_name_str("a"), &got), WK_OK);
    cr_assert_eq(wk_hashed_cache_hash(bp, &h, wk_name_str("a"), &hash_only), WK_OK);
    cr_assert_eq(wk_hashed_cache_get_if_changed(bp, &h, wk_name_str("a"), v1, &same), WK_OK);
    cr_assert_eq(wk_hashed_cache_get_if_changed(bp, &h, wk_name_str("a"), other, &differs), WK_OK);
    cr_assert_eq(wk_hashed_cache_remove(bp, &h, wk_name_str("a"), &removed), WK_OK);
    cr_assert_not(got.found, "nothing is read before exec");
    cr_assert_eq(wk_batch_exec(batch), WK_OK, "%s", wk_db_errmsg(db));
    cr_assert(got.found);
    cr_assert_str_eq((char *)got.data, "payload");
    cr_assert(memcmp(got.hash, v1, 32) == 0);
    cr_assert(hash_only.found);
    cr_assert(memcmp(hash_only.hash, v1, 32) == 0);
    cr_assert_eq(same.change, WK_ITEM_UNCHANGED);
    cr_assert(memcmp(same.hash, v1, 32) == 0);
    cr_assert_eq(differs.change, WK_ITEM_CHANGED);
    cr_assert_str_eq((char *)differs.data, "payload");
    cr_assert(removed);
    wk_body_free(&got);
    wk_body_free(&differs);

    /* The local copy needs its outcome at once: refused in a batch. */
    wk_local_copy copy = WK_LOCAL_COPY_INIT;
    cr_assert_eq(wk_local_copy_refresh(&copy, bp, &h, wk_name_str("a"), NULL), WK_EINVAL);
    wk_batch_close(batch);
    wk_db_close(db);
}

/* total_net_output_bytes from INFO stats: every byte the server wrote to
 * any client. */
static long long net_output_bytes(redisContext *raw)
{
    long long v = wk_test_info(raw, "stats", "total_net_output_bytes");
    cr_assert_geq(v, 0);
    return v;
}

/* A private server, so its byte counter counts only this test; stopped by
 * .fini even when an assertion fails. */
static wk_test_server server;

static void private_start(void)
{
    cr_assert_eq(wk_test_server_start(&server, NULL), 0, "redis-server did not start");
}

static void private_stop(void)
{
    wk_test_server_stop(&server);
}

Test(hashed_cache, unchanged_copy_transfers_no_body, .init = private_start, .fini = private_stop,
     .timeout = 60)
{
    wk_db *db = wk_test_open_url(server.url, NULL);
    wk_processor *p = wk_db_processor(db);
    redisContext *raw = wk_test_raw(server.url);
    wk_entity h = WK_HASHED_CACHE_ENTITY("etag", 60000);
    size_t n = 64 * 1024;
    uint8_t *body = malloc(n);
    for (size_t i = 0; i < n; i++)
        body[i] = (uint8_t)(i * 31 + 5);
    uint8_t hash[WK_HASH_LEN], other[WK_HASH_LEN] = {0};
    cr_assert_eq(wk_hashed_cache_put(p, &h, wk_name_str("big"), body, n, hash), WK_OK);
    wk_body b = WK_BODY_INIT;
    /* Warm up: loads the script (NOSCRIPT + EVAL) outside the measurement. */
    cr_assert_eq(wk_hashed_cache_get_if_changed(p, &h, wk_name_str("big"), hash, &b),
                 WK_OK);
    cr_assert_eq(b.change, WK_ITEM_UNCHANGED);

    long long before = net_output_bytes(raw);
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(wk_hashed_cache_get_if_changed(p, &h, wk_name_str("big"), hash, &b),
                     WK_OK);
        cr_assert_eq(b.change, WK_ITEM_UNCHANGED);
    }
    long long unchanged = net_output_bytes(raw) - before;
    /* The delta also holds one INFO reply (a couple of KiB). */
    cr_assert_lt(unchanged, 8 * 1024,
                 "4 unchanged checks of a 64 KiB body made the server send %lld bytes",
                 unchanged);

    /* Control: the same measurement does see a body when it changed. */
    before = net_output_bytes(raw);
    cr_assert_eq(wk_hashed_cache_get_if_changed(p, &h, wk_name_str("big"), other, &b),
                 WK_OK);
    cr_assert_eq(b.change, WK_ITEM_CHANGED);
    cr_assert_eq(b.len, n);
    wk_body_free(&b);
    long long changed = net_output_bytes(raw) - before;
    cr_assert_gt(changed, (long long)n, "a changed check sends the body (%lld bytes)", changed);

    /* hash-only leaves the body on the server too. */
    before = net_output_bytes(raw);
    cr_assert_eq(wk_hashed_cache_hash(p, &h, wk_name_str("big"), &b), WK_OK);
    cr_assert(b.found);
    cr_assert_lt(net_output_bytes(raw) - before, 8 * 1024);

    free(body);
    redisFree(raw);
    wk_db_close(db);
}

/* ---- corruption: every bad shape is WK_ECORRUPT naming the key -------- */


/* Runs get, hash and get-if-changed (no known hash) on `name`, expecting
 * WK_ECORRUPT with the key in the message from each. */
static void expect_corrupt(wk_db *db, const wk_entity *h, const char *name, bool hash_ok)
{
    wk_processor *p = wk_db_processor(db);
    const char *key = hkey(h, name);
    wk_body b = WK_BODY_INIT;
    int rc = wk_hashed_cache_get(p, h, wk_name_str(name), &b);
    cr_assert_eq(rc, WK_ECORRUPT, "%s: get gave %s", name, wk_err_name(rc));
    cr_assert_not(b.found);
    cr_assert_null(b.data);
    cr_assert(strstr(wk_db_errmsg(db), key), "%s: get message lacks the key: %s", name,
              wk_db_errmsg(db));
    rc = wk_hashed_cache_get_if_changed(p, h, wk_name_str(name), NULL, &b);
    cr_assert_eq(rc, WK_ECORRUPT, "%s: get_if_changed gave %s", name, wk_err_name(rc));
    cr_assert_null(b.data);
    cr_assert(strstr(wk_db_errmsg(db), key), "%s: message lacks the key: %s", name,
              wk_db_errmsg(db));
    rc = wk_hashed_cache_hash(p, h, wk_name_str(name), &b);
    if (hash_ok) {
        cr_assert_eq(rc, WK_OK, "%s: hash only does not read the body", name);
    } else {
        cr_assert_eq(rc, WK_ECORRUPT, "%s: hash gave %s", name, wk_err_name(rc));
        cr_assert(strstr(wk_db_errmsg(db), key), "%s: message lacks the key: %s", name,
                  wk_db_errmsg(db));
    }
}

Test(hashed_cache, corrupted_shapes_are_reported_with_the_key)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity h = WK_HASHED_CACHE_ENTITY(wk_test_ns("hcorrupt"), 10000);
    redisContext *raw = wk_test_raw(wk_test_url());
    uint8_t good[WK_HASH_LEN], of_y[WK_HASH_LEN];
    wk_blake3("x", 1, good);
    wk_blake3("y", 1, of_y);

    freeReplyObject(wk_test_cmd(raw, "HSET %s hash %b", hkey(&h, "nobody"), good, (size_t)32));
    expect_corrupt(db, &h, "nobody", false);
    cr_assert(strstr(wk_db_errmsg(db), "body field is missing"), "%s", wk_db_errmsg(db));

    freeReplyObject(wk_test_cmd(raw, "HSET %s body x", hkey(&h, "nohash")));
    expect_corrupt(db, &h, "nohash", false);
    cr_assert(strstr(wk_db_errmsg(db), "hash field is missing"), "%s", wk_db_errmsg(db));

    freeReplyObject(
        wk_test_cmd(raw, "HSET %s body x hash %b", hkey(&h, "short"), good, (size_t)31));
    expect_corrupt(db, &h, "short", false);
    cr_assert(strstr(wk_db_errmsg(db), "31 bytes"), "%s", wk_db_errmsg(db));

    freeReplyObject(
        wk_test_cmd(raw, "HSET %s body x hash %b", hkey(&h, "mismatch"), of_y, (size_t)32));
    expect_corrupt(db, &h, "mismatch", true);

    freeReplyObject(wk_test_cmd(raw, "SET %s plain", hkey(&h, "string")));
    expect_corrupt(db, &h, "string", false);
    cr_assert(strstr(wk_db_errmsg(db), "string"), "%s", wk_db_errmsg(db));

    freeReplyObject(wk_test_cmd(raw, "RPUSH %s a", hkey(&h, "list")));
    expect_corrupt(db, &h, "list", false);

    freeReplyObject(wk_test_cmd(raw, "HSET %s other field", hkey(&h, "stray")));
    expect_corrupt(db, &h, "stray", false);

    /* Unchanged but the body field is gone: still corrupted. */
    wk_body b = WK_BODY_INIT;
    cr_assert_eq(wk_hashed_cache_get_if_changed(p, &h, wk_name_str("nobody"), good, &b),
                 WK_ECORRUPT);

    /* A put repairs any of them, leaving exactly the two fields. */
    const char *names[] = {"nobody", "nohash", "short", "mismatch", "string", "list", "stray"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        cr_assert_eq(wk_hashed_cache_put(p, &h, wk_name_str(names[i]), "fixed", 5, NULL), WK_OK,
                     "%s: %s", names[i], wk_db_errmsg(db));
        cr_assert_eq(wk_hashed_cache_get(p, &h, wk_name_str(names[i]), &b), WK_OK);
        cr_assert(b.found);
        cr_assert_str_eq((char *)b.data, "fixed");
        wk_body_free(&b);
        redisReply *r = wk_test_cmd(raw, "HLEN %s", hkey(&h, names[i]));
        cr_assert_eq(r->integer, 2, "%s: exactly body and hash after a put", names[i]);
        freeReplyObject(r);
    }
    redisFree(raw);
    wk_db_close(db);
}

/* ---- local copy ------------------------------------------------------ */

Test(hashed_cache, local_copy_refresh_cycle)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity h = WK_HASHED_CACHE_ENTITY(wk_test_ns("hcopy"), 10000);
    wk_local_copy copy = WK_LOCAL_COPY_INIT;
    wk_item_change c = WK_ITEM_CHANGED;

    cr_assert_eq(wk_local_copy_refresh(&copy, p, &h, wk_name_str("cfg"), &c), WK_OK);
    cr_assert_eq(c, WK_ITEM_MISSING);
    cr_assert_not(copy.body.found);

    uint8_t v1[WK_HASH_LEN];
    cr_assert_eq(wk_hashed_cache_put(p, &h, wk_name_str("cfg"), "alpha", 5, v1), WK_OK);
    cr_assert_eq(wk_local_copy_refresh(&copy, p, &h, wk_name_str("cfg"), &c), WK_OK);
    cr_assert_eq(c, WK_ITEM_CHANGED);
    cr_assert(copy.body.found);
    cr_assert_str_eq((char *)copy.body.data, "alpha");
    cr_assert(memcmp(copy.body.hash, v1, 32) == 0);

    const uint8_t *held = copy.body.data;
    cr_assert_eq(wk_local_copy_refresh(&copy, p, &h, wk_name_str("cfg"), &c), WK_OK);
    cr_assert_eq(c, WK_ITEM_UNCHANGED);
    cr_assert_eq(copy.body.data, held, "an unchanged refresh keeps the same buffer");
    cr_assert_str_eq((char *)copy.body.data, "alpha");

    cr_assert_eq(wk_hashed_cache_put(p, &h, wk_name_str("cfg"), "beta", 4, NULL), WK_OK);
    cr_assert_eq(wk_local_copy_refresh(&copy, p, &h, wk_name_str("cfg"), NULL), WK_OK,
                 "outcome may be NULL");
    cr_assert_str_eq((char *)copy.body.data, "beta");
    cr_assert_eq(copy.body.len, 4);

    /* A failed refresh leaves the copy as it was. */
    redisContext *raw = wk_test_raw(wk_test_url());
    freeReplyObject(wk_test_cmd(raw, "SET %s nonsense", hkey(&h, "cfg")));
    cr_assert_eq(wk_local_copy_refresh(&copy, p, &h, wk_name_str("cfg"), &c), WK_ECORRUPT);
    cr_assert(copy.body.found);
    cr_assert_str_eq((char *)copy.body.data, "beta");
    redisFree(raw);

    cr_assert_eq(wk_hashed_cache_remove(p, &h, wk_name_str("cfg"), NULL), WK_OK);
    cr_assert_eq(wk_local_copy_refresh(&copy, p, &h, wk_name_str("cfg"), &c), WK_OK);
    cr_assert_eq(c, WK_ITEM_MISSING);
    cr_assert_not(copy.body.found, "a missing item empties the copy");
    cr_assert_null(copy.body.data);

    cr_assert_eq(wk_hashed_cache_put(p, &h, wk_name_str("cfg"), "gamma", 5, NULL), WK_OK);
    cr_assert_eq(wk_local_copy_refresh(&copy, p, &h, wk_name_str("cfg"), &c), WK_OK);
    cr_assert_eq(c, WK_ITEM_CHANGED);
    wk_local_copy_clear(&copy);
    cr_assert_not(copy.body.found);
    cr_assert_null(copy.body.data);
    wk_local_copy_clear(NULL);
    wk_local_copy_init(NULL);
    cr_assert_eq(wk_local_copy_refresh(NULL, p, &h, wk_name_str("cfg"), &c), WK_EINVAL);
    wk_db_close(db);
}

Test(hashed_cache, read_only_and_invalid_arguments)
{
    wk_db *rw = wk_test_open(NULL);
    wk_db *ro = wk_test_open(wk_cap_read_only());
    wk_processor *p = wk_db_processor(rw), *rp = wk_db_processor(ro);
    wk_entity h = WK_HASHED_CACHE_ENTITY(wk_test_ns("hro"), 10000);
    wk_entity cache = WK_CACHE_ENTITY("x", 1000);
    uint8_t hash[WK_HASH_LEN];
    cr_assert_eq(wk_hashed_cache_put(p, &h, wk_name_str("k"), "v", 1, hash), WK_OK);
    wk_body b = WK_BODY_INIT;
    cr_assert_eq(wk_hashed_cache_get(rp, &h, wk_name_str("k"), &b), WK_OK);
    cr_assert(b.found);
    cr_assert_eq(wk_hashed_cache_hash(rp, &h, wk_name_str("k"), &b), WK_OK);
    cr_assert_eq(wk_hashed_cache_get_if_changed(rp, &h, wk_name_str("k"), hash, &b), WK_OK);
    cr_assert_eq(b.change, WK_ITEM_UNCHANGED);
    wk_local_copy copy = WK_LOCAL_COPY_INIT;
    cr_assert_eq(wk_local_copy_refresh(&copy, rp, &h, wk_name_str("k"), NULL), WK_OK);
    cr_assert(copy.body.found);
    wk_local_copy_clear(&copy);
    cr_assert_eq(wk_hashed_cache_put(rp, &h, wk_name_str("k"), "w", 1, NULL), WK_EDENIED);
    cr_assert_eq(wk_hashed_cache_remove(rp, &h, wk_name_str("k"), NULL), WK_EDENIED);

    cr_assert_eq(wk_hashed_cache_get(p, &cache, wk_name_str("k"), &b), WK_EINVAL);
    cr_assert_eq(wk_hashed_cache_get(p, &h, wk_name_str("k"), NULL), WK_EINVAL);
    cr_assert_eq(wk_hashed_cache_hash(p, &h, wk_name_str("k"), NULL), WK_EINVAL);
    cr_assert_eq(wk_hashed_cache_get_if_changed(p, &h, wk_name_str("k"), hash, NULL), WK_EINVAL);
    cr_assert_eq(wk_hashed_cache_put(p, &h, wk_name_str("k"), NULL, 2, NULL), WK_EINVAL);
    cr_assert_eq(wk_hashed_cache_put(p, &h, wk_name_str("k"), "v", WK_BODY_MAX + 1, NULL),
                 WK_EINVAL);
    cr_assert_eq(wk_hashed_cache_put(p, &h, wk_name_str(NULL), "v", 1, NULL), WK_EINVAL);
    wk_body_free(&b);
    wk_db_close(ro);
    wk_db_close(rw);
}
