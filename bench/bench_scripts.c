/*
 * bench/bench_scripts.c — server CPU per script call: every Lua script of
 * the library next to the smallest script doing the same job, written
 * here, as the server itself accounts them.
 *
 * For each script and each side (library, minimal): prepare the keys with
 * plain commands, CONFIG RESETSTAT, run N calls of just that script in
 * batches of 64 (wk_batch for the library, pipelined EVALSHA for the
 * minimal script), then read cmdstat_evalsha from INFO commandstats:
 * usec / calls is the server's time per call, the inner commands
 * included. Sides alternate; the table shows medians.
 *
 * Also two batch cases for bench_redis's main table: the library's limiter
 * and hashed revalidation against raw hiredis pipelining the minimal
 * script (not the library's), i.e. what a hand-written client would do.
 *
 * The minimal scripts skip what the library adds on purpose (corruption
 * checks, exactness, expired-lease cleanup); the "minimal" column is what
 * that care costs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "bench/bench_cases.h"
#include "bench/bench_util.h"

#define BATCH 64

/* ------------------------------------------------------------------------
 * Raw helpers
 * ---------------------------------------------------------------------- */

static void load_lua(bench_ctx *c, const char *lua, char sha[41])
{
    wk_script s = {"bench.minimal", lua};
    bench_raw_load(c, &s, sha);
}

/* A deterministic 16-byte token per index, so both sides hold the same. */
static void token_of(unsigned i, uint8_t tok[WK_TOKEN_LEN])
{
    memset(tok, 'w', WK_TOKEN_LEN);
    memcpy(tok, &i, sizeof(i));
}

/* Pipelined: send `n` commands built by `fn`, read the n replies. */
static void raw_n(bench_ctx *c, unsigned n, void (*fn)(bench_ctx *, unsigned, void *), void *arg)
{
    for (unsigned base = 0; base < n; base += BATCH) {
        unsigned m = n - base < BATCH ? n - base : BATCH;
        for (unsigned k = 0; k < m; k++)
            fn(c, base + k, arg);
        for (unsigned k = 0; k < m; k++)
            freeReplyObject(bench_raw_reply(c));
    }
}

static long long server_ms(bench_ctx *c)
{
    redisReply *r = redisCommand(c->raw, "TIME");
    long long ms = atoll(r->element[0]->str) * 1000 + atoll(r->element[1]->str) / 1000;
    freeReplyObject(r);
    return ms;
}

/* EVALSHA sha <nkeys> keys… args… from NUL-free or binary strings. */
static void send_eval(bench_ctx *c, const char *sha, int nkeys, int argc, const char **argv,
                      const size_t *lens)
{
    const char *v[12] = {"EVALSHA", sha, nkeys == 1 ? "1" : "2"};
    size_t l[12] = {7, 40, 1};
    for (int i = 0; i < argc; i++) {
        v[3 + i] = argv[i];
        l[3 + i] = lens[i];
    }
    bench_raw_append(c, 3 + argc, v, l);
}

/* ------------------------------------------------------------------------
 * TokenBucket
 * ---------------------------------------------------------------------- */

/* A plain token bucket: continuous refill in doubles, no validation. */
static const char min_bucket_acquire[] =
    "local t = redis.call('TIME')\n"
    "local now = t[1] * 1000 + math.floor(t[2] / 1000)\n"
    "local cap, rate, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])\n"
    "local h = redis.call('HMGET', KEYS[1], 'tokens', 'ts')\n"
    "local tokens, ts = tonumber(h[1]) or cap, tonumber(h[2]) or now\n"
    "tokens = math.min(cap, tokens + math.max(0, now - ts) * rate)\n"
    "if tokens < cost then return {0, math.floor(tokens), math.ceil((cost - tokens) / rate)} end\n"
    "tokens = tokens - cost\n"
    "redis.call('HSET', KEYS[1], 'tokens', tokens, 'ts', now)\n"
    "redis.call('PEXPIRE', KEYS[1], math.ceil((cap - tokens) / rate))\n"
    "return {1, math.floor(tokens), 0}\n";

static const char min_bucket_peek[] =
    "local t = redis.call('TIME')\n"
    "local now = t[1] * 1000 + math.floor(t[2] / 1000)\n"
    "local cap, rate = tonumber(ARGV[1]), tonumber(ARGV[2])\n"
    "local h = redis.call('HMGET', KEYS[1], 'tokens', 'ts')\n"
    "local tokens, ts = tonumber(h[1]) or cap, tonumber(h[2]) or now\n"
    "tokens = math.min(cap, tokens + math.max(0, now - ts) * rate)\n"
    "return {math.floor(tokens), math.ceil((cap - tokens) / rate)}\n";

/* Admitting: a big bucket that never runs dry. Denying: one token an
 * hour, drained. */
static const wk_entity tb_big = WK_TOKEN_BUCKET_ENTITY("benchcpu", 1e9, 1e9, 1000);
static const wk_entity tb_dry = WK_TOKEN_BUCKET_ENTITY("benchdry", 1, 1, 3600000);

static void tb_min_send(bench_ctx *c, const char *sha, const char *ns, unsigned i,
                        const char *cap, const char *rate, bool with_cost)
{
    char key[128];
    size_t kl = bench_key(key, "TokenBucket", ns, i % 1024, NULL);
    const char *a[4] = {key, cap, rate, "1"};
    size_t l[4] = {kl, strlen(cap), strlen(rate), 1};
    send_eval(c, sha, 1, with_cost ? 4 : 3, a, l);
}

static char sha_tb_acquire[41], sha_tb_peek[41];

static void tb_acquire_lib(bench_ctx *c, unsigned base)
{
    wk_token_bucket_outcome o[BATCH];
    for (unsigned k = 0; k < BATCH; k++)
        wk_token_bucket_acquire(wk_batch_processor(c->batch), &tb_big,
                                wk_name_u64((base + k) % 1024), 1, &o[k]);
    bench_check(wk_batch_exec(c->batch), c, "token_bucket.acquire");
}

static void tb_acquire_min(bench_ctx *c, unsigned base)
{
    for (unsigned k = 0; k < BATCH; k++)
        tb_min_send(c, sha_tb_acquire, "benchmin", base + k, "1000000000", "1000000", true);
    for (unsigned k = 0; k < BATCH; k++)
        freeReplyObject(bench_raw_reply(c));
}

