/*
 * tests/collection/test_settings.c — Settings against a real redis-server:
 * binary-safe put/remove/snapshot and their Redis layout, the published
 * change messages, corrupted items, capabilities, and followers — several
 * of them under thousands of random changes, with their subscriber
 * connections killed in the middle, started late, fed gaps and garbage,
 * and across a server restart — always ending equal to the master copy.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <wakuwaku/batch.h>

#include "redis_fixture.h"

/* ------------------------------------------------------------------------
 * Helpers
 * ---------------------------------------------------------------------- */

/* Deterministic pseudo-random bytes (xorshift64*), so failures replay. */
static uint64_t rnd(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ULL;
}

/* Bytes that break naive encodings, mixed with random ones. */
static void rnd_bytes(uint64_t *s, char *buf, size_t len)
{
    static const char nasty[] = {'\0', ':', ',', '{', '}', '\r', '\n', '0', '9', (char)0xff};
    for (size_t i = 0; i < len; i++) {
        uint64_t r = rnd(s);
        buf[i] = (r & 1) ? nasty[(r >> 8) % sizeof(nasty)] : (char)(r >> 16);
    }
}

static void item_key(char *out, size_t cap, const char *ns, const char *name, const char *suffix)
{
    snprintf(out, cap, "@@wakuwaku-entity:Settings:{%s:%s}%s", ns, name, suffix);
}

/* Two maps hold the same entries (versions not compared). */
static bool same_entries(const wk_settings_map *a, const wk_settings_map *b, char *why,
                         size_t whylen)
{
    if (a->count != b->count) {
        snprintf(why, whylen, "%zu entries vs %zu", a->count, b->count);
        return false;
    }
    for (size_t i = 0; i < a->count; i++) {
        const wk_settings_entry *x = &a->entries[i], *y = &b->entries[i];
        if (x->key_len != y->key_len || memcmp(x->key, y->key, x->key_len) != 0) {
            snprintf(why, whylen, "entry %zu: keys differ", i);
            return false;
        }
        if (x->value_len != y->value_len || memcmp(x->value, y->value, x->value_len) != 0) {
            snprintf(why, whylen, "entry %zu: values differ", i);
            return false;
        }
    }
    return true;
}

/* What a change callback saw, replayed into a map of its own. */
#define REPLAY_MAX 256
typedef struct replay {
    size_t count;
    char *keys[REPLAY_MAX], *values[REPLAY_MAX];
    size_t key_lens[REPLAY_MAX], value_lens[REPLAY_MAX];
    uint64_t calls;
    int64_t last_version;
    bool out_of_order;
} replay;

static char *dup_bytes(const char *p, size_t n)
{
    char *d = malloc(n ? n : 1);
    cr_assert(d);
    if (n)
        memcpy(d, p, n);
    return d;
}

static void on_change(void *ctx, const wk_settings_change *c)
{
    replay *r = ctx;
    r->calls++;
    if (c->version < r->last_version)
        r->out_of_order = true;
    r->last_version = c->version;
    size_t i = 0;
    while (i < r->count &&
           !(r->key_lens[i] == c->key_len && memcmp(r->keys[i], c->key, c->key_len) == 0))
        i++;
    if (c->op == WK_SETTINGS_PUT) {
        if (i == r->count) {
            if (r->count == REPLAY_MAX)
                return;
            r->keys[i] = dup_bytes(c->key, c->key_len);
            r->key_lens[i] = c->key_len;
            r->values[i] = NULL;
            r->count++;
        }
        free(r->values[i]);
        r->values[i] = dup_bytes(c->value, c->value_len);
        r->value_lens[i] = c->value_len;
    } else if (i < r->count) {
        free(r->keys[i]);
        free(r->values[i]);
        r->count--;
        r->keys[i] = r->keys[r->count];
        r->key_lens[i] = r->key_lens[r->count];
        r->values[i] = r->values[r->count];
        r->value_lens[i] = r->value_lens[r->count];
    }
}

static bool replay_matches(const replay *r, const wk_settings_map *m, char *why, size_t whylen)
{
    if (r->out_of_order) {
        snprintf(why, whylen, "callback versions went backwards");
        return false;
    }
    if (r->count != m->count) {
        snprintf(why, whylen, "callback replay has %zu entries, master %zu", r->count, m->count);
        return false;
    }
    for (size_t i = 0; i < r->count; i++) {
        const wk_settings_entry *e = wk_settings_map_find(m, r->keys[i], r->key_lens[i]);
        if (!e || e->value_len != r->value_lens[i] ||
            memcmp(e->value, r->values[i], e->value_len) != 0) {
            snprintf(why, whylen, "callback replay entry %zu differs from the master", i);
            return false;
        }
    }
    return true;
}

static void replay_free(replay *r)
{
    for (size_t i = 0; i < r->count; i++) {
        free(r->keys[i]);
        free(r->values[i]);
    }
    r->count = 0;
}

static wk_settings_follower *follow(const char *url, const wk_cap *cap, const wk_entity *e,
                                    const char *name, replay *r)
{
    wk_db_options db = WK_DB_OPTIONS_INIT;
    db.url = url;
    db.capability = cap ? cap : wk_cap_read_write();
    wk_settings_follower_options o = WK_SETTINGS_FOLLOWER_OPTIONS_INIT;
    o.db = &db;
    o.settings = e;
    o.name = wk_name_str(name);
    o.on_change = r ? on_change : NULL;
    o.ctx = r;
    o.retry_max_ms = 200;
    wk_settings_follower *f = NULL;
    char err[256];
    int rc = wk_settings_follower_start(&f, &o, err, sizeof(err));
    cr_assert_eq(rc, WK_OK, "follower start: %s: %s", wk_err_name(rc), err);
    cr_assert_not_null(f);
    return f;
}

static wk_settings_map *master(wk_db *db, const wk_entity *e, const char *name)
{
    wk_settings_map *m = NULL;
    int rc = wk_settings_snapshot(wk_db_processor(db), e, wk_name_str(name), &m);
    cr_assert_eq(rc, WK_OK, "snapshot: %s: %s", wk_err_name(rc), wk_db_errmsg(db));
    return m;
}

