/*
 * collection/token_bucket.c — TokenBucket: a rate limiter in one Redis hash
 * {tokens, ts}, refilled by the server clock inside Lua scripts.
 *
 * Numbers cross the wire without decimal text in either direction, so
 * neither precision nor the process's locale can bend them: a double goes
 * as two integers, a 53-bit mantissa and a binary exponent (frexp/ldexp
 * on both sides), and every integer the scripts return is ≤ 2^53, which
 * Redis converts from a Lua number to an integer reply exactly. Only the
 * stored `tokens` field is decimal ("%.17g", formatted by the server), as
 * the Rust crate reads it.
 */
#include <math.h>

#include <wakuwaku/token_bucket.h>

#include "collection/common.h"

/* ------------------------------------------------------------------------
 * Scripts
 * ---------------------------------------------------------------------- */

/*
 * Shared prologue. KEYS[1] = the bucket. ARGV[1..5] = capacity (mantissa,
 * exponent), rate (mantissa, exponent), period ms. Leaves `now`, the
 * refilled `tokens`, `back` (the server clock went back since ts), `eps`,
 * and helpers: ms(n) = ms until n more tokens (ceil, saturating), whole(n)
 * = floor of n tokens (tolerating eps), and ret(n) = n as {mantissa,
 * exponent}. A corrupted key returns {'corrupt', why}.
 */
#define TB_PROLOGUE                                                                        \
    "local cap = math.ldexp(tonumber(ARGV[1]), tonumber(ARGV[2]))\n"                       \
    "local rate = math.ldexp(tonumber(ARGV[3]), tonumber(ARGV[4]))\n"                      \
    "local period = tonumber(ARGV[5])\n"                                                   \
    "local SAT = 9007199254740992\n"                                                       \
    "local t = redis.call('TIME')\n"                                                       \
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"              \
    "local h = redis.pcall('HMGET', KEYS[1], 'tokens', 'ts')\n"                            \
    "if h.err then return {'corrupt', h.err} end\n"                                        \
    "local tokens, ts = cap, now\n"                                                        \
    "if h[1] or h[2] then\n"                                                               \
    "  tokens, ts = tonumber(h[1]), tonumber(h[2])\n"                                      \
    "  if not tokens or tokens ~= tokens or tokens < 0 or tokens == math.huge then\n"      \
    "    return {'corrupt', 'field tokens is missing or not a number >= 0'}\n"             \
    "  end\n"                                                                              \
    "  if not ts or ts ~= ts or ts == math.huge or ts == -math.huge then\n"                \
    "    return {'corrupt', 'field ts is missing or not a finite number'}\n"               \
    "  end\n"                                                                              \
    "elseif redis.call('EXISTS', KEYS[1]) == 1 then\n"                                     \
    "  return {'corrupt', 'a hash without the fields tokens and ts'}\n"                    \
    "end\n"                                                                                \
    "local back = now < ts\n"                                                              \
    "if not back then tokens = math.min(cap, tokens + (now - ts) * rate / period) end\n"   \
    "if tokens > cap then tokens = cap end\n"                                              \
    "local eps = cap * 1e-13\n"                                                            \
    "local function ms(n)\n"                                                               \
    "  if n <= 0 then return 0 end\n"                                                      \
    "  local v = math.ceil(n * period / rate)\n"                                           \
    "  if v > SAT then v = SAT end\n"                                                      \
    "  return v\n"                                                                         \
    "end\n"                                                                                \
    "local function whole(n)\n"                                                            \
    "  local v = math.floor(n + eps)\n"                                                    \
    "  if v > cap then v = math.floor(cap) end\n"                                          \
    "  if v > SAT then v = SAT end\n"                                                      \
    "  return v\n"                                                                         \
    "end\n"

/*
 * acquire: ARGV[6] = cost. Returns {allowed, remaining, retry_ms, full_ms,
 * tokens mantissa, tokens exponent}. Writes only when it takes tokens or
 * when the clock went back (to restart refill from now); a bucket left
 * full loses its key.
 */
static const wk_script acquire_script = {
    "token_bucket.acquire",
    TB_PROLOGUE
    "local cost = tonumber(ARGV[6])\n"
    "local allowed, retry = 0, 0\n"
    "if cost > cap then retry = -1\n"
    "elseif tokens + eps >= cost then allowed = 1; tokens = math.max(0, tokens - cost)\n"
    "else retry = math.max(1, ms(cost - tokens)) end\n"
    "local full = ms(cap - tokens)\n"
    "if allowed == 1 or back then\n"
    "  if full > 0 then\n"
    "    redis.call('HSET', KEYS[1], 'tokens', string.format('%.17g', tokens),\n"
    "               'ts', string.format('%.0f', now))\n"
    "    redis.call('PEXPIRE', KEYS[1], string.format('%.0f', full))\n"
    "  else\n"
    "    redis.call('DEL', KEYS[1])\n"
    "  end\n"
    "end\n"
    "local m, e = math.frexp(tokens)\n"
    "return {allowed, whole(tokens), retry, full, m * SAT, e - 53}\n"};

/* peek: writes nothing. Returns {available, full_ms, tokens mantissa,
 * tokens exponent}. */
static const wk_script peek_script = {
    "token_bucket.peek",
    TB_PROLOGUE
    "local m, e = math.frexp(tokens)\n"
    "return {whole(tokens), ms(cap - tokens), m * SAT, e - 53}\n"};

/* ------------------------------------------------------------------------
 * Arguments and replies
 * ---------------------------------------------------------------------- */

