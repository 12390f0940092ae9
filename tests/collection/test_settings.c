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
    r = wk_test_cmd(raw, "HGET %s version", key);
    cr_assert(r->type == REDIS_REPLY_STRING && strcmp(r->str, "7") == 0);
    freeReplyObject(r);
    r = wk_test_cmd(raw, "HGET %s epoch", key);
    cr_assert(r->type == REDIS_REPLY_STRING && r->len == WK_SETTINGS_EPOCH_LEN);
    m = master(db, &e, "app");
    cr_assert_str_eq(m->epoch, r->str, "the snapshot carries the epoch");
    wk_settings_map_free(m);
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

    /* A version hash without its epoch, or with a malformed one. */
    static const char *const bad_versions[] = {"version 3", "version 3 epoch short",
                                               "epoch 0123456789abcdef0123456789abcdef",
                                               "version x epoch 0123456789abcdef0123456789abcdef"};
    for (size_t i = 0; i < sizeof(bad_versions) / sizeof(bad_versions[0]); i++) {
        freeReplyObject(wk_test_cmd(raw, "DEL %s", ver));
        char cmd[300];
        snprintf(cmd, sizeof(cmd), "HSET %s %s", ver, bad_versions[i]);
        freeReplyObject(wk_test_cmd(raw, cmd));
        cr_assert_eq(wk_settings_put(p, &e, wk_name_str("n"), "k", 1, "v", 1, &v), WK_ECORRUPT,
                     "%s", bad_versions[i]);
        cr_assert_eq(wk_settings_snapshot(p, &e, wk_name_str("n"), &m), WK_ECORRUPT, "%s",
                     bad_versions[i]);
        r = wk_test_cmd(raw, "EXISTS %s", map);
        cr_assert_eq(r->integer, 0, "a failed put must not write the map");
        freeReplyObject(r);
    }
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
    item_key(chan, sizeof(chan), e.ns, "n", ":chan:0"); /* the database is in the name */
    redisContext *sub = wk_test_raw(wk_test_url());
    redisReply *r = wk_test_cmd(sub, "SUBSCRIBE %s", chan);
    freeReplyObject(r);

    cr_assert_eq(wk_settings_put(p, &e, wk_name_str("n"), "a:b", 3, "x\0y", 3, NULL), WK_OK);
    r = next_message(sub);
    wk_settings_map *m = master(db, &e, "n");
    cr_assert_eq(strlen(m->epoch), WK_SETTINGS_EPOCH_LEN, "the first change made an epoch");
    for (size_t i = 0; i < WK_SETTINGS_EPOCH_LEN; i++)
        cr_assert(strchr("0123456789abcdef", m->epoch[i]), "epoch %s", m->epoch);
    char want[128];
    int wl = snprintf(want, sizeof(want), "P32:%s,1:1,3:a:b,3:x", m->epoch);
    memcpy(want + wl, "\0y,", 3);
    wl += 3;
    cr_assert_eq(r->element[2]->len, (size_t)wl);
    cr_assert(memcmp(r->element[2]->str, want, (size_t)wl) == 0, "exact encoding");
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
        cr_assert_str_eq(c.epoch, m->epoch, "every change carries the map's epoch");
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
    wk_settings_map_free(m);
    redisFree(sub);
    wk_db_close(db);
}

/* An epoch netstring, for hand-made messages. */
#define EP "32:0123456789abcdef0123456789abcdef,"