/* Wait until the follower reached the master's version, then compare. */
static void assert_mirror_equals(wk_settings_follower *f, const wk_settings_map *m, int idx)
{
    bool reached;
    cr_assert_eq(wk_settings_follower_wait(f, m->version, 60000, &reached), WK_OK);
    wk_settings_stats st;
    char err[256];
    wk_settings_follower_stats(f, &st, err, sizeof(err));
    cr_assert(reached, "follower %d stuck at version %lld, master %lld (last error: %s)", idx,
              (long long)st.version, (long long)m->version, err);
    wk_settings_map *mine = NULL;
    cr_assert_eq(wk_settings_follower_snapshot(f, &mine), WK_OK);
    cr_assert_eq(mine->version, m->version, "follower %d", idx);
    char why[128];
    cr_assert(same_entries(mine, m, why, sizeof(why)), "follower %d: %s", idx, why);
    wk_settings_map_free(mine);
}

/* ------------------------------------------------------------------------
 * Queries
 * ---------------------------------------------------------------------- */

Test(settings, binary_put_remove_snapshot_round_trip)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity e = WK_SETTINGS_ENTITY(wk_test_ns("set"));
    wk_name n = wk_name_str("app");

    wk_settings_map *m = master(db, &e, "app");
    cr_assert_eq(m->version, 0, "a map never written is at version 0");
    cr_assert_eq(m->count, 0);
    wk_settings_map_free(m);

    static const char k1[] = {'a', ':', '\0', 'b', ':'};
    static const char v1[] = {'\0', ':', ',', '\0', '5', ':'};
    char big[100000];
    uint64_t seed = 42;
    rnd_bytes(&seed, big, sizeof(big));
    int64_t v = 0;
    cr_assert_eq(wk_settings_put(p, &e, n, k1, sizeof(k1), v1, sizeof(v1), &v), WK_OK);
    cr_assert_eq(v, 1);
    cr_assert_eq(wk_settings_put(p, &e, n, "", 0, "empty key", 9, &v), WK_OK);
    cr_assert_eq(v, 2);
    cr_assert_eq(wk_settings_put(p, &e, n, "empty value", 11, NULL, 0, &v), WK_OK);
    cr_assert_eq(v, 3);
    cr_assert_eq(wk_settings_put(p, &e, n, "big", 3, big, sizeof(big), &v), WK_OK);
    cr_assert_eq(v, 4);
    cr_assert_eq(wk_settings_put(p, &e, n, "gone", 4, "x", 1, NULL), WK_OK);

    m = master(db, &e, "app");
    cr_assert_eq(m->version, 5);
    cr_assert_eq(m->count, 5);
    const wk_settings_entry *x = wk_settings_map_find(m, k1, sizeof(k1));
    cr_assert_not_null(x);
    cr_assert_eq(x->value_len, sizeof(v1));
    cr_assert(memcmp(x->value, v1, sizeof(v1)) == 0);
    cr_assert_eq(x->value[x->value_len], '\0', "values are NUL-terminated");
    x = wk_settings_map_find(m, "", 0);
    cr_assert(x && x->value_len == 9 && memcmp(x->value, "empty key", 9) == 0);
    x = wk_settings_map_find(m, "empty value", 11);
    cr_assert(x && x->value_len == 0);
    x = wk_settings_map_find(m, "big", 3);
    cr_assert(x && x->value_len == sizeof(big) && memcmp(x->value, big, sizeof(big)) == 0);
    cr_assert_null(wk_settings_map_find(m, "a:", 2), "a prefix of a key is not the key");
    for (size_t i = 1; i < m->count; i++) {
        const wk_settings_entry *a = &m->entries[i - 1], *b = &m->entries[i];
        size_t l = a->key_len < b->key_len ? a->key_len : b->key_len;
        int c = memcmp(a->key, b->key, l);
        cr_assert(c < 0 || (c == 0 && a->key_len < b->key_len), "entries sorted by key");
    }
    wk_settings_map_free(m);

    wk_settings_removal rm = {false, 0};
    cr_assert_eq(wk_settings_remove(p, &e, n, "gone", 4, &rm), WK_OK);
    cr_assert(rm.removed);
    cr_assert_eq(rm.version, 6);
    cr_assert_eq(wk_settings_remove(p, &e, n, "gone", 4, &rm), WK_OK);
    cr_assert_not(rm.removed, "removing an absent key is not a change");
    cr_assert_eq(rm.version, 6, "and does not bump the version");
    cr_assert_eq(wk_settings_remove(p, &e, n, "gone", 4, NULL), WK_OK, "out may be NULL");
    cr_assert_eq(wk_settings_put(p, &e, n, k1, sizeof(k1), "new", 3, &v), WK_OK);
    cr_assert_eq(v, 7, "overwriting is a change");

    /* The Redis layout, read raw. */
    redisContext *raw = wk_test_raw(wk_test_url());
    char key[256];
    item_key(key, sizeof(key), e.ns, "app", ":map");
    redisReply *r = wk_test_cmd(raw, "HGET %s %b", key, k1, sizeof(k1));
    cr_assert(r->type == REDIS_REPLY_STRING && r->len == 3 && memcmp(r->str, "new", 3) == 0);
    freeReplyObject(r);
    r = wk_test_cmd(raw, "HLEN %s", key);
    cr_assert_eq(r->integer, 4);
    freeReplyObject(r);
    item_key(key, sizeof(key), e.ns, "app", ":version");
    r = wk_test_cmd(raw, "GET %s", key);
    cr_assert(r->type == REDIS_REPLY_STRING && strcmp(r->str, "7") == 0);
    freeReplyObject(r);
    redisFree(raw);

    /* Another name of the same entity is another map. */
    m = master(db, &e, "other");
    cr_assert_eq(m->count, 0);
    cr_assert_eq(m->version, 0);
    wk_settings_map_free(m);
    wk_db_close(db);
}

/* Outcomes are written by the parsers, so the queries work in a batch. */
Test(settings, queries_work_in_a_batch)
{
    wk_db *db = wk_test_open(NULL);
    wk_entity e = WK_SETTINGS_ENTITY(wk_test_ns("batch"));
    wk_batch *b;
    cr_assert_eq(wk_batch_open(&b, db), WK_OK);
    wk_processor *p = wk_batch_processor(b);
    int64_t v[3] = {-1, -1, -1};
    wk_settings_removal rm = {false, -1};
    wk_settings_map *m = (wk_settings_map *)&rm;
    cr_assert_eq(wk_settings_put(p, &e, wk_name_str("n"), "a", 1, "1", 1, &v[0]), WK_OK);
    cr_assert_eq(wk_settings_put(p, &e, wk_name_str("n"), "b\0", 2, "2", 1, &v[1]), WK_OK);
    cr_assert_eq(wk_settings_put(p, &e, wk_name_str("n"), "c", 1, "3", 1, &v[2]), WK_OK);
    cr_assert_eq(wk_settings_remove(p, &e, wk_name_str("n"), "a", 1, &rm), WK_OK);
    cr_assert_eq(wk_settings_snapshot(p, &e, wk_name_str("n"), &m), WK_OK);
    cr_assert_eq(v[0], -1, "nothing is written before exec");
    cr_assert_null(m, "the snapshot pointer is cleared when queued");
    cr_assert_eq(wk_batch_exec(b), WK_OK, "%s", wk_db_errmsg(db));
    cr_assert(v[0] == 1 && v[1] == 2 && v[2] == 3);
    cr_assert(rm.removed);
    cr_assert_eq(rm.version, 4);
    cr_assert_not_null(m);
    cr_assert_eq(m->version, 4);
    cr_assert_eq(m->count, 2);
    cr_assert_not_null(wk_settings_map_find(m, "b\0", 2));
    wk_settings_map_free(m);
    wk_batch_close(b);
    wk_db_close(db);
}

