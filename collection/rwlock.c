/*
 * collection/rwlock.c — RwLock: a writer key (like a Lock) and a sorted set
 * of reader leases scored by their end (server ms). Every script reads the
 * clock with TIME and counts only running readers; ended ones are dropped
 * by the last command on the set (on a migrating node a script may not
 * touch a key it emptied). Waiters are queued on the writer key's
 * companion keys (collection/wake.h): the writer's release, and the
 * release of the last reader, hand the item to the head of the queue — a
 * writer gets the writer key, the readers at the head (up to the next
 * writer) each a read lease, all in the release's script (issue 24); a
 * reader that gets in by an attempt wakes the next (it may be a reader
 * too). While a slot migrates a take goes on in single-key steps
 * (collection/lease_script.h, split takes).
 */
#include "collection/lease_script.h"
#include "collection/lock_scripts.h"

#include <wakuwaku/rwlock.h>

#include "entity/kind.h"

/* The kind (entity/kind.h): wk_entity_check() wants ttl_ms > 0. */
WK__KIND(rwlock) = {WK_KIND_RWLOCK, wk__entity_check_ttl};

/* The readers still running at `now`. */
#define RUNNING(set) "redis.call('ZCOUNT', " set ", '(' .. string.format('%.0f', now), '+inf')"

/* Handing over (collection/wake.h), after WK__WAKE_LUA_CORE and
 * WK__WAKE_LUA_GIVE, with the locals W, Q, E, R (the writer key, the wake
 * queue and registrations, the reader set), WP (the wake prefix), TTL
 * (the lease, ms) and `now`:
 *   wk_revoke(id)  takes a lease handed to a waiter that died from it;
 *   rw_hand(writer, reader)
 *                  hands the item to the head of the queue, from the
 *                  releasing `writer` (its token, the writer key still
 *                  set) or `reader` (its token, its lease still in R):
 *                  a writer head gets the writer key when no other
 *                  reader runs; a reader head, and every reader behind it
 *                  up to the next writer, a read lease each. A head with
 *                  no registration is woken instead. Returns whether it
 *                  handed the item over (the writer key is then the
 *                  head's, or deleted).
 * Handing a lease keeps the registrations E at least as long as the
 * lease: the handed waiter's registration stays there until it ends, and
 * only a prune that finds it ended takes the lease from a waiter that
 * never took its notice — E expiring with that registration (wk_park
 * sets E's expiry to its own) would hide it, and the lease would run its
 * whole TTL (tests/guarantees/test_liveness.c, the newcomer cells). */
#define RW_REVOKE_LUA                                                                              \
    "wk_revoke = function(id)\n"                                                                   \
    "  if redis.call('GET', W) == id then redis.call('DEL', W) end\n"                              \
    "  redis.call('ZREM', R, id)\n"                                                                \
    "end\n"
#define RW_HAND_LUA                                                                                \
    RW_REVOKE_LUA                                                                                  \
    "local function rw_head()\n"                                                                   \
    "  local head = (wk_call('ZRANGE', Q, 0, 0) or {})[1]\n"                                       \
    "  return head, head and wk_call('ZSCORE', E, head)\n"                                         \
    "end\n"                                                                                        \
    "local function rw_hand(writer, reader)\n"                                                     \
    "  wk_prune(Q, E, WP, now)\n"                                                                  \
    "  local head, ends = rw_head()\n"                                                             \
    "  if not ends then\n"                                                                         \
    "    if head then wk_poke(Q, E, WP, now) end\n"                                                \
    "    return false\n"                                                                           \
    "  end\n"                                                                                      \
    "  if not wk_reader(ends) then\n"                                                              \
    "    local n = " RUNNING("R") "\n"                                                             \
    "    local s = reader and redis.call('ZSCORE', R, reader)\n"                                   \
    "    if s and tonumber(s) > now then n = n - 1 end\n"                                          \
    "    if n > 0 then return false end\n"                                                         \
    "    redis.call('SET', W, head, 'PX', TTL)\n"                                                  \
    "    wk_give(Q, E, WP, head, ends, TTL)\n"                                                        \
    "    return true\n"                                                                            \
    "  end\n"                                                                                      \
    "  if writer then redis.call('DEL', W) end\n"                                                  \
    "  local until_ = string.format('%.0f', now + tonumber(TTL))\n"                                \
    "  for i = 1, 1000 do\n"                                                                       \
    "    redis.call('ZADD', R, until_, head)\n"                                                    \
    "    wk_give(Q, E, WP, head, ends, TTL)\n"                                                        \
    "    head, ends = rw_head()\n"                                                                 \
    "    if not wk_reader(ends) then break end\n"                                                  \
    "  end\n"                                                                                      \
    "  if redis.call('PTTL', R) < tonumber(TTL) then redis.call('PEXPIRE', R, TTL) end\n"          \
    "  return true\n"                                                                              \
    "end\n"