Test(settings, decode_rejects_anything_malformed)
{
    static const char *const bad[] = {
        "",
        "X" EP "1:1,1:k,",
        "P" EP "1:1,1:k,",      /* put without value */
        "R" EP "1:1,1:k,1:v,",  /* remove with value */
        "R" EP "1:0,1:k,",      /* version 0 */
        "R" EP "2:01,1:k,",     /* leading zero */
        "R" EP "1:1,01:k,",     /* leading zero length */
        "R" EP "1:1,2:k,",      /* length beyond the data */
        "R" EP "1:1,1:k;",      /* no comma */
        "R" EP "1:1,1:k,x",     /* trailing bytes */
        "R" EP "1:x,1:k,",      /* version not digits */
        "R" EP "-1:1,1:k,",
        "R" EP "1:1,1:k",
        "R" EP "1:1,",
        "R" EP "20:99999999999999999999,1:k,", /* version overflow */
        "R" EP "1:1,99999999999999999999999:k,",
        "R1:9,0:,",                                      /* no epoch (the old format) */
        "P1:1,1:k,1:v,",                                 /* no epoch */
        "R31:0123456789abcdef0123456789abcde,1:9,0:,",   /* epoch too short */
        "R33:0123456789abcdef0123456789abcdef0,1:9,0:,", /* epoch too long */
        "R32:0123456789ABCDEF0123456789abcdef,1:9,0:,",  /* not lowercase hex */
        "R32:0123456789abcdeg0123456789abcdef,1:9,0:,",  /* not hex */
        "R0:,1:9,0:,",                                   /* empty epoch */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        wk_settings_change c;
        cr_assert_eq(wk_settings_change_decode(bad[i], strlen(bad[i]), &c), WK_ECORRUPT,
                     "case %zu (%s) must be rejected", i, bad[i]);
    }
    wk_settings_change c;
    cr_assert_eq(wk_settings_change_decode("R" EP "1:9,0:,", 44, &c), WK_OK);
    cr_assert_eq(c.op, WK_SETTINGS_REMOVE);
    cr_assert_eq(c.version, 9);
    cr_assert_eq(c.key_len, 0);
    cr_assert_str_eq(c.epoch, "0123456789abcdef0123456789abcdef");
    cr_assert_eq(wk_settings_change_decode("P" EP "2:12,1:,,1::,", 50, &c), WK_OK);
    cr_assert_eq(c.version, 12);
    cr_assert(c.key_len == 1 && c.key[0] == ',' && c.value_len == 1 && c.value[0] == ':');
    cr_assert_eq(wk_settings_change_decode("P" EP "1:1,0:,0:,", 47, NULL), WK_EINVAL);
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
        wk_settings_change c = {.op = WK_SETTINGS_PUT, .version = 1, .key = "pre",
                                .key_len = 3, .value = "1", .value_len = 1};
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

/* A subscriber the server closes is noticed at once, not by the next
 * keep-alive PING or periodic check: with both off, the follower still
 * reconnects, reloads and gets the change made meanwhile. (The merge of
 * the one connection machine, 0.2.0 pre-release, left an idle follower
 * polling its closed connection until a timer fired: 5 s per kill with
 * the defaults, never with these options.) */
Test(settings, a_killed_subscriber_is_noticed_without_keepalive_or_check, .init = start_private,
     .fini = stop_private, .timeout = 240)
{
    wk_db *db = wk_test_open_url(private_server.url, NULL);
    wk_entity e = WK_SETTINGS_ENTITY(wk_test_ns("killed"));
    cr_assert_eq(wk_settings_put(wk_db_processor(db), &e, wk_name_str("n"), "a", 1, "1", 1, NULL),
                 WK_OK);
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = private_server.url;
    o.capability = wk_cap_read_write();
    wk_settings_follower_options fo = WK_SETTINGS_FOLLOWER_OPTIONS_INIT;
    fo.db = &o;
    fo.settings = &e;
    fo.name = wk_name_str("n");
    fo.keepalive_ms = 0;
    fo.check_ms = 0;
    wk_settings_follower *f = NULL;
    char err[256];
    cr_assert_eq(wk_settings_follower_start(&f, &fo, err, sizeof(err)), WK_OK, "%s", err);
    redisContext *raw = wk_test_raw(private_server.url);
    for (int round = 0; round < 3; round++) {
        redisReply *r = wk_test_cmd(raw, "CLIENT KILL TYPE pubsub");
        cr_assert_eq(r->integer, 1, "round %d: the follower's subscriber", round);
        freeReplyObject(r);
        int64_t v;
        cr_assert_eq(wk_settings_put(wk_db_processor(db), &e, wk_name_str("n"), "a", 1, "2", 1,
                                     &v),
                     WK_OK);
        bool reached = false;
        cr_assert_eq(wk_settings_follower_wait(f, v, 20000, &reached), WK_OK);
        cr_assert(reached, "round %d: version %lld never reached the follower", round,
                  (long long)v);
    }
    wk_settings_stats st;
    cr_assert_eq(wk_settings_follower_stats(f, &st, NULL, 0), WK_OK);
    cr_assert_geq(st.reconnects, 3);
    redisFree(raw);
    wk_settings_follower_stop(f);
    wk_db_close(db);
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
    item_key(chan, sizeof(chan), e.ns, "n", ":chan:0");
    redisContext *raw = wk_test_raw(wk_test_url());
    wk_settings_map *m = master(db, &e, "n");
    char epoch[WK_SETTINGS_EPOCH_LEN + 1], msg[128];
    memcpy(epoch, m->epoch, sizeof(epoch));
    wk_settings_map_free(m);

    /* A change the follower never saw: version 2 written behind its back,
     * then a message for version 3 shows the gap. */
    char map[256], ver[256];
    item_key(map, sizeof(map), e.ns, "n", ":map");
    item_key(ver, sizeof(ver), e.ns, "n", ":version");
    freeReplyObject(wk_test_cmd(raw, "HSET %s b 2", map));
    freeReplyObject(wk_test_cmd(raw, "HSET %s version 3", ver));
    int ml = snprintf(msg, sizeof(msg), "R32:%s,1:3,1:z,", epoch);
    freeReplyObject(wk_test_cmd(raw, "PUBLISH %s %b", chan, msg, (size_t)ml));
    wait_stats(f, one_gap, "a reload after a gap");
    m = master(db, &e, "n");
    assert_mirror_equals(f, m, 0);
    wk_settings_map_free(m);
    cr_assert_eq(r.calls, 1, "the reload reported the one difference (b = 2)");
    cr_assert_eq(r.count, 1);
    cr_assert(r.key_lens[0] == 1 && r.keys[0][0] == 'b');

    /* Garbage on the channel: reload, nothing lost. */
    freeReplyObject(wk_test_cmd(raw, "PUBLISH %s garbage", chan));
    wait_stats(f, two_gaps, "a reload after garbage");

    /* A stale message (version 2 ≤ 3) changes nothing (and the check it
     * makes finds the mirror current). */
    ml = snprintf(msg, sizeof(msg), "P32:%s,1:2,1:s,1:s,", epoch);
    freeReplyObject(wk_test_cmd(raw, "PUBLISH %s %b", chan, msg, (size_t)ml));
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
    cr_assert_eq(st.resets, 0, "the stale message was not taken for a reset");
    cr_assert_geq(st.checks, 1);
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
     .fini = stop_private, .timeout = 240)
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
     .timeout = 240)
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

/* ------------------------------------------------------------------------
 * Scope: other databases, resets, forged and foreign messages (issue 10)
 * ---------------------------------------------------------------------- */

/* Wait (up to 30 s) until the follower's mirror equals the master copy,
 * version and entries. Versions may go down after a reset, so this
 * compares contents rather than waiting for a version. */
