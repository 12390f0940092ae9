/*
 * collection/lock_scripts.h — token scripts shared by Lock and the writer
 * side of RwLock. Not installed.
 */
#ifndef WK_COLLECTION_LOCK_SCRIPTS_H
#define WK_COLLECTION_LOCK_SCRIPTS_H

#include <wakuwaku/lock.h>

/* KEYS[1] = the key; ARGV[1] = token. Returns 1 if it held the token. */
extern const wk_script wk__lock_release_script;
/* KEYS[1] = the key; ARGV[1] = token, ARGV[2] = ttl ms. */
extern const wk_script wk__lock_extend_script;

/* RwLock scripts (KEYS and ARGV documented in rwlock.c); shared with the
 * benchmark so raw hiredis can do exactly the same Redis work. */
extern const wk_script wk__rwlock_try_read_script;
extern const wk_script wk__rwlock_try_write_script;
extern const wk_script wk__rwlock_release_read_script;
extern const wk_script wk__rwlock_extend_read_script;
extern const wk_script wk__rwlock_inspect_script;

/* Runs one of the two scripts above on `key` as a WRITE of `e`. */
int wk__token_script(wk_processor *p, const char *op, const wk_script *script,
                     const wk_entity *e, const char *key, size_t key_len, const wk_token *token,
                     bool with_ttl, bool *out);

#endif /* WK_COLLECTION_LOCK_SCRIPTS_H */
