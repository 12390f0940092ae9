/*
 * core/metrics_watch.c — the families of the objects a metrics table
 * watches (wakuwaku/metrics.h, "WATCHED OBJECTS"): each object's own
 * stats call, read when the text is written, as one table of families.
 */
#include <string.h>

#include <wakuwaku/near_cache.h>
#include <wakuwaku/pool.h>
#include <wakuwaku/settings.h>

#include "core/metrics_watch.h"

int wk__watch_add(wk__watches *w, wk__watch_type type, void *object, const char *name)
{
    if (!object)
        return WK_EINVAL;
    wk__watch *free_entry = NULL;
    for (size_t i = 0; i < WK_METRICS_WATCHES; i++) {
        if (w->list[i].object == object)
            return WK_EINVAL;
        if (!w->list[i].object && !free_entry)
            free_entry = &w->list[i];
    }
    if (!free_entry)
        return WK_ENOMEM;
    free_entry->type = type;
    free_entry->object = object;
    strcpy(free_entry->name, name); /* shown and bounded by the caller */
    return WK_OK;
}

int wk__watch_remove(wk__watches *w, const void *object)
{
    for (size_t i = 0; i < WK_METRICS_WATCHES; i++)
        if (w->list[i].object == object) {
            w->list[i].object = NULL;
            return WK_OK;
        }
    return WK_EINVAL;
}

/* The values families read, one array per watched object. */
enum {
    V_RECONNECTS,
    V_FAILURES, /* WK_STATS_REASONS of them */
    V_MOVED = V_FAILURES + WK_STATS_REASONS,
    V_ASKED,
    V_DISCOVERIES,
    V_NOT_REPLICATED,
    V_WAITING,
    V_ACQUIRED, /* then V_DEADLINES, V_FAILED: the outcomes in order */
    V_DEADLINES,
    V_FAILED,
    V_HANDOFFS,
    V_POOL_SIZE,
    V_IN_USE,
    V_BORROWERS,
    V_BORROWS,
    V_BORROW_TIMEOUTS,
    V_HITS,
    V_MISSES,
    V_REVALIDATIONS,
    V_INVALIDATIONS,
    V_EVICTIONS,
    V_ENTRIES,
    V_UNVERIFIED,
    V_BYTES,
    V_VERSION,
    V_LAG,
    V_SYNCED,
    V_RELOADS,
    V_APPLIED,
    V_FOLLOWER_RECONNECTS,
    V_COUNT
};

/* What one watched object said when the text is written. */
typedef struct snap {
    const wk__watch *watch;
    uint64_t v[V_COUNT];
    wk_handle_stats handle; /* a handle's, or a pool's connections summed */
    wk_pool_usage pool;
} snap;

static uint64_t nonneg(int64_t x)
{
    return x > 0 ? (uint64_t)x : 0;
}

static void take_handle(snap *s)
{
    const wk_handle_stats *h = &s->handle;
    s->v[V_RECONNECTS] = h->reconnects;
    for (size_t i = 0; i < WK_STATS_REASONS; i++)
        s->v[V_FAILURES + i] = h->connect_failures[i];
    s->v[V_MOVED] = h->moved;
    s->v[V_ASKED] = h->asked;
    s->v[V_DISCOVERIES] = h->sentinel_discoveries;
    s->v[V_NOT_REPLICATED] = h->not_replicated;
    s->v[V_WAITING] = h->waiting;
    s->v[V_ACQUIRED] = h->wait_acquired;
    s->v[V_DEADLINES] = h->wait_deadlines;
    s->v[V_FAILED] = h->waits - h->wait_acquired - h->wait_deadlines;
    s->v[V_HANDOFFS] = h->wait_handoffs;
}

static void take(snap *s, const wk__watch *w)
{
    memset(s, 0, sizeof(*s));
    s->watch = w;
    wk_near_stats near;
    wk_settings_stats st;
    switch (w->type) {
    case WK__WATCH_DB:
        wk_db_stats(w->object, &s->handle);
        take_handle(s);
        break;
    case WK__WATCH_POOL:
        wk_pool_stats(w->object, &s->pool);
        s->handle = s->pool.handles;
        take_handle(s);
        s->v[V_POOL_SIZE] = s->pool.size;
        s->v[V_IN_USE] = s->pool.in_use;
        s->v[V_BORROWERS] = s->pool.waiting;
        s->v[V_BORROWS] = s->pool.borrows;
        s->v[V_BORROW_TIMEOUTS] = s->pool.borrow_timeouts;
        break;
    case WK__WATCH_NEAR_CACHE:
        if (wk_near_cache_stats(w->object, &near) != WK_OK)
            break;
        s->v[V_HITS] = near.hits;
        s->v[V_MISSES] = near.reads;
        s->v[V_REVALIDATIONS] = near.revalidations;
        s->v[V_INVALIDATIONS] = near.invalidations;
        s->v[V_EVICTIONS] = near.evictions;
        s->v[V_ENTRIES] = near.entries;
        s->v[V_UNVERIFIED] = near.verified ? 0 : near.entries;
        s->v[V_BYTES] = near.bytes;
        break;
    case WK__WATCH_FOLLOWER:
        if (wk_settings_follower_stats(w->object, &st, NULL, 0) != WK_OK)
            break;
        s->v[V_VERSION] = nonneg(st.version);
        s->v[V_LAG] = nonneg(wk_settings_follower_lag(w->object));
        s->v[V_SYNCED] = st.synced;
        s->v[V_RELOADS] = st.snapshots > 0 ? st.snapshots - 1 : 0;
        s->v[V_APPLIED] = st.applied;
        s->v[V_FOLLOWER_RECONNECTS] = st.reconnects;
        break;
    }
}

