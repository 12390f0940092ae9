/*
 * wakuwaku/token_bucket.h — TokenBucket: a rate limiter shared by every
 * replica, refilled continuously by the Redis server's clock.
 *
 * Redis layout (byte-compatible with the Rust wakuwaku crate): one hash key
 *   @@wakuwaku-entity:TokenBucket:<ns>:<name>
 * with the fields
 *   tokens   tokens in the bucket at `ts`; may be fractional, written by
 *            the server with 17 significant digits ("%.17g") so it reads
 *            back exactly.
 *   ts       server time of that count, whole ms since the epoch (≤ now).
 * A missing key is a FULL bucket. The key expires (PEXPIREAT, server
 * time) when the bucket is full again, so idle names cost no memory.
 *
 * Parameters come from the entity (WK_TOKEN_BUCKET_ENTITY): `capacity`
 * (tokens when full), `rate` tokens added per `period_ms`, continuously:
 * e.g. capacity 20, rate 1, period 3000 = "bursts of 20, then one per 3 s".
 * All replicas must use the same parameters for one entity.
 *
 *   wk_token_bucket_acquire  refill, then take `cost` tokens if there  WRITE
 *   wk_token_bucket_peek     tokens now, time until full; writes nothing READ
 *   wk_token_bucket_reset    delete the key (= refill), say if it was used WRITE
 *   wk_token_bucket_acquire_all  take from several buckets, all or    WRITE
 *                            nothing, in one script (per-user + per-IP +
 *                            global limits)
 *
 * "Rate limited" is an outcome (allowed = false), not an error.
 *
 * ALGORITHM (one Lua script, atomic on the server), in EXACT integers:
 *   The script counts whole units of 1/unit token and whole ms; every
 *   number it handles is an integer ≤ 2^53, which Lua's doubles hold
 *   exactly, so nothing is ever rounded up: no admission creates tokens,
 *   at any capacity, rate or cost accepted.
 *   1. now = the server's TIME in whole ms.
 *   2. Read tokens and ts (missing key: full).
 *   3. Refill from ts to now (none if now < ts), capped at capacity.
 *   4. acquire: if cost > capacity → denied, retry never.
 *      Else if tokens ≥ cost → allowed, tokens -= cost, write {tokens, ts}
 *      and the expiry. Else → denied, retry after the exact time until
 *      `cost` tokens are there, rounded up to whole ms. A denial writes
 *      nothing (the stored state still describes the bucket exactly), so
 *      being refused does not delay the refill.
 * Refill is exact to the ms — rate × elapsed / period_ms, nothing lost —
 * whenever capacity × (the denominator of rate / period_ms in lowest
 * terms) ≤ 2^50: e.g. 1 per hour with capacity ≤ 3 × 10^8, 100,000 per
 * second at any capacity, 1 per 3 s with capacity ≤ 3.7 × 10^11. Beyond
 * that it comes in exact steps: the smallest whole number of ms that
 * refills a whole number of units (10^15 tokens at 1 per 3 ms: 1 token
 * every 3 ms, counted from ts). Either way the tokens handed out never
 * exceed capacity + rate × elapsed / period_ms, waiting retry_after_ms
 * and trying again succeeds (when nobody else took the tokens meanwhile),
 * and `ts` is written at the last step boundary, so the refill of a part
 * step is kept, not rounded away. A `tokens` value written by someone
 * else (the Rust crate, other parameters) is rounded DOWN to whole units.
 *
 * ACCEPTED PARAMETERS (anything else is WK_EINVAL from acquire and peek,
 * with a message naming the parameter and the limit; nothing is sent):
 *   capacity  n / 2^k for whole numbers n ≤ 2^50 and k ≤ 50: any whole
 *             number up to 2^50 = 1,125,899,906,842,624, or a binary
 *             fraction such as 2.5 or 0.75. Not 0.1 (no double is 0.1).
 *   rate      rate / period_ms must reduce to n / d tokens per ms with
 *             d ≤ 2^53: any whole number or binary fraction (2.5, 0.25)
 *             at any period up to 2^53 ms. Not 0.1 or 1/3: write "0.1 per
 *             1000 ms" as rate 1, period 10000. A rate refilling two
 *             whole buckets per ms or more is always accepted.
 *   cost      1..WK_TOKEN_BUCKET_COST_MAX; above the capacity is denied
 *             for ever.
 *
 * SERVER CLOCK: only the Redis server's clock counts; client clocks never
 * matter. If the server clock jumps FORWARD by J, the bucket gains up to
 * J × rate / period_ms tokens (never beyond capacity: at most one extra
 * burst), and its key may expire early (which also means full). If it
 * jumps BACKWARD, elapsed time counts as 0 (never negative, never a
 * refill from the jump) and the next call writes ts = now, so refill
 * resumes at the normal pace from there; what is lost is at most the
 * refill of the time between the last update and the jump. With Redis
 * replication the script's effects are replicated, not re-run, so replicas
 * hold exactly the primary's numbers; after a failover the new primary's
 * clock takes over under the same rules.
 *
 * BATCHES: all three work through a batch processor (wk_batch_processor):
 * the OUT parameters are written by the reply parser, during
 * wk_batch_exec(), so they must stay valid until it returns.
 *
 * THREADS: like every query, each call uses the processor's handle from
 * one thread at a time; the entity may be shared by all threads.
 */
