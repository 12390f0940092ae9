/*
 * tests/collection/test_near_cache.c — the near cache against a real
 * redis-server: hits that send nothing (the server's command counters),
 * invalidation by another connection's put and remove in both tracking
 * modes, the LRU bounds by count and by bytes, the TTL cap, revalidation
 * by hash without body transfer after its connections are killed (call
 * counts and the server's output bytes), capability refusals that send
 * nothing, and the staleness bound: another process writes versions
 * continuously while the near cache's connections are killed, and no
 * served version is older than the bound allows (blocking gets, and gets
 * through an event loop). The loop gets (wk_near_cache_get_async): a hit
 * completes at the loop's next turn with no I/O, never inside the call;
 * a miss held in flight by a frozen proxy does not keep the loop from
 * completing another query; another handle's put is seen; a HashedCache
 * entry revalidates by hash; capability refusals at the call; closing
 * the loop handle or the near cache with gets outstanding.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "redis_fixture.h"

TestSuite(near_cache, .timeout = 90);

/* ------------------------------------------------------------------------
 * Helpers
 * ---------------------------------------------------------------------- */

static wk_db *open_db(const char *url, const wk_cap *cap, const char *name)
{
    wk_db_options o = WK_DB_OPTIONS_INIT;
    o.url = url;
    o.capability = cap ? cap : wk_cap_read_write();
    o.client_name = name;
    char err[256];
    wk_db *db = NULL;
    cr_assert_eq(wk_db_open(&db, &o, err, sizeof(err)), WK_OK, "%s", err);
    return db;
}

/* Options generous enough that no test but the staleness one depends on
 * the machine's speed: entries stay verified between heartbeats. */
static wk_near_cache_options relaxed(const wk_entity *const *entities, size_t n)
{
    wk_near_cache_options o = WK_NEAR_CACHE_OPTIONS_INIT;
    o.entities = entities;
    o.nentities = n;
    o.staleness_ms = 20000;
    o.heartbeat_ms = 100;
    return o;
}

static wk_near_cache *open_nc(wk_db *db, const wk_near_cache_options *o)
{
    char err[256];
    wk_near_cache *nc = NULL;
    cr_assert_eq(wk_near_cache_open(&nc, db, o, err, sizeof(err)), WK_OK, "%s", err);
    return nc;
}

static wk_near_stats stats_of(wk_near_cache *nc)
{
    wk_near_stats s;
    cr_assert_eq(wk_near_cache_stats(nc, &s), WK_OK);
    return s;
}

static wk_near_state state_of(wk_near_cache *nc, const wk_entity *e, const char *name)
{
    wk_near_state st;
    cr_assert_eq(wk_near_cache_peek(nc, e, wk_name_str(name), &st), WK_OK);
    return st;
}

/* Get `name` and check its body (NULL: a miss). */
static void expect_body(wk_near_cache *nc, const wk_entity *e, const char *name, const char *want)
{
    wk_body b = WK_BODY_INIT;
    int rc = wk_near_cache_get(nc, e, wk_name_str(name), &b);
    cr_assert_eq(rc, WK_OK, "%s: %s", wk_err_name(rc), wk_near_cache_errmsg());
    if (!want) {
        cr_assert(!b.found, "%s: expected a miss", name);
    } else {
        cr_assert(b.found, "%s: expected \"%s\", got a miss", name, want);
        cr_assert_eq(b.len, strlen(want));
        cr_assert(memcmp(b.data, want, b.len) == 0, "%s: got \"%.*s\", want \"%s\"", name,
                  (int)b.len, (char *)b.data, want);
    }
    wk_body_free(&b);
}

/* Wait (bounded by the suite's timeout) until `name` is no longer verified. */
static void await_not_verified(wk_near_cache *nc, const wk_entity *e, const char *name)
{
    while (state_of(nc, e, name) == WK_NEAR_VERIFIED)
        wk_test_sleep_ms(1);
}

/* The read commands of both kinds, scripts and what they run. */
static long long read_calls(redisContext *raw)
{
    static const char *const cmds[] = {"get", "evalsha", "eval", "hget", "hmget", "hexists"};
    long long n = 0;
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
        n += wk_test_cmd_calls(raw, cmds[i]);
    return n;
}

/* Every byte the server wrote to clients (INFO stats). */
static long long net_output(redisContext *raw)
{
    long long v = wk_test_info(raw, "stats", "total_net_output_bytes");
    cr_assert_geq(v, 0);
    return v;
}

/* ------------------------------------------------------------------------
 * Hits
 * ---------------------------------------------------------------------- */

/* On the private server: Cache:hit and HashedCache:hit, each holding "a"
 * ("plain", "hashed"), and a near cache of both. */
typedef struct hits {
    wk_entity c, h;
    wk_db *db;
    wk_near_cache *nc;
} hits;

static void hits_open(hits *t)
{
    t->db = open_db(wk_test_private_url(), NULL, "near-hit");
    wk_processor *p = wk_db_processor(t->db);
    t->c = (wk_entity)WK_CACHE_ENTITY("hit", 60000);
    t->h = (wk_entity)WK_HASHED_CACHE_ENTITY("hit", 60000);
    cr_assert_eq(wk_cache_put(p, &t->c, wk_name_str("a"), "plain", 5), WK_OK);
    cr_assert_eq(wk_hashed_cache_put(p, &t->h, wk_name_str("a"), "hashed", 6, NULL), WK_OK);
    const wk_entity *ents[] = {&t->c, &t->h};
    wk_near_cache_options o = relaxed(ents, 2);
    t->nc = open_nc(t->db, &o);
}

Test(near_cache, a_hit_sends_no_command, .init = wk_test_private_start,
     .fini = wk_test_private_stop)
{
    const char *url = wk_test_private_url();
    hits t;
    hits_open(&t);
    wk_near_cache *nc = t.nc;
    const wk_entity c = t.c, h = t.h;

    expect_body(nc, &c, "a", "plain");
    expect_body(nc, &h, "a", "hashed");
    expect_body(nc, &c, "missing", NULL); /* misses are kept too */
    cr_assert_eq(stats_of(nc).reads, 3);
    cr_assert_eq(state_of(nc, &h, "a"), WK_NEAR_VERIFIED);

    redisContext *raw = wk_test_raw(url);
    long long before = read_calls(raw);
    char buf[16];
    for (int i = 0; i < 1000; i++) {
        wk_buffer b = {buf, sizeof(buf), 0, false};
        const wk_entity *e = i % 3 == 0 ? &c : &h;
        cr_assert_eq(wk_near_cache_get_into(nc, i % 3 == 2 ? &c : e,
                                            wk_name_str(i % 3 == 2 ? "missing" : "a"), &b),
                     WK_OK);
        cr_assert_eq(b.found, i % 3 != 2);
    }
    cr_assert_eq(read_calls(raw), before, "hits sent %lld read commands", read_calls(raw) - before);
    wk_near_stats s = stats_of(nc);
    cr_assert_eq(s.hits, 1000);
    cr_assert_eq(s.reads, 3);
    cr_assert_eq(s.entries, 3);

    /* The hashed body comes with its hash. */
    wk_body hb = WK_BODY_INIT;
    uint8_t want[WK_HASH_LEN];
    wk_blake3("hashed", 6, want);
    cr_assert_eq(wk_near_cache_get(nc, &h, wk_name_str("a"), &hb), WK_OK);
    cr_assert(memcmp(hb.hash, want, WK_HASH_LEN) == 0);
    wk_body_free(&hb);

    /* A buffer too small: the length needed, the entry kept. */
    wk_buffer tiny = {buf, 2, 0, false};
    cr_assert_eq(wk_near_cache_get_into(nc, &c, wk_name_str("a"), &tiny), WK_EINVAL);
    cr_assert(tiny.found);
    cr_assert_eq(tiny.len, 5);
    cr_assert_eq(state_of(nc, &c, "a"), WK_NEAR_VERIFIED);

    /* An entity it does not serve. */
    wk_entity other = WK_CACHE_ENTITY("other", 60000);
    cr_assert_eq(wk_near_cache_get(nc, &other, wk_name_str("a"), &hb), WK_EINVAL);
    cr_assert(strstr(wk_near_cache_errmsg(), "Cache:other"), "%s", wk_near_cache_errmsg());

    redisFree(raw);
    wk_near_cache_close(nc);
    wk_db_close(t.db);
}