Test(settings, argument_checks)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity e = WK_SETTINGS_ENTITY(wk_test_ns("args"));
    wk_entity lock = WK_LOCK_ENTITY("l", 1000);
    int64_t v;
    cr_assert_eq(wk_settings_put(p, &lock, wk_name_str("n"), "k", 1, "v", 1, &v), WK_EINVAL);
    cr_assert_eq(wk_settings_put(p, &e, wk_name_str(NULL), "k", 1, "v", 1, &v), WK_EINVAL);
    cr_assert_eq(wk_settings_put(p, &e, wk_name_str("n"), NULL, 1, "v", 1, &v), WK_EINVAL);
    cr_assert_eq(wk_settings_put(p, &e, wk_name_str("n"), "k", 1, NULL, 1, &v), WK_EINVAL);
    cr_assert_eq(wk_settings_remove(p, &e, wk_name_str("n"), NULL, 2, NULL), WK_EINVAL);
    cr_assert_eq(wk_settings_put(NULL, &e, wk_name_str("n"), "k", 1, "v", 1, &v), WK_EINVAL);
    wk_settings_map *m = (wk_settings_map *)&v;
    cr_assert_eq(wk_settings_snapshot(p, NULL, wk_name_str("n"), &m), WK_EINVAL);
    cr_assert_null(m, "*out is NULL on failure");
    cr_assert_eq(wk_settings_snapshot(p, &e, wk_name_str("n"), NULL), WK_EINVAL);
    wk_settings_map_free(NULL);
    cr_assert_null(wk_settings_map_find(NULL, "k", 1));
    /* Integer names work like any other. */
    cr_assert_eq(wk_settings_put(p, &e, wk_name_u64(42), "k", 1, "v", 1, &v), WK_OK);
    cr_assert_eq(v, 1);
    wk_db_close(db);
}

Test(settings, corrupted_items_are_reported_and_left_alone)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity e = WK_SETTINGS_ENTITY(wk_test_ns("corrupt"));
    redisContext *raw = wk_test_raw(wk_test_url());
    char map[256], ver[256];
    item_key(map, sizeof(map), e.ns, "n", ":map");
    item_key(ver, sizeof(ver), e.ns, "n", ":version");

    freeReplyObject(wk_test_cmd(raw, "SET %s not-a-hash", map));
    int64_t v = -1;
    cr_assert_eq(wk_settings_put(p, &e, wk_name_str("n"), "k", 1, "v", 1, &v), WK_ECORRUPT,
                 "%s", wk_db_errmsg(db));
    cr_assert(strstr(wk_db_errmsg(db), "not a hash"), "%s", wk_db_errmsg(db));
    cr_assert_eq(v, -1, "no version on failure");
    redisReply *r = wk_test_cmd(raw, "EXISTS %s", ver);
    cr_assert_eq(r->integer, 0, "a failed put must not bump the version");
    freeReplyObject(r);
    wk_settings_map *m = NULL;
    cr_assert_eq(wk_settings_snapshot(p, &e, wk_name_str("n"), &m), WK_ECORRUPT);
    cr_assert_null(m);

    freeReplyObject(wk_test_cmd(raw, "DEL %s", map));
    freeReplyObject(wk_test_cmd(raw, "SET %s seven", ver));
    cr_assert_eq(wk_settings_put(p, &e, wk_name_str("n"), "k", 1, "v", 1, &v), WK_ECORRUPT);
    cr_assert_eq(wk_settings_remove(p, &e, wk_name_str("n"), "k", 1, NULL), WK_ECORRUPT);
    r = wk_test_cmd(raw, "EXISTS %s", map);
    cr_assert_eq(r->integer, 0, "a failed put must not write the map");
    freeReplyObject(r);
    cr_assert_eq(wk_settings_snapshot(p, &e, wk_name_str("n"), &m), WK_ECORRUPT);

    freeReplyObject(wk_test_cmd(raw, "DEL %s", ver));
    freeReplyObject(wk_test_cmd(raw, "RPUSH %s x", ver));
    cr_assert_eq(wk_settings_snapshot(p, &e, wk_name_str("n"), &m), WK_ECORRUPT);
    redisFree(raw);
    wk_db_close(db);
}

/* ------------------------------------------------------------------------
 * Messages
 * ---------------------------------------------------------------------- */

static redisReply *next_message(redisContext *sub)
{
    redisReply *r = NULL;
    cr_assert_eq(redisGetReply(sub, (void **)&r), REDIS_OK, "no message: %s", sub->errstr);
    cr_assert(r->type == REDIS_REPLY_ARRAY && r->elements == 3);
    cr_assert_str_eq(r->element[0]->str, "message");
    return r;
}

