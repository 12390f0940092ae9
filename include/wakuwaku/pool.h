/*
 * wakuwaku/pool.h — a pool of connections that any thread may use at once.
 *
 * A wk_db is one connection for one thread at a time. A pool opens N of
 * them from one wk_db_options and hands them out:
 *
 *   - wk_pool_processor(pool): ONE processor that any number of threads
 *     may call concurrently. By default the connections are multiplexed:
 *     any number of threads' queries are in flight on one connection at
 *     once, each running as on a handle (see MULTIPLEXING); with
 *     multiplex = false each query borrows a free connection for its own
 *     round trip and gives it back.
 *   - wk_pool_borrow() / wk_pool_return(): a connection for a stretch of
 *     work that must stay on one connection (a wk_batch, CLIENT-level
 *     state, many queries without queueing for each).
 *
 *     wk_pool_options po = WK_POOL_OPTIONS_INIT;
 *     po.db = &db_options;                        // as for wk_db_open()
 *     po.size = 4;
 *     wk_pool *pool;
 *     if (wk_pool_open(&pool, &po, err, sizeof(err)) != WK_OK) …
 *     wk_processor *p = wk_pool_processor(pool);  // share with every thread
 *     rc = wk_lock_try(p, &invoice, wk_name_u64(42), &token, &got);
 *     if (rc) log("%s: %s", wk_err_name(rc), wk_pool_errmsg(pool));
 *
 * RULES — the pool adds a wait and nothing else:
 *  1. Capability: every connection has the options' capability. A query
 *     is admitted (shape, capability) before it waits for a connection, so
 *     a refused query is WK_EDENIED at once, sends nothing and takes no
 *     connection; the handle then admits it again, exactly as ever.
 *  2. The wait: a query's deadline is fixed when it enters the pool — the
 *     command timeout (plus, for a lease query on a handle with
 *     lease_replicas, the acknowledgment's timeout), or an enclosing
 *     call's when sooner (a waiting acquire's: its caller's deadline,
 *     wakuwaku/deadline.h) — and the wait for a free connection spends
 *     it: a query waits at most wait_ms and at most until its deadline,
 *     then runs on the connection with what is left, not a fresh command
 *     timeout. So a query through the pool ends by the same deadline as
 *     on a handle. None free in time: WK_ETIMEDOUT, message "pool: no
 *     free connection within N ms" (wait_ms ran out) or "pool: no free
 *     connection before the call's deadline (not sent)", and nothing was
 *     sent — for a WRITE, the OUTCOMES rule of wakuwaku/db.h
 *     (WK_ETIMEDOUT: not sent, did not run) holds as it is.
 *     wk_pool_borrow() is no query: it waits wait_ms, and the borrowed
 *     handle's queries each get their own full deadline. Waiters are
 *     served in the order they began to wait: a returned connection goes
 *     to the longest waiter, never to a thread that came later.
 *  3. Outcomes, reconnects, the idle probe and NOSCRIPT recovery are the
 *     handle's (wakuwaku/db.h): each connection reconnects on its own, and
 *     a query is settled on the one connection it borrowed; the pool never
 *     moves a query to another connection.
 *  4. The shared processor is not deferred (wk_processor_is_deferred() is
 *     false), so the helpers that need an outcome at once (deadline
 *     acquire, fill once, …) work through it; each of their queries may
 *     use a different connection.
 *
 * MULTIPLEXING (wk_pool_options.multiplex, the default) — a query does
 * not wait for a free connection: it goes on the open connection (one
 * not borrowed) with the fewest queries waiting, behind whatever is in
 * flight there. Its thread formats it and writes it at once — or, when
 * another thread is busy with that connection, leaves it to that thread,
 * which writes every query left to it in one write — and waits for its
 * own reply only; replies are matched to queries in order. One of
 * the waiting threads reads for all of them (the others sleep until
 * their own reply is parsed), so a pool of N connections serves any
 * number of threads. The RULES above hold per query:
 *  - Capability: admitted before it goes on a connection (RULES 1).
 *  - Deadline: its own, fixed when it enters the pool (RULES 2), whatever
 *    else is in flight. A query whose deadline passes leaves: not written
 *    yet, it is taken out and never sent (WK_ETIMEDOUT, "timed out before
 *    it could be sent"); written, it is WK_EUNKNOWN for a write,
 *    WK_ETIMEDOUT for a read ("timed out waiting for Redis"), and its
 *    reply, when it comes, is read and dropped — never parsed into the
 *    caller's memory, never given to the next query. The connection stays
 *    (a handle would drop it): the others' replies are still due on it,
 *    each by the command timeout after its command went out.
 *  - Outcomes (wakuwaku/db.h): a connection lost with queries in flight
 *    makes each written write WK_EUNKNOWN, sends each retry-safe read
 *    once more on a new connection, and sends again what was not written;
 *    NOSCRIPT, READONLY (Sentinel) and the idle probe are the handle's.
 *    OUT parameters are written by the reply's parse before the thread is
 *    woken.
 *  - With every connection borrowed a query waits as in RULES 2 ("pool:
 *    no free connection …", nothing sent).
 *  - wk_pool_borrow() takes an open connection out of the sharing, then
 *    waits (within wait_ms) until the queries in flight on it are in,
 *    reading the replies of those whose threads left at their deadline:
 *    a borrowed handle never sees another thread's reply.
 *  - Blocking waits never share a connection: a waiting acquire's BLPOP
 *    takes a connection of its own (as without multiplexing), which the
 *    pool keeps for the next wait when the acquire ends (at most its size
 *    of them; wk_pool_close() closes them), and a lease
 *    query followed by its WAIT (lease_replicas) takes a connection to
 *    itself, as a borrow does, so it blocks nobody's reply.
 *  - A cluster URL's pool does not multiplex (queries go to the node of
 *    their slot): one query per connection, as with multiplex = false.
 * In wk_pool_stats(), a multiplexed query counts as a borrow (waiting 0
 * unless every connection was borrowed), and in_use counts the open
 * connections with a query waiting on them besides the borrowed ones.
 *
 * DETAIL MESSAGES — a handle keeps one message, which many threads cannot
 * share. For the shared processor the message is the calling thread's:
 * wk_pool_errmsg(pool), wk_processor_errmsg(wk_pool_processor(pool)) and
 * wk_db_errmsg(wk_pool_processor(pool)->db) all return the detail of this
 * thread's last query through a pool's shared processor (one buffer per
 * thread, shared by all pools), borrowed until this thread's next such
 * query. A borrowed handle keeps its own message (wk_db_errmsg(db)), as
 * any handle.
 *
 * The shared processor's `db` member is the pool's, not a connection: it
 * answers wk_db_errmsg(), wk_db_capability() and wk_db_ping() (which
 * borrows a connection); wk_batch_open() and wk_db_narrow() on it fail
 * with WK_EINVAL (borrow a handle for a batch), and wk_db_close() on it
 * does nothing.
 *
 * THREADS: wk_pool_processor(), wk_pool_borrow(), wk_pool_return() and
 * wk_pool_errmsg() may be called from any thread at any time between
 * wk_pool_open() and wk_pool_close(). A borrowed handle is the borrower's
 * alone until it is returned (one thread at a time, as any wk_db).
 * WARNING: a thread that holds a borrowed handle and then queries through
 * the shared processor (or borrows again) can wait for itself: with every
 * connection borrowed, that query fails with WK_ETIMEDOUT after wait_ms or
 * at its deadline, whichever comes first.
 */