/* ------------------------------------------------------------------------
 * Invalidation
 * ---------------------------------------------------------------------- */

static void invalidation_case(wk_near_mode mode)
{
    wk_db *writer = wk_test_open(NULL);
    wk_processor *w = wk_db_processor(writer);
    wk_db *db = wk_test_open(NULL);
    const char *ns = wk_test_ns("inval");
    wk_entity c = WK_CACHE_ENTITY(ns, 60000), h = WK_HASHED_CACHE_ENTITY(ns, 60000);
    cr_assert_eq(wk_cache_put(w, &c, wk_name_str("x"), "one", 3), WK_OK);
    cr_assert_eq(wk_hashed_cache_put(w, &h, wk_name_str("x"), "one", 3, NULL), WK_OK);
    const wk_entity *ents[] = {&c, &h, &c}; /* listed twice: served once (BCAST too) */
    wk_near_cache_options o = relaxed(ents, 3);
    o.mode = mode;
    wk_near_cache *nc = open_nc(db, &o);

    expect_body(nc, &c, "x", "one");
    expect_body(nc, &h, "x", "one");
    cr_assert_eq(state_of(nc, &c, "x"), WK_NEAR_VERIFIED);
    cr_assert_eq(state_of(nc, &h, "x"), WK_NEAR_VERIFIED);

    /* Another connection's put. */
    cr_assert_eq(wk_cache_put(w, &c, wk_name_str("x"), "two", 3), WK_OK);
    cr_assert_eq(wk_hashed_cache_put(w, &h, wk_name_str("x"), "two", 3, NULL), WK_OK);
    await_not_verified(nc, &c, "x");
    await_not_verified(nc, &h, "x");
    /* A Cache entry has nothing to revalidate with; a HashedCache one keeps its hash. */
    cr_assert_eq(state_of(nc, &c, "x"), WK_NEAR_ABSENT);
    cr_assert_eq(state_of(nc, &h, "x"), WK_NEAR_UNVERIFIED);
    expect_body(nc, &c, "x", "two");
    expect_body(nc, &h, "x", "two");

    /* Another connection's remove. */
    cr_assert_eq(wk_cache_remove(w, &c, wk_name_str("x"), NULL), WK_OK);
    cr_assert_eq(wk_hashed_cache_remove(w, &h, wk_name_str("x"), NULL), WK_OK);
    await_not_verified(nc, &c, "x");
    await_not_verified(nc, &h, "x");
    expect_body(nc, &c, "x", NULL);
    expect_body(nc, &h, "x", NULL);
    /* The miss is kept, and a put after it is announced too. */
    cr_assert_eq(state_of(nc, &c, "x"), WK_NEAR_VERIFIED);
    cr_assert_eq(wk_cache_put(w, &c, wk_name_str("x"), "three", 5), WK_OK);
    await_not_verified(nc, &c, "x");
    expect_body(nc, &c, "x", "three");

    if (mode == WK_NEAR_BCAST) {
        /* BCAST announces keys under the prefix that were never read. */
        uint64_t seen = stats_of(nc).invalidations;
        cr_assert_eq(wk_cache_put(w, &c, wk_name_str("never-read"), "z", 1), WK_OK);
        while (stats_of(nc).invalidations == seen)
            wk_test_sleep_ms(1);
    }
    wk_near_cache_close(nc);
    wk_db_close(db);
    wk_db_close(writer);
}

Test(near_cache, another_connections_put_and_remove_invalidate)
{
    invalidation_case(WK_NEAR_DEFAULT);
}

Test(near_cache, bcast_mode_invalidates_by_prefix)
{
    invalidation_case(WK_NEAR_BCAST);
}

/* FLUSHDB is announced as "everything changed" (a nil payload): every
 * entry goes, bodies and kept misses alike. A private server: it is
 * flushed. */
Test(near_cache, a_flush_drops_every_entry, .init = wk_test_private_start,
     .fini = wk_test_private_stop)
{
    const char *url = wk_test_private_url();
    wk_db *db = open_db(url, NULL, "near-flush");
    wk_entity c = WK_CACHE_ENTITY("flush", 60000), h = WK_HASHED_CACHE_ENTITY("flush", 60000);
    cr_assert_eq(wk_cache_put(wk_db_processor(db), &c, wk_name_str("a"), "1", 1), WK_OK);
    cr_assert_eq(wk_hashed_cache_put(wk_db_processor(db), &h, wk_name_str("a"), "2", 1, NULL),
                 WK_OK);
    const wk_entity *ents[] = {&c, &h};
    wk_near_cache_options o = relaxed(ents, 2);
    wk_near_cache *nc = open_nc(db, &o);
    expect_body(nc, &c, "a", "1");
    expect_body(nc, &h, "a", "2");
    expect_body(nc, &c, "none", NULL);
    cr_assert_eq(stats_of(nc).entries, 3);
    redisContext *raw = wk_test_raw(url);
    freeReplyObject(wk_test_cmd(raw, "FLUSHDB"));
    while (stats_of(nc).flushes == 0)
        wk_test_sleep_ms(1);
    cr_assert_eq(stats_of(nc).entries, 0);
    cr_assert_eq(state_of(nc, &h, "a"), WK_NEAR_ABSENT);
    expect_body(nc, &h, "a", NULL);
    redisFree(raw);
    wk_near_cache_close(nc);
    wk_db_close(db);
}

/* ------------------------------------------------------------------------
 * Bounds
 * ---------------------------------------------------------------------- */

static void expect_body_on(wk_near_cache *nc, wk_async *a, const wk_entity *e, const char *name,
                           const char *want);

/* The LRU bound, with gets blocking or through the loop `a`. */
static void lru_count_case(wk_async *a)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity c = WK_CACHE_ENTITY(wk_test_ns("lru"), 60000);
    const char *names[] = {"n0", "n1", "n2", "n3", "n4"};
    for (int i = 0; i < 5; i++)
        cr_assert_eq(wk_cache_put(p, &c, wk_name_str(names[i]), names[i], 2), WK_OK);
    const wk_entity *ents[] = {&c};
    wk_near_cache_options o = relaxed(ents, 1);
    o.max_entries = 3;
    wk_near_cache *nc = open_nc(db, &o);

    expect_body_on(nc, a, &c, "n0", "n0");
    expect_body_on(nc, a, &c, "n1", "n1");
    expect_body_on(nc, a, &c, "n2", "n2");
    expect_body_on(nc, a, &c, "n0", "n0"); /* a hit: n0 is now the newest */
    expect_body_on(nc, a, &c, "n3", "n3"); /* evicts n1, the least recently used */
    cr_assert_eq(state_of(nc, &c, "n1"), WK_NEAR_ABSENT);
    cr_assert_eq(state_of(nc, &c, "n0"), WK_NEAR_VERIFIED);
    expect_body_on(nc, a, &c, "n4", "n4"); /* evicts n2 */
    cr_assert_eq(state_of(nc, &c, "n2"), WK_NEAR_ABSENT);
    cr_assert_eq(state_of(nc, &c, "n0"), WK_NEAR_VERIFIED);
    cr_assert_eq(state_of(nc, &c, "n3"), WK_NEAR_VERIFIED);
    wk_near_stats s = stats_of(nc);
    cr_assert_eq(s.entries, 3);
    cr_assert_eq(s.evictions, 2);
    cr_assert_eq(s.hits, 1);
    wk_near_cache_close(nc);
    wk_db_close(db);
}

