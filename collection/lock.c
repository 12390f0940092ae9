/*
 * collection/lock.c — Lock: SET NX PX to acquire; Lua scripts that act only
 * while the key still holds the caller's token to release and extend.
 */
#include "collection/common.h"
#include "collection/lock_scripts.h"
#include "entity/kind.h"

/* The kind (entity/kind.h): wk_entity_check() wants ttl_ms > 0. */
WK__KIND(lock) = {WK_KIND_LOCK, wk__entity_check_ttl};

const wk_script wk__lock_release_script = {
    "lock.release",
    "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
    "  redis.call('DEL', KEYS[1])\n"
    "  return 1\n"
    "end\n"
    "return 0\n"};

const wk_script wk__lock_extend_script = {
    "lock.extend",
    "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
    "  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
    "  return 1\n"
    "end\n"
    "return 0\n"};

int wk__token_script(wk_processor *p, const char *op, const wk_script *script,
                     const wk_entity *e, const char *key, size_t key_len, const wk_token *token,
                     bool with_ttl, bool *out)
{
    char ttl[24];
    const char *argv[3] = {key, (const char *)token->bytes, ttl};
    size_t argvlen[3] = {key_len, WK_TOKEN_LEN, with_ttl ? wk__fmt_i64(ttl, e->ttl_ms) : 0};
    wk_access access = {e, WK_WRITE};
    wk_query q = {.name = op,
                  .effect = WK__EFFECT1(access),
                  .script = script,
                  .nkeys = 1,
                  .argc = with_ttl ? 3 : 2,
                  .argv = argv,
                  .argvlen = argvlen,
                  .parse = wk__parse_bool_int,
                  .out = out};
    return wk_process(p, &q);
}

int wk_lock_try(wk_processor *p, const wk_entity *lock, wk_name name, wk_token *token,
                bool *acquired)
{
    char key[WK_KEY_MAX];
    size_t key_len;
    int rc = wk__prepare(p, "lock.try", lock, WK_KIND_LOCK, &name, NULL, key, &key_len);
    if (rc)
        return rc;
    if (!token || !acquired)
        return wk__processor_fail(p, WK_EINVAL, "lock.try: token and acquired are required");
    if ((rc = wk__lease_admit(p, "lock.try")))
        return rc;
    /* Outcomes go straight to the caller's memory, so this works in a
     * batch too: the token now, `acquired` when the reply is parsed. */
    *acquired = false;
    wk_token_random(token);
    char ttl[24];
    const char *argv[6] = {"SET", key, (const char *)token->bytes, "NX", "PX", ttl};
    size_t argvlen[6] = {3, key_len, WK_TOKEN_LEN, 2, 2, wk__fmt_i64(ttl, lock->ttl_ms)};
    wk_access access = {lock, WK_WRITE};
    wk_query q = {.name = "lock.try",
                  .effect = WK__EFFECT1(access),
                  .argc = 6,
                  .argv = argv,
                  .argvlen = argvlen,
                  .parse = wk__parse_set_nx,
                  .out = acquired};
    rc = wk_process(p, &q);
    if (!rc)
        rc = wk__lease_confirm(p, "lock.try", &wk__lock_release_script, lock, key, key_len, token,
                               acquired);
    return rc;
}

static int token_op(wk_processor *p, const char *op, const wk_script *script,
                    const wk_entity *lock, const wk_name *name, const wk_token *token,
                    bool with_ttl, bool *out)
{
    char key[WK_KEY_MAX];
    size_t key_len;
    int rc = wk__prepare(p, op, lock, WK_KIND_LOCK, name, NULL, key, &key_len);
    if (rc)
        return rc;
    if (!token || !out)
        return wk__processor_fail(p, WK_EINVAL, "%s: token and outcome are required", op);
    *out = false;
    return wk__token_script(p, op, script, lock, key, key_len, token, with_ttl, out);
}

int wk_lock_release(wk_processor *p, const wk_entity *lock, wk_name name, const wk_token *token,
                    bool *released)
{
    return token_op(p, "lock.release", &wk__lock_release_script, lock, &name, token, false,
                    released);
}

int wk_lock_extend(wk_processor *p, const wk_entity *lock, wk_name name, const wk_token *token,
                   bool *extended)
{
    return token_op(p, "lock.extend", &wk__lock_extend_script, lock, &name, token, true,
                    extended);
}

static int parse_pttl(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    if (wk_reply_get_type(r) != WK_REPLY_INTEGER)
        return wk_diag_fail(d, WK_EPROTO, "expected an integer reply to PTTL");
    wk_lock_state *st = q->out;
    long long ttl = wk_reply_integer(r);
    /* -2: no key. -1: a key without expiry, which no wakuwaku call makes;
     * report it as held with an unknown (negative) TTL rather than hide it. */
    st->held = ttl != -2;
    st->ttl_ms = ttl == -2 ? 0 : ttl;
    return WK_OK;
}

int wk_lock_inspect(wk_processor *p, const wk_entity *lock, wk_name name, wk_lock_state *state)
{
    char key[WK_KEY_MAX];
    size_t key_len;
    int rc = wk__prepare(p, "lock.inspect", lock, WK_KIND_LOCK, &name, NULL, key, &key_len);
    if (rc)
        return rc;
    if (!state)
        return wk__processor_fail(p, WK_EINVAL, "lock.inspect: state is required");
    const char *argv[2] = {"PTTL", key};
    size_t argvlen[2] = {4, key_len};
    wk_access access = {lock, WK_READ};
    wk_query q = {.name = "lock.inspect",
                  .effect = WK__EFFECT1(access),
                  .flags = WK_QUERY_RETRY_SAFE,
                  .argc = 2,
                  .argv = argv,
                  .argvlen = argvlen,
                  .parse = parse_pttl,
                  .out = state};
    return wk_process(p, &q);
}