#define HANDLES ((1u << WK__WATCH_DB) | (1u << WK__WATCH_POOL))
#define POOLS (1u << WK__WATCH_POOL)
#define CACHES (1u << WK__WATCH_NEAR_CACHE)
#define FOLLOWERS (1u << WK__WATCH_FOLLOWER)

static const char *const reasons[] = {"WK_EIO", "WK_ETIMEDOUT", "WK_EAUTH", "WK_EPROTO", "other"};
static const char *const redirects[] = {"moved", "ask"};
static const char *const wait_outcomes[] = {"acquired", "deadline", "failed"};

typedef struct family {
    const char *name, *type, *help;
    size_t value;       /* V_…: the value (of the second label's first value) */
    const char *label2; /* a second label, or NULL */
    const char *const *values2;
    size_t n2;
} family;

/* A family row; F_BY: with a second label, one series per value. */
#define F(name_, type_, help_, value_)                                                             \
    {                                                                                              \
        .name = name_, .type = type_, .help = help_, .value = value_                               \
    }
#define F_BY(name_, type_, help_, value_, l2, vals)                                                \
    {                                                                                              \
        .name = name_, .type = type_, .help = help_, .value = value_, .label2 = l2,                \
        .values2 = vals, .n2 = sizeof(vals) / sizeof(vals[0])                                      \
    }

/* Every family of one kind of watched object, with the label naming it. */
typedef struct family_group {
    unsigned watched; /* the watch types it is written for */
    const char *label;
    const family *families;
    size_t n;
} family_group;

static const family handle_families[] = {
    F("wk_reconnects_total", "counter", "Connections made again after the first.", V_RECONNECTS),
    F_BY("wk_connect_failures_total", "counter", "Connection attempts that failed, by status.",
         V_FAILURES, "reason", reasons),
    F_BY("wk_redirects_total", "counter", "Cluster redirections followed, by type.", V_MOVED,
         "type", redirects),
    F("wk_sentinel_discoveries_total", "counter", "Primaries looked up anew through the sentinels.",
      V_DISCOVERIES),
    F("wk_lease_not_replicated_total", "counter",
      "Leases taken but acknowledged by fewer replicas than asked (WK_ENOTREPLICATED).",
      V_NOT_REPLICATED),
    F("wk_lease_waiters", "gauge", "Calls waiting for a lease now.", V_WAITING),
    F_BY("wk_lease_waits_total", "counter", "Waits for a lease that ended, by outcome.", V_ACQUIRED,
         "outcome", wait_outcomes),
    F("wk_lease_handoffs_total", "counter",
      "Waits that got the lease after sleeping until a release woke them.", V_HANDOFFS),
};

static const family pool_families[] = {
    F("wk_pool_connections", "gauge", "Connections of the pool.", V_POOL_SIZE),
    F("wk_pool_connections_in_use", "gauge", "Connections borrowed now.", V_IN_USE),
    F("wk_pool_waiting_borrowers", "gauge", "Threads waiting for a connection now.", V_BORROWERS),
    F("wk_pool_borrows_total", "counter", "Connections borrowed (by queries too).", V_BORROWS),
    F("wk_pool_borrow_timeouts_total", "counter", "Borrows that got none in time.",
      V_BORROW_TIMEOUTS),
};

static const family cache_families[] = {
    F("wk_near_cache_hits_total", "counter", "Gets served from memory.", V_HITS),
    F("wk_near_cache_misses_total", "counter", "Gets that read a body from Redis.", V_MISSES),
    F("wk_near_cache_revalidations_total", "counter",
      "HashedCache entries found unchanged by their hash.", V_REVALIDATIONS),
    F("wk_near_cache_invalidations_total", "counter", "Keys named by invalidation messages.",
      V_INVALIDATIONS),
    F("wk_near_cache_evictions_total", "counter", "Entries dropped for the bounds.", V_EVICTIONS),
    F("wk_near_cache_entries", "gauge", "Entries held.", V_ENTRIES),
    F("wk_near_cache_unverified_entries", "gauge",
      "Entries held but not served from memory now (tracking not verified).", V_UNVERIFIED),
    F("wk_near_cache_bytes", "gauge", "Bytes held.", V_BYTES),
};

