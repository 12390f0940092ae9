/*
 * wakuwaku/near_cache.h — a near cache: a local copy of Cache and
 * HashedCache bodies, kept valid by Redis client-side caching, so that a
 * hit costs no round trip.
 *
 * HOW IT STAYS VALID. The near cache owns two connections, opened from the
 * handle given to wk_near_cache_open() (same server, credentials, database,
 * timeouts and capability):
 *
 *   data        reads bodies (through dispatch: capability check, outcome
 *               rules) with CLIENT TRACKING on REDIRECT <subscriber id>
 *               (RESP2). Tracking lives on one connection, so the near
 *               cache never reads through the caller's handle: a reconnect
 *               there would lose it silently.
 *   subscriber  SUBSCRIBE __redis__:invalidate; the server sends it the
 *               name of every tracked key that changes (a put, a remove,
 *               an expiry, an eviction), or nil for FLUSHALL / FLUSHDB.
 *
 * Modes (wk_near_cache_options.mode):
 *   WK_NEAR_DEFAULT  the server remembers the keys this near cache read and
 *                    invalidates only those (memory on the server per key
 *                    read; tracking-table-max-keys bounds it).
 *   WK_NEAR_BCAST    BCAST PREFIX <entity prefix> for each entity: every
 *                    change under the prefixes is announced, read or not
 *                    (no memory on the server per key; more messages).
 *
 * A background thread reads the invalidations and, every heartbeat_ms,
 * sends a PING on each connection. An entry is served from memory only
 * while it is VERIFIED (see wk_near_state): read on the current tracking
 * session, no invalidation of its key since, its local TTL running, and
 * both connections answered a PING sent no more than staleness_ms ago.
 *
 * STALENESS BOUND — the promise (docs/GUARANTEES.md, "Near cache"):
 *   a body served at time t reflects every write that completed (its reply
 *   reached the writer) before t − staleness_ms, on any client of the
 *   server, even when a connection silently dies.
 * Why: the server queues the invalidation of a write before it replies to
 * the writer, and a PONG after it on the same connection; a PONG to a PING
 * sent at s proves every invalidation of a write completed before s has
 * been read and applied (the thread applies messages in order). The data
 * connection's PONG proves its tracking was alive at s (a killed data
 * connection takes its tracking with it, and nothing tells the subscriber).
 * Times are wk_monotonic_ms() (wakuwaku/clock.h). Between writes that
 * complete less than staleness_ms before a read, the copy may still show
 * the older body; normally an invalidation arrives within a round trip
 * (bench/README.md gives the delay). This replica's own puts through its
 * other handles are invalidated the same way (read-your-writes only up to
 * the same bound).
 *
 * DISCONNECTS DO NOT FLUSH. When either connection drops, the thread (or
 * the next read) reconnects and re-enables tracking, and every entry
 * becomes UNVERIFIED but is kept. A connection that goes silent stops the
 * serving of entries once its last answered PING is staleness_ms old, and
 * is replaced when a PING or read times out (command_timeout_ms of the
 * handle). The next get of an unverified entry revalidates it before
 * serving it:
 *   HashedCache  one get-if-changed round trip with the held hash
 *                (wk_local_copy_refresh): no body crosses the network when
 *                it is unchanged;
 *   Cache        no hash exists, so the body is read again (GET): one round
 *                trip with the body.
 * An invalidation of a HashedCache key keeps the entry (unverified) for
 * the same reason; an invalidated Cache entry is dropped.
 *
 * MEMORY: at most max_entries entries and max_bytes bytes (an entry costs
 * its key plus its body; misses are cached too, as entries without a body),
 * least recently used evicted first; a body larger than max_bytes is
 * returned but not kept. An entry is verified for at most min(ttl_ms,
 * the entity's ttl_ms) after it was read, then revalidated.
 *
 * EVENT LOOPS: wk_near_cache_get_async() is the get for a thread that
 * runs an event loop (wakuwaku/async.h): hits complete at the loop's next
 * turn without I/O, and reads never block the loop (see the call).
 *
 * THREADS: a near cache may be shared by any number of threads. Hits take
 * a mutex around the table (the copy out happens under it); reads that go
 * to Redis take a second mutex around the data connection, so they are
 * serialised on that one connection (open one near cache per thread for
 * parallel misses). wk_near_cache_close() must not race with other calls.
 *
 * CAPABILITY: every get is admitted by the handle's capability, hits
 * included: an entity the capability does not grant READ is never cached,
 * and each get of it is refused by dispatch with WK_EDENIED and the
 * library's message (`capability "replica" may not READ Cache:profile
 * (cache.get)`) before anything is sent. In BCAST mode such an entity's
 * prefix is not registered (the server would tell its key names).
 *
 * REDIS CLUSTER: tracking is per connection, so on a cluster handle there
 * is one subscriber per primary, and the data handle's connection to each
 * primary tracks with REDIRECT to it; entries are served from memory only
 * while every primary's pair is proven (the bound holds for a write on
 * any primary). A new node connection, a slot that changed owner, or a
 * primary turned replica (its heartbeat asks ROLE) ends the session: the
 * near cache follows the new map (new subscribers) and entries are
 * revalidated as after a reconnect.
 *
 * SENTINEL: on a redis-sentinel:// handle the heartbeat asks ROLE too. A
 * node that turned replica (a switch of roles, or a failover that left
 * it behind) may never hear the new primary's writes, so it ends the
 * session: both connections are dropped and made again to the primary
 * the sentinels name, and entries are revalidated as after a reconnect.
 * The bound then holds for writes on the new primary, after at most one
 * heartbeat and the reconnect.
 */
