/*
 * collection/semaphore.c — Semaphore: one sorted set of permit tokens
 * scored by the end of their lease (server ms). Every script reads TIME and
 * counts only running leases; ended ones are dropped by the last command
 * on the set, or after a permit is added (on a migrating node a script may
 * not touch a key it emptied). The bound N travels with each try
 * (wakuwaku/semaphore.h). Waiters sleep on wake-up lists (collection/wake.h).
 */
#include <math.h>

#include <wakuwaku/semaphore.h>

#include "collection/lock_scripts.h"
#include "collection/lease_script.h"
#include "entity/kind.h"

/* permits: a whole number in 1..WK_SEMAPHORE_PERMITS_MAX; then the TTL. */
static int check_params(const wk_entity *e, char *msg, size_t len)
{
    /* The rule of wakuwaku/semaphore.h, which wk-codegen applies too. */
    if (!WK__SEMAPHORE_PERMITS_OK(e->capacity))
        return wk__entity_fail(msg, len, WK__SEMAPHORE_PERMITS_RULE " (got %g)",
                               WK_SEMAPHORE_PERMITS_MAX, e->capacity);
    if (e->flags)
        return wk__entity_fail(msg, len, "flags must be 0 (got %u): a Semaphore has no fair mode",
                               e->flags);
    return wk__entity_check_ttl(e, msg, len);
}

WK__KIND(semaphore) = {WK_KIND_SEMAPHORE, check_params};

/* The running permits after `now`. */
#define RUNNING(now) "redis.call('ZCOUNT', KEYS[1], '(' .. string.format('%.0f', " now "), '+inf')"

/* Take a permit if fewer than N run, then drop ended leases (after the
 * add: the set is never emptied here). KEYS[1] permits; ARGV[1] token,
 * ARGV[2] ttl, ARGV[3] N. */
#define TAKE_LUA                                                                                   \
    "local function take(now)\n"                                                                   \
    "  local ttl = tonumber(ARGV[2])\n"                                                            \
    "  if " RUNNING("now") " >= tonumber(ARGV[3]) then return false end\n"                         \
    "  redis.call('ZADD', KEYS[1], string.format('%.0f', now + ttl), ARGV[1])\n"                   \
    "  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)\n"                                     \
    "  if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end\n"        \
    "  return true\n"                                                                              \
    "end\n"

/* Server time in ms, for the scripts that do not wake anyone. */
#define NOW_MS "local t = redis.call('TIME')\nlocal now = t[1] * 1000 + math.floor(t[2] / 1000)\n"

/* KEYS: permits. ARGV: token, ttl, N. 1 if taken. */
const wk_script wk__semaphore_try_script = {"semaphore.try",
                                            NOW_MS TAKE_LUA "if take(now) then return 1 end\n"
                                                            "return 0\n"};

/* KEYS: permits, q, e (collection/wake.h). ARGV: token (the waiter's id
 * too), ttl, N, cap, w. {1, 0}, or {0, ms to sleep} after parking: the
 * head sleeps at most until the earliest lease ends. A taker wakes the next
 * waiter (chain), who may fit too. */
/* Its single-key form (collection/lease_fallback.c) while the slot
 * migrates: take, or sleep until the earliest lease ends (within cap), not
 * queued. */
static const wk_script acquire_single = {
    "semaphore.acquire.single_key",
    NOW_MS TAKE_LUA "if take(now) then return {1, 0} end\n"
                    "local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')\n"
                    "local left = first[2] and (tonumber(first[2]) - now) or 1\n"
                    "if left < 1 then left = 1 end\n"
                    "if left > tonumber(ARGV[4]) then left = tonumber(ARGV[4]) end\n"
                    "return {0, left}\n"};

const wk__two_forms wk__semaphore_acquire_forms = {
    {"semaphore.acquire", WK__WAKE_LUA TAKE_LUA
     "local now = wk_now()\n"
     "if take(now) then\n"
     "  wk_took(KEYS[2], KEYS[3], ARGV[5], ARGV[1], now, true)\n"
     "  return {1, 0}\n"
     "end\n"
     "local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')\n"
     "local blocked = first[2] and (tonumber(first[2]) - now) or -1\n"
     "return {0, wk_park(KEYS[2], KEYS[3], ARGV[5], ARGV[1], now, tonumber(ARGV[4]), blocked)}\n"},
    &acquire_single,
    0};

/* KEYS: permits, q, e. ARGV: token, w. 1 if the lease was still running;
 * either way the head waiter is woken (a place may be free). One ZREM
 * (this token and the ended ones) is the last command on the set. */
