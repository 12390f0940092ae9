/*
 * wakuwaku/cache.h — Cache: a byte-string body per name, with a TTL.
 *
 * Redis layout: one string key @@wakuwaku-entity:Cache:<ns>:<name> holding
 * the body verbatim (any bytes, NUL included; empty allowed), with the
 * entity's ttl_ms as expiry.
 *
 *   wk_cache_get      GET key                  READ   body, or a miss
 *   wk_cache_put      SET key body PX ttl      WRITE  replaces, restarts TTL
 *   wk_cache_remove   UNLINK key               WRITE  whether it was there
 *   wk_cache_fill_once  get, or fill it once across replicas under a Lock
 *
 * "Miss" is an outcome (out->found = false), not an error. A key of
 * another Redis type under a Cache name is reported as WK_ECORRUPT, never
 * as a miss.
 *
 * Bodies here are byte strings. Typed bodies (C structs) go through a
 * codec (wk_codec below): the code generator emits one per cache body type,
 * and wk_cache_get_typed / wk_cache_put_typed run it around the byte
 * queries.
 *
 * OWNERSHIP of bodies read from Redis: the library allocates them (malloc)
 * into a wk_body the caller provides; the caller releases them with
 * wk_body_free(). wk_cache_get_into() fills a caller buffer instead and
 * allocates nothing.
 *
 * BATCHES: get, get_into, put, remove and put_typed are single queries and
 * work through a batch processor (their OUT values are written when the
 * batch executes). get_typed and fill_once need their outcome at once and
 * refuse a deferred processor with WK_EINVAL.
 */
/* The kind: its name in keys and the initialiser of its descriptors
 * (wakuwaku/entity.h). Plain macros in a guard of their own, which
 * wakuwaku/entity.h reads alone (WK__ENTITY_MACROS_ONLY). */
#ifndef WAKUWAKU_CACHE_ENTITY
#define WAKUWAKU_CACHE_ENTITY
#define WK_KIND_CACHE "Cache"
/* A Cache entity: namespace and the expiry of a put (ttl_ms > 0). */
#define WK_CACHE_ENTITY(ns_, ttl_ms_) WK__ENTITY(WK_KIND_CACHE, ns_, ttl_ms_, 0, 0, 0)
/* Its operations, one row each (wakuwaku/query.h, "Operation lists"); the
 * compiler checks every row against its prototype below (WK__OPS). */
#define WK_CACHE_OPS(XX)                                                                           \
    XX(cache, get, READ, (wk_name name, wk_body *out),                                             \
       "read the body into out (found, data, len; free it with wk_body_free())")                   \
    XX(cache, get_into, READ, (wk_name name, wk_buffer *buf), NULL)                                \
    XX(cache, put, WRITE, (wk_name name, const void *body, size_t len),                            \
       "store the body with the entity's TTL")                                                     \
    XX(cache, remove, WRITE, (wk_name name, bool *removed), "delete the body")
/* What an entity with a body record gets instead, for wk-codegen: the _typed
 * functions (the accessor takes the record for `codec, value`), and the
 * plain rows it words otherwise. */
#define WK_CACHE_TYPED_OPS(XX)                                                                     \
    XX(cache, get_typed, READ,                                                                     \
       (wk_name name, const wk_codec *codec, void *value, bool *found),                            \
       "read and decode the body (free it with BODY_free()); needs a processor that is not "       \
       "deferred")                                                                                 \
    XX(cache, put_typed, WRITE, (wk_name name, const wk_codec *codec, const void *value),          \
       "encode and store the body with the entity's TTL")
/* Its row for schemas (wakuwaku/entity.h, "Schema rows"). */
#define WK_CACHE_SCHEMA(KIND, PARAM)                                                               \
    KIND(CACHE, ", TTL {ttl}", BODY, WK__SCHEMA_NO_CHECK, NO_FAIR, NO_PARTS)                       \
    WK__SCHEMA_TTL(PARAM)
#endif

#if !defined(WAKUWAKU_CACHE_H) && !defined(WK__ENTITY_MACROS_ONLY)
#define WAKUWAKU_CACHE_H

#include <wakuwaku/lock.h>
#include <wakuwaku/query.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The largest body a put accepts (Redis' limit for one string value,
 * 512 MiB); larger bodies are refused with WK_EINVAL before anything is
 * sent. */
#define WK_BODY_MAX ((size_t)512 * 1024 * 1024)

/* Length of the hash HashedCache stores: BLAKE3's default output. */
#define WK_HASH_LEN 32

/* What a read found, compared with what the caller knew. */
typedef enum wk_item_change {
    WK_ITEM_MISSING = 0,   /* no item under the name (never put, expired, removed) */
    WK_ITEM_UNCHANGED = 1, /* get-if-changed: the stored hash equals the known one */
    WK_ITEM_CHANGED = 2    /* an item was read (get-if-changed: it differs from the
                              known hash, or no hash was known) */
} wk_item_change;

