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
 * The functions every script shares. Arguments: a bucket's key, then its
 * units (token_bucket_units.h): U units per token, CU units when full, A
 * units added every B ms.
 *
 *   tb_state(key, U, CU, A, B, now) → x, ts, back: the units in the
 *     bucket at `now` (server ms), the step boundary x counts from (now
 *     when full or when the clock went back), and whether the server
 *     clock is behind the stored ts. A corrupted key: nil, why.
 *   tb_wait(units, x, ts, now, A, B) → ms until the bucket holds `units`
 *     (0: it does), saturating at 2^53.
 *   tb_store(key, x, ts, now, full, U): write {tokens, ts} and expire the
 *     key when the bucket is full again (PEXPIREAT: the same clock as
 *     TIME), or delete it when it is full now.
 */
#define TB_FUNCTIONS                                                                       \
    "local function tb_state(key, U, CU, A, B, now)\n"                                     \
    "  local h = redis.pcall('HMGET', key, 'tokens', 'ts')\n"                              \
    "  if h.err then return nil, h.err end\n"                                              \
    "  local x, ts, back = CU, now, false\n"                                               \
    "  if h[1] or h[2] then\n"                                                             \
    "    local v, s = tonumber(h[1]), tonumber(h[2])\n"                                    \
    "    if not (v and v >= 0 and v < math.huge) then\n"                                   \
    "      return nil, 'field tokens is missing or not a number >= 0'\n"                   \
    "    end\n"                                                                            \
    "    if not (s and s > -math.huge and s < math.huge) then\n"                           \
    "      return nil, 'field ts is missing or not a finite number'\n"                     \
    "    end\n"                                                                            \
    /* ours: exactly the double nearest x / U; anything else: round down */                \
    "    x = math.floor(v * U + 0.5)\n"                                                    \
    "    if x / U ~= v then x = math.floor(v * U) end\n"                                   \
    "    ts = math.ceil(s)\n"                                                              \
    "    if now < ts then back = true; ts = now\n"                                         \
    "    elseif x < CU then\n"                                                             \
    "      local e = now - ts\n"                                                           \
    "      local n = math.floor(e / B)\n"                                                  \
    "      if e >= 9007199254740992 or n >= math.ceil((CU - x) / A) then x = CU\n"        \
    "      else x = x + n * A; ts = ts + n * B end\n"                                      \
    "    end\n"                                                                            \
    "    if x >= CU then x = CU; ts = now end\n"                                           \
    "  elseif redis.call('EXISTS', key) == 1 then\n"                                       \
    "    return nil, 'a hash without the fields tokens and ts'\n"                          \
    "  end\n"                                                                              \
    "  return x, ts, back\n"                                                               \
    "end\n"                                                                                \
    "local function tb_wait(units, x, ts, now, A, B)\n"                                    \
    "  if x >= units then return 0 end\n"                                                  \
    "  local w = math.ceil((units - x) / A) * B\n"                                         \
    "  if w >= 9007199254740992 then return 9007199254740992 end\n"                        \
    "  return w - (now - ts)\n"                                                            \
    "end\n"                                                                                \
    "local function tb_store(key, x, ts, now, full, U)\n"                                  \
    "  if full > 0 then\n"                                                                 \
    "    redis.call('HSET', key, 'tokens', x / U, 'ts', ts)\n"                             \
    "    redis.call('PEXPIREAT', key, now + full)\n"                                       \
    "  else\n"                                                                             \
    "    redis.call('DEL', key)\n"                                                         \
    "  end\n"                                                                              \
    "end\n"                                                                                \
    "local t = redis.call('TIME')\n"                                                       \
    "local now = t[1] * 1000 + math.floor(t[2] / 1000)\n"

/* One bucket's state: KEYS[1] = the bucket, ARGV[1..4] = its units. */
#define TB_ONE                                                                             \
    "local U, CU, A, B = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), "        \
    "tonumber(ARGV[4])\n"                                                                  \
    "local x, ts, back = tb_state(KEYS[1], U, CU, A, B, now)\n"                            \
    "if not x then return {'corrupt', ts} end\n"

