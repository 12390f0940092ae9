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

/* KEYS: lease, fence. ARGV: token, ttl, cap (-1: its split form's
 * mark reads it), w. The new fence, or 0 when held. A lease held by a
 * waiter that was handed it and never took its notice by the end written
 * in it (wk_unclaimed: it died, stalled or left) is the caller's: a
 * FencedLock has no fair mode. Only that rare path defines functions.
 * Its split form marks the lease. */
const wk__two_forms wk__fenced_lock_try_forms = {
    {"fenced_lock.try",
     TAKE_LUA "local f = take()\n"
     "if f > 0 then return f end\n"
     "local holder = redis.call('HGET', KEYS[1], 'token')\n" WK__WAKE_LUA_TRY_TAKE_BACK(
         "ARGV[4]", "holder")
     "redis.call('DEL', KEYS[1])\n"
     "return take()\n"},
    &wk__fenced_lock_mark,
    0};

/* Hand the lease (KEYS[1]) to the head of the queue (KEYS[3], KEYS[4];
 * `w` and `ttl` Lua expressions: the wake prefix and the TTL) with a
 * fence drawn from the counter (KEYS[2]) for it, here, in the order of
 * acquisition: the head's token and that fence, the whole TTL; the fence
 * travels in the head's notice. A Lua expression: the head, or nil when
 * nobody waits. Needs WK__WAKE_LUA_CORE and WK__WAKE_LUA_HAND. */
#define HAND(now, w, ttl)                                                                          \
    "wk_hand(KEYS[3], KEYS[4], " w ", " now ", " ttl ", function(h)\n"                             \
    "  local f = redis.call('INCR', KEYS[2])\n"                                                    \
    "  redis.call('HSET', KEYS[1], 'token', h, 'fence', f)\n"                                      \
    "  redis.call('PEXPIRE', KEYS[1], " ttl ")\n"                                                  \
    "  return f\n"                                                                                 \
    "end)"

/* KEYS: lease, fence, q, e (collection/wake.h). ARGV: token (the waiter's
 * id too), ttl, cap, w. {1, fence}, or {0, ms to sleep} after parking. A
 * lease already handed to this waiter is its own; one handed to a waiter
 * that never took its notice by the end of its registration (it died) is
 * passed on to the head (a new fence), or freed. */
static const wk__two_forms acquire_forms = {
    {"fenced_lock.acquire",
     WK__WAKE_LUA WK__WAKE_LUA_HAND TAKE_LUA
     "local now = wk_now()\n"
     "local v = redis.call('HMGET', KEYS[1], 'token', 'fence')\n"
     "if v[1] and v[1] ~= ARGV[1] and wk_unclaimed(ARGV[4], v[1], now) then\n"
     "  redis.call('DEL', KEYS[1])\n"
     "  " HAND("now", "ARGV[4]", "ARGV[2]") "\n"
     "  v = redis.call('HMGET', KEYS[1], 'token', 'fence')\n"
     "end\n"
     "if v[1] == ARGV[1] and tonumber(v[2] or '0') > 0 then\n"
     "  wk_took(KEYS[3], KEYS[4], ARGV[4], ARGV[1], now, false)\n"
     "  return {1, tonumber(v[2])}\n"
     "end\n"
     "local f = take()\n"
     "if f > 0 then\n"
     "  wk_took(KEYS[3], KEYS[4], ARGV[4], ARGV[1], now, false)\n"
     "  return {1, f}\n"
     "end\n"
     "local blocked = redis.call('PTTL', KEYS[1])\n"
     "local claim = v[1] and wk_claim_left(ARGV[4], v[1], now)\n"
     "if claim and claim < blocked then blocked = claim end\n"
     "return {0, wk_park(KEYS[3], KEYS[4], ARGV[4], ARGV[1], now, tonumber(ARGV[3]), blocked)}\n"},
    &wk__fenced_lock_mark,
    0};