static void assert_converges(wk_settings_follower *f, wk_db *db, const wk_entity *e,
                             const char *name, const char *what)
{
    int64_t until = wk_test_now_ms() + 30000;
    char why[160] = "";
    for (;;) {
        wk_settings_map *m = master(db, e, name), *mine = NULL;
        cr_assert_eq(wk_settings_follower_snapshot(f, &mine), WK_OK);
        bool same = false;
        if (mine->version != m->version)
            snprintf(why, sizeof(why), "mirror at version %lld, master at %lld",
                     (long long)mine->version, (long long)m->version);
        else
            same = same_entries(mine, m, why, sizeof(why));
        wk_settings_map_free(mine);
        wk_settings_map_free(m);
        if (same)
            return;
        if (wk_test_now_ms() > until) {
            wk_settings_stats st;
            char err[256];
            wk_settings_follower_stats(f, &st, err, sizeof(err));
            cr_assert_fail("%s: the mirror never matched the master: %s (synced %d, snapshots "
                           "%llu, applied %llu, ignored %llu, gaps %llu; last error: %s)",
                           what, why, st.synced, (unsigned long long)st.snapshots,
                           (unsigned long long)st.applied, (unsigned long long)st.ignored,
                           (unsigned long long)st.gaps, err);
        }
        wk_test_sleep_ms(10);
    }
}

static wk_settings_stats stats_of(wk_settings_follower *f)
{
    wk_settings_stats st;
    cr_assert_eq(wk_settings_follower_stats(f, &st, NULL, 0), WK_OK);
    return st;
}

static void put_str(wk_db *db, const wk_entity *e, const char *name, const char *k,
                    const char *v, int64_t want_version)
{
    int64_t got = -1;
    int rc = wk_settings_put(wk_db_processor(db), e, wk_name_str(name), k, strlen(k), v,
                             strlen(v), &got);
    cr_assert_eq(rc, WK_OK, "put %s: %s: %s", k, wk_err_name(rc), wk_db_errmsg(db));
    if (want_version)
        cr_assert_eq(got, want_version, "put %s got version %lld", k, (long long)got);
}

/* The one channel the server knows for settings `name` of ns (the
 * follower's subscription), found without assuming its layout. */
static void follower_channel(redisContext *raw, const char *ns, const char *name, char *out,
                             size_t cap)
{
    char pattern[256];
    snprintf(pattern, sizeof(pattern), "*{%s:%s}*", ns, name);
    redisReply *r = wk_test_cmd(raw, "PUBSUB CHANNELS %s", pattern);
    cr_assert_eq(r->type, REDIS_REPLY_ARRAY);
    cr_assert_eq(r->elements, 1, "one channel subscribed for %s", pattern);
    snprintf(out, cap, "%s", r->element[0]->str);
    freeReplyObject(r);
}

static void url_with_db(char *out, size_t cap, const char *url, int n)
{
    snprintf(out, cap, "%s/%d", url, n);
}

/* Pub/Sub ignores databases: db 0's changes must not reach db 1's mirror,
 * and must not make it ignore db 1's own changes afterwards. */
Test(settings, follower_on_db1_ignores_db0_and_follows_db1)
{
    char url0[96], url1[96];
    url_with_db(url0, sizeof(url0), wk_test_url(), 0);
    url_with_db(url1, sizeof(url1), wk_test_url(), 1);
    wk_db *db0 = wk_test_open_url(url0, NULL), *db1 = wk_test_open_url(url1, NULL);
    wk_entity e = WK_SETTINGS_ENTITY(wk_test_ns("dbs"));
    put_str(db0, &e, "n", "other", "db0 only", 1);
    put_str(db1, &e, "n", "mode", "PROD", 1);
    wk_settings_follower *f = follow(url1, NULL, &e, "n", NULL);
    /* db 0's version 2 looks like db 1's next change … */
    put_str(db0, &e, "n", "mode", "STAGING", 2);
    /* … and db 1's real versions 2 and 3 come after it. */
    put_str(db1, &e, "n", "mode", "PROD2", 2);
    put_str(db1, &e, "n", "extra", "1", 3);
    assert_converges(f, db1, &e, "n", "follower on db 1");
    bool found;
    cr_assert_eq(wk_settings_follower_get(f, "other", 5, NULL, 0, NULL, &found), WK_OK);
    cr_assert_not(found, "db 0's key reached db 1's mirror");
    wk_settings_stats st = stats_of(f);
    cr_assert_eq(st.foreign + st.gaps + st.ignored, 0, "db 0's changes arrived at all");
    cr_assert_eq(st.applied, 2);
    wk_settings_follower_stop(f);
    wk_db_close(db0);
    wk_db_close(db1);
}

Test(settings, flushall_then_new_puts_converge, .init = start_private, .fini = stop_private,
     .timeout = 240)
{
    wk_db *db = wk_test_open_url(private_server.url, NULL);
    wk_entity e = WK_SETTINGS_ENTITY(wk_test_ns("flush"));
    put_str(db, &e, "n", "a", "1", 1);
    put_str(db, &e, "n", "b", "2", 2);
    put_str(db, &e, "n", "c", "3", 3);
    put_str(db, &e, "n", "d", "4", 4);
    wk_settings_follower *f = follow(private_server.url, NULL, &e, "n", NULL);
    redisContext *raw = wk_test_raw(private_server.url);
    freeReplyObject(wk_test_cmd(raw, "FLUSHALL"));
    /* A new history whose versions (1, 2) are below the mirror's (4). */
    put_str(db, &e, "n", "x", "new", 1);
    put_str(db, &e, "n", "y", "new", 2);
    assert_converges(f, db, &e, "n", "after FLUSHALL and two puts");
    cr_assert_geq(stats_of(f).resets, 1);
    redisFree(raw);
    wk_settings_follower_stop(f);
    wk_db_close(db);
}

/* No change follows the FLUSHALL, so no message tells the follower: only
 * its periodic check can. */
