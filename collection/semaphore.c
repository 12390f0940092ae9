/*
 * collection/semaphore.c — Semaphore: one sorted set of permit tokens
 * scored by the end of their lease (server ms). Every script reads TIME and
 * counts only running leases; ended ones are dropped by the last command
 * on the set, or after a permit is added (on a migrating node a script may
 * not touch a key it emptied). The bound N travels with each try
 * (wakuwaku/semaphore.h). Waiters sleep on wake-up lists (collection/wake.h);
 * a release hands each free place to the head of the queue in its script
 * (issue 24), whose pop returns holding the permit.
 */
#include <math.h>

#include <wakuwaku/semaphore.h>

#include "collection/lease_script.h"
#include "collection/lock_scripts.h"
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


/* Handing over (collection/wake.h), after WK__WAKE_LUA_CORE and
 * WK__WAKE_LUA_GIVE, with the locals Q, E (the wake queue and
 * registrations; the permits are KEYS[1]), WP (the wake prefix), TTL, N
 * and `now`:
 *   wk_revoke(id)  takes a permit handed to a waiter that died from it;
 *   sem_hand(mine) hands every free place — the releasing `mine` (its
 *                  token, its permit still in the set) not counted — to
 *                  the heads of the queue in turn, a permit each; a head
 *                  with no registration is woken instead. Adds before the
 *                  caller's ZREM, so the set is never emptied here.
 * Handing a permit keeps the registrations E at least as long as the
 * lease, as RwLock's rw_hand does (collection/rwlock.c: why). */
#define SEM_REVOKE_LUA "wk_revoke = function(id) redis.call('ZREM', KEYS[1], id) end\n"
#define SEM_HAND_LUA                                                                               \
    SEM_REVOKE_LUA                                                                                 \
    "local function sem_hand(mine)\n"                                                              \
    "  wk_prune(Q, E, WP, now)\n"                                                                  \
    "  local free = tonumber(N) - " RUNNING("now") "\n"                                            \
    "  local s = mine and redis.call('ZSCORE', KEYS[1], mine)\n"                                   \
    "  if s and tonumber(s) > now then free = free + 1 end\n"                                      \
    "  local until_ = string.format('%.0f', now + tonumber(TTL))\n"                                \
    "  local handed = false\n"                                                                     \
    "  while free > 0 do\n"                                                                        \
    "    local head = (wk_call('ZRANGE', Q, 0, 0) or {})[1]\n"                                     \
    "    local ends = head and wk_call('ZSCORE', E, head)\n"                                       \
    "    if not ends then\n"                                                                       \
    "      if head then wk_poke(Q, E, WP, now) end\n"                                              \
    "      break\n"                                                                                \
    "    end\n"                                                                                    \
    "    redis.call('ZADD', KEYS[1], until_, head)\n"                                              \
    "    wk_give(Q, E, WP, head, ends, TTL)\n"                                                        \
    "    free = free - 1\n"                                                                        \
    "    handed = true\n"                                                                          \
    "  end\n"                                                                                      \
    "  if handed and redis.call('PTTL', KEYS[1]) < tonumber(TTL) then\n"                           \
    "    redis.call('PEXPIRE', KEYS[1], TTL)\n"                                                    \
    "  end\n"                                                                                      \
    "end\n"

/* KEYS: permits, q, e. ARGV: token, ttl, N, cap (-1), w. 1 if taken. A
 * try that finds every place taken prunes the registrations that ended,
 * when there are any: a permit handed to a waiter that never took its
 * notice by then (it died, stalled or left) is taken back (wk_revoke), so
 * that a try finds it free within the bound a waiter's attempt does
 * (collection/wake.h). Only that rare path defines functions. Its
 * single-key form, while the slot migrates, is the take alone. */
static const wk_script try_single = {"semaphore.try.single_key",
                                     WK__NOW_MS TAKE_LUA "if take(now) then return 1 end\n"
                                                     "return 0\n"};
const wk__two_forms wk__semaphore_try_forms = {
    {"semaphore.try", WK__NOW_MS TAKE_LUA "if take(now) then return 1 end\n"
                                      "if redis.call('EXISTS', KEYS[3]) == 0 then return 0 end\n"
                                      "local Q, E, WP = KEYS[2], KEYS[3], ARGV[5]\n" WK__WAKE_LUA_CORE
                                          SEM_REVOKE_LUA "wk_prune(Q, E, WP, now)\n"
                                      "if take(now) then return 1 end\n"
                                      "return 0\n"},
    &try_single,
    0};

