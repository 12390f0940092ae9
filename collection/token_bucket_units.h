/*
 * collection/token_bucket_units.h — the exact integer units of a
 * TokenBucket, derived from its capacity, rate and period. Not installed.
 *
 * Shared by collection/token_bucket.c (the script's arguments) and
 * codegen/check.c (which refuses a schema the limiter would refuse), so
 * the rule lives in one place. Self-contained: C11, <math.h>, <stdint.h>.
 *
 * The script counts tokens in whole UNITS of 1/unit token and time in
 * whole ms; refill arrives as `step_units` units every `step_ms` ms,
 * counted from the stored ts. Every value it handles is an integer
 * ≤ 2^53, so Lua's doubles hold them exactly and no operation rounds:
 *
 *   unit        units per token (≤ 2^53)
 *   cap         capacity × unit (1..2^50)
 *   step_units  units added per step (1..cap; cap = the bucket refills
 *               completely in one step)
 *   step_ms     ms per step (1..2^53)
 *
 * step_units / step_ms is exactly rate / period_ms × unit, so the refill
 * is exact at every step boundary and never more than the continuous
 * refill between two. step_ms is 1 (refill exact to the ms) whenever
 * capacity × unit fits in 2^50 with unit = the denominator of
 * rate / period_ms; otherwise unit is the largest power of two that fits
 * and step_ms is the smallest whole number of ms in which the refill is a
 * whole number of units (e.g. 10^15 tokens at 1 per 3 ms: 1 token every
 * 3 ms).
 *
 * Accepted parameters (anything else is refused, naming the parameter):
 *   capacity  n / 2^k with whole numbers n ≤ 2^50 and k ≤ 50: every whole
 *             number up to 2^50 (1,125,899,906,842,624), and binary
 *             fractions such as 2.5 or 0.75 — not 0.1, which no double
 *             holds exactly.
 *   rate      any value whose refill per ms, rate / period_ms as a fraction
 *             in lowest terms, has a denominator ≤ 2^53 (and 64-bit
 *             terms): every whole number and binary fraction (2.5, 0.25)
 *             at any period up to 2^53 ms — not 0.1 or 1/3. A rate that
 *             refills two whole buckets per ms or more is always accepted
 *             (the bucket is full again after every ms).
 */
#ifndef WK_COLLECTION_TOKEN_BUCKET_UNITS_H
#define WK_COLLECTION_TOKEN_BUCKET_UNITS_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define WK__TB_CAP_MAX (UINT64_C(1) << 50)   /* capacity × unit */
#define WK__TB_EXACT_MAX (UINT64_C(1) << 53) /* largest integer every double below holds */

typedef struct wk__tb_units {
    uint64_t unit, cap, step_units, step_ms;
} wk__tb_units;

/* Which parameter wk__tb_units_derive() refused. */
enum { WK__TB_OK = 0, WK__TB_BAD_CAPACITY = 1, WK__TB_BAD_RATE = 2 };

static inline unsigned wk__tb_ctz(uint64_t x) /* x != 0 */
{
#if defined(__GNUC__) || defined(__clang__)
    return (unsigned)__builtin_ctzll(x);
#else
    unsigned n = 0;
    while (!(x & 1)) {
        x >>= 1;
        n++;
    }
    return n;
#endif
}

static inline uint64_t wk__tb_gcd(uint64_t a, uint64_t b)
{
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* The shortest "%g" spelling of x that reads back as x ("0.1", not
 * "0.10000000000000001"), for messages. */
static inline const char *wk__tb_num_text(double x, char buf[32])
{
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, 32, "%.*g", prec, x);
        if (strtod(buf, NULL) == x)
            break;
    }
    return buf;
}

/* x (> 0, finite) = *m × 2^*e exactly, *m odd. */
static inline void wk__tb_split(double x, uint64_t *m, int *e)
{
    int ex;
    double f = frexp(x, &ex); /* x = f × 2^ex, 0.5 ≤ f < 1 */
    uint64_t mm = (uint64_t)ldexp(f, 53);
    ex -= 53;
    unsigned z = wk__tb_ctz(mm);
    *m = mm >> z;
    *e = ex + (int)z;
}

/*
 * wk__tb_units_derive — the units of a bucket with these parameters
 * (capacity, rate > 0 and finite, period_ms > 0: check those first).
 * Returns WK__TB_OK and fills *u, or WK__TB_BAD_CAPACITY / _BAD_RATE with
 * a sentence in `why` (naming the parameter and its limit).
 */