Test(settings, flushall_without_later_changes_converges_by_the_periodic_check,
     .init = start_private, .fini = stop_private, .timeout = 240)
{
    wk_db *db = wk_test_open_url(private_server.url, NULL);
    wk_entity e = WK_SETTINGS_ENTITY(wk_test_ns("wiped"));
    put_str(db, &e, "n", "a", "1", 1);
    put_str(db, &e, "n", "b", "2", 2);
    wk_settings_follower *f = follow(private_server.url, NULL, &e, "n", NULL);
    redisContext *raw = wk_test_raw(private_server.url);
    freeReplyObject(wk_test_cmd(raw, "FLUSHALL"));
    assert_converges(f, db, &e, "n", "after FLUSHALL alone");
    wk_settings_map *mine = NULL;
    cr_assert_eq(wk_settings_follower_snapshot(f, &mine), WK_OK);
    cr_assert_eq(mine->count, 0);
    cr_assert_eq(mine->version, 0);
    cr_assert_str_eq(mine->epoch, "");
    wk_settings_map_free(mine);
    wk_settings_stats st = stats_of(f);
    cr_assert_geq(st.checks, 1);
    cr_assert_geq(st.resets, 1);
    redisFree(raw);
    wk_settings_follower_stop(f);
    wk_db_close(db);
}

Test(settings, deleted_version_key_then_puts_converge)
{
    wk_db *db = wk_test_open(NULL);
    wk_entity e = WK_SETTINGS_ENTITY(wk_test_ns("delver"));
    put_str(db, &e, "n", "a", "1", 1);
    put_str(db, &e, "n", "b", "2", 2);
    put_str(db, &e, "n", "c", "3", 3);
    wk_settings_follower *f = follow(wk_test_url(), NULL, &e, "n", NULL);
    redisContext *raw = wk_test_raw(wk_test_url());
    char ver[256];
    item_key(ver, sizeof(ver), e.ns, "n", ":version");
    redisReply *r = wk_test_cmd(raw, "DEL %s", ver);
    cr_assert_eq(r->integer, 1);
    freeReplyObject(r);
    put_str(db, &e, "n", "d", "4", 1); /* the counter starts again */
    assert_converges(f, db, &e, "n", "after the version key was deleted");
    cr_assert_geq(stats_of(f).resets, 1);
    redisFree(raw);
    wk_settings_follower_stop(f);
    wk_db_close(db);
}

/* An older copy of the version key comes back (a restored backup, a
 * replica promoted with old data): the next change's version is one the
 * mirror already passed. */
Test(settings, version_restored_from_an_older_dump_then_puts_converge)
{
    wk_db *db = wk_test_open(NULL);
    wk_entity e = WK_SETTINGS_ENTITY(wk_test_ns("restore"));
    put_str(db, &e, "n", "a", "1", 1);
    put_str(db, &e, "n", "b", "2", 2);
    redisContext *raw = wk_test_raw(wk_test_url());
    char ver[256];
    item_key(ver, sizeof(ver), e.ns, "n", ":version");
    redisReply *dump = wk_test_cmd(raw, "DUMP %s", ver);
    cr_assert_eq(dump->type, REDIS_REPLY_STRING);
    put_str(db, &e, "n", "c", "3", 3);
    put_str(db, &e, "n", "d", "4", 4);
    put_str(db, &e, "n", "e", "5", 5);
    wk_settings_follower *f = follow(wk_test_url(), NULL, &e, "n", NULL);
    redisReply *r = wk_test_cmd(raw, "RESTORE %s 0 %b REPLACE", ver, dump->str, dump->len);
    cr_assert_eq(r->type, REDIS_REPLY_STATUS, "%s", r->str);
    freeReplyObject(r);
    freeReplyObject(dump);
    put_str(db, &e, "n", "f", "6", 3);
    assert_converges(f, db, &e, "n", "after an older version key came back");
    cr_assert_geq(stats_of(f).resets, 1);
    redisFree(raw);
    wk_settings_follower_stop(f);
    wk_db_close(db);
}

static bool handled_one(const wk_settings_stats *s)
{
    return s->applied + s->gaps + s->ignored >= 1;
}

/* Someone PUBLISHes on the follower's channel a change with the next
 * version: in the old format (no epoch), then in the current one with a
 * made-up epoch. Neither may reach the mirror. */
Test(settings, forged_messages_are_not_applied)
{
    wk_db *db = wk_test_open(NULL);
    wk_entity e = WK_SETTINGS_ENTITY(wk_test_ns("forge"));
    put_str(db, &e, "n", "k", "real", 1);
    wk_settings_follower *f = follow(wk_test_url(), NULL, &e, "n", NULL);
    redisContext *raw = wk_test_raw(wk_test_url());
    char chan[256];
    follower_channel(raw, e.ns, "n", chan, sizeof(chan));

    static const char old_format[] = "P1:2,4:evil,1:1,";
    freeReplyObject(wk_test_cmd(raw, "PUBLISH %s %b", chan, old_format, sizeof(old_format) - 1));
    wait_stats(f, handled_one, "the forged message handled");
    put_str(db, &e, "n", "k", "real2", 2);
    assert_converges(f, db, &e, "n", "after a forged message without epoch");

    /* Handled in order: if it were applied, the real version 3 after it
     * would look old. */
    static const char new_format[] = "P32:0123456789abcdef0123456789abcdef,1:3,5:evil2,1:2,";
    freeReplyObject(wk_test_cmd(raw, "PUBLISH %s %b", chan, new_format, sizeof(new_format) - 1));
    put_str(db, &e, "n", "k", "real3", 3);
    assert_converges(f, db, &e, "n", "after a forged message with a made-up epoch");
    bool found;
    cr_assert_eq(wk_settings_follower_get(f, "evil", 4, NULL, 0, NULL, &found), WK_OK);
    cr_assert_not(found, "a forged change reached the mirror");
    cr_assert_eq(wk_settings_follower_get(f, "evil2", 5, NULL, 0, NULL, &found), WK_OK);
    cr_assert_not(found, "a forged change reached the mirror");
    wk_settings_stats st = stats_of(f);
    cr_assert_eq(st.foreign, 1, "the made-up epoch was seen as foreign");
    cr_assert_eq(st.resets, 0, "and the check found the mirror current");
    redisFree(raw);
    wk_settings_follower_stop(f);
    wk_db_close(db);
}

/* Another deployment uses the same namespace and name on another server;
 * its messages reach our channel (a Pub/Sub bridge, a shared proxy). Its
 * versions run alongside ours, so today they look like our next change. */