/* KEYS: permits, q, e (collection/wake.h). ARGV: token (the waiter's id
 * too), ttl, N, cap, w. {1, 0}, or {0, ms to sleep} after parking: the
 * head sleeps at most until the earliest lease ends (or a handed
 * waiter's registration). A permit already handed to this waiter is its
 * own; a taker wakes the next waiter (chain), who may fit too. */
/* Its single-key form (collection/lease_fallback.c) while the slot
 * migrates: take, or sleep until the earliest lease ends (within cap), not
 * queued. */
static const wk_script acquire_single = {
    "semaphore.acquire.single_key",
    WK__NOW_MS TAKE_LUA "if take(now) then return {1, 0} end\n"
                    "local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')\n"
                    "local left = first[2] and (tonumber(first[2]) - now) or 1\n"
                    "if left < 1 then left = 1 end\n"
                    "if left > tonumber(ARGV[4]) then left = tonumber(ARGV[4]) end\n"
                    "return {0, left}\n"};

const wk__two_forms wk__semaphore_acquire_forms = {
    {"semaphore.acquire", WK__WAKE_LUA WK__WAKE_LUA_BOUND TAKE_LUA
     "local now = wk_now()\n"
     "local Q, E, WP = KEYS[2], KEYS[3], ARGV[5]\n" SEM_REVOKE_LUA
     "if tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]) or '0') > now then\n"
     "  wk_call('ZREM', E, ARGV[1])\n"
     "  wk_took(Q, E, WP, ARGV[1], now, false)\n"
     "  return {1, 0}\n"
     "end\n"
     "wk_prune(Q, E, WP, now)\n"
     "if take(now) then\n"
     "  wk_took(KEYS[2], KEYS[3], ARGV[5], ARGV[1], now, true)\n"
     "  return {1, 0}\n"
     "end\n"
     "local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')\n"
     "local blocked = first[2] and (tonumber(first[2]) - now) or -1\n"
     "blocked = wk_bound_handed(Q, E, now, blocked)\n"
     "return {0, wk_park(KEYS[2], KEYS[3], ARGV[5], ARGV[1], now, tonumber(ARGV[4]), blocked)}\n"},
    &acquire_single,
    0};

/* KEYS: permits, q, e. ARGV: token, w, ttl, N. 1 if the lease was still
 * running; when somebody waits, every free place goes to the heads of the
 * queue (handing over). Its straight path first, as Lock's: one place
 * free (this one) and a head whose registration runs — its permit, no
 * function defined; else the general sem_hand. One ZREM (this token and
 * the ended ones) is the last command on the set. */
const wk__two_forms wk__semaphore_release_forms = {
    {"semaphore.release",
     WK__NOW_MS WK__ZLEASE_END
     /* Only a release somebody waits for defines the wake functions. */
     "if redis.call('EXISTS', KEYS[2]) == 1 then\n"
     "  local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]\n"
     "  local ends = tonumber(head and redis.call('ZSCORE', KEYS[3], head) or '0')\n"
     "  local free = tonumber(ARGV[4]) - " RUNNING("now") "\n"
     "  if s and tonumber(s) > now then free = free + 1 end\n"
     "  if ends > now and free == 1 then\n"
     "    redis.call('ZADD', KEYS[1], string.format('%.0f', now + tonumber(ARGV[3])), head)\n"
     "    if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[3]) then\n"
     "      redis.call('PEXPIRE', KEYS[1], ARGV[3])\n"
     "    end\n"
     "    redis.call('ZREM', KEYS[2], head)\n" WK__WAKE_LUA_NOTICE("KEYS[3]", "ARGV[2]", "head", "ends",
                                                                    "ARGV[3]")
     "  else\n"
     "    local Q, E, WP, TTL, N = KEYS[2], KEYS[3], ARGV[2], ARGV[3], ARGV[4]\n" WK__WAKE_LUA_CORE
         WK__WAKE_LUA_GIVE SEM_HAND_LUA "    sem_hand(ARGV[1])\n"
     "  end\n"
     "end\n" WK__ZLEASE_DROP WK__ZLEASE_RAN},
    &wk__reader_release_single,
    0};

