/*
 * wakuwaku/metrics.h — query metrics as a processor wrapper, written in
 * the Prometheus text exposition format.
 *
 * The wrapper counts every query that passes through it — reads and writes
 * (hooks see writes only) — by query name, entity (kind and namespace of
 * the query's first access) and outcome ("ok" or the status name,
 * "WK_EDENIED" …), and measures its latency into a fixed-bucket histogram.
 * The tables are allocated once, by wk_metrics_open, and nothing per
 * query: they are bounded (WK_METRICS_SERIES series of name × entity);
 * queries beyond that are counted in one overflow series whose labels are
 * query="other", kind="other", namespace="other".
 *
 *     wk_metrics *m;
 *     if (wk_metrics_open(&m, wk_db_processor(db)) != WK_OK) …
 *     wk_lock_try(wk_metrics_processor(m), &invoice, wk_name_u64(42), &token, &got);
 *     wk_metrics_write_prometheus(m, stdout);   // e.g. for GET /metrics
 *     wk_metrics_close(m);
 *
 * Output (one family per metric, series in first-seen order):
 *
 *     # HELP wk_queries_total Queries processed, by name, entity and outcome.
 *     # TYPE wk_queries_total counter
 *     wk_queries_total{query="lock.try",kind="Lock",namespace="invoice",outcome="ok"} 1
 *     # HELP wk_query_duration_seconds Query latency, by name and entity.
 *     # TYPE wk_query_duration_seconds histogram
 *     wk_query_duration_seconds_bucket{query="lock.try",…,le="0.0001"} 0
 *     …
 *     wk_query_duration_seconds_bucket{…,le="+Inf"} 1
 *     wk_query_duration_seconds_sum{…} 0.000213
 *     wk_query_duration_seconds_count{…} 1
 *
 * THREAD SAFETY: the counters are C11 atomics (relaxed) and a new series
 * is added under a mutex, so several threads may count into one table at
 * once, each through its own wrapper (wk_metrics_wrap) over its own inner
 * processor — e.g. one per handle of a pool — and the table may be written
 * out (wk_metrics_write_prometheus) while queries run. The table's own
 * processor (wk_metrics_processor) has its inner processor's thread rules.
 * A write taken while queries run sees each counter at some recent value;
 * a histogram's _count may then differ from its +Inf bucket by the queries
 * in flight.
 *
 * LABELS: a series is the label text of the query's name and the
 * entity's kind and namespace, whatever memory they are in: a string
 * freed and its address reused with other bytes counts into the series of
 * its new text (the lookup caches by address, then confirms by the
 * bytes). Label values are shown as valid UTF-8: bytes that are not
 * become U+FFFD, and names that show alike share a series. Names longer
 * than WK_METRICS_LABEL_MAX - 1 bytes go to the overflow series.
 *
 * Over a deferred processor (a batch) a query is counted when it is queued,
 * with the status of queuing, and its latency is the time to queue it.
 */
#ifndef WAKUWAKU_METRICS_H
#define WAKUWAKU_METRICS_H

#include <stdint.h>
#include <stdio.h>

#include <wakuwaku/db.h>
#include <wakuwaku/near_cache.h>
#include <wakuwaku/pool.h>
#include <wakuwaku/query.h>
#include <wakuwaku/settings.h>