/* A plain try that finds the item taken first prunes the registrations
 * that ended, when there are any (Lua statements, with `now`; KEYS w, q,
 * e, r; ARGV[3] the wake prefix): a lease handed to a waiter that never
 * took its notice by then (it died, stalled or left) is taken back
 * (wk_revoke), so that a try finds it free within the bound a waiter's
 * attempt does (collection/wake.h). `taken` (a Lua condition) is asked
 * again after. Only this rare path defines functions. */
#define TRY_PRUNE(taken)                                                                           \
    "if " taken " then\n"                                                                           \
    "  if redis.call('EXISTS', KEYS[3]) == 0 then return 0 end\n"                                  \
    "  local W, Q, E, R, WP = KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[3]\n" WK__WAKE_LUA_CORE      \
        RW_REVOKE_LUA "  wk_prune(Q, E, WP, now)\n"                                                \
    "  if " taken " then return 0 end\n"                                                           \
    "end\n"

/* KEYS: w, q, e, r. ARGV: token, ttl, wake prefix, cap (-1). 1/0; its
 * split form marks r. */
const wk__two_forms wk__rwlock_try_read_forms = {
    {"rwlock.try_read",
     WK__NOW_MS TRY_PRUNE("redis.call('EXISTS', KEYS[1]) == 1")
     "local ttl = tonumber(ARGV[2])\n"
     "redis.call('ZADD', KEYS[4], string.format('%.0f', now + ttl), ARGV[1])\n"
     "redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)\n"
     "if redis.call('PTTL', KEYS[4]) < ttl then redis.call('PEXPIRE', KEYS[4], ttl) end\n"
     "return 1\n"},
    &wk__rwlock_read_mark,
    3};

/* KEYS: w, q, e, r. ARGV: token, ttl, wake prefix, cap (-1). 1/0; its
 * split form marks w. */
const wk__two_forms wk__rwlock_try_write_forms = {
    {"rwlock.try_write",
     WK__NOW_MS TRY_PRUNE("(" RUNNING("KEYS[4]") " > 0 or redis.call('EXISTS', KEYS[1]) == 1)")
     "if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end\n"
     "redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)\n"
     "return 1\n"},
    &wk__rwlock_write_mark,
    0};

/* KEYS: r, q, e, w. ARGV: token, wake prefix, ttl. Returns 1 if the
 * lease was still running. The last reader out hands the item to the
 * head of the queue (a writer); the readers still running are counted
 * only when somebody waits (an EXISTS costs less than the ZCOUNT). Never
 * while a writer holds the item: a release by a token that reads nothing
 * (a lease that ran out, an acquire that ended WK_EUNKNOWN without one)
 * would hand the readers at the head read leases beside that writer, or
 * a waiting writer the holder's own writer key. One ZREM (this token and
 * the ended ones) is the last command on the set. */
const wk__two_forms wk__rwlock_release_read_forms = {
    {"rwlock.release_read",
     WK__NOW_MS WK__ZLEASE_END
     "if redis.call('EXISTS', KEYS[2]) == 1 then\n"
     "  local others = " RUNNING("KEYS[1]") "\n"
     "  if s and tonumber(s) > now then others = others - 1 end\n"
     "  if others == 0 and redis.call('EXISTS', KEYS[4]) == 0 then\n"
     "    local W, Q, E, R, WP, TTL = KEYS[4], KEYS[2], KEYS[3], KEYS[1], ARGV[2], ARGV[3]\n"
     WK__WAKE_LUA_CORE WK__WAKE_LUA_GIVE RW_HAND_LUA "    rw_hand(nil, ARGV[1])\n"
     "  end\n"
     "end\n" WK__ZLEASE_DROP WK__ZLEASE_RAN},
    &wk__reader_release_single,
    0};

/* KEYS: w, q, e, r. ARGV: token, wake prefix, ttl. Returns 1 if it held
 * the token; hands the item to the head of the queue (a writer, or the
 * readers at the head), or frees it. Its straight path first, as Lock's
 * (the handoff's latency is the release script's length): a writer at
 * the head whose registration runs, no reader running — the writer key
 * is its, no function defined; else the general rw_hand. */
