/*
 * wakuwaku/rwlock.h — RwLock: one writer or many readers per name.
 *
 * Redis layout (one cluster slot per name):
 *   @@wakuwaku-entity:RwLock:{<ns>:<name>}:w   string: the writer's token
 *   @@wakuwaku-entity:RwLock:{<ns>:<name>}:r   sorted set: reader token →
 *                                              end of its lease (server ms)
 *
 * Every reader holds its own lease of the entity's TTL. The scripts drop
 * expired readers, so a crashed reader blocks writers for at most its TTL.
 * All times come from the server clock (TIME), never from the client.
 *
 *   wk_rwlock_try_read       fails if a writer holds it            WRITE
 *   wk_rwlock_try_write      fails while any reader lease runs     WRITE
 *   wk_rwlock_release_read   outputs whether the lease still ran   WRITE
 *   wk_rwlock_extend_read    renews only a running lease           WRITE
 *   wk_rwlock_release_write / _extend_write   as wk_lock_*         WRITE
 *   wk_rwlock_inspect        writer held? readers running?         READ
 *   wk_rwlock_owned_write / _owned_read   this token's lease?      READ
 *   wk_rwlock_force_release  drop writer and readers, wake         WRITE
 *   wk_rwlock_acquire_read / _write   try, then sleep until a      WRITE
 *                            release or the deadline (deadline.h)
 *
 * Waiters queue on the writer key's companions (…{<ns>:<name>}:w:q …, see
 * wakuwaku/lock.h). The writer's release and the last reader's release
 * wake the first waiter; a reader that gets in wakes the next one.
 *
 * Taking a read lease is a WRITE: it changes Redis.
 *
 * WARNING: readers do not wait for a waiting writer, so a steady stream of
 * overlapping readers can starve writers indefinitely — unless the entity
 * is fair (WK_RWLOCK_FAIR_ENTITY: first come, first served; a reader's try
 * fails while a writer waits).
 *
 * Redis Cluster slot migration: while w and r are split between the two
 * nodes (or missing), a take goes on in single-key steps: the writer sets
 * w (a reader adds itself to r), then looks at the other key (running
 * readers; a writer) and gives its lease back if it finds one. A writer
 * and a reader never both hold it; both may be refused at once (a try
 * answers not acquired, a wait tries again), fair queues are not
 * consulted, and a release wakes nobody (a waiter wakes when the lease it
 * waited for can have run out). Through a batch a take is not split and
 * fails as not run (WK_ETIMEDOUT) until the keys are together again; so
 * does wk_rwlock_inspect. docs/GUARANTEES.md, Redis Cluster.
 */
/* The kind: its name in keys and the initialiser of its descriptors
 * (wakuwaku/entity.h). Plain macros in a guard of their own, which
 * wakuwaku/entity.h reads alone (WK__ENTITY_MACROS_ONLY). */
#ifndef WAKUWAKU_RWLOCK_ENTITY
#define WAKUWAKU_RWLOCK_ENTITY
#define WK_KIND_RWLOCK "RwLock"
/* An RwLock entity: namespace and the lease length of the writer and
 * of each reader (ttl_ms > 0). */
#define WK_RWLOCK_ENTITY(ns_, ttl_ms_) WK__ENTITY(WK_KIND_RWLOCK, ns_, ttl_ms_, 0, 0, 0)
/* A fair RwLock entity: waiting readers and writers get it first come,
 * first served, and a reader does not pass a waiting writer (no writer
 * starvation; see FAIRNESS in wakuwaku/lock.h). */
#define WK_RWLOCK_FAIR_ENTITY(ns_, ttl_ms_)                                                        \
    WK__ENTITY_FLAGS(WK_KIND_RWLOCK, ns_, ttl_ms_, 0, 0, 0, WK_ENTITY_FAIR)
/* Its operations, one row each (wakuwaku/query.h, "Operation lists"); the
 * compiler checks every row against its prototype below (WK__OPS). */
#define WK_RWLOCK_OPS(XX)                                                                          \
    XX(rwlock, try_read, WRITE, (wk_name name, wk_token *token, bool *acquired),                   \
       "take a reader lease unless a writer holds it")                                             \
    XX(rwlock, try_write, WRITE, (wk_name name, wk_token *token, bool *acquired),                  \
       "take the writer lease unless anyone holds it")                                             \
    XX(rwlock, release_read, WRITE, (wk_name name, const wk_token *token, bool *was_running),      \
       "drop a reader lease")                                                                      \
    XX(rwlock, extend_read, WRITE, (wk_name name, const wk_token *token, bool *extended),          \
       "renew a running reader lease")                                                             \
    XX(rwlock, release_write, WRITE, (wk_name name, const wk_token *token, bool *released),        \
       "release the writer lease")                                                                 \
    XX(rwlock, extend_write, WRITE, (wk_name name, const wk_token *token, bool *extended),         \
       "renew the writer lease")                                                                   \
    XX(rwlock, owned_write, READ, (wk_name name, const wk_token *token, wk_lease_state *state),    \
       "whether token still holds the writer lease; writes nothing")                               \
    XX(rwlock, owned_read, READ, (wk_name name, const wk_token *token, wk_lease_state *state),     \
       "whether the reader lease of token still runs; writes nothing")                             \
    XX(rwlock, force_release, WRITE, (wk_name name, bool *was_held),                               \
       "free the writer and every reader lease and wake the first waiter (operators)")             \
    XX(rwlock, inspect, READ, (wk_name name, wk_rwlock_state *state),                              \
       "whether a writer holds it, and how many readers")