Test(settings, published_messages_carry_every_byte)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity e = WK_SETTINGS_ENTITY(wk_test_ns("msg"));
    char chan[256];
    item_key(chan, sizeof(chan), e.ns, "n", ":chan");
    redisContext *sub = wk_test_raw(wk_test_url());
    redisReply *r = wk_test_cmd(sub, "SUBSCRIBE %s", chan);
    freeReplyObject(r);

    cr_assert_eq(wk_settings_put(p, &e, wk_name_str("n"), "a:b", 3, "x\0y", 3, NULL), WK_OK);
    r = next_message(sub);
    static const char want[] = "P1:1,3:a:b,3:x\0y,";
    cr_assert_eq(r->element[2]->len, sizeof(want) - 1);
    cr_assert(memcmp(r->element[2]->str, want, sizeof(want) - 1) == 0, "exact encoding");
    freeReplyObject(r);

    /* Random keys and values, including every awkward byte, decode back. */
    uint64_t seed = 7;
    for (int i = 0; i < 200; i++) {
        char k[64], v[300];
        size_t kl = rnd(&seed) % sizeof(k), vl = rnd(&seed) % sizeof(v);
        rnd_bytes(&seed, k, kl);
        rnd_bytes(&seed, v, vl);
        bool remove = i % 5 == 4;
        int64_t version;
        if (remove) {
            cr_assert_eq(wk_settings_put(p, &e, wk_name_str("n"), k, kl, "", 0, NULL), WK_OK);
            freeReplyObject(next_message(sub));
            wk_settings_removal rm = {false, 0};
            cr_assert_eq(wk_settings_remove(p, &e, wk_name_str("n"), k, kl, &rm), WK_OK);
            cr_assert(rm.removed);
            version = rm.version;
        } else {
            cr_assert_eq(wk_settings_put(p, &e, wk_name_str("n"), k, kl, v, vl, &version),
                         WK_OK);
        }
        r = next_message(sub);
        wk_settings_change c;
        cr_assert_eq(wk_settings_change_decode(r->element[2]->str, r->element[2]->len, &c),
                     WK_OK);
        cr_assert_eq(c.version, version);
        cr_assert_eq(c.op, remove ? WK_SETTINGS_REMOVE : WK_SETTINGS_PUT);
        cr_assert_eq(c.key_len, kl);
        cr_assert(memcmp(c.key, k, kl) == 0);
        if (remove) {
            cr_assert_null(c.value);
        } else {
            cr_assert_eq(c.value_len, vl);
            cr_assert(memcmp(c.value, v, vl) == 0);
        }
        freeReplyObject(r);
    }
    redisFree(sub);
    wk_db_close(db);
}

Test(settings, decode_rejects_anything_malformed)
{
    static const struct {
        const char *msg;
        size_t len;
    } bad[] = {
        {"", 0},
        {"X1:1,1:k,", 9},
        {"P1:1,1:k,", 9},          /* put without value */
        {"R1:1,1:k,1:v,", 13},     /* remove with value */
        {"R1:0,1:k,", 9},          /* version 0 */
        {"R2:01,1:k,", 10},        /* leading zero */
        {"R1:1,01:k,", 10},        /* leading zero length */
        {"R1:1,2:k,", 9},          /* length beyond the data */
        {"R1:1,1:k;", 9},          /* no comma */
        {"R1:1,1:k,x", 10},        /* trailing bytes */
        {"R1:x,1:k,", 9},          /* version not digits */
        {"R-1:1,1:k,", 10},
        {"R1:1,1:k", 8},
        {"R1:1,", 5},
        {"R20:99999999999999999999,1:k,", 30}, /* version overflow */
        {"R1:1,99999999999999999999999:k,", 31},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        wk_settings_change c;
        cr_assert_eq(wk_settings_change_decode(bad[i].msg, bad[i].len, &c), WK_ECORRUPT,
                     "case %zu must be rejected", i);
    }
    wk_settings_change c;
    cr_assert_eq(wk_settings_change_decode("R1:9,0:,", 8, &c), WK_OK);
    cr_assert_eq(c.op, WK_SETTINGS_REMOVE);
    cr_assert_eq(c.version, 9);
    cr_assert_eq(c.key_len, 0);
    cr_assert_eq(wk_settings_change_decode("P2:12,1:,,1::,", 14, &c), WK_OK);
    cr_assert_eq(c.version, 12);
    cr_assert(c.key_len == 1 && c.key[0] == ',' && c.value_len == 1 && c.value[0] == ':');
    cr_assert_eq(wk_settings_change_decode("P1:1,0:,0:,", 11, NULL), WK_EINVAL);
}

/* ------------------------------------------------------------------------
 * Capabilities
 * ---------------------------------------------------------------------- */

Test(settings, read_only_snapshots_and_follows_but_cannot_write)
{
    wk_db *rw = wk_test_open(NULL);
    wk_db *ro = wk_test_open(wk_cap_read_only());
    wk_entity e = WK_SETTINGS_ENTITY(wk_test_ns("ro"));
    int64_t v;
    cr_assert_eq(wk_settings_put(wk_db_processor(rw), &e, wk_name_str("n"), "k", 1, "1", 1, &v),
                 WK_OK);

    cr_assert_eq(wk_settings_put(wk_db_processor(ro), &e, wk_name_str("n"), "k", 1, "2", 1, &v),
                 WK_EDENIED);
    char want[200];
    snprintf(want, sizeof(want), "capability \"read-only\" may not WRITE Settings:%s", e.ns);
    cr_assert(strstr(wk_db_errmsg(ro), want), "%s", wk_db_errmsg(ro));
    wk_settings_removal rm;
    cr_assert_eq(wk_settings_remove(wk_db_processor(ro), &e, wk_name_str("n"), "k", 1, &rm),
                 WK_EDENIED);

    wk_settings_map *m = master(ro, &e, "n");
    cr_assert_eq(m->version, 1, "a refused write changed nothing");
    cr_assert_eq(m->count, 1);
    cr_assert_eq(m->entries[0].value[0], '1');
    wk_settings_map_free(m);

    wk_settings_follower *f = follow(wk_test_url(), wk_cap_read_only(), &e, "n", NULL);
    char buf[8];
    size_t len;
    bool found;
    cr_assert_eq(wk_settings_follower_get(f, "k", 1, buf, sizeof(buf), &len, &found), WK_OK);
    cr_assert(found && len == 1 && buf[0] == '1');
    cr_assert_eq(wk_settings_put(wk_db_processor(rw), &e, wk_name_str("n"), "k", 1, "3", 1, &v),
                 WK_OK);
    bool reached;
    cr_assert_eq(wk_settings_follower_wait(f, v, 30000, &reached), WK_OK);
    cr_assert(reached);
    cr_assert_eq(wk_settings_follower_get(f, "k", 1, buf, sizeof(buf), &len, &found), WK_OK);
    cr_assert(found && len == 1 && buf[0] == '3', "a read-only follower follows");
    wk_settings_follower_stop(f);
    wk_db_close(ro);
    wk_db_close(rw);
}

