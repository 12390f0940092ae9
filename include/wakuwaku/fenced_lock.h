/*
 * wakuwaku/fenced_lock.h — FencedLock: a lease lock, one holder per name,
 * whose every acquisition also hands out a fencing token.
 *
 * Redis layout (one cluster slot per name):
 *   @@wakuwaku-entity:FencedLock:{<ns>:<name>}:lease  hash {token: the
 *       holder's random 16 bytes, fence: its fence}, expiring after the TTL
 *   @@wakuwaku-entity:FencedLock:{<ns>:<name>}:fence  string: the last fence
 *       handed out for the name; no expiry, never deleted by the library
 *   …:lease:q, …:lease:e, …:lease:w:<token>  the waiters of
 *       wk_fenced_lock_acquire (queue, registrations, wake-up lists),
 *       short-lived
 *
 *   wk_fenced_lock_try            take it if free, INCR the fence   WRITE
 *   wk_fenced_lock_release        free it if `token` holds it       WRITE
 *   wk_fenced_lock_extend         restart the lease (one TTL)       WRITE
 *   wk_fenced_lock_owned          does `token` still hold it, for   READ
 *                                 how long (extends nothing)
 *   wk_fenced_lock_inspect        held? TTL, last fence             READ
 *   wk_fenced_lock_force_release  free it whoever holds it          WRITE
 *   wk_fenced_lock_acquire        wait until free or a deadline     WRITE
 *                                 (woken by release, collection/wake.h)
 *
 * The fence is an integer that strictly increases per name across every
 * acquisition by anyone, also after a lease ran out or was released: the
 * counter key outlives the lease. Hand it to the resource the lock
 * protects, and let the resource refuse any fence not greater than the
 * highest it has seen:
 *     UPDATE account SET balance = $b, fence = $fence
 *      WHERE id = 42 AND fence < $fence;        -- 0 rows: a stale holder
 * (examples/fenced_sqlite does exactly this). Then a holder paused past its
 * lease cannot overwrite the work of the holder after it.
 *
 * WARNING: monotonicity holds only while the counter key survives. It
 * breaks when the key is lost: FLUSHALL / FLUSHDB or a DEL of it, eviction
 * under an allkeys-* maxmemory policy, a failover to a replica that had
 * not received the latest INCR, a restart or restore without persistence.
 * The counter then starts again from 1. A resource that keeps the highest
 * fence it saw detects it: every new fence is refused (never a stale write
 * accepted) until an operator raises the counter above the highest fence
 * seen (SET <fence key> <n>). Run it with noeviction or a volatile-*
 * policy and with persistence (AOF) if the resource cannot tolerate that.
 *
 * Every counter costs one key per name for ever: use it for a bounded set
 * of names (resources), not for one name per request.
 *
 * Redis Cluster slot migration: while the lease and the counter are split
 * between the two nodes (or the lease is missing), a take goes on in
 * single-key steps: take the lease with fence 0, INCR the counter, then
 * store that fence only if the token still holds the lease (else not
 * acquired: a fence drawn by someone who lost the lease is never handed
 * out, so handed-out fences still increase in the order of acquisition).
 * A release then wakes nobody (a waiter wakes when the lease it waited
 * for can have run out). Through a batch a take is not split and fails as
 * not run (WK_ETIMEDOUT) until the keys are together again; so does
 * wk_fenced_lock_inspect. docs/GUARANTEES.md, Redis Cluster.
 */
/* The kind: its name in keys and the initialiser of its descriptors
 * (wakuwaku/entity.h). Plain macros in a guard of their own. */
#ifndef WAKUWAKU_FENCED_LOCK_ENTITY
#define WAKUWAKU_FENCED_LOCK_ENTITY
#define WK_KIND_FENCED_LOCK "FencedLock"
/* A FencedLock entity: namespace and lease length (ttl_ms > 0). Its
 * flags must be 0: WK_ENTITY_FAIR is refused (WK_EINVAL), its waiters are
 * not served first come, first served. */
#define WK_FENCED_LOCK_ENTITY(ns_, ttl_ms_) WK__ENTITY(WK_KIND_FENCED_LOCK, ns_, ttl_ms_, 0, 0, 0)
/* Its operations, one row each (wakuwaku/query.h, "Operation lists"); the
 * compiler checks every row against its prototype below (WK__OPS). */
