/*
 * collection/lock.c — Lock: SET NX PX to acquire; Lua scripts that act only
 * while the key still holds the caller's token to release and extend. The
 * release wakes the first waiter (collection/wake.h); a fair Lock's try is
 * a script that does not pass its waiters.
 */
#include "collection/common.h"
#include "collection/lock_scripts.h"
#include "collection/wake.h"
#include "entity/kind.h"

/* The kind (entity/kind.h): wk_entity_check() wants ttl_ms > 0. */
WK__KIND(lock) = {WK_KIND_LOCK, wk__entity_check_ttl};

/* KEYS: lock, q, e. ARGV: token, w. The wake functions are defined only
 * when somebody waits: uncontended, the release costs one EXISTS more. */
const wk__two_forms wk__lock_release_forms = {
    {"lock.release", "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end\n"
                     "redis.call('DEL', KEYS[1])\n"
                     "if redis.call('EXISTS', KEYS[2]) == 1 then\n" WK__WAKE_LUA_CORE
                     "  wk_wake(KEYS[2], KEYS[3], ARGV[2], nil)\n"
                     "end\n"
                     "return 1\n"},
    &wk__lock_release_single,
    0};

/* KEYS: lock, q, e. ARGV: token, ttl, w, cap (-1: a plain try that does
 * not wait), fair (1/0). {1, 0} acquired, or {0, sleep ms}. */
const wk__two_forms wk__lock_acquire_forms = {
    {"lock.acquire",
     WK__WAKE_LUA "local now = wk_now()\n"
                  "local id = ARGV[4] == '-1' and '' or ARGV[1]\n"
                  "if wk_may_take(KEYS[2], KEYS[3], ARGV[3], id, now, ARGV[5] == '1') and\n"
                  "   redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then\n"
                  "  wk_took(KEYS[2], KEYS[3], ARGV[3], id, now, false)\n"
                  "  return {1, 0}\n"
                  "end\n"
                  "if id == '' then return {0, 0} end\n"
                  "return {0, wk_park(KEYS[2], KEYS[3], ARGV[3], id, now, tonumber(ARGV[4]),\n"
                  "                   redis.call('PTTL', KEYS[1]))}\n"},
    &wk__lock_acquire_single,
    0};

/* KEYS: lock, q, e. ARGV: w. Returns 1 if it was held. */
static const wk_script force_release_script = {"lock.force_release", WK__WAKE_LUA_CORE
                                               "local n = redis.call('DEL', KEYS[1])\n"
                                               "wk_wake(KEYS[2], KEYS[3], ARGV[1], nil)\n"
                                               "return n\n"};

/* KEYS: the key. ARGV: token. PTTL if it holds the token, else -2. */
const wk_script wk__lock_owned_script = {"lock.owned",
                                         "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
                                         "  return redis.call('PTTL', KEYS[1])\n"
                                         "end\n"
                                         "return -2\n"};

const wk_script wk__lock_extend_script = {"lock.extend",
                                          "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
                                          "  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
                                          "  return 1\n"
                                          "end\n"
                                          "return 0\n"};

static int acquire_script(wk_processor *p, const char *op, const wk_entity *e, const char *key,
                          size_t key_len, const wk__wake_keys *wk, const wk_token *token,
                          int64_t cap_ms, wk_parse_fn parse, void *out);

