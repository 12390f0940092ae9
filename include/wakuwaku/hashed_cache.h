/*
 * wakuwaku/hashed_cache.h — HashedCache: a body per name stored with its
 * BLAKE3 hash, so a replica holding a copy can ask "has it changed?"
 * without downloading the body again (the ETag pattern).
 *
 * Redis layout: one hash key @@wakuwaku-entity:HashedCache:<ns>:<name>
 * with exactly two fields, written together with the expiry (the entity's
 * ttl_ms) by one script:
 *
 *   body   the body, verbatim (any bytes, may be empty)
 *   hash   the 32 raw bytes of BLAKE3(body)
 *
 *   wk_hashed_cache_get             body + hash               READ
 *   wk_hashed_cache_hash            hash only (no body sent)  READ
 *   wk_hashed_cache_get_if_changed  missing / unchanged /     READ
 *                                   changed(body, hash); the body is sent
 *                                   only when it changed
 *   wk_hashed_cache_put             replace body + hash, restart the TTL;
 *                                   outputs the hash          WRITE
 *   wk_hashed_cache_remove          whether it was there      WRITE
 *
 * Each is one round trip. CORRUPTION: an item that lacks a field, whose
 * hash is not 32 bytes, whose body does not hash to the stored hash (on
 * get and on a changed get-if-changed), or whose key has another Redis type
 * is reported as WK_ECORRUPT with the key in the handle's message
 * (wk_db_errmsg) — never as a miss. A put replaces such an item.
 *
 * Reads fill a wk_body (see cache.h): found, change, the body as a heap
 * buffer the caller frees with wk_body_free(), and the hash. All five
 * calls are single queries and work through a batch processor; the local
 * copy and fill-once helpers need their outcome at once and refuse one.
 */
/* The kind: its name in keys and the initialiser of its descriptors
 * (wakuwaku/entity.h). Plain macros in a guard of their own, which
 * wakuwaku/entity.h reads alone (WK__ENTITY_MACROS_ONLY). */
#ifndef WAKUWAKU_HASHED_CACHE_ENTITY
#define WAKUWAKU_HASHED_CACHE_ENTITY
#define WK_KIND_HASHED_CACHE "HashedCache"
/* A HashedCache entity: namespace and the expiry of a put (ttl_ms > 0). */
#define WK_HASHED_CACHE_ENTITY(ns_, ttl_ms_) WK__ENTITY(WK_KIND_HASHED_CACHE, ns_, ttl_ms_, 0, 0, 0)
/* Its operations, one row each (wakuwaku/query.h, "Operation lists"); the
 * compiler checks every row against its prototype below (WK__OPS). */
#define WK_HASHED_CACHE_OPS(XX)                                                                    \
    XX(hashed_cache, get, READ, (wk_name name, wk_body *out),                                      \
       "read body and hash into out (free it with wk_body_free())")                                \
    XX(hashed_cache, hash, READ, (wk_name name, wk_body *out),                                     \
       "read only the hash (out->hash; no body crosses the network)")                              \
    XX(hashed_cache, get_if_changed, READ,                                                         \
       (wk_name name, const uint8_t known[WK_HASH_LEN], wk_body *out),                             \
       "send the body only if its hash differs from known (out->change)")                          \
    XX(hashed_cache, put, WRITE,                                                                   \
       (wk_name name, const void *body, size_t len, uint8_t hash[WK_HASH_LEN]),                    \
       "store body and hash with the entity's TTL")                                                \
    XX(hashed_cache, remove, WRITE, (wk_name name, bool *removed), "delete the item")
/* What an entity with a body record gets instead, for wk-codegen: the _typed
 * functions (the accessor takes the record for `codec, value`), and the
 * plain rows it words otherwise. */
