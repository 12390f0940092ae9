/*
 * collection/rwlock.c — RwLock: a writer key (like a Lock) and a sorted set
 * of reader leases scored by their end (server ms). Every script reads the
 * clock with TIME and drops expired readers before deciding.
 */
#include "collection/common.h"
#include "collection/lock_scripts.h"

#include <wakuwaku/rwlock.h>

#include "entity/kind.h"

/* The kind (entity/kind.h): wk_entity_check() wants ttl_ms > 0. */
WK__KIND(rwlock) = {WK_KIND_RWLOCK, wk__entity_check_ttl};

/* Server time in ms; shared prologue of the scripts below. */
#define NOW_MS "local t = redis.call('TIME')\nlocal now = t[1] * 1000 + math.floor(t[2] / 1000)\n"

/* KEYS: w, r. ARGV: token, ttl. */
const wk_script wk__rwlock_try_read_script = {
    "rwlock.try_read",
    "if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end\n" NOW_MS
    "local ttl = tonumber(ARGV[2])\n"
    "redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)\n"
    "redis.call('ZADD', KEYS[2], string.format('%.0f', now + ttl), ARGV[1])\n"
    "if redis.call('PTTL', KEYS[2]) < ttl then redis.call('PEXPIRE', KEYS[2], ttl) end\n"
    "return 1\n"};

/* KEYS: w, r. ARGV: token, ttl. */
const wk_script wk__rwlock_try_write_script = {
    "rwlock.try_write",
    NOW_MS "redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)\n"
           "if redis.call('ZCARD', KEYS[2]) > 0 then return 0 end\n"
           "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end\n"
           "return 0\n"};

/* KEYS: r. ARGV: token. Returns 1 if the lease was still running. */
const wk_script wk__rwlock_release_read_script = {
    "rwlock.release_read", NOW_MS "local s = redis.call('ZSCORE', KEYS[1], ARGV[1])\n"
                                  "redis.call('ZREM', KEYS[1], ARGV[1])\n"
                                  "redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)\n"
                                  "if s and tonumber(s) > now then return 1 end\n"
                                  "return 0\n"};

/* KEYS: r. ARGV: token, ttl. Renews only a running lease. */
const wk_script wk__rwlock_extend_read_script = {
    "rwlock.extend_read",
    NOW_MS "local ttl = tonumber(ARGV[2])\n"
           "local s = redis.call('ZSCORE', KEYS[1], ARGV[1])\n"
           "redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)\n"
           "if not s or tonumber(s) <= now then return 0 end\n"
           "redis.call('ZADD', KEYS[1], 'XX', string.format('%.0f', now + ttl), ARGV[1])\n"
           "if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end\n"
           "return 1\n"};

/* KEYS: w, r. Returns {writer PTTL, running readers}. Writes nothing. */
const wk_script wk__rwlock_inspect_script = {
    "rwlock.inspect",
    NOW_MS "return {redis.call('PTTL', KEYS[1]),\n"
           "        redis.call('ZCOUNT', KEYS[2], '(' .. string.format('%.0f', now), '+inf')}\n"};

typedef struct keys {
    char w[WK_KEY_MAX], r[WK_KEY_MAX];
    size_t w_len, r_len;
} keys;

static int prepare(wk_processor *p, const char *op, const wk_entity *e, const wk_name *name,
                   keys *k, const void *arg, const void *out)
{
    int rc = wk__prepare(p, op, e, WK_KIND_RWLOCK, name, ":w", k->w, &k->w_len);
    if (!rc) {
        /* The reader key differs from the writer key in its last byte only
         * ("…}:w" / "…}:r"): copy it rather than validate and build twice. */
        memcpy(k->r, k->w, k->w_len + 1);
        k->r[k->w_len - 1] = 'r';
        k->r_len = k->w_len;
    }
    if (!rc && (!arg || !out))
        rc = wk__processor_fail(p, WK_EINVAL, "%s: token and outcome are required", op);
    return rc;
}

/* try_read / try_write: both keys, fresh token, ttl. */
static int try_acquire(wk_processor *p, const char *op, const wk_script *script, const wk_entity *e,
                       const wk_name *name, wk_token *token, bool *acquired)
{
    keys k;
    int rc = prepare(p, op, e, name, &k, token, acquired);
    if (!rc)
        rc = wk__lease_admit(p, op);
    if (rc)
        return rc;
    *acquired = false;
    wk_token_random(token);
    char ttl[24];
    const char *argv[4] = {k.w, k.r, (const char *)token->bytes, ttl};
    size_t argvlen[4] = {k.w_len, k.r_len, WK_TOKEN_LEN, wk__fmt_i64(ttl, e->ttl_ms)};
    wk_access access = {e, WK_WRITE};
    wk_query q = {.name = op,
                  .effect = WK__EFFECT1(access),
                  .script = script,
                  .nkeys = 2,
                  .argc = 4,
                  .argv = argv,
                  .argvlen = argvlen,
                  .parse = wk__parse_bool_int,
                  .out = acquired};
    rc = wk_process(p, &q);
    /* An unacknowledged lease goes back: a reader's leaves the set, a
     * writer's key is deleted with the Lock script. */
    bool reader = script == &wk__rwlock_try_read_script;
    if (!rc)
        rc = wk__lease_confirm(p, op,
                               reader ? &wk__rwlock_release_read_script : &wk__lock_release_script,
                               e, reader ? k.r : k.w, reader ? k.r_len : k.w_len, token, acquired);
    return rc;
}