const wk__two_forms wk__semaphore_release_forms = {
    {"semaphore.release",
     NOW_MS "local s = redis.call('ZSCORE', KEYS[1], ARGV[1])\n"
            "local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, 1000)\n"
            "gone[#gone + 1] = ARGV[1]\n"
            "redis.call('ZREM', KEYS[1], unpack(gone))\n"
            /* Only a release somebody waits for defines the wake functions. */
            "if redis.call('EXISTS', KEYS[2]) == 1 then\n" WK__WAKE_LUA_CORE
            "  wk_wake(KEYS[2], KEYS[3], ARGV[2], now)\n"
            "end\n"
            "if s and tonumber(s) > now then return 1 end\n"
            "return 0\n"},
    &wk__reader_release_single,
    0};

/* KEYS: permits. ARGV: token. {1, ms left} or {0}. Reads only. */
static const wk_script owned_script = {"semaphore.owned",
                                       NOW_MS "local s = redis.call('ZSCORE', KEYS[1], ARGV[1])\n"
                                              "if not s or tonumber(s) <= now then return {0} end\n"
                                              "return {1, tonumber(s) - now}\n"};

/* KEYS: permits. Running permits. Reads only. */
static const wk_script inspect_script = {"semaphore.inspect", NOW_MS "return " RUNNING("now") "\n"};

/* KEYS: permits, q, e. ARGV: w. The permits that were running; deletes
 * the set and wakes the head waiter. */
static const wk_script force_release_script = {
    "semaphore.force_release", NOW_MS
    "local n = " RUNNING("now") "\n"
                                "redis.call('DEL', KEYS[1])\n"
                                "if redis.call('EXISTS', KEYS[2]) == 1 then\n" WK__WAKE_LUA_CORE
                                "  wk_wake(KEYS[2], KEYS[3], ARGV[1], now)\n"
                                "end\n"
                                "return n\n"};

/* The permit set's key, and its companion keys when `wake`. */
typedef struct keys {
    char permits[WK_KEY_MAX];
    size_t len;
    wk__wake_keys wake;
} keys;

static int prepare(wk_processor *p, const char *op, const wk_entity *e, const wk_name *name,
                   keys *k, bool wake, const void *out)
{
    int rc = wk__prepare(p, op, e, WK_KIND_SEMAPHORE, name, ":permits", k->permits, &k->len);
    if (!rc && !out)
        rc = wk__processor_fail(p, WK_EINVAL, "%s: token and outcome are required", op);
    if (!rc && wake)
        rc = wk__wake_keys_for(p, op, &k->wake, k->permits, k->len);
    return rc;
}

/* Runs `script` with KEYS permits (then q, e when `wake`) and ARGV
 * args[0..nargs) (then w when `wake`). */
static int run(wk_processor *p, const char *op, const wk_script *script, const wk_entity *e,
               const keys *k, bool wake, wk_mode mode, const char *const *args, const size_t *lens,
               int nargs, wk_parse_fn parse, void *out)
{
    const char *item[1] = {k->permits};
    size_t item_lens[1] = {k->len};
    /* The scripts that take a permit are acknowledged (its extend is
     * wk__token_script's). */
    bool lease = script == &wk__semaphore_try_script || script == &wk__semaphore_acquire_forms.script;
    wk__lease_call c = {.op = op,
                        .script = script,
                        .e = e,
                        .mode = mode,
                        .lease = lease,
                        .keys = item,
                        .key_lens = item_lens,
                        .nkeys = 1,
                        .wake = wake ? &k->wake : NULL,
                        .args = args,
                        .arg_lens = lens,
                        .nargs = nargs,
                        .parse = parse,
                        .out = out};
    return wk__lease_script(p, &c);
}

/* release / owned: a token, an outcome of `size` bytes zeroed first. */
static int token_call(wk_processor *p, const char *op, const wk_script *script,
                      const wk_entity *sem, const wk_name *name, const wk_token *token, bool wake,
                      wk_mode mode, wk_parse_fn parse, void *out, size_t size)
{
    keys k;
    int rc = prepare(p, op, sem, name, &k, wake, token ? out : NULL);
    if (rc)
        return rc;
    memset(out, 0, size);
    const char *args[1] = {(const char *)token->bytes};
    size_t lens[1] = {WK_TOKEN_LEN};
    return run(p, op, script, sem, &k, wake, mode, args, lens, 1, parse, out);
}

/* ARGV token, ttl, N (then cap) of the take scripts. */
typedef struct take_args {
    char ttl[24], n[24], cap[24];
    const char *argv[4];
    size_t lens[4];
} take_args;

