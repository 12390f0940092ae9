/*
 * collection/common.h — helpers shared by the collections: argument
 * checks, key building, and the reply parsers most queries share.
 * Not installed.
 */
#ifndef WK_COLLECTION_COMMON_H
#define WK_COLLECTION_COMMON_H

#include <string.h>

#include <wakuwaku/key.h>
#include <wakuwaku/lock.h>
#include <wakuwaku/query.h>

#include "core/core_internal.h"

/*
 * Check the arguments every collection call shares: a processor, an
 * entity of `kind` that passes wk_entity_check(), and a usable name; then
 * build the item's key into `key` (suffix NULL: single-key layout).
 * Returns WK_OK or WK_EINVAL with a message on the handle.
 */
int wk__prepare(wk_processor *p, const char *op, const wk_entity *e, const char *kind,
                const wk_name *name, const char *suffix, char *key, size_t *key_len);

/* Writes the decimal form of v into buf (≥ 24 bytes); returns the length. */
size_t wk__fmt_i64(char *buf, int64_t v);

/* Strict decimal, as the library's scripts write numbers: digits only, no
 * sign, no leading zero (but "0"), at most `max`. False otherwise. */
bool wk__parse_decimal(const char *s, size_t len, uint64_t max, uint64_t *out);

/* Parsers. `out` of the query points at the type named. */
int wk__parse_bool_int(const wk_query *q, const wk_reply *r, wk_diag *d); /* bool: 1/0 */
/* The waiters an inspect script counted (element `at` of its reply): the
 * count, or -1 when the reply has none or says -1 (not known). */
int64_t wk__waiting_of(const wk_reply *r, size_t at);
/* bool (may be NULL: any integer reply is success): whether an integer
 * reply is not 0 — a count of keys removed (DEL, UNLINK), a script's 1/0. */
int wk__parse_removed(const wk_query *q, const wk_reply *r, wk_diag *d);
/* int64_t (may be NULL: any integer reply is success): an integer reply. */
int wk__parse_i64(const wk_query *q, const wk_reply *r, wk_diag *d);

/*
 * Acknowledged leases (core/core_internal.h, WK__QUERY_LEASE). Every query that
 * takes or lengthens a lease sets WK__QUERY_LEASE; core sends its WAIT and
 * its parser (the shared ones above included) judges the WAIT with
 * wk__lease_acknowledged(), so an unacknowledged lease is never reported
 * held, on any handle. What is left to the kind is giving back a lease
 * taken but not acknowledged, which needs the kind's own release:
 *
 *   wk__lease_settle  after an immediate try/acquire returned `rc`: when
 *                     rc is WK_ENOTREPLICATED (only an immediate p returns it) run
 *                     `release` with the token and return
 *                     WK_ENOTREPLICATED ("…; released") — or WK_EUNKNOWN
 *                     when that release failed too (the lease may still be
 *                     held under the token). Otherwise rc unchanged.
 *                     Through a batch or the event loop the outcome is
 *                     WK_ENOTREPLICATED, not acquired, and the release is
 *                     the caller's (the token is theirs).
 */
typedef int (*wk__lease_release_fn)(wk_processor *p, const wk_entity *e, wk_name name,
                                    const wk_token *token, bool *released);
int wk__lease_settle(wk_processor *p, const char *op, int rc, wk__lease_release_fn release,
                     const wk_entity *e, wk_name name, const wk_token *token);

/* The single access of most queries. */
#define WK__EFFECT1(access) ((wk_effect){&(access), 1})

#endif /* WK_COLLECTION_COMMON_H */