#define WK_FENCED_LOCK_OPS(XX)                                                                     \
    XX(fenced_lock, try, WRITE, (wk_name name, wk_fenced_lease *lease),                            \
       "take the lock if nobody holds it, with the next fence; never waits")                       \
    XX(fenced_lock, release, WRITE, (wk_name name, const wk_token *token, bool *released),         \
       "release the lock if it still holds token")                                                 \
    XX(fenced_lock, extend, WRITE, (wk_name name, const wk_token *token, bool *extended),          \
       "restart the lease for one more TTL if it still holds token")                               \
    XX(fenced_lock, owned, READ,                                                                   \
       (wk_name name, const wk_token *token, wk_fenced_lock_ownership *state),                     \
       "does token still hold it, for how long, under which fence (extends nothing)")              \
    XX(fenced_lock, inspect, READ, (wk_name name, wk_fenced_lock_state *state),                    \
       "is it held, for how much longer, and the last fence")                                      \
    XX(fenced_lock, force_release, WRITE, (wk_name name, bool *was_held),                          \
       "free it whoever holds it (operators); the fence counter is kept")
/* Its row for schemas (wakuwaku/entity.h, "Schema rows"). */
#define WK_FENCED_LOCK_SCHEMA(KIND, PARAM)                                                         \
    KIND(FENCED_LOCK, ", lease {ttl}, fenced", NO_BODY, WK__SCHEMA_NO_CHECK, NO_FAIR, NO_PARTS)    \
    WK__SCHEMA_TTL(PARAM)
#endif

#if !defined(WAKUWAKU_FENCED_LOCK_H) && !defined(WK__ENTITY_MACROS_ONLY)
#define WAKUWAKU_FENCED_LOCK_H

#include <wakuwaku/clock.h>
#include <wakuwaku/query.h>
#include <wakuwaku/token.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A lease of a FencedLock, as wk_fenced_lock_try() / _acquire() wrote it.
 * A value type: copy it to hand the lease to another thread. */
typedef struct wk_fenced_lease {
    wk_token token; /* the holder's random token (release, extend, owned) */
    int64_t fence;  /* the fencing token, >= 1 when acquired; 0 otherwise */
    bool acquired;  /* whether the call took the lock */
} wk_fenced_lease;

/*
 * wk_fenced_lock_try — take the lock `name` if nobody holds it, and hand
 * out the next fence of the name; never waits.
 *
 *   p      the processor (a handle's, or a wrapper; a batch writes the
 *          outcome when the batch runs, so `lease` must live until then).
 *   lock   a FencedLock entity (ttl_ms > 0).
 *   lease  OUT: lease->token is a fresh random token, always written;
 *          lease->acquired says whether this call took the lock and
 *          lease->fence is then its fence (0 when not acquired: a try that
 *          finds the lock held hands out no fence).
 *
 * Returns WK_OK (see lease->acquired), WK_EINVAL (bad entity, name or
 * NULL lease: nothing sent), WK_EDENIED (nothing sent), WK_EREDIS (e.g.
 * the fence key holds something that is not an integer), or a connection
 * error. WK_EUNKNOWN: the lock may be held by lease->token with a fence
 * you never saw (or fence 0, never drawn: a take in a migrating slot cut
 * off after its first step); release with the token or let the TTL run
 * out. In a migrating slot (above) a later step that fails gives the
 * lease back and returns its error (WK_EUNKNOWN as WK_EIO: nothing is
 * held). WRITE effect. Thread-safety: as the processor's handle.
 */
WK_API int wk_fenced_lock_try(wk_processor *p, const wk_entity *lock, wk_name name,
                              wk_fenced_lease *lease);

/*
 * wk_fenced_lock_release — free the lock if `token` still holds it, and
 * wake the waiters of wk_fenced_lock_acquire(). *released is false when
 * the lease had run out (someone else may hold it now; that lease is not
 * touched). The fence counter is kept. WRITE effect. Returns WK_OK,
 * WK_EINVAL (NULL token or outcome), WK_EDENIED or a connection / server
 * error (WK_EUNKNOWN: it may have been released).
 */
WK_API int wk_fenced_lock_release(wk_processor *p, const wk_entity *lock, wk_name name,
                                  const wk_token *token, bool *released);

/*
 * wk_fenced_lock_extend — restart the lease for one more TTL if `token`
 * still holds it; the fence stays the same. *extended is false when the
 * lease had run out. WRITE effect; returns as wk_fenced_lock_release().
 */
WK_API int wk_fenced_lock_extend(wk_processor *p, const wk_entity *lock, wk_name name,
                                 const wk_token *token, bool *extended);

/* What wk_fenced_lock_owned() saw. */
typedef struct wk_fenced_lock_ownership {
    bool owned;     /* `token` holds the lease */
    int64_t ttl_ms; /* ms left on it when owned; 0 otherwise */
    int64_t fence;  /* its fence when owned; 0 otherwise, and 0 for a lease
                     * whose fence was never drawn (a take in a migrating
                     * slot, cut off: it protects nothing, release it) */
} wk_fenced_lock_ownership;

