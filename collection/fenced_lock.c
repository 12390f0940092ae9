/*
 * collection/fenced_lock.c — FencedLock: a lease hash {token, fence} and a
 * counter key without expiry that the acquire script INCRs, so fences
 * strictly increase per name across leases (wakuwaku/fenced_lock.h).
 * While a slot migrates a take goes on in single-key steps
 * (collection/lease_script.h, split takes): the lease first, its fence
 * "0" until the counter is drawn.
 */
#include <stdlib.h>

#include <wakuwaku/fenced_lock.h>

#include "collection/lease_script.h"
#include "entity/kind.h"

/* The kind (entity/kind.h): ttl_ms > 0, and no flags (its waiters are
 * not queued fairly, so WK_ENTITY_FAIR would promise what it does not do). */
static int check_params(const wk_entity *e, char *msg, size_t len)
{
    if (e->flags)
        return wk__entity_fail(msg, len, "flags must be 0 (got %u): a FencedLock has no fair mode",
                               e->flags);
    return wk__entity_check_ttl(e, msg, len);
}

WK__KIND(fenced_lock) = {WK_KIND_FENCED_LOCK, check_params};

/* Take the lock if free: INCR the counter, store token and fence, set the
 * lease. KEYS[1] lease, KEYS[2] fence; ARGV[1] token, ARGV[2] ttl. The
 * counter moves only when the lock is taken, so a refused try spends no
 * fence. */
#define TAKE_LUA                                                                                   \
    "local function take()\n"                                                                      \
    "  if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end\n"                                  \
    "  local f = redis.call('INCR', KEYS[2])\n"                                                    \
    "  redis.call('HSET', KEYS[1], 'token', ARGV[1], 'fence', f)\n"                                \
    "  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"                                                  \
    "  return f\n"                                                                                 \
    "end\n"

/* KEYS: lease, fence. ARGV: token, ttl. The new fence, or 0 when held.
 * Its split form marks the lease. */
const wk__two_forms wk__fenced_lock_try_forms = {
    {"fenced_lock.try", TAKE_LUA "return take()\n"}, &wk__fenced_lock_mark, 0};

/* KEYS: lease, fence, q, e (collection/wake.h). ARGV: token (the waiter's
 * id too), ttl, cap, w. {1, fence}, or {0, ms to sleep} after parking. */
static const wk__two_forms acquire_forms = {
    {"fenced_lock.acquire",
     WK__WAKE_LUA TAKE_LUA "local now = wk_now()\n"
                           "local f = take()\n"
                           "if f > 0 then\n"
                           "  wk_took(KEYS[3], KEYS[4], ARGV[4], ARGV[1], now, false)\n"
                           "  return {1, f}\n"
                           "end\n"
                           "return {0, wk_park(KEYS[3], KEYS[4], ARGV[4], ARGV[1], now,\n"
                           "                   tonumber(ARGV[3]), redis.call('PTTL', KEYS[1]))}\n"},
    &wk__fenced_lock_mark,
    0};

/* KEYS: lease, fence, q, e. ARGV: token, w. 1 if it held the token; then
 * the head waiter is woken. */
const wk__two_forms wk__fenced_lock_release_forms = {
    {"fenced_lock.release", "if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end\n"
                            "redis.call('DEL', KEYS[1])\n"
                            /* Only a release somebody waits for defines the wake functions. */
                            "if redis.call('EXISTS', KEYS[3]) == 1 then\n" WK__WAKE_LUA_CORE
                            "  wk_wake(KEYS[3], KEYS[4], ARGV[2], nil)\n"
                            "end\n"
                            "return 1\n"},
    &wk__fenced_lock_release_single,
    0};

/* KEYS: lease (alone, so that it runs while a migration splits the
 * keys). ARGV: token, ttl. */
static const wk_script extend_script = {
    "fenced_lock.extend", "if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end\n"
                          "redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
                          "return 1\n"};

/* KEYS: lease (alone, as extend's). ARGV: token. {1, pttl, fence} or
 * {0}; the fence "0" while a split take has not drawn it. Reads only. */
static const wk_script owned_script = {"fenced_lock.owned",
                                       "local v = redis.call('HMGET', KEYS[1], 'token', 'fence')\n"
                                       "if v[1] ~= ARGV[1] then return {0} end\n"
                                       "return {1, redis.call('PTTL', KEYS[1]), v[2]}\n"};

/* KEYS: lease, fence. {pttl of the lease, the counter}. Reads only. */
static const wk_script inspect_script = {
    "fenced_lock.inspect", "return {redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2])}\n"};

/* KEYS: lease, fence, q, e. ARGV: w. 1 if a lease was there. The counter
 * stays; the head waiter is woken. */
static const wk_script force_release_script = {"fenced_lock.force_release", WK__WAKE_LUA_CORE
                                               "local n = redis.call('DEL', KEYS[1])\n"
                                               "wk_wake(KEYS[3], KEYS[4], ARGV[1], nil)\n"
                                               "return n\n"};

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

