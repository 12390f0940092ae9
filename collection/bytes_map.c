/*
 * collection/bytes_map.c — the settings follower's hash table
 * (collection/bytes_map.h): chained, power-of-two buckets, doubled when the
 * count reaches the bucket count; a failed growth only lengthens chains.
 */
#include <stdlib.h>
#include <string.h>

#include <wakuwaku/common.h>

#include "collection/bytes_map.h"

uint64_t wk__bytes_map_hash(const unsigned char sipkey[crypto_shorthash_KEYBYTES], const void *key,
                            size_t len)
{
    unsigned char h[crypto_shorthash_BYTES];
    crypto_shorthash(h, key ? key : (const void *)"", len, sipkey);
    uint64_t v;
    memcpy(&v, h, sizeof(v));
    return v;
}

int wk__bytes_map_init(wk__bytes_map *m, size_t expect)
{
    size_t n = 16;
    while (n < expect && n < (SIZE_MAX / sizeof(wk__bytes_item *)) / 2)
        n *= 2;
    m->buckets = calloc(n, sizeof(wk__bytes_item *));
    m->nbuckets = m->buckets ? n : 0;
    m->count = 0;
    return m->buckets ? WK_OK : WK_ENOMEM;
}

void wk__bytes_map_free(wk__bytes_map *m)
{
    for (size_t i = 0; i < m->nbuckets; i++) {
        wk__bytes_item *it = m->buckets[i];
        while (it) {
            wk__bytes_item *next = it->next;
            free(it);
            it = next;
        }
    }
    free(m->buckets);
    m->buckets = NULL;
    m->nbuckets = m->count = 0;
}

/* The slot holding the pointer to `key`'s item, or to the NULL ending its
 * chain when absent. */
static wk__bytes_item **slot_of(const wk__bytes_map *m, uint64_t hash, const void *key, size_t len)
{
    wk__bytes_item **slot = &m->buckets[hash & (m->nbuckets - 1)];
    while (*slot) {
        wk__bytes_item *it = *slot;
        if (it->hash == hash && it->key_len == len && (!len || memcmp(it->data, key, len) == 0))
            return slot;
        slot = &it->next;
    }
    return slot;
}

const wk__bytes_item *wk__bytes_map_find(const wk__bytes_map *m, uint64_t hash, const void *key,
                                         size_t len)
{
    return *slot_of(m, hash, key, len);
}

static void grow(wk__bytes_map *m)
{
    if (m->count < m->nbuckets || m->nbuckets > (SIZE_MAX / sizeof(wk__bytes_item *)) / 2)
        return;
    size_t n = m->nbuckets * 2;
    wk__bytes_item **b = calloc(n, sizeof(wk__bytes_item *));
    if (!b)
        return; /* longer chains, still correct */
    for (size_t i = 0; i < m->nbuckets; i++) {
        wk__bytes_item *it = m->buckets[i];
        while (it) {
            wk__bytes_item *next = it->next;
            it->next = b[it->hash & (n - 1)];
            b[it->hash & (n - 1)] = it;
            it = next;
        }
    }
    free(m->buckets);
    m->buckets = b;
    m->nbuckets = n;
}

/* Insert or replace. WK_OK or WK_ENOMEM (the table is unchanged then). */
int wk__bytes_map_put(wk__bytes_map *m, uint64_t hash, const char *key, size_t klen,
                      const char *value, size_t vlen, int64_t version)
{
    if (klen > SIZE_MAX - sizeof(wk__bytes_item) - 2 ||
        vlen > SIZE_MAX - sizeof(wk__bytes_item) - 2 - klen)
        return WK_ENOMEM;
    wk__bytes_item *it = malloc(sizeof(wk__bytes_item) + klen + vlen + 2);
    if (!it)
        return WK_ENOMEM;
    it->hash = hash;
    it->version = version;
    it->key_len = klen;
    it->value_len = vlen;
    if (klen)
        memcpy(it->data, key, klen);
    it->data[klen] = '\0';
    if (vlen)
        memcpy(it->data + klen + 1, value, vlen);
    it->data[klen + 1 + vlen] = '\0';
    wk__bytes_item **slot = slot_of(m, hash, key, klen);
    if (*slot) {
        it->next = (*slot)->next;
        free(*slot);
        *slot = it;
    } else {
        it->next = NULL;
        *slot = it;
        m->count++;
        grow(m);
    }
    return WK_OK;
}

void wk__bytes_map_remove(wk__bytes_map *m, uint64_t hash, const char *key, size_t klen)
{
    wk__bytes_item **slot = slot_of(m, hash, key, klen);
    if (*slot) {
        wk__bytes_item *it = *slot;
        *slot = it->next;
        free(it);
        m->count--;
    }
}