#define WK_HASHED_CACHE_TYPED_OPS(XX)                                                              \
    XX(hashed_cache, get_typed, READ,                                                              \
       (wk_name name, const wk_codec *codec, void *value, uint8_t hash[WK_HASH_LEN],               \
        bool *found),                                                                              \
       "read the body and its hash (hash may be NULL), and decode the body (free it with "         \
       "BODY_free()); needs a processor that is not deferred (a batch gives WK_EINVAL)")           \
    XX(hashed_cache, get_if_changed_typed, READ,                                                   \
       (wk_name name, const uint8_t known[WK_HASH_LEN], const wk_codec *codec, void *value,        \
        uint8_t hash[WK_HASH_LEN], wk_item_change *outcome),                                       \
       "decode the body only if its hash differs from known (WK_ITEM_CHANGED); not deferred")      \
    XX(hashed_cache, put_typed, WRITE,                                                             \
       (wk_name name, const wk_codec *codec, const void *value, uint8_t hash[WK_HASH_LEN]),        \
       "encode the body, store it and its hash with the entity's TTL")
/* Its row for schemas (wakuwaku/entity.h, "Schema rows"). */
#define WK_HASHED_CACHE_SCHEMA(KIND, PARAM)                                                        \
    KIND(HASHED_CACHE, ", TTL {ttl}", BODY, WK__SCHEMA_NO_CHECK, NO_FAIR, NO_PARTS)                \
    WK__SCHEMA_TTL(PARAM)
#endif

#if !defined(WAKUWAKU_HASHED_CACHE_H) && !defined(WK__ENTITY_MACROS_ONLY)
#define WAKUWAKU_HASHED_CACHE_H

#include <wakuwaku/blake3.h>
#include <wakuwaku/cache.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * wk_hashed_cache_get — read body and hash of `name`, and check that the
 * body hashes to the stored hash.
 *
 *   hcache  a HashedCache entity (ttl_ms > 0).
 *   out     OUT (see wk_body in cache.h): found; on a hit data, len and
 *           hash. Its previous data is freed first; free it with
 *           wk_body_free().
 *
 * Returns WK_OK (see out->found), WK_EINVAL, WK_EDENIED, WK_ECORRUPT (see
 * the banner), WK_ENOMEM, or a connection / server error; on failure
 * out->found is false. READ effect; retry-safe. Same thread rule as the
 * handle.
 */
WK_API int wk_hashed_cache_get(wk_processor *p, const wk_entity *hcache, wk_name name,
                               wk_body *out);

/*
 * wk_hashed_cache_hash — read only the hash of `name` (the body stays on
 * the server; only its presence is checked).
 *
 *   out  OUT: found, and hash when found; data stays NULL.
 *
 * Returns as wk_hashed_cache_get() (no BLAKE3 check of the body: it is not
 * read). READ effect; retry-safe.
 */
WK_API int wk_hashed_cache_hash(wk_processor *p, const wk_entity *hcache, wk_name name,
                                wk_body *out);

/*
 * wk_hashed_cache_get_if_changed — compare the stored hash with `known`
 * on the server, in one round trip, and send the body only if it differs.
 *
 *   known  the hash of the copy you hold (32 bytes), or NULL when you hold
 *          none (then any item is "changed"). Copied before anything else
 *          is done, so it may point into `out` (e.g. out->hash).
 *   out    OUT: change is the outcome —
 *            WK_ITEM_MISSING    no item (found false);
 *            WK_ITEM_UNCHANGED  found; hash = known; data NULL (no body
 *                               crossed the network);
 *            WK_ITEM_CHANGED    found; data, len and hash are the item's.
 *          Its previous data is freed first (so keep the copy you hold in
 *          another body — wk_local_copy does this); free it with
 *          wk_body_free().
 *
 * Returns WK_OK (see out->change), WK_EINVAL, WK_EDENIED, WK_ECORRUPT (a
 * changed body is checked against its hash; an unchanged item must still
 * have its body field), WK_ENOMEM, or a connection / server error. READ
 * effect; retry-safe.
 */