/*
 * The OUT value of every cache read: whether the item exists and, when a
 * body was read, the body itself (and for HashedCache its hash).
 *
 *   found   the name had an item.
 *   change  WK_ITEM_MISSING when !found; get-if-changed sets UNCHANGED or
 *           CHANGED; the other reads set CHANGED when found.
 *   data    the body when one was read: a malloc'ed buffer of len + 1
 *           bytes whose last byte is a NUL that is not part of the body
 *           (so text bodies can be used as C strings); never NULL when a
 *           body was read, even an empty one. NULL otherwise (a miss, a
 *           hash-only read, an unchanged get-if-changed).
 *   len     the body's length (0 when data is NULL).
 *   hash    HashedCache reads: the item's BLAKE3 hash when found. Unused
 *           by Cache.
 *
 * OWNERSHIP: the body owns `data`; release it with wk_body_free(). Every
 * read first releases what its OUT body held, so one body can be reused
 * across reads in a loop and freed once at the end.
 *
 * WARNING: initialise a body with WK_BODY_INIT (or memset 0) before its
 * first use; a read frees whatever `data` points at.
 *
 * Batches: the fields are written when the reply is parsed (during
 * wk_batch_exec() for a batch), so the body must stay valid until then.
 */
typedef struct wk_body {
    bool found;
    wk_item_change change;
    uint8_t *data;
    size_t len;
    uint8_t hash[WK_HASH_LEN];
} wk_body;

#define WK_BODY_INIT {false, WK_ITEM_MISSING, NULL, 0, {0}}

/* wk_body_free — free(body->data) and reset *body to WK_BODY_INIT. NULL
 * is a harmless no-op. */
WK_API void wk_body_free(wk_body *body);

/*
 * A caller buffer for wk_cache_get_into(), which allocates nothing.
 *
 *   data, cap  IN: where to copy the body (data may be NULL when cap is 0).
 *   len        OUT: the body's full length on a hit (0 on a miss).
 *   found      OUT: the name had a body.
 */
typedef struct wk_buffer {
    void *data;
    size_t cap;
    size_t len;
    bool found;
} wk_buffer;

/*
 * wk_cache_get — read the body of `name`.
 *
 *   p      the processor (a handle's, a wrapper, or a batch).
 *   cache  a Cache entity (ttl_ms > 0).
 *   out    OUT: found, change, data, len (see wk_body); its previous data
 *          is freed first. Free it with wk_body_free().
 *
 * Returns WK_OK (see out->found), WK_EINVAL (bad entity, name or NULL
 * argument), WK_EDENIED, WK_ECORRUPT (the key holds another Redis type;
 * the message names the key), WK_ENOMEM, or a connection / server error;
 * on failure out->found is false. READ effect; retry-safe. Same thread
 * rule as the handle.
 */
WK_API int wk_cache_get(wk_processor *p, const wk_entity *cache, wk_name name, wk_body *out);

/*
 * wk_cache_get_into — wk_cache_get() into a caller buffer; allocates
 * nothing of its own (the hot path for bodies of a known maximum size).
 *
 * When the body is longer than buf->cap, nothing is copied and the call
 * returns WK_EINVAL with buf->found = true and buf->len = the length
 * needed, so the caller can grow its buffer and ask again. Other returns
 * as for wk_cache_get(). READ effect; retry-safe.
 */
WK_API int wk_cache_get_into(wk_processor *p, const wk_entity *cache, wk_name name,
                             wk_buffer *buf);

/*
 * wk_cache_put — store `len` bytes at `body` under `name` with the
 * entity's TTL, replacing any previous body (and any key of another type)
 * and restarting the TTL. `body` may be NULL only when len is 0 (an empty
 * body, which is a hit, not a miss). The bytes are borrowed for the call
 * (a batch copies them when the query is queued).
 *
 * Returns WK_OK, WK_EINVAL (bad argument, len > WK_BODY_MAX), WK_EDENIED,
 * or a connection / server error. WRITE effect; NOT retry-safe: if the
 * reply is lost the call returns WK_EUNKNOWN and re-sends nothing, since
 * another client may have written (or removed) the key in between and a
 * blind re-send would undo that. Put again yourself if no one else writes
 * this name.
 */
WK_API int wk_cache_put(wk_processor *p, const wk_entity *cache, wk_name name, const void *body,
                        size_t len);

/*
 * wk_cache_remove — delete the body of `name` (UNLINK).
 *
 *   removed  OUT, may be NULL: whether there was a body to delete.
 *
 * Returns WK_OK, WK_EINVAL, WK_EDENIED, or a connection / server error.
 * WRITE effect; not retry-safe (a re-send would report false), so a drop
 * after sending gives WK_EUNKNOWN.
 */