static void tb_denied_lib(bench_ctx *c, unsigned base)
{
    wk_token_bucket_outcome o[BATCH];
    for (unsigned k = 0; k < BATCH; k++)
        wk_token_bucket_acquire(wk_batch_processor(c->batch), &tb_dry,
                                wk_name_u64((base + k) % 1024), 1, &o[k]);
    bench_check(wk_batch_exec(c->batch), c, "token_bucket.acquire");
}

static void tb_denied_min(bench_ctx *c, unsigned base)
{
    for (unsigned k = 0; k < BATCH; k++)
        tb_min_send(c, sha_tb_acquire, "benchmindry", base + k, "1", "0.00000027777777777777777",
                    true);
    for (unsigned k = 0; k < BATCH; k++)
        freeReplyObject(bench_raw_reply(c));
}

static void tb_peek_lib(bench_ctx *c, unsigned base)
{
    wk_token_bucket_state st[BATCH];
    for (unsigned k = 0; k < BATCH; k++)
        wk_token_bucket_peek(wk_batch_processor(c->batch), &tb_big,
                             wk_name_u64((base + k) % 1024), &st[k]);
    bench_check(wk_batch_exec(c->batch), c, "token_bucket.peek");
}

static void tb_peek_min(bench_ctx *c, unsigned base)
{
    for (unsigned k = 0; k < BATCH; k++)
        tb_min_send(c, sha_tb_peek, "benchmin", base + k, "1000000000", "1000000", false);
    for (unsigned k = 0; k < BATCH; k++)
        freeReplyObject(bench_raw_reply(c));
}

static void tb_setup(bench_ctx *c)
{
    load_lua(c, min_bucket_acquire, sha_tb_acquire);
    load_lua(c, min_bucket_peek, sha_tb_peek);
    /* Drain the dry buckets on both sides (their keys then exist). */
    for (unsigned base = 0; base < 1024; base += BATCH) {
        tb_denied_lib(c, base);
        tb_denied_min(c, base);
    }
}

/* ------------------------------------------------------------------------
 * Lock
 * ---------------------------------------------------------------------- */

static const wk_entity lk = WK_LOCK_ENTITY("benchcpu", 30000);
static char sha_lock_release[41], sha_lock_extend[41];

static const char min_lock_release[] =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end\n"
    "return 0\n";
static const char min_lock_extend[] =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
    "  return redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
    "end\n"
    "return 0\n";

static void lock_hold_one(bench_ctx *c, unsigned i, void *ns)
{
    char key[128];
    uint8_t tok[WK_TOKEN_LEN];
    size_t kl = bench_key(key, "Lock", ns, i, NULL);
    token_of(i, tok);
    const char *a[] = {"SET", key, (const char *)tok, "PX", "30000"};
    size_t l[] = {3, kl, WK_TOKEN_LEN, 2, 5};
    bench_raw_append(c, 5, a, l);
}

static void lock_prepare(bench_ctx *c, bool lib, unsigned n)
{
    raw_n(c, n, lock_hold_one, lib ? "benchcpu" : "benchmin");
}

static void lock_op_lib(bench_ctx *c, unsigned base, bool extend)
{
    wk_token t[BATCH];
    bool ok[BATCH];
    for (unsigned k = 0; k < BATCH; k++) {
        token_of(base + k, t[k].bytes);
        if (extend)
            wk_lock_extend(wk_batch_processor(c->batch), &lk, wk_name_u64(base + k), &t[k], &ok[k]);
        else
            wk_lock_release(wk_batch_processor(c->batch), &lk, wk_name_u64(base + k), &t[k],
                            &ok[k]);
    }
    bench_check(wk_batch_exec(c->batch), c, "lock script");
    for (unsigned k = 0; k < BATCH; k++)
        if (!ok[k])
            bench_check(WK_EPROTO, c, "lock script: the lock was not held");
}

static void lock_op_min(bench_ctx *c, unsigned base, bool extend)
{
    for (unsigned k = 0; k < BATCH; k++) {
        char key[128];
        uint8_t tok[WK_TOKEN_LEN];
        size_t kl = bench_key(key, "Lock", "benchmin", base + k, NULL);
        token_of(base + k, tok);
        const char *a[] = {key, (const char *)tok, "30000"};
        size_t l[] = {kl, WK_TOKEN_LEN, 5};
        send_eval(c, extend ? sha_lock_extend : sha_lock_release, 1, extend ? 3 : 2, a, l);
    }
    for (unsigned k = 0; k < BATCH; k++) {
        redisReply *r = bench_raw_reply(c);
        if (r->integer != 1)
            bench_check(WK_EPROTO, c, "minimal lock script: the lock was not held");
        freeReplyObject(r);
    }
}

static void lock_release_lib(bench_ctx *c, unsigned base) { lock_op_lib(c, base, false); }
static void lock_release_min(bench_ctx *c, unsigned base) { lock_op_min(c, base, false); }
static void lock_extend_lib(bench_ctx *c, unsigned base) { lock_op_lib(c, base, true); }
static void lock_extend_min(bench_ctx *c, unsigned base) { lock_op_min(c, base, true); }

static void lock_setup(bench_ctx *c)
{
    load_lua(c, min_lock_release, sha_lock_release);
    load_lua(c, min_lock_extend, sha_lock_extend);
}

/* ------------------------------------------------------------------------
 * RwLock
 * ---------------------------------------------------------------------- */

static const wk_entity rw = WK_RWLOCK_ENTITY("benchcpu", 30000);
static char sha_rw_try_read[41], sha_rw_try_write[41], sha_rw_release_read[41],
    sha_rw_extend_read[41], sha_rw_inspect[41];

#define MIN_NOW "local t = redis.call('TIME')\nlocal now = t[1] * 1000 + math.floor(t[2] / 1000)\n"
/* Every reader of one entity has the same TTL, so the newest lease ends
 * last and a plain PEXPIRE keeps the set alive for all of them. */
static const char min_rw_try_read[] =
    "if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end\n" MIN_NOW
    "redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)\n"
    "redis.call('ZADD', KEYS[2], now + ARGV[2], ARGV[1])\n"
    "redis.call('PEXPIRE', KEYS[2], ARGV[2])\n"
    "return 1\n";