/* The kind: its name in keys and the initialiser of its descriptors
 * (wakuwaku/entity.h). Plain macros in a guard of their own, which
 * wakuwaku/entity.h reads alone (WK__ENTITY_MACROS_ONLY). */
#ifndef WAKUWAKU_TOKEN_BUCKET_ENTITY
#define WAKUWAKU_TOKEN_BUCKET_ENTITY
#define WK_KIND_TOKEN_BUCKET "TokenBucket"
/* A TokenBucket entity: namespace, tokens when full (capacity > 0),
 * tokens added per period (rate > 0) and the period (period_ms > 0). */
#define WK_TOKEN_BUCKET_ENTITY(ns_, capacity_, rate_, period_ms_) \
    WK__ENTITY(WK_KIND_TOKEN_BUCKET, ns_, 0, capacity_, rate_, period_ms_)
/* Its operations, one row each (wakuwaku/query.h, "Operation lists"); the
 * compiler checks every row against its prototype below (WK__OPS). */
#define WK_TOKEN_BUCKET_OPS(XX)                                                                    \
    XX(token_bucket, acquire, WRITE,                                                               \
       (wk_name name, uint64_t cost, wk_token_bucket_outcome *outcome),                            \
       "refill, then take cost tokens if there")                                                   \
    XX(token_bucket, peek, READ, (wk_name name, wk_token_bucket_state *state),                     \
       "tokens now, without taking any")                                                           \
    XX(token_bucket, reset, WRITE, (wk_name name, bool *was_used),                                 \
       "refill at once (delete the key)")
/* A schema's TokenBucket meets the limiter's own arithmetic: the rule of
 * its row, expanded by wk-codegen alone (which defines WK__SCHEMA_RULES
 * and so reads the private collection/token_bucket_units.h); it blames
 * capacity (0) or rate (1): wk__tb_units_derive()'s WK__TB_BAD_CAPACITY
 * (1) and WK__TB_BAD_RATE (2) less one, WK__TB_OK (0) giving -1. */
#define WK__TOKEN_BUCKET_ONLY "only a TokenBucket has capacity, rate and period"
#define WK__TOKEN_BUCKET_SCHEMA_CHECK(v, why, whylen)                                              \
    (wk__tb_units_derive((v)[0].num, (v)[1].num, (v)[2].ms, &(wk__tb_units){0}, why, whylen) - 1)
#ifdef WK__SCHEMA_RULES
#include "../../collection/token_bucket_units.h"
#endif
/* Its parts (wakuwaku/entity.h, "Schema rows"): a generated accessor
 * set gives each TokenBucket entity a constructor of its take, so a
 * service builds wk_token_bucket_acquire_all()'s array from typed names. */
#define WK_TOKEN_BUCKET_PARTS(XX)                                                                  \
    XX(token_bucket, take, wk_token_bucket_take, bucket, (wk_name name, uint64_t cost),           \
       "one bucket's take (this name, this cost) for wk_token_bucket_acquire_all")
/* Its row for schemas (wakuwaku/entity.h, "Schema rows"). */
#define WK_TOKEN_BUCKET_SCHEMA(KIND, PARAM)                                                        \
    KIND(TOKEN_BUCKET, ", {capacity} tokens, refilled at {rate} per {period}",                     \
         NO_BODY, WK__TOKEN_BUCKET_SCHEMA_CHECK, NO_FAIR, PARTS)                                   \
    PARAM(capacity, capacity, POSITIVE, REQUIRED, 0, WK__TOKEN_BUCKET_ONLY)                        \
    PARAM(rate, rate, POSITIVE, REQUIRED, 0, WK__TOKEN_BUCKET_ONLY)                                \
    PARAM(period, period_ms, DURATION, OPTIONAL, 1000, WK__TOKEN_BUCKET_ONLY)
