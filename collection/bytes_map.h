/*
 * collection/bytes_map.h — a chained hash table from byte-string keys to
 * byte-string values, each entry tagged with a version: the settings
 * follower's mirror (collection/settings_follower.c). The caller hashes
 * with wk__bytes_map_hash() (SipHash under a key of its own, so keys
 * cannot be chosen to collide) and passes the hash to every call, so one
 * hash serves lookups in several maps. Not thread-safe: the caller locks.
 * Not installed.
 */
#ifndef WK_COLLECTION_BYTES_MAP_H
#define WK_COLLECTION_BYTES_MAP_H

#include <stddef.h>
#include <stdint.h>

#include <sodium.h>

/* One key → value, in one allocation: key bytes, NUL, value bytes, NUL. */
typedef struct wk__bytes_item {
    struct wk__bytes_item *next;
    uint64_t hash;
    int64_t version; /* the caller's: e.g. the version it was read or set at */
    size_t key_len, value_len;
    char data[];
} wk__bytes_item;

/* The key and the value of an item, each NUL-terminated (they may hold
 * NULs of their own: use key_len / value_len). */
static inline const char *wk__bytes_item_key(const wk__bytes_item *it)
{
    return it->data;
}

static inline const char *wk__bytes_item_value(const wk__bytes_item *it)
{
    return it->data + it->key_len + 1;
}

/* Iterate with: for each b < nbuckets, for each it in buckets[b] via next. */
typedef struct wk__bytes_map {
    wk__bytes_item **buckets;
    size_t nbuckets; /* a power of two */
    size_t count;
} wk__bytes_map;

/* SipHash-2-4 of the key under `sipkey`. */
uint64_t wk__bytes_map_hash(const unsigned char sipkey[crypto_shorthash_KEYBYTES], const void *key,
                            size_t len);

/* An empty map sized for about `expect` entries. WK_OK or WK_ENOMEM. */
int wk__bytes_map_init(wk__bytes_map *m, size_t expect);

/* Free every item and the buckets; the map is left empty (and must be
 * initialised again before use). */
void wk__bytes_map_free(wk__bytes_map *m);

/* The item of `key` (hash from wk__bytes_map_hash()), or NULL. */
const wk__bytes_item *wk__bytes_map_find(const wk__bytes_map *m, uint64_t hash, const void *key,
                                         size_t len);

/* Insert or replace. WK_OK, or WK_ENOMEM with the map unchanged. */
int wk__bytes_map_put(wk__bytes_map *m, uint64_t hash, const char *key, size_t klen,
                      const char *value, size_t vlen, int64_t version);

/* Remove `key` if present. */
void wk__bytes_map_remove(wk__bytes_map *m, uint64_t hash, const char *key, size_t klen);

#endif /* WK_COLLECTION_BYTES_MAP_H */