/* KEYS: lease, fence, q, e. ARGV: token, w, ttl. 1 if it held the token;
 * then the lease goes to the head waiter with a new fence (handing over),
 * or is freed when nobody waits. */
const wk__two_forms wk__fenced_lock_release_forms = {
    {"fenced_lock.release", "if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end\n"
                            /* Only a release somebody waits for defines the wake functions. */
                            "if redis.call('EXISTS', KEYS[3]) == 1 then\n" WK__WAKE_LUA_CORE
                                WK__WAKE_LUA_HAND "  if " HAND("nil", "ARGV[2]", "ARGV[3]") " then return 1 end\n"
                            "end\n"
                            "redis.call('DEL', KEYS[1])\n"
                            "return 1\n"},
    &wk__fenced_lock_release_single,
    0};

/* KEYS: lease, fence, q, e. ARGV: the waiter's token, w, ttl. A waiter
 * that gives up: a lease handed to it meanwhile goes on to the next head
 * (or is freed); else it leaves the queue as wake.leave does. */
static const wk_script leave_script = {
    "fenced_lock.leave", WK__WAKE_LUA_CORE WK__WAKE_LUA_HAND
    "local now = wk_now()\n"
    "if redis.call('HGET', KEYS[1], 'token') == ARGV[1] then\n"
    "  redis.call('DEL', ARGV[2] .. ARGV[1])\n"
    "  redis.call('DEL', KEYS[1])\n"
    "  " HAND("now", "ARGV[2]", "ARGV[3]") "\n"
    "  return 1\n"
    "end\n" WK__WAKE_LEAVE_LUA("KEYS[3]", "KEYS[4]", "ARGV[2]", "ARGV[1]") "return 0\n"};

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

/* KEYS: lease, fence, q, e. {pttl of the lease, the counter, waiters
 * queued}. Reads only. */
static const wk_script inspect_script = {
    "fenced_lock.inspect", "return {redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2]), "
                           "redis.call('ZCARD', KEYS[3])}\n"};

/* KEYS: lease, fence, q, e. ARGV: w. 1 if a lease was there. The counter
 * stays; the head waiter is woken. */
static const wk_script force_release_script = {"fenced_lock.force_release", WK__WAKE_LUA_CORE
                                               "local n = redis.call('DEL', KEYS[1])\n"
                                               "wk_wake(KEYS[3], KEYS[4], ARGV[1], nil)\n"
                                               "return n\n"};

/* Its operations (collection/op.h): the lease hash ":lease" and the
 * fence counter ":fence"; the wake keys come after both (KEYS[3], [4]). */
#define FENCED_OP(op, ...) {WK__OP_OF(fenced_lock, op), .kind = WK_KIND_FENCED_LOCK, __VA_ARGS__}
#define OUT(type) .out_name = "an outcome", .out_size = sizeof(type)
#define TOKEN_OUT(type, name) .token = true, .out_name = name, .out_size = sizeof(type)
#define BOTH .suffix = {":lease", ":fence"}
#define LEASE_ONLY .suffix = {":lease"}

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

/* The takes: its token is the lease's (set after wk__op_begin). */
static const wk__op try_op =
    FENCED_OP(try, .flags = WK__QUERY_LEASE, .forms = &wk__fenced_lock_try_forms,
              .steps = &wk__fenced_lock_steps, BOTH,
              .args = {WK__ARG_TOKEN, WK__ARG_TTL, WK__ARG_CAP, WK__ARG_WAKE},
              .parse = parse_try, OUT(wk_fenced_lease));
static const wk__op leave_op = {.name = "fenced_lock.leave", .kind = WK_KIND_FENCED_LOCK,
                                .mode = WK_WRITE, .script = &leave_script, BOTH, .token = true,
                                .wake = 3, .args = {WK__ARG_TOKEN, WK__ARG_WAKE, WK__ARG_TTL}};