#ifndef WAKUWAKU_POOL_H
#define WAKUWAKU_POOL_H

#include <wakuwaku/db.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct wk_pool wk_pool;

/* The most connections a pool opens. */
#define WK_POOL_MAX_SIZE 1024

/*
 * Options of wk_pool_open(). Start from WK_POOL_OPTIONS_INIT.
 *
 *   db       required: the options every connection is opened with
 *            (wk_db_options, capability included). Read during
 *            wk_pool_open() only; nothing is kept.
 *   size     connections to open, 1 ..= WK_POOL_MAX_SIZE. Default 4.
 *   wait_ms  >= 0: the longest a query or wk_pool_borrow() waits for a
 *            free connection; 0 fails at once when none is free. A
 *            query's wait also ends at its deadline (RULES 2), so a
 *            wait_ms above the command timeout only lengthens
 *            wk_pool_borrow(). Default 2000 (the default command
 *            timeout).
 *   multiplex  true (the default of WK_POOL_OPTIONS_INIT): the shared
 *            processor's queries share the connections in flight (see
 *            MULTIPLEXING); false (a zeroed struct): one query per
 *            connection at a time, as before 0.2.0. Cluster URLs always
 *            run one query per connection.
 */
typedef struct wk_pool_options {
    const wk_db_options *db;
    int size;
    int wait_ms;
    bool multiplex;
} wk_pool_options;