Test(near_cache, lru_bound_by_count)
{
    lru_count_case(NULL);
}

Test(near_cache, loop_gets_keep_the_lru_bound)
{
    wk_async *a = wk_test_open_async(wk_test_url(), NULL, 5000);
    lru_count_case(a);
    wk_async_close(a);
}

Test(near_cache, lru_bound_by_bytes)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    wk_entity c = WK_CACHE_ENTITY(wk_test_ns("bytes"), 60000);
    char body[100], big[1000];
    memset(body, 'b', sizeof(body));
    memset(big, 'B', sizeof(big));
    for (int i = 0; i < 3; i++) {
        char name[4] = {'k', (char)('0' + i), 0, 0};
        cr_assert_eq(wk_cache_put(p, &c, wk_name_str(name), body, sizeof(body)), WK_OK);
    }
    cr_assert_eq(wk_cache_put(p, &c, wk_name_str("kbig"), big, sizeof(big)), WK_OK);
    char key[WK_KEY_MAX];
    size_t klen;
    cr_assert_eq(
        wk_key_build(key, sizeof(key), &klen, &c, &(wk_name){WK_NAME_BYTES, "k0", 2, 0, 0}, NULL),
        WK_OK);
    const wk_entity *ents[] = {&c};
    wk_near_cache_options o = relaxed(ents, 1);
    o.max_bytes = 2 * (klen + sizeof(body)) + 50; /* two entries fit, not three */
    wk_near_cache *nc = open_nc(db, &o);

    wk_body b = WK_BODY_INIT;
    cr_assert_eq(wk_near_cache_get(nc, &c, wk_name_str("k0"), &b), WK_OK);
    cr_assert_eq(wk_near_cache_get(nc, &c, wk_name_str("k1"), &b), WK_OK);
    cr_assert_eq(stats_of(nc).bytes, 2 * (klen + sizeof(body)));
    cr_assert_eq(wk_near_cache_get(nc, &c, wk_name_str("k2"), &b), WK_OK);
    cr_assert_eq(state_of(nc, &c, "k0"), WK_NEAR_ABSENT);
    cr_assert_eq(state_of(nc, &c, "k2"), WK_NEAR_VERIFIED);
    cr_assert_leq(stats_of(nc).bytes, o.max_bytes);

    /* A body larger than the bound is returned, not kept, and pushes
     * nothing else out but what it must. */
    cr_assert_eq(wk_near_cache_get(nc, &c, wk_name_str("kbig"), &b), WK_OK);
    cr_assert(b.found);
    cr_assert_eq(b.len, sizeof(big));
    cr_assert_eq(state_of(nc, &c, "kbig"), WK_NEAR_ABSENT);
    wk_near_stats s = stats_of(nc);
    cr_assert_leq(s.bytes, o.max_bytes);
    wk_body_free(&b);
    wk_near_cache_close(nc);
    wk_db_close(db);
}

/*
 * The TTL: an entry stays verified for min(options.ttl_ms, the entity's
 * ttl_ms) after its read. The item itself lives a minute in Redis (put
 * through an entity of the same namespace with a longer TTL), so no
 * expiry invalidates it: only the cap can make it unverified. Then the
 * get revalidates it by hash.
 */
static void ttl_case(int64_t entity_ttl, int64_t option_ttl)
{
    wk_db *db = wk_test_open(NULL);
    const char *ns = wk_test_ns("ttl");
    wk_entity long_lived = WK_HASHED_CACHE_ENTITY(ns, 60000);
    wk_entity h = WK_HASHED_CACHE_ENTITY(ns, entity_ttl);
    cr_assert_eq(
        wk_hashed_cache_put(wk_db_processor(db), &long_lived, wk_name_str("t"), "body", 4, NULL),
        WK_OK);
    const wk_entity *ents[] = {&h};
    wk_near_cache_options o = relaxed(ents, 1);
    o.ttl_ms = option_ttl;
    wk_near_cache *nc = open_nc(db, &o);
    expect_body(nc, &h, "t", "body");
    await_not_verified(nc, &h, "t");
    cr_assert_eq(state_of(nc, &h, "t"), WK_NEAR_UNVERIFIED, "kept for revalidation");
    wk_near_stats s = stats_of(nc);
    cr_assert_eq(s.invalidations, 0, "nothing but the TTL made it unverified");
    cr_assert_eq(s.sessions, 1);
    expect_body(nc, &h, "t", "body");
    cr_assert_eq(stats_of(nc).revalidations, 1);
    cr_assert_eq(state_of(nc, &h, "t"), WK_NEAR_VERIFIED);
    wk_near_cache_close(nc);
    wk_db_close(db);
}

Test(near_cache, entry_ttl_is_capped_by_the_entitys)
{
    ttl_case(300, 0);      /* the entity's TTL */
    ttl_case(300, 600000); /* an option longer than the entity's is capped */
    ttl_case(600000, 300); /* a shorter option wins */
}

/* ------------------------------------------------------------------------
 * Disconnects: revalidation, not a flush
 * ---------------------------------------------------------------------- */