static const char min_rw_try_write[] =
    MIN_NOW "if redis.call('ZCOUNT', KEYS[2], '(' .. now, '+inf') > 0 then return 0 end\n"
    "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end\n"
    "return 0\n";
static const char min_rw_release_read[] =
    MIN_NOW "local s = redis.call('ZSCORE', KEYS[1], ARGV[1])\n"
    "if not s then return 0 end\n"
    "redis.call('ZREM', KEYS[1], ARGV[1])\n"
    "if tonumber(s) > now then return 1 end\n"
    "return 0\n";
static const char min_rw_extend_read[] =
    MIN_NOW "local s = redis.call('ZSCORE', KEYS[1], ARGV[1])\n"
    "if not s or tonumber(s) <= now then return 0 end\n"
    "redis.call('ZADD', KEYS[1], now + ARGV[2], ARGV[1])\n"
    "redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
    "return 1\n";
static const char min_rw_inspect[] =
    MIN_NOW "return {redis.call('PTTL', KEYS[1]), redis.call('ZCOUNT', KEYS[2], '(' .. now, "
            "'+inf')}\n";

static void rw_keys(const char *ns, unsigned i, char w[128], size_t *wl, char r[128], size_t *rl)
{
    *wl = bench_key(w, "RwLock", ns, i, ":w");
    *rl = bench_key(r, "RwLock", ns, i, ":r");
}

static void rw_clear_one(bench_ctx *c, unsigned i, void *ns)
{
    char w[128], r[128];
    size_t wl, rl;
    rw_keys(ns, i, w, &wl, r, &rl);
    const char *a[] = {"DEL", w, r};
    size_t l[] = {3, wl, rl};
    bench_raw_append(c, 3, a, l);
}

typedef struct rw_lease_arg {
    const char *ns;
    char until[24];
} rw_lease_arg;

/* One reader lease of token_of(i), running for 30 s. */
static void rw_lease_one(bench_ctx *c, unsigned i, void *arg)
{
    rw_lease_arg *la = arg;
    char w[128], r[128];
    size_t wl, rl;
    uint8_t tok[WK_TOKEN_LEN];
    rw_keys(la->ns, i, w, &wl, r, &rl);
    token_of(i, tok);
    const char *a[] = {"ZADD", r, la->until, (const char *)tok};
    size_t l[] = {4, rl, strlen(la->until), WK_TOKEN_LEN};
    bench_raw_append(c, 4, a, l);
}

static void rw_prepare_clear(bench_ctx *c, bool lib, unsigned n)
{
    raw_n(c, n, rw_clear_one, lib ? "benchcpu" : "benchmin");
}

static void rw_prepare_leases(bench_ctx *c, bool lib, unsigned n)
{
    rw_prepare_clear(c, lib, n);
    rw_lease_arg la = {lib ? "benchcpu" : "benchmin", ""};
    snprintf(la.until, sizeof(la.until), "%lld", server_ms(c) + 30000);
    raw_n(c, n, rw_lease_one, &la);
}

enum rw_op { RW_TRY_READ, RW_TRY_WRITE, RW_RELEASE_READ, RW_EXTEND_READ, RW_INSPECT };

static void rw_lib(bench_ctx *c, unsigned base, enum rw_op op)
{
    wk_token t[BATCH];
    bool ok[BATCH];
    wk_rwlock_state st[BATCH];
    wk_processor *p = wk_batch_processor(c->batch);
    for (unsigned k = 0; k < BATCH; k++) {
        wk_name n = wk_name_u64(base + k);
        token_of(base + k, t[k].bytes);
        switch (op) {
        case RW_TRY_READ:
            wk_rwlock_try_read(p, &rw, n, &t[k], &ok[k]);
            break;
        case RW_TRY_WRITE:
            wk_rwlock_try_write(p, &rw, n, &t[k], &ok[k]);
            break;
        case RW_RELEASE_READ:
            wk_rwlock_release_read(p, &rw, n, &t[k], &ok[k]);
            break;
        case RW_EXTEND_READ:
            wk_rwlock_extend_read(p, &rw, n, &t[k], &ok[k]);
            break;
        case RW_INSPECT:
            ok[k] = true;
            wk_rwlock_inspect(p, &rw, n, &st[k]);
            break;
        }
    }
    bench_check(wk_batch_exec(c->batch), c, "rwlock script");
    for (unsigned k = 0; k < BATCH; k++)
        if (!ok[k])
            bench_check(WK_EPROTO, c, "rwlock script: unexpected outcome");
}

static void rw_min(bench_ctx *c, unsigned base, enum rw_op op)
{
    const char *sha = op == RW_TRY_READ       ? sha_rw_try_read
                      : op == RW_TRY_WRITE    ? sha_rw_try_write
                      : op == RW_RELEASE_READ ? sha_rw_release_read
                      : op == RW_EXTEND_READ  ? sha_rw_extend_read
                                              : sha_rw_inspect;
    for (unsigned k = 0; k < BATCH; k++) {
        char w[128], r[128];
        size_t wl, rl;
        uint8_t tok[WK_TOKEN_LEN];
        rw_keys("benchmin", base + k, w, &wl, r, &rl);
        token_of(base + k, tok);
        if (op == RW_RELEASE_READ || op == RW_EXTEND_READ) {
            const char *a[] = {r, (const char *)tok, "30000"};
            size_t l[] = {rl, WK_TOKEN_LEN, 5};
            send_eval(c, sha, 1, op == RW_EXTEND_READ ? 3 : 2, a, l);
        } else {
            const char *a[] = {w, r, (const char *)tok, "30000"};
            size_t l[] = {wl, rl, WK_TOKEN_LEN, 5};
            send_eval(c, sha, 2, op == RW_INSPECT ? 2 : 4, a, l);
        }
    }
    for (unsigned k = 0; k < BATCH; k++) {
        redisReply *r = bench_raw_reply(c);
        if (op != RW_INSPECT && r->integer != 1)
            bench_check(WK_EPROTO, c, "minimal rwlock script: unexpected outcome");
        freeReplyObject(r);
    }
}

#define RW_PAIR(fn, op)                                                                     \
    static void fn##_lib(bench_ctx *c, unsigned base) { rw_lib(c, base, op); }              \
    static void fn##_min(bench_ctx *c, unsigned base) { rw_min(c, base, op); }