WK_API int wk_cache_remove(wk_processor *p, const wk_entity *cache, wk_name name, bool *removed);

/* ------------------------------------------------------------------------
 * Codecs: typed bodies
 * ---------------------------------------------------------------------- */

typedef struct wk_codec wk_codec;

/*
 * A codec turns a typed value (a C struct, usually generated) into body
 * bytes and back. Declare it `static const`; the library only calls it.
 * Each callback receives the codec itself, so a codec with parameters can
 * be a bigger struct that embeds wk_codec as its first member.
 *
 *   name        the type's name, for messages ("profile").
 *   encode      `value` → a new heap buffer in *bytes of *len bytes
 *               (*len ≤ WK_BODY_MAX). Returns WK_OK, or a status
 *               (WK_EINVAL, WK_ENOMEM, …) after which *bytes holds
 *               nothing to free.
 *   decode      `len` bytes → the value at `value` (storage the caller of
 *               wk_cache_get_typed provides). Returns WK_OK, or a status
 *               (WK_ECORRUPT for bytes that do not decode, WK_ENOMEM)
 *               after which `value` holds nothing to release.
 *   free_bytes  releases what encode made; NULL means free().
 *
 * To say *why* decode or encode fails, return through wk_codec_fail()
 * (below): the typed calls put that text in the handle's detail message.
 *
 * Releasing a decoded value (its strings, arrays) is the value type's
 * business, e.g. the generated <type>_free() function.
 */
struct wk_codec {
    const char *name;
    int (*encode)(const wk_codec *codec, const void *value, uint8_t **bytes, size_t *len);
    int (*decode)(const wk_codec *codec, const uint8_t *bytes, size_t len, void *value);
    void (*free_bytes)(const wk_codec *codec, uint8_t *bytes);
};

/* The longest text wk_codec_fail() keeps, NUL included. */
#define WK_CODEC_MSG_MAX 256

/*
 * wk_codec_fail — called by a codec's decode or encode callback while the
 * library runs it: records why the callback fails and returns `status`, so
 * a decoder ends with
 *
 *     return wk_codec_fail(WK_ECORRUPT, "$.title: missing required field");
 *
 * The typed calls (wk_cache_get_typed(), wk_cache_put_typed(), the
 * HashedCache ones) add the text to the handle's detail message, e.g.
 * `cache.get: the body of "<key>" does not decode as profile: $.title:
 * missing required field (WK_ECORRUPT)`. printf-style; cut to
 * WK_CODEC_MSG_MAX - 1 bytes. Called at any other time (no callback of
 * the library running on this thread) it only returns `status`. A codec
 * that never calls it works as before: its failures name only the status.
 *
 * Why not a new member of wk_codec: codecs written for the four members
 * keep compiling (also under -Wmissing-field-initializers) and keep their
 * binary layout. Thread-safe: each thread has its own record.
 */
