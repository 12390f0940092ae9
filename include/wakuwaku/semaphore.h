/*
 * wakuwaku/semaphore.h — Semaphore: at most N concurrent leases (permits)
 * per name, each permit a lease of its own.
 *
 * Redis layout (one cluster slot per name):
 *   @@wakuwaku-entity:Semaphore:{<ns>:<name>}:permits   sorted set: permit
 *       token → end of its lease (server ms); the key expires with the
 *       last lease
 *   …:permits:q, …:permits:e, …:permits:w:<token>  the waiters of
 *       wk_semaphore_acquire (queue, registrations, wake-up lists),
 *       short-lived
 *
 * Every permit has its own token and its own lease of the entity's TTL, so
 * a crashed holder's permit frees itself when its lease ends. Every script
 * reads the clock with TIME and drops ended leases before deciding; no
 * client clock is used.
 *
 *   wk_semaphore_try            take a permit if fewer than N run    WRITE
 *   wk_semaphore_release        give back the permit of `token`      WRITE
 *   wk_semaphore_extend         renew a running permit (one TTL)     WRITE
 *   wk_semaphore_owned          does `token` still hold a permit,    READ
 *                               for how long (extends nothing)
 *   wk_semaphore_inspect        running permits, free permits        READ
 *   wk_semaphore_force_release  free every permit of the name        WRITE
 *   wk_semaphore_acquire        wait until free or a deadline        WRITE
 *                               (woken by release, collection/wake.h)
 *
 * Taking a permit is a WRITE: it changes Redis.
 *
 * WARNING: N comes from the caller's entity (`permits`), not from Redis:
 * every replica must use the same N for a name, or the bound is the N of
 * whoever tries. A permit that runs out while its holder still works (a
 * pause longer than the TTL) lets one more holder in: the bound holds
 * while leases run. Failover, FLUSHALL and allkeys-* eviction can drop the
 * set, and with it every running permit (see docs/GUARANTEES.md).
 */
/* The kind: its name in keys and the initialiser of its descriptors
 * (wakuwaku/entity.h). Plain macros in a guard of their own. */
#ifndef WAKUWAKU_SEMAPHORE_ENTITY
#define WAKUWAKU_SEMAPHORE_ENTITY
#define WK_KIND_SEMAPHORE "Semaphore"
/* A Semaphore entity: namespace, permits (a whole number from 1 to
 * WK_SEMAPHORE_PERMITS_MAX, in `capacity`) and the lease of each permit
 * (ttl_ms > 0). Its flags must be 0: WK_ENTITY_FAIR is refused (WK_EINVAL). */
#define WK_SEMAPHORE_ENTITY(ns_, permits_, ttl_ms_)                                                \
    WK__ENTITY(WK_KIND_SEMAPHORE, ns_, ttl_ms_, permits_, 0, 0)
/* The most permits a Semaphore may have. */
#define WK_SEMAPHORE_PERMITS_MAX 1000000
/* The rule on permits, written once: wk_entity_check() applies it to
 * descriptors and wk-codegen to schemas, saying the rule (a format taking
 * WK_SEMAPHORE_PERMITS_MAX) and " (got …)". */
#define WK__SEMAPHORE_PERMITS_OK(n)                                                                \
    ((n) >= 1 && (n) <= WK_SEMAPHORE_PERMITS_MAX && (n) == (double)(long long)(n))
#define WK__SEMAPHORE_PERMITS_RULE "permits must be a whole number from 1 to %d"
/* Its operations, one row each (wakuwaku/query.h, "Operation lists"); the
 * compiler checks every row against its prototype below (WK__OPS). */