RW_PAIR(rw_try_read, RW_TRY_READ)
RW_PAIR(rw_try_write, RW_TRY_WRITE)
RW_PAIR(rw_release_read, RW_RELEASE_READ)
RW_PAIR(rw_extend_read, RW_EXTEND_READ)
RW_PAIR(rw_inspect, RW_INSPECT)

static void rw_setup(bench_ctx *c)
{
    load_lua(c, min_rw_try_read, sha_rw_try_read);
    load_lua(c, min_rw_try_write, sha_rw_try_write);
    load_lua(c, min_rw_release_read, sha_rw_release_read);
    load_lua(c, min_rw_extend_read, sha_rw_extend_read);
    load_lua(c, min_rw_inspect, sha_rw_inspect);
}

/* ------------------------------------------------------------------------
 * HashedCache
 * ---------------------------------------------------------------------- */

static const wk_entity hc = WK_HASHED_CACHE_ENTITY("benchcpu", 600000);
static char sha_hc_put[41], sha_hc_get[41], sha_hc_hash[41], sha_hc_gic[41];
static uint8_t hc_small[1024], hc_big[64 * 1024], hc_small_hash[WK_HASH_LEN],
    hc_big_hash[WK_HASH_LEN];

static const char min_hc_put[] = "redis.call('HSET', KEYS[1], 'body', ARGV[1], 'hash', ARGV[2])\n"
                                 "redis.call('PEXPIRE', KEYS[1], ARGV[3])\n"
                                 "return 1\n";
static const char min_hc_get[] = "return redis.call('HMGET', KEYS[1], 'body', 'hash')\n";
static const char min_hc_hash[] = "return redis.call('HGET', KEYS[1], 'hash')\n";
/* A plain hash compare for revalidation: the body only when it changed. */
static const char min_hc_gic[] = "local h = redis.call('HGET', KEYS[1], 'hash')\n"
                                 "if h == ARGV[1] then return 0 end\n"
                                 "return {h, redis.call('HGET', KEYS[1], 'body')}\n";

/* Names 0..15 hold the 1 KiB body, 16..31 the 64 KiB one, on both sides. */
static void hc_fill(bench_ctx *c)
{
    for (unsigned n = 0; n < 32; n++) {
        const uint8_t *body = n < 16 ? hc_small : hc_big;
        size_t len = n < 16 ? sizeof(hc_small) : sizeof(hc_big);
        bench_check(wk_hashed_cache_put(wk_db_processor(c->db), &hc, wk_name_u64(n), body, len,
                                        n < 16 ? hc_small_hash : hc_big_hash),
                    c, "hashed_cache.put");
        char key[128];
        size_t kl = bench_key(key, "HashedCache", "benchmin", n, NULL);
        const char *a[] = {"HSET", key, "body", (const char *)body, "hash",
                           (const char *)(n < 16 ? hc_small_hash : hc_big_hash)};
        size_t l[] = {4, kl, 4, len, 4, WK_HASH_LEN};
        bench_raw_append(c, 6, a, l);
        freeReplyObject(bench_raw_reply(c));
    }
}

enum hc_op { HC_PUT, HC_GET, HC_HASH, HC_GIC };

static void hc_lib(bench_ctx *c, unsigned base, enum hc_op op)
{
    wk_body out[BATCH];
    wk_processor *p = wk_batch_processor(c->batch);
    for (unsigned k = 0; k < BATCH; k++) {
        out[k] = (wk_body)WK_BODY_INIT;
        unsigned i = base + k;
        switch (op) {
        case HC_PUT: /* 1 KiB on names 100.., so the read items stay */
            wk_hashed_cache_put(p, &hc, wk_name_u64(100 + i % 1024), hc_small, sizeof(hc_small),
                                NULL);
            break;
        case HC_GET:
            wk_hashed_cache_get(p, &hc, wk_name_u64(i % 16), &out[k]);
            break;
        case HC_HASH:
            wk_hashed_cache_hash(p, &hc, wk_name_u64(16 + i % 16), &out[k]);
            break;
        case HC_GIC:
            wk_hashed_cache_get_if_changed(p, &hc, wk_name_u64(16 + i % 16), hc_big_hash, &out[k]);
            break;
        }
    }
    bench_check(wk_batch_exec(c->batch), c, "hashed_cache script");
    for (unsigned k = 0; k < BATCH; k++) {
        if (op == HC_GIC && out[k].change != WK_ITEM_UNCHANGED)
            bench_check(WK_EPROTO, c, "hashed_cache.get_if_changed: not unchanged");
        wk_body_free(&out[k]);
    }
}

static void hc_min_send(bench_ctx *c, unsigned i, enum hc_op op)
{
    char key[128];
    if (op == HC_PUT) {
        size_t kl = bench_key(key, "HashedCache", "benchmin", 100 + i % 1024, NULL);
        const char *a[] = {key, (const char *)hc_small, (const char *)hc_small_hash, "600000"};
        size_t l[] = {kl, sizeof(hc_small), WK_HASH_LEN, 6};
        send_eval(c, sha_hc_put, 1, 4, a, l);
        return;
    }
    unsigned n = op == HC_GET ? i % 16 : 16 + i % 16;
    size_t kl = bench_key(key, "HashedCache", "benchmin", n, NULL);
    const char *a[] = {key, (const char *)hc_big_hash};
    size_t l[] = {kl, WK_HASH_LEN};
    send_eval(c, op == HC_GET ? sha_hc_get : op == HC_HASH ? sha_hc_hash : sha_hc_gic, 1,
              op == HC_GIC ? 2 : 1, a, l);
}

static void hc_min(bench_ctx *c, unsigned base, enum hc_op op)
{
    for (unsigned k = 0; k < BATCH; k++)
        hc_min_send(c, base + k, op);
    for (unsigned k = 0; k < BATCH; k++) {
        redisReply *r = bench_raw_reply(c);
        if (op == HC_GIC && (r->type != REDIS_REPLY_INTEGER || r->integer != 0))
            bench_check(WK_EPROTO, c, "minimal get_if_changed: not unchanged");
        freeReplyObject(r);
    }
}