/*
 * acquire: ARGV[5] = cost in units, -1 when it exceeds the capacity.
 * Returns {allowed, whole tokens left, retry_ms, full_ms}. Writes only
 * when it takes tokens or when the clock went back (to restart refill
 * from now); a bucket left full loses its key.
 */
static const wk_script acquire_script = {
    "token_bucket.acquire",
    TB_FUNCTIONS TB_ONE
    "local cost = tonumber(ARGV[5])\n"
    "local allowed, retry = 0, -1\n"
    "if cost >= 0 then retry = tb_wait(cost, x, ts, now, A, B) end\n"
    "if retry == 0 then allowed = 1; x = x - cost end\n"
    "local full = tb_wait(CU, x, ts, now, A, B)\n"
    "if allowed == 1 or back then tb_store(KEYS[1], x, ts, now, full, U) end\n"
    "return {allowed, math.floor(x / U), retry, full}\n"};

/* peek: writes nothing. Returns {whole tokens, full_ms, units, unit}. */
static const wk_script peek_script = {
    "token_bucket.peek",
    TB_FUNCTIONS TB_ONE
    "return {math.floor(x / U), tb_wait(CU, x, ts, now, A, B), x, U}\n"};

/*
 * acquire_all: KEYS = the buckets, ARGV = five per bucket (its units and
 * the cost in units, -1 when it exceeds the capacity). Every bucket is
 * read first; only when each holds its cost is each one taken. Returns
 * {refused (1-based, 0: allowed), the longest wait (-1: never), then per
 * bucket allowed, whole tokens left, retry_ms, full_ms}, or
 * {'corrupt', why, index} before writing anything.
 */
static const wk_script acquire_all_script = {
    "token_bucket.acquire_all",
    TB_FUNCTIONS
    "local seen, refused, wait = {}, 0, 0\n"
    "for i = 1, #KEYS do\n"
    "  local o = (i - 1) * 5\n"
    "  local U, CU, A, B = tonumber(ARGV[o + 1]), tonumber(ARGV[o + 2]), tonumber(ARGV[o + 3]), "
    "tonumber(ARGV[o + 4])\n"
    "  local cost = tonumber(ARGV[o + 5])\n"
    "  local x, ts, back = tb_state(KEYS[i], U, CU, A, B, now)\n"
    "  if not x then return {'corrupt', ts, i} end\n"
    "  local r = -1\n"
    "  if cost >= 0 then r = tb_wait(cost, x, ts, now, A, B) end\n"
    "  if r ~= 0 then\n"
    "    if refused == 0 then refused = i end\n"
    "    if r < 0 or wait < 0 then wait = -1 elseif r > wait then wait = r end\n"
    "  end\n"
    "  seen[i] = {U, CU, A, B, cost, x, ts, back, r}\n"
    "end\n"
    "local out = {refused, wait}\n"
    "for i, s in ipairs(seen) do\n"
    "  local x = s[6]\n"
    "  if refused == 0 then x = x - s[5] end\n"
    "  local full = tb_wait(s[2], x, s[7], now, s[3], s[4])\n"
    "  if refused == 0 or s[8] then tb_store(KEYS[i], x, s[7], now, full, s[1]) end\n"
    "  local ok = 0\n"
    "  if s[9] == 0 then ok = 1 end\n"
    "  out[#out + 1] = ok\n"
    "  out[#out + 1] = math.floor(x / s[1])\n"
    "  out[#out + 1] = s[9]\n"
    "  out[#out + 1] = full\n"
    "end\n"
    "return out\n"};

/* ------------------------------------------------------------------------
 * Arguments and replies
 * ---------------------------------------------------------------------- */

/* The script's five numbers of a bucket — unit, cap, step units, step ms
 * and the cost in units (-1: over the capacity; `cost` 0: none) — as
 * decimal integers in `num`, pointed to by args/lens. Returns WK_OK, or
 * WK_EINVAL with the reason in `why` when the bucket's parameters cannot
 * be represented exactly. */