Test(near_cache, killed_connections_make_entries_unverified_and_revalidated_by_hash,
     .init = wk_test_private_start, .fini = wk_test_private_stop)
{
    const char *url = wk_test_private_url();
    wk_db *db = open_db(url, NULL, "near-kill");
    wk_processor *p = wk_db_processor(db);
    wk_entity c = WK_CACHE_ENTITY("kill", 60000), h = WK_HASHED_CACHE_ENTITY("kill", 60000);
    enum { BIG = 64 * 1024 };
    char *body = malloc(BIG);
    memset(body, 'x', BIG);
    cr_assert_eq(wk_cache_put(p, &c, wk_name_str("doc"), body, BIG), WK_OK);
    cr_assert_eq(wk_hashed_cache_put(p, &h, wk_name_str("doc"), body, BIG, NULL), WK_OK);
    const wk_entity *ents[] = {&c, &h};
    wk_near_cache_options o = relaxed(ents, 2);
    wk_near_cache *nc = open_nc(db, &o);
    wk_db_close(db); /* so that the near cache's are the only connections of that name */
    wk_body b = WK_BODY_INIT;
    cr_assert_eq(wk_near_cache_get(nc, &h, wk_name_str("doc"), &b), WK_OK);
    cr_assert_eq(wk_near_cache_get(nc, &c, wk_name_str("doc"), &b), WK_OK);
    cr_assert_eq(stats_of(nc).reads, 2);
    redisContext *raw = wk_test_raw(url);

    const char *types[] = {"pubsub", "normal"}; /* the subscriber, then the data connection */
    for (int round = 0; round < 2; round++) {
        uint64_t sessions = stats_of(nc).sessions;
        cr_assert_eq(state_of(nc, &h, "doc"), WK_NEAR_VERIFIED);
        cr_assert_eq(wk_test_kill_clients_of_type(raw, types[round], "near-kill"), 1, "%s",
                     types[round]);
        /* The thread notices, reconnects and begins a new session. */
        while (stats_of(nc).sessions == sessions)
            wk_test_sleep_ms(1);
        cr_assert_eq(state_of(nc, &h, "doc"), WK_NEAR_UNVERIFIED, "kept, not flushed");
        cr_assert_eq(state_of(nc, &c, "doc"), WK_NEAR_UNVERIFIED, "kept, not flushed");

        /* HashedCache: one get-if-changed, the unchanged path (HGET of the
         * hash and HEXISTS, no HGET of the body), and far fewer bytes
         * than the body from the server. */
        long long hget = wk_test_cmd_calls(raw, "hget"),
                  hexists = wk_test_cmd_calls(raw, "hexists");
        long long out = net_output(raw);
        uint64_t revalidations = stats_of(nc).revalidations;
        cr_assert_eq(wk_near_cache_get(nc, &h, wk_name_str("doc"), &b), WK_OK);
        cr_assert(b.found && b.len == BIG && memcmp(b.data, body, BIG) == 0);
        long long sent = net_output(raw) - out;
        cr_assert_eq(stats_of(nc).revalidations, revalidations + 1);
        cr_assert_eq(wk_test_cmd_calls(raw, "hget"), hget + 1);
        cr_assert_eq(wk_test_cmd_calls(raw, "hexists"), hexists + 1);
        cr_assert_lt(sent, BIG / 4, "the server sent %lld bytes", sent);
        cr_assert_eq(state_of(nc, &h, "doc"), WK_NEAR_VERIFIED);

        /* Cache has no hash: the body is read again. */
        long long get = wk_test_cmd_calls(raw, "get");
        uint64_t reads = stats_of(nc).reads;
        cr_assert_eq(wk_near_cache_get(nc, &c, wk_name_str("doc"), &b), WK_OK);
        cr_assert(b.found && b.len == BIG);
        cr_assert_eq(wk_test_cmd_calls(raw, "get"), get + 1);
        cr_assert_eq(stats_of(nc).reads, reads + 1);
    }
    cr_assert_eq(stats_of(nc).subscriber_connects, 2);
    wk_body_free(&b);
    free(body);
    redisFree(raw);
    wk_near_cache_close(nc);
}

/* ------------------------------------------------------------------------
 * Capability
 * ---------------------------------------------------------------------- */

/* A near cache of Cache:granted, Cache:secret and HashedCache:secret on
 * the private server, opened from a handle whose capability "replica" may
 * READ Cache:granted only; Cache:secret "s" holds a body. */
typedef struct capped {
    wk_entity ok, no, hno;
    wk_cap *cap;
    wk_db *writer, *db;
    wk_near_cache *nc;
} capped;

static void capped_open(capped *c)
{
    const char *url = wk_test_private_url();
    c->ok = (wk_entity)WK_CACHE_ENTITY("granted", 60000);
    c->no = (wk_entity)WK_CACHE_ENTITY("secret", 60000);
    c->hno = (wk_entity)WK_HASHED_CACHE_ENTITY("secret", 60000);
    wk_cap_entry rows[] = {{WK_KIND_CACHE, "granted", WK_GRANT_READ}};
    cr_assert_eq(wk_cap_new(&c->cap, "replica", WK_GRANT_NONE, rows, 1), WK_OK);
    c->writer = open_db(url, NULL, "near-cap-writer");
    cr_assert_eq(wk_cache_put(wk_db_processor(c->writer), &c->no, wk_name_str("s"), "hidden", 6),
                 WK_OK);
    c->db = open_db(url, c->cap, "near-cap");
    const wk_entity *ents[] = {&c->ok, &c->no, &c->hno};
    wk_near_cache_options o = relaxed(ents, 3);
    c->nc = open_nc(c->db, &o);
}

static void capped_close(capped *c)
{
    wk_near_cache_close(c->nc);
    wk_db_close(c->db);
    wk_db_close(c->writer);
    wk_cap_free(c->cap);
}

Test(near_cache, reads_the_capability_does_not_grant_are_refused_and_send_nothing,
     .init = wk_test_private_start, .fini = wk_test_private_stop)
{
    const char *url = wk_test_private_url();
    capped cp;
    capped_open(&cp);
    wk_near_cache *nc = cp.nc;
    const wk_entity ok = cp.ok, no = cp.no, hno = cp.hno;

    redisContext *raw = wk_test_raw(url);
    long long before = read_calls(raw);
    wk_body b = WK_BODY_INIT;
    for (int i = 0; i < 3; i++) { /* refused every time, never cached */
        cr_assert_eq(wk_near_cache_get(nc, &no, wk_name_str("s"), &b), WK_EDENIED);
        cr_assert(
            strstr(wk_near_cache_errmsg(), "capability \"replica\" may not READ Cache:secret"),
            "%s", wk_near_cache_errmsg());
        cr_assert(!b.found);
        cr_assert_eq(wk_near_cache_get(nc, &hno, wk_name_str("s"), &b), WK_EDENIED);
        cr_assert(strstr(wk_near_cache_errmsg(), "may not READ HashedCache:secret"), "%s",
                  wk_near_cache_errmsg());
    }
    cr_assert_eq(state_of(nc, &no, "s"), WK_NEAR_ABSENT);
    cr_assert_eq(read_calls(raw), before, "a refused read reached Redis");
    cr_assert_eq(wk_near_cache_get(nc, &ok, wk_name_str("s"), &b), WK_OK); /* granted: a miss */
    cr_assert(!b.found);
    cr_assert_eq(read_calls(raw), before + 1);

    /* BCAST with no readable entity would hear every key: refused. */
    const wk_entity *only_secret[] = {&no};
    wk_near_cache_options o = relaxed(only_secret, 1);
    o.mode = WK_NEAR_BCAST;
    char err[256];
    cr_assert_eq(wk_near_cache_open(&nc, cp.db, &o, err, sizeof(err)), WK_EDENIED);
    cr_assert_null(nc);
    cr_assert(strstr(err, "replica"), "%s", err);

    redisFree(raw);
    capped_close(&cp);
}

Test(near_cache, open_refuses_bad_options)
{
    wk_db *db = wk_test_open(NULL);
    wk_entity lock = WK_LOCK_ENTITY("x", 1000), c = WK_CACHE_ENTITY("x", 1000);
    const wk_entity *bad[] = {&lock};
    const wk_entity *good[] = {&c};
    wk_near_cache *nc = (wk_near_cache *)1;
    char err[256];
    wk_near_cache_options o = WK_NEAR_CACHE_OPTIONS_INIT;
    cr_assert_eq(wk_near_cache_open(&nc, db, &o, err, sizeof(err)), WK_EINVAL);
    cr_assert_null(nc);
    cr_assert(strstr(err, "entities"), "%s", err);
    o.entities = bad;
    o.nentities = 1;
    cr_assert_eq(wk_near_cache_open(&nc, db, &o, err, sizeof(err)), WK_EINVAL);
    cr_assert(strstr(err, "not a Cache or HashedCache"), "%s", err);
    o.entities = good;
    o.heartbeat_ms = o.staleness_ms;
    cr_assert_eq(wk_near_cache_open(&nc, db, &o, err, sizeof(err)), WK_EINVAL);
    cr_assert(strstr(err, "heartbeat_ms"), "%s", err);
    cr_assert_eq(wk_near_cache_open(&nc, NULL, &o, err, sizeof(err)), WK_EINVAL);
    wk_near_cache_close(NULL);
    wk_db_close(db);
}

/* ------------------------------------------------------------------------
 * The staleness bound
 * ---------------------------------------------------------------------- */

#define BOUND_MS 500
#define LOG_MAX (1 << 20)

/* What the writer did: at[v] is the wk_monotonic_ms() at which the put of
 * version v (1, 2, …) returned WK_OK; `count` the last version logged. */