/* KEYS: permits, q, e. ARGV: the waiter's token, w, ttl, N. A waiter
 * that gives up: a permit handed to it meanwhile goes on as its release
 * would pass it; else it leaves the queue as wake.leave does. 1 if it
 * held a permit. */
static const wk_script leave_script = {
    "semaphore.leave",
    WK__WAKE_LUA_CORE WK__WAKE_LUA_GIVE
    "local now = wk_now()\n"
    "local Q, E, WP, TTL, N = KEYS[2], KEYS[3], ARGV[2], ARGV[3], ARGV[4]\n" SEM_HAND_LUA
    "if tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]) or '0') > now then\n"
    "  wk_call('DEL', WP .. ARGV[1])\n"
    "  wk_call('ZREM', Q, ARGV[1])\n"
    "  wk_call('ZREM', E, ARGV[1])\n"
    "  sem_hand(ARGV[1])\n"
    "  redis.call('ZREM', KEYS[1], ARGV[1])\n"
    "  return 1\n"
    "end\n" WK__WAKE_LEAVE_LUA("Q", "E", "WP", "ARGV[1]") "return 0\n"};

/* KEYS: permits. ARGV: token. {1, ms left} or {0}. Reads only. */
static const wk_script owned_script = {"semaphore.owned", WK__NOW_MS
                                       "local s = redis.call('ZSCORE', KEYS[1], ARGV[1])\n"
                                       "if not s or tonumber(s) <= now then return {0} end\n"
                                       "return {1, tonumber(s) - now}\n"};

/* KEYS: permits, q, e. {running permits, waiters queued}. Reads only.
 * Its single-key form, while the slot migrates: {running, -1}. */
static const wk_script inspect_single = {"semaphore.inspect.single_key",
                                         WK__NOW_MS "return {" RUNNING("now") ", -1}\n"};
static const wk__two_forms inspect_forms = {
    {"semaphore.inspect", WK__NOW_MS "return {" RUNNING("now") ", redis.call('ZCARD', KEYS[2])}\n"},
    &inspect_single,
    0};

/* KEYS: permits, q, e. ARGV: w. The permits that were running (the
 * outcome: whether any was); deletes the set and wakes the head waiter. */
static const wk_script force_release_script = {
    "semaphore.force_release", WK__NOW_MS
    "local n = " RUNNING("now") "\n"
                                "redis.call('DEL', KEYS[1])\n"
                                "if redis.call('EXISTS', KEYS[2]) == 1 then\n" WK__WAKE_LUA_CORE
                                "  wk_wake(KEYS[2], KEYS[3], ARGV[1], now)\n"
                                "end\n"
                                "return n\n"};

/* Its operations (collection/op.h): the permit set ":permits", its wake
 * keys KEYS[2] and [3]. */
#define SEM_OP(op, ...)                                                                            \
    {WK__OP_OF(semaphore, op), .kind = WK_KIND_SEMAPHORE, .suffix = {":permits"}, __VA_ARGS__}
#define OUT(type, name) .out_name = name, .out_size = sizeof(type)

/* The takes: a try, and the acquire-or-park script of every attempt. */
static const wk__op try_op =
    SEM_OP(try, .flags = WK__QUERY_LEASE, .forms = &wk__semaphore_try_forms, .token = true,
           .wake = 2,
           .args = {WK__ARG_TOKEN, WK__ARG_TTL, WK__ARG_PERMITS, WK__ARG_CAP, WK__ARG_WAKE},
           .parse = wk__parse_bool_int, OUT(bool, "outcome"));
/* A waiter's leave (KEYS permits, q, e; ARGV its token, w, ttl, N):
 * passes on a permit handed to it as it gives up. */
static const wk__op leave_op = {.name = "semaphore.leave", .kind = WK_KIND_SEMAPHORE,
                                .suffix = {":permits"}, .mode = WK_WRITE, .script = &leave_script,
                                .token = true, .wake = 2,
                                .args = {WK__ARG_TOKEN, WK__ARG_WAKE, WK__ARG_TTL, WK__ARG_PERMITS}};
