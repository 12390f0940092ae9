/*
 * wakuwaku/deadline.h — acquire a Lock or an RwLock with a deadline.
 *
 * The familiar lock(timeout) of simple Redis locks, built on the atomic
 * acquires of lock.h and rwlock.h (SET NX PX, or one script): every try
 * either takes the lock *with* its expiry or changes nothing, so a crash
 * between two commands can never leave a lock without expiry.
 *
 *   wk_lock_acquire          retries wk_lock_try           WRITE
 *   wk_rwlock_acquire_read   retries wk_rwlock_try_read    WRITE
 *   wk_rwlock_acquire_write  retries wk_rwlock_try_write   WRITE
 *
 * These helpers send no query of their own: each try is the corresponding
 * non-waiting query, with its effect, checked against the capability like
 * any other call.
 *
 * Waiting: tries are separated by a capped, jittered exponential backoff
 * ("decorrelated jitter": each sleep is drawn uniformly between
 * `initial_ms` and three times the previous sleep, capped at `max_ms`,
 * using libsodium's randombytes_uniform), so contenders spread out instead
 * of retrying in lock-step. A sleep never goes past the deadline: it lasts
 * min(backoff, time left), and when the deadline comes one last try is
 * made at it. Deadlines are points on the library's clock
 * (wk_monotonic_ms(): CLOCK_BOOTTIME where the system has it), so changing
 * the wall clock does not stretch or cut a wait, and a deadline that
 * passes while the system is suspended has passed when it resumes.
 *
 * Outcomes: WK_OK with *acquired true (acquired), WK_OK with *acquired
 * false (timed out: the deadline passed while somebody else held it), or a
 * negative status (error; the wait ends at once, see below).
 *
 * WARNING — WK_EUNKNOWN: a try was sent and its reply never came (the
 * connection was lost, or the reply did not arrive within the command
 * timeout; see wakuwaku/db.h, OUTCOMES). The server may have run it, so the lock MAY be held — by the
 * token left in *token, while *acquired is false. Do not treat it as
 * acquired and do not discard the token; either
 *   - release with that token once the connection is back
 *     (wk_lock_release / wk_rwlock_release_write / _release_read: safe
 *     either way, it acts only if that token holds the lease), or
 *   - let the lease run out: it ends at most one TTL after the server ran
 *     the try, and blocks every other acquirer until then.
 * Retrying the acquire instead would wait for (or run alongside) your own
 * possible lease.
 */
#ifndef WAKUWAKU_DEADLINE_H
#define WAKUWAKU_DEADLINE_H

#include <wakuwaku/rwlock.h>

#ifdef __cplusplus
extern "C" {
#endif

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

#define WK_BACKOFF_INIT {.initial_ms = 5, .max_ms = 200}

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
 * wk_lock_acquire — take the lock `name`, retrying wk_lock_try() until it
 * is acquired or the deadline passes.
 *
 *   p         the processor. A deferred one (a batch) is refused with
 *             WK_EINVAL: waiting needs each try's outcome at once.
 *   lock      a Lock entity (ttl_ms > 0).
 *   deadline  a point on wk_monotonic_ms()'s clock, e.g.
 *             wk_deadline_in(2000). A deadline already past still makes
 *             exactly one try.
 *   backoff   NULL for WK_BACKOFF_INIT; else initial_ms 1..max_ms.
 *   token     OUT: the token of the last try. It holds the lock when
 *             *acquired is true, never after WK_OK with *acquired false,
 *             and MAY hold it after WK_EUNKNOWN (see the WARNING above).
 *   acquired  OUT: true once acquired; false when the deadline passed or
 *             on any error.
 *
 * Returns WK_OK (see *acquired); WK_EINVAL (bad argument, deferred
 * processor, bad backoff); or the first error of a try (WK_EDENIED, a
 * connection or server error), which ends the wait at once — it never
 * returns an error later than the deadline plus one command timeout.
 * WK_EUNKNOWN: the last try may have taken the lock under *token, until
 * its TTL runs out; release with that token once the connection is back
 * (safe either way), or let it run out. WK_EDENIED, WK_EINVAL: nothing was
 * sent.
 *
 * Never returns WK_OK with *acquired false before the deadline; never
 * sleeps past the deadline (the only overrun is the scheduler's wake-up
 * latency plus the final try's round trip). WRITE effect on `lock` (one
 * lock.try query per try). Thread-safety: as the processor's handle (one
 * thread at a time); the function keeps no state between calls.
 */
WK_API int wk_lock_acquire(wk_processor *p, const wk_entity *lock, wk_name name,
                           int64_t deadline, const wk_backoff *backoff, wk_token *token,
                           bool *acquired);

/*
 * wk_rwlock_acquire_read — take a reader lease, retrying
 * wk_rwlock_try_read() (which fails only while a writer holds the lock)
 * until acquired or the deadline passes. Arguments, return codes and
 * guarantees as wk_lock_acquire(); an RwLock entity. WRITE effect.
 */
WK_API int wk_rwlock_acquire_read(wk_processor *p, const wk_entity *rwlock, wk_name name,
                                  int64_t deadline, const wk_backoff *backoff, wk_token *token,
                                  bool *acquired);

/*
 * wk_rwlock_acquire_write — take the writer lease, retrying
 * wk_rwlock_try_write() until acquired or the deadline passes. As
 * wk_lock_acquire(); an RwLock entity. WRITE effect.
 *
 * WARNING: readers do not wait for a waiting writer (see rwlock.h), so
 * under a steady stream of overlapping readers this times out however
 * long the deadline.
 */
WK_API int wk_rwlock_acquire_write(wk_processor *p, const wk_entity *rwlock, wk_name name,
                                   int64_t deadline, const wk_backoff *backoff, wk_token *token,
                                   bool *acquired);

#ifdef __cplusplus
}
#endif

#endif /* WAKUWAKU_DEADLINE_H */
