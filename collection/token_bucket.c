/*
 * collection/token_bucket.c — TokenBucket: a rate limiter in one Redis hash
 * {tokens, ts}, refilled by the server clock inside Lua scripts.
 *
 * EXACT ARITHMETIC. The scripts count in whole units of 1/unit token and
 * whole ms, with every value an integer ≤ 2^53 (exact in Lua's doubles),
 * so no admission rounds anything up and none creates tokens
 * (collection/token_bucket_units.h derives the units and says which
 * parameters are accepted). Refill arrives as step_units every step_ms,
 * counted from the stored ts: step_ms is 1 — refill exact to the ms —
 * unless capacity × (denominator of rate/period) exceeds 2^50, and then
 * the smallest whole number of ms that refills a whole number of units.
 * An update stores ts at the last step boundary (≤ now) rather than at
 * now, so the refill of the part-step since is kept, not rounded away.
 *
 * THE FIELDS stay what the Rust crate reads and writes: `tokens` is the
 * token count (units / unit, written by the server as "%.17g", so it
 * reads back as exactly the double nearest units / unit, which the
 * script turns back into the same units) and `ts` the whole server ms it
 * was counted at. A value not of that form (written by the crate or with
 * other parameters) is rounded DOWN to whole units. Integers cross the
 * wire in decimal and are ≤ 2^53 both ways; no double does.
 */
#include <math.h>

#include <wakuwaku/token_bucket.h>

#include "collection/common.h"
#include "collection/op.h"
#include "collection/token_bucket_units.h"
#include "entity/kind.h"

/* The parameters of a TokenBucket descriptor, for wk_entity_check(). */
static int check_params(const wk_entity *e, char *msg, size_t len)
{
    if (!wk__positive_finite(e->capacity))
        return wk__entity_fail(msg, len, "capacity must be a finite number > 0 (got %g)",
                               e->capacity);
    if (!wk__positive_finite(e->rate))
        return wk__entity_fail(msg, len, "rate must be a finite number > 0 (got %g)", e->rate);
    if (e->period_ms <= 0)
        return wk__entity_fail(msg, len, "period_ms must be > 0 (got %lld)",
                               (long long)e->period_ms);
    return WK_OK;
}

/* The kind (entity/kind.h). */
WK__KIND(token_bucket) = {WK_KIND_TOKEN_BUCKET, check_params};

/* ------------------------------------------------------------------------
 * Scripts
 * ---------------------------------------------------------------------- */

/*
 * Shared prologue. KEYS[1] = the bucket. ARGV[1..4] = unit, cap, step
 * units, step ms (token_bucket_units.h). Leaves `now` (server ms), `x`
 * (units in the bucket now), `ts` (the step boundary x counts from: now
 * when full or when the clock went back) and `back` (the server clock is
 * behind the stored ts). A corrupted key returns {'corrupt', why}.
 */
#define TB_PROLOGUE                                                                        \
    "local U, CU, A, B = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), "        \
    "tonumber(ARGV[4])\n"                                                                  \
    "local t = redis.call('TIME')\n"                                                       \
    "local now = t[1] * 1000 + math.floor(t[2] / 1000)\n"                                  \
    "local h = redis.pcall('HMGET', KEYS[1], 'tokens', 'ts')\n"                            \
    "if h.err then return {'corrupt', h.err} end\n"                                        \
    "local x, ts, back = CU, now, false\n"                                                 \
    "if h[1] or h[2] then\n"                                                               \
    "  local v, s = tonumber(h[1]), tonumber(h[2])\n"                                      \
    "  if not (v and v >= 0 and v < math.huge) then\n"                                     \
    "    return {'corrupt', 'field tokens is missing or not a number >= 0'}\n"             \
    "  end\n"                                                                              \
    "  if not (s and s > -math.huge and s < math.huge) then\n"                             \
    "    return {'corrupt', 'field ts is missing or not a finite number'}\n"               \
    "  end\n"                                                                              \
    /* ours: exactly the double nearest x / U; anything else: round down */                \
    "  x = math.floor(v * U + 0.5)\n"                                                      \
    "  if x / U ~= v then x = math.floor(v * U) end\n"                                     \
    "  ts = math.ceil(s)\n"                                                                \
    "  if now < ts then back = true; ts = now\n"                                           \
    "  elseif x < CU then\n"                                                               \
    "    local e = now - ts\n"                                                             \
    "    local n = math.floor(e / B)\n"                                                    \
    "    if e >= 9007199254740992 or n >= math.ceil((CU - x) / A) then x = CU\n"          \
    "    else x = x + n * A; ts = ts + n * B end\n"                                        \
    "  end\n"                                                                              \
    "  if x >= CU then x = CU; ts = now end\n"                                             \
    "elseif redis.call('EXISTS', KEYS[1]) == 1 then\n"                                     \
    "  return {'corrupt', 'a hash without the fields tokens and ts'}\n"                    \
    "end\n"