static const family follower_families[] = {
    F("wk_settings_version", "gauge", "The mirror's version.", V_VERSION),
    F("wk_settings_version_lag", "gauge",
      "Versions the mirror was behind the server at its last check.", V_LAG),
    F("wk_settings_synced", "gauge", "1 while subscribed with the mirror loaded.", V_SYNCED),
    F("wk_settings_reloads_total", "counter", "Snapshots loaded after the first.", V_RELOADS),
    F("wk_settings_applied_total", "counter", "Changes applied from messages.", V_APPLIED),
    F("wk_settings_reconnects_total", "counter", "Subscriber connections after the first.",
      V_FOLLOWER_RECONNECTS),
};

#define GROUP(w, l, f)                                                                             \
    {                                                                                              \
        w, l, f, sizeof(f) / sizeof(f[0])                                                          \
    }
static const family_group groups[] = {
    GROUP(HANDLES, "handle", handle_families),
    GROUP(POOLS, "pool", pool_families),
    GROUP(CACHES, "cache", cache_families),
    GROUP(FOLLOWERS, "follower", follower_families),
};

static void put_label(wk__sink *o, const char *label, const char *value)
{
    wk__sink_puts(o, label);
    wk__sink_puts(o, "=\"");
    wk__sink_value(o, value);
    wk__sink_puts(o, "\"");
}

static void write_family(wk__sink *o, const family_group *g, const family *f, const snap *snaps,
                         size_t n)
{
    bool any = false;
    for (size_t i = 0; i < n; i++) {
        if (!(g->watched & (1u << snaps[i].watch->type)))
            continue;
        if (!any)
            wk__sink_family(o, f->name, f->type, f->help);
        any = true;
        for (size_t k = 0; k < (f->label2 ? f->n2 : 1); k++) {
            wk__sink_puts(o, f->name);
            wk__sink_puts(o, "{");
            put_label(o, g->label, snaps[i].watch->name);
            if (f->label2) {
                wk__sink_puts(o, ",");
                put_label(o, f->label2, f->values2[k]);
            }
            wk__sink_printf(o, "} %llu\n", (unsigned long long)snaps[i].v[f->value + k]);
        }
    }
}

/* A histogram family of the objects of `watched`: wait times of leases
 * (handles, pools) or of borrows (pools). */
static void write_histogram(wk__sink *o, const char *name, const char *help, unsigned watched,
                            const char *label, bool borrows, const snap *snaps, size_t n)
{
    bool any = false;
    for (size_t i = 0; i < n; i++) {
        if (!(watched & (1u << snaps[i].watch->type)))
            continue;
        if (!any)
            wk__sink_family(o, name, "histogram", help);
        any = true;
        char labels[2 * WK_METRICS_LABEL_MAX + 32];
        wk__sink text = {.buf = labels, .size = sizeof(labels) - 1};
        put_label(&text, label, snaps[i].watch->name);
        labels[text.len < sizeof(labels) ? text.len : sizeof(labels) - 1] = '\0';
        const snap *s = &snaps[i];
        if (borrows)
            wk__sink_histogram(o, name, labels, s->pool.borrow_buckets, s->pool.borrow_wait_ns);
        else
            wk__sink_histogram(o, name, labels, s->handle.wait_buckets, s->handle.wait_ns);
    }
}

void wk__watch_write(wk__watches *w, pthread_mutex_t *lock, wk__sink *o)
{
    /* Under the lock: an object unwatched is not read once unwatch
     * returned. */
    pthread_mutex_lock(lock);
    snap snaps[WK_METRICS_WATCHES];
    size_t n = 0;
    for (size_t i = 0; i < WK_METRICS_WATCHES; i++)
        if (w->list[i].object)
            take(&snaps[n++], &w->list[i]);
    for (size_t g = 0; g < sizeof(groups) / sizeof(groups[0]); g++)
        for (size_t f = 0; f < groups[g].n; f++)
            write_family(o, &groups[g], &groups[g].families[f], snaps, n);
    write_histogram(o, "wk_lease_wait_seconds", "How long waits for a lease took.", HANDLES,
                    "handle", false, snaps, n);
    write_histogram(o, "wk_pool_borrow_wait_seconds", "How long borrows waited for a connection.",
                    POOLS, "pool", true, snaps, n);
    pthread_mutex_unlock(lock);
}