#define HC_PAIR(fn, op)                                                                     \
    static void fn##_lib(bench_ctx *c, unsigned base) { hc_lib(c, base, op); }              \
    static void fn##_min(bench_ctx *c, unsigned base) { hc_min(c, base, op); }
HC_PAIR(hc_put, HC_PUT)
HC_PAIR(hc_get, HC_GET)
HC_PAIR(hc_hash, HC_HASH)
HC_PAIR(hc_gic, HC_GIC)

static void hc_setup(bench_ctx *c)
{
    memset(hc_small, 's', sizeof(hc_small));
    memset(hc_big, 'b', sizeof(hc_big));
    load_lua(c, min_hc_put, sha_hc_put);
    load_lua(c, min_hc_get, sha_hc_get);
    load_lua(c, min_hc_hash, sha_hc_hash);
    load_lua(c, min_hc_gic, sha_hc_gic);
    hc_fill(c);
}

/* ------------------------------------------------------------------------
 * Settings
 * ---------------------------------------------------------------------- */

static const wk_entity st = WK_SETTINGS_ENTITY("benchcpu");
static char sha_st_put[41], sha_st_remove[41], sha_st_snapshot[41];

/* KEYS: map, version. ARGV: channel, key, value. Same binary-safe message
 * (netstrings), no shape checks. */
static const char min_st_put[] =
    "local v = redis.call('INCR', KEYS[2])\n"
    "redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])\n"
    "redis.call('PUBLISH', ARGV[1], 'P' .. #tostring(v) .. ':' .. v .. ',' .. #ARGV[2] .. ':' .."
    " ARGV[2] .. ',' .. #ARGV[3] .. ':' .. ARGV[3] .. ',')\n"
    "return v\n";
static const char min_st_remove[] =
    "if redis.call('HDEL', KEYS[1], ARGV[2]) == 0 then return {0, redis.call('GET', KEYS[2])} end\n"
    "local v = redis.call('INCR', KEYS[2])\n"
    "redis.call('PUBLISH', ARGV[1], 'R' .. #tostring(v) .. ':' .. v .. ',' .. #ARGV[2] .. ':' .."
    " ARGV[2] .. ',')\n"
    "return {1, v}\n";
static const char min_st_snapshot[] =
    "return {redis.call('GET', KEYS[2]), redis.call('HGETALL', KEYS[1])}\n";

enum st_op { ST_PUT, ST_REMOVE, ST_SNAPSHOT };

/* Keys "k<i>" (value "v<i>") in settings 0 on both sides, for remove. */
static void st_prepare(bench_ctx *c, bool lib, unsigned n)
{
    for (unsigned base = 0; base < n; base += BATCH) {
        int64_t ver[BATCH];
        char kb[BATCH][16];
        for (unsigned k = 0; k < BATCH; k++) {
            int kl = snprintf(kb[k], sizeof(kb[k]), "k%u", base + k);
            if (lib) {
                wk_settings_put(wk_batch_processor(c->batch), &st, wk_name_u64(0), kb[k],
                                (size_t)kl, "v", 1, &ver[k]);
            } else {
                const char *a[] = {"HSET", "@@bench:min:{s}:map", kb[k], "v"};
                size_t l[] = {4, strlen(a[1]), (size_t)kl, 1};
                bench_raw_append(c, 4, a, l);
            }
        }
        if (lib)
            bench_check(wk_batch_exec(c->batch), c, "settings.put");
        else
            for (unsigned k = 0; k < BATCH; k++)
                freeReplyObject(bench_raw_reply(c));
    }
}

static void st_lib(bench_ctx *c, unsigned base, enum st_op op)
{
    int64_t ver[BATCH];
    wk_settings_removal rm[BATCH];
    wk_settings_map *snap[BATCH];
    char kb[BATCH][16];
    wk_processor *p = wk_batch_processor(c->batch);
    for (unsigned k = 0; k < BATCH; k++) {
        int kl = snprintf(kb[k], sizeof(kb[k]), "k%u", base + k);
        snap[k] = NULL;
        if (op == ST_PUT)
            wk_settings_put(p, &st, wk_name_u64(1), kb[k], (size_t)kl, "value", 5, &ver[k]);
        else if (op == ST_REMOVE)
            wk_settings_remove(p, &st, wk_name_u64(0), kb[k], (size_t)kl, &rm[k]);
        else
            wk_settings_snapshot(p, &st, wk_name_u64(2), &snap[k]);
    }
    bench_check(wk_batch_exec(c->batch), c, "settings script");
    for (unsigned k = 0; k < BATCH; k++) {
        if (op == ST_REMOVE && !rm[k].removed)
            bench_check(WK_EPROTO, c, "settings.remove: not removed");
        wk_settings_map_free(snap[k]);
    }
}

static void st_min(bench_ctx *c, unsigned base, enum st_op op)
{
    static const char map0[] = "@@bench:min:{s}:map", ver0[] = "@@bench:min:{s}:version",
                      map1[] = "@@bench:min:{s1}:map", ver1[] = "@@bench:min:{s1}:version",
                      map2[] = "@@bench:min:{s2}:map", ver2[] = "@@bench:min:{s2}:version";
    for (unsigned k = 0; k < BATCH; k++) {
        char kb[16];
        int kl = snprintf(kb, sizeof(kb), "k%u", base + k);
        if (op == ST_PUT) {
            const char *a[] = {map1, ver1, "@@bench:min:chan", kb, "value"};
            size_t l[] = {sizeof(map1) - 1, sizeof(ver1) - 1, 16, (size_t)kl, 5};
            send_eval(c, sha_st_put, 2, 5, a, l);
        } else if (op == ST_REMOVE) {
            const char *a[] = {map0, ver0, "@@bench:min:chan", kb};
            size_t l[] = {sizeof(map0) - 1, sizeof(ver0) - 1, 16, (size_t)kl};
            send_eval(c, sha_st_remove, 2, 4, a, l);
        } else {
            const char *a[] = {map2, ver2};
            size_t l[] = {sizeof(map2) - 1, sizeof(ver2) - 1};
            send_eval(c, sha_st_snapshot, 2, 2, a, l);
        }
    }
    for (unsigned k = 0; k < BATCH; k++)
        freeReplyObject(bench_raw_reply(c));
}