/* full = ms until x reaches CU (saturating at 2^53), once x is final. */
#define TB_FULL                                                                            \
    "local full = 0\n"                                                                     \
    "if x < CU then\n"                                                                     \
    "  full = math.ceil((CU - x) / A) * B\n"                                               \
    "  if full >= 9007199254740992 then full = 9007199254740992 else full = full - (now - ts) end\n" \
    "end\n"

/*
 * acquire: ARGV[5] = cost in units, -1 when it exceeds the capacity.
 * Returns {allowed, whole tokens left, retry_ms, full_ms}. Writes only
 * when it takes tokens or when the clock went back (to restart refill
 * from now); a bucket left full loses its key, and the key expires at the
 * server time the bucket is full again (PEXPIREAT: the same clock as
 * TIME, never earlier).
 */
static const wk_script acquire_script = {
    "token_bucket.acquire",
    TB_PROLOGUE
    "local cost = tonumber(ARGV[5])\n"
    "local allowed, retry = 0, 0\n"
    "if cost < 0 then retry = -1\n"
    "elseif x >= cost then allowed = 1; x = x - cost\n"
    "else\n"
    "  retry = math.ceil((cost - x) / A) * B\n"
    "  if retry >= 9007199254740992 then retry = 9007199254740992 else retry = retry - (now - ts) end\n"
    "end\n"
    TB_FULL
    "if allowed == 1 or back then\n"
    "  if full > 0 then\n"
    "    redis.call('HSET', KEYS[1], 'tokens', x / U, 'ts', ts)\n"
    "    redis.call('PEXPIREAT', KEYS[1], now + full)\n"
    "  else\n"
    "    redis.call('DEL', KEYS[1])\n"
    "  end\n"
    "end\n"
    "return {allowed, math.floor(x / U), retry, full}\n"};

/* peek: writes nothing. Returns {whole tokens, full_ms, units, unit}. */
static const wk_script peek_script = {
    "token_bucket.peek",
    TB_PROLOGUE TB_FULL
    "return {math.floor(x / U), full, x, U}\n"};

/* ------------------------------------------------------------------------
 * Arguments and replies
 * ---------------------------------------------------------------------- */

/* The script arguments after the key (unit, cap, step units, step ms and,
 * for acquire, the cost in units) as decimal integers in caller-provided
 * buffers. */
/* Derive the units (WK_EINVAL naming the parameter when the bucket's
 * parameters cannot be represented exactly) and run the call's script
 * with them as arguments (and the cost's units when `cost`). */
static int send_units(const wk__call *c, const uint64_t *cost)
{
    const wk_entity *e = c->e;
    wk__tb_units u;
    char why[300];
    if (wk__tb_units_derive(e->capacity, e->rate, e->period_ms, &u, why, sizeof(why)))
        return wk__op_fail(c, WK_EINVAL, "TokenBucket %s: %s", e->ns, why);
    int64_t v[5] = {(int64_t)u.unit, (int64_t)u.cap, (int64_t)u.step_units, (int64_t)u.step_ms,
                    -1};
    /* cost ≤ capacity ⇒ cost × unit ≤ cap ≤ 2^50: no overflow. */
    if (cost && (double)*cost <= e->capacity)
        v[4] = (int64_t)(*cost * u.unit);
    char num[5][24];
    const char *args[5];
    size_t lens[5];
    int n = cost ? 5 : 4;
    for (int i = 0; i < n; i++) {
        lens[i] = wk__fmt_i64(num[i], v[i]);
        args[i] = num[i];
    }
    return wk__op_send(c, args, lens, n);
}

/* {'corrupt', why} from a script: WK_ECORRUPT naming the key.
 * Returns WK_OK when `r` is not such a reply. */