Test(settings, another_deployment_cannot_confuse_a_follower, .init = start_private,
     .fini = stop_private)
{
    wk_db *a = wk_test_open(NULL), *b = wk_test_open_url(private_server.url, NULL);
    wk_entity e = WK_SETTINGS_ENTITY(wk_test_ns("deploy"));
    put_str(a, &e, "n", "mode", "A1", 1);
    put_str(b, &e, "n", "mode", "B1", 1);
    wk_settings_follower *f = follow(wk_test_url(), NULL, &e, "n", NULL);
    redisContext *raw_a = wk_test_raw(wk_test_url());
    char chan[256];
    follower_channel(raw_a, e.ns, "n", chan, sizeof(chan));
    /* Relay B's change (same channel name: same layout on B) to A. */
    redisContext *sub_b = wk_test_raw(private_server.url);
    freeReplyObject(wk_test_cmd(sub_b, "SUBSCRIBE %s", chan));
    put_str(b, &e, "n", "mode", "B2", 2);
    redisReply *msg = next_message(sub_b);
    freeReplyObject(wk_test_cmd(raw_a, "PUBLISH %s %b", chan, msg->element[2]->str,
                                msg->element[2]->len));
    freeReplyObject(msg);
    put_str(a, &e, "n", "mode", "A2", 2);
    assert_converges(f, a, &e, "n", "with B's change relayed");
    char buf[8];
    size_t len;
    bool found;
    wk_settings_follower_get(f, "mode", 4, buf, sizeof(buf), &len, &found);
    cr_assert(found && len == 2 && memcmp(buf, "A2", 2) == 0, "mode is %.*s", (int)len, buf);
    wk_settings_stats st = stats_of(f);
    cr_assert_eq(st.foreign, 1);
    cr_assert_eq(st.snapshots, 1, "B's change cost a check, not a reload");
    cr_assert_eq(st.applied, 1);
    redisFree(sub_b);
    redisFree(raw_a);
    wk_settings_follower_stop(f);
    wk_db_close(a);
    wk_db_close(b);
}

/* The layout before epochs kept the version as a plain counter: it reads
 * as that version (no epoch), and the next change turns it into the hash,
 * version continued. */
Test(settings, a_counter_of_the_layout_before_epochs_is_taken_over)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity e = WK_SETTINGS_ENTITY(wk_test_ns("legacy"));
    redisContext *raw = wk_test_raw(wk_test_url());
    char map[256], ver[256];
    item_key(map, sizeof(map), e.ns, "n", ":map");
    item_key(ver, sizeof(ver), e.ns, "n", ":version");
    freeReplyObject(wk_test_cmd(raw, "HSET %s a 1", map));
    freeReplyObject(wk_test_cmd(raw, "SET %s 41", ver));
    wk_settings_map *m = master(db, &e, "n");
    cr_assert_eq(m->version, 41);
    cr_assert_str_eq(m->epoch, "");
    cr_assert_eq(m->count, 1);
    wk_settings_map_free(m);
    wk_settings_follower *f = follow(wk_test_url(), NULL, &e, "n", NULL);
    cr_assert_eq(wk_settings_follower_version(f), 41);
    wk_settings_removal rm;
    cr_assert_eq(wk_settings_remove(p, &e, wk_name_str("n"), "nope", 4, &rm), WK_OK);
    cr_assert(!rm.removed && rm.version == 41, "removing nothing converts nothing");
    redisReply *r = wk_test_cmd(raw, "TYPE %s", ver);
    cr_assert_str_eq(r->str, "string");
    freeReplyObject(r);
    put_str(db, &e, "n", "b", "2", 42);
    r = wk_test_cmd(raw, "HGET %s version", ver);
    cr_assert_str_eq(r->str, "42");
    freeReplyObject(r);
    m = master(db, &e, "n");
    cr_assert_eq(strlen(m->epoch), WK_SETTINGS_EPOCH_LEN);
    cr_assert_eq(m->count, 2);
    wk_settings_map_free(m);
    assert_converges(f, db, &e, "n", "after the layout changed");
    redisFree(raw);
    wk_settings_follower_stop(f);
    wk_db_close(db);
}

/* ------------------------------------------------------------------------
 * Snapshots in chunks (issue 10)
 * ---------------------------------------------------------------------- */

/* Settings `name` gets keys "k<i>" = "v<i>" for i in [0, n), through
 * batches of puts (versions 1..n on a fresh map). */
static void fill(wk_db *db, const wk_entity *e, const char *name, int n)
{
    wk_batch *b;
    cr_assert_eq(wk_batch_open(&b, db), WK_OK);
    for (int i = 0; i < n; i++) {
        char k[24], v[24];
        int kl = snprintf(k, sizeof(k), "k%d", i), vl = snprintf(v, sizeof(v), "v%d", i);
        cr_assert_eq(wk_settings_put(wk_batch_processor(b), e, wk_name_str(name), k,
                                     (size_t)kl, v, (size_t)vl, NULL),
                     WK_OK);
        if (i % 1000 == 999 || i == n - 1)
            cr_assert_eq(wk_batch_exec(b), WK_OK, "%s", wk_db_errmsg(db));
    }
    wk_batch_close(b);
}

/* The map holds exactly "k<i>" = "v<i>" for i in [0, n). */
static void assert_filled(const wk_settings_map *m, int n)
{
    cr_assert_eq(m->count, (size_t)n, "%zu entries, want %d", m->count, n);
    for (int i = 0; i < n; i++) {
        char k[24], v[24];
        int kl = snprintf(k, sizeof(k), "k%d", i), vl = snprintf(v, sizeof(v), "v%d", i);
        const wk_settings_entry *x = wk_settings_map_find(m, k, (size_t)kl);
        cr_assert(x, "%s missing", k);
        cr_assert(x->value_len == (size_t)vl && memcmp(x->value, v, (size_t)vl) == 0,
                  "%s has the wrong value", k);
    }
}