const wk__two_forms wk__rwlock_release_write_forms = {
    {"rwlock.release_write",
     "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end\n"
     "if redis.call('EXISTS', KEYS[2]) == 1 then\n"
     "  local now = redis.call('TIME')\n"
     "  now = now[1] * 1000 + math.floor(now[2] / 1000)\n"
     "  local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]\n"
     "  local ends = tonumber(head and redis.call('ZSCORE', KEYS[3], head) or '0')\n"
     "  if ends > now and ends % 1 == 0 and " RUNNING("KEYS[4]") " == 0 then\n"
     "    redis.call('SET', KEYS[1], head, 'PX', ARGV[3])\n"
     "    redis.call('ZREM', KEYS[2], head)\n" WK__WAKE_LUA_NOTICE("KEYS[3]", "ARGV[2]", "head", "ends",
                                                                    "ARGV[3]")
     "    return 1\n"
     "  end\n"
     "  local W, Q, E, R, WP, TTL = KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[2], ARGV[3]\n"
         WK__WAKE_LUA_CORE WK__WAKE_LUA_GIVE RW_HAND_LUA
     "  if rw_hand(ARGV[1], nil) then return 1 end\n"
     "end\n"
     "redis.call('DEL', KEYS[1])\n"
     "return 1\n"},
    &wk__lock_release_single,
    0};

/* KEYS: w, q, e, r. ARGV: the waiter's token, wake prefix, ttl. A waiter
 * that gives up: a lease handed to it meanwhile (the writer key, or a
 * running read lease) goes on as its release would pass it; else it
 * leaves the queue as wake.leave does. 1 if it held a lease. */
static const wk_script leave_script = {
    "rwlock.leave",
    WK__WAKE_LUA_CORE WK__WAKE_LUA_GIVE
    "local now = wk_now()\n"
    "local W, Q, E, R, WP, TTL = KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[2], ARGV[3]\n" RW_HAND_LUA
    "local s = redis.call('ZSCORE', R, ARGV[1])\n"
    "local writer = redis.call('GET', W) == ARGV[1]\n"
    "if writer or (s and tonumber(s) > now) then\n"
    "  wk_call('DEL', WP .. ARGV[1])\n"
    "  wk_call('ZREM', Q, ARGV[1])\n"
    "  wk_call('ZREM', E, ARGV[1])\n"
    "  if writer then\n"
    "    if not rw_hand(ARGV[1], nil) then redis.call('DEL', W) end\n"
    "  else\n"
    "    if " RUNNING("R") " == 1 then rw_hand(nil, ARGV[1]) end\n"
    "    redis.call('ZREM', R, ARGV[1])\n"
    "  end\n"
    "  return 1\n"
    "end\n" WK__WAKE_LEAVE_LUA("Q", "E", "WP", "ARGV[1]") "return 0\n"};

/* The acquire-or-park scripts. KEYS: w, q, e, r. ARGV: token, ttl, wake
 * prefix, cap (-1: a plain try of a fair RwLock, does not wait), fair
 * (1/0). {1, 0} acquired, or {0, sleep ms}. Their split forms mark as the
 * tries' do. */
#define ACQUIRE_PROLOGUE                                                                           \
    "local now = wk_now()\n"                                                                       \
    "local id = ARGV[4] == '-1' and '' or ARGV[1]\n"                                               \
    "local ttl = tonumber(ARGV[2])\n"                                                              \
    "local W, Q, E, R, WP = KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[3]\n" RW_REVOKE_LUA

/* A lease already handed to this waiter (`mine`, a Lua condition) is its
 * own: taken. Then ended registrations are pruned before the take (a
 * lease handed to a waiter that died goes back, wk_revoke), a fair try's
 * too. */
#define TAKE_HANDED(mine)                                                                          \
    "if id ~= '' and " mine " then\n"                                                             \
    "  wk_call('ZREM', E, id)\n"                                                                   \
    "  wk_took(Q, E, WP, id, now, false)\n"                                                        \
    "  return {1, 0}\n"                                                                            \
    "end\n"                                                                                        \
    "wk_prune(Q, E, WP, now)\n"