/* x = mantissa × 2^exponent exactly, the mantissa an integer < 2^53. */
static void split_double(double x, int64_t *mantissa, int64_t *exponent)
{
    int e = 0;
    double f = frexp(x, &e); /* x = f × 2^e, 0.5 ≤ f < 1 (or 0) */
    *mantissa = (int64_t)ldexp(f, 53);
    *exponent = (int64_t)e - 53;
}

/* The script arguments after the key: capacity, rate, period (and the
 * cost for acquire), as integers in caller-provided buffers. */
typedef struct tb_args {
    char num[6][24];
    const char *argv[7];
    size_t argvlen[7];
} tb_args;

static int fill_args(tb_args *a, const wk_entity *e, const char *key, size_t key_len,
                     const uint64_t *cost)
{
    int64_t v[6];
    split_double(e->capacity, &v[0], &v[1]);
    split_double(e->rate, &v[2], &v[3]);
    v[4] = e->period_ms;
    v[5] = cost ? (int64_t)*cost : 0;
    int n = cost ? 6 : 5;
    a->argv[0] = key;
    a->argvlen[0] = key_len;
    for (int i = 0; i < n; i++) {
        a->argvlen[i + 1] = wk__fmt_i64(a->num[i], v[i]);
        a->argv[i + 1] = a->num[i];
    }
    return n + 1;
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
    long long v[6];
    if (wk_reply_count(r) != 6 || !read_ints(r, 0, 6, v))
        return wk_diag_fail(d, WK_EPROTO, "expected 6 integers");
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
    if (wk_reply_count(r) != 4 || !read_ints(r, 0, 4, v))
        return wk_diag_fail(d, WK_EPROTO, "expected 4 integers");
    wk_token_bucket_state *st = q->out;
    st->available = v[0];
    st->full_after_ms = v[1];
    st->tokens = ldexp((double)v[2], (int)v[3]);
    return WK_OK;
}

/* DEL's count as a bool; `out` may be NULL (the caller did not ask). */
static int parse_del(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    if (wk_reply_get_type(r) != WK_REPLY_INTEGER)
        return wk_diag_fail(d, WK_EPROTO, "expected an integer reply to DEL");
    if (q->out)
        *(bool *)q->out = wk_reply_integer(r) != 0;
    return WK_OK;
}

/* ------------------------------------------------------------------------
 * Queries
 * ---------------------------------------------------------------------- */

int wk_token_bucket_acquire(wk_processor *p, const wk_entity *bucket, wk_name name,
                            uint64_t cost, wk_token_bucket_outcome *outcome)
{
    static const char op[] = "token_bucket.acquire";
    if (outcome)
        memset(outcome, 0, sizeof(*outcome));
    char key[WK_KEY_MAX];
    size_t key_len;
    int rc = wk__prepare(p, op, bucket, WK_KIND_TOKEN_BUCKET, &name, NULL, key, &key_len);
    if (rc)
        return rc;
    if (!outcome)
        return wk__processor_fail(p, WK_EINVAL, "%s: outcome is required", op);
    if (cost < 1 || cost > WK_TOKEN_BUCKET_COST_MAX)
        return wk__processor_fail(p, WK_EINVAL, "%s: cost %llu is not in 1..2^53", op,
                                  (unsigned long long)cost);
    tb_args a;
    int argc = fill_args(&a, bucket, key, key_len, &cost);
    wk_access access = {bucket, WK_WRITE};
    /* The parser writes *outcome (zeroed above until then), so this works
     * in a batch too. */
    wk_query q = {.name = op,
                  .effect = WK__EFFECT1(access),
                  .script = &acquire_script,
                  .nkeys = 1,
                  .argc = argc,
                  .argv = a.argv,
                  .argvlen = a.argvlen,
                  .parse = parse_acquire,
                  .out = outcome};
    return wk_process(p, &q);
}

int wk_token_bucket_peek(wk_processor *p, const wk_entity *bucket, wk_name name,
                         wk_token_bucket_state *state)
{
    static const char op[] = "token_bucket.peek";
    if (state)
        memset(state, 0, sizeof(*state));
    char key[WK_KEY_MAX];
    size_t key_len;
    int rc = wk__prepare(p, op, bucket, WK_KIND_TOKEN_BUCKET, &name, NULL, key, &key_len);
    if (rc)
        return rc;
    if (!state)
        return wk__processor_fail(p, WK_EINVAL, "%s: state is required", op);
    tb_args a;
    int argc = fill_args(&a, bucket, key, key_len, NULL);
    wk_access access = {bucket, WK_READ};
    wk_query q = {.name = op,
                  .effect = WK__EFFECT1(access),
                  .flags = WK_QUERY_RETRY_SAFE,
                  .script = &peek_script,
                  .nkeys = 1,
                  .argc = argc,
                  .argv = a.argv,
                  .argvlen = a.argvlen,
                  .parse = parse_peek,
                  .out = state};
    return wk_process(p, &q);
}

int wk_token_bucket_reset(wk_processor *p, const wk_entity *bucket, wk_name name,
                          bool *was_used)
{
    static const char op[] = "token_bucket.reset";
    if (was_used)
        *was_used = false;
    char key[WK_KEY_MAX];
    size_t key_len;
    int rc = wk__prepare(p, op, bucket, WK_KIND_TOKEN_BUCKET, &name, NULL, key, &key_len);
    if (rc)
        return rc;
    const char *argv[2] = {"DEL", key};
    size_t argvlen[2] = {3, key_len};
    wk_access access = {bucket, WK_WRITE};
    wk_query q = {.name = op,
                  .effect = WK__EFFECT1(access),
                  .argc = 2,
                  .argv = argv,
                  .argvlen = argvlen,
                  .parse = parse_del,
                  .out = was_used};
    return wk_process(p, &q);
}