Test(settings, snapshot_of_50k_keys_is_read_in_chunks, .init = start_private,
     .fini = stop_private, .timeout = 240)
{
    enum { N = 50000 };
    wk_db *db = wk_test_open_url(private_server.url, NULL);
    wk_entity e = WK_SETTINGS_ENTITY(wk_test_ns("big"));
    fill(db, &e, "n", N);
    redisContext *raw = wk_test_raw(private_server.url);

    long long before = wk_test_cmd_calls(raw, "hscan");
    wk_settings_map *m = master(db, &e, "n");
    long long chunks = wk_test_cmd_calls(raw, "hscan") - before;
    cr_assert_eq(m->version, N);
    assert_filled(m, N);
    cr_assert_geq(chunks, 10, "a 50k-key snapshot took %lld HSCAN calls", chunks);

    /* The follower loads its mirror in chunks too. */
    before = wk_test_cmd_calls(raw, "hscan");
    wk_settings_follower *f = follow(private_server.url, NULL, &e, "n", NULL);
    chunks = wk_test_cmd_calls(raw, "hscan") - before;
    cr_assert_geq(chunks, 10, "the follower's load took %lld HSCAN calls", chunks);
    wk_settings_map *mine = NULL;
    cr_assert_eq(wk_settings_follower_snapshot(f, &mine), WK_OK);
    cr_assert_eq(mine->version, N);
    assert_filled(mine, N);
    wk_settings_map_free(mine);
    wk_settings_follower_stop(f);
    wk_settings_map_free(m);
    redisFree(raw);
    wk_db_close(db);
}

/* A processor wrapper that makes a change through another handle just
 * before chosen snapshot queries reach Redis: a change between two chunks,
 * deterministically. */
typedef struct injector {
    wk_processor proc; /* first member */
    wk_processor *inner;
    wk_db *writer;
    const wk_entity *e;
    int seen;      /* settings.snapshot queries seen */
    int inject_at; /* inject before this one (1-based); 0: never */
    bool every;    /* inject before every one from inject_at on */
    int injected;
} injector;

static int inject_process(wk_processor *self, wk_query *q)
{
    injector *in = (injector *)(void *)self;
    if (strcmp(q->name, "settings.snapshot") == 0) {
        in->seen++;
        if (in->inject_at &&
            (in->seen == in->inject_at || (in->every && in->seen > in->inject_at))) {
            char v[24];
            int vl = snprintf(v, sizeof(v), "changed %d", in->injected);
            if (wk_settings_put(wk_db_processor(in->writer), in->e, wk_name_str("n"), "k17", 3,
                                v, (size_t)vl, NULL) == WK_OK)
                in->injected++;
        }
    }
    return in->inner->process(in->inner, q);
}

static injector make_injector(wk_db *reader, wk_db *writer, const wk_entity *e)
{
    wk_processor *inner = wk_db_processor(reader);
    injector in = {.proc = {inject_process, inner->db, inner->flags},
                   .inner = inner,
                   .writer = writer,
                   .e = e};
    return in;
}

Test(settings, snapshot_restarts_when_the_map_changes_between_chunks, .init = start_private,
     .fini = stop_private, .timeout = 240)
{
    enum { N = 5000 };
    wk_db *db = wk_test_open_url(private_server.url, NULL);
    wk_db *writer = wk_test_open_url(private_server.url, NULL);
    wk_entity e = WK_SETTINGS_ENTITY(wk_test_ns("restart"));
    fill(db, &e, "n", N);

    /* One change before the third chunk: the read starts over and returns
     * the map as it is after the change. */
    injector in = make_injector(db, writer, &e);
    in.inject_at = 3;
    wk_settings_map *m = NULL;
    int rc = wk_settings_snapshot(&in.proc, &e, wk_name_str("n"), &m);
    cr_assert_eq(rc, WK_OK, "%s: %s", wk_err_name(rc), wk_db_errmsg(db));
    cr_assert_eq(in.injected, 1, "the snapshot was read in %d queries", in.seen);
    cr_assert_eq(m->version, N + 1, "the snapshot must include the change made during it");
    const wk_settings_entry *x = wk_settings_map_find(m, "k17", 3);
    cr_assert(x && x->value_len == 9 && memcmp(x->value, "changed 0", 9) == 0);
    cr_assert_eq(m->count, (size_t)N);
    cr_assert_gt(in.seen, 3, "it started over after the change");
    wk_settings_map_free(m);

    /* A change before every chunk: a bounded number of attempts, then a
     * clear failure, nothing returned. */
    in = make_injector(db, writer, &e);
    in.inject_at = 2;
    in.every = true;
    m = (wk_settings_map *)&in;
    rc = wk_settings_snapshot(&in.proc, &e, wk_name_str("n"), &m);
    cr_assert_eq(rc, WK_ETIMEDOUT, "%s: %s", wk_err_name(rc), wk_db_errmsg(db));
    cr_assert_null(m);
    cr_assert(strstr(wk_db_errmsg(db), "changed"), "%s", wk_db_errmsg(db));
    cr_assert_lt(in.seen, 100, "attempts are bounded (%d queries)", in.seen);
    wk_db_close(writer);
    wk_db_close(db);
}

/* A batch cannot read a map in several round trips: a small map is read
 * whole, a big one is refused rather than read by one long command. */
Test(settings, snapshot_of_a_big_map_in_a_batch_is_refused)
{
    wk_db *db = wk_test_open(NULL);
    wk_entity e = WK_SETTINGS_ENTITY(wk_test_ns("bigbatch"));
    fill(db, &e, "n", 20000);
    wk_batch *b;
    cr_assert_eq(wk_batch_open(&b, db), WK_OK);
    wk_settings_map *m = NULL;
    cr_assert_eq(wk_settings_snapshot(wk_batch_processor(b), &e, wk_name_str("n"), &m), WK_OK);
    int rc = wk_batch_exec(b);
    cr_assert_eq(rc, WK_EINVAL, "%s: %s", wk_err_name(rc), wk_db_errmsg(db));
    cr_assert_null(m);
    cr_assert(strstr(wk_db_errmsg(db), "batch"), "%s", wk_db_errmsg(db));
    wk_batch_close(b);
    wk_db_close(db);
}

