/*
 * collection/lock_scripts.h — token scripts shared by Lock and the writer
 * side of RwLock, and the raw side of the benchmark. Not installed.
 */
#ifndef WK_COLLECTION_LOCK_SCRIPTS_H
#define WK_COLLECTION_LOCK_SCRIPTS_H

#include <wakuwaku/lock.h>

#include "collection/lease_script.h"
#include "collection/wake.h"

/* Lua fragments the lease scripts share (string literals, so that the
 * scripts stay static strings). */
/* Server time in ms as `now`. */
#define WK__NOW_MS                                                                                 \
    "local t = redis.call('TIME')\nlocal now = t[1] * 1000 + math.floor(t[2] / 1000)\n"
/* A lease in a sorted set (RwLock readers, Semaphore permits: token →
 * end of its lease, server ms), KEYS[1], given back by its token ARGV[1]:
 * its end as `s`; then one ZREM of it and of the ended leases, the last
 * command on the set (on a migrating node a script may not touch a key it
 * has just emptied); then the reply, 1 if that lease was still running. */
#define WK__ZLEASE_END "local s = redis.call('ZSCORE', KEYS[1], ARGV[1])\n"
#define WK__ZLEASE_DROP                                                                            \
    "local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, 1000)\n"           \
    "gone[#gone + 1] = ARGV[1]\n"                                                                  \
    "redis.call('ZREM', KEYS[1], unpack(gone))\n"
#define WK__ZLEASE_RAN "if s and tonumber(s) > now then return 1 end\nreturn 0\n"

/* KEYS = the key, its wake q and e (collection/wake.h); ARGV = token,
 * the wake prefix w, ttl. Returns 1 if it held the token; hands the lock
 * to the first waiter (collection/wake.h, handing over). */
extern const wk__two_forms wk__lock_release_forms;
/* Lock's waiter leave, as a waiting acquire sends it when it gives up
 * (passes on a lock handed to `id`); for tests. */
int wk__lock_leave(wk_processor *p, const wk_entity *lock, wk_name name, const wk_token *id);
/* The same for an RwLock waiter (either side) and a Semaphore waiter. */
int wk__rwlock_leave(wk_processor *p, const wk_entity *rw, wk_name name, const wk_token *id);
int wk__semaphore_leave(wk_processor *p, const wk_entity *sem, wk_name name, const wk_token *id);
/* The RwLock writer's release: KEYS w, q, e, r; ARGV token, w, ttl.
 * Hands the item to the head of the queue (a writer, or the readers at
 * the head: collection/rwlock.c), or frees the writer key. */
extern const wk__two_forms wk__rwlock_release_write_forms;
#define wk__lock_release_script (wk__lock_release_forms.script)
/* Lock's try when not fair: KEYS lock; ARGV token, ttl, w. 1/0. */
extern const wk_script wk__lock_try_script;
/* Lock's acquire-or-park (KEYS and ARGV documented in lock.c). */
extern const wk__two_forms wk__lock_acquire_forms;
#define wk__lock_acquire_script (wk__lock_acquire_forms.script)
/* KEYS[1] = the key; ARGV[1] = token. PTTL if it holds it, else -2. */
extern const wk_script wk__lock_owned_script;
/* KEYS[1] = the key; ARGV[1] = token, ARGV[2] = ttl ms. */
extern const wk_script wk__lock_extend_script;

/* RwLock scripts (KEYS and ARGV documented in rwlock.c); shared with the
 * benchmark so raw hiredis can do exactly the same Redis work. The tries'
 * single-key forms are the marks of split takes (lease_script.h). */
extern const wk__two_forms wk__rwlock_try_read_forms;
extern const wk__two_forms wk__rwlock_try_write_forms;
#define wk__rwlock_try_read_script (wk__rwlock_try_read_forms.script)
#define wk__rwlock_try_write_script (wk__rwlock_try_write_forms.script)
extern const wk__two_forms wk__rwlock_release_read_forms;
#define wk__rwlock_release_read_script (wk__rwlock_release_read_forms.script)
extern const wk_script wk__rwlock_extend_read_script;
extern const wk_script wk__rwlock_inspect_script;

/* wk_lease_state from a script returning PTTL or -2 (the owned scripts
 * of Lock and of the RwLock writer). */
int wk__parse_owned(const wk_query *q, const wk_reply *r, wk_diag *d);

/* Parser of {acquired, sleep} that keeps only `acquired` (a bool at out),
 * for the plain tries of fair entities. */
int wk__parse_first_bool(const wk_query *q, const wk_reply *r, wk_diag *d);

#endif /* WK_COLLECTION_LOCK_SCRIPTS_H */