static const wk__two_forms acquire_read_forms = {
    {"rwlock.acquire_read", WK__WAKE_LUA WK__WAKE_LUA_BOUND ACQUIRE_PROLOGUE TAKE_HANDED(
        "tonumber(redis.call('ZSCORE', R, id) or '0') > now")
     "if wk_may_take(KEYS[2], KEYS[3], ARGV[3], id, now, ARGV[5] == '1') and\n"
     "   redis.call('EXISTS', KEYS[1]) == 0 then\n"
     "  redis.call('ZADD', KEYS[4], string.format('%.0f', now + ttl), ARGV[1])\n"
     "  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)\n"
     "  if redis.call('PTTL', KEYS[4]) < ttl then redis.call('PEXPIRE', KEYS[4], ttl) end\n"
     "  wk_took(KEYS[2], KEYS[3], ARGV[3], id, now, true)\n"
     "  return {1, 0}\n"
     "end\n"
     "if id == '' then return {0, 0} end\n"
     "local blocked = wk_bound_handed(Q, E, now, redis.call('PTTL', KEYS[1]))\n"
     "return {0, wk_park(KEYS[2], KEYS[3], ARGV[3], id, now, tonumber(ARGV[4]), blocked, true)}\n"},
    &wk__rwlock_read_mark,
    3};

static const wk__two_forms acquire_write_forms = {
    {"rwlock.acquire_write", WK__WAKE_LUA WK__WAKE_LUA_BOUND ACQUIRE_PROLOGUE TAKE_HANDED(
        "redis.call('GET', W) == id")
     "if wk_may_take(KEYS[2], KEYS[3], ARGV[3], id, now, ARGV[5] == '1') and\n"
     "   " RUNNING("KEYS[4]") " == 0 and\n"
     "   redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then\n"
     "  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)\n"
     "  wk_took(KEYS[2], KEYS[3], ARGV[3], id, now, false)\n"
     "  return {1, 0}\n"
     "end\n"
     "if id == '' then return {0, 0} end\n"
     "local blocked = redis.call('PTTL', KEYS[1])\n"
     "local last = redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')\n"
     "if last[2] and tonumber(last[2]) - now > blocked then blocked = tonumber(last[2]) - now end\n"
     "blocked = wk_bound_handed(Q, E, now, blocked)\n"
     "return {0, wk_park(KEYS[2], KEYS[3], ARGV[3], id, now, tonumber(ARGV[4]), blocked)}\n"},
    &wk__rwlock_write_mark,
    0};

/* KEYS: w, q, e, r. ARGV: w prefix. Returns 1 if a writer or a running
 * reader held it. */
static const wk_script force_release_script = {
    "rwlock.force_release", WK__WAKE_LUA_CORE WK__NOW_MS
    "local held = redis.call('EXISTS', KEYS[1]) == 1 or " RUNNING("KEYS[4]") " > 0\n"
    "redis.call('DEL', KEYS[1], KEYS[4])\n"
    "wk_wake(KEYS[2], KEYS[3], ARGV[1], now)\n"
    "return held and 1 or 0\n"};

/* KEYS: r. ARGV: token. ms left on that reader's lease, or -2. */
static const wk_script owned_read_script = {
    "rwlock.owned_read", WK__NOW_MS "local s = redis.call('ZSCORE', KEYS[1], ARGV[1])\n"
                                "if s and tonumber(s) > now then return tonumber(s) - now end\n"
                                "return -2\n"};

/* KEYS: r. ARGV: token, ttl. Renews only a running lease. */
const wk_script wk__rwlock_extend_read_script = {
    "rwlock.extend_read",
    WK__NOW_MS "local ttl = tonumber(ARGV[2])\n"
           "local s = redis.call('ZSCORE', KEYS[1], ARGV[1])\n"
           "redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)\n"
           "if not s or tonumber(s) <= now then return 0 end\n"
           "redis.call('ZADD', KEYS[1], 'XX', string.format('%.0f', now + ttl), ARGV[1])\n"
           "if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end\n"
           "return 1\n"};

/* KEYS: w, q, e, r. Returns {writer PTTL, running readers, waiters
 * queued}. Writes nothing. */
const wk_script wk__rwlock_inspect_script = {
    "rwlock.inspect", WK__NOW_MS "return {redis.call('PTTL', KEYS[1]), " RUNNING(
                          "KEYS[4]") ", redis.call('ZCARD', KEYS[2])}\n"};

/* Its operations (collection/op.h): the writer key ":w" and the reader
 * set ":r"; the wake keys are always the writer key's. */
#define RW_OP(op, ...) {WK__OP_OF(rwlock, op), .kind = WK_KIND_RWLOCK, __VA_ARGS__}
#define OUT(type, name) .out_name = name, .out_size = sizeof(type)
#define BOTH .suffix = {":w", ":r"}

