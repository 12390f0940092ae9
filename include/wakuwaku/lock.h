/*
 * wakuwaku/lock.h — Lock: a lease lock, one holder per name.
 *
 * Redis layout: one string key @@wakuwaku-entity:Lock:<ns>:<name> holding
 * the holder's random 16-byte token, with the entity's TTL as expiry.
 *
 *   wk_lock_try      SET key token NX PX ttl        WRITE, never waits
 *   wk_lock_release  delete if the key holds token   WRITE
 *   wk_lock_extend   restart the lease (one TTL)     WRITE
 *   wk_lock_inspect  held? for how long (PTTL)       READ
 *   wk_lock_owned    does token still hold it, for   READ (writes nothing,
 *                    how long                        extends nothing)
 *   wk_lock_force_release  free it, whoever holds it WRITE (operators)
 *   wk_lock_acquire  try, then sleep until a release WRITE
 *                    or the deadline (deadline.h)
 *
 * Waiting (wakuwaku/deadline.h): waiters queue on companion keys in the
 * lock's cluster slot (…{<lock key>}:q, :e, :w:<token>) and sleep in BLPOP
 * on the handle's blocking connection; every release wakes the first.
 *
 * FAIRNESS: a Lock declared with WK_LOCK_FAIR_ENTITY goes to its waiters
 * first come, first served: while anyone waits, wk_lock_try by anyone else
 * says "not acquired" even if the lock is free (its try is then a script,
 * still one round trip). Every user of a name must agree on its fairness.
 *
 * "Not acquired", "not released" are outcomes (OUT booleans), not errors.
 *
 * WARNING: a lease can run out while its holder still works (a GC pause, a
 * stalled VM, a slow disk). release/extend then report false, and someone
 * else may hold the lock. The token is random, not monotonic: it is not a
 * fencing token. Protect the resource itself with a version check, e.g.
 *     UPDATE invoice SET state = 'final', version = version + 1
 *      WHERE id = 42 AND version = $seen;      -- 0 rows: someone else won
 * Dropping a token releases nothing: the lease runs out after the TTL, so
 * the TTL is the longest a crashed holder blocks everyone else.
 */
/* The kind: its name in keys and the initialiser of its descriptors
 * (wakuwaku/entity.h). Plain macros in a guard of their own, which
 * wakuwaku/entity.h reads alone (WK__ENTITY_MACROS_ONLY). */
#ifndef WAKUWAKU_LOCK_ENTITY
#define WAKUWAKU_LOCK_ENTITY
#define WK_KIND_LOCK "Lock"
/* A Lock entity: namespace and lease length (ttl_ms > 0). */
#define WK_LOCK_ENTITY(ns_, ttl_ms_) WK__ENTITY(WK_KIND_LOCK, ns_, ttl_ms_, 0, 0, 0)
/* A fair Lock entity: the lock goes to its waiters first come, first
 * served, and no caller barges in ahead of them (see FAIRNESS below). */
#define WK_LOCK_FAIR_ENTITY(ns_, ttl_ms_)                                                          \
    WK__ENTITY_FLAGS(WK_KIND_LOCK, ns_, ttl_ms_, 0, 0, 0, WK_ENTITY_FAIR)
/* Its operations, one row each (wakuwaku/query.h, "Operation lists"); the
 * compiler checks every row against its prototype below (WK__OPS). */
#define WK_LOCK_OPS(XX)                                                                            \
    XX(lock, try, WRITE, (wk_name name, wk_token *token, bool *acquired),                          \
       "take the lock if nobody holds it; never waits")                                            \
    XX(lock, release, WRITE, (wk_name name, const wk_token *token, bool *released),                \
       "release the lock if it still holds token")                                                 \
    XX(lock, extend, WRITE, (wk_name name, const wk_token *token, bool *extended),                 \
       "restart the lease for one more TTL if it still holds token")                               \
    XX(lock, owned, READ, (wk_name name, const wk_token *token, wk_lease_state *state),            \
       "whether token still holds the lease and for how long; writes nothing")                     \
    XX(lock, force_release, WRITE, (wk_name name, bool *was_held),                                 \
       "free the lock whoever holds it and wake its first waiter (operators)")                     \
    XX(lock, inspect, READ, (wk_name name, wk_lock_state *state),                                  \
       "is it held, and for how much longer")