/*
 * wk_fenced_lock_owned — does `token` still hold the lock `name`, for how
 * long, and under which fence. Extends nothing and writes nothing: READ
 * effect, so a read-only handle may ask, and a lost reply is re-sent once
 * after a dropped connection (WK_QUERY_RETRY_SAFE).
 *
 * WARNING: the answer is already old when it arrives; "owned for 300 ms"
 * means the lease ran at least until the server answered. Fence the
 * resource rather than relying on it.
 *
 * Returns WK_OK, WK_EINVAL (NULL token or state), WK_EDENIED, WK_ECORRUPT
 * (a lease whose fence is not an integer), or a connection error.
 */
WK_API int wk_fenced_lock_owned(wk_processor *p, const wk_entity *lock, wk_name name,
                                const wk_token *token, wk_fenced_lock_ownership *state);

/* What wk_fenced_lock_inspect() saw. */
typedef struct wk_fenced_lock_state {
    bool held;          /* somebody holds the lock */
    int64_t ttl_ms;     /* ms left on the lease when held; 0 otherwise */
    int64_t last_fence; /* the last fence handed out for the name (0: none
                         * yet, or the counter was lost) */
    int64_t waiting;    /* waiting acquires queued (as wk_lock_state's) */
} wk_fenced_lock_state;

/* wk_fenced_lock_inspect — is `name` held, for how much longer, and the
 * last fence handed out. READ effect. Returns as wk_fenced_lock_owned(). */
WK_API int wk_fenced_lock_inspect(wk_processor *p, const wk_entity *lock, wk_name name,
                                  wk_fenced_lock_state *state);

/*
 * wk_fenced_lock_force_release — for operators: free the lock `name`
 * whoever holds it, and wake the waiters. *was_held: whether a lease was
 * running (the lease family's force_release convention, wakuwaku/lock.h).
 * The fence counter is kept, so the next holder's fence is still
 * greater than the evicted holder's, and a resource that fences refuses
 * the evicted holder's late writes. WRITE effect; returns as
 * wk_fenced_lock_release().
 */
WK_API int wk_fenced_lock_force_release(wk_processor *p, const wk_entity *lock, wk_name name,
                                        bool *was_held);

/*
 * wk_fenced_lock_acquire — take the lock `name`, waiting until it is
 * acquired or the deadline passes. Waiters sleep on Redis and are woken by
 * the holder's release (or force release); a waiter also wakes when the
 * holder's lease can have run out, so a crashed holder costs at most its
 * TTL. Not fair: a plain try may take the lock ahead of a waiter.
 *
 *   p         the processor. A batch is refused (WK_EINVAL): waiting
 *             needs each attempt's outcome at once; an event-loop
 *             handle's queues the wait, its callback has the outcome
 *             (wakuwaku/async.h, SEMANTICS 6).
 *             The sleeps use a second connection of the handle's own
 *             (opened on the first wait, closed with the handle), so the
 *             handle's connection is never blocked.
 *   deadline  a point on wk_monotonic_ms()'s clock (wk_deadline_in());
 *             one attempt is made even if it has passed.
 *   lease     OUT: lease->token (fresh, the same for every attempt) may
 *             hold the lock after WK_EUNKNOWN; lease->acquired and
 *             lease->fence as wk_fenced_lock_try().
 *
 * Returns WK_OK (lease->acquired false: the deadline passed); WK_EINVAL
 * (bad argument, a batch: nothing sent); WK_EDENIED; the first
 * error of an attempt, which ends the wait at once (WK_EUNKNOWN: the
 * attempt may have taken the lock under lease->token — release with it, or
 * let its TTL run out); WK_EIO / WK_ETIMEDOUT when the wait's own
 * connection failed (after the leave: nothing is held then; a leave
 * that fails too makes it WK_EUNKNOWN). It never returns more than
 * 50 ms after the deadline (DEADLINE in wakuwaku/deadline.h). WRITE
 * effect (every attempt and the wait change Redis: a waiter queues
 * itself). Thread-safety: as the processor's handle.
 */
WK_API int wk_fenced_lock_acquire(wk_processor *p, const wk_entity *lock, wk_name name,
                                  int64_t deadline, wk_fenced_lease *lease);

WK__OPS(WK_FENCED_LOCK_OPS)

#ifdef __cplusplus
}
#endif

#endif /* WAKUWAKU_FENCED_LOCK_H */