/* The takes of one side: its try (KEYS w, q, e, r); a fair RwLock's try,
 * which does not barge past the waiters, and every attempt of a wait,
 * both its acquire-or-park script (KEYS w, q, e, r, cap -1 for the try).
 * All are split while a migration splits the keys. */
typedef struct side {
    wk__op try, fair_try, acquire;
    wk__lease_release_fn release;
} side;

#define ACQUIRE(forms_, steps_, ...)                                                               \
    {.kind = WK_KIND_RWLOCK, .flags = WK__QUERY_LEASE, .forms = forms_, .steps = steps_, BOTH,     \
     .token = true, .wake = 2,                                                                     \
     .args = {WK__ARG_TOKEN, WK__ARG_TTL, WK__ARG_WAKE, WK__ARG_CAP, WK__ARG_FAIR}, __VA_ARGS__}
#define SIDE(try_, try_forms, acquire_name, acquire_forms_, steps_, release_)                      \
    {RW_OP(try_, .flags = WK__QUERY_LEASE, .forms = try_forms, .steps = steps_, BOTH,              \
           .token = true, .wake = 2,                                                          \
           .args = {WK__ARG_TOKEN, WK__ARG_TTL, WK__ARG_WAKE, WK__ARG_CAP},                       \
           .parse = wk__parse_bool_int,                                                           \
           OUT(bool, "outcome")),                                                                  \
     ACQUIRE(acquire_forms_, steps_, WK__OP_OF(rwlock, try_), .parse = wk__parse_first_bool,       \
             OUT(bool, "outcome")),                                                                \
     ACQUIRE(acquire_forms_, steps_, .name = acquire_name, .mode = WK_WRITE,                       \
             .parse = wk__wake_parse_outcome, .leave = &leave_op),                                 \
     release_}

/* A waiter's leave (KEYS w, q, e, r; ARGV its token, w, ttl): passes on a
 * lease handed to it as it gives up. */
static const wk__op leave_op = {.name = "rwlock.leave", .kind = WK_KIND_RWLOCK, .mode = WK_WRITE,
                                .script = &leave_script, BOTH, .token = true, .wake = 2,
                                .args = {WK__ARG_TOKEN, WK__ARG_WAKE, WK__ARG_TTL}};

static const side reading = SIDE(try_read, &wk__rwlock_try_read_forms, "rwlock.acquire_read",
                                 &acquire_read_forms, &wk__rwlock_read_steps,
                                 wk_rwlock_release_read);
static const side writing = SIDE(try_write, &wk__rwlock_try_write_forms, "rwlock.acquire_write",
                                 &acquire_write_forms, &wk__rwlock_write_steps,
                                 wk_rwlock_release_write);

static int try_side(wk_processor *p, const side *sd, const wk_entity *e, wk_name name,
                    wk_token *token, bool *acquired)
{
    const wk__op *op = e && (e->flags & WK_ENTITY_FAIR) ? &sd->fair_try : &sd->try;
    return wk__lease_try(p, op, e, name, token, acquired, sd->release);
}

int wk_rwlock_try_read(wk_processor *p, const wk_entity *rwlock, wk_name name, wk_token *token,
                       bool *acquired)
{
    return try_side(p, &reading, rwlock, name, token, acquired);
}

int wk_rwlock_try_write(wk_processor *p, const wk_entity *rwlock, wk_name name, wk_token *token,
                        bool *acquired)
{
    return try_side(p, &writing, rwlock, name, token, acquired);
}

int wk_rwlock_acquire_read(wk_processor *p, const wk_entity *rwlock, wk_name name, int64_t deadline,
                           const wk_backoff *backoff, wk_token *token, bool *acquired)
{
    return wk__lease_acquire(&reading.acquire, wk_rwlock_try_read, wk_rwlock_release_read, p,
                             rwlock, name, deadline, backoff, token, acquired);
}

int wk_rwlock_acquire_write(wk_processor *p, const wk_entity *rwlock, wk_name name,
                            int64_t deadline, const wk_backoff *backoff, wk_token *token,
                            bool *acquired)
{
    return wk__lease_acquire(&writing.acquire, wk_rwlock_try_write, wk_rwlock_release_write, p,
                             rwlock, name, deadline, backoff, token, acquired);
}

/* The token operations, each on the key of its side: the reader set, or
 * the writer key with the Lock scripts. */
