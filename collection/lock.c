/*
 * collection/lock.c — Lock: SET NX PX to acquire; Lua scripts that act only
 * while the key still holds the caller's token to release and extend. The
 * release wakes the first waiter (collection/wake.h); a fair Lock's try is
 * a script that does not pass its waiters.
 */
#include "collection/lease_script.h"
#include "collection/lock_scripts.h"
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

/* Its operations (collection/op.h). A token operation's message when
 * the token or the outcome is missing names `out_name`. */
#define LOCK_OP(op, ...) {WK__OP_OF(lock, op), .kind = WK_KIND_LOCK, __VA_ARGS__}
#define OUT(type, name) .out_name = name, .out_size = sizeof(type)

/* SET key token NX PX ttl: the try of a Lock that is not fair. */
static const wk__op try_op = LOCK_OP(try, .flags = WK__QUERY_LEASE, .command = "SET", .token = true,
                                     .args = {WK__ARG_TOKEN, WK__ARG_NX, WK__ARG_PX, WK__ARG_TTL},
                                     .parse = wk__parse_set_nx, OUT(bool, "acquired"));

/* The acquire-or-park script: a fair Lock's try (no barging past the
 * waiters, still one round trip; cap -1) and every attempt of a wait. */
#define ACQUIRE_ARGS                                                                               \
    .forms = &wk__lock_acquire_forms, .token = true, .wake = 2,                                    \
    .args = {WK__ARG_TOKEN, WK__ARG_TTL, WK__ARG_WAKE, WK__ARG_CAP, WK__ARG_FAIR}
static const wk__op fair_try_op = LOCK_OP(try, .flags = WK__QUERY_LEASE, ACQUIRE_ARGS,
                                          .parse = wk__parse_first_bool, OUT(bool, "acquired"));
static const wk__op acquire_op = {.name = "lock.acquire", .kind = WK_KIND_LOCK, .mode = WK_WRITE,
                                  .flags = WK__QUERY_LEASE, ACQUIRE_ARGS,
                                  .parse = wk__wake_parse_outcome};

static const wk__op release_op = LOCK_OP(release, .forms = &wk__lock_release_forms, .token = true,
                                         .wake = 2, .args = {WK__ARG_TOKEN, WK__ARG_WAKE},
                                         .parse = wk__parse_bool_int, OUT(bool, "outcome"));
static const wk__op extend_op = LOCK_OP(extend, .flags = WK__QUERY_LEASE,
                                        .script = &wk__lock_extend_script, .token = true,
                                        .args = {WK__ARG_TOKEN, WK__ARG_TTL},
                                        .parse = wk__parse_bool_int, OUT(bool, "outcome"));
static const wk__op force_release_op = LOCK_OP(force_release, .script = &force_release_script,
                                               .wake = 2, .args = {WK__ARG_WAKE},
                                               .parse = wk__parse_bool_int, OUT(bool, "was_held"));

int wk_lock_try(wk_processor *p, const wk_entity *lock, wk_name name, wk_token *token,
                bool *acquired)
{
    const wk__op *op = lock && (lock->flags & WK_ENTITY_FAIR) ? &fair_try_op : &try_op;
    return wk__lease_try(p, op, lock, name, token, acquired, wk_lock_release);
}

WK__OP_TOKEN_FN(wk_lock_release, release_op, bool)

int wk__parse_first_bool(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    const wk_reply *got = wk_reply_at(r, 0);
    if (wk_reply_count(r) != 2 || wk_reply_get_type(got) != WK_REPLY_INTEGER)
        return wk_diag_fail(d, WK_EPROTO, "expected {acquired, sleep_ms}");
    *(bool *)q->out = wk_reply_integer(got) == 1;
    return wk__lease_acknowledged(d, q->out);
}

int wk_lock_acquire(wk_processor *p, const wk_entity *lock, wk_name name, int64_t deadline,
                    const wk_backoff *backoff, wk_token *token, bool *acquired)
{
    return wk__lease_acquire(&acquire_op, wk_lock_try, wk_lock_release, p, lock, name, deadline,
                             backoff, token, acquired);
}

WK__OP_FN(wk_lock_force_release, force_release_op, bool)

/* A PTTL-shaped reply (-2: no key, or not the token's) into its two
 * fields; `what` ends the refusal's "expected an integer reply". */
static int pttl_of(const wk_reply *r, wk_diag *d, const char *what, bool *there, int64_t *ttl_ms)
{
    if (wk_reply_get_type(r) != WK_REPLY_INTEGER)
        return wk_diag_fail(d, WK_EPROTO, "expected an integer reply %s", what);
    long long ttl = wk_reply_integer(r);
    *there = ttl != -2;
    *ttl_ms = ttl == -2 ? 0 : ttl;
    return WK_OK;
}

int wk__parse_owned(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    wk_lease_state *st = q->out;
    return pttl_of(r, d, "(PTTL or -2)", &st->owned, &st->ttl_ms);
}

static const wk__op owned_op = LOCK_OP(owned, .flags = WK_QUERY_RETRY_SAFE,
                                       .script = &wk__lock_owned_script, .token = true,
                                       .args = {WK__ARG_TOKEN}, .parse = wk__parse_owned,
                                       OUT(wk_lease_state, "state"));

WK__OP_TOKEN_FN(wk_lock_owned, owned_op, wk_lease_state)
WK__OP_TOKEN_FN(wk_lock_extend, extend_op, bool)

static int parse_pttl(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    /* -2: no key. -1: a key without expiry, which no wakuwaku call makes;
     * report it as held with an unknown (negative) TTL rather than hide it. */
    wk_lock_state *st = q->out;
    return pttl_of(r, d, "to PTTL", &st->held, &st->ttl_ms);
}

static const wk__op inspect_op = LOCK_OP(inspect, .flags = WK_QUERY_RETRY_SAFE, .command = "PTTL",
                                         .parse = parse_pttl, .out_name = "state");

WK__OP_FN(wk_lock_inspect, inspect_op, wk_lock_state)