WK_API int wk_codec_fail(int status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/*
 * wk_cache_get_typed — wk_cache_get() then codec->decode into `value`.
 *
 *   codec  encode and decode required.
 *   value  OUT: storage for the decoded value; untouched on a miss.
 *   found  OUT: whether the name had a body (false when it did not decode).
 *
 * A body that does not decode gives the decoder's status (WK_ECORRUPT)
 * with a message naming the key, the codec and what the decoder gave
 * wk_codec_fail(): `cache.get: the body of "<key>" does not decode as
 * profile: $.title: missing required field (WK_ECORRUPT)`. Refuses a
 * deferred (batch) processor with WK_EINVAL. Other returns as
 * wk_cache_get(). READ effect; retry-safe.
 */
WK_API int wk_cache_get_typed(wk_processor *p, const wk_entity *cache, wk_name name,
                              const wk_codec *codec, void *value, bool *found);

/*
 * wk_cache_put_typed — codec->encode `value`, then wk_cache_put() the
 * bytes (released through the codec before returning; a batch has copied
 * them). An encoder failure is returned as is and nothing is sent. WRITE
 * effect; not retry-safe (as wk_cache_put()).
 */
WK_API int wk_cache_put_typed(wk_processor *p, const wk_entity *cache, wk_name name,
                              const wk_codec *codec, const void *value);

/* ------------------------------------------------------------------------
 * Fill once across replicas (cache stampede protection)
 * ---------------------------------------------------------------------- */

/*
 * A fill function: compute the body (query the database, render the
 * page…). Put a malloc'ed buffer in out->data and its length in out->len
 * (data may stay NULL for an empty body; the other fields are ignored);
 * the library takes ownership of the buffer and releases it with free().
 * Return WK_OK, or any negative status on failure — then out->data must
 * be NULL or something free() accepts, and that status is what the
 * fill-once call returns. It may use the same processor for its own
 * queries.
 */
typedef int (*wk_fill_fn)(void *arg, wk_body *out);

/* How a fill-once call ended (its *outcome). */
typedef enum wk_fill_outcome {
    WK_FILL_HIT = 0,    /* the body was already cached */
    WK_FILL_FILLED = 1, /* this call ran the fill function and put the body */
    WK_FILL_WAITED = 2, /* another replica filled it while this call waited */
    WK_FILL_BUSY = 3    /* another replica is filling and the wait ended
                           (or was not wanted): no body */
} wk_fill_outcome;

/*
 * Options of the fill-once calls. Start from WK_FILL_OPTIONS_INIT.
 *
 *   wait_ms      how long a call that finds someone else filling waits for
 *                the body: 0 returns WK_FILL_BUSY at once; > 0 polls until
 *                this many ms after the call started, never sleeping past
 *                that deadline (on wk_monotonic_ms()'s clock, which counts
 *                a suspend; the deadline saturates, so INT64_MAX waits
 *                without limit).
 *   poll_min_ms  shortest sleep between polls (≥ 1);
 *   poll_max_ms  longest (≥ poll_min_ms). Each sleep is drawn uniformly
 *                between them, so waiting replicas do not poll in step.
 */
typedef struct wk_fill_options {
    int64_t wait_ms;
    int poll_min_ms;
    int poll_max_ms;
} wk_fill_options;

#define WK_FILL_OPTIONS_INIT {.wait_ms = 0, .poll_min_ms = 10, .poll_max_ms = 50}

/*
 * wk_cache_fill_once — read `name`; on a miss make sure that exactly one
 * replica computes the body, while the others wait for it or step aside.
 *
 *   cache    a Cache entity.
 *   lock     a Lock entity with the SAME namespace as `cache` (the item
 *            @@wakuwaku-entity:Lock:<ns>:<name> is the filler's lease).
 *            Its ttl_ms must exceed the time a fill takes: it is the
 *            longest a crashed filler keeps the others waiting, and a fill
 *            that outlives it may be run a second time by another replica.
 *   fill,arg the fill function and its argument; called at most once per
 *            call, only while holding the lease, never when the body is
 *            cached.
 *   opts     NULL: WK_FILL_OPTIONS_INIT (no waiting).
 *   body     OUT: the body (hit, filled or waited: found is true), to free
 *            with wk_body_free(); its previous data is freed first. Not
 *            found for WK_FILL_BUSY or on failure.
 *   outcome  OUT: see wk_fill_outcome.
 *
 * Steps:
 *   1. get: a hit ends the call (WK_FILL_HIT);
 *   2. try the lease (wk_lock_try). Acquired: get again (someone may have
 *      just finished), else run `fill`, put the body, release the lease;
 *      WK_FILL_FILLED;
 *   3. not acquired: with wait_ms = 0, WK_FILL_BUSY. Otherwise sleep a
 *      jittered poll interval (clipped to the deadline) and get; a hit is
 *      WK_FILL_WAITED; a miss tries the lease again (a filler that failed
 *      or crashed gives way to a waiter, which then fills as in 2 — its
 *      fill runs to its end even past the deadline); at the deadline,
 *      WK_FILL_BUSY.
 *
 * Returns WK_OK (see *outcome), WK_EINVAL (bad arguments: wrong kinds, a
 * namespace mismatch, bad options, a deferred processor), the fill
 * function's status when it fails, or any status of the underlying
 * queries. On every failure the lease this call took has been released (a
 * failed release leaves a lease that runs out after the lock's TTL). A
 * release that fails after a successful put is ignored: the body is cached
 * and returned, and the lease runs out. WK_EUNKNOWN (or WK_ETIMEDOUT) from
 * the lease's lock.try — sent, reply lost — means the lease may have been
 * taken: the call releases it with its token before returning that status
 * (the message says whether the release got through; if it could not be
 * sent either, the lease runs out after the lock's TTL and blocks fills of
 * this name until then).
 *
 * Effects: READ of `cache`, and on a miss WRITE of `cache` and `lock`; a
 * read-only handle gets hits and WK_EDENIED on a miss. Not retry-safe as a
 * whole; each step is one query. Same thread rule as the handle.
 */
WK_API int wk_cache_fill_once(wk_processor *p, const wk_entity *cache, wk_name name,
                              const wk_entity *lock, wk_fill_fn fill, void *arg,
                              const wk_fill_options *opts, wk_body *body,
                              wk_fill_outcome *outcome);

WK__OPS(WK_CACHE_OPS)
WK__OPS_TYPED(WK_CACHE_TYPED_OPS)

#ifdef __cplusplus
}
#endif

#endif /* WAKUWAKU_CACHE_H */
