/*
 * collection/fenced_lock.c — FencedLock: a lease hash {token, fence} and a
 * counter key without expiry that the acquire script INCRs, so fences
 * strictly increase per name across leases (wakuwaku/fenced_lock.h).
 */
#include <stdlib.h>

#include <wakuwaku/fenced_lock.h>

#include "collection/common.h"
#include "collection/deadline.h"
#include "entity/kind.h"

/* The kind (entity/kind.h): wk_entity_check() wants ttl_ms > 0. */
WK__KIND(fenced_lock) = {WK_KIND_FENCED_LOCK, wk__entity_check_ttl};

/* KEYS: lease, fence. ARGV: token, ttl. Returns the new fence, or 0 when
 * held. The counter is INCR'd only when the lock is taken, so a refused
 * try spends no fence. */
static const wk_script try_script = {
    "fenced_lock.try", "if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end\n"
                       "local f = redis.call('INCR', KEYS[2])\n"
                       "redis.call('HSET', KEYS[1], 'token', ARGV[1], 'fence', f)\n"
                       "redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
                       "return f\n"};

/* KEYS: lease, fence. ARGV: token. 1 if it held the token. */
static const wk_script release_script = {
    "fenced_lock.release", "if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end\n"
                           "redis.call('DEL', KEYS[1])\n"
                           "return 1\n"};

/* KEYS: lease, fence. ARGV: token, ttl. */
static const wk_script extend_script = {
    "fenced_lock.extend", "if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end\n"
                          "redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
                          "return 1\n"};

/* KEYS: lease, fence. ARGV: token. {1, pttl, fence} or {0}. Reads only. */
static const wk_script owned_script = {
    "fenced_lock.owned",
    "local v = redis.call('HMGET', KEYS[1], 'token', 'fence')\n"
    "if v[1] ~= ARGV[1] then return {0} end\n"
    "return {1, redis.call('PTTL', KEYS[1]), v[2]}\n"};

/* KEYS: lease, fence. {pttl of the lease, the counter}. Reads only. */
static const wk_script inspect_script = {
    "fenced_lock.inspect",
    "return {redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2])}\n"};

/* KEYS: lease, fence. 1 if a lease was there. The counter stays. */
static const wk_script force_release_script = {"fenced_lock.force_release",
                                               "return redis.call('DEL', KEYS[1])\n"};

typedef struct keys {
    char lease[WK_KEY_MAX], fence[WK_KEY_MAX];
    size_t len;
} keys;

/* Checks the arguments and builds both keys. `out` is the outcome the
 * call needs (NULL: refused). */
static int prepare(wk_processor *p, const char *op, const wk_entity *e, const wk_name *name,
                   keys *k, const void *out)
{
    int rc = wk__prepare(p, op, e, WK_KIND_FENCED_LOCK, name, ":lease", k->lease, &k->len);
    if (rc)
        return rc;
    /* "…}:lease" and "…}:fence" have the same length: copy, then change
     * the suffix, rather than check and build the key twice. */
    memcpy(k->fence, k->lease, k->len + 1);
    memcpy(k->fence + k->len - 5, "fence", 5);
    if (!out)
        return wk__processor_fail(p, WK_EINVAL, "%s: an outcome is required", op);
    return WK_OK;
}

/* Runs `script` on both keys with up to two arguments. */
static int run(wk_processor *p, const char *op, const wk_script *script, const wk_entity *e,
               const keys *k, wk_mode mode, const char *arg1, size_t arg1_len, bool with_ttl,
               wk_parse_fn parse, void *out)
{
    char ttl[24];
    const char *argv[4] = {k->lease, k->fence, arg1, ttl};
    size_t argvlen[4] = {k->len, k->len, arg1_len, with_ttl ? wk__fmt_i64(ttl, e->ttl_ms) : 0};
    wk_access access = {e, mode};
    wk_query q = {.name = op,
                  .effect = WK__EFFECT1(access),
                  .flags = mode == WK_READ ? WK_QUERY_RETRY_SAFE : 0,
                  .script = script,
                  .nkeys = 2,
                  .argc = 2 + (arg1 ? 1 : 0) + (with_ttl ? 1 : 0),
                  .argv = argv,
                  .argvlen = argvlen,
                  .parse = parse,
                  .out = out};
    return wk_process(p, &q);
}

static int parse_try(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    if (wk_reply_get_type(r) != WK_REPLY_INTEGER || wk_reply_integer(r) < 0)
        return wk_diag_fail(d, WK_EPROTO, "expected a fence or 0");
    wk_fenced_lease *lease = q->out;
    lease->fence = wk_reply_integer(r);
    lease->acquired = lease->fence > 0;
    return WK_OK;
}

int wk_fenced_lock_try(wk_processor *p, const wk_entity *lock, wk_name name,
                       wk_fenced_lease *lease)
{
    keys k;
    int rc = prepare(p, "fenced_lock.try", lock, &name, &k, lease);
    if (rc)
        return rc;
    /* Written now, so a batch's caller has the token before it runs. */
    lease->acquired = false;
    lease->fence = 0;
    wk_token_random(&lease->token);
    return run(p, "fenced_lock.try", &try_script, lock, &k, WK_WRITE,
               (const char *)lease->token.bytes, WK_TOKEN_LEN, true, parse_try, lease);
}

/* release / extend: a token, a bool outcome. */
static int token_op(wk_processor *p, const char *op, const wk_script *script,
                    const wk_entity *lock, const wk_name *name, const wk_token *token,
                    bool with_ttl, bool *out)
{
    keys k;
    int rc = prepare(p, op, lock, name, &k, token ? (const void *)out : NULL);
    if (rc)
        return rc;
    *out = false;
    return run(p, op, script, lock, &k, WK_WRITE, (const char *)token->bytes, WK_TOKEN_LEN,
               with_ttl, wk__parse_bool_int, out);
}

