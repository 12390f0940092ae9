/*
 * wakuwaku/clock.h — the library's clock, deadlines on it, and the backoff
 * between the tries of a waiting acquire.
 *
 * A core header (core/clock.c): every lease and deadline of the library is
 * measured on this one clock — the connection's idle probe, the deadline
 * acquires of lock.h / rwlock.h (see wakuwaku/deadline.h for how they
 * wait), the lease keeper, cron and fill-once.
 */
#ifndef WAKUWAKU_CLOCK_H
#define WAKUWAKU_CLOCK_H

#include <wakuwaku/common.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * wk_monotonic_ms — milliseconds on the clock of every deadline and lease
 * of the library (cron, lease keeper, fill-once included): CLOCK_BOOTTIME
 * where the system has it (Linux), else CLOCK_MONOTONIC. Arbitrary origin
 * (compare its values only with each other), never goes back, unaffected
 * by wall-clock changes; unlike CLOCK_MONOTONIC it keeps counting while the
 * system is suspended, as the server's lease clock does. (The name is kept
 * from when it read CLOCK_MONOTONIC.) Thread-safe.
 */
WK_API int64_t wk_monotonic_ms(void);

/* wk_deadline_in — the deadline `timeout_ms` from now: wk_monotonic_ms() +
 * timeout_ms, saturated at INT64_MAX (a huge timeout: no deadline) and
 * INT64_MIN; a negative timeout gives a deadline already past: one try.
 * Thread-safe. */
WK_API int64_t wk_deadline_in(int64_t timeout_ms);

/*
 * The backoff between tries. Start from WK_BACKOFF_INIT.
 *
 *   initial_ms  the shortest sleep and the first one's upper bound
 *               (1..max_ms; default 5).
 *   max_ms      the cap of one sleep (default 200): also the longest a
 *               waiter may take to notice that the lock became free.
 */
typedef struct wk_backoff {
    int initial_ms;
    int max_ms;
} wk_backoff;

#define WK_BACKOFF_INIT                                                                            \
    {                                                                                              \
        .initial_ms = 5, .max_ms = 200                                                             \
    }

#ifdef __cplusplus
}
#endif

#endif /* WAKUWAKU_CLOCK_H */