#ifndef WAKUWAKU_NEAR_CACHE_H
#define WAKUWAKU_NEAR_CACHE_H

#include <wakuwaku/async.h>
#include <wakuwaku/cache.h>
#include <wakuwaku/db.h>
#include <wakuwaku/hashed_cache.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct wk_near_cache wk_near_cache;

/* How the server tells which keys changed (see the banner). */
typedef enum wk_near_mode {
    WK_NEAR_DEFAULT = 0, /* the keys this near cache read */
    WK_NEAR_BCAST = 1    /* every key under the entities' prefixes */
} wk_near_mode;

/*
 * Options of wk_near_cache_open(). Start from WK_NEAR_CACHE_OPTIONS_INIT.
 *
 *   entities, nentities  the Cache and HashedCache entities served (at
 *                        least one; copied). A get of another entity is
 *                        WK_EINVAL.
 *   mode                 WK_NEAR_DEFAULT or WK_NEAR_BCAST.
 *   max_entries          > 0: entries kept (default 10000).
 *   max_bytes            > 0: bytes kept, keys plus bodies (default 64 MiB).
 *   ttl_ms               0: each entity's ttl_ms; > 0: min(ttl_ms, the
 *                        entity's) — how long an entry stays verified
 *                        after it was read.
 *   staleness_ms         the bound above (> 0; default 1000).
 *   heartbeat_ms         PING interval of both connections; 0 (default):
 *                        staleness_ms / 4. Must be < staleness_ms, and
 *                        leave room for a round trip, or entries stop
 *                        being served between PONGs.
 *   retry_max_ms         longest pause between attempts to reconnect the
 *                        subscriber (default 2000; the first is at once).
 */
typedef struct wk_near_cache_options {
    const wk_entity *const *entities;
    size_t nentities;
    wk_near_mode mode;
    size_t max_entries;
    size_t max_bytes;
    int64_t ttl_ms;
    int staleness_ms;
    int heartbeat_ms;
    int retry_max_ms;
} wk_near_cache_options;

#define WK_NEAR_CACHE_OPTIONS_INIT                                                                 \
    {                                                                                              \
        .entities = NULL, .nentities = 0, .mode = WK_NEAR_DEFAULT, .max_entries = 10000,           \
        .max_bytes = (size_t)64 * 1024 * 1024, .ttl_ms = 0, .staleness_ms = 1000,                  \
        .heartbeat_ms = 0, .retry_max_ms = 2000                                                    \
    }