Test(settings, no_read_grant_cannot_follow)
{
    wk_entity e = WK_SETTINGS_ENTITY(wk_test_ns("deny"));
    wk_cap_entry rows[] = {{WK_KIND_SETTINGS, e.ns, WK_GRANT_NONE}};
    wk_cap *cap;
    cr_assert_eq(wk_cap_new(&cap, "blind", WK_GRANT_WRITE, rows, 1), WK_OK);
    wk_db_options db = WK_DB_OPTIONS_INIT;
    db.url = wk_test_url();
    db.capability = cap;
    wk_settings_follower_options o = WK_SETTINGS_FOLLOWER_OPTIONS_INIT;
    o.db = &db;
    o.settings = &e;
    o.name = wk_name_str("n");
    wk_settings_follower *f = (wk_settings_follower *)&o;
    char err[256];
    cr_assert_eq(wk_settings_follower_start(&f, &o, err, sizeof(err)), WK_EDENIED, "%s", err);
    cr_assert_null(f);
    char want[200];
    snprintf(want, sizeof(want), "capability \"blind\" may not READ Settings:%s", e.ns);
    cr_assert(strstr(err, want), "%s", err);
    wk_cap_free(cap);
}

Test(settings, follower_option_checks)
{
    wk_settings_follower_stop(NULL);
    wk_settings_follower *f = NULL;
    char err[256];
    cr_assert_eq(wk_settings_follower_start(&f, NULL, err, sizeof(err)), WK_EINVAL);
    wk_settings_follower_options o = WK_SETTINGS_FOLLOWER_OPTIONS_INIT;
    cr_assert_eq(wk_settings_follower_start(&f, &o, err, sizeof(err)), WK_EINVAL);
    cr_assert(err[0], "a message says why");
    wk_db_options db = WK_DB_OPTIONS_INIT;
    db.url = wk_test_url();
    db.capability = wk_cap_read_write();
    wk_entity lock = WK_LOCK_ENTITY("x", 100);
    o.db = &db;
    o.settings = &lock;
    o.name = wk_name_str("n");
    cr_assert_eq(wk_settings_follower_start(&f, &o, err, sizeof(err)), WK_EINVAL);
    wk_entity e = WK_SETTINGS_ENTITY("x");
    o.settings = &e;
    o.name = wk_name_str(NULL);
    cr_assert_eq(wk_settings_follower_start(&f, &o, err, sizeof(err)), WK_EINVAL);
    o.name = wk_name_str("n");
    db.url = "redis://127.0.0.1:1";
    cr_assert_eq(wk_settings_follower_start(&f, &o, err, sizeof(err)), WK_EIO, "%s", err);
    cr_assert_null(f);
    bool found, reached;
    cr_assert_eq(wk_settings_follower_get(NULL, "k", 1, NULL, 0, NULL, &found), WK_EINVAL);
    cr_assert_eq(wk_settings_follower_wait(NULL, 1, 0, &reached), WK_EINVAL);
    cr_assert_eq(wk_settings_follower_version(NULL), -1);
}

/* ------------------------------------------------------------------------
 * Followers
 * ---------------------------------------------------------------------- */

Test(settings, follower_get_copies_out)
{
    wk_db *db = wk_test_open(NULL);
    wk_entity e = WK_SETTINGS_ENTITY(wk_test_ns("get"));
    int64_t v;
    cr_assert_eq(wk_settings_put(wk_db_processor(db), &e, wk_name_str("n"), "k\0:", 3,
                                 "hello\0world", 11, &v),
                 WK_OK);
    wk_settings_follower *f = follow(wk_test_url(), NULL, &e, "n", NULL);
    cr_assert_eq(wk_settings_follower_version(f), 1, "start loads the snapshot");

    size_t len = 99;
    bool found;
    cr_assert_eq(wk_settings_follower_get(f, "k\0:", 3, NULL, 0, &len, &found), WK_OK);
    cr_assert(found);
    cr_assert_eq(len, 11, "length first");
    char small[5];
    cr_assert_eq(wk_settings_follower_get(f, "k\0:", 3, small, sizeof(small), &len, &found),
                 WK_OK);
    cr_assert_eq(len, 11);
    cr_assert(memcmp(small, "hello", 5) == 0, "truncated copy");
    char *dup = NULL;
    cr_assert_eq(wk_settings_follower_get_dup(f, "k\0:", 3, &dup, &len, &found), WK_OK);
    cr_assert(found && len == 11 && memcmp(dup, "hello\0world", 12) == 0);
    free(dup);
    cr_assert_eq(wk_settings_follower_get(f, "k", 1, small, sizeof(small), &len, &found), WK_OK);
    cr_assert_not(found, "\"k\" is not \"k\\0:\"");
    cr_assert_eq(len, 0);
    cr_assert_eq(wk_settings_follower_get_dup(f, "nope", 4, &dup, &len, &found), WK_OK);
    cr_assert(!found && dup == NULL);

    bool reached = true;
    cr_assert_eq(wk_settings_follower_wait(f, 5, 0, &reached), WK_OK);
    cr_assert_not(reached);
    cr_assert_eq(wk_settings_follower_wait(f, 5, 100, &reached), WK_OK);
    cr_assert_not(reached, "nobody wrote version 5");
    cr_assert_eq(wk_settings_follower_wait(f, 1, 0, &reached), WK_OK);
    cr_assert(reached);
    wk_settings_follower_stop(f);
    wk_db_close(db);
}

/* Readers hammering get() from other threads while the mirror changes. */
typedef struct reader_arg {
    wk_settings_follower *f;
    atomic_bool *stop;
    uint64_t gets;
} reader_arg;

static void *reader_main(void *p)
{
    reader_arg *a = p;
    char buf[64];
    while (!atomic_load(a->stop)) {
        size_t len;
        bool found;
        char key = (char)(a->gets % 7);
        wk_settings_follower_get(a->f, &key, 1, buf, sizeof(buf), &len, &found);
        a->gets++;
    }
    return NULL;
}

/*
 * The writer loop of the convergence tests: `ops` random puts and removes
 * over a pool of binary keys; every `kill_every` ops (0: never) the
 * subscriber connections of every follower are killed from a raw
 * connection. Returns how many clients were killed.
 */
