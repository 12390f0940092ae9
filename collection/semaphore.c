/*
 * collection/semaphore.c — Semaphore: one sorted set of permit tokens
 * scored by the end of their lease (server ms). Every script reads TIME and
 * drops ended leases first; the bound N travels with each try
 * (wakuwaku/semaphore.h). The deadline acquire is in deadline.c.
 */
#include <math.h>

#include <wakuwaku/semaphore.h>

#include "collection/common.h"
#include "collection/lock_scripts.h"
#include "entity/kind.h"

/* permits: a whole number in 1..WK_SEMAPHORE_PERMITS_MAX; then the TTL. */
static int check_params(const wk_entity *e, char *msg, size_t len)
{
    if (!(e->capacity >= 1 && e->capacity <= WK_SEMAPHORE_PERMITS_MAX) ||
        e->capacity != floor(e->capacity))
        return wk__entity_fail(msg, len,
                               "permits must be a whole number from 1 to %d (got %g)",
                               WK_SEMAPHORE_PERMITS_MAX, e->capacity);
    return wk__entity_check_ttl(e, msg, len);
}

WK__KIND(semaphore) = {WK_KIND_SEMAPHORE, check_params};

/* Server time in ms; the prologue of the scripts below. */
#define NOW_MS "local t = redis.call('TIME')\nlocal now = t[1] * 1000 + math.floor(t[2] / 1000)\n"

/* KEYS: permits. ARGV: token, ttl, N. 1 if taken. */
static const wk_script try_script = {
    "semaphore.try",
    NOW_MS "local ttl = tonumber(ARGV[2])\n"
           "redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)\n"
           "if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then return 0 end\n"
           "redis.call('ZADD', KEYS[1], string.format('%.0f', now + ttl), ARGV[1])\n"
           "if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end\n"
           "return 1\n"};

/* KEYS: permits. ARGV: token. {1, ms left} or {0}. Reads only. */
static const wk_script owned_script = {
    "semaphore.owned", NOW_MS "local s = redis.call('ZSCORE', KEYS[1], ARGV[1])\n"
                              "if not s or tonumber(s) <= now then return {0} end\n"
                              "return {1, tonumber(s) - now}\n"};

/* KEYS: permits. Running permits. Reads only. */
static const wk_script inspect_script = {
    "semaphore.inspect",
    NOW_MS "return redis.call('ZCOUNT', KEYS[1], '(' .. string.format('%.0f', now), '+inf')\n"};

/* KEYS: permits. The permits that were running; deletes the set. */
static const wk_script force_release_script = {
    "semaphore.force_release",
    NOW_MS "local n = redis.call('ZCOUNT', KEYS[1], '(' .. string.format('%.0f', now), '+inf')\n"
           "redis.call('DEL', KEYS[1])\n"
           "return n\n"};

static int prepare(wk_processor *p, const char *op, const wk_entity *e, const wk_name *name,
                   char *key, size_t *key_len, const void *out)
{
    int rc = wk__prepare(p, op, e, WK_KIND_SEMAPHORE, name, ":permits", key, key_len);
    if (!rc && !out)
        rc = wk__processor_fail(p, WK_EINVAL, "%s: token and outcome are required", op);
    return rc;
}

/* Runs `script` on the permit set with up to three arguments. */
static int run(wk_processor *p, const char *op, const wk_script *script, const wk_entity *e,
               wk_mode mode, const char *const *argv, const size_t *argvlen, int argc,
               wk_parse_fn parse, void *out)
{
    wk_access access = {e, mode};
    wk_query q = {.name = op,
                  .effect = WK__EFFECT1(access),
                  .flags = mode == WK_READ ? WK_QUERY_RETRY_SAFE : 0,
                  .script = script,
                  .nkeys = 1,
                  .argc = argc,
                  .argv = argv,
                  .argvlen = argvlen,
                  .parse = parse,
                  .out = out};
    return wk_process(p, &q);
}

int wk_semaphore_try(wk_processor *p, const wk_entity *sem, wk_name name, wk_token *token,
                     bool *acquired)
{
    char key[WK_KEY_MAX], ttl[24], n[24];
    size_t key_len;
    int rc = prepare(p, "semaphore.try", sem, &name, key, &key_len, token ? acquired : NULL);
    if (rc)
        return rc;
    *acquired = false;
    wk_token_random(token);
    const char *argv[4] = {key, (const char *)token->bytes, ttl, n};
    size_t argvlen[4] = {key_len, WK_TOKEN_LEN, wk__fmt_i64(ttl, sem->ttl_ms),
                         wk__fmt_i64(n, (int64_t)sem->capacity)};
    return run(p, "semaphore.try", &try_script, sem, WK_WRITE, argv, argvlen, 4,
               wk__parse_bool_int, acquired);
}