/*
 * Writers change a 20k-key map while snapshots are taken and a follower
 * loads (and, its subscriber killed, reloads) its mirror. The history is
 * fixed in advance (every op bumps the version once), so the state at any
 * version is known: every snapshot and every mirror state seen must be the
 * master's state at its version.
 */
enum { HIST_POOL = 20000, HIST_OPS = 4000 };

typedef struct history {
    int key[HIST_POOL + HIST_OPS];   /* version i+1 changed key[i] … */
    int value[HIST_POOL + HIST_OPS]; /* … to "v<value>", or removed it (-1) */
    wk_db *db;
    const wk_entity *e;
    atomic_int done; /* ops the writer has made */
    atomic_bool failed;
    atomic_bool quiet; /* the writer pauses between ops while set … */
    atomic_bool idle;  /* … and says so */
    atomic_int rounds; /* rounds the reader finished: the writer waits for
                        * them, so a slow reader (sanitizers, a busy CI
                        * machine) still sees the history mid-way */
} history;

/* The writer makes at most this many ops per reader round. */
#define HIST_OPS_PER_ROUND (HIST_OPS / 24)

static void *history_writer(void *p)
{
    history *h = p;
    for (int j = HIST_POOL; j < HIST_POOL + HIST_OPS; j++) {
        while (atomic_load(&h->quiet) ||
               (j - HIST_POOL) / HIST_OPS_PER_ROUND > atomic_load(&h->rounds) + 1) {
            atomic_store(&h->idle, true);
            wk_test_sleep_ms(1);
        }
        atomic_store(&h->idle, false);
        char k[24], v[24];
        int kl = snprintf(k, sizeof(k), "k%d", h->key[j]);
        int64_t got = 0;
        int rc;
        if (h->value[j] < 0) {
            wk_settings_removal rm = {false, 0};
            rc = wk_settings_remove(wk_db_processor(h->db), h->e, wk_name_str("n"), k,
                                    (size_t)kl, &rm);
            got = rm.removed ? rm.version : -1;
        } else {
            int vl = snprintf(v, sizeof(v), "v%d", h->value[j]);
            rc = wk_settings_put(wk_db_processor(h->db), h->e, wk_name_str("n"), k, (size_t)kl,
                                 v, (size_t)vl, &got);
        }
        if (rc || got != j + 1) {
            atomic_store(&h->failed, true);
            break;
        }
        atomic_fetch_add(&h->done, 1);
    }
    return NULL;
}

/* Whether m is the state after version m->version; why says otherwise. */
static bool history_matches(const history *h, const wk_settings_map *m, char *why, size_t cap)
{
    static int cur[HIST_POOL];
    if (m->version < HIST_POOL || m->version > HIST_POOL + HIST_OPS) {
        snprintf(why, cap, "version %lld outside the history", (long long)m->version);
        return false;
    }
    for (int i = 0; i < HIST_POOL; i++)
        cur[i] = -1;
    size_t present = 0;
    for (int64_t i = 0; i < m->version; i++) {
        if (cur[h->key[i]] >= 0)
            present--;
        cur[h->key[i]] = h->value[i];
        if (h->value[i] >= 0)
            present++;
    }
    if (m->count != present) {
        snprintf(why, cap, "version %lld: %zu entries, the master had %zu",
                 (long long)m->version, m->count, present);
        return false;
    }
    for (size_t i = 0; i < m->count; i++) {
        const wk_settings_entry *x = &m->entries[i];
        char v[24];
        int k = atoi(x->key + 1);
        int vl = k >= 0 && k < HIST_POOL && cur[k] >= 0 ? snprintf(v, sizeof(v), "v%d", cur[k])
                                                        : -1;
        if (vl < 0 || x->value_len != (size_t)vl || memcmp(x->value, v, (size_t)vl) != 0) {
            snprintf(why, cap, "version %lld: %s differs from the master's",
                     (long long)m->version, x->key);
            return false;
        }
    }
    return true;
}