#define READER .suffix = {":r"}
#define WRITER .suffix = {":w"}
#define TOKEN_ARGS(...) .token = true, .args = {WK__ARG_TOKEN, __VA_ARGS__}

/* The releases name the other side's key too (KEYS r, q, e, w and w, q,
 * e, r): they hand the item over. */
static const wk__op release_read_op =
    RW_OP(release_read, .forms = &wk__rwlock_release_read_forms, .suffix = {":r", ":w"}, .wake = 2,
          .wake_of = ":w", TOKEN_ARGS(WK__ARG_WAKE, WK__ARG_TTL), .parse = wk__parse_bool_int,
          OUT(bool, "outcome"));
static const wk__op release_write_op =
    RW_OP(release_write, .forms = &wk__rwlock_release_write_forms, BOTH, .wake = 2,
          TOKEN_ARGS(WK__ARG_WAKE, WK__ARG_TTL), .parse = wk__parse_bool_int,
          OUT(bool, "outcome"));
static const wk__op extend_read_op =
    RW_OP(extend_read, .flags = WK__QUERY_LEASE, .script = &wk__rwlock_extend_read_script, READER,
          TOKEN_ARGS(WK__ARG_TTL), .parse = wk__parse_bool_int, OUT(bool, "outcome"));
static const wk__op extend_write_op =
    RW_OP(extend_write, .flags = WK__QUERY_LEASE, .script = &wk__lock_extend_script, WRITER,
          TOKEN_ARGS(WK__ARG_TTL), .parse = wk__parse_bool_int, OUT(bool, "outcome"));
static const wk__op owned_read_op =
    RW_OP(owned_read, .flags = WK_QUERY_RETRY_SAFE, .script = &owned_read_script, READER,
          .token = true, .args = {WK__ARG_TOKEN}, .parse = wk__parse_owned,
          OUT(wk_lease_state, "outcome"));
static const wk__op owned_write_op =
    RW_OP(owned_write, .flags = WK_QUERY_RETRY_SAFE, .script = &wk__lock_owned_script, WRITER,
          .token = true, .args = {WK__ARG_TOKEN}, .parse = wk__parse_owned,
          OUT(wk_lease_state, "outcome"));

WK__OP_TOKEN_FN(wk_rwlock_release_read, release_read_op, bool)
WK__OP_TOKEN_FN(wk_rwlock_release_write, release_write_op, bool)
WK__OP_TOKEN_FN(wk_rwlock_extend_read, extend_read_op, bool)
WK__OP_TOKEN_FN(wk_rwlock_extend_write, extend_write_op, bool)
WK__OP_TOKEN_FN(wk_rwlock_owned_read, owned_read_op, wk_lease_state)
WK__OP_TOKEN_FN(wk_rwlock_owned_write, owned_write_op, wk_lease_state)

static int parse_inspect(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    const wk_reply *pttl = wk_reply_at(r, 0), *readers = wk_reply_at(r, 1);
    if (wk_reply_count(r) < 2 || wk_reply_get_type(pttl) != WK_REPLY_INTEGER ||
        wk_reply_get_type(readers) != WK_REPLY_INTEGER)
        return wk_diag_fail(d, WK_EPROTO, "expected {pttl, readers, waiting}");
    wk_rwlock_state *st = q->out;
    st->waiting = wk__waiting_of(r, 2);
    long long ttl = wk_reply_integer(pttl);
    st->writer_held = ttl != -2;
    st->writer_ttl_ms = ttl == -2 ? 0 : ttl;
    st->readers = wk_reply_integer(readers);
    return WK_OK;
}

static const wk__op inspect_op = RW_OP(inspect, .flags = WK_QUERY_RETRY_SAFE,
                                       .script = &wk__rwlock_inspect_script, BOTH,
                                       .wake = 2, .parse = parse_inspect, .out_name = "state");
static const wk__op force_release_op = RW_OP(force_release, .script = &force_release_script, BOTH,
                                             .wake = 2, .args = {WK__ARG_WAKE},
                                             .parse = wk__parse_bool_int, OUT(bool, "was_held"));

WK__OP_FN(wk_rwlock_inspect, inspect_op, wk_rwlock_state)

int wk__rwlock_leave(wk_processor *p, const wk_entity *rw, wk_name name, const wk_token *id)
{
    return wk__op_run_token(p, &leave_op, rw, name, id, NULL);
}
WK__OP_FN(wk_rwlock_force_release, force_release_op, bool)