/* Runs `script` with KEYS lease, then fence unless `lease_only` (then
 * q, e of `wake`) and ARGV args[0..nargs) (then w of `wake`). */
static int run(wk_processor *p, const char *op, const wk_script *script, const wk_entity *e,
               const keys *k, bool lease_only, const wk__wake_keys *wake, wk_mode mode,
               const char *const *args, const size_t *lens, int nargs, wk_parse_fn parse,
               void *out)
{
    const char *item[2] = {k->lease, k->fence};
    size_t item_lens[2] = {k->len, k->len};
    wk__lease_call c = {.op = op,
                        .script = script,
                        .e = e,
                        .mode = mode,
                        .lease = script == &extend_script, /* lengthens it: acknowledged */
                        .keys = item,
                        .key_lens = item_lens,
                        .nkeys = lease_only ? 1 : 2,
                        .wake = wake,
                        .args = args,
                        .arg_lens = lens,
                        .nargs = nargs,
                        .parse = parse,
                        .out = out};
    return wk__lease_script(p, &c);
}

/* A try's reply through a deferred processor (a batch): the fence or 0. */
static int parse_try(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    if (wk_reply_get_type(r) != WK_REPLY_INTEGER || wk_reply_integer(r) < 0)
        return wk_diag_fail(d, WK_EPROTO, "expected a fence or 0");
    wk_fenced_lease *lease = q->out;
    lease->fence = wk_reply_integer(r);
    lease->acquired = lease->fence > 0;
    return wk__lease_acknowledged(d, &lease->acquired); /* its fence stays spent */
}

/*
 * Every take goes through here: a try (wake NULL) or one attempt of a wait
 * (cap_ms, the queue of `wake`). Its outcome lands in *lease (acquired,
 * fence), after the steps of a take split by a migration
 * (collection/lease_script.h); *got holds the reply (the sleep). Through
 * a deferred processor (a batch, which runs no steps) parse_try writes
 * *lease when the batch runs.
 */
static int take(wk_processor *p, const char *op, const wk_entity *e, wk_name name, const keys *k,
                const wk__wake_keys *wake, int64_t cap_ms, wk_fenced_lease *lease,
                wk__take_reply *got)
{
    bool split = !wk_processor_is_deferred(p);
    char ttl[24], cap[24];
    const char *args[3] = {(const char *)lease->token.bytes, ttl, cap};
    size_t lens[3] = {WK_TOKEN_LEN, wk__fmt_i64(ttl, e->ttl_ms), wk__fmt_i64(cap, cap_ms)};
    const char *item[2] = {k->lease, k->fence};
    size_t item_lens[2] = {k->len, k->len};
    *got = (wk__take_reply){false, false, 0};
    wk__lease_call c = {.op = op,
                        .script = wake ? &acquire_forms.script : &wk__fenced_lock_try_script,
                        .e = e,
                        .mode = WK_WRITE,
                        .lease = true,
                        .split = split,
                        .keys = item,
                        .key_lens = item_lens,
                        .nkeys = 2,
                        .wake = wake,
                        .args = args,
                        .arg_lens = lens,
                        .nargs = wake ? 3 : 2,
                        .parse = split ? wk__take_parse : parse_try,
                        .out = split ? (void *)got : (void *)lease};
    int rc = wk__lease_script(p, &c);
    if (!split)
        return rc;
    if (rc == WK_OK && got->marked) {
        wk__split_take t = {.op = op,
                            .e = e,
                            .name = name,
                            .steps = &wk__fenced_lock_steps,
                            .marked = k->lease,
                            .other = k->fence,
                            .marked_len = k->len,
                            .other_len = k->len,
                            .token = &lease->token,
                            .cap_ms = cap_ms};
        rc = wk__split_take_finish(p, &t, got);
    }
    if (rc == WK_OK && got->acquired && got->n < 1)
        return wk__processor_fail(p, WK_EPROTO, "%s: expected a fence >= 1", op);
    lease->acquired = got->acquired;
    lease->fence = got->acquired ? got->n : 0;
    return rc;
}

int wk_fenced_lock_try(wk_processor *p, const wk_entity *lock, wk_name name, wk_fenced_lease *lease)
{
    keys k;
    int rc = prepare(p, "fenced_lock.try", lock, &name, &k, lease);
    if (rc)
        return rc;
    /* Written now, so a batch's caller has the token before it runs. */
    lease->acquired = false;
    lease->fence = 0;
    wk_token_random(&lease->token);
    wk__take_reply got;
    rc = take(p, "fenced_lock.try", lock, name, &k, NULL, -1, lease, &got);
    /* lease_replicas: an unacknowledged lease is given back (its fence
     * stays spent: fences only have to increase). */
    return wk__lease_settle(p, "fenced_lock.try", rc, wk_fenced_lock_release, lock, name,
                            &lease->token);
}