static inline int wk__tb_units_derive(double capacity, double rate, int64_t period_ms,
                                      wk__tb_units *u, char *why, size_t why_len)
{
    /* capacity = cw / 2^sc, cw whole ≤ 2^50 */
    uint64_t mc, cw;
    int ec;
    char text[32];
    wk__tb_split(capacity, &mc, &ec);
    unsigned sc = ec < 0 ? (unsigned)-ec : 0;
    if (ec >= 0 ? (ec > 50 || mc > (WK__TB_CAP_MAX >> ec)) : (sc > 50 || mc > WK__TB_CAP_MAX)) {
        snprintf(why, why_len,
                 "capacity %s is not n/2^k with whole n <= 2^50 and k <= 50: use a whole "
                 "number up to 2^50 = 1125899906842624 or a binary fraction such as 2.5",
                 wk__tb_num_text(capacity, text));
        return WK__TB_BAD_CAPACITY;
    }
    cw = ec >= 0 ? mc << ec : mc;
    uint64_t period = (uint64_t)period_ms;

    /* Two whole buckets per ms or more (the double quotient cannot be off
     * by that much): full again after every ms, whatever the rate. */
    if (rate / (double)period_ms >= 2.0 * capacity) {
        *u = (wk__tb_units){(uint64_t)1 << sc, cw, cw, 1};
        return WK__TB_OK;
    }

    /* rate / period = num / den exactly, then in lowest terms n / d. */
    uint64_t mr, num, den;
    int er;
    wk__tb_split(rate, &mr, &er);
    if (er >= 0) {
        unsigned v = wk__tb_ctz(period);
        if ((unsigned)er < v)
            v = (unsigned)er;
        unsigned shift = (unsigned)er - v;
        den = period >> v;
        num = shift < 64 && mr <= (UINT64_MAX >> shift) ? mr << shift : 0;
    } else {
        unsigned shift = (unsigned)-er;
        num = mr;
        den = shift < 64 && period <= (UINT64_MAX >> shift) ? period << shift : 0;
    }
    uint64_t g = num && den ? wk__tb_gcd(num, den) : 1;
    uint64_t n = num / g, d = den / g;
    if (!num || !den || d > WK__TB_EXACT_MAX) {
        snprintf(why, why_len,
                 "rate %s per %lld ms is not exact: rate / period_ms must reduce to n/d "
                 "tokens per ms with d <= 2^53 (use a whole number or a binary fraction, e.g. "
                 "rate 1 per period 10000 ms for 0.1 per 1000 ms)",
                 wk__tb_num_text(rate, text), (long long)period_ms);
        return WK__TB_BAD_RATE;
    }

    /* Refill exact to the ms: unit = lcm(2^sc, d), if capacity × unit
     * fits. */
    unsigned dz = wk__tb_ctz(d);
    unsigned up = sc > dz ? sc - dz : 0; /* lcm(2^sc, d) = d << up */
    if (d <= (WK__TB_EXACT_MAX >> up)) {
        uint64_t unit = d << up, per = unit >> sc; /* cap = cw × per */
        if (cw <= WK__TB_CAP_MAX / per) {
            uint64_t cap = cw * per, q = unit / d; /* step = n × q units per ms */
            uint64_t step = n <= cap / q ? n * q : cap;
            *u = (wk__tb_units){unit, cap, step < cap ? step : cap, 1};
            return WK__TB_OK;
        }
    }

    /* Otherwise: unit = 2^k, the largest with capacity × 2^k ≤ 2^50 (and
     * 2^k ≤ 2^53); refill n × 2^k / d units per ms, whole every d / 2^t
     * ms. */
    unsigned k = sc;
    while (k < 53 && cw <= (WK__TB_CAP_MAX >> (k + 1 - sc)))
        k++;
    uint64_t cap = cw << (k - sc);
    unsigned t = dz < k ? dz : k;
    unsigned sh = k - t;
    uint64_t step = sh < 64 && n <= (cap >> sh) ? n << sh : cap;
    *u = (wk__tb_units){(uint64_t)1 << k, cap, step, d >> t};
    return WK__TB_OK;
}

#endif /* WK_COLLECTION_TOKEN_BUCKET_UNITS_H */