typedef struct write_log {
    atomic_llong count;
    atomic_int stop;
    atomic_llong at[LOG_MAX];
} write_log;

/* The newest version whose put completed before `t` (0: none). */
static long long newest_before(const write_log *log, int64_t t)
{
    long long lo = 0, hi = atomic_load(&log->count); /* at[1..hi] increase */
    while (lo < hi) {
        long long mid = (lo + hi + 1) / 2;
        if (atomic_load(&log->at[mid]) < t)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

static void writer_child(write_log *log, const wk_entity *e)
{
    wk_db *db = wk_test_open_child();
    if (!db)
        _exit(2);
    wk_processor *p = wk_db_processor(db);
    for (long long v = 1; v < LOG_MAX && !atomic_load(&log->stop); v++) {
        char body[24];
        int n = snprintf(body, sizeof(body), "%lld", v);
        int rc = strcmp(e->kind, WK_KIND_CACHE) == 0
                     ? wk_cache_put(p, e, wk_name_str("v"), body, (size_t)n)
                     : wk_hashed_cache_put(p, e, wk_name_str("v"), body, (size_t)n, NULL);
        if (rc != WK_OK)
            _exit(3); /* its own connection is never killed */
        atomic_store(&log->at[v], wk_monotonic_ms());
        atomic_store(&log->count, v);
        usleep(200);
    }
    wk_db_close(db);
    _exit(0);
}

typedef struct killer {
    atomic_bool stop;
    int kills[2];
} killer;

/*
 * Kill the near cache's subscriber and data connection in turn, some
 * kills closer together than the bound and some further apart (so that a
 * near cache that missed the loss of one connection would go on serving
 * past the bound before the next kill restarts it).
 */
static void *killer_main(void *arg)
{
    static const int pause_ms[] = {150, 3 * BOUND_MS / 2, 300, 2 * BOUND_MS, 50, BOUND_MS + 200};
    killer *k = arg;
    redisContext *raw = wk_test_raw(wk_test_url());
    for (int i = 0; !atomic_load(&k->stop); i++) {
        k->kills[i % 2] +=
            wk_test_kill_clients_of_type(raw, i % 2 ? "normal" : "pubsub", "near-stale");
        for (int slept = 0; slept < pause_ms[i % 6] && !atomic_load(&k->stop); slept += 10)
            wk_test_sleep_ms(10);
    }
    redisFree(raw);
    return NULL;
}

/* What a reader loop saw. */
typedef struct reading {
    long long checks, failures, worst_lag;
} reading;

/*
 * Read `name` through the near cache until `end`, asserting at each body
 * served that its version is at least the newest whose put completed more
 * than BOUND_MS before the get began. Connection errors (a read that went
 * to Redis while its connection was being killed or stalled) are counted.
 */
static int get_version(wk_near_cache *nc, wk_async *a, const wk_entity *e, char *buf, size_t cap,
                       wk_buffer *b);

static reading read_versions_on(wk_near_cache *nc, wk_async *a, const wk_entity *e,
                                const write_log *log, int64_t end)
{
    reading r = {0, 0, 0};
    char buf[32];
    while (wk_monotonic_ms() < end) {
        int64_t t = wk_monotonic_ms();
        wk_buffer b = {buf, sizeof(buf) - 1, 0, false};
        int rc = get_version(nc, a, e, buf, sizeof(buf) - 1, &b);
        if (rc != WK_OK) {
            cr_assert(wk_is_connection_error(rc), "%s: %s", wk_err_name(rc),
                      wk_near_cache_errmsg());
            r.failures++;
            continue;
        }
        cr_assert(b.found);
        buf[b.len] = '\0';
        long long v = atoll(buf);
        long long must = newest_before(log, t - BOUND_MS);
        cr_assert_geq(v, must,
                      "served version %lld at %lld, but version %lld had completed more than "
                      "%d ms before",
                      v, (long long)t, must, BOUND_MS);
        long long lag = newest_before(log, t) - v;
        r.worst_lag = lag > r.worst_lag ? lag : r.worst_lag;
        r.checks++;
        usleep(100);
    }
    return r;
}

static reading read_versions(wk_near_cache *nc, const wk_entity *e, const write_log *log,
                             int64_t end)
{
    return read_versions_on(nc, NULL, e, log, end);
}

/* A shared write log and the writer process filling it. */
static write_log *start_writer(const wk_entity *e, pid_t *pid)
{
    write_log *log =
        mmap(NULL, sizeof(*log), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(log, MAP_FAILED);
    *pid = fork();
    cr_assert_neq(*pid, -1);
    if (*pid == 0)
        writer_child(log, e);
    while (atomic_load(&log->count) < 10)
        wk_test_sleep_ms(1);
    return log;
}

static long long stop_writer(write_log *log, pid_t pid)
{
    atomic_store(&log->stop, 1);
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "writer: %d", status);
    long long writes = atomic_load(&log->count);
    munmap(log, sizeof(*log));
    return writes;
}

static wk_near_cache_options bounded(const wk_entity *const *ents)
{
    wk_near_cache_options o = WK_NEAR_CACHE_OPTIONS_INIT;
    o.entities = ents;
    o.nentities = 1;
    o.staleness_ms = BOUND_MS;
    o.heartbeat_ms = 50;
    o.retry_max_ms = 100;
    return o;
}

/* Read through the loop handle `a` (NULL: blocking gets). */
static void staleness_case(const char *kind, wk_async *a)
{
    const char *ns = wk_test_ns("stale");
    wk_entity e = strcmp(kind, WK_KIND_CACHE) == 0 ? (wk_entity)WK_CACHE_ENTITY(ns, 60000)
                                                   : (wk_entity)WK_HASHED_CACHE_ENTITY(ns, 60000);
    pid_t pid;
    write_log *log = start_writer(&e, &pid);
    wk_db *db = wk_test_open_as(NULL, "near-stale", -1);
    cr_assert(db);
    const wk_entity *ents[] = {&e};
    wk_near_cache_options o = bounded(ents);
    wk_near_cache *nc = open_nc(db, &o);
    killer k = {.kills = {0, 0}};
    atomic_init(&k.stop, false);
    pthread_t kt;
    cr_assert_eq(pthread_create(&kt, NULL, killer_main, &k), 0);

    reading r = read_versions_on(nc, a, &e, log, wk_monotonic_ms() + 8000);
    atomic_store(&k.stop, true);
    pthread_join(kt, NULL);
    long long writes = stop_writer(log, pid);

    wk_near_stats s = stats_of(nc);
    printf("near_cache staleness (%s%s): %lld checks, %llu hits, %llu reads, %llu revalidations, "
           "%lld connection errors, %d+%d kills, %llu sessions, %lld writes, worst lag %lld "
           "versions\n",
           kind, a ? ", through the loop" : "", r.checks, (unsigned long long)s.hits,
           (unsigned long long)s.reads,
           (unsigned long long)s.revalidations, r.failures, k.kills[0], k.kills[1],
           (unsigned long long)s.sessions, writes, r.worst_lag);
    /* The test means something only if both kinds of kill happened and
     * bodies were served from memory between them. */
    cr_assert_geq(k.kills[0], 4);
    cr_assert_geq(k.kills[1], 4);
    cr_assert_gt(s.hits, 100);
    cr_assert_geq(s.sessions, 5);
    wk_near_cache_close(nc);
    wk_db_close(db);
}

Test(near_cache, never_serves_a_body_older_than_the_bound_while_connections_are_killed_hashed)
{
    staleness_case(WK_KIND_HASHED_CACHE, NULL);
}

Test(near_cache, never_serves_a_body_older_than_the_bound_while_connections_are_killed_cache)
{
    staleness_case(WK_KIND_CACHE, NULL);
}

/* The loop gets serve from memory by the same rule: the bound holds for
 * them as for blocking gets (a body copied at the call of a hit, or read
 * by the loop reader after it). */
Test(near_cache, never_serves_a_body_older_than_the_bound_through_the_loop)
{
    wk_async *a = wk_test_open_async(wk_test_url(), NULL, 3 * BOUND_MS);
    staleness_case(WK_KIND_HASHED_CACHE, a);
    wk_async_close(a);
}

/*
 * A silent death: both of the near cache's connections go through a proxy
 * that stops forwarding now and then (no FIN, nothing to read: only the
 * PINGs can tell), for longer than the bound but shorter than the command
 * timeout, while the writer, connected directly, goes on. The bound must
 * hold from the PINGs alone. (With proven() ignoring the age of the
 * proofs, this test fails: the entry is served until the PING times out.)
 */
Test(near_cache, never_serves_a_body_older_than_the_bound_when_connections_stall_silently)
{
    const char *ns = wk_test_ns("silent");
    wk_entity e = WK_HASHED_CACHE_ENTITY(ns, 60000);
    pid_t pid;
    write_log *log = start_writer(&e, &pid);
    wk_test_proxy *proxy;
    const char *url = wk_test_url();
    cr_assert_eq(wk_test_proxy_start(&proxy, atoi(strrchr(url, ':') + 1)), 0);
    wk_db_options dbo = WK_DB_OPTIONS_INIT;
    dbo.url = wk_test_proxy_url(proxy);
    dbo.capability = wk_cap_read_write();
    dbo.connect_timeout_ms = dbo.command_timeout_ms = 3 * BOUND_MS;
    char err[256];
    wk_db *db = NULL;
    cr_assert_eq(wk_db_open(&db, &dbo, err, sizeof(err)), WK_OK, "%s", err);
    const wk_entity *ents[] = {&e};
    wk_near_cache_options o = bounded(ents);
    wk_near_cache *nc = open_nc(db, &o);
    wk_db_close(db);

    reading total = {0, 0, 0};
    long long stalled_checks = 0;
    for (int round = 0; round < 4; round++) {
        reading r = read_versions(nc, &e, log, wk_monotonic_ms() + 800); /* flowing */
        /* Stall while the entry is verified: from here on no invalidation
         * can arrive, and only the age of the PINGs' proof ends its use. */
        char buf[32];
        wk_buffer b = {buf, sizeof(buf), 0, false};
        while (wk_near_cache_get_into(nc, &e, wk_name_str("v"), &b) != WK_OK ||
               state_of(nc, &e, "v") != WK_NEAR_VERIFIED) {
        }
        wk_test_proxy_freeze(proxy, true);
        reading f = read_versions(nc, &e, log, wk_monotonic_ms() + 5 * BOUND_MS / 2);
        wk_test_proxy_freeze(proxy, false);
        total.checks += r.checks + f.checks;
        total.failures += r.failures + f.failures;
        total.worst_lag = f.worst_lag > total.worst_lag ? f.worst_lag : total.worst_lag;
        stalled_checks += f.checks;
    }
    long long writes = stop_writer(log, pid);
    wk_near_stats s = stats_of(nc);
    printf("near_cache silent stalls: %lld checks (%lld while stalled), %llu hits, %llu reads, "
           "%lld connection errors, %llu sessions, %lld writes, worst lag while stalled %lld "
           "versions\n",
           total.checks, stalled_checks, (unsigned long long)s.hits, (unsigned long long)s.reads,
           total.failures, (unsigned long long)s.sessions, writes, total.worst_lag);
    cr_assert_gt(stalled_checks, 0, "bodies were served from memory during the stalls");
    wk_near_cache_close(nc);
    wk_test_proxy_stop(proxy);
}

/* ------------------------------------------------------------------------
 * Through an event loop (wk_near_cache_get_async)
 * ---------------------------------------------------------------------- */

/* A loop get: its completion (tests/support) and the body it delivered. */
typedef struct loop_get {
    wk_test_done d;
    wk_body body;
} loop_get;

static void on_loop_get(wk_async *a, int status, const char *msg, void *arg)
{
    wk_test_on_done(a, status, msg, &((loop_get *)arg)->d);
}

/* Submit a loop get of `name` (never completed inside the call), turn the
 * loop until its callback ran; its status. */
static int loop_get_now(wk_async *a, wk_near_cache *nc, const wk_entity *e, const char *name,
                        loop_get *g)
{
    return wk_test_near_get_loop(a, nc, e, name, &g->body, &g->d);
}

/* The body a loop get delivered (NULL: a miss). */
static void expect_loop_body(const loop_get *g, const char *want)
{
    cr_assert_eq(g->d.status, WK_OK, "%s: %s", wk_err_name(g->d.status), g->d.msg);
    if (!want) {
        cr_assert(!g->body.found, "expected a miss");
        return;
    }
    cr_assert(g->body.found, "expected \"%s\", got a miss", want);
    cr_assert(g->body.len == strlen(want) && memcmp(g->body.data, want, g->body.len) == 0,
              "got \"%.*s\", want \"%s\"", (int)g->body.len, (char *)g->body.data, want);
}

static int get_version(wk_near_cache *nc, wk_async *a, const wk_entity *e, char *buf, size_t cap,
                       wk_buffer *b)
{
    if (!a)
        return wk_near_cache_get_into(nc, e, wk_name_str("v"), b);
    loop_get g = {.body = WK_BODY_INIT};
    int rc = wk_near_cache_get_async(nc, a, e, wk_name_str("v"), &g.body, on_loop_get, &g);
    cr_assert_eq(rc, WK_OK, "%s", wk_near_cache_errmsg());
    while (!g.d.calls)
        wk_test_async_turn(a);
    if (g.d.status == WK_OK) {
        cr_assert_leq(g.body.len, cap);
        b->found = g.body.found;
        b->len = g.body.len;
        if (g.body.len)
            memcpy(buf, g.body.data, g.body.len);
    }
    wk_body_free(&g.body);
    return g.d.status;
}

/* On the private server: a near cache of Cache:frozen whose connections
 * go through a proxy the test can freeze (command timeout as given), a
 * handle writing straight to the server, which put "k" = "v1", and a loop
 * handle straight to it too. */
typedef struct frozen {
    wk_entity c;
    wk_test_proxy *proxy;
    wk_near_cache *nc;
    wk_db *writer;
    wk_async *a;
} frozen;

static void frozen_open(frozen *f, int timeout_ms)
{
    f->c = (wk_entity)WK_CACHE_ENTITY("frozen", 60000);
    const wk_entity *ents[] = {&f->c};
    const char *url = wk_test_private_url();
    cr_assert_eq(wk_test_proxy_start(&f->proxy, atoi(strrchr(url, ':') + 1)), 0);
    wk_db_options dbo = WK_DB_OPTIONS_INIT;
    dbo.url = wk_test_proxy_url(f->proxy);
    dbo.capability = wk_cap_read_write();
    dbo.command_timeout_ms = timeout_ms;
    char err[256];
    wk_db *db = NULL;
    cr_assert_eq(wk_db_open(&db, &dbo, err, sizeof(err)), WK_OK, "%s", err);
    wk_near_cache_options o = relaxed(ents, 1);
    f->nc = open_nc(db, &o);
    wk_db_close(db);
    f->writer = open_db(url, NULL, "near-loop-writer");
    cr_assert_eq(wk_cache_put(wk_db_processor(f->writer), &f->c, wk_name_str("k"), "v1", 2), WK_OK);
    f->a = wk_test_open_async(url, NULL, 5000);
}

/* Close what is still open (a closed member is NULL). */
static void frozen_close(frozen *f)
{
    wk_async_close(f->a);
    wk_near_cache_close(f->nc);
    wk_db_close(f->writer);
    wk_test_proxy_stop(f->proxy);
}

Test(near_cache, loop_a_hit_completes_at_the_next_turn_with_no_io, .init = wk_test_private_start,
     .fini = wk_test_private_stop)
{
    const char *url = wk_test_private_url();
    wk_async *a = wk_test_open_async(url, NULL, 5000);
    hits t;
    hits_open(&t);
    wk_near_cache *nc = t.nc;
    const wk_entity c = t.c, h = t.h;

    loop_get g = {.body = WK_BODY_INIT};
    cr_assert_eq(loop_get_now(a, nc, &c, "a", &g), WK_OK); /* misses: read by the reader */
    expect_loop_body(&g, "plain");
    cr_assert_eq(loop_get_now(a, nc, &h, "a", &g), WK_OK);
    expect_loop_body(&g, "hashed");
    uint8_t want[WK_HASH_LEN];
    wk_blake3("hashed", 6, want);
    cr_assert(memcmp(g.body.hash, want, WK_HASH_LEN) == 0, "the hashed body comes with its hash");
    cr_assert_eq(loop_get_now(a, nc, &c, "missing", &g), WK_OK);
    expect_loop_body(&g, NULL);
    cr_assert_eq(stats_of(nc).reads, 3);
    cr_assert_eq(stats_of(nc).hits, 0);
    wk_test_async_drain(a);

    redisContext *raw = wk_test_raw(url);
    long long before = read_calls(raw);
    for (int i = 0; i < 300; i++) {
        const wk_entity *e = i % 3 == 1 ? &h : &c;
        const char *name = i % 3 == 2 ? "missing" : "a";
        int calls = g.d.calls;
        cr_assert_eq(wk_near_cache_get_async(nc, a, e, wk_name_str(name), &g.body, on_loop_get, &g),
                     WK_OK);
        cr_assert_eq(g.d.calls, calls, "a hit's callback ran inside the call");
        cr_assert_eq(wk_async_pending(a), 1);
        cr_assert_eq(wk_async_timeout_ms(a), 0, "the hit is due at the next turn");
        wk_async_process(a, 0); /* a turn without any event: nothing to read */
        cr_assert_eq(g.d.calls, calls + 1, "the hit did not complete at the next turn");
        expect_loop_body(&g, i % 3 == 2 ? NULL : i % 3 == 1 ? "hashed" : "plain");
        cr_assert_eq(wk_async_pending(a), 0);
    }
    cr_assert_eq(read_calls(raw), before, "hits sent %lld read commands", read_calls(raw) - before);
    wk_near_stats s = stats_of(nc);
    cr_assert_eq(s.hits, 300);
    cr_assert_eq(s.reads, 3);

    wk_body_free(&g.body);
    redisFree(raw);
    wk_async_close(a);
    wk_near_cache_close(nc);
    wk_db_close(t.db);
}

Test(near_cache, loop_a_miss_in_flight_does_not_block_the_loop, .init = wk_test_private_start,
     .fini = wk_test_private_stop)
{
    frozen f;
    frozen_open(&f, 20000);
    const wk_entity c = f.c;

    /* The loop handle's own connection is up. */
    loop_get other = {.body = WK_BODY_INIT};
    cr_assert_eq(wk_cache_get(wk_async_with(f.a, on_loop_get, &other), &c, wk_name_str("k"),
                              &other.body),
                 WK_OK);
    while (!other.d.calls)
        wk_test_async_turn(f.a);

    /* The near cache's read cannot be answered while the proxy is frozen;
     * a blocking read in the call would not return before the command
     * timeout, and then with WK_ETIMEDOUT. */
    wk_test_proxy_freeze(f.proxy, true);
    loop_get g = {.body = WK_BODY_INIT};
    cr_assert_eq(wk_near_cache_get_async(f.nc, f.a, &c, wk_name_str("k"), &g.body, on_loop_get, &g),
                 WK_OK);
    /* Another query through the same loop completes meanwhile. */
    cr_assert_eq(wk_cache_get(wk_async_with(f.a, on_loop_get, &other), &c, wk_name_str("k"),
                              &other.body),
                 WK_OK);
    while (other.d.calls < 2)
        wk_test_async_turn(f.a);
    expect_loop_body(&other, "v1");
    cr_assert_eq(g.d.calls, 0, "the near cache's read completed through a frozen proxy");
    cr_assert_eq(wk_async_pending(f.a), 1, "the near-cache get is counted until it completes");

    wk_test_proxy_freeze(f.proxy, false);
    while (!g.d.calls)
        wk_test_async_turn(f.a);
    expect_loop_body(&g, "v1");
    cr_assert_eq(stats_of(f.nc).reads, 1);

    wk_body_free(&g.body);
    wk_body_free(&other.body);
    frozen_close(&f);
}

Test(near_cache, loop_another_handles_put_is_seen_and_a_hashed_entry_revalidates_by_hash,
     .init = wk_test_private_start, .fini = wk_test_private_stop)
{
    const char *url = wk_test_private_url();
    wk_async *a = wk_test_open_async(url, NULL, 5000);
    hits t;
    hits_open(&t);
    wk_db_close(t.db); /* the near cache's are the only connections of that name */
    wk_near_cache *nc = t.nc;
    const wk_entity c = t.c, h = t.h;
    wk_db *writer = open_db(url, NULL, "near-loop-writer");
    wk_processor *p = wk_db_processor(writer);

    loop_get g = {.body = WK_BODY_INIT};
    cr_assert_eq(loop_get_now(a, nc, &c, "a", &g), WK_OK);
    expect_loop_body(&g, "plain");
    cr_assert_eq(loop_get_now(a, nc, &c, "a", &g), WK_OK);
    expect_loop_body(&g, "plain");
    cr_assert_eq(stats_of(nc).hits, 1);

    /* Another handle's put, then its remove: each seen by the next get. */
    cr_assert_eq(wk_cache_put(p, &c, wk_name_str("a"), "v2", 2), WK_OK);
    await_not_verified(nc, &c, "a");
    cr_assert_eq(loop_get_now(a, nc, &c, "a", &g), WK_OK);
    expect_loop_body(&g, "v2");
    bool removed = false;
    cr_assert_eq(wk_cache_remove(p, &c, wk_name_str("a"), &removed), WK_OK);
    await_not_verified(nc, &c, "a");
    cr_assert_eq(loop_get_now(a, nc, &c, "a", &g), WK_OK);
    expect_loop_body(&g, NULL);
    cr_assert_eq(stats_of(nc).reads, 3);

    /* The data connection killed: the HashedCache entry is kept,
     * unverified, and the loop get revalidates it by hash (no body). */
    cr_assert_eq(loop_get_now(a, nc, &h, "a", &g), WK_OK);
    expect_loop_body(&g, "hashed");
    redisContext *raw = wk_test_raw(url);
    uint64_t sessions = stats_of(nc).sessions;
    cr_assert_eq(wk_test_kill_clients_of_type(raw, "normal", "near-hit"), 1);
    while (stats_of(nc).sessions == sessions)
        wk_test_sleep_ms(1);
    cr_assert_eq(state_of(nc, &h, "a"), WK_NEAR_UNVERIFIED);
    long long hget = wk_test_cmd_calls(raw, "hget");
    uint64_t revalidations = stats_of(nc).revalidations;
    cr_assert_eq(loop_get_now(a, nc, &h, "a", &g), WK_OK);
    expect_loop_body(&g, "hashed");
    cr_assert_eq(stats_of(nc).revalidations, revalidations + 1);
    cr_assert_eq(wk_test_cmd_calls(raw, "hget"), hget + 1, "one HGET: the hash, not the body");
    cr_assert_eq(state_of(nc, &h, "a"), WK_NEAR_VERIFIED);

    wk_body_free(&g.body);
    redisFree(raw);
    wk_async_close(a);
    wk_near_cache_close(nc);
    wk_db_close(writer);
}

Test(near_cache, loop_gets_the_capability_refuses_are_denied_at_the_call_and_send_nothing,
     .init = wk_test_private_start, .fini = wk_test_private_stop)
{
    /* The loop handle may read anything: the near cache's capability rules. */
    wk_async *a = wk_test_open_async(wk_test_private_url(), NULL, 5000);
    capped cp;
    capped_open(&cp);
    wk_near_cache *nc = cp.nc;
    wk_test_async_drain(a);
    const char *url = wk_test_private_url();

    redisContext *raw = wk_test_raw(url);
    long long before = read_calls(raw);
    loop_get g = {.body = WK_BODY_INIT};
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(
            wk_near_cache_get_async(nc, a, &cp.no, wk_name_str("s"), &g.body, on_loop_get, &g),
            WK_EDENIED);
        cr_assert(
            strstr(wk_near_cache_errmsg(), "capability \"replica\" may not READ Cache:secret"),
            "%s", wk_near_cache_errmsg());
        cr_assert_eq(
            wk_near_cache_get_async(nc, a, &cp.hno, wk_name_str("s"), &g.body, on_loop_get, &g),
            WK_EDENIED);
        cr_assert(strstr(wk_near_cache_errmsg(), "may not READ HashedCache:secret"), "%s",
                  wk_near_cache_errmsg());
        cr_assert_eq(wk_async_pending(a), 0);
        wk_async_process(a, 0);
    }
    cr_assert_eq(g.d.calls, 0, "a refused get's callback ran");
    cr_assert(!g.body.found);
    cr_assert_eq(state_of(nc, &cp.no, "s"), WK_NEAR_ABSENT);
    cr_assert_eq(read_calls(raw), before, "a refused read reached Redis");

    /* Bad arguments are refused at the call too. */
    wk_entity other = WK_CACHE_ENTITY("other", 60000);
    cr_assert_eq(wk_near_cache_get_async(nc, a, &other, wk_name_str("s"), &g.body, on_loop_get, &g),
                 WK_EINVAL);
    cr_assert_eq(wk_near_cache_get_async(nc, a, &cp.ok, wk_name_str("s"), NULL, on_loop_get, &g),
                 WK_EINVAL);
    cr_assert_eq(
        wk_near_cache_get_async(nc, NULL, &cp.ok, wk_name_str("s"), &g.body, on_loop_get, &g),
        WK_EINVAL);
    cr_assert_eq(g.d.calls, 0);

    cr_assert_eq(loop_get_now(a, nc, &cp.ok, "s", &g), WK_OK); /* granted: a miss */
    expect_loop_body(&g, NULL);
    cr_assert_eq(read_calls(raw), before + 1);

    wk_body_free(&g.body);
    redisFree(raw);
    wk_async_close(a);
    capped_close(&cp);
}

Test(near_cache, loop_closing_the_handle_ends_its_gets_read_or_not, .init = wk_test_private_start,
     .fini = wk_test_private_stop)
{
    frozen f;
    frozen_open(&f, 20000);
    const wk_entity c = f.c;
    loop_get hit = {.body = WK_BODY_INIT}, y = {.body = WK_BODY_INIT}, z = {.body = WK_BODY_INIT};
    cr_assert_eq(loop_get_now(f.a, f.nc, &c, "k", &hit), WK_OK);

    /* A hit not yet delivered, a read held by the frozen proxy and one
     * queued behind it. */
    cr_assert_eq(
        wk_near_cache_get_async(f.nc, f.a, &c, wk_name_str("k"), &hit.body, on_loop_get, &hit),
        WK_OK);
    wk_test_proxy_freeze(f.proxy, true);
    cr_assert_eq(wk_near_cache_get_async(f.nc, f.a, &c, wk_name_str("y"), &y.body, on_loop_get, &y),
                 WK_OK);
    cr_assert_eq(wk_near_cache_get_async(f.nc, f.a, &c, wk_name_str("z"), &z.body, on_loop_get, &z),
                 WK_OK);
    cr_assert_eq(wk_async_pending(f.a), 3);
    wk_async_close(f.a);
    f.a = NULL;
    cr_assert_eq(hit.d.calls, 2);
    expect_loop_body(&hit, "v1");
    cr_assert_eq(y.d.calls, 1);
    cr_assert_eq(y.d.status, WK_EIO, "%s", y.d.msg);
    cr_assert(strstr(y.d.msg, "closed"), "%s", y.d.msg);
    cr_assert_eq(z.d.calls, 1);
    cr_assert_eq(z.d.status, WK_EIO, "%s", z.d.msg);
    cr_assert(!y.body.found && !z.body.found);

    /* The near cache goes on (the cut read finishes on its reader). */
    wk_test_proxy_freeze(f.proxy, false);
    expect_body(f.nc, &c, "k", "v1");
    wk_body_free(&hit.body);
    frozen_close(&f);
}

Test(near_cache, loop_closing_the_near_cache_ends_its_gets_at_the_next_turn,
     .init = wk_test_private_start, .fini = wk_test_private_stop)
{
    frozen f;
    frozen_open(&f, 300); /* the read in flight ends by itself */
    const wk_entity c = f.c;
    loop_get y = {.body = WK_BODY_INIT}, z = {.body = WK_BODY_INIT};
    wk_test_proxy_freeze(f.proxy, true);
    cr_assert_eq(wk_near_cache_get_async(f.nc, f.a, &c, wk_name_str("y"), &y.body, on_loop_get, &y),
                 WK_OK);
    cr_assert_eq(wk_near_cache_get_async(f.nc, f.a, &c, wk_name_str("z"), &z.body, on_loop_get, &z),
                 WK_OK);
    wk_near_cache_close(f.nc); /* waits for the read in flight */
    f.nc = NULL;
    cr_assert_eq(y.d.calls + z.d.calls, 0, "callbacks run on the loop, not inside the close");
    while (y.d.calls + z.d.calls < 2)
        wk_test_async_turn(f.a);
    cr_assert_eq(y.d.calls, 1);
    cr_assert_eq(z.d.calls, 1);
    cr_assert(wk_is_connection_error(y.d.status), "%s: %s", wk_err_name(y.d.status), y.d.msg);
    cr_assert(wk_is_connection_error(z.d.status), "%s: %s", wk_err_name(z.d.status), z.d.msg);
    cr_assert_eq(wk_async_pending(f.a), 0);
    wk_async_process(f.a, 0); /* nothing more comes */
    cr_assert_eq(y.d.calls + z.d.calls, 2);

    wk_test_proxy_freeze(f.proxy, false);
    frozen_close(&f);
}

/* expect_body(), or the same through the loop `a`. */
static void expect_body_on(wk_near_cache *nc, wk_async *a, const wk_entity *e, const char *name,
                           const char *want)
{
    if (!a) {
        expect_body(nc, e, name, want);
        return;
    }
    loop_get g = {.body = WK_BODY_INIT};
    loop_get_now(a, nc, e, name, &g);
    expect_loop_body(&g, want);
    wk_body_free(&g.body);
}
