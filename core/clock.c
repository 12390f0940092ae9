/*
 * core/clock.c — the one clock of every lease and deadline in the library
 * (wk_monotonic_ms() of wakuwaku/clock.h, wk__boot_ms() inside): CLOCK_BOOTTIME
 * where the system has it, CLOCK_MONOTONIC elsewhere. Core's own timing
 * (the idle probe of a connection, the subscriber's keepalive) reads it too.
 *
 * Why not CLOCK_MONOTONIC: it stops while the system is suspended, but a
 * lease in Redis keeps running on the server's clock. A holder that
 * measured its lease on CLOCK_MONOTONIC would, after a resume, believe it
 * still holds a lease that ran out during the suspend. CLOCK_BOOTTIME is
 * CLOCK_MONOTONIC plus the time spent suspended: it never goes back, is
 * not moved by wall-clock changes, and keeps counting through a suspend.
 *
 * Condition variables cannot wait on CLOCK_BOOTTIME (glibc accepts only
 * CLOCK_REALTIME and CLOCK_MONOTONIC for them), so wk__cond_abstime()
 * turns a deadline on this clock into a CLOCK_MONOTONIC time. A wait that
 * spans a suspend then wakes late, never early; every caller re-reads
 * wk__boot_ms() after waking.
 */
#include <errno.h>
#include <stdatomic.h>
#include <sys/time.h>
#include <time.h>

#include <wakuwaku/clock.h>

#include "core/db_internal.h"
#include "core/core_internal.h"

/* 0: not decided yet; else the clock id + 1. */
static atomic_int chosen;

static clockid_t lease_clock(void)
{
    int c = atomic_load_explicit(&chosen, memory_order_relaxed);
    if (c)
        return (clockid_t)(c - 1);
    clockid_t id = CLOCK_MONOTONIC;
#ifdef CLOCK_BOOTTIME
    struct timespec ts;
    if (clock_gettime(CLOCK_BOOTTIME, &ts) == 0)
        id = CLOCK_BOOTTIME;
#endif
    atomic_store_explicit(&chosen, (int)id + 1, memory_order_relaxed);
    return id;
}

static int64_t ms_of(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t wk__boot_ms(void)
{
    return ms_of(lease_clock());
}

int64_t wk__add_ms(int64_t t, int64_t ms)
{
    if (ms > 0 && t > INT64_MAX - ms)
        return INT64_MAX;
    if (ms < 0 && t < INT64_MIN - ms)
        return INT64_MIN;
    return t + ms;
}

int64_t wk_monotonic_ms(void)
{
    return wk__boot_ms();
}

int64_t wk_deadline_in(int64_t timeout_ms)
{
    return wk__add_ms(wk__boot_ms(), timeout_ms);
}

static struct timespec timespec_of(int64_t ms)
{
    if (ms < 0)
        ms = 0;
    return (struct timespec){(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
}

void wk__sleep_until_ms(int64_t when)
{
    clockid_t id = lease_clock();
    for (;;) {
        int64_t now = ms_of(id);
        if (when <= now)
            return;
        int64_t left = wk__add_ms(when, -now);
        struct timespec ts = timespec_of(when);
        int rc = clock_nanosleep(id, TIMER_ABSTIME, &ts, NULL);
        if (rc == 0 || rc == EINTR)
            continue; /* re-check: woken early by a signal, or done */
        /* This clock cannot be slept on: sleep relative, in steps of at
         * most a second, re-checking the clock after each. */
        struct timespec step = timespec_of(left < 1000 ? left : 1000);
        while (nanosleep(&step, &step) != 0 && errno == EINTR) {
        }
    }
}

void wk__cond_abstime(int64_t when, struct timespec *ts)
{
    int64_t now = wk__boot_ms();
    int64_t left = when > now ? wk__add_ms(when, -now) : 0;
    *ts = timespec_of(wk__add_ms(ms_of(CLOCK_MONOTONIC), left));
}

int64_t wk__deadline_after(struct timeval tv)
{
    return wk__add_ms(wk__boot_ms(), (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000);
}

int wk__mutex_lock_until(pthread_mutex_t *mu, int64_t when)
{
    for (;;) {
        int64_t left = when - wk__boot_ms();
        if (left <= 0)
            return pthread_mutex_trylock(mu) == 0 ? 0 : ETIMEDOUT;
        /* timedlock counts on CLOCK_REALTIME: short steps, each checked
         * against the deadline's own clock. */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        int64_t ns = (int64_t)ts.tv_nsec + (left < 100 ? left : 100) * 1000000;
        ts.tv_sec += (time_t)(ns / 1000000000);
        ts.tv_nsec = (long)(ns % 1000000000);
        int rc = pthread_mutex_timedlock(mu, &ts);
        if (rc != ETIMEDOUT)
            return rc;
    }
}