WK_API int wk_hashed_cache_get_if_changed(wk_processor *p, const wk_entity *hcache,
                                          wk_name name, const uint8_t known[WK_HASH_LEN],
                                          wk_body *out);

/*
 * wk_hashed_cache_put — store `len` bytes at `body` and their BLAKE3 hash
 * (computed here, on the client) under `name`, with the entity's TTL,
 * atomically replacing whatever the key held (any type, any fields).
 * `body` may be NULL only when len is 0. The bytes are borrowed for the
 * call (a batch copies them when the query is queued).
 *
 *   hash  OUT, may be NULL: the 32-byte hash that is stored (written
 *         before the query is sent, also in a batch).
 *
 * Returns WK_OK, WK_EINVAL (bad argument, len > WK_BODY_MAX), WK_EDENIED,
 * or a connection / server error. WRITE effect; NOT retry-safe (as
 * wk_cache_put(): a lost reply is WK_EUNKNOWN, nothing is re-sent).
 */
WK_API int wk_hashed_cache_put(wk_processor *p, const wk_entity *hcache, wk_name name,
                               const void *body, size_t len, uint8_t hash[WK_HASH_LEN]);

/*
 * wk_hashed_cache_remove — delete the item of `name` (UNLINK).
 *
 *   removed  OUT, may be NULL: whether there was an item.
 *
 * Returns WK_OK, WK_EINVAL, WK_EDENIED, or a connection / server error.
 * WRITE effect; not retry-safe.
 */
WK_API int wk_hashed_cache_remove(wk_processor *p, const wk_entity *hcache, wk_name name,
                                  bool *removed);

/* ------------------------------------------------------------------------
 * Typed bodies (codecs: see wk_codec in cache.h)
 * ---------------------------------------------------------------------- */

/*
 * wk_hashed_cache_get_typed — wk_hashed_cache_get(), then decode the body
 * with `codec` into `value`.
 *
 *   codec  encode, and decode or decode_msg, required.
 *   value  OUT: storage for the decoded value; untouched on a miss.
 *   hash   OUT, may be NULL: the body's hash, on a hit that decoded.
 *   found  OUT: whether the name had a body that decoded.
 *
 * A body that does not decode gives the decoder's status (WK_ECORRUPT)
 * with a message naming the key, the codec and — with decode_msg — where
 * and why (as wk_cache_get_typed()). Refuses a deferred (batch) processor
 * with WK_EINVAL. Other returns as wk_hashed_cache_get(). READ effect;
 * retry-safe.
 */
WK_API int wk_hashed_cache_get_typed(wk_processor *p, const wk_entity *hcache, wk_name name,
                                     const wk_codec *codec, void *value,
                                     uint8_t hash[WK_HASH_LEN], bool *found);

/*
 * wk_hashed_cache_get_if_changed_typed — wk_hashed_cache_get_if_changed(),
 * decoding the body into `value` only when it changed.
 *
 *   known    as wk_hashed_cache_get_if_changed() (copied first, so it may
 *            point at `hash`).
 *   value    OUT: the decoded body on WK_ITEM_CHANGED; untouched
 *            otherwise.
 *   hash     OUT, may be NULL: the item's hash unless it is missing.
 *   outcome  OUT: WK_ITEM_MISSING, _UNCHANGED or _CHANGED (MISSING on
 *            failure).
 *
 * Decoding failures and deferred processors as wk_hashed_cache_get_typed();
 * other returns as wk_hashed_cache_get_if_changed(). READ effect;
 * retry-safe.
 */
WK_API int wk_hashed_cache_get_if_changed_typed(wk_processor *p, const wk_entity *hcache,
                                                wk_name name, const uint8_t known[WK_HASH_LEN],
                                                const wk_codec *codec, void *value,
                                                uint8_t hash[WK_HASH_LEN],
                                                wk_item_change *outcome);

/*
 * wk_hashed_cache_put_typed — codec->encode `value`, then
 * wk_hashed_cache_put() the bytes (released through the codec before
 * returning; a batch has copied them). An encoder failure is returned as
 * is, with a message, and nothing is sent. `hash` as wk_hashed_cache_put().
 * WRITE effect; retry-safe.
 */