static const wk__op acquire_op = {
    .name = "fenced_lock.acquire", .kind = WK_KIND_FENCED_LOCK, .mode = WK_WRITE,
    .flags = WK__QUERY_LEASE, .forms = &acquire_forms, .steps = &wk__fenced_lock_steps, BOTH,
    .wake = 3, .args = {WK__ARG_TOKEN, WK__ARG_TTL, WK__ARG_CAP, WK__ARG_WAKE},
    .parse = parse_try, OUT(wk_fenced_lease), .leave = &leave_op};

/*
 * A take (a try, or one attempt of a wait) of call c into *lease (acquired,
 * fence), after the steps of a take split by a migration; *got holds the
 * reply (the sleep). Through a deferred processor (a batch, which runs no
 * steps) parse_try writes *lease when the batch runs.
 */
static int take(wk__call *c, wk_fenced_lease *lease, wk__take_reply *got)
{
    int rc = wk__lease_take(c, got);
    if (!got->parsed)
        return rc;
    if (rc == WK_OK && got->acquired && got->n < 1)
        return wk__op_fail(c, WK_EPROTO, "expected a fence >= 1");
    lease->acquired = got->acquired;
    lease->fence = got->acquired ? got->n : 0;
    return rc;
}

int wk_fenced_lock_try(wk_processor *p, const wk_entity *lock, wk_name name, wk_fenced_lease *lease)
{
    wk__call c;
    int rc = wk__op_begin(&c, p, &try_op, lock, name, lease);
    if (rc)
        return rc;
    /* Written now, so a batch's caller has the token before it runs. */
    wk_token_random(&lease->token);
    c.token = &lease->token;
    wk__take_reply got;
    rc = take(&c, lease, &got);
    /* lease_replicas: an unacknowledged lease is given back (its fence
     * stays spent: fences only have to increase). */
    return wk__lease_settle(p, try_op.name, rc, wk_fenced_lock_release, lock, name, &lease->token);
}

static const wk__op release_op = FENCED_OP(release, .forms = &wk__fenced_lock_release_forms, BOTH,
                                           .wake = 3,
                                           .args = {WK__ARG_TOKEN, WK__ARG_WAKE, WK__ARG_TTL},
                                           .parse = wk__parse_bool_int, TOKEN_OUT(bool, "outcome"));
static const wk__op extend_op = FENCED_OP(
    extend, .flags = WK__QUERY_LEASE, .script = &extend_script, LEASE_ONLY,
    .args = {WK__ARG_TOKEN, WK__ARG_TTL}, .parse = wk__parse_bool_int, TOKEN_OUT(bool, "outcome"));

WK__OP_TOKEN_FN(wk_fenced_lock_release, release_op, bool)
WK__OP_TOKEN_FN(wk_fenced_lock_extend, extend_op, bool)

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

/* {…, pttl, fence} from element `at` on: the reply has exactly two more. */
static int pttl_and_fence(const wk_reply *r, size_t at, const char *shape, long long *pttl,
                          int64_t *fence, wk_diag *d)
{
    const wk_reply *t = wk_reply_at(r, at);
    if (wk_reply_count(r) != at + 2 || wk_reply_get_type(t) != WK_REPLY_INTEGER)
        return wk_diag_fail(d, WK_EPROTO, "expected %s", shape);
    *pttl = wk_reply_integer(t);
    return fence_of(wk_reply_at(r, at + 1), fence, d);
}

static int parse_owned(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    wk_fenced_lock_ownership *st = q->out;
    const wk_reply *flag = wk_reply_at(r, 0);
    if (wk_reply_get_type(flag) != WK_REPLY_INTEGER)
        return wk_diag_fail(d, WK_EPROTO, "expected {1, pttl, fence} or {0}");
    if (wk_reply_integer(flag) == 0)
        return WK_OK;
    long long pttl = 0; /* set when rc is 0; gcc -O3 cannot see it */
    int rc = pttl_and_fence(r, 1, "{1, pttl, fence} or {0}", &pttl, &st->fence, d);
    if (rc)
        return rc;
    st->owned = true;
    st->ttl_ms = pttl;
    return WK_OK;
}

