/*
 * collection/settings_internal.h — what settings.c shares with the
 * follower (settings_follower.c): building snapshots, the channel name, and
 * the two read queries the follower runs itself (one chunk of the map, and
 * the version + epoch alone). Not installed.
 */
#ifndef WK_COLLECTION_SETTINGS_INTERNAL_H
#define WK_COLLECTION_SETTINGS_INTERNAL_H

#include <wakuwaku/settings.h>

/* Entries asked for per HSCAN call (a hint to Redis, which may return a
 * few more), and the most a batch reads in its one command. */
#define WK__SETTINGS_CHUNK 1000

/* Attempts of wk_settings_snapshot() before it gives up on a map that
 * changes during every read. */
#define WK__SETTINGS_ATTEMPTS 8

/* Hands out pair i of a snapshot being built. */
typedef void (*wk__settings_pair_fn)(const void *ctx, size_t i, const char **k, size_t *klen,
                                     const char **v, size_t *vlen);

/* Builds a sorted snapshot from `count` pairs in one allocation: the
 * struct, the entries, then every key and value with a NUL after each.
 * Pairs with equal keys are kept once (the last one handed out wins).
 * `epoch` is "" or WK_SETTINGS_EPOCH_LEN characters. *out is NULL on
 * failure. Returns WK_OK or WK_ENOMEM. */
int wk__settings_build(wk_settings_map **out, const char *epoch, int64_t version, size_t count,
                       wk__settings_pair_fn pair, const void *ctx);

/* The Pub/Sub channel of settings `name` on the database of `db`:
 * "<item prefix>:chan:<db number>" (channels are server-wide, so the
 * database is part of the name). WK_OK or WK_EINVAL (name too long). */
int wk__settings_channel(wk_db *db, const wk_entity *e, const wk_name *name, char *out,
                         size_t cap, size_t *len);

/* The version and epoch of a map, read atomically. */
typedef struct wk__settings_head {
    char epoch[WK_SETTINGS_EPOCH_LEN + 1]; /* "" while the map has none */
    int64_t version;
} wk__settings_head;

/* Receives one key → value of a chunk (borrowed for the call). Returns
 * WK_OK, or a status (WK_ENOMEM) that fails the chunk's query. */
typedef int (*wk__settings_entry_fn)(void *ctx, const wk__settings_head *head, const char *k,
                                     size_t klen, const char *v, size_t vlen);

/*
 * One chunk of a snapshot: HSCAN from `cursor` ("0" to begin) and the
 * head, atomically (one read-only script, query "settings.snapshot", READ,
 * retry-safe). `fn` gets every pair of the chunk (possibly some seen in an
 * earlier chunk: HSCAN may repeat keys); `head` and `next` (≥ 24 bytes:
 * the cursor to continue with, "0" when the scan is complete) are written
 * first. `p` must not be deferred. Returns as wk_settings_snapshot().
 */
int wk__settings_chunk(wk_processor *p, const wk_entity *e, const wk_name *name,
                       const char *cursor, wk__settings_head *head, char *next,
                       wk__settings_entry_fn fn, void *ctx);

/* The same through a deferred processor (an event-loop handle's): `o`
 * (its head, next, fn and ctx) must stay valid until the query's
 * completion, when the parser has filled it. Returns the submission's
 * status. */
typedef struct wk__settings_chunk_out {
    wk__settings_head *head;
    char *next;
    wk__settings_entry_fn fn;
    void *ctx;
} wk__settings_chunk_out;
int wk__settings_chunk_async(wk_processor *p, const wk_entity *e, const wk_name *name,
                             const char *cursor, wk__settings_chunk_out *o);

/* The head alone (query "settings.head", READ, retry-safe, O(1)). `p`
 * may be deferred when `head` outlives the completion (the loop
 * follower). Returns as wk_settings_snapshot(). */
int wk__settings_read_head(wk_processor *p, const wk_entity *e, const wk_name *name,
                           wk__settings_head *head);

#endif /* WK_COLLECTION_SETTINGS_INTERNAL_H */