Test(settings, snapshots_and_mirrors_taken_during_writes_are_states_the_master_had,
     .init = start_private, .fini = stop_private, .timeout = 240)
{
    static history h;
    static bool present[HIST_POOL];
    uint64_t seed = 0x5eed;
    for (int i = 0; i < HIST_POOL; i++) {
        h.key[i] = i;
        h.value[i] = i;
        present[i] = true;
    }
    for (int j = HIST_POOL; j < HIST_POOL + HIST_OPS; j++) {
        int k = (int)(rnd(&seed) % 200); /* a hot set, so changes overlap */
        if (rnd(&seed) % 2)
            k = (int)(rnd(&seed) % HIST_POOL);
        bool remove = present[k] && rnd(&seed) % 10 < 3;
        h.key[j] = k;
        h.value[j] = remove ? -1 : j;
        present[k] = !remove;
    }
    wk_db *db = wk_test_open_url(private_server.url, NULL);
    wk_db *reader = wk_test_open_url(private_server.url, NULL);
    wk_entity e = WK_SETTINGS_ENTITY(wk_test_ns("hist"));
    fill(db, &e, "n", HIST_POOL);
    h.db = db;
    h.e = &e;
    atomic_init(&h.done, 0);
    atomic_init(&h.failed, false);
    atomic_init(&h.quiet, false);
    atomic_init(&h.idle, false);
    atomic_init(&h.rounds, 0);
    redisContext *raw = wk_test_raw(private_server.url);
    long long hscans = wk_test_cmd_calls(raw, "hscan");

    pthread_t writer;
    cr_assert_eq(pthread_create(&writer, NULL, history_writer, &h), 0);
    while (atomic_load(&h.done) < 50 && !atomic_load(&h.failed))
        wk_test_sleep_ms(1);
    wk_settings_follower *f = follow(private_server.url, NULL, &e, "n", NULL);
    int snapshots = 0, busy = 0, quiet = 0, mirrors = 0, kills = 0;
    char why[160];
    while (atomic_load(&h.done) < HIST_OPS && !atomic_load(&h.failed)) {
        /* Every third round the writer pauses (between two of its ops), so
         * a snapshot must succeed: mid-history, not only at the end. */
        bool pause = mirrors % 3 == 2;
        if (pause) {
            atomic_store(&h.quiet, true);
            while (!atomic_load(&h.idle) && atomic_load(&h.done) < HIST_OPS &&
                   !atomic_load(&h.failed))
                wk_test_sleep_ms(1);
        }
        wk_settings_map *m = NULL;
        int rc = wk_settings_snapshot(wk_db_processor(reader), &e, wk_name_str("n"), &m);
        if (rc == WK_ETIMEDOUT && !pause) {
            busy++; /* changed during every attempt: allowed, documented */
        } else {
            cr_assert_eq(rc, WK_OK, "%s: %s", wk_err_name(rc), wk_db_errmsg(reader));
            cr_assert(history_matches(&h, m, why, sizeof(why)), "snapshot: %s", why);
            snapshots++;
            quiet += pause;
        }
        atomic_store(&h.quiet, false);
        wk_settings_map_free(m);
        m = NULL;
        cr_assert_eq(wk_settings_follower_snapshot(f, &m), WK_OK);
        cr_assert(history_matches(&h, m, why, sizeof(why)), "mirror: %s", why);
        wk_settings_map_free(m);
        mirrors++;
        if (mirrors % 5 == 0) { /* make it reload while the writes go on */
            freeReplyObject(wk_test_cmd(raw, "CLIENT KILL TYPE pubsub"));
            kills++;
        }
        atomic_fetch_add(&h.rounds, 1);
    }
    pthread_join(writer, NULL);
    cr_assert_not(atomic_load(&h.failed), "the writer failed");
    wk_settings_map *m = master(db, &e, "n");
    assert_mirror_equals(f, m, 0);
    cr_assert(history_matches(&h, m, why, sizeof(why)), "final: %s", why);
    wk_settings_map_free(m);
    wk_settings_stats st;
    wk_settings_follower_stats(f, &st, NULL, 0);
    fprintf(stderr, "%d snapshots (%d in pauses), %d busy, %d mirror states checked, %d kills, "
                "%llu loads, %llu changes caught up\n",
                snapshots, quiet, busy, mirrors, kills, (unsigned long long)st.snapshots,
                (unsigned long long)st.caught_up);
    cr_assert_gt(quiet, 0, "snapshots succeeded mid-history");
    cr_assert_gt(st.snapshots, 1, "the follower reloaded during the writes");
    cr_assert_gt(st.caught_up, 0, "some load was repaired with the changes made during it");
    cr_assert_gt(wk_test_cmd_calls(raw, "hscan") - hscans, 20, "read in chunks");
    wk_settings_follower_stop(f);
    redisFree(raw);
    wk_db_close(reader);
    wk_db_close(db);
}

/* ---- follower lifecycle: start / halt / free (stop: the deprecated free) */

Test(settings, follower_halt_then_free_keeps_the_mirror_readable)
{
    wk_db *db = wk_test_open(NULL);
    wk_entity e = WK_SETTINGS_ENTITY(wk_test_ns("halt"));
    int64_t v;
    cr_assert_eq(wk_settings_put(wk_db_processor(db), &e, wk_name_str("n"), "k", 1, "v1", 2, &v),
                 WK_OK);
    wk_settings_follower *f = follow(wk_test_url(), NULL, &e, "n", NULL);
    cr_assert_eq(wk_settings_follower_version(f), 1);
    wk_settings_follower_halt(f);

    /* A change after the halt is not followed any more. */
    cr_assert_eq(wk_settings_put(wk_db_processor(db), &e, wk_name_str("n"), "k", 1, "v2", 2, &v),
                 WK_OK);
    bool reached = true;
    cr_assert_eq(wk_settings_follower_wait(f, 2, -1, &reached), WK_OK,
                 "a halted follower's wait returns, even without a limit");
    cr_assert_not(reached);
    char buf[8];
    size_t len = 0;
    bool found = false;
    cr_assert_eq(wk_settings_follower_get(f, "k", 1, buf, sizeof(buf), &len, &found), WK_OK);
    cr_assert(found && len == 2 && memcmp(buf, "v1", 2) == 0, "the mirror as it was");
    wk_settings_map *m = NULL;
    cr_assert_eq(wk_settings_follower_snapshot(f, &m), WK_OK);
    wk_settings_map_free(m);
    wk_settings_stats st;
    cr_assert_eq(wk_settings_follower_stats(f, &st, NULL, 0), WK_OK);
    cr_assert_not(st.synced, "halted: no longer in sync");
    cr_assert_eq(st.version, 1);
    wk_settings_follower_halt(f); /* a second halt does nothing */
    wk_settings_follower_free(f);
    wk_db_close(db);
}

Test(settings, follower_free_of_a_running_one_and_null)
{
    wk_entity e = WK_SETTINGS_ENTITY(wk_test_ns("free"));
    wk_settings_follower *f = follow(wk_test_url(), NULL, &e, "n", NULL);
    wk_settings_follower_free(f); /* halts first: ASan/TSan check the join and the frees */
    f = follow(wk_test_url(), NULL, &e, "n", NULL);
    wk_settings_follower_stop(f); /* the deprecated alias: halt + free */
    wk_settings_follower_halt(NULL);
    wk_settings_follower_free(NULL);
    wk_settings_follower_stop(NULL);
}
