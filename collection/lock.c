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

/* Hand the lock (KEYS[1]) to the head of its queue (KEYS[2], KEYS[3];
 * ARGV[2] the wake prefix, ARGV[3] the TTL), with the lease's whole TTL,
 * its value the head's token as if the head had SET it (Lua statements;
 * `now` a Lua expression, nil: read when somebody waits): returns 1 from
 * the script if someone took it. Needs WK__WAKE_LUA_CORE and
 * WK__WAKE_LUA_HAND. */
#define HAND_ON(now)                                                                               \
    "if wk_hand(KEYS[2], KEYS[3], ARGV[2], " now ", ARGV[3], function(h)\n"                        \
    "  redis.call('SET', KEYS[1], h, 'PX', ARGV[3])\n"                                             \
    "  return ''\n"                                                                                \
    "end) then return 1 end\n"

/* KEYS: lock, q, e. ARGV: token, w, ttl. Returns 1 if it held the token.
 * When somebody waits the lock goes to the head of the queue (collection/
 * wake.h, handing over); the wake functions are defined only then:
 * uncontended, the release costs one EXISTS more. */
/* The release's own straight path first (the handoff's latency is the
 * release script's length on a server that was idle): when the head's
 * registration still runs, hand it the lock in nine commands and no
 * function; otherwise (an ended registration to prune, a queue or list
 * a migrating node does not have) the general wk_hand. The notice goes
 * in front of any plain wake-up already in the list (LPUSH: the pop
 * takes it first); its push is a pcall, as wk_call: a list the node does
 * not have skips the notice, and the waiter finds the lock its own on
 * its next attempt. */
#define RELEASE_HAND_FAST                                                                          \
    "  local t = redis.call('TIME')\n"                                                             \
    "  local now = t[1] * 1000 + math.floor(t[2] / 1000)\n"                                        \
    "  local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]\n"                                      \
    "  local ends = head and tonumber(redis.call('ZSCORE', KEYS[3], head) or '0') or 0\n"          \
    "  if ends > now then\n"                                                                       \
    "    redis.call('SET', KEYS[1], head, 'PX', ARGV[3])\n"                                        \
    "    redis.call('ZREM', KEYS[3], head)\n"                                                      \
    "    redis.call('ZREM', KEYS[2], head)\n"                                                      \
    "    local n = redis.pcall('LPUSH', ARGV[2] .. head, 'h' .. string.format('%.0f', ends) .. ':')\n" \
    "    if type(n) == 'number' then redis.pcall('PEXPIRE', ARGV[2] .. head, ARGV[3]) end\n"      \
    "    return 1\n"                                                                               \
    "  end\n"

const wk__two_forms wk__lock_release_forms = {
    {"lock.release", "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end\n"
                     "if redis.call('EXISTS', KEYS[2]) == 1 then\n" RELEASE_HAND_FAST
                         WK__WAKE_LUA_CORE WK__WAKE_LUA_HAND HAND_ON("now") "end\n"
                     "redis.call('DEL', KEYS[1])\n"
                     "return 1\n"},
    &wk__lock_release_single,
    0};

/* KEYS: lock, q, e. ARGV: the waiter's token, w, ttl. A waiter that gives
 * up: if the lock was handed to it meanwhile, it passes it on (or frees
 * it); else it leaves the queue, waking the next head if it was the head
 * or had a wake-up pending. 1 if it held the lock. */
static const wk_script leave_script = {
    "lock.leave", WK__WAKE_LUA_CORE WK__WAKE_LUA_HAND
    "local now = wk_now()\n"
    "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
    "  redis.call('DEL', ARGV[2] .. ARGV[1])\n" HAND_ON("now")
    "  redis.call('DEL', KEYS[1])\n"
    "  return 1\n"
    "end\n" WK__WAKE_LEAVE_LUA("KEYS[2]", "KEYS[3]", "ARGV[2]", "ARGV[1]") "return 0\n"};

/* KEYS: lock, q, e. ARGV: token, ttl, w, cap (-1: a plain try that does
 * not wait; 0: the final attempt, which leaves rather than parks), fair
 * (1/0). {1, 0} acquired, or {0, sleep ms}. A lock already handed to this
 * waiter (it was not in its pop when the release came) is its own: taken.
 * A lock handed to a waiter that never took its notice by the end of its
 * registration (wk_unclaimed: it died, stalled or left) is passed on to
 * the head, or freed; until then the head sleeps no longer than that end
 * (wk_claim_left). */
