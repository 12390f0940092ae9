/*
 * collection/lock_scripts.h — token scripts shared by Lock and the writer
 * side of RwLock. Not installed.
 */
#ifndef WK_COLLECTION_LOCK_SCRIPTS_H
#define WK_COLLECTION_LOCK_SCRIPTS_H

#include <wakuwaku/lock.h>

#include "collection/lease_script.h"
#include "collection/wake.h"

/* KEYS = the key, its wake q and e (collection/wake.h); ARGV = token,
 * the wake prefix w. Returns 1 if it held the token; wakes the first
 * waiter. */
extern const wk__two_forms wk__lock_release_forms;
#define wk__lock_release_script (wk__lock_release_forms.script)
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

/* Runs one of the two scripts above on `key` as a WRITE of `e`; with_ttl
 * (an extend) makes it a lease query (WK__QUERY_LEASE: acknowledged). */
int wk__token_script(wk_processor *p, const char *op, const wk_script *script, const wk_entity *e,
                     const char *key, size_t key_len, const wk_token *token, bool with_ttl,
                     bool *out);

/* Runs `script` with KEYS = key, wk->q, wk->e and the first `extra_keys`
 * of args, then ARGV = the rest of args (≤ 8 in all), as a `mode` access
 * of `e` (READ queries are retry-safe) with the query flags `flags`
 * (WK__QUERY_LEASE for an acquire). */
int wk__wake_script(wk_processor *p, const char *op, const wk_script *script, unsigned flags,
                    wk_mode mode, const wk_entity *e, const char *key, size_t key_len, const wk__wake_keys *wk,
                    int extra_keys, const char *const *args, const size_t *lens, int nargs,
                    wk_parse_fn parse, void *out);

/* wk__lock_release_script on `key` (a Lock's, or an RwLock's writer key),
 * waking the item's first waiter. */
int wk__release_waking(wk_processor *p, const char *op, const wk_entity *e, const char *key,
                       size_t key_len, const wk_token *token, bool *released);

/* wk_lease_state from a script returning PTTL or -2 (KEYS key, ARGV
 * token); a READ of `e`, retry-safe. */
int wk__owned_script(wk_processor *p, const char *op, const wk_script *script, const wk_entity *e,
                     const char *key, size_t key_len, const wk_token *token, wk_lease_state *state);

/* Parser of {acquired, sleep} that keeps only `acquired` (a bool at out),
 * for the plain tries of fair entities. */
int wk__parse_first_bool(const wk_query *q, const wk_reply *r, wk_diag *d);

#endif /* WK_COLLECTION_LOCK_SCRIPTS_H */