/* release / extend: a token, a bool outcome; a release wakes a waiter. */
static int token_op(wk_processor *p, const char *op, const wk_script *script, const wk_entity *lock,
                    const wk_name *name, const wk_token *token, bool release, bool *out)
{
    keys k;
    wk__wake_keys wk;
    int rc = prepare(p, op, lock, name, &k, token ? (const void *)out : NULL);
    if (!rc && release)
        rc = wk__wake_keys_for(p, op, &wk, k.lease, k.len);
    if (rc)
        return rc;
    *out = false;
    char ttl[24];
    const char *args[2] = {(const char *)token->bytes, ttl};
    size_t lens[2] = {WK_TOKEN_LEN, release ? 0 : wk__fmt_i64(ttl, lock->ttl_ms)};
    return run(p, op, script, lock, &k, !release, release ? &wk : NULL, WK_WRITE, args, lens,
               release ? 1 : 2, wk__parse_bool_int, out);
}

int wk_fenced_lock_release(wk_processor *p, const wk_entity *lock, wk_name name,
                           const wk_token *token, bool *released)
{
    return token_op(p, "fenced_lock.release", &wk__fenced_lock_release_script, lock, &name, token,
                    true, released);
}

int wk_fenced_lock_extend(wk_processor *p, const wk_entity *lock, wk_name name,
                          const wk_token *token, bool *extended)
{
    return token_op(p, "fenced_lock.extend", &extend_script, lock, &name, token, false, extended);
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
    const char *args[1] = {(const char *)token->bytes};
    size_t lens[1] = {WK_TOKEN_LEN};
    return run(p, "fenced_lock.owned", &owned_script, lock, &k, true, NULL, WK_READ, args, lens, 1,
               parse_owned, state);
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
    return run(p, "fenced_lock.inspect", &inspect_script, lock, &k, false, NULL, WK_READ, NULL, NULL,
               0, parse_inspect, state);
}

int wk_fenced_lock_force_release(wk_processor *p, const wk_entity *lock, wk_name name, bool *freed)
{
    keys k;
    wk__wake_keys wk;
    int rc = prepare(p, "fenced_lock.force_release", lock, &name, &k, freed);
    if (!rc)
        rc = wk__wake_keys_for(p, "fenced_lock.force_release", &wk, k.lease, k.len);
    if (rc)
        return rc;
    *freed = false;
    return run(p, "fenced_lock.force_release", &force_release_script, lock, &k, false, &wk, WK_WRITE,
               NULL, NULL, 0, wk__parse_bool_int, freed);
}

/* ------------------------------------------------------------------------
 * The waiting acquire (collection/wake.h)
 * ---------------------------------------------------------------------- */

typedef struct fenced_wait {
    const keys *k;
    wk_fenced_lease *lease;
} fenced_wait;

static int attempt(wk__waiter *w, int64_t cap_ms, wk__wake_outcome *out)
{
    fenced_wait *fw = w->ctx;
    wk__take_reply got;
    int rc = take(w->p, w->op, w->e, w->name, fw->k, w->keys, cap_ms, fw->lease, &got);
    out->acquired = fw->lease->acquired;
    out->sleep_ms = got.acquired ? 0 : got.n;
    return rc;
}

int wk_fenced_lock_acquire(wk_processor *p, const wk_entity *lock, wk_name name, int64_t deadline,
                           wk_fenced_lease *lease)
{
    static const char op[] = "fenced_lock.acquire";
    keys k;
    wk__wake_keys wk;
    int rc = prepare(p, op, lock, &name, &k, lease);
    if (rc)
        return rc;
    lease->acquired = false;
    lease->fence = 0;
    if (wk_processor_is_deferred(p))
        return wk__processor_fail(p, WK_EINVAL,
                                  "%s: cannot wait through a deferred (batch) processor", op);
    /* One plain try first: the uncontended acquire costs a try. */
    int64_t outer = wk__wake_bound(p, wk__wake_end(deadline)); /* the acquire's deadline */
    rc = wk_fenced_lock_try(p, lock, name, lease);
    wk__wake_unbound(p, outer);
    if (rc != WK_OK || lease->acquired || wk__boot_ms() >= deadline)
        return rc;
    if ((rc = wk__wake_keys_for(p, op, &wk, k.lease, k.len)) != WK_OK)
        return rc;
    /* The try's token, which took nothing, is the waiter's place in the
     * queue, and the lease's once acquired. */
    fenced_wait fw = {&k, lease};
    wk__waiter w = {.p = p,
                    .op = op,
                    .e = lock,
                    .keys = &wk,
                    .id = &lease->token,
                    .deadline = deadline,
                    .attempt = attempt,
                    .ctx = &fw,
                    .release = wk_fenced_lock_release,
                    .name = name};
    return wk__wake_wait(&w, &lease->acquired);
}