/* Its row for schemas (wakuwaku/entity.h, "Schema rows"). */
#define WK_LOCK_SCHEMA(KIND, PARAM)                                                                \
    KIND(LOCK, ", lease {ttl}", NO_BODY, WK__SCHEMA_NO_CHECK, FAIR, NO_PARTS)                      \
    WK__SCHEMA_TTL(PARAM)
#endif

#if !defined(WAKUWAKU_LOCK_H) && !defined(WK__ENTITY_MACROS_ONLY)
#define WAKUWAKU_LOCK_H

#include <wakuwaku/clock.h>
#include <wakuwaku/query.h>
#include <wakuwaku/token.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * wk_lock_try — take the lock `name` if nobody holds it; never waits.
 *
 *   p         the processor (a handle's, or a wrapper).
 *   lock      a Lock entity (ttl_ms > 0).
 *   token     OUT: a fresh random token, always written; it holds the
 *             lock only when *acquired is true.
 *   acquired  OUT: whether this call took the lock.
 *
 * Returns WK_OK (see *acquired), WK_EINVAL (bad entity, name or NULL
 * argument), WK_EDENIED, or a connection / server error. WRITE effect.
 * After WK_EUNKNOWN the lock may be held under a token you never saw; it
 * runs out after the TTL.
 * On a handle with lease_replicas (wakuwaku/db.h, ACKNOWLEDGED LEASES):
 * WK_ENOTREPLICATED when fewer replicas acknowledged the lease (*acquired
 * false; released on a handle or pool, yours to release with the token
 * through a batch or the event loop). wk_lock_extend likewise answers
 * WK_ENOTREPLICATED with *extended false (the lease runs to its previous
 * expiry).
 */
WK_API int wk_lock_try(wk_processor *p, const wk_entity *lock, wk_name name, wk_token *token,
                       bool *acquired);

/*
 * wk_lock_release — release the lock if it still holds `token`.
 * *released is false when the lease had run out (and perhaps someone else
 * holds it now); that other holder's lock is not touched. WRITE effect.
 */
WK_API int wk_lock_release(wk_processor *p, const wk_entity *lock, wk_name name,
                           const wk_token *token, bool *released);

/*
 * wk_lock_extend — restart the lease for one more TTL (the entity's ttl_ms)
 * if the lock still holds `token`. *extended is false when the lease had
 * run out. WRITE effect.
 */
WK_API int wk_lock_extend(wk_processor *p, const wk_entity *lock, wk_name name,
                          const wk_token *token, bool *extended);

/* What an `owned` query saw (wk_lock_owned(), wk_rwlock_owned_write(),
 * wk_rwlock_owned_read(), and the other lease kinds'). */
typedef struct wk_lease_state {
    bool owned;     /* the token still holds its lease */
    int64_t ttl_ms; /* ms left on that lease when owned; 0 otherwise */
} wk_lease_state;

/*
 * wk_lock_owned — does `token` still hold the lock `name`, and for how
 * long: *state gets owned and the ms left on its lease (redis-py's
 * Lock.owned(), redsync's Valid()). Writes nothing and does not extend
 * the lease: READ effect, so a read-only handle may ask. The answer is
 * already old when it arrives: the lease may run out right after.
 * Returns WK_OK, WK_EINVAL (bad entity, name, NULL token or state),
 * WK_EDENIED, or a connection / server error.
 */
WK_API int wk_lock_owned(wk_processor *p, const wk_entity *lock, wk_name name,
                         const wk_token *token, wk_lease_state *state);

/*
 * wk_lock_force_release — free the lock `name` whoever holds it, and wake
 * its first waiter. For operators (a stuck job, a holder known dead): the
 * holder is not told, and its release/extend then report false.
 * *was_held: whether somebody held it. WRITE effect. Returns as
 * wk_lock_release().
 *
 * Every kind of the lease family (Lock, RwLock, FencedLock, Semaphore)
 * has this force_release: (p, entity, name, bool *was_held), was_held
 * required, true when a lease was running.
 */
WK_API int wk_lock_force_release(wk_processor *p, const wk_entity *lock, wk_name name,
                                 bool *was_held);

/* What wk_lock_inspect() saw. */
typedef struct wk_lock_state {
    bool held;       /* somebody holds the lock */
    int64_t ttl_ms;  /* ms left on the lease when held; 0 otherwise */
    int64_t waiting; /* waiting acquires queued (the wait queue's length,
                      * read in the same script); -1: not known (a cluster
                      * slot migrating, or a reply without it) */
} wk_lock_state;

/* wk_lock_inspect — is `name` held, for how much longer (PTTL), and how
 * many wait for it. READ effect: a read-only handle may use it. */
WK_API int wk_lock_inspect(wk_processor *p, const wk_entity *lock, wk_name name,
                           wk_lock_state *state);

/*
 * wk_lock_acquire — take the lock `name`, waiting for its release until it
 * is acquired or the deadline passes.
 *
 *   p         the processor. A batch is refused with WK_EINVAL:
 *             waiting needs each try's outcome at once. An event-loop
 *             handle's (wk_async_with) queues the wait: the call returns
 *             its queuing status and the callback the outcome below
 *             (wakuwaku/async.h, SEMANTICS 6).
 *   lock      a Lock entity (ttl_ms > 0).
 *   deadline  a point on wk_monotonic_ms()'s clock, e.g.
 *             wk_deadline_in(2000): the whole call's (see DEADLINE in
 *             wakuwaku/deadline.h). A deadline already past still makes
 *             exactly one try, which has 25 ms to be answered.
 *   backoff   NULL for WK_BACKOFF_INIT; else initial_ms 1..max_ms. Still
 *             checked, no longer used: the wait does not poll.
 *   token     OUT: the token of the last try. It holds the lock when
 *             *acquired is true, never after WK_OK with *acquired false,
 *             and MAY hold it after WK_EUNKNOWN (see the WARNING in
 *             wakuwaku/deadline.h).
 *   acquired  OUT: true once acquired; false when the deadline passed or
 *             on any error.
 *
 * Returns WK_OK (see *acquired); WK_EINVAL (bad argument, a batch,
 * bad backoff); or the first error of a try (WK_EDENIED, a
 * connection or server error), which ends the wait at once. Whatever the
 * server does (stalled, trickling, gone) it returns at most 50 ms after
 * the deadline (DEADLINE in wakuwaku/deadline.h).
 * WK_EUNKNOWN: the last try may have taken the lock under *token, until
 * its TTL runs out; release with that token once the connection is back
 * (safe either way), or let it run out. WK_EDENIED, WK_EINVAL: nothing was
 * sent.
 *
 * Never returns WK_OK with *acquired false before the deadline; never
 * sleeps past the deadline (the only overrun is the scheduler's wake-up
 * latency plus the final attempt's and the leave's round trips, which
 * end 25 ms after the deadline at the latest).
 *
 * How it waits: one lock.try first (a free lock costs exactly a
 * wk_lock_try). If held, a lock.acquire script tries again and queues
 * the caller, then it sleeps in BLPOP (wake.wait) on the blocking
 * connection of the handle behind `p`: opened with the handle's options
 * and capability the first time it waits, kept until wk_db_close(). A
 * release hands the lock over to the first waiter (collection/wake.h): its
 * script writes the lease under that waiter's token, with the whole TTL,
 * and pushes a notice to the waiter's list, so the waiter's BLPOP returns
 * holding the lock, with no attempt after it (on a handle with
 * lease_replicas it still makes one attempt, which finds the lease its own
 * and carries the WAIT). The first waiter also wakes when the holder's
 * lease would end, and attempts again. Leaving without the lock (deadline,
 * error) it leaves the queue (lock.leave), passing on a wake-up it got or
 * a lock handed to it meanwhile. Errors of the wait itself: the blocking
 * connection's
 * open status, or WK_EIO / WK_ETIMEDOUT when it fails while sleeping (the
 * lock is then not held by *token). Every query is a WRITE of `lock`;
 * wrappers of `p` see lock.try, lock.acquire and lock.leave, not the
 * BLPOPs. A processor with no handle (p->db NULL) sleeps the same bounds
 * instead of blocking. Thread-safety: as the processor's handle (one
 * thread at a time).
 */
WK_API int wk_lock_acquire(wk_processor *p, const wk_entity *lock, wk_name name, int64_t deadline,
                           const wk_backoff *backoff, wk_token *token, bool *acquired);

WK__OPS(WK_LOCK_OPS)

#ifdef __cplusplus
}
#endif

#endif /* WAKUWAKU_LOCK_H */