static long long random_writes(wk_db *db, const wk_entity *e, const char *name, int ops,
                               int kill_every, redisContext *raw, uint64_t seed)
{
    char keys[48][12];
    size_t key_lens[48];
    for (int i = 0; i < 48; i++) {
        key_lens[i] = rnd(&seed) % sizeof(keys[i]); /* the empty key too */
        rnd_bytes(&seed, keys[i], key_lens[i]);
    }
    keys[0][0] = '\0'; /* one key is a lone NUL, one a lone ':' */
    key_lens[0] = 1;
    keys[1][0] = ':';
    key_lens[1] = 1;
    long long killed = 0;
    for (int i = 0; i < ops; i++) {
        int k = (int)(rnd(&seed) % 48);
        int rc;
        if (rnd(&seed) % 10 < 3) {
            rc = wk_settings_remove(wk_db_processor(db), e, wk_name_str(name), keys[k],
                                    key_lens[k], NULL);
        } else {
            char v[40];
            size_t vl = rnd(&seed) % sizeof(v);
            rnd_bytes(&seed, v, vl);
            rc = wk_settings_put(wk_db_processor(db), e, wk_name_str(name), keys[k], key_lens[k],
                                 v, vl, NULL);
        }
        cr_assert_eq(rc, WK_OK, "op %d: %s: %s", i, wk_err_name(rc), wk_db_errmsg(db));
        if (kill_every && i % kill_every == kill_every / 2) {
            redisReply *r = wk_test_cmd(raw, "CLIENT KILL TYPE pubsub");
            cr_assert_eq(r->type, REDIS_REPLY_INTEGER);
            killed += r->integer;
            freeReplyObject(r);
        }
    }
    return killed;
}

static void converge(const char *url, int ops, int kill_every)
{
    wk_db *db = wk_test_open_url(url, NULL);
    wk_entity e = WK_SETTINGS_ENTITY(wk_test_ns("conv"));
    /* Some state before the followers start. */
    cr_assert_eq(wk_settings_put(wk_db_processor(db), &e, wk_name_str("n"), "pre", 3, "1", 1,
                                 NULL),
                 WK_OK);
    replay replays[3];
    memset(replays, 0, sizeof(replays));
    wk_settings_follower *f[3];
    for (int i = 0; i < 3; i++)
        f[i] = follow(url, i == 2 ? wk_cap_read_only() : NULL, &e, "n", &replays[i]);
    /* The first load reports nothing; replay it from the snapshot. */
    for (int i = 0; i < 3; i++) {
        wk_settings_change c = {WK_SETTINGS_PUT, 1, "pre", 3, "1", 1};
        on_change(&replays[i], &c);
    }
    atomic_bool stop;
    atomic_init(&stop, false);
    reader_arg ra = {f[0], &stop, 0};
    pthread_t reader;
    cr_assert_eq(pthread_create(&reader, NULL, reader_main, &ra), 0);

    redisContext *raw = wk_test_raw(url);
    long long killed = random_writes(db, &e, "n", ops, kill_every, raw, 0x9e3779b97f4a7c15ULL);
    /* Then rounds of: kill, one change, everyone must get it. A change made
     * while a follower reconnects is in no message it will read: only the
     * reload after reconnecting brings it, and no later change shows a gap
     * that would repair it. */
    for (int round = 0; kill_every && round < 20; round++) {
        redisReply *r = wk_test_cmd(raw, "CLIENT KILL TYPE pubsub");
        killed += r->integer;
        freeReplyObject(r);
        int64_t v;
        char value[16];
        snprintf(value, sizeof(value), "round %d", round);
        cr_assert_eq(wk_settings_put(wk_db_processor(db), &e, wk_name_str("n"), "last", 4,
                                     value, strlen(value), &v),
                     WK_OK);
        for (int i = 0; i < 3; i++) {
            bool reached;
            wk_settings_follower_wait(f[i], v, 20000, &reached);
            cr_assert(reached, "round %d: follower %d missed version %lld", round, i,
                      (long long)v);
        }
    }
    redisFree(raw);

    wk_settings_map *m = master(db, &e, "n");
    cr_assert_gt(m->count, 10, "the random writes leave a non-trivial map");
    for (int i = 0; i < 3; i++) {
        assert_mirror_equals(f[i], m, i);
        char why[128];
        cr_assert(replay_matches(&replays[i], m, why, sizeof(why)), "follower %d: %s", i, why);
        wk_settings_stats st;
        cr_assert_eq(wk_settings_follower_stats(f[i], &st, NULL, 0), WK_OK);
        cr_assert(st.synced || kill_every, "follower %d synced", i);
        cr_assert_gt(st.applied, 0, "follower %d applied changes from messages", i);
        if (kill_every) {
            cr_assert_gt(st.reconnects, 0, "follower %d was cut off and came back", i);
            cr_assert_gt(st.snapshots, 1, "follower %d reloaded after reconnecting", i);
        }
    }
    if (kill_every)
        cr_assert_gt(killed, 0, "CLIENT KILL found the subscribers");
    atomic_store(&stop, true);
    pthread_join(reader, NULL);
    cr_assert_gt(ra.gets, 0);
    for (int i = 0; i < 3; i++) {
        wk_settings_follower_stop(f[i]);
        replay_free(&replays[i]);
    }
    wk_settings_map_free(m);
    wk_db_close(db);
}

Test(settings, three_followers_converge_under_random_writes, .timeout = 240)
{
    converge(wk_test_url(), 3000, 0);
}

/* A private server per test that needs one, stopped by .fini even when an
 * assertion fails. */
static wk_test_server private_server;

static void start_private(void)
{
    cr_assert_eq(wk_test_server_start(&private_server, NULL), 0, "redis-server did not start");
}

static void stop_private(void)
{
    wk_test_server_stop(&private_server);
}

/* CLIENT KILL TYPE pubsub must not hit the followers of other tests. */
Test(settings, followers_converge_when_subscribers_are_killed, .init = start_private,
     .fini = stop_private, .timeout = 240)
{
    converge(private_server.url, 4000, 500);
}

Test(settings, late_follower_gets_the_full_state)
{
    wk_db *db = wk_test_open(NULL);
    wk_entity e = WK_SETTINGS_ENTITY(wk_test_ns("late"));
    redisContext *raw = wk_test_raw(wk_test_url());
    random_writes(db, &e, "n", 1000, 0, raw, 12345);
    redisFree(raw);
    wk_settings_map *m = master(db, &e, "n");
    replay r;
    memset(&r, 0, sizeof(r));
    wk_settings_follower *f = follow(wk_test_url(), NULL, &e, "n", &r);
    /* No waiting: start returns with the mirror loaded. */
    wk_settings_map *mine = NULL;
    cr_assert_eq(wk_settings_follower_snapshot(f, &mine), WK_OK);
    cr_assert_eq(mine->version, m->version);
    char why[128];
    cr_assert(same_entries(mine, m, why, sizeof(why)), "%s", why);
    cr_assert_eq(r.calls, 0, "the first load reports no changes");
    wk_settings_map_free(mine);
    wk_settings_map_free(m);

    int64_t v;
    cr_assert_eq(wk_settings_put(wk_db_processor(db), &e, wk_name_str("n"), "after", 5, "x", 1,
                                 &v),
                 WK_OK);
    m = master(db, &e, "n");
    assert_mirror_equals(f, m, 0);
    cr_assert_eq(r.calls, 1);
    wk_settings_map_free(m);
    wk_settings_follower_stop(f);
    replay_free(&r);
    wk_db_close(db);
}