int wk_fenced_lock_release(wk_processor *p, const wk_entity *lock, wk_name name,
                           const wk_token *token, bool *released)
{
    return token_op(p, "fenced_lock.release", &release_script, lock, &name, token, false,
                    released);
}

int wk_fenced_lock_extend(wk_processor *p, const wk_entity *lock, wk_name name,
                          const wk_token *token, bool *extended)
{
    return token_op(p, "fenced_lock.extend", &extend_script, lock, &name, token, true, extended);
}

/* A fence as the server stores it: a decimal string (nil: 0). */
static int fence_of(const wk_reply *r, int64_t *fence, wk_diag *d)
{
    *fence = 0;
    if (wk_reply_get_type(r) == WK_REPLY_NIL)
        return WK_OK;
    size_t len;
    const char *s = wk_reply_str(r, &len);
    char buf[24], *end;
    if (wk_reply_get_type(r) != WK_REPLY_STRING || len == 0 || len >= sizeof(buf))
        return wk_diag_fail(d, WK_ECORRUPT, "a fence is not an integer");
    memcpy(buf, s, len);
    buf[len] = '\0';
    long long v = strtoll(buf, &end, 10);
    if (*end != '\0' || v < 0)
        return wk_diag_fail(d, WK_ECORRUPT, "a fence is not an integer");
    *fence = v;
    return WK_OK;
}

static int parse_owned(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    wk_fenced_lock_ownership *st = q->out;
    const wk_reply *flag = wk_reply_at(r, 0);
    if (wk_reply_get_type(flag) != WK_REPLY_INTEGER)
        return wk_diag_fail(d, WK_EPROTO, "expected {1, pttl, fence} or {0}");
    if (wk_reply_integer(flag) == 0)
        return WK_OK;
    const wk_reply *pttl = wk_reply_at(r, 1);
    if (wk_reply_count(r) != 3 || wk_reply_get_type(pttl) != WK_REPLY_INTEGER)
        return wk_diag_fail(d, WK_EPROTO, "expected {1, pttl, fence} or {0}");
    int rc = fence_of(wk_reply_at(r, 2), &st->fence, d);
    if (rc)
        return rc;
    st->owned = true;
    st->ttl_ms = wk_reply_integer(pttl);
    return WK_OK;
}

int wk_fenced_lock_owned(wk_processor *p, const wk_entity *lock, wk_name name,
                         const wk_token *token, wk_fenced_lock_ownership *state)
{
    keys k;
    int rc = prepare(p, "fenced_lock.owned", lock, &name, &k, token ? (const void *)state : NULL);
    if (rc)
        return rc;
    *state = (wk_fenced_lock_ownership){false, 0, 0};
    return run(p, "fenced_lock.owned", &owned_script, lock, &k, WK_READ,
               (const char *)token->bytes, WK_TOKEN_LEN, false, parse_owned, state);
}

static int parse_inspect(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    wk_fenced_lock_state *st = q->out;
    const wk_reply *pttl = wk_reply_at(r, 0);
    if (wk_reply_count(r) != 2 || wk_reply_get_type(pttl) != WK_REPLY_INTEGER)
        return wk_diag_fail(d, WK_EPROTO, "expected {pttl, fence}");
    int rc = fence_of(wk_reply_at(r, 1), &st->last_fence, d);
    if (rc)
        return rc;
    long long ttl = wk_reply_integer(pttl);
    st->held = ttl != -2;
    st->ttl_ms = ttl == -2 ? 0 : ttl;
    return WK_OK;
}

int wk_fenced_lock_inspect(wk_processor *p, const wk_entity *lock, wk_name name,
                           wk_fenced_lock_state *state)
{
    keys k;
    int rc = prepare(p, "fenced_lock.inspect", lock, &name, &k, state);
    if (rc)
        return rc;
    *state = (wk_fenced_lock_state){false, 0, 0};
    return run(p, "fenced_lock.inspect", &inspect_script, lock, &k, WK_READ, NULL, 0, false,
               parse_inspect, state);
}

int wk_fenced_lock_force_release(wk_processor *p, const wk_entity *lock, wk_name name,
                                 bool *freed)
{
    keys k;
    int rc = prepare(p, "fenced_lock.force_release", lock, &name, &k, freed);
    if (rc)
        return rc;
    *freed = false;
    return run(p, "fenced_lock.force_release", &force_release_script, lock, &k, WK_WRITE, NULL,
               0, false, wk__parse_bool_int, freed);
}

/* One try of wk_fenced_lock_acquire(), as wk__deadline_acquire() calls it. */
typedef struct fenced_try {
    wk_processor *p;
    const wk_entity *lock;
    wk_name name;
    wk_fenced_lease *lease;
} fenced_try;

static int try_once(void *ctx, bool *acquired)
{
    fenced_try *t = ctx;
    int rc = wk_fenced_lock_try(t->p, t->lock, t->name, t->lease);
    *acquired = rc == WK_OK && t->lease->acquired;
    return rc;
}

int wk_fenced_lock_acquire(wk_processor *p, const wk_entity *lock, wk_name name,
                           int64_t deadline, const wk_backoff *backoff, wk_fenced_lease *lease)
{
    bool acquired;
    if (p && p->process && !lease)
        return wk__processor_fail(p, WK_EINVAL, "fenced_lock.acquire: lease is required");
    if (lease)
        lease->acquired = false;
    fenced_try t = {p, lock, name, lease};
    return wk__deadline_acquire("fenced_lock.acquire", p, deadline, backoff, try_once, &t,
                                &acquired);
}