#endif

#if !defined(WAKUWAKU_TOKEN_BUCKET_H) && !defined(WK__ENTITY_MACROS_ONLY)
#define WAKUWAKU_TOKEN_BUCKET_H

#include <wakuwaku/query.h>

#ifdef __cplusplus
extern "C" {
#endif

/* retry_after_ms of a request that can never succeed (cost > capacity). */
#define WK_TOKEN_BUCKET_NEVER (-1)

/* The largest cost (2^53): every cost up to it is exact in a double. */
#define WK_TOKEN_BUCKET_COST_MAX (UINT64_C(1) << 53)

/* Times saturate at 2^53 ms (about 285,000 years). */
#define WK_TOKEN_BUCKET_SATURATE (INT64_C(1) << 53)

/*
 * The outcome of wk_token_bucket_acquire().
 *
 *   allowed         the tokens were taken: go ahead.
 *   remaining       whole tokens left after this call (floor).
 *   retry_after_ms  allowed: 0. Denied: ms until `cost` tokens will be
 *                   there, rounded up, so trying again after waiting this
 *                   long succeeds unless someone else takes them first
 *                   (e.g. the Retry-After header). WK_TOKEN_BUCKET_NEVER
 *                   when cost > capacity.
 *   full_after_ms   ms until the bucket is full again (0: full now); e.g.
 *                   the RateLimit-Reset header.
 */
typedef struct wk_token_bucket_outcome {
    bool allowed;
    int64_t remaining;
    int64_t retry_after_ms;
    int64_t full_after_ms;
} wk_token_bucket_outcome;

/*
 * wk_token_bucket_acquire — refill the bucket `name` by the server time
 * elapsed, then take `cost` tokens if that many are there.
 *
 *   p        the processor (a handle's, or a wrapper).
 *   bucket   a TokenBucket entity (capacity, rate, period_ms > 0).
 *   cost     tokens to take, 1..WK_TOKEN_BUCKET_COST_MAX; 0 is WK_EINVAL.
 *   outcome  OUT: allowed or denied, see wk_token_bucket_outcome. Zeroed
 *            (denied) first, so it reads "denied" when the call fails.
 *
 * Returns WK_OK (see outcome->allowed), WK_EINVAL (bad entity or name,
 * parameters the exact arithmetic cannot hold — see ACCEPTED PARAMETERS —,
 * cost out of range, NULL outcome), WK_EDENIED (capability), WK_ECORRUPT
 * (the key is not a hash, or its tokens / ts fields are missing or not
 * numbers; the message names the key — wk_token_bucket_reset() repairs
 * it), or a connection / server error. WRITE effect, NOT retry-safe: after
 * WK_EUNKNOWN the tokens may or may not have been taken.
 * Makes no heap allocation of its own.
 */
WK_API int wk_token_bucket_acquire(wk_processor *p, const wk_entity *bucket, wk_name name,
                                   uint64_t cost, wk_token_bucket_outcome *outcome);

/*
 * What wk_token_bucket_peek() saw.
 *
 *   tokens         tokens in the bucket now (may be fractional): the
 *                  exact count, correctly rounded to a double.
 *   available      whole tokens now (floor): the largest cost an acquire
 *                  would allow right now.
 *   full_after_ms  ms until full (0: full, or never used).
 */
typedef struct wk_token_bucket_state {
    double tokens;
    int64_t available;
    int64_t full_after_ms;
} wk_token_bucket_state;

/*
 * wk_token_bucket_peek — the bucket's state now (refilled up to the
 * server's current time) without taking anything. The script writes
 * nothing: READ effect, so a read-only handle may use it, and it is
 * retry-safe. A name never used (or idle until full) reads as full.
 *
 * Returns WK_OK, WK_EINVAL (bad entity or name, parameters as for acquire,
 * NULL state), WK_EDENIED,
 * WK_ECORRUPT (as for acquire) or a connection / server error. *state is
 * zeroed first, so it reads all zero when the call fails.
 */
WK_API int wk_token_bucket_peek(wk_processor *p, const wk_entity *bucket, wk_name name,
                                wk_token_bucket_state *state);

/*
 * wk_token_bucket_reset — refill the bucket `name` at once by deleting its
 * key (DEL). *was_used (may be NULL) gets whether the key existed, i.e.
 * whether the bucket was short of full. Also removes a corrupted key.
 * WRITE effect, not retry-safe (a re-send would report false). Needs no
 * arithmetic, so it also works for parameters acquire refuses.
 * Returns WK_OK, WK_EINVAL, WK_EDENIED or a connection / server error.
 */
WK_API int wk_token_bucket_reset(wk_processor *p, const wk_entity *bucket, wk_name name,
                                 bool *was_used);

/*
 * Atomic multi-limit: take from several buckets all or nothing.
 *
 * One take per bucket: the entity, the name and the cost (IN), and that
 * bucket's own answer (OUT, written by the call's parser).
 *
 *   outcome.allowed         this bucket held `cost` tokens when the call
 *                           ran (so the call was refused by another one
 *                           when the whole call was refused).
 *   outcome.remaining       whole tokens left: after the take when every
 *                           bucket allowed, else as they stand untouched.
 *   outcome.retry_after_ms  0 when it held `cost`, else the ms until it
 *                           will (WK_TOKEN_BUCKET_NEVER: cost > capacity).
 *   outcome.full_after_ms   ms until it is full again.
 */
typedef struct wk_token_bucket_take {
    const wk_entity *bucket; /* a TokenBucket entity */
    wk_name name;
    uint64_t cost; /* 1..WK_TOKEN_BUCKET_COST_MAX */
    wk_token_bucket_outcome outcome;
} wk_token_bucket_take;

/* The most buckets one wk_token_bucket_acquire_all() takes from. */
#define WK_TOKEN_BUCKET_ALL_MAX 8

/*
 * The outcome of wk_token_bucket_acquire_all().
 *
 *   allowed         every bucket held its cost, and all were taken.
 *   refused         not allowed: the index (into takes) of the first
 *                   bucket short of its cost; allowed, or the call failed:
 *                   the number of takes.
 *   retry_after_ms  allowed: 0. Refused: the longest wait among the
 *                   buckets short of their cost — after it every bucket
 *                   holds its cost again, unless others take them first
 *                   (e.g. the Retry-After header); WK_TOKEN_BUCKET_NEVER
 *                   when a cost exceeds its bucket's capacity.
 */
typedef struct wk_token_bucket_all_outcome {
    bool allowed;
    size_t refused;
    int64_t retry_after_ms;
    /* Set by the call (its parser writes each take's outcome there). */
    wk_token_bucket_take *takes;
    size_t count;
} wk_token_bucket_all_outcome;

/*
 * wk_token_bucket_acquire_all — refill each of `n` buckets by the server
 * time elapsed, then take every take's cost if every bucket holds it, or
 * none: one script, one round trip, atomic on the server (e.g. a
 * per-user, a per-IP and a global limit checked as one). A refusal writes
 * nothing (as wk_token_bucket_acquire's), so being refused by one bucket
 * costs the others nothing.
 *
 *   p        the processor.
 *   takes    n takes (1..WK_TOKEN_BUCKET_ALL_MAX), each of a TokenBucket
 *            entity, a name and a cost; no two may name the same bucket
 *            (same key). Their `outcome` fields are OUT (zeroed first).
 *   outcome  OUT: see wk_token_bucket_all_outcome; zeroed first (refused
 *            = n), so it reads "not allowed" when the call fails.
 *
 * The capability must grant WRITE on every bucket's entity (WK_EDENIED
 * names the first that is not). On a cluster handle every key must be in
 * one slot — names sharing a hash tag, e.g. "{tenant7}:user42" and
 * "{tenant7}:all" — or the call is refused before sending (WK_EINVAL
 * naming two slots); the keys of the single-key layout hash by the whole
 * key unless the name holds a {tag}.
 *
 * Returns WK_OK (see outcome->allowed), WK_EINVAL (n out of range, NULL
 * takes or outcome, a bad entity, name or cost — the message names the
 * take by index —, two takes of one bucket, parameters the exact
 * arithmetic cannot hold, keys in several slots of a cluster), WK_EDENIED,
 * WK_ECORRUPT (a bucket's key is corrupted: nothing is taken; the message
 * names the key), or a connection / server error. WRITE effect, NOT
 * retry-safe: after WK_EUNKNOWN the tokens may or may not have been taken
 * (all of them or none). Works through a batch and the event loop (takes
 * and outcome must then stay valid until the reply is parsed). Makes no
 * heap allocation of its own.
 */
WK_API int wk_token_bucket_acquire_all(wk_processor *p, wk_token_bucket_take *takes, size_t n,
                                       wk_token_bucket_all_outcome *outcome);

WK__OPS(WK_TOKEN_BUCKET_OPS)

#ifdef __cplusplus
}
#endif

#endif /* WAKUWAKU_TOKEN_BUCKET_H */