static const wk__op acquire_op = {
    .name = "semaphore.acquire", .kind = WK_KIND_SEMAPHORE, .suffix = {":permits"},
    .mode = WK_WRITE, .flags = WK__QUERY_LEASE, .forms = &wk__semaphore_acquire_forms,
    .token = true, .wake = 2,
    .args = {WK__ARG_TOKEN, WK__ARG_TTL, WK__ARG_PERMITS, WK__ARG_CAP, WK__ARG_WAKE},
    .parse = wk__wake_parse_outcome, .leave = &leave_op};

static const wk__op release_op =
    SEM_OP(release, .forms = &wk__semaphore_release_forms, .wake = 2, .token = true,
           .args = {WK__ARG_TOKEN, WK__ARG_WAKE, WK__ARG_TTL, WK__ARG_PERMITS},
           .parse = wk__parse_bool_int, OUT(bool, "outcome"));
/* A permit's lease renews as an RwLock reader's: only while it runs. */
static const wk__op extend_op = SEM_OP(extend, .flags = WK__QUERY_LEASE,
                                       .script = &wk__rwlock_extend_read_script, .token = true,
                                       .args = {WK__ARG_TOKEN, WK__ARG_TTL},
                                       .parse = wk__parse_bool_int, OUT(bool, "outcome"));

int wk_semaphore_try(wk_processor *p, const wk_entity *sem, wk_name name, wk_token *token,
                     bool *acquired)
{
    /* lease_replicas: an unacknowledged permit is given back */
    return wk__lease_try(p, &try_op, sem, name, token, acquired, wk_semaphore_release);
}

WK__OP_TOKEN_FN(wk_semaphore_release, release_op, bool)
WK__OP_TOKEN_FN(wk_semaphore_extend, extend_op, bool)

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

static const wk__op owned_op = SEM_OP(owned, .flags = WK_QUERY_RETRY_SAFE, .script = &owned_script,
                                      .token = true, .args = {WK__ARG_TOKEN}, .parse = parse_owned,
                                      OUT(wk_lease_state, "outcome"));

WK__OP_TOKEN_FN(wk_semaphore_owned, owned_op, wk_lease_state)

static int parse_inspect(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    /* `available` holds the entity's N until the reply comes (a batch
     * parses after the call returned, so the entity may be gone). */
    wk_semaphore_state *st = q->out;
    const wk_reply *running = wk_reply_at(r, 0);
    if (wk_reply_get_type(running) != WK_REPLY_INTEGER || wk_reply_integer(running) < 0)
        return wk_diag_fail(d, WK_EPROTO, "expected {running, waiting}");
    st->running = wk_reply_integer(running);
    st->available = st->running < st->available ? st->available - st->running : 0;
    st->waiting = wk__waiting_of(r, 1);
    return WK_OK;
}

static const wk__op inspect_op = SEM_OP(inspect, .flags = WK_QUERY_RETRY_SAFE,
                                        .forms = &inspect_forms, .wake = 2,
                                        .parse = parse_inspect,
                                        .out_name = "state");
static const wk__op force_release_op = SEM_OP(force_release, .script = &force_release_script,
                                              .wake = 2, .args = {WK__ARG_WAKE},
                                              .parse = wk__parse_removed, OUT(bool, "was_held"));

int wk_semaphore_inspect(wk_processor *p, const wk_entity *sem, wk_name name,
                         wk_semaphore_state *state)
{
    wk__call c;
    int rc = wk__op_begin(&c, p, &inspect_op, sem, name, state);
    if (rc)
        return rc;
    *state = (wk_semaphore_state){0, (int64_t)sem->capacity, -1};
    return wk__op_send(&c, NULL, NULL, 0);
}

WK__OP_FN(wk_semaphore_force_release, force_release_op, bool)

int wk__semaphore_leave(wk_processor *p, const wk_entity *sem, wk_name name, const wk_token *id)
{
    return wk__op_run_token(p, &leave_op, sem, name, id, NULL);
}

/* ------------------------------------------------------------------------
 * The waiting acquire (collection/wake.h)
 * ---------------------------------------------------------------------- */

int wk_semaphore_acquire(wk_processor *p, const wk_entity *sem, wk_name name, int64_t deadline,
                         wk_token *token, bool *acquired)
{
    /* Checks, then one plain try: the uncontended acquire costs a try. */
    return wk__lease_acquire(&acquire_op, wk_semaphore_try, wk_semaphore_release, p, sem, name,
                             deadline, NULL, token, acquired);
}