/*
 * wk_near_cache_open — open the two connections from `db`'s settings and
 * capability (db is read during the call only and may be closed after),
 * subscribe, enable tracking, and start the background thread.
 *
 *   out   OUT: the near cache; NULL on failure.
 *   err   OUT, may be NULL: a message on failure (errlen bytes).
 *
 * Returns WK_OK; WK_EINVAL (NULL db, bad options, an entity that is not a
 * valid Cache or HashedCache); WK_EIO, WK_ETIMEDOUT, WK_EAUTH (cannot connect); WK_EREDIS (the
 * server refused CLIENT TRACKING, e.g. an ACL); WK_ENOMEM. Close it with
 * wk_near_cache_close().
 */
WK_API int wk_near_cache_open(wk_near_cache **out, wk_db *db, const wk_near_cache_options *opts,
                              char *err, size_t errlen);

/* wk_near_cache_close — stop the thread, close both connections, free
 * every entry. NULL is a harmless no-op. No other call may run on it. */
WK_API void wk_near_cache_close(wk_near_cache *nc);

/*
 * wk_near_cache_get — the body of `name`: from memory when its entry is
 * verified (no round trip), else read from Redis (HashedCache: revalidated
 * by hash when an unverified body is held) and kept.
 *
 *   entity  one of the entities of the options (matched by kind and
 *           namespace).
 *   out     OUT, as wk_cache_get() / wk_hashed_cache_get(): found, change
 *           (CHANGED when found), data (a heap copy: free with
 *           wk_body_free(); its previous data is freed first), len, and
 *           for a HashedCache the hash.
 *
 * Returns WK_OK (see out->found), WK_EINVAL (NULL argument, an entity not
 * served, a bad name), WK_EDENIED (capability; nothing sent), WK_ECORRUPT,
 * WK_ENOMEM, or a connection / server error of the read (the held entry
 * is then kept, unverified). A failure leaves its message for
 * wk_near_cache_errmsg(). READ effect; thread-safe.
 */
WK_API int wk_near_cache_get(wk_near_cache *nc, const wk_entity *entity, wk_name name,
                             wk_body *out);

/*
 * wk_near_cache_get_into — wk_near_cache_get() into a caller buffer (see
 * wk_buffer in cache.h); a hit allocates nothing. A body longer than
 * buf->cap is WK_EINVAL with buf->found true and buf->len the length
 * needed (the entry is kept). Other returns as wk_near_cache_get().
 */
WK_API int wk_near_cache_get_into(wk_near_cache *nc, const wk_entity *entity, wk_name name,
                                  wk_buffer *buf);