#define WK_POOL_OPTIONS_INIT {.db = NULL, .size = 4, .wait_ms = 2000, .multiplex = true}

/*
 * wk_pool_open — open `size` connections now (eagerly: a wrong URL,
 * password or capability fails here, not at the first query, and no query
 * ever pays for a connect that the pool could have made up front).
 *
 *   out   OUT: the pool; NULL on failure.
 *   opts  the options (NULL, a NULL opts->db, a size outside
 *         1..WK_POOL_MAX_SIZE or a negative wait_ms: WK_EINVAL).
 *   err   OUT, may be NULL: on failure a message (at most errlen bytes,
 *         NUL-terminated), naming which connection failed; never a
 *         password.
 *
 * All connections must open: on the first failure every connection opened
 * so far is closed and that failure's status is returned (any status of
 * wk_db_open()), or WK_ENOMEM. Close the pool with wk_pool_close().
 */
WK_API int wk_pool_open(wk_pool **out, const wk_pool_options *opts, char *err, size_t errlen);

/*
 * wk_pool_close — close every connection and free the pool. NULL is a
 * harmless no-op.
 *
 * WARNING: call it once no thread uses the pool's processor or waits in
 * wk_pool_borrow() any more (after joining them): a call racing with
 * close is undefined behaviour. Handles still borrowed are not closed
 * under their borrower: the pool is freed when the last of them comes
 * back through wk_pool_return(), which is the only call allowed after
 * close.
 */
WK_API void wk_pool_close(wk_pool *pool);

/* wk_pool_processor — the processor any thread may call concurrently
 * (see RULES). Borrowed; valid until wk_pool_close(). NULL for NULL. */
WK_API wk_processor *wk_pool_processor(wk_pool *pool);

/*
 * wk_pool_borrow — take a free connection for the calling thread's
 * exclusive use, waiting at most wait_ms for one.
 *
 *   db  OUT: a handle (the pool's; never close it); NULL on failure.
 *
 * Use it as any wk_db: its processor, wk_batch_open() on it (close the
 * batch before returning the handle), wk_db_errmsg() for its messages.
 * Do not narrow it or keep anything that refers to it past
 * wk_pool_return(). Returns WK_OK; WK_ETIMEDOUT (no connection free in
 * time; message in wk_pool_errmsg()); WK_EINVAL (NULL argument);
 * WK_ENOMEM (the system could not make a condition variable to wait on;
 * the shared processor may fail so too).
 */
WK_API int wk_pool_borrow(wk_pool *pool, wk_db **db);

/*
 * wk_pool_return — give back a handle from wk_pool_borrow(), whatever
 * state its connection is in (a broken one reconnects at its next query).
 * Returns WK_OK, or WK_EINVAL, changing nothing, when `db` is not a
 * handle of this pool that is borrowed now (NULL, a second return, a
 * handle of another pool).
 */
WK_API int wk_pool_return(wk_pool *pool, wk_db *db);

/* What a pool is doing (wk_pool_stats()). */
typedef struct wk_pool_usage {
    size_t size;              /* connections */
    size_t in_use;            /* … borrowed now (by a query or wk_pool_borrow) */
    size_t waiting;           /* threads waiting for one now */
    uint64_t borrows;         /* connections taken, the shared processor's included */
    uint64_t borrow_timeouts; /* borrows that got none in time (WK_ETIMEDOUT) */
    /* how long each borrow waited (0 when one was free), per bucket of
     * the bounds of WK_STATS_BUCKETS (not cumulative; the last one is
     * above the last bound), and their sum in nanoseconds */
    uint64_t borrow_buckets[WK_STATS_BUCKETS + 1];
    uint64_t borrow_wait_ns;
    wk_handle_stats handles; /* its connections and the waits made through it, summed */
} wk_pool_usage;

/* wk_pool_stats — copy what the pool is doing into *out. Any thread, at
 * any time before wk_pool_close(). WK_OK, or WK_EINVAL (NULL argument). */
WK_API int wk_pool_stats(wk_pool *pool, wk_pool_usage *out);

/* wk_pool_errmsg — the detail of the calling thread's last query through
 * a pool's shared processor, or of its last failed wk_pool_borrow() (see
 * DETAIL MESSAGES); "" when it succeeded. Borrowed until this thread's
 * next such call. Never NULL. */
WK_API const char *wk_pool_errmsg(const wk_pool *pool);

#ifdef __cplusplus
}
#endif

#endif /* WAKUWAKU_POOL_H */