/* release / extend: a permit's lease behaves as an RwLock reader's, so
 * they run the RwLock reader scripts on the permit set. */
static int token_op(wk_processor *p, const char *op, const wk_script *script,
                    const wk_entity *sem, const wk_name *name, const wk_token *token,
                    bool with_ttl, bool *out)
{
    char key[WK_KEY_MAX];
    size_t key_len;
    int rc = prepare(p, op, sem, name, key, &key_len, token ? out : NULL);
    if (rc)
        return rc;
    *out = false;
    return wk__token_script(p, op, script, sem, key, key_len, token, with_ttl, out);
}

int wk_semaphore_release(wk_processor *p, const wk_entity *sem, wk_name name,
                         const wk_token *token, bool *was_running)
{
    return token_op(p, "semaphore.release", &wk__rwlock_release_read_script, sem, &name, token,
                    false, was_running);
}

int wk_semaphore_extend(wk_processor *p, const wk_entity *sem, wk_name name,
                        const wk_token *token, bool *extended)
{
    return token_op(p, "semaphore.extend", &wk__rwlock_extend_read_script, sem, &name, token,
                    true, extended);
}

static int parse_owned(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    wk_semaphore_ownership *st = q->out;
    const wk_reply *flag = wk_reply_at(r, 0), *left = wk_reply_at(r, 1);
    if (wk_reply_get_type(flag) != WK_REPLY_INTEGER)
        return wk_diag_fail(d, WK_EPROTO, "expected {1, ms} or {0}");
    if (wk_reply_integer(flag) == 0)
        return WK_OK;
    if (wk_reply_count(r) != 2 || wk_reply_get_type(left) != WK_REPLY_INTEGER)
        return wk_diag_fail(d, WK_EPROTO, "expected {1, ms} or {0}");
    st->owned = true;
    st->ttl_ms = wk_reply_integer(left);
    return WK_OK;
}

int wk_semaphore_owned(wk_processor *p, const wk_entity *sem, wk_name name,
                       const wk_token *token, wk_semaphore_ownership *state)
{
    char key[WK_KEY_MAX];
    size_t key_len;
    int rc = prepare(p, "semaphore.owned", sem, &name, key, &key_len, token ? state : NULL);
    if (rc)
        return rc;
    *state = (wk_semaphore_ownership){false, 0};
    const char *argv[2] = {key, (const char *)token->bytes};
    size_t argvlen[2] = {key_len, WK_TOKEN_LEN};
    return run(p, "semaphore.owned", &owned_script, sem, WK_READ, argv, argvlen, 2, parse_owned,
               state);
}

static int parse_count(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    if (wk_reply_get_type(r) != WK_REPLY_INTEGER || wk_reply_integer(r) < 0)
        return wk_diag_fail(d, WK_EPROTO, "expected a count");
    *(int64_t *)q->out = wk_reply_integer(r);
    return WK_OK;
}

static int parse_inspect(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    if (wk_reply_get_type(r) != WK_REPLY_INTEGER || wk_reply_integer(r) < 0)
        return wk_diag_fail(d, WK_EPROTO, "expected a count");
    /* `available` holds the entity's N until the reply comes (a batch
     * parses after the call returned, so the entity may be gone). */
    wk_semaphore_state *st = q->out;
    st->running = wk_reply_integer(r);
    st->available = st->running < st->available ? st->available - st->running : 0;
    return WK_OK;
}

int wk_semaphore_inspect(wk_processor *p, const wk_entity *sem, wk_name name,
                         wk_semaphore_state *state)
{
    char key[WK_KEY_MAX];
    size_t key_len;
    int rc = prepare(p, "semaphore.inspect", sem, &name, key, &key_len, state);
    if (rc)
        return rc;
    *state = (wk_semaphore_state){0, (int64_t)sem->capacity};
    const char *argv[1] = {key};
    size_t argvlen[1] = {key_len};
    return run(p, "semaphore.inspect", &inspect_script, sem, WK_READ, argv, argvlen, 1,
               parse_inspect, state);
}

int wk_semaphore_force_release(wk_processor *p, const wk_entity *sem, wk_name name,
                               int64_t *freed)
{
    char key[WK_KEY_MAX];
    size_t key_len;
    int rc = prepare(p, "semaphore.force_release", sem, &name, key, &key_len, freed);
    if (rc)
        return rc;
    *freed = 0;
    const char *argv[1] = {key};
    size_t argvlen[1] = {key_len};
    return run(p, "semaphore.force_release", &force_release_script, sem, WK_WRITE, argv, argvlen,
               1, parse_count, freed);
}