/*
 * wk_near_cache_get_async — wk_near_cache_get() for a thread that runs an
 * event loop: the same admission, hit and read, and the loop never waits.
 *
 *   a      the event-loop handle whose wk_async_process() runs `done`. It
 *          carries the completion only: the near cache reads on its own
 *          data connection with its own capability (the one of the handle
 *          it was opened from), never on `a`'s connection.
 *   out    OUT, as wk_near_cache_get()'s: its previous data is freed at
 *          the call; the body is written before `done` runs (empty when
 *          `done` reports a failure). Keep it valid until then.
 *   done   called once, as done(a, status, msg, arg), from
 *          wk_async_process(a) — never inside this call — or from
 *          wk_async_close(a): the status wk_near_cache_get() would have
 *          returned, with its message. May be NULL.
 *
 * A verified entry is copied at the call, with no I/O (no eventfd write);
 * `done` runs at the handle's next turn (its timeout becomes 0). Anything
 * else — a miss, an unverified entry (a HashedCache's revalidated by
 * hash), a tracking session to begin — goes to the near cache's LOOP
 * READER: a thread, started by the first such get, that runs the blocking
 * get's read on the data connection and signals the handle through an
 * eventfd in its epoll set (from the first get on, the handle's
 * descriptor is that set, watched for READ, as with a receiver:
 * wakuwaku/async.h, 8.). One code path with wk_near_cache_get(): the
 * STALENESS BOUND, the session rules, revalidation by hash and the memory
 * bounds hold as above. The loop's thread takes only the table's mutex
 * and the reader's queue's, never held across I/O. The reads of every
 * loop and blocking caller are serialised on the data connection; the
 * loop reader takes its gets in submission order, and callbacks run as
 * results come (a hit may complete before an earlier miss).
 * wk_async_pending() counts each get until its callback ran. A get
 * outstanding holds its name and its result until then (outside
 * max_bytes, as a blocking caller's copy is); the table's bounds are the
 * blocking get's.
 *
 * Why a thread, and not a connection driven by the loop: tracking, its
 * session (REDIRECT to the subscriber, ended by any reconnect) and the
 * PING proof of the bound belong to the one data connection, and a
 * HashedCache's revalidation is a blocking exchange (wk_local_copy); a
 * second tracking connection in the loop would need all of that again
 * and a second session to prove. The reader shares them as they are.
 *
 * Closing. wk_async_close(a) completes the gets outstanding on `a`: a
 * result already read with its own status; a get still queued, or being
 * read (the reader finishes the read and drops it), with WK_EIO.
 * wk_near_cache_close() waits for the read in flight (at most the command
 * timeout); gets still queued complete with WK_EIO at each handle's next
 * turn (or its close). WARNING: like any call, wk_near_cache_close() must
 * not race with calls on the handles whose gets it served
 * (wk_async_process, wk_async_close): close it on their loop's thread, or
 * when their loops no longer turn.
 *
 * Returns WK_OK (`done` will run), or with `done` never called and the
 * message in wk_near_cache_errmsg(): WK_EINVAL (NULL nc, a or out, an
 * entity not served, a bad name), WK_EDENIED (the capability: nothing
 * sent), WK_EIO (the handle is closing, or no epoll set could be made),
 * WK_ENOMEM. Call it on the loop's thread (a near cache may serve loops on
 * several threads and blocking callers at once).
 */
WK_API int wk_near_cache_get_async(wk_near_cache *nc, wk_async *a, const wk_entity *entity,
                                   wk_name name, wk_body *out, wk_async_done_fn done, void *arg);

/* The state of one entry, without any I/O (wk_near_cache_peek()). */
typedef enum wk_near_state {
    WK_NEAR_ABSENT = 0,    /* no entry: a get reads from Redis */
    WK_NEAR_VERIFIED = 1,  /* a get now is served from memory */
    WK_NEAR_UNVERIFIED = 2 /* held, but a get revalidates it first */
} wk_near_state;

/*
 * wk_near_cache_peek — what a get of `name` would find now, without I/O
 * and without touching the LRU order. Returns WK_OK, or WK_EINVAL (NULL
 * argument, entity not served, bad name). Thread-safe.
 */
WK_API int wk_near_cache_peek(wk_near_cache *nc, const wk_entity *entity, wk_name name,
                              wk_near_state *state);

/* Counters since open (wk_near_cache_stats()). */
typedef struct wk_near_stats {
    uint64_t hits;                /* gets served from memory */
    uint64_t reads;               /* gets that read a body (miss, changed, Cache revalidation) */
    uint64_t revalidations;       /* HashedCache revalidations by hash that found it unchanged */
    uint64_t invalidations;       /* keys named by invalidation messages */
    uint64_t flushes;             /* "everything changed" messages */
    uint64_t evictions;           /* entries dropped for the bounds */
    uint64_t sessions;            /* tracking sessions begun (open, every re-enable) */
    uint64_t subscriber_connects; /* subscriber connections made (1 + reconnects) */
    size_t entries, bytes;        /* held now */
    bool verified;                /* entries are served from memory right now */
} wk_near_stats;

/* wk_near_cache_stats — copy the counters into *out. WK_OK or WK_EINVAL
 * (NULL argument). Thread-safe. */
WK_API int wk_near_cache_stats(wk_near_cache *nc, wk_near_stats *out);

/*
 * wk_near_cache_errmsg — the message of the calling thread's last failed
 * near-cache call (any near cache); "" if none. Borrowed until this
 * thread's next near-cache call.
 */
WK_API const char *wk_near_cache_errmsg(void);

#ifdef __cplusplus
}
#endif

#endif /* WAKUWAKU_NEAR_CACHE_H */
