/*
 * core/metrics_watch.h — the objects a metrics table watches (handles,
 * pools, near caches, settings followers) and the families their state is
 * written as (wakuwaku/metrics.h, "WATCHED OBJECTS"). Not installed.
 */
#ifndef WK_CORE_METRICS_WATCH_H
#define WK_CORE_METRICS_WATCH_H

#include <pthread.h>

#include "core/metrics_text.h"

typedef enum wk__watch_type {
    WK__WATCH_DB,
    WK__WATCH_POOL,
    WK__WATCH_NEAR_CACHE,
    WK__WATCH_FOLLOWER,
} wk__watch_type;

typedef struct wk__watch {
    wk__watch_type type;
    void *object; /* NULL: a free entry */
    char name[WK_METRICS_LABEL_MAX];
} wk__watch;

typedef struct wk__watches {
    wk__watch list[WK_METRICS_WATCHES];
} wk__watches;

/* Under the table's lock: add (WK_EINVAL: NULL, a name empty, too long or
 * not UTF-8, the object watched already; WK_ENOMEM: full) or remove
 * (WK_EINVAL: not watched). */
int wk__watch_add(wk__watches *w, wk__watch_type type, void *object, const char *name);
int wk__watch_remove(wk__watches *w, const void *object);
/* Write the families of what is watched; takes `lock` itself. */
void wk__watch_write(wk__watches *w, pthread_mutex_t *lock, wk__sink *o);

#endif
