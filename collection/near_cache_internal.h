/*
 * collection/near_cache_internal.h — what the near cache's blocking get
 * (collection/near_cache.c) and its loop get (collection/near_cache_loop.c)
 * share: one admission, one hit, one read. Not installed.
 */
#ifndef WK_COLLECTION_NEAR_CACHE_INTERNAL_H
#define WK_COLLECTION_NEAR_CACHE_INTERNAL_H

#include <wakuwaku/async.h>
#include <wakuwaku/near_cache.h>

#include "core/core_internal.h"

typedef struct wk__near_served wk__near_served; /* an entity it serves */

/* An item a call names: its served entity, key and the key's hash. */
typedef struct wk__near_item {
    const wk__near_served *se;
    char key[WK_KEY_MAX];
    size_t key_len;
    uint64_t hash;
} wk__near_item;

/* Where a get puts the body: a heap body or a caller buffer. */
typedef struct wk__near_sink {
    wk_body *body;
    wk_buffer *buf;
} wk__near_sink;

/* Argument checks, the key, and the capability (the near cache's, from
 * the handle it was opened from): WK_OK, WK_EINVAL or WK_EDENIED (with
 * dispatch's message, nothing sent), the message left for
 * wk_near_cache_errmsg(). The caller clears that message first. */
int wk__near_admit(wk_near_cache *nc, const wk_entity *e, const wk_name *name,
                   wk__near_item *it);
/* Served from memory (the entry verified; the table's mutex only, never
 * held across I/O): true, with *rc the copy's status. */
bool wk__near_hit(wk_near_cache *nc, const wk__near_item *it, const wk__near_sink *s, int *rc);
/* The read (or revalidation) of an item that was no hit, on the data
 * connection (waits for it: blocking), kept and copied out. */
int wk__near_fetch(wk_near_cache *nc, const wk__near_item *it, wk_name name,
                   const wk__near_sink *s);

/* Set the calling thread's message (wk_near_cache_errmsg()); returns status. */
int wk__near_fail(int status, const char *msg);

/* ---- the loop gets (collection/near_cache_loop.c) ---------------------- */

typedef struct wk__near_loop wk__near_loop;

/* Made at open (no thread until the first loop read): WK_OK or WK_ENOMEM. */
int wk__near_loop_new(wk__near_loop **out);
/* At close, before the data connection goes: the reader thread ends
 * (after the read in flight), what waits for it completes with WK_EIO at
 * its handle's next turn. NULL: no-op. */
void wk__near_loop_free(wk__near_loop *l);
/* The near cache's loop state. */
wk__near_loop *wk__near_loop_of(const wk_near_cache *nc);

#endif /* WK_COLLECTION_NEAR_CACHE_INTERNAL_H */
