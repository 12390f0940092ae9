/*
 * collection/deadline.c — acquire with a deadline: the non-waiting
 * acquires of Lock and RwLock retried with capped, decorrelated-jitter
 * backoff, sleeping on the library's clock (core/clock.c: CLOCK_BOOTTIME)
 * and never past the deadline. Declared in wakuwaku/lock.h and rwlock.h
 * (wakuwaku/deadline.h says how they wait); the clock is core's.
 */
#include <sodium.h>

#include <wakuwaku/deadline.h>

#include "collection/common.h"

/* The next sleep after `prev` (decorrelated jitter): uniform in
 * [initial, 3 * prev], capped at max. */
static int64_t next_backoff(const wk_backoff *b, int64_t prev)
{
    int64_t hi = prev * 3;
    if (hi > b->max_ms)
        hi = b->max_ms;
    if (hi <= b->initial_ms)
        return b->initial_ms;
    return b->initial_ms + (int64_t)randombytes_uniform((uint32_t)(hi - b->initial_ms + 1));
}

typedef int (*try_fn)(wk_processor *p, const wk_entity *e, wk_name name, wk_token *token,
                      bool *acquired);

static int acquire(const char *op, try_fn try_once, wk_processor *p, const wk_entity *e,
                   wk_name name, int64_t deadline, const wk_backoff *backoff, wk_token *token,
                   bool *acquired)
{
    static const wk_backoff defaults = WK_BACKOFF_INIT;
    if (!p || !p->process)
        return WK_EINVAL;
    if (!token || !acquired)
        return wk__processor_fail(p, WK_EINVAL, "%s: token and acquired are required", op);
    *acquired = false;
    if (wk_processor_is_deferred(p))
        return wk__processor_fail(p, WK_EINVAL,
                                  "%s: cannot wait through a deferred (batch) processor", op);
    const wk_backoff *b = backoff ? backoff : &defaults;
    if (b->initial_ms < 1 || b->max_ms < b->initial_ms)
        return wk__processor_fail(p, WK_EINVAL, "%s: backoff needs 1 <= initial_ms <= max_ms",
                                  op);
    int64_t sleep_ms = 0;
    for (;;) {
        /* The outcome lands in *acquired (written by the parser). On an
         * error the wait ends; *token is the failed try's, which may hold
         * the lock after WK_EUNKNOWN (see deadline.h). */
        int rc = try_once(p, e, name, token, acquired);
        if (rc != WK_OK || *acquired)
            return rc;
        int64_t now = wk__boot_ms();
        if (now >= deadline)
            return WK_OK; /* timed out: the last try was at or after the deadline */
        sleep_ms = sleep_ms ? next_backoff(b, sleep_ms) : b->initial_ms;
        int64_t wake = now + sleep_ms; /* sleep_ms ≤ INT_MAX: cannot overflow */
        /* Never sleep past the deadline; the loop then makes a last try. */
        wk__sleep_until_ms(wake < deadline ? wake : deadline);
    }
}

int wk_lock_acquire(wk_processor *p, const wk_entity *lock, wk_name name, int64_t deadline,
                    const wk_backoff *backoff, wk_token *token, bool *acquired)
{
    return acquire("lock.acquire", wk_lock_try, p, lock, name, deadline, backoff, token,
                   acquired);
}

int wk_rwlock_acquire_read(wk_processor *p, const wk_entity *rwlock, wk_name name,
                           int64_t deadline, const wk_backoff *backoff, wk_token *token,
                           bool *acquired)
{
    return acquire("rwlock.acquire_read", wk_rwlock_try_read, p, rwlock, name, deadline,
                   backoff, token, acquired);
}

int wk_rwlock_acquire_write(wk_processor *p, const wk_entity *rwlock, wk_name name,
                            int64_t deadline, const wk_backoff *backoff, wk_token *token,
                            bool *acquired)
{
    return acquire("rwlock.acquire_write", wk_rwlock_try_write, p, rwlock, name, deadline,
                   backoff, token, acquired);
}