static void wait_stats(wk_settings_follower *f, bool (*done)(const wk_settings_stats *),
                       const char *what)
{
    wk_settings_stats st;
    int64_t until = wk_test_now_ms() + 30000;
    do {
        wk_settings_follower_stats(f, &st, NULL, 0);
        if (done(&st))
            return;
        wk_test_sleep_ms(5);
    } while (wk_test_now_ms() < until);
    cr_assert_fail("timed out waiting for %s", what);
}

static bool two_gaps(const wk_settings_stats *s)
{
    return s->gaps >= 2 && s->snapshots >= 3;
}
static bool one_gap(const wk_settings_stats *s)
{
    return s->gaps >= 1 && s->snapshots >= 2;
}
static bool one_ignored(const wk_settings_stats *s)
{
    return s->ignored >= 1;
}

Test(settings, gaps_and_garbage_reload_stale_messages_are_ignored)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity e = WK_SETTINGS_ENTITY(wk_test_ns("gap"));
    int64_t v;
    cr_assert_eq(wk_settings_put(p, &e, wk_name_str("n"), "a", 1, "1", 1, &v), WK_OK);
    replay r;
    memset(&r, 0, sizeof(r));
    wk_settings_follower *f = follow(wk_test_url(), NULL, &e, "n", &r);
    char chan[256];
    item_key(chan, sizeof(chan), e.ns, "n", ":chan");
    redisContext *raw = wk_test_raw(wk_test_url());

    /* A change the follower never saw: version 2 written behind its back,
     * then a message for version 3 shows the gap. */
    char map[256], ver[256];
    item_key(map, sizeof(map), e.ns, "n", ":map");
    item_key(ver, sizeof(ver), e.ns, "n", ":version");
    freeReplyObject(wk_test_cmd(raw, "HSET %s b 2", map));
    freeReplyObject(wk_test_cmd(raw, "SET %s 3", ver));
    freeReplyObject(wk_test_cmd(raw, "PUBLISH %s %b", chan, "R1:3,1:z,", (size_t)9));
    wait_stats(f, one_gap, "a reload after a gap");
    wk_settings_map *m = master(db, &e, "n");
    assert_mirror_equals(f, m, 0);
    wk_settings_map_free(m);
    cr_assert_eq(r.calls, 1, "the reload reported the one difference (b = 2)");
    cr_assert_eq(r.count, 1);
    cr_assert(r.key_lens[0] == 1 && r.keys[0][0] == 'b');

    /* Garbage on the channel: reload, nothing lost. */
    freeReplyObject(wk_test_cmd(raw, "PUBLISH %s garbage", chan));
    wait_stats(f, two_gaps, "a reload after garbage");

    /* A stale message (version 2 ≤ 3) changes nothing. */
    freeReplyObject(wk_test_cmd(raw, "PUBLISH %s %b", chan, "P1:2,1:s,1:s,", (size_t)13));
    wait_stats(f, one_ignored, "a stale message");
    bool found;
    cr_assert_eq(wk_settings_follower_get(f, "s", 1, NULL, 0, NULL, &found), WK_OK);
    cr_assert_not(found);

    /* And normal changes still flow. */
    wk_settings_removal rm;
    cr_assert_eq(wk_settings_remove(p, &e, wk_name_str("n"), "a", 1, &rm), WK_OK);
    cr_assert(rm.removed);
    cr_assert_eq(rm.version, 4);
    m = master(db, &e, "n");
    assert_mirror_equals(f, m, 0);
    wk_settings_map_free(m);
    wk_settings_stats st;
    wk_settings_follower_stats(f, &st, NULL, 0);
    cr_assert_eq(st.applied, 1);
    redisFree(raw);
    wk_settings_follower_stop(f);
    replay_free(&r);
    wk_db_close(db);
}

static bool reconnected(const wk_settings_stats *s)
{
    return s->reconnects >= 1 && s->synced;
}

Test(settings, follower_resyncs_after_a_server_restart, .init = start_private,
     .fini = stop_private, .timeout = 120)
{
    wk_test_server *s = &private_server;
    wk_db *db = wk_test_open_url(s->url, NULL);
    wk_entity e = WK_SETTINGS_ENTITY(wk_test_ns("restart"));
    int64_t v;
    cr_assert_eq(wk_settings_put(wk_db_processor(db), &e, wk_name_str("n"), "old", 3, "1", 1, &v),
                 WK_OK);
    wk_settings_follower *f = follow(s->url, NULL, &e, "n", NULL);

    wk_test_server_stop(s);
    wk_test_sleep_ms(300); /* the follower notices and retries meanwhile */
    cr_assert_eq(wk_test_server_restart(s, NULL), 0);
    /* The restarted server is empty (no persistence): a new history. The
     * writer's own connection broke too: a PING (retry-safe) reconnects it,
     * so the put below is not lost to WK_EUNKNOWN. */
    cr_assert_eq(wk_db_ping(db), WK_OK, "%s", wk_db_errmsg(db));
    cr_assert_eq(wk_settings_put(wk_db_processor(db), &e, wk_name_str("n"), "new", 3, "2", 1, &v),
                 WK_OK);
    wait_stats(f, reconnected, "a reconnect");
    wk_settings_map *m = master(db, &e, "n");
    /* The version restarted, so wait for the contents, not the version. */
    int64_t until = wk_test_now_ms() + 30000;
    bool same = false;
    char why[128] = "";
    while (!same && wk_test_now_ms() < until) {
        wk_settings_map *mine = NULL;
        cr_assert_eq(wk_settings_follower_snapshot(f, &mine), WK_OK);
        same = mine->version == m->version && same_entries(mine, m, why, sizeof(why));
        wk_settings_map_free(mine);
        if (!same)
            wk_test_sleep_ms(10);
    }
    cr_assert(same, "mirror did not match the restarted server: %s", why);
    bool found;
    wk_settings_follower_get(f, "old", 3, NULL, 0, NULL, &found);
    cr_assert_not(found, "the lost key left the mirror");
    wk_settings_map_free(m);
    wk_settings_follower_stop(f);
    wk_db_close(db);
}