static int units_args(const wk_entity *e, uint64_t cost, char num[5][24], const char **args,
                      size_t *lens, char *why, size_t why_len)
{
    wk__tb_units u;
    if (wk__tb_units_derive(e->capacity, e->rate, e->period_ms, &u, why, why_len))
        return WK_EINVAL;
    int64_t v[5] = {(int64_t)u.unit, (int64_t)u.cap, (int64_t)u.step_units, (int64_t)u.step_ms,
                    -1};
    /* cost ≤ capacity ⇒ cost × unit ≤ cap ≤ 2^50: no overflow. */
    if ((double)cost <= e->capacity)
        v[4] = (int64_t)(cost * u.unit);
    for (int i = 0; i < 5; i++) {
        lens[i] = wk__fmt_i64(num[i], v[i]);
        args[i] = num[i];
    }
    return WK_OK;
}

/* Run the call's script with the bucket's units as arguments (and the
 * cost's units when `cost`). */
static int send_units(const wk__call *c, const uint64_t *cost)
{
    char num[5][24], why[300];
    const char *args[5];
    size_t lens[5];
    if (units_args(c->e, cost ? *cost : 0, num, args, lens, why, sizeof(why)))
        return wk__op_fail(c, WK_EINVAL, "TokenBucket %s: %s", c->e->ns, why);
    return wk__op_send(c, args, lens, cost ? 5 : 4);
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
    /* acquire_all names the bucket: its 1-based index, third. */
    long long at = 1;
    if (wk_reply_count(r) > 2 && wk_reply_get_type(wk_reply_at(r, 2)) == WK_REPLY_INTEGER)
        at = wk_reply_integer(wk_reply_at(r, 2));
    if (at < 1 || at > q->nkeys)
        return wk_diag_fail(d, WK_EPROTO, "a corruption report names bucket %lld of %d", at,
                            q->nkeys);
    char key[200];
    wk__render_key(key, sizeof(key), q->argv[at - 1], q->argvlen[at - 1]);
    return wk_diag_fail(d, WK_ECORRUPT, "TokenBucket key \"%s\" is corrupted: %.*s", key,
                        why ? (int)(why_len > 160 ? 160 : why_len) : 0, why ? why : "");
}

/* A script's reply of exactly `n` integers, into v (a corruption report
 * is WK_ECORRUPT naming the key). */
static int read_ints(const wk_query *q, const wk_reply *r, wk_diag *d, size_t n, long long *v)
{
    if (wk_reply_get_type(r) != WK_REPLY_ARRAY)
        return wk_diag_fail(d, WK_EPROTO, "expected an array reply");
    int rc = check_corrupt(q, r, d);
    if (rc)
        return rc;
    if (wk_reply_count(r) != n)
        return wk_diag_fail(d, WK_EPROTO, "expected %zu integers", n);
    for (size_t i = 0; i < n; i++) {
        const wk_reply *x = wk_reply_at(r, i);
        if (wk_reply_get_type(x) != WK_REPLY_INTEGER)
            return wk_diag_fail(d, WK_EPROTO, "expected %zu integers", n);
        v[i] = wk_reply_integer(x);
    }
    return WK_OK;
}

/* {allowed, whole tokens left, retry_ms, full_ms} at v, into *o. */
static void outcome_of(const long long *v, wk_token_bucket_outcome *o)
{
    o->allowed = v[0] == 1;
    o->remaining = v[1];
    o->retry_after_ms = v[2];
    o->full_after_ms = v[3];
}

static int parse_acquire(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    long long v[4];
    int rc = read_ints(q, r, d, 4, v);
    if (!rc)
        outcome_of(v, q->out);
    return rc;
}

static int parse_peek(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    long long v[4];
    int rc = read_ints(q, r, d, 4, v);
    if (rc)
        return rc;
    if (v[3] < 1)
        return wk_diag_fail(d, WK_EPROTO, "expected a unit >= 1");
    wk_token_bucket_state *st = q->out;
    st->available = v[0];
    st->full_after_ms = v[1];
    /* Both ≤ 2^53, so exact as doubles; one correctly rounded division. */
    st->tokens = (double)v[2] / (double)v[3];
    return WK_OK;
}

/* {refused, wait, then four integers per bucket}: the outcome and each
 * take's answer (outcome->takes, outcome->count: set by the call). */