#define WK_SEMAPHORE_OPS(XX)                                                                       \
    XX(semaphore, try, WRITE, (wk_name name, wk_token *token, bool *acquired),                     \
       "take a permit if fewer than the permits run; never waits")                                 \
    XX(semaphore, release, WRITE, (wk_name name, const wk_token *token, bool *was_running),        \
       "give back the permit of token")                                                            \
    XX(semaphore, extend, WRITE, (wk_name name, const wk_token *token, bool *extended),            \
       "renew the running permit of token for one TTL")                                            \
    XX(semaphore, owned, READ, (wk_name name, const wk_token *token, wk_lease_state *state),       \
       "does token still hold a permit, for how long (extends nothing)")                           \
    XX(semaphore, inspect, READ, (wk_name name, wk_semaphore_state *state),                        \
       "running and free permits")                                                                 \
    XX(semaphore, force_release, WRITE, (wk_name name, bool *was_held),                            \
       "free every permit whoever holds them (operators)")
/* The same rule on a schema's entity: its row's check. */
#define WK__SEMAPHORE_SCHEMA_CHECK(v, why, whylen)                                                 \
    (WK__SEMAPHORE_PERMITS_OK((v)[0].num)                                                          \
         ? -1                                                                                      \
         : (snprintf(why, whylen, WK__SEMAPHORE_PERMITS_RULE " (got %s)",                          \
                     WK_SEMAPHORE_PERMITS_MAX, (v)[0].text),                                       \
            0))
/* Its row for schemas (wakuwaku/entity.h, "Schema rows"). */
#define WK_SEMAPHORE_SCHEMA(KIND, PARAM)                                                           \
    KIND(SEMAPHORE, ", {permits} permits, lease {ttl}",                                            \
         NO_BODY, WK__SEMAPHORE_SCHEMA_CHECK, NO_FAIR, NO_PARTS)                                   \
    PARAM(permits, capacity, POSITIVE, REQUIRED, 0, "only a Semaphore has permits")                \
    WK__SCHEMA_TTL(PARAM)
#endif

#if !defined(WAKUWAKU_SEMAPHORE_H) && !defined(WK__ENTITY_MACROS_ONLY)
#define WAKUWAKU_SEMAPHORE_H

#include <wakuwaku/lock.h> /* wk_lease_state, wk_token */