static wk_settings_follower *follow_keepalive(const char *url, const wk_entity *e,
                                              const char *client_name, int keepalive_ms,
                                              int command_timeout_ms)
{
    wk_db_options db = WK_DB_OPTIONS_INIT;
    db.url = url;
    db.capability = wk_cap_read_only();
    db.client_name = client_name;
    db.command_timeout_ms = command_timeout_ms;
    wk_settings_follower_options o = WK_SETTINGS_FOLLOWER_OPTIONS_INIT;
    o.db = &db;
    o.settings = e;
    o.name = wk_name_str("n");
    o.keepalive_ms = keepalive_ms;
    o.retry_max_ms = 100;
    wk_settings_follower *f = NULL;
    char err[256];
    int rc = wk_settings_follower_start(&f, &o, err, sizeof(err));
    cr_assert_eq(rc, WK_OK, "follower start: %s: %s", wk_err_name(rc), err);
    return f;
}

Test(settings, keepalive_pings_keep_an_idle_follower_connected)
{
    wk_entity e = WK_SETTINGS_ENTITY(wk_test_ns("idle"));
    char name[64];
    snprintf(name, sizeof(name), "idle-%s", e.ns);
    /* Many PINGs, each of which must be answered within 500 ms. */
    wk_settings_follower *f = follow_keepalive(wk_test_url(), &e, name, 50, 500);
    wk_test_sleep_ms(1500);

    /* The server saw the follower's subscriber send PING … */
    redisContext *raw = wk_test_raw(wk_test_url());
    redisReply *r = wk_test_cmd(raw, "CLIENT LIST TYPE pubsub");
    cr_assert_eq(r->type, REDIS_REPLY_STRING);
    char want[96];
    snprintf(want, sizeof(want), "name=%s ", name);
    const char *line = strstr(r->str, want);
    cr_assert(line, "subscriber not listed: %s", r->str);
    const char *end = strchr(line, '\n');
    const char *cmd = strstr(line, " cmd=ping");
    cr_assert(cmd && (!end || cmd < end), "the subscriber's last command is not PING: %.*s",
              end ? (int)(end - line) : 200, line);
    freeReplyObject(r);
    redisFree(raw);

    /* … and the answers were taken as a live connection, not a failure. */
    wk_settings_stats st;
    char err[256];
    wk_settings_follower_stats(f, &st, err, sizeof(err));
    cr_assert_eq(st.reconnects, 0, "%s", err);
    cr_assert_eq(st.last_status, WK_OK, "%s", err);
    cr_assert(st.synced);
    wk_db *db = wk_test_open(NULL);
    int64_t v;
    cr_assert_eq(wk_settings_put(wk_db_processor(db), &e, wk_name_str("n"), "k", 1, "v", 1, &v),
                 WK_OK);
    bool reached;
    wk_settings_follower_wait(f, v, 30000, &reached);
    cr_assert(reached);
    wk_settings_follower_stop(f);
    wk_db_close(db);
}

static bool resynced_after_timeout(const wk_settings_stats *s)
{
    return s->reconnects >= 1 && s->synced;
}

/* A server that stops answering (not closing) is found by the keep-alive. */
Test(settings, keepalive_detects_a_stalled_server, .init = start_private, .fini = stop_private,
     .timeout = 120)
{
    wk_entity e = WK_SETTINGS_ENTITY(wk_test_ns("stall"));
    wk_settings_follower *f = follow_keepalive(private_server.url, &e, NULL, 100, 300);
    cr_assert_eq(kill(private_server.pid, SIGSTOP), 0);
    wk_test_sleep_ms(1500);
    wk_settings_stats st;
    char err[256];
    wk_settings_follower_stats(f, &st, err, sizeof(err));
    cr_assert_not(st.synced, "a silent server must be noticed");
    cr_assert_eq(st.last_status, WK_ETIMEDOUT, "%s: %s", wk_err_name(st.last_status), err);
    cr_assert_eq(kill(private_server.pid, SIGCONT), 0);

    wait_stats(f, resynced_after_timeout, "a resync after the stall");
    wk_db *db = wk_test_open_url(private_server.url, NULL);
    int64_t v;
    cr_assert_eq(wk_settings_put(wk_db_processor(db), &e, wk_name_str("n"), "k", 1, "v", 1, &v),
                 WK_OK);
    bool reached;
    wk_settings_follower_wait(f, v, 30000, &reached);
    cr_assert(reached);
    wk_settings_follower_stop(f);
    wk_db_close(db);
}

/* Both of the follower's connections authenticate (the subscriber too). */
Test(settings, follower_authenticates_both_connections, .init = start_private,
     .fini = stop_private)
{
    /* (Set after start: the harness waits for an unauthenticated PING.) */
    redisContext *raw = wk_test_raw(private_server.url);
    freeReplyObject(wk_test_cmd(raw, "CONFIG SET requirepass s3cr:t@"));
    redisFree(raw);
    char url[128];
    snprintf(url, sizeof(url), "redis://:s3cr%%3At%%40@127.0.0.1:%d", private_server.port);
    wk_entity e = WK_SETTINGS_ENTITY(wk_test_ns("auth"));
    wk_db *db = wk_test_open_url(url, NULL);
    int64_t v;
    cr_assert_eq(wk_settings_put(wk_db_processor(db), &e, wk_name_str("n"), "k", 1, "1", 1, &v),
                 WK_OK);
    wk_settings_follower *f = follow(url, wk_cap_read_only(), &e, "n", NULL);
    cr_assert_eq(wk_settings_put(wk_db_processor(db), &e, wk_name_str("n"), "k", 1, "2", 1, &v),
                 WK_OK);
    bool reached;
    wk_settings_follower_wait(f, v, 30000, &reached);
    cr_assert(reached, "changes arrive over the authenticated subscriber");
    wk_settings_follower_stop(f);

    /* A wrong password fails at start, and says so without echoing it. */
    snprintf(url, sizeof(url), "redis://:wrong-pass@127.0.0.1:%d", private_server.port);
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = url;
    o.capability = wk_cap_read_only();
    wk_settings_follower_options fo = WK_SETTINGS_FOLLOWER_OPTIONS_INIT;
    fo.db = &o;
    fo.settings = &e;
    fo.name = wk_name_str("n");
    char err[256];
    cr_assert_eq(wk_settings_follower_start(&f, &fo, err, sizeof(err)), WK_EAUTH, "%s", err);
    cr_assert_null(f);
    cr_assert_null(strstr(err, "wrong-pass"), "%s", err);
    wk_db_close(db);
}