static const wk__op owned_op = FENCED_OP(
    owned, .flags = WK_QUERY_RETRY_SAFE, .script = &owned_script, LEASE_ONLY,
    .args = {WK__ARG_TOKEN}, .parse = parse_owned, TOKEN_OUT(wk_fenced_lock_ownership, "state"));

WK__OP_TOKEN_FN(wk_fenced_lock_owned, owned_op, wk_fenced_lock_ownership)

static int parse_inspect(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    wk_fenced_lock_state *st = q->out;
    long long ttl = 0; /* set when rc is 0; gcc -O3 cannot see it */
    const wk_reply *t = wk_reply_at(r, 0);
    if (wk_reply_count(r) < 2 || wk_reply_get_type(t) != WK_REPLY_INTEGER)
        return wk_diag_fail(d, WK_EPROTO, "expected {pttl, fence, waiting}");
    ttl = wk_reply_integer(t);
    int rc = fence_of(wk_reply_at(r, 1), &st->last_fence, d);
    st->waiting = wk__waiting_of(r, 2);
    if (rc)
        return rc;
    st->held = ttl != -2;
    st->ttl_ms = ttl == -2 ? 0 : ttl;
    return WK_OK;
}

static const wk__op inspect_op = FENCED_OP(inspect, .flags = WK_QUERY_RETRY_SAFE,
                                           .script = &inspect_script, BOTH, .wake = 3,
                                           .parse = parse_inspect,
                                           OUT(wk_fenced_lock_state));
static const wk__op force_release_op =
    FENCED_OP(force_release, .script = &force_release_script, BOTH, .wake = 3,
              .args = {WK__ARG_WAKE}, .parse = wk__parse_bool_int, OUT(bool));

WK__OP_FN(wk_fenced_lock_inspect, inspect_op, wk_fenced_lock_state)
WK__OP_FN(wk_fenced_lock_force_release, force_release_op, bool)

/* ------------------------------------------------------------------------
 * The waiting acquire (collection/wake.h)
 * ---------------------------------------------------------------------- */

/* One attempt: the take of the acquire call, whose OUT is the lease. */
static int attempt(wk__waiter *w, int64_t cap_ms, wk__wake_outcome *out)
{
    wk__call *c = w->ctx;
    wk_fenced_lease *lease = c->out;
    c->cap_ms = cap_ms;
    wk__take_reply got;
    int rc = take(c, lease, &got);
    out->acquired = lease->acquired;
    out->sleep_ms = got.acquired ? 0 : got.n;
    return rc;
}

int wk_fenced_lock_acquire(wk_processor *p, const wk_entity *lock, wk_name name, int64_t deadline,
                           wk_fenced_lease *lease)
{
    wk__call c; /* the lease zeroed: not acquired, the token the try's */
    int rc = wk__op_begin(&c, p, &acquire_op, lock, name, lease);
    if (rc == WK_OK && wk_processor_is_deferred(p)) {
        rc = wk__wake_deferred(p, acquire_op.name);
        if (rc == WK__WAKE_LOOP)
            return wk__lease_loop_acquire(&acquire_op, p, lock, name, deadline, &lease->token,
                                          &lease->acquired, &lease->fence,
                                          wk_fenced_lock_release);
    }
    if (rc)
        return rc;
    /* One plain try first: the uncontended acquire costs a try. */
    int64_t outer = wk__wake_bound(p, wk__wake_end(deadline)); /* the acquire's deadline */
    rc = wk_fenced_lock_try(p, lock, name, lease);
    wk__wake_unbound(p, outer);
    if (rc != WK_OK || lease->acquired || wk__boot_ms() >= deadline)
        return rc;
    /* The try's token, which took nothing, is the waiter's place in the
     * queue, and the lease's once acquired. */
    c.token = &lease->token;
    return wk__lease_wait(&c, deadline, wk_fenced_lock_release, attempt, &lease->fence,
                          &lease->acquired);
}
