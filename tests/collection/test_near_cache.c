/*
 * tests/collection/test_near_cache.c — the near cache against a real
 * redis-server: hits that send nothing (the server's command counters),
 * invalidation by another connection's put and remove in both tracking
 * modes, the LRU bounds by count and by bytes, the TTL cap, revalidation
 * by hash without body transfer after its connections are killed (call
 * counts and the server's output bytes), capability refusals that send
 * nothing, and the staleness bound: another process writes versions
 * continuously while the near cache's connections are killed, and no
 * served version is older than the bound allows.
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
    redisReply *r = wk_test_cmd(raw, "INFO stats");
    const char *s = strstr(r->str, "total_net_output_bytes:");
    cr_assert(s);
    long long v = atoll(s + strlen("total_net_output_bytes:"));
    freeReplyObject(r);
    return v;
}

/* ------------------------------------------------------------------------
 * Hits
 * ---------------------------------------------------------------------- */

Test(near_cache, a_hit_sends_no_command, .init = wk_test_private_start,
     .fini = wk_test_private_stop)
{
    const char *url = wk_test_private_url();
    wk_db *db = open_db(url, NULL, "near-hit");
    wk_processor *p = wk_db_processor(db);
    wk_entity c = WK_CACHE_ENTITY("hit", 60000), h = WK_HASHED_CACHE_ENTITY("hit", 60000);
    cr_assert_eq(wk_cache_put(p, &c, wk_name_str("a"), "plain", 5), WK_OK);
    cr_assert_eq(wk_hashed_cache_put(p, &h, wk_name_str("a"), "hashed", 6, NULL), WK_OK);
    const wk_entity *ents[] = {&c, &h};
    wk_near_cache_options o = relaxed(ents, 2);
    wk_near_cache *nc = open_nc(db, &o);

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
    wk_db_close(db);
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

Test(near_cache, lru_bound_by_count)
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

    expect_body(nc, &c, "n0", "n0");
    expect_body(nc, &c, "n1", "n1");
    expect_body(nc, &c, "n2", "n2");
    expect_body(nc, &c, "n0", "n0"); /* a hit: n0 is now the newest */
    expect_body(nc, &c, "n3", "n3"); /* evicts n1, the least recently used */
    cr_assert_eq(state_of(nc, &c, "n1"), WK_NEAR_ABSENT);
    cr_assert_eq(state_of(nc, &c, "n0"), WK_NEAR_VERIFIED);
    expect_body(nc, &c, "n4", "n4"); /* evicts n2 */
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

Test(near_cache, reads_the_capability_does_not_grant_are_refused_and_send_nothing,
     .init = wk_test_private_start, .fini = wk_test_private_stop)
{
    const char *url = wk_test_private_url();
    wk_entity ok = WK_CACHE_ENTITY("granted", 60000), no = WK_CACHE_ENTITY("secret", 60000),
              hno = WK_HASHED_CACHE_ENTITY("secret", 60000);
    wk_cap_entry rows[] = {{WK_KIND_CACHE, "granted", WK_GRANT_READ}};
    wk_cap *cap = NULL;
    cr_assert_eq(wk_cap_new(&cap, "replica", WK_GRANT_NONE, rows, 1), WK_OK);
    wk_db *writer = open_db(url, NULL, "near-cap-writer");
    cr_assert_eq(wk_cache_put(wk_db_processor(writer), &no, wk_name_str("s"), "hidden", 6), WK_OK);
    wk_db *db = open_db(url, cap, "near-cap");
    const wk_entity *ents[] = {&ok, &no, &hno};
    wk_near_cache_options o = relaxed(ents, 3);
    wk_near_cache *nc = open_nc(db, &o);

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
    wk_near_cache_close(nc);

    /* BCAST with no readable entity would hear every key: refused. */
    const wk_entity *only_secret[] = {&no};
    o = relaxed(only_secret, 1);
    o.mode = WK_NEAR_BCAST;
    char err[256];
    cr_assert_eq(wk_near_cache_open(&nc, db, &o, err, sizeof(err)), WK_EDENIED);
    cr_assert_null(nc);
    cr_assert(strstr(err, "replica"), "%s", err);

    redisFree(raw);
    wk_db_close(db);
    wk_db_close(writer);
    wk_cap_free(cap);
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
static reading read_versions(wk_near_cache *nc, const wk_entity *e, const write_log *log,
                             int64_t end)
{
    reading r = {0, 0, 0};
    char buf[32];
    while (wk_monotonic_ms() < end) {
        int64_t t = wk_monotonic_ms();
        wk_buffer b = {buf, sizeof(buf) - 1, 0, false};
        int rc = wk_near_cache_get_into(nc, e, wk_name_str("v"), &b);
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

static void staleness_case(const char *kind)
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

    reading r = read_versions(nc, &e, log, wk_monotonic_ms() + 8000);
    atomic_store(&k.stop, true);
    pthread_join(kt, NULL);
    long long writes = stop_writer(log, pid);

    wk_near_stats s = stats_of(nc);
    printf("near_cache staleness (%s): %lld checks, %llu hits, %llu reads, %llu revalidations, "
           "%lld connection errors, %d+%d kills, %llu sessions, %lld writes, worst lag %lld "
           "versions\n",
           kind, r.checks, (unsigned long long)s.hits, (unsigned long long)s.reads,
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
    staleness_case(WK_KIND_HASHED_CACHE);
}

Test(near_cache, never_serves_a_body_older_than_the_bound_while_connections_are_killed_cache)
{
    staleness_case(WK_KIND_CACHE);
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