static int check_corrupt(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    const wk_reply *first = wk_reply_at(r, 0);
    if (wk_reply_get_type(first) != WK_REPLY_STRING)
        return WK_OK;
    size_t why_len = 0;
    const char *why = wk_reply_str(wk_reply_at(r, 1), &why_len);
    char key[200];
    wk__render_key(key, sizeof(key), q->argv[0], q->argvlen[0]);
    return wk_diag_fail(d, WK_ECORRUPT, "TokenBucket key \"%s\" is corrupted: %.*s", key,
                        why ? (int)(why_len > 160 ? 160 : why_len) : 0, why ? why : "");
}

/* `n` integer elements starting at `from`, into v. */
static bool read_ints(const wk_reply *r, size_t from, size_t n, long long *v)
{
    for (size_t i = 0; i < n; i++) {
        const wk_reply *x = wk_reply_at(r, from + i);
        if (wk_reply_get_type(x) != WK_REPLY_INTEGER)
            return false;
        v[i] = wk_reply_integer(x);
    }
    return true;
}

static int parse_acquire(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    if (wk_reply_get_type(r) != WK_REPLY_ARRAY)
        return wk_diag_fail(d, WK_EPROTO, "expected an array reply");
    int rc = check_corrupt(q, r, d);
    if (rc)
        return rc;
    long long v[4];
    if (wk_reply_count(r) != 4 || !read_ints(r, 0, 4, v))
        return wk_diag_fail(d, WK_EPROTO, "expected 4 integers");
    wk_token_bucket_outcome *o = q->out;
    o->allowed = v[0] == 1;
    o->remaining = v[1];
    o->retry_after_ms = v[2];
    o->full_after_ms = v[3];
    return WK_OK;
}

static int parse_peek(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    if (wk_reply_get_type(r) != WK_REPLY_ARRAY)
        return wk_diag_fail(d, WK_EPROTO, "expected an array reply");
    int rc = check_corrupt(q, r, d);
    if (rc)
        return rc;
    long long v[4];
    if (wk_reply_count(r) != 4 || !read_ints(r, 0, 4, v) || v[3] < 1)
        return wk_diag_fail(d, WK_EPROTO, "expected 4 integers");
    wk_token_bucket_state *st = q->out;
    st->available = v[0];
    st->full_after_ms = v[1];
    /* Both ≤ 2^53, so exact as doubles; one correctly rounded division. */
    st->tokens = (double)v[2] / (double)v[3];
    return WK_OK;
}

/* ------------------------------------------------------------------------
 * Queries
 * ---------------------------------------------------------------------- */

static const wk__op acquire_op = {WK__OP_OF(token_bucket, acquire), .kind = WK_KIND_TOKEN_BUCKET,
                                   .script = &acquire_script,
                                  .parse = parse_acquire, .out_name = "outcome",
                                  .out_size = sizeof(wk_token_bucket_outcome)};
static const wk__op peek_op = {WK__OP_OF(token_bucket, peek), .kind = WK_KIND_TOKEN_BUCKET,
                                .flags = WK_QUERY_RETRY_SAFE,
                               .script = &peek_script, .parse = parse_peek, .out_name = "state",
                               .out_size = sizeof(wk_token_bucket_state)};
/* Refill: delete the key. `was_used` may be NULL. */
static const wk__op reset_op = {WK__OP_OF(token_bucket, reset), .kind = WK_KIND_TOKEN_BUCKET,
                                 .command = "DEL", .parse = wk__parse_removed,
                                .out_size = sizeof(bool)};

int wk_token_bucket_acquire(wk_processor *p, const wk_entity *bucket, wk_name name,
                            uint64_t cost, wk_token_bucket_outcome *outcome)
{
    wk__call c;
    int rc = wk__op_begin(&c, p, &acquire_op, bucket, name, outcome);
    if (rc)
        return rc;
    if (cost < 1 || cost > WK_TOKEN_BUCKET_COST_MAX)
        return wk__op_fail(&c, WK_EINVAL, "cost %llu is not in 1..2^53",
                           (unsigned long long)cost);
    /* The parser writes *outcome (zeroed until then), so this works in a
     * batch too. */
    return send_units(&c, &cost);
}

int wk_token_bucket_peek(wk_processor *p, const wk_entity *bucket, wk_name name,
                         wk_token_bucket_state *state)
{
    wk__call c;
    int rc = wk__op_begin(&c, p, &peek_op, bucket, name, state);
    return rc ? rc : send_units(&c, NULL);
}

int wk_token_bucket_reset(wk_processor *p, const wk_entity *bucket, wk_name name,
                          bool *was_used)
{
    return wk__op_run(p, &reset_op, bucket, name, NULL, NULL, 0, was_used);
}