/* Its row for schemas (wakuwaku/entity.h, "Schema rows"). */
#define WK_RWLOCK_SCHEMA(KIND, PARAM)                                                              \
    KIND(RWLOCK, ", lease {ttl}", NO_BODY, WK__SCHEMA_NO_CHECK, FAIR, NO_PARTS)                    \
    WK__SCHEMA_TTL(PARAM)
#endif

#if !defined(WAKUWAKU_RWLOCK_H) && !defined(WK__ENTITY_MACROS_ONLY)
#define WAKUWAKU_RWLOCK_H

#include <wakuwaku/lock.h>

#ifdef __cplusplus
extern "C" {
#endif

/* wk_rwlock_try_read — take a reader lease unless a writer holds `name`.
 * *token is always overwritten; it holds a lease only when *acquired. Never waits. */
WK_API int wk_rwlock_try_read(wk_processor *p, const wk_entity *rwlock, wk_name name,
                              wk_token *token, bool *acquired);

/* wk_rwlock_try_write — take the writer lease unless a writer holds it or
 * any reader lease is running. Never waits.
 *
 * Both try functions, on a handle with lease_replicas (wakuwaku/db.h,
 * ACKNOWLEDGED LEASES): a WAIT rides behind the lease; too few replicas →
 * *acquired false, WK_ENOTREPLICATED, and released (through a batch or
 * the event loop: yours to release with the token). The extends alike,
 * with *extended false. In a migrating slot (above) a step after the
 * first that fails gives the lease back and its error is returned
 * (WK_EUNKNOWN as WK_EIO: nothing is held); WK_EUNKNOWN when that release
 * fails too (the token may hold it: release with it, or let it run out). */
WK_API int wk_rwlock_try_write(wk_processor *p, const wk_entity *rwlock, wk_name name,
                               wk_token *token, bool *acquired);

/* wk_rwlock_release_read — drop the reader lease of `token`. *was_running
 * tells whether the lease was still running (false: it had expired). */
WK_API int wk_rwlock_release_read(wk_processor *p, const wk_entity *rwlock, wk_name name,
                                  const wk_token *token, bool *was_running);

/* wk_rwlock_extend_read — renew a running reader lease for one TTL;
 * *extended is false if it had already expired (it is not revived). */
WK_API int wk_rwlock_extend_read(wk_processor *p, const wk_entity *rwlock, wk_name name,
                                 const wk_token *token, bool *extended);

/* wk_rwlock_release_write — as wk_lock_release(), on the writer key. */
WK_API int wk_rwlock_release_write(wk_processor *p, const wk_entity *rwlock, wk_name name,
                                   const wk_token *token, bool *released);

/* wk_rwlock_extend_write — as wk_lock_extend(), on the writer key. */
WK_API int wk_rwlock_extend_write(wk_processor *p, const wk_entity *rwlock, wk_name name,
                                  const wk_token *token, bool *extended);

/* wk_rwlock_owned_write — does `token` still hold the writer lease, and
 * for how long (as wk_lock_owned()). READ effect; writes nothing. */
WK_API int wk_rwlock_owned_write(wk_processor *p, const wk_entity *rwlock, wk_name name,
                                 const wk_token *token, wk_lease_state *state);

/* wk_rwlock_owned_read — does the reader lease of `token` still run, and
 * for how long (server time). READ effect; writes nothing, renews
 * nothing. */
WK_API int wk_rwlock_owned_read(wk_processor *p, const wk_entity *rwlock, wk_name name,
                                const wk_token *token, wk_lease_state *state);

/* wk_rwlock_force_release — free `name` whoever holds it (the writer and
 * every reader lease), and wake its first waiter. For operators; the
 * holders are not told. *was_held: a writer or a running reader held it.
 * WRITE effect. */
WK_API int wk_rwlock_force_release(wk_processor *p, const wk_entity *rwlock, wk_name name,
                                   bool *was_held);

/* What wk_rwlock_inspect() saw. */
typedef struct wk_rwlock_state {
    bool writer_held;       /* a writer holds the lock */
    int64_t writer_ttl_ms;  /* ms left on the writer's lease; 0 if none */
    int64_t readers;        /* reader leases still running */
    int64_t waiting;        /* waiting acquires queued, readers and writers
                             * (as wk_lock_state's) */
} wk_rwlock_state;

/* wk_rwlock_inspect — writer and running readers of `name`. READ effect
 * (expired readers are counted out, not removed). */
WK_API int wk_rwlock_inspect(wk_processor *p, const wk_entity *rwlock, wk_name name,
                             wk_rwlock_state *state);

/*
 * wk_rwlock_acquire_read — take a reader lease, waiting for the writer's
 * release until acquired or the deadline passes. Arguments, return codes and
 * guarantees as wk_lock_acquire(); an RwLock entity. WRITE effect.
 */
WK_API int wk_rwlock_acquire_read(wk_processor *p, const wk_entity *rwlock, wk_name name,
                                  int64_t deadline, const wk_backoff *backoff, wk_token *token,
                                  bool *acquired);

/*
 * wk_rwlock_acquire_write — take the writer lease, waiting for the
 * releases of the writer and of the last reader until acquired or the
 * deadline passes. As
 * wk_lock_acquire(); an RwLock entity. WRITE effect.
 *
 * WARNING: unless the entity is fair, readers do not wait for a waiting
 * writer (see rwlock.h), so under a steady stream of overlapping readers
 * this times out however long the deadline.
 */
WK_API int wk_rwlock_acquire_write(wk_processor *p, const wk_entity *rwlock, wk_name name,
                                   int64_t deadline, const wk_backoff *backoff, wk_token *token,
                                   bool *acquired);

WK__OPS(WK_RWLOCK_OPS)

#ifdef __cplusplus
}
#endif

#endif /* WAKUWAKU_RWLOCK_H */