#define ST_PAIR(fn, op)                                                                     \
    static void fn##_lib(bench_ctx *c, unsigned base) { st_lib(c, base, op); }              \
    static void fn##_min(bench_ctx *c, unsigned base) { st_min(c, base, op); }
ST_PAIR(st_put, ST_PUT)
ST_PAIR(st_remove, ST_REMOVE)
ST_PAIR(st_snapshot, ST_SNAPSHOT)

static void st_setup(bench_ctx *c)
{
    load_lua(c, min_st_put, sha_st_put);
    load_lua(c, min_st_remove, sha_st_remove);
    load_lua(c, min_st_snapshot, sha_st_snapshot);
    /* Settings 2 on both sides: a 10-entry map for the snapshots. */
    for (unsigned i = 0; i < 10; i++) {
        char kb[16];
        int kl = snprintf(kb, sizeof(kb), "key%u", i);
        int64_t v;
        bench_check(wk_settings_put(wk_db_processor(c->db), &st, wk_name_u64(2), kb, (size_t)kl,
                                    "a value", 7, &v),
                    c, "settings.put");
        freeReplyObject(redisCommand(c->raw, "HSET @@bench:min:{s2}:map %s %s", kb, "a value"));
        freeReplyObject(redisCommand(c->raw, "INCR @@bench:min:{s2}:version"));
    }
}

/* ------------------------------------------------------------------------
 * The table
 * ---------------------------------------------------------------------- */

typedef struct script_case {
    const char *script; /* the library's script */
    const char *minimal; /* what the minimal one is */
    void (*setup)(bench_ctx *c);
    void (*prepare)(bench_ctx *c, bool lib, unsigned n); /* before each run, may be NULL */
    void (*lib)(bench_ctx *c, unsigned base);            /* 64 calls */
    void (*min)(bench_ctx *c, unsigned base);
} script_case;

static const script_case script_cases[] = {
    {"token_bucket.acquire (allowed)", "HMGET, refill, HSET, PEXPIRE", tb_setup, NULL,
     tb_acquire_lib, tb_acquire_min},
    {"token_bucket.acquire (denied)", "HMGET, refill, no write", NULL, NULL, tb_denied_lib,
     tb_denied_min},
    {"token_bucket.peek", "HMGET, refill", NULL, NULL, tb_peek_lib, tb_peek_min},
    {"lock.release", "GET, compare, DEL", lock_setup, lock_prepare, lock_release_lib,
     lock_release_min},
    {"lock.extend", "GET, compare, PEXPIRE", NULL, lock_prepare, lock_extend_lib,
     lock_extend_min},
    {"rwlock.try_read", "EXISTS, ZREMRANGEBYSCORE, ZADD, PEXPIRE", rw_setup, rw_prepare_clear,
     rw_try_read_lib, rw_try_read_min},
    {"rwlock.try_write", "ZCOUNT running, SET NX PX", NULL, rw_prepare_clear, rw_try_write_lib,
     rw_try_write_min},
    {"rwlock.release_read", "ZSCORE, ZREM", NULL, rw_prepare_leases, rw_release_read_lib,
     rw_release_read_min},
    {"rwlock.extend_read", "ZSCORE, ZADD, PEXPIRE", NULL, rw_prepare_leases, rw_extend_read_lib,
     rw_extend_read_min},
    {"rwlock.inspect", "PTTL, ZCOUNT", NULL, NULL, rw_inspect_lib, rw_inspect_min},
    {"hashed_cache.put (1 KiB)", "HSET, PEXPIRE", hc_setup, NULL, hc_put_lib, hc_put_min},
    {"hashed_cache.get (1 KiB)", "HMGET", NULL, NULL, hc_get_lib, hc_get_min},
    {"hashed_cache.hash", "HGET", NULL, NULL, hc_hash_lib, hc_hash_min},
    {"hashed_cache.get_if_changed (same)", "HGET, compare", NULL, NULL, hc_gic_lib, hc_gic_min},
    {"settings.put", "INCR, HSET, PUBLISH", st_setup, NULL, st_put_lib, st_put_min},
    {"settings.remove", "HDEL, INCR, PUBLISH", NULL, st_prepare, st_remove_lib, st_remove_min},
    {"settings.snapshot (10 keys)", "GET, HGETALL", NULL, NULL, st_snapshot_lib,
     st_snapshot_min},
};

/* cmdstat_evalsha since the last CONFIG RESETSTAT. */
static void evalsha_stats(bench_ctx *c, long long *calls, long long *usec)
{
    *calls = (long long)bench_cmdstat(c->raw, "evalsha", "calls");
    *usec = (long long)bench_cmdstat(c->raw, "evalsha", "usec");
}

/* Server µs per call of n calls made by `run` (64 at a time). */
static double server_usec(bench_ctx *c, const script_case *sc, bool lib, unsigned n)
{
    if (sc->prepare)
        sc->prepare(c, lib, n);
    freeReplyObject(redisCommand(c->raw, "CONFIG RESETSTAT"));
    for (unsigned base = 0; base < n; base += BATCH)
        (lib ? sc->lib : sc->min)(c, base);
    long long calls, usec;
    evalsha_stats(c, &calls, &usec);
    if (calls != (long long)n) {
        fprintf(stderr, "bench: %s: %lld EVALSHA calls, expected %u\n", sc->script, calls, n);
        exit(1);
    }
    return (double)usec / (double)calls;
}

void bench_scripts_run(bench_ctx *c, int reps, unsigned n, const char *filter)
{
    printf("Server time per script call (INFO commandstats: cmdstat_evalsha usec / calls,\n"
           "%u calls in batches of 64 after CONFIG RESETSTAT, median of %d runs per side)\n\n",
           n, reps);
    printf("| %-34s | %8s | %8s | %5s | %-40s |\n", "library script", "µs/call", "minimal",
           "ratio", "minimal script");
    printf("|%s|%s|%s|%s|%s|\n", "------------------------------------", "----------",
           "----------", "-------", "------------------------------------------");
    for (size_t i = 0; i < sizeof(script_cases) / sizeof(script_cases[0]); i++) {
        const script_case *sc = &script_cases[i];
        if (sc->setup)
            sc->setup(c); /* always: later cases rely on their group's setup */
        if (filter && !strstr(sc->script, filter))
            continue;
        server_usec(c, sc, true, n); /* warm-up: scripts loaded, keys there */
        server_usec(c, sc, false, n);
        double lib[32], min[32];
        for (int r = 0; r < reps; r++) {
            if (r % 2) {
                min[r] = server_usec(c, sc, false, n);
                lib[r] = server_usec(c, sc, true, n);
            } else {
                lib[r] = server_usec(c, sc, true, n);
                min[r] = server_usec(c, sc, false, n);
            }
        }
        qsort(lib, (size_t)reps, sizeof(double), cmp_double);
        qsort(min, (size_t)reps, sizeof(double), cmp_double);
        double l = lib[reps / 2], m = min[reps / 2];
        printf("| %-34s | %8.2f | %8.2f | %5.2f | %-40s |\n", sc->script, l, m, l / m,
               sc->minimal);
        fflush(stdout);
    }
    printf("\n");
}