int wk_rwlock_try_read(wk_processor *p, const wk_entity *rwlock, wk_name name, wk_token *token,
                       bool *acquired)
{
    return try_acquire(p, "rwlock.try_read", &wk__rwlock_try_read_script, rwlock, &name, token,
                       acquired);
}

int wk_rwlock_try_write(wk_processor *p, const wk_entity *rwlock, wk_name name, wk_token *token,
                        bool *acquired)
{
    return try_acquire(p, "rwlock.try_write", &wk__rwlock_try_write_script, rwlock, &name, token,
                       acquired);
}

/* Reader release/extend: the reader set only. */
static int reader_op(wk_processor *p, const char *op, const wk_script *script, const wk_entity *e,
                     const wk_name *name, const wk_token *token, bool with_ttl, bool *out)
{
    keys k;
    int rc = prepare(p, op, e, name, &k, token, out);
    if (rc)
        return rc;
    *out = false;
    return wk__token_script(p, op, script, e, k.r, k.r_len, token, with_ttl, out);
}

int wk_rwlock_release_read(wk_processor *p, const wk_entity *rwlock, wk_name name,
                           const wk_token *token, bool *was_running)
{
    return reader_op(p, "rwlock.release_read", &wk__rwlock_release_read_script, rwlock, &name,
                     token, false, was_running);
}

int wk_rwlock_extend_read(wk_processor *p, const wk_entity *rwlock, wk_name name,
                          const wk_token *token, bool *extended)
{
    return reader_op(p, "rwlock.extend_read", &wk__rwlock_extend_read_script, rwlock, &name, token,
                     true, extended);
}

/* Writer release/extend: the Lock scripts on the writer key. */
static int writer_op(wk_processor *p, const char *op, const wk_script *script, const wk_entity *e,
                     const wk_name *name, const wk_token *token, bool with_ttl, bool *out)
{
    keys k;
    int rc = prepare(p, op, e, name, &k, token, out);
    if (rc)
        return rc;
    *out = false;
    return wk__token_script(p, op, script, e, k.w, k.w_len, token, with_ttl, out);
}

int wk_rwlock_release_write(wk_processor *p, const wk_entity *rwlock, wk_name name,
                            const wk_token *token, bool *released)
{
    return writer_op(p, "rwlock.release_write", &wk__lock_release_script, rwlock, &name, token,
                     false, released);
}

int wk_rwlock_extend_write(wk_processor *p, const wk_entity *rwlock, wk_name name,
                           const wk_token *token, bool *extended)
{
    return writer_op(p, "rwlock.extend_write", &wk__lock_extend_script, rwlock, &name, token, true,
                     extended);
}

static int parse_inspect(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    const wk_reply *pttl = wk_reply_at(r, 0), *readers = wk_reply_at(r, 1);
    if (wk_reply_count(r) != 2 || wk_reply_get_type(pttl) != WK_REPLY_INTEGER ||
        wk_reply_get_type(readers) != WK_REPLY_INTEGER)
        return wk_diag_fail(d, WK_EPROTO, "expected {pttl, readers}");
    wk_rwlock_state *st = q->out;
    long long ttl = wk_reply_integer(pttl);
    st->writer_held = ttl != -2;
    st->writer_ttl_ms = ttl == -2 ? 0 : ttl;
    st->readers = wk_reply_integer(readers);
    return WK_OK;
}

int wk_rwlock_inspect(wk_processor *p, const wk_entity *rwlock, wk_name name,
                      wk_rwlock_state *state)
{
    keys k;
    int rc = prepare(p, "rwlock.inspect", rwlock, &name, &k, state, state);
    if (rc)
        return rc;
    const char *argv[2] = {k.w, k.r};
    size_t argvlen[2] = {k.w_len, k.r_len};
    wk_access access = {rwlock, WK_READ};
    wk_query q = {.name = "rwlock.inspect",
                  .effect = WK__EFFECT1(access),
                  .flags = WK_QUERY_RETRY_SAFE,
                  .script = &wk__rwlock_inspect_script,
                  .nkeys = 2,
                  .argc = 2,
                  .argv = argv,
                  .argvlen = argvlen,
                  .parse = parse_inspect,
                  .out = state};
    return wk_process(p, &q);
}
