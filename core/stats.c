/*
 * core/stats.c — the counters behind wk_db_stats() and wk_pool_stats():
 * a connection's reconnects, failures, redirects and acknowledgment
 * shortfalls (a blocking connection's count into its handle's), a
 * handle's waits for leases. Relaxed atomics: bumped by the
 * thread using the connection, read by a metrics scrape on any other.
 */
#include <stdlib.h>
#include <time.h>

#include "core/db_internal.h"

static uint64_t load(const _Atomic uint64_t *v)
{
    return atomic_load_explicit((_Atomic uint64_t *)v, memory_order_relaxed);
}

static size_t reason_of(int rc)
{
    switch (rc) {
    case WK_EIO:
        return 0;
    case WK_ETIMEDOUT:
        return 1;
    case WK_EAUTH:
        return 2;
    case WK_EPROTO:
        return 3;
    default:
        return 4;
    }
}

wk__conn_counters *wk__counters_new(void)
{
    wk__conn_counters *c = calloc(1, sizeof(*c));
    if (c)
        atomic_init(&c->refs, 1);
    return c;
}

wk__conn_counters *wk__counters_ref(wk__conn_counters *c)
{
    atomic_fetch_add(&c->refs, 1);
    return c;
}

void wk__counters_release(wk__conn_counters *c)
{
    if (c && atomic_fetch_sub(&c->refs, 1) == 1)
        free(c);
}

void wk__count_connect(wk__conn *conn, int rc)
{
    wk__conn_counters *c = wk__counters(conn);
    if (conn->url.service)
        wk__bump(&c->discoveries);
    wk__bump(rc == WK_OK ? &c->reconnects : &c->connect_failures[reason_of(rc)]);
}

uint64_t wk__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

const uint64_t wk__hist_bounds_ns[WK_STATS_BUCKETS] = {
    50000,    100000,   250000,    500000,    1000000,   2500000,    5000000,    10000000,
    25000000, 50000000, 100000000, 250000000, 500000000, 1000000000, 2500000000, 10000000000};

void wk__hist_add(_Atomic uint64_t *buckets, _Atomic uint64_t *sum, uint64_t ns)
{
    size_t b = 0;
    while (b < WK_STATS_BUCKETS && ns > wk__hist_bounds_ns[b])
        b++;
    wk__bump(&buckets[b]);
    atomic_fetch_add_explicit(sum, ns, memory_order_relaxed);
}

void wk__hist_read(uint64_t *buckets, uint64_t *sum, const _Atomic uint64_t *from,
                   const _Atomic uint64_t *from_sum)
{
    for (size_t b = 0; b <= WK_STATS_BUCKETS; b++)
        buckets[b] += load(&from[b]);
    *sum += load(from_sum);
}

/* The handle a wait through `p` is counted on: the processor's (a
 * wrapper passes its inner one's; a pool's shared processor has its
 * front handle); none for a processor with no handle behind it. */
static wk_db *counted(wk_processor *p)
{
    return p ? p->db : NULL;
}

uint64_t wk__count_wait_begin(wk_processor *p)
{
    wk_db *db = counted(p);
    if (db)
        wk__bump(&db->waits.waiting);
    return wk__now_ns();
}

void wk__count_wait_end(wk_processor *p, uint64_t start, int rc, bool acquired, bool slept)
{
    wk_db *db = counted(p);
    if (!db)
        return;
    wk__wait_counters *w = &db->waits;
    wk__hist_add(w->buckets, &w->ns, wk__now_ns() - start);
    wk__bump(&w->waits);
    if (acquired)
        wk__bump(&w->acquired);
    if (acquired && slept)
        wk__bump(&w->handoffs);
    if (rc == WK_OK && !acquired)
        wk__bump(&w->deadlines);
    atomic_fetch_sub_explicit(&w->waiting, 1, memory_order_relaxed);
}

static void add_conn(wk_handle_stats *out, const wk__conn *conn)
{
    const wk__conn_counters *c = conn->counters;
    out->reconnects += load(&c->reconnects);
    for (size_t i = 0; i < WK_STATS_REASONS; i++)
        out->connect_failures[i] += load(&c->connect_failures[i]);
    out->moved += load(&c->moved);
    out->asked += load(&c->asked);
    out->sentinel_discoveries += load(&c->discoveries);
    out->not_replicated += load(&c->not_replicated);
}

void wk__stats_add(wk_handle_stats *out, const wk_db *db)
{
    if (db->conn && !db->pool)
        add_conn(out, db->conn);
    const wk__wait_counters *w = &db->waits;
    out->waiting += load(&w->waiting);
    out->waits += load(&w->waits);
    out->wait_acquired += load(&w->acquired);
    out->wait_handoffs += load(&w->handoffs);
    out->wait_deadlines += load(&w->deadlines);
    wk__hist_read(out->wait_buckets, &out->wait_ns, w->buckets, &w->ns);
}

int wk_db_stats(wk_db *db, wk_handle_stats *out)
{
    if (!db || !out)
        return WK_EINVAL;
    memset(out, 0, sizeof(*out));
    wk__stats_add(out, db);
    return WK_OK;
}