/* ------------------------------------------------------------------------
 * Batch cases against the minimal scripts (bench_redis's main table)
 * ---------------------------------------------------------------------- */

static void tbm_seq_lib(bench_ctx *c, unsigned i)
{
    wk_token_bucket_outcome o;
    bench_check(wk_token_bucket_acquire(wk_db_processor(c->db), &tb_big, wk_name_u64(i % 1024), 1,
                                        &o),
                c, "token_bucket.acquire");
}

static void tbm_seq_raw(bench_ctx *c, unsigned i)
{
    tb_min_send(c, sha_tb_acquire, "benchmin", i, "1000000000", "1000000", true);
    freeReplyObject(bench_raw_reply(c));
}

static void tbm_setup(bench_ctx *c)
{
    load_lua(c, min_bucket_acquire, sha_tb_acquire);
}

static void hcm_seq_lib(bench_ctx *c, unsigned i)
{
    wk_body out = WK_BODY_INIT;
    bench_check(wk_hashed_cache_get_if_changed(wk_db_processor(c->db), &hc, wk_name_u64(16 + i % 16),
                                               hc_big_hash, &out),
                c, "hashed_cache.get_if_changed");
    wk_body_free(&out);
}

static void hcm_seq_raw(bench_ctx *c, unsigned i)
{
    hc_min_send(c, i, HC_GIC);
    freeReplyObject(bench_raw_reply(c));
}

static void hcm_setup(bench_ctx *c)
{
    memset(hc_big, 'b', sizeof(hc_big));
    memset(hc_small, 's', sizeof(hc_small));
    load_lua(c, min_hc_gic, sha_hc_gic);
    hc_fill(c);
}

/* ------------------------------------------------------------------------
 * Lease cycles (try + release, nobody waiting) against the minimal scripts
 * ---------------------------------------------------------------------- */

static const wk_entity cyc_lock = WK_LOCK_ENTITY("benchcyc", 30000);
static const wk_entity cyc_fenced = WK_FENCED_LOCK_ENTITY("benchcyc", 30000);
static const wk_entity cyc_rw = WK_RWLOCK_ENTITY("benchcyc", 30000);
static const wk_entity cyc_sem = WK_SEMAPHORE_ENTITY("benchcyc", 4, 30000);
static char sha_fenced_try[41], sha_sem_try[41];

/* The fence drawn only when the lease is taken. */
static const char min_fenced_try[] =
    "if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end\n"
    "return redis.call('INCR', KEYS[2])\n";
/* Ended permits pruned, then counted; the set lives as long as its newest
 * permit (one TTL for the entity). Given back like a reader lease. */
static const char min_sem_try[] =
    MIN_NOW "redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)\n"
    "if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then return 0 end\n"
    "redis.call('ZADD', KEYS[1], now + ARGV[2], ARGV[1])\n"
    "redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
    "return 1\n";

enum cyc_kind { CYC_LOCK, CYC_FENCED, CYC_RW, CYC_SEM };

static void cyc_lib(wk_processor *p, enum cyc_kind k, unsigned i, wk_token *t, bool *got,
                    bool release)
{
    wk_name n = wk_name_u64(i);
    wk_fenced_lease l;
    switch (k) {
    case CYC_LOCK:
        release ? wk_lock_release(p, &cyc_lock, n, t, got) : wk_lock_try(p, &cyc_lock, n, t, got);
        break;
    case CYC_FENCED:
        if (release) {
            wk_fenced_lock_release(p, &cyc_fenced, n, t, got);
        } else {
            wk_fenced_lock_try(p, &cyc_fenced, n, &l); /* a batch fills l at exec: not here */
            *t = l.token;
            *got = true;
        }
        break;
    case CYC_RW:
        release ? wk_rwlock_release_read(p, &cyc_rw, n, t, got)
                : wk_rwlock_try_read(p, &cyc_rw, n, t, got);
        break;
    case CYC_SEM:
        release ? wk_semaphore_release(p, &cyc_sem, n, t, got)
                : wk_semaphore_try(p, &cyc_sem, n, t, got);
        break;
    }
}

static void cyc_seq_lib(bench_ctx *c, enum cyc_kind k, unsigned i)
{
    wk_token t;
    bool got = false, ok = false;
    cyc_lib(wk_db_processor(c->db), k, i, &t, &got, false);
    cyc_lib(wk_db_processor(c->db), k, i, &t, &ok, true);
    if (!got || !ok)
        bench_check(WK_EPROTO, c, "lease cycle: not taken or not given back");
}

/* A batch of fenced tries writes its leases at exec, so they are kept here. */
static void cyc_batch_lib(bench_ctx *c, enum cyc_kind k, unsigned base)
{
    static wk_token t[BATCH];
    static wk_fenced_lease l[BATCH];
    static bool got[BATCH], ok[BATCH];
    wk_processor *p = wk_batch_processor(c->batch);
    for (unsigned j = 0; j < BATCH; j++) {
        if (k == CYC_FENCED)
            wk_fenced_lock_try(p, &cyc_fenced, wk_name_u64(base + j), &l[j]);
        else
            cyc_lib(p, k, base + j, &t[j], &got[j], false);
    }
    bench_check(wk_batch_exec(c->batch), c, "batch lease try");
    for (unsigned j = 0; j < BATCH; j++) {
        if (k == CYC_FENCED)
            t[j] = l[j].token;
        cyc_lib(p, k, base + j, &t[j], &ok[j], true);
    }
    bench_check(wk_batch_exec(c->batch), c, "batch lease release");
    for (unsigned j = 0; j < BATCH; j++)
        if (!ok[j])
            bench_check(WK_EPROTO, c, "batch lease cycle: not given back");
}