const wk__two_forms wk__lock_acquire_forms = {
    {"lock.acquire",
     WK__WAKE_LUA WK__WAKE_LUA_HAND
     "local now = wk_now()\n"
     "local id = ARGV[4] == '-1' and '' or ARGV[1]\n"
     "local holder = redis.call('GET', KEYS[1])\n"
     "if holder and holder ~= id and wk_unclaimed(ARGV[3], holder, now) then\n"
     "  holder = false\n"
     "  if wk_hand(KEYS[2], KEYS[3], ARGV[3], now, ARGV[2], function(h)\n"
     "    redis.call('SET', KEYS[1], h, 'PX', ARGV[2])\n"
     "    holder = h\n"
     "    return ''\n"
     "  end) == nil then redis.call('DEL', KEYS[1]) end\n"
     "end\n"
     "if holder and holder == id then\n"
     "  wk_took(KEYS[2], KEYS[3], ARGV[3], id, now, false)\n"
     "  return {1, 0}\n"
     "end\n"
     "if not holder and wk_may_take(KEYS[2], KEYS[3], ARGV[3], id, now, ARGV[5] == '1') and\n"
     "   redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then\n"
     "  wk_took(KEYS[2], KEYS[3], ARGV[3], id, now, false)\n"
     "  return {1, 0}\n"
     "end\n"
     "if id == '' then return {0, 0} end\n"
     "local blocked = redis.call('PTTL', KEYS[1])\n"
     "local claim = holder and wk_claim_left(ARGV[3], holder, now)\n"
     "if claim and claim < blocked then blocked = claim end\n"
     "return {0, wk_park(KEYS[2], KEYS[3], ARGV[3], id, now, tonumber(ARGV[4]), blocked)}\n"},
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

/* The try of a Lock that is not fair: SET key token NX PX ttl, and when
 * that fails, whether the holder is a waiter that was handed the lock and
 * never took its notice by the end written in it (wk_unclaimed: it died,
 * stalled or left); then the lock is the caller's. Only that rare path
 * defines a function. KEYS: lock (alone: a migrating slot runs it where
 * the key is, and a list the node lacks reads as no notice). ARGV: token,
 * ttl, w. 1/0. */
const wk_script wk__lock_try_script = {
    "lock.try",
     "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end\n"
     "local holder = redis.call('GET', KEYS[1])\n" WK__WAKE_LUA_TRY_TAKE_BACK("ARGV[3]", "holder")
     "redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])\n"
     "return 1\n"};
static const wk__op try_op = LOCK_OP(try, .flags = WK__QUERY_LEASE, .script = &wk__lock_try_script,
                                     .token = true,
                                     .args = {WK__ARG_TOKEN, WK__ARG_TTL, WK__ARG_WAKE},
                                     .parse = wk__parse_bool_int, OUT(bool, "acquired"));

/* The acquire-or-park script: a fair Lock's try (no barging past the
 * waiters, still one round trip; cap -1) and every attempt of a wait. */
#define ACQUIRE_ARGS                                                                               \
    .forms = &wk__lock_acquire_forms, .token = true, .wake = 2,                                    \
    .args = {WK__ARG_TOKEN, WK__ARG_TTL, WK__ARG_WAKE, WK__ARG_CAP, WK__ARG_FAIR}
static const wk__op fair_try_op = LOCK_OP(try, .flags = WK__QUERY_LEASE, ACQUIRE_ARGS,
                                          .parse = wk__parse_first_bool, OUT(bool, "acquired"));
/* A waiter's leave (KEYS lock, q, e; ARGV its token, w, ttl). */
static const wk__op leave_op = {.name = "lock.leave", .kind = WK_KIND_LOCK, .mode = WK_WRITE,
                                .script = &leave_script, .token = true, .wake = 2,
                                .args = {WK__ARG_TOKEN, WK__ARG_WAKE, WK__ARG_TTL}};
static const wk__op acquire_op = {.name = "lock.acquire", .kind = WK_KIND_LOCK, .mode = WK_WRITE,
                                  .flags = WK__QUERY_LEASE, ACQUIRE_ARGS,
                                  .parse = wk__wake_parse_outcome, .leave = &leave_op};

static const wk__op release_op = LOCK_OP(release, .forms = &wk__lock_release_forms, .token = true,
                                         .wake = 2,
                                         .args = {WK__ARG_TOKEN, WK__ARG_WAKE, WK__ARG_TTL},
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

int wk__lock_leave(wk_processor *p, const wk_entity *lock, wk_name name, const wk_token *id)
{
    return wk__op_run_token(p, &leave_op, lock, name, id, NULL);
}

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

/* KEYS: lock, q, e. {PTTL, waiters queued}. Reads only. Its single-key
 * form, while the slot migrates: {PTTL, -1} (the queue not known). */
static const wk_script inspect_single = {"lock.inspect.single_key",
                                         "return {redis.call('PTTL', KEYS[1]), -1}\n"};
static const wk__two_forms inspect_forms = {
    {"lock.inspect", "return {redis.call('PTTL', KEYS[1]), redis.call('ZCARD', KEYS[2])}\n"},
    &inspect_single,
    0};

static int parse_inspect(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    /* -2: no key. -1: a key without expiry, which no wakuwaku call makes;
     * report it as held with an unknown (negative) TTL rather than hide it. */
    wk_lock_state *st = q->out;
    st->waiting = wk__waiting_of(r, 1);
    return pttl_of(wk_reply_at(r, 0), d, "{PTTL, waiting}", &st->held, &st->ttl_ms);
}

static const wk__op inspect_op = LOCK_OP(inspect, .flags = WK_QUERY_RETRY_SAFE,
                                         .forms = &inspect_forms, .wake = 2,
                                         .parse = parse_inspect, .out_name = "state");

WK__OP_FN(wk_lock_inspect, inspect_op, wk_lock_state)