int wk__token_script(wk_processor *p, const char *op, const wk_script *script, const wk_entity *e,
                     const char *key, size_t key_len, const wk_token *token, bool with_ttl,
                     bool *out)
{
    char ttl[24];
    const char *argv[3] = {key, (const char *)token->bytes, ttl};
    size_t argvlen[3] = {key_len, WK_TOKEN_LEN, with_ttl ? wk__fmt_i64(ttl, e->ttl_ms) : 0};
    wk_access access = {e, WK_WRITE};
    wk_query q = {.name = op,
                  .effect = WK__EFFECT1(access),
                  .flags = with_ttl ? WK__QUERY_LEASE : 0, /* an extend lengthens the lease */
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
    /* Outcomes go straight to the caller's memory, so this works in a
     * batch too: the token now, `acquired` when the reply is parsed. */
    *acquired = false;
    wk_token_random(token);
    if (lock->flags & WK_ENTITY_FAIR) {
        /* No barging past the waiters: a script, still one round trip. */
        wk__wake_keys wk;
        if ((rc = wk__wake_keys_for(p, "lock.try", &wk, key, key_len)) != WK_OK)
            return rc;
        rc = acquire_script(p, "lock.try", lock, key, key_len, &wk, token, -1,
                            wk__parse_first_bool, acquired);
        return wk__lease_settle(p, "lock.try", rc, wk_lock_release, lock, name, token);
    }
    char ttl[24];
    const char *argv[6] = {"SET", key, (const char *)token->bytes, "NX", "PX", ttl};
    size_t argvlen[6] = {3, key_len, WK_TOKEN_LEN, 2, 2, wk__fmt_i64(ttl, lock->ttl_ms)};
    wk_access access = {lock, WK_WRITE};
    wk_query q = {.name = "lock.try",
                  .effect = WK__EFFECT1(access),
                  .flags = WK__QUERY_LEASE,
                  .argc = 6,
                  .argv = argv,
                  .argvlen = argvlen,
                  .parse = wk__parse_set_nx,
                  .out = acquired};
    return wk__lease_settle(p, "lock.try", wk_process(p, &q), wk_lock_release, lock, name, token);
}

static int token_op(wk_processor *p, const char *op, const wk_script *script, const wk_entity *lock,
                    const wk_name *name, const wk_token *token, bool with_ttl, bool *out)
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

int wk__wake_script(wk_processor *p, const char *op, const wk_script *script, unsigned flags,
                    wk_mode mode, const wk_entity *e, const char *key, size_t key_len, const wk__wake_keys *wk,
                    int extra_keys, const char *const *args, const size_t *lens, int nargs,
                    wk_parse_fn parse, void *out)
{
    const char *argv[3 + 8] = {key, wk->q, wk->e};
    size_t argvlen[3 + 8] = {key_len, wk->q_len, wk->e_len};
    for (int i = 0; i < nargs; i++) {
        argv[3 + i] = args[i];
        argvlen[3 + i] = lens[i];
    }
    wk_access access = {e, mode};
    wk_query q = {.name = op,
                  .effect = WK__EFFECT1(access),
                  .flags = flags | (mode == WK_READ ? WK_QUERY_RETRY_SAFE : 0) |
                           wk__single_key_flag(script),
                  .script = script,
                  .nkeys = 3 + extra_keys,
                  .argc = 3 + nargs,
                  .argv = argv,
                  .argvlen = argvlen,
                  .parse = parse,
                  .out = out};
    return wk_process(p, &q);
}

int wk__release_waking(wk_processor *p, const char *op, const wk_entity *e, const char *key,
                       size_t key_len, const wk_token *token, bool *released)
{
    wk__wake_keys wk;
    int rc = wk__wake_keys_for(p, op, &wk, key, key_len);
    if (rc)
        return rc;
    const char *args[2] = {(const char *)token->bytes, wk.w};
    size_t lens[2] = {WK_TOKEN_LEN, wk.w_len};
    return wk__wake_script(p, op, &wk__lock_release_script, 0, WK_WRITE, e, key, key_len, &wk, 0, args,
                           lens, 2, wk__parse_bool_int, released);
}

int wk_lock_release(wk_processor *p, const wk_entity *lock, wk_name name, const wk_token *token,
                    bool *released)
{
    char key[WK_KEY_MAX];
    size_t key_len;
    int rc = wk__prepare(p, "lock.release", lock, WK_KIND_LOCK, &name, NULL, key, &key_len);
    if (rc)
        return rc;
    if (!token || !released)
        return wk__processor_fail(p, WK_EINVAL, "lock.release: token and outcome are required");
    *released = false;
    return wk__release_waking(p, "lock.release", lock, key, key_len, token, released);
}

/* The acquire script: a fair try (cap -1, `parse` writes a bool) or one
 * attempt of a wait (`parse` writes a wk__wake_outcome). */
static int acquire_script(wk_processor *p, const char *op, const wk_entity *e, const char *key,
                          size_t key_len, const wk__wake_keys *wk, const wk_token *token,
                          int64_t cap_ms, wk_parse_fn parse, void *out)
{
    char ttl[24], cap[24];
    const char *args[5] = {(const char *)token->bytes, ttl, wk->w, cap,
                           (e->flags & WK_ENTITY_FAIR) ? "1" : "0"};
    size_t lens[5] = {WK_TOKEN_LEN, wk__fmt_i64(ttl, e->ttl_ms), wk->w_len,
                      wk__fmt_i64(cap, cap_ms), 1};
    return wk__wake_script(p, op, &wk__lock_acquire_script, WK__QUERY_LEASE, WK_WRITE, e, key, key_len, wk, 0, args,
                           lens, 5, parse, out);
}

int wk__parse_first_bool(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    const wk_reply *got = wk_reply_at(r, 0);
    if (wk_reply_count(r) != 2 || wk_reply_get_type(got) != WK_REPLY_INTEGER)
        return wk_diag_fail(d, WK_EPROTO, "expected {acquired, sleep_ms}");
    *(bool *)q->out = wk_reply_integer(got) == 1;
    return wk__lease_acknowledged(d, q->out);
}

typedef struct lock_wait {
    char key[WK_KEY_MAX];
    size_t key_len;
    wk__wake_keys wk;
} lock_wait;

static int lock_attempt(wk__waiter *w, int64_t cap_ms, wk__wake_outcome *out)
{
    lock_wait *lw = w->ctx;
    return acquire_script(w->p, "lock.acquire", w->e, lw->key, lw->key_len, &lw->wk, w->id, cap_ms,
                          wk__wake_parse_outcome, out);
}

int wk_lock_acquire(wk_processor *p, const wk_entity *lock, wk_name name, int64_t deadline,
                    const wk_backoff *backoff, wk_token *token, bool *acquired)
{
    int rc = wk__wake_begin("lock.acquire", wk_lock_try, p, lock, name, deadline, backoff, token,
                            acquired);
    if (rc != WK__WAKE_MUST_WAIT)
        return rc;
    lock_wait lw;
    rc = wk__key_build_checked(lw.key, sizeof(lw.key), &lw.key_len, lock, &name, NULL);
    if (!rc)
        rc = wk__wake_keys_build(&lw.wk, lw.key, lw.key_len);
    if (rc)
        return wk__processor_fail(p, rc, "lock.acquire: cannot build the keys");
    wk__waiter w = {.p = p,
                    .op = "lock.acquire",
                    .e = lock,
                    .keys = &lw.wk,
                    .id = token,
                    .deadline = deadline,
                    .attempt = lock_attempt,
                    .ctx = &lw,
                    .release = wk_lock_release,
                    .name = name};
    return wk__wake_wait(&w, acquired);
}

int wk_lock_force_release(wk_processor *p, const wk_entity *lock, wk_name name, bool *was_held)
{
    char key[WK_KEY_MAX];
    size_t key_len;
    int rc = wk__prepare(p, "lock.force_release", lock, WK_KIND_LOCK, &name, NULL, key, &key_len);
    if (rc)
        return rc;
    if (!was_held)
        return wk__processor_fail(p, WK_EINVAL, "lock.force_release: was_held is required");
    *was_held = false;
    wk__wake_keys wk;
    if ((rc = wk__wake_keys_for(p, "lock.force_release", &wk, key, key_len)) != WK_OK)
        return rc;
    const char *args[1] = {wk.w};
    size_t lens[1] = {wk.w_len};
    return wk__wake_script(p, "lock.force_release", &force_release_script, 0, WK_WRITE, lock, key,
                           key_len, &wk, 0, args, lens, 1, wk__parse_bool_int, was_held);
}

static int parse_owned(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    if (wk_reply_get_type(r) != WK_REPLY_INTEGER)
        return wk_diag_fail(d, WK_EPROTO, "expected an integer reply (PTTL or -2)");
    wk_lease_state *st = q->out;
    long long ttl = wk_reply_integer(r);
    st->owned = ttl != -2;
    st->ttl_ms = ttl == -2 ? 0 : ttl;
    return WK_OK;
}

int wk__owned_script(wk_processor *p, const char *op, const wk_script *script, const wk_entity *e,
                     const char *key, size_t key_len, const wk_token *token, wk_lease_state *state)
{
    const char *argv[2] = {key, (const char *)token->bytes};
    size_t argvlen[2] = {key_len, WK_TOKEN_LEN};
    wk_access access = {e, WK_READ};
    wk_query q = {.name = op,
                  .effect = WK__EFFECT1(access),
                  .flags = WK_QUERY_RETRY_SAFE,
                  .script = script,
                  .nkeys = 1,
                  .argc = 2,
                  .argv = argv,
                  .argvlen = argvlen,
                  .parse = parse_owned,
                  .out = state};
    return wk_process(p, &q);
}

int wk_lock_owned(wk_processor *p, const wk_entity *lock, wk_name name, const wk_token *token,
                  wk_lease_state *state)
{
    char key[WK_KEY_MAX];
    size_t key_len;
    int rc = wk__prepare(p, "lock.owned", lock, WK_KIND_LOCK, &name, NULL, key, &key_len);
    if (rc)
        return rc;
    if (!token || !state)
        return wk__processor_fail(p, WK_EINVAL, "lock.owned: token and state are required");
    state->owned = false;
    state->ttl_ms = 0;
    return wk__owned_script(p, "lock.owned", &wk__lock_owned_script, lock, key, key_len, token,
                            state);
}

int wk_lock_extend(wk_processor *p, const wk_entity *lock, wk_name name, const wk_token *token,
                   bool *extended)
{
    return token_op(p, "lock.extend", &wk__lock_extend_script, lock, &name, token, true, extended);
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