#ifdef __cplusplus
extern "C" {
#endif

/*
 * wk_semaphore_try — take a permit of `name` if fewer than the entity's
 * permits are running; never waits.
 *
 *   p         the processor (a handle's, or a wrapper; in a batch the
 *             outcome is written when the batch runs).
 *   sem       a Semaphore entity (1 <= permits <= WK_SEMAPHORE_PERMITS_MAX,
 *             whole; ttl_ms > 0).
 *   token     OUT: a fresh random token, always written; it holds a permit
 *             only when *acquired is true.
 *   acquired  OUT: whether this call took a permit.
 *
 * Returns WK_OK (see *acquired), WK_EINVAL (bad entity, name or NULL
 * argument: nothing sent), WK_EDENIED (nothing sent), or a connection /
 * server error. WK_EUNKNOWN: a permit may be held by *token; release it
 * with the token or let its lease run out. WRITE effect. Thread-safety: as
 * the processor's handle.
 */
WK_API int wk_semaphore_try(wk_processor *p, const wk_entity *sem, wk_name name, wk_token *token,
                            bool *acquired);

/*
 * wk_semaphore_release — give back the permit of `token`, and wake the
 * waiters of wk_semaphore_acquire(). *was_running tells whether its lease
 * was still running (false: it had ended, and its place may have gone to
 * another holder). WRITE effect. Returns WK_OK, WK_EINVAL (NULL token or
 * outcome), WK_EDENIED, or a connection / server error.
 */
WK_API int wk_semaphore_release(wk_processor *p, const wk_entity *sem, wk_name name,
                                const wk_token *token, bool *was_running);

/*
 * wk_semaphore_extend — renew the running permit of `token` for one TTL
 * from now. *extended is false when its lease had ended: an ended permit
 * is never revived (another holder may have its place). WRITE effect;
 * returns as wk_semaphore_release().
 */
WK_API int wk_semaphore_extend(wk_processor *p, const wk_entity *sem, wk_name name,
                               const wk_token *token, bool *extended);

/*
 * wk_semaphore_owned — does `token` still hold a permit of `name`, and for
 * how long (state->owned, state->ttl_ms; wk_lease_state of wakuwaku/lock.h). Extends nothing and
 * writes nothing (ended leases are counted out, not removed): READ effect, re-sent once after a
 * dropped connection. The answer is already old when it arrives. Returns WK_OK, WK_EINVAL (NULL
 * token or state), WK_EDENIED, or a connection / server error.
 */
WK_API int wk_semaphore_owned(wk_processor *p, const wk_entity *sem, wk_name name,
                              const wk_token *token, wk_lease_state *state);

/* What wk_semaphore_inspect() saw. */
typedef struct wk_semaphore_state {
    int64_t running;   /* permits whose lease runs */
    int64_t available; /* the entity's permits minus `running` (0 when more
                        * run, e.g. under a larger N of another replica) */
    int64_t waiting;   /* waiting acquires queued (as wk_lock_state's) */
} wk_semaphore_state;

/* wk_semaphore_inspect — running and free permits of `name`. READ effect.
 * Returns as wk_semaphore_owned(); *state is meaningful after WK_OK only. */
WK_API int wk_semaphore_inspect(wk_processor *p, const wk_entity *sem, wk_name name,
                                wk_semaphore_state *state);

/*
 * wk_semaphore_force_release — for operators: free every permit of `name`
 * whoever holds them, and wake the waiters. *was_held: whether a permit's
 * lease was running (the lease family's force_release convention,
 * wakuwaku/lock.h; wk_semaphore_inspect() counts the running permits).
 * Their holders learn it at their next extend/owned/release (false).
 * WRITE effect; returns as wk_semaphore_release().
 */
WK_API int wk_semaphore_force_release(wk_processor *p, const wk_entity *sem, wk_name name,
                                      bool *was_held);

/*
 * wk_semaphore_acquire — take a permit of `name`, waiting until one is
 * free or the deadline passes. Waiters sleep on Redis and are woken by a
 * release or a force release (and each one who takes a permit wakes the
 * next waiter, who may fit too); a waiter also wakes when the earliest
 * running lease can have run out, so a crashed holder's permit is reused
 * at most its TTL later. Not fair: a plain try may take a permit ahead of
 * a waiter.
 *
 *   p         the processor; a batch is refused (WK_EINVAL); an
 *             event-loop handle's queues the wait, its callback has the
 *             outcome (wakuwaku/async.h, SEMANTICS 6). The sleeps use a second connection of the
 *             handle's own (opened on the first wait, closed with it).
 *   deadline  a point on wk_monotonic_ms()'s clock (wk_deadline_in());
 *             one attempt is made even if it has passed.
 *   token     OUT: a fresh token, the same for every attempt; it holds a
 *             permit when *acquired, and MAY hold one after WK_EUNKNOWN.
 *   acquired  OUT: true once a permit is taken.
 *
 * Returns WK_OK (*acquired false: the deadline passed); WK_EINVAL (bad
 * argument, a batch: nothing sent); WK_EDENIED; the first error
 * of an attempt, which ends the wait (WK_EUNKNOWN: release with *token or
 * let its lease run out); WK_EIO / WK_ETIMEDOUT when the wait's own
 * connection failed (after the leave: nothing is held then; a leave
 * that fails too makes it WK_EUNKNOWN). Never returns more than
 * 50 ms after the deadline (DEADLINE in wakuwaku/deadline.h). WRITE
 * effect. Thread-safety: as the processor's handle.
 */
WK_API int wk_semaphore_acquire(wk_processor *p, const wk_entity *sem, wk_name name,
                                int64_t deadline, wk_token *token, bool *acquired);

WK__OPS(WK_SEMAPHORE_OPS)

#ifdef __cplusplus
}
#endif

#endif /* WAKUWAKU_SEMAPHORE_H */