/* The minimal try of item i (keys of namespace benchmin) queued. */
static void cyc_try_raw(bench_ctx *c, enum cyc_kind k, unsigned i)
{
    char k1[128], k2[128];
    uint8_t tok[WK_TOKEN_LEN];
    size_t l1, l2;
    token_of(i, tok);
    switch (k) {
    case CYC_LOCK: {
        l1 = bench_key(k1, "Lock", "benchmin", i, NULL);
        const char *a[] = {"SET", k1, (const char *)tok, "NX", "PX", "30000"};
        size_t l[] = {3, l1, WK_TOKEN_LEN, 2, 2, 5};
        bench_raw_append(c, 6, a, l);
        break;
    }
    case CYC_FENCED: {
        l1 = bench_key(k1, "FencedLock", "benchmin", i, ":lease");
        l2 = bench_key(k2, "FencedLock", "benchmin", i, ":fence");
        const char *a[] = {k1, k2, (const char *)tok, "30000"};
        size_t l[] = {l1, l2, WK_TOKEN_LEN, 5};
        send_eval(c, sha_fenced_try, 2, 4, a, l);
        break;
    }
    case CYC_RW: {
        rw_keys("benchmin", i, k1, &l1, k2, &l2);
        const char *a[] = {k1, k2, (const char *)tok, "30000"};
        size_t l[] = {l1, l2, WK_TOKEN_LEN, 5};
        send_eval(c, sha_rw_try_read, 2, 4, a, l);
        break;
    }
    case CYC_SEM: {
        l1 = bench_key(k1, "Semaphore", "benchmin", i, ":permits");
        const char *a[] = {k1, (const char *)tok, "30000", "4"};
        size_t l[] = {l1, WK_TOKEN_LEN, 5, 1};
        send_eval(c, sha_sem_try, 1, 4, a, l);
        break;
    }
    }
}

static void cyc_release_raw(bench_ctx *c, enum cyc_kind k, unsigned i)
{
    char key[128], w[128];
    uint8_t tok[WK_TOKEN_LEN];
    size_t kl, wl;
    token_of(i, tok);
    if (k == CYC_LOCK)
        kl = bench_key(key, "Lock", "benchmin", i, NULL);
    else if (k == CYC_FENCED)
        kl = bench_key(key, "FencedLock", "benchmin", i, ":lease");
    else if (k == CYC_RW)
        rw_keys("benchmin", i, w, &wl, key, &kl);
    else
        kl = bench_key(key, "Semaphore", "benchmin", i, ":permits");
    const char *a[] = {key, (const char *)tok};
    size_t l[] = {kl, WK_TOKEN_LEN};
    send_eval(c, k == CYC_LOCK || k == CYC_FENCED ? sha_lock_release : sha_rw_release_read, 1, 2,
              a, l);
}

static void cyc_check_raw(bench_ctx *c, bool try)
{
    redisReply *r = bench_raw_reply(c);
    bool ok = r->type == REDIS_REPLY_STATUS || (r->type == REDIS_REPLY_INTEGER && r->integer >= 1);
    freeReplyObject(r);
    if (!ok)
        bench_check(WK_EPROTO, c, try ? "minimal try: not taken" : "minimal release: not held");
}

static void cyc_seq_raw(bench_ctx *c, enum cyc_kind k, unsigned i)
{
    cyc_try_raw(c, k, i);
    cyc_check_raw(c, true);
    cyc_release_raw(c, k, i);
    cyc_check_raw(c, false);
}

static void cyc_batch_raw(bench_ctx *c, enum cyc_kind k, unsigned base)
{
    for (unsigned j = 0; j < BATCH; j++)
        cyc_try_raw(c, k, base + j);
    for (unsigned j = 0; j < BATCH; j++)
        cyc_check_raw(c, true);
    for (unsigned j = 0; j < BATCH; j++)
        cyc_release_raw(c, k, base + j);
    for (unsigned j = 0; j < BATCH; j++)
        cyc_check_raw(c, false);
}

static void cyc_setup(bench_ctx *c)
{
    lock_setup(c);
    rw_setup(c);
    load_lua(c, min_fenced_try, sha_fenced_try);
    load_lua(c, min_sem_try, sha_sem_try);
}

#define CYCLE_CASE(fn, kind)                                                                       \
    static void fn##_seq_lib(bench_ctx *c, unsigned i) { cyc_seq_lib(c, kind, i); }                \
    static void fn##_seq_raw(bench_ctx *c, unsigned i) { cyc_seq_raw(c, kind, i); }                \
    static void fn##_batch_lib(bench_ctx *c, unsigned b) { cyc_batch_lib(c, kind, b); }            \
    static void fn##_batch_raw(bench_ctx *c, unsigned b) { cyc_batch_raw(c, kind, b); }
CYCLE_CASE(cyc_lock, CYC_LOCK)
CYCLE_CASE(cyc_fenced, CYC_FENCED)
CYCLE_CASE(cyc_rw, CYC_RW)
CYCLE_CASE(cyc_sem, CYC_SEM)
#define CYCLE_ROW(name, fn)                                                                        \
    {name, cyc_setup, fn##_seq_lib, fn##_seq_raw, fn##_batch_lib, fn##_batch_raw}

const bench_case bench_minimal_cases[] = {
    {"token bucket acquire vs minimal script", tbm_setup, tbm_seq_lib, tbm_seq_raw,
     tb_acquire_lib, tb_acquire_min},
    {"hashed revalidation vs minimal script", hcm_setup, hcm_seq_lib, hcm_seq_raw, hc_gic_lib,
     hc_gic_min},
    CYCLE_ROW("lock cycle vs minimal scripts", cyc_lock),
    CYCLE_ROW("fenced lock cycle vs minimal scripts", cyc_fenced),
    CYCLE_ROW("rwlock read cycle vs minimal scripts", cyc_rw),
    CYCLE_ROW("semaphore cycle vs minimal scripts", cyc_sem),
};
const size_t bench_minimal_cases_count = sizeof(bench_minimal_cases) / sizeof(bench_minimal_cases[0]);
