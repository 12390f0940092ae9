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
#ifndef WAKUWAKU_LOCK_H
#define WAKUWAKU_LOCK_H

#include <wakuwaku/query.h>

#ifdef __cplusplus
extern "C" {
#endif

#define WK_TOKEN_LEN 16

/* A lease token: 16 random bytes from libsodium's CSPRNG. A value type;
 * copying it is how a lease moves between threads (e.g. a lease keeper). */
typedef struct wk_token {
    uint8_t bytes[WK_TOKEN_LEN];
} wk_token;

/* wk_token_random — fill `token` from libsodium's CSPRNG (randombytes_buf).
 * Thread-safe once any handle has been opened (sodium_init). */
WK_API void wk_token_random(wk_token *token);

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

/* What wk_lock_inspect() saw. */
typedef struct wk_lock_state {
    bool held;      /* somebody holds the lock */
    int64_t ttl_ms; /* ms left on the lease when held; 0 otherwise */
} wk_lock_state;

/* wk_lock_inspect — is `name` held, and for how much longer (PTTL).
 * READ effect: a read-only handle may use it. */
WK_API int wk_lock_inspect(wk_processor *p, const wk_entity *lock, wk_name name,
                           wk_lock_state *state);

#ifdef __cplusplus
}
#endif

#endif /* WAKUWAKU_LOCK_H */