#ifdef __cplusplus
extern "C" {
#endif

#define WK_METRICS_SERIES 64     /* distinct (query name, entity) series */
#define WK_METRICS_LABEL_MAX 129 /* bytes kept per label, with the NUL */
#define WK_METRICS_WATCHES 16    /* objects watched at once (see WATCHED OBJECTS) */

/* The histogram's finite upper bounds, in seconds (then +Inf):
 * 50 µs, 100 µs, 250 µs, 500 µs, 1 ms, 2.5 ms, 5 ms, 10 ms, 25 ms, 50 ms,
 * 100 ms, 250 ms, 500 ms, 1 s, 2.5 s, 10 s. */
#define WK_METRICS_BUCKETS 16

/* The metrics table (opaque). */
typedef struct wk_metrics wk_metrics;

/*
 * wk_metrics_open — a metrics table whose processor wraps `inner`.
 *
 *   out    OUT: the new table; NULL on failure. Free with wk_metrics_close.
 *   inner  where queries go next; may be NULL when every query goes
 *          through wk_metrics_wrap() wrappers (the table's own processor
 *          then fails queries with WK_EINVAL).
 *
 * Returns WK_OK, WK_EINVAL (out NULL) or WK_ENOMEM. The only allocation.
 */
WK_API int wk_metrics_open(wk_metrics **out, wk_processor *inner);

/* wk_metrics_close — free the table; NULL is a harmless no-op. Nothing may
 * use its processor or its wrappers afterwards. */
WK_API void wk_metrics_close(wk_metrics *m);

/* wk_metrics_processor — the wrapping processor (borrowed, lives as long
 * as `m`); it copies `inner`'s db and flags. NULL if `m` is NULL. */
WK_API wk_processor *wk_metrics_processor(wk_metrics *m);

/*
 * A second (third …) way into one table: a wrapper of another inner
 * processor (one per thread, e.g. each handle of a pool) that counts into
 * `metrics`. Caller-allocated, holds no resources; must not outlive the
 * table. Fill it with wk_metrics_wrap; fields are private except `base`.
 */
typedef struct wk_metrics_wrapper {
    wk_processor base; /* pass &wrapper.base wherever a processor goes */
    wk_processor *inner;
    wk_metrics *metrics;
} wk_metrics_wrapper;

/* wk_metrics_wrap — set `w` up to send queries to `inner`, counted in `m`.
 * Returns WK_OK or WK_EINVAL (an argument NULL). */
WK_API int wk_metrics_wrap(wk_metrics_wrapper *w, wk_metrics *m, wk_processor *inner);

/*
 * WATCHED OBJECTS — besides its queries, a table writes what the objects
 * it watches are doing, read from each object's own stats call
 * (wk_db_stats, wk_pool_stats, wk_near_cache_stats,
 * wk_settings_follower_stats / _lag) every time the text is written.
 * Families (each written only when an object of its kind is watched;
 * the first label is the name given to the watch call):
 *
 *   handles and pools (a pool's connections summed), label handle:
 *     wk_reconnects_total, wk_connect_failures_total{reason=WK_EIO|
 *     WK_ETIMEDOUT|WK_EAUTH|WK_EPROTO|other}, wk_redirects_total{type=
 *     moved|ask}, wk_sentinel_discoveries_total,
 *     wk_lease_not_replicated_total, wk_lease_waiters (gauge),
 *     wk_lease_waits_total{outcome=acquired|deadline|failed},
 *     wk_lease_handoffs_total, wk_lease_wait_seconds (histogram)
 *   pools, label pool:
 *     wk_pool_connections, wk_pool_connections_in_use,
 *     wk_pool_waiting_borrowers (gauges), wk_pool_borrows_total,
 *     wk_pool_borrow_timeouts_total, wk_pool_borrow_wait_seconds
 *     (histogram)
 *   near caches, label cache:
 *     wk_near_cache_hits_total, _misses_total, _revalidations_total,
 *     _invalidations_total, _evictions_total; wk_near_cache_entries,
 *     _unverified_entries, _bytes (gauges)
 *   settings followers, label follower:
 *     wk_settings_version, wk_settings_version_lag, wk_settings_synced
 *     (gauges), wk_settings_reloads_total, wk_settings_applied_total,
 *     wk_settings_reconnects_total
 *
 * The histograms have the query histogram's bounds. Waits are counted on
 * the handle whose processor the waiting call was given (a pool's shared
 * processor: the pool); an event-loop handle (wk_async) is not counted.
 *
 * wk_metrics_watch_* — watch `object` under `name` (copied; shown as
 * valid UTF-8 like the query labels). The object must stay valid until
 * wk_metrics_unwatch() returns or the table is closed. Returns WK_OK,
 * WK_EINVAL (an argument NULL, `name` empty or longer than
 * WK_METRICS_LABEL_MAX - 1 bytes, the object watched already) or
 * WK_ENOMEM (WK_METRICS_WATCHES objects watched already).
 * wk_metrics_unwatch — stop watching `object`: once it returns, no write
 * reads the object any more. WK_OK, or WK_EINVAL (not watched).
 * Thread-safe, also against writes of the text.
 */
WK_API int wk_metrics_watch_db(wk_metrics *m, wk_db *db, const char *name);
WK_API int wk_metrics_watch_pool(wk_metrics *m, wk_pool *pool, const char *name);
WK_API int wk_metrics_watch_near_cache(wk_metrics *m, wk_near_cache *nc, const char *name);
WK_API int wk_metrics_watch_settings_follower(wk_metrics *m, wk_settings_follower *f,
                                              const char *name);
WK_API int wk_metrics_unwatch(wk_metrics *m, const void *object);

/* wk_metrics_reset — every query counter back to 0 and every series
 * forgotten (watched objects stay watched: their counters are their own).
 * WARNING: not while queries or writes run on `m` or its wrappers. */
WK_API void wk_metrics_reset(wk_metrics *m);

/*
 * wk_metrics_count — how many queries of one series ended with one outcome
 * (0 for "ok", a WK_E… status for that status), for tests and health
 * checks. Labels are compared as strings; "other" for all three names the
 * overflow series. 0 when there is no such series. Thread-safe.
 */
WK_API uint64_t wk_metrics_count(const wk_metrics *m, const char *query, const char *kind,
                                 const char *ns, int outcome);

/*
 * wk_metrics_write_prometheus — write every metric in the Prometheus text
 * exposition format (version 0.0.4) to `f`. Label values are escaped
 * (backslash, double quote, newline). Returns WK_OK, WK_EINVAL (an
 * argument NULL) or WK_EIO (a write to `f` failed). Thread-safe against
 * running queries (see above).
 */
WK_API int wk_metrics_write_prometheus(const wk_metrics *m, FILE *f);

/*
 * wk_metrics_format_prometheus — the same text into `buf` of `size` bytes,
 * always NUL-terminated when size > 0. *len (if not NULL) gets the length
 * of the whole text, even when it did not fit. Returns WK_OK, or WK_EINVAL
 * when `m` is NULL, `buf` is NULL with size > 0, or the text needs more
 * than size - 1 bytes (buf then holds a truncated prefix: call again with
 * *len + 1 bytes).
 */
WK_API int wk_metrics_format_prometheus(const wk_metrics *m, char *buf, size_t size, size_t *len);

#ifdef __cplusplus
}
#endif

#endif /* WAKUWAKU_METRICS_H */