WK_API int wk_hashed_cache_put_typed(wk_processor *p, const wk_entity *hcache, wk_name name,
                                     const wk_codec *codec, const void *value,
                                     uint8_t hash[WK_HASH_LEN]);

/*
 * wk_hashed_cache_fill_once — wk_cache_fill_once() for a HashedCache:
 * same steps, options, outcomes, ownership and guarantees (see cache.h);
 * `lock` is a Lock entity with the same namespace as `hcache`. Whenever a
 * body is returned, body->hash is its hash.
 *
 * Effects: READ of `hcache`; on a miss WRITE of `hcache` and `lock`.
 */
WK_API int wk_hashed_cache_fill_once(wk_processor *p, const wk_entity *hcache, wk_name name,
                                     const wk_entity *lock, wk_fill_fn fill, void *arg,
                                     const wk_fill_options *opts, wk_body *body,
                                     wk_fill_outcome *outcome);

/* ------------------------------------------------------------------------
 * Local copy: keep a replica-local copy of one item fresh cheaply
 * ---------------------------------------------------------------------- */

/*
 * A local copy of one HashedCache item: the body this replica holds, with
 * its hash. Initialise with WK_LOCAL_COPY_INIT (or wk_local_copy_init()),
 * refresh it whenever you want it current, release it with
 * wk_local_copy_clear().
 *
 *   body  the held item: body.found says whether the copy holds one;
 *         body.data / body.len / body.hash are the body and its hash.
 *         Owned by the copy: read it, do not free it.
 *
 * OWNERSHIP: a pointer into body.data stays valid until the next refresh
 * that reports WK_ITEM_CHANGED or WK_ITEM_MISSING, or
 * wk_local_copy_clear(); an unchanged refresh or a failed one keeps it.
 *
 * THREADS: no locking inside. One thread at a time may use a copy (and the
 * processor's handle); readers on other threads need your own lock (e.g.
 * a pthread_rwlock_t taken for writing around refresh, for reading around
 * reads).
 */
typedef struct wk_local_copy {
    wk_body body;
} wk_local_copy;

#define WK_LOCAL_COPY_INIT {WK_BODY_INIT}

/* wk_local_copy_init — set *copy to the empty copy (holds nothing; frees
 * nothing). NULL is a harmless no-op. */
WK_API void wk_local_copy_init(wk_local_copy *copy);

/* wk_local_copy_clear — free the held body and empty the copy. NULL is a
 * harmless no-op; the copy can be refreshed again afterwards. */
WK_API void wk_local_copy_clear(wk_local_copy *copy);

/*
 * wk_local_copy_refresh — bring the copy up to date with one
 * get-if-changed round trip, sending the held hash (none when empty).
 *
 *   outcome  OUT, may be NULL: what happened to the copy:
 *     WK_ITEM_UNCHANGED  kept as is (no body crossed the network);
 *     WK_ITEM_CHANGED    the new body and hash replaced the old ones;
 *     WK_ITEM_MISSING    the item is gone; the copy is emptied, so it
 *                        mirrors the server (keep your own copy first if
 *                        you want to serve stale data).
 *
 * Returns as wk_hashed_cache_get_if_changed(), plus WK_EINVAL for a NULL
 * copy or a deferred (batch) processor; on any failure the copy is
 * unchanged. READ effect; retry-safe.
 */
WK_API int wk_local_copy_refresh(wk_local_copy *copy, wk_processor *p, const wk_entity *hcache,
                                 wk_name name, wk_item_change *outcome);

WK__OPS(WK_HASHED_CACHE_OPS)
WK__OPS_TYPED(WK_HASHED_CACHE_TYPED_OPS)

#ifdef __cplusplus
}
#endif

#endif /* WAKUWAKU_HASHED_CACHE_H */
