/*
 * collection/settings_internal.h — what settings.c shares with the
 * follower (settings_follower.c). Not installed.
 */
#ifndef WK_COLLECTION_SETTINGS_INTERNAL_H
#define WK_COLLECTION_SETTINGS_INTERNAL_H

#include <wakuwaku/settings.h>

/* Hands out pair i of a snapshot being built. */
typedef void (*wk__settings_pair_fn)(const void *ctx, size_t i, const char **k, size_t *klen,
                                     const char **v, size_t *vlen);

/* Builds a sorted snapshot from `count` pairs in one allocation: the
 * struct, the entries, then every key and value with a NUL after each.
 * *out is NULL on failure. Returns WK_OK or WK_ENOMEM. */
int wk__settings_build(wk_settings_map **out, int64_t version, size_t count,
                       wk__settings_pair_fn pair, const void *ctx);

#endif /* WK_COLLECTION_SETTINGS_INTERNAL_H */