static void take_args_fill(take_args *a, const wk_entity *sem, const wk_token *token,
                           int64_t cap_ms)
{
    a->argv[0] = (const char *)token->bytes, a->lens[0] = WK_TOKEN_LEN;
    a->argv[1] = a->ttl, a->lens[1] = wk__fmt_i64(a->ttl, sem->ttl_ms);
    a->argv[2] = a->n, a->lens[2] = wk__fmt_i64(a->n, (int64_t)sem->capacity);
    a->argv[3] = a->cap, a->lens[3] = wk__fmt_i64(a->cap, cap_ms);
}

int wk_semaphore_try(wk_processor *p, const wk_entity *sem, wk_name name, wk_token *token,
                     bool *acquired)
{
    keys k;
    int rc = prepare(p, "semaphore.try", sem, &name, &k, false, token ? acquired : NULL);
    if (rc)
        return rc;
    *acquired = false;
    wk_token_random(token);
    take_args a;
    take_args_fill(&a, sem, token, 0);
    rc = run(p, "semaphore.try", &wk__semaphore_try_script, sem, &k, false, WK_WRITE, a.argv,
             a.lens, 3, wk__parse_bool_int, acquired);
    /* lease_replicas: an unacknowledged permit is given back */
    return wk__lease_settle(p, "semaphore.try", rc, wk_semaphore_release, sem, name, token);
}

int wk_semaphore_release(wk_processor *p, const wk_entity *sem, wk_name name, const wk_token *token,
                         bool *was_running)
{
    return token_call(p, "semaphore.release", &wk__semaphore_release_script, sem, &name, token,
                      true, WK_WRITE, wk__parse_bool_int, was_running, sizeof(*was_running));
}

int wk_semaphore_extend(wk_processor *p, const wk_entity *sem, wk_name name, const wk_token *token,
                        bool *extended)
{
    keys k;
    int rc = prepare(p, "semaphore.extend", sem, &name, &k, false, token ? extended : NULL);
    if (rc)
        return rc;
    *extended = false;
    /* A permit's lease renews as an RwLock reader's: only while it runs. */
    return wk__token_script(p, "semaphore.extend", &wk__rwlock_extend_read_script, sem, k.permits,
                            k.len, token, true, extended);
}

static int parse_owned(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    wk_lease_state *st = q->out;
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

int wk_semaphore_owned(wk_processor *p, const wk_entity *sem, wk_name name, const wk_token *token,
                       wk_lease_state *state)
{
    return token_call(p, "semaphore.owned", &owned_script, sem, &name, token, false, WK_READ,
                      parse_owned, state, sizeof(*state));
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
    keys k;
    int rc = prepare(p, "semaphore.inspect", sem, &name, &k, false, state);
    if (rc)
        return rc;
    *state = (wk_semaphore_state){0, (int64_t)sem->capacity};
    return run(p, "semaphore.inspect", &inspect_script, sem, &k, false, WK_READ, NULL, NULL, 0,
               parse_inspect, state);
}

int wk_semaphore_force_release(wk_processor *p, const wk_entity *sem, wk_name name, int64_t *freed)
{
    keys k;
    int rc = prepare(p, "semaphore.force_release", sem, &name, &k, true, freed);
    if (rc)
        return rc;
    *freed = 0;
    return run(p, "semaphore.force_release", &force_release_script, sem, &k, true, WK_WRITE, NULL,
               NULL, 0, parse_count, freed);
}

/* ------------------------------------------------------------------------
 * The waiting acquire (collection/wake.h)
 * ---------------------------------------------------------------------- */

static int attempt(wk__waiter *w, int64_t cap_ms, wk__wake_outcome *out)
{
    const keys *k = w->ctx;
    take_args a;
    take_args_fill(&a, w->e, w->id, cap_ms);
    return run(w->p, w->op, &wk__semaphore_acquire_forms.script, w->e, k, true, WK_WRITE, a.argv,
               a.lens, 4, wk__wake_parse_outcome, out);
}

int wk_semaphore_acquire(wk_processor *p, const wk_entity *sem, wk_name name, int64_t deadline,
                         wk_token *token, bool *acquired)
{
    static const char op[] = "semaphore.acquire";
    /* Checks, then one plain try: the uncontended acquire costs a try. */
    int rc = wk__wake_begin(op, wk_semaphore_try, p, sem, name, deadline, NULL, token, acquired);
    if (rc != WK__WAKE_MUST_WAIT)
        return rc;
    keys k;
    if ((rc = prepare(p, op, sem, &name, &k, true, acquired)) != WK_OK)
        return rc;
    /* The try's token, which took nothing, is the waiter's place in the
     * queue, and the permit's once taken. */
    wk__waiter w = {.p = p,
                    .op = op,
                    .e = sem,
                    .keys = &k.wake,
                    .id = token,
                    .deadline = deadline,
                    .attempt = attempt,
                    .ctx = &k,
                    .release = wk_semaphore_release,
                    .name = name};
    return wk__wake_wait(&w, acquired);
}
