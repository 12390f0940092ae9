/*
 * wakuwaku/deadline.h — acquire a Lock or an RwLock with a deadline: how
 * the waiting acquires of lock.h and rwlock.h wait.
 *
 * The familiar lock(timeout) of simple Redis locks, built on the atomic
 * acquires of lock.h and rwlock.h (SET NX PX, or one script): every
 * attempt either takes the lock *with* its expiry or changes nothing, so a
 * crash between two commands can never leave a lock without expiry.
 *
 *   wk_lock_acquire          lock.try, then lock.acquire       WRITE
 *   wk_rwlock_acquire_read   rwlock.try_read, then             WRITE
 *                            rwlock.acquire_read
 *   wk_rwlock_acquire_write  rwlock.try_write, then            WRITE
 *                            rwlock.acquire_write
 *
 * Every query is checked against the capability like any other call.
 *
 * Waiting: wake on release. The first attempt is the plain try. If the
 * lock is held, an acquire-or-queue script tries again and queues the
 * caller; the caller then sleeps in BLPOP on a list of its own (wake.wait,
 * on the handle's blocking connection, opened the first time it waits),
 * until a release hands it the lock (the lease is written under its
 * token and its pop returns holding it, with no attempt after it;
 * collection/wake.h), until the holder's lease would end (the first waiter), or
 * until a waiter ahead of it must have renewed its place (the others),
 * never longer than a second (every waiter renews its place at least that
 * often, so that a lease handed to a waiter that never takes it up goes
 * on within the bound B of docs/GUARANTEES.md) and never past the
 * deadline. When the deadline comes the final attempt is made, however
 * late the caller is: one script that takes the lock or leaves the queue,
 * so that WK_OK with *acquired false means the token holds nothing, then
 * or later. Leaving on an error it leaves the queue first (the kind's
 * leave, lock.leave, rwlock.leave…, which passes on a wake-up, or a
 * lock handed to it meanwhile); one that cannot leave returns
 * WK_EUNKNOWN with the token. `backoff` is still checked (1 <= initial_ms <= max_ms)
 * but no longer used. Deadlines are points on the library's clock
 * (wk_monotonic_ms(): CLOCK_BOOTTIME where the system has it), so changing
 * the wall clock does not stretch or cut a wait, and a deadline that
 * passes while the system is suspended has passed when it resumes.
 *
 * DEADLINE — one for the whole call: the caller's deadline bounds every
 * step of the acquire, not only the sleeps. The waits (each BLPOP, the
 * open and the reconnects of the blocking connection) end by the deadline
 * itself: a pop the server has not answered by then (its timeout fires
 * on its timer, up to 100 ms late by default) is abandoned: its late
 * reply is dropped when it comes, and the connection stays for the next
 * wait (one that starts before that reply came takes a new connection
 * rather than queue behind the pop). The queries on `p` (the first try,
 * every attempt) end 25 ms after the deadline at the latest, and the
 * final attempt, made at the deadline, 25 ms after it is sent — each one
 * sooner if its own command timeout comes first (a process stalled past
 * that end, or woken late, makes the final attempt anyway, under the
 * command timeout alone: only it says whether the caller holds the lock
 * or has left the queue); through a pool (wakuwaku/pool.h) a query's wait for a free
 * connection spends the same deadline. So a stalled, trickling or vanished server holds the call at
 * most 50 ms past its deadline (docs/GUARANTEES.md, Connections): a try
 * or attempt cut short is WK_EUNKNOWN (see the WARNING below), a query
 * that found no free pool connection WK_ETIMEDOUT (not sent). Under an
 * enclosing bound that ends sooner (the `wk` CLI's --timeout) every step
 * ends by that one.
 *
 * Outcomes: WK_OK with *acquired true (acquired), WK_OK with *acquired
 * false (timed out: the deadline passed while somebody else held it), or a
 * negative status (error; the wait ends at once, see below).
 *
 * WARNING — WK_EUNKNOWN: a try was sent and its reply never came (the
 * connection was lost, or the reply did not arrive within the command
 * timeout or by the call's end, see DEADLINE; wakuwaku/db.h, OUTCOMES).
 * The server may have run it, so the lock MAY be held — by the token left
 * in *token, while *acquired is false. Do not treat it as
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

#include <wakuwaku/clock.h>
#include <wakuwaku/lock.h>
#include <wakuwaku/rwlock.h>

/* The functions themselves are declared with their kinds: wk_lock_acquire
 * in wakuwaku/lock.h, wk_rwlock_acquire_read/_write in wakuwaku/rwlock.h;
 * the clock, wk_deadline_in() and wk_backoff in wakuwaku/clock.h. This
 * header documents how they wait and includes all three. */

#endif /* WAKUWAKU_DEADLINE_H */