static int parse_acquire_all(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    wk_token_bucket_all_outcome *o = q->out;
    size_t n = o->count;
    long long v[2 + 4 * WK_TOKEN_BUCKET_ALL_MAX];
    int rc = read_ints(q, r, d, 2 + 4 * n, v);
    if (rc)
        return rc;
    if (v[0] < 0 || (unsigned long long)v[0] > n)
        return wk_diag_fail(d, WK_EPROTO, "bucket %lld refused, of %zu", v[0], n);
    for (size_t i = 0; i < n; i++)
        outcome_of(&v[2 + 4 * i], &o->takes[i].outcome);
    o->allowed = v[0] == 0;
    o->refused = v[0] == 0 ? n : (size_t)v[0] - 1;
    o->retry_after_ms = v[1];
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

/* ---- atomic multi-limit ----------------------------------------------- */

#define ALL_NAME "token_bucket.acquire_all"

int wk_token_bucket_acquire_all(wk_processor *p, wk_token_bucket_take *takes, size_t n,
                                wk_token_bucket_all_outcome *outcome)
{
    if (outcome) {
        memset(outcome, 0, sizeof(*outcome));
        outcome->refused = n;
    }
    if (!p || !p->process)
        return WK_EINVAL;
    if (!takes || n < 1 || n > WK_TOKEN_BUCKET_ALL_MAX)
        return wk__processor_fail(p, WK_EINVAL, ALL_NAME ": %zu takes (1 to %d, not NULL)",
                                  takes ? n : 0, WK_TOKEN_BUCKET_ALL_MAX);
    if (!outcome)
        return wk__processor_fail(p, WK_EINVAL, ALL_NAME ": outcome is required");
    for (size_t i = 0; i < n; i++)
        memset(&takes[i].outcome, 0, sizeof(takes[i].outcome));

    char keys[WK_TOKEN_BUCKET_ALL_MAX][WK_KEY_MAX];
    char num[WK_TOKEN_BUCKET_ALL_MAX][5][24];
    const char *argv[WK_TOKEN_BUCKET_ALL_MAX * 6];
    size_t argvlen[WK_TOKEN_BUCKET_ALL_MAX * 6];
    wk_access access[WK_TOKEN_BUCKET_ALL_MAX];
    for (size_t i = 0; i < n; i++) {
        wk_token_bucket_take *t = &takes[i];
        char op[64], why[300];
        snprintf(op, sizeof(op), ALL_NAME ": take %zu", i);
        int rc = wk__prepare(p, op, t->bucket, WK_KIND_TOKEN_BUCKET, &t->name, NULL, keys[i],
                             &argvlen[i]);
        if (rc)
            return rc;
        argv[i] = keys[i];
        if (t->cost < 1 || t->cost > WK_TOKEN_BUCKET_COST_MAX)
            return wk__processor_fail(p, WK_EINVAL, "%s: cost %llu is not in 1..2^53", op,
                                      (unsigned long long)t->cost);
        if (units_args(t->bucket, t->cost, num[i], &argv[n + 5 * i], &argvlen[n + 5 * i], why,
                       sizeof(why)))
            return wk__processor_fail(p, WK_EINVAL, "%s: TokenBucket %s: %s", op,
                                      t->bucket->ns, why);
        /* The script reads every bucket before taking any: one bucket
         * twice would be taken from once. */
        for (size_t j = 0; j < i; j++)
            if (argvlen[j] == argvlen[i] && memcmp(keys[j], keys[i], argvlen[i]) == 0)
                return wk__processor_fail(p, WK_EINVAL,
                                          "%s: the same bucket as take %zu (one key twice)", op, j);
        access[i] = (wk_access){t->bucket, WK_WRITE};
    }
    outcome->takes = takes;
    outcome->count = n;
    wk_query q = {.name = ALL_NAME,
                  .effect = {access, n},
                  .script = &acquire_all_script,
                  .nkeys = (int)n,
                  .argc = (int)(6 * n),
                  .argv = argv,
                  .argvlen = argvlen,
                  .parse = parse_acquire_all,
                  .out = outcome};
    return wk_process(p, &q);
}
