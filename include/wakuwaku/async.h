/*
 * wakuwaku/async.h — the event-loop handle: queries that never block the
 * calling thread, for services built on libuv, libevent, epoll or poll.
 *
 * A wk_async is a handle like wk_db (same options, same capability check,
 * same outcome rules) whose I/O is driven by your loop. It exposes a
 * descriptor (a socket, or an epoll set once it waits: 6.), the events it waits for and a timeout; your loop
 * calls wk_async_process() when the descriptor is ready or the timeout
 * passed. Queries are submitted through a processor, so every query —
 * built-in, generated or your own — works unchanged:
 *
 *     static void on_lock(wk_async *a, int status, const char *msg, void *arg)
 *     {
 *         request *r = arg;           // r->acquired, r->token filled now
 *         ...
 *     }
 *     wk_lock_try(wk_async_with(a, on_lock, r), &invoice, wk_name_u64(42),
 *                 &r->token, &r->acquired);
 *
 * Ready-made adapters attach a handle to a loop: wakuwaku/adapters/libuv.h
 * and wakuwaku/adapters/libevent.h (header-only; see examples/loop_*).
 *
 * SEMANTICS
 *  1. Submission: wk_async_with() returns a processor that queues each
 *     query with the given callback. The capability is checked at once; a
 *     refused or malformed query returns its status from the query call
 *     (WK_EDENIED, WK_EINVAL) and its callback is never called. A query
 *     that was queued returns WK_OK and its callback is called exactly
 *     once, from wk_async_process() or wk_async_close() — never from
 *     inside the submitting call.
 *  2. Outputs: the query's parser writes its OUT parameters before the
 *     callback runs, so they must stay valid until then (put them in the
 *     request's own memory). Everything else the call borrows (names,
 *     keys, bodies) is copied when it is queued.
 *  3. Order: queries are written in submission order, pipelined: every
 *     query queued before the loop turns goes out in one write. Callbacks
 *     run in the same order, except that a script query answered NOSCRIPT
 *     is sent again (as EVAL) behind the others.
 *  4. Outcomes follow the handle's rule (wakuwaku/db.h, OUTCOMES): a
 *     write sent without a reply — the connection dropped, or no reply
 *     within the command timeout — completes with WK_EUNKNOWN; a query
 *     never sent completes with WK_EIO / WK_ETIMEDOUT and did not run.
 *     After a dropped connection (not a timeout) the handle reconnects
 *     once at once and sends again what never ran and the retry-safe reads
 *     whose reply was lost; writes sent without a reply are never re-sent.
 *  5. Connecting never blocks the loop (beyond name resolution: give an
 *     address or a name in /etc/hosts): the socket is connected and set up
 *     (TLS handshake, AUTH, HELLO, SELECT, CLIENT SETNAME — the checks of
 *     wk_db_open()) through the loop. wk_async_open() only starts it; a
 *     failure to connect completes the queued queries with the reason
 *     (WK_EIO, WK_ETIMEDOUT, WK_EAUTH, WK_EPROTO) and the next submission
 *     tries again. An idle handle whose server closed the connection
 *     reconnects on the next submission.
 *  6. Waiting acquires — wk_lock_acquire, wk_rwlock_acquire_read /
 *     _write, wk_fenced_lock_acquire, wk_semaphore_acquire, fair
 *     entities included — go through this processor too: the call
 *     draws the token (written at once, like a try's) and queues the
 *     first attempt; the callback runs once, when the item is taken
 *     (WK_OK, *acquired true; a FencedLock's fence written), when the
 *     deadline passed without it (WK_OK, *acquired false: its final
 *     attempt, made however late the loop's turn comes, took the item
 *     or left the queue, as the blocking acquire's does), or on a
 *     failure, by the blocking acquire's rules (wakuwaku/deadline.h):
 *     an attempt whose reply was lost is WK_EUNKNOWN (it may hold the
 *     item under *token); WK_ENOTREPLICATED after the unacknowledged
 *     lease was given back. Each attempt is the blocking path's script,
 *     so fairness (first come, first served, no barging) and the queue
 *     are shared with blocking waiters of the same name. Between
 *     attempts the waiter sleeps on its wake-up list without blocking
 *     the loop: the first wait opens a second, waits-only connection
 *     (same settings), whose one BLPOP covers the lists of every waiter
 *     of the handle; a release hands the item over as on the blocking
 *     path (collection/wake.h): the waiter's pop returns holding it and
 *     its callback runs with no attempt after it (with lease_replicas,
 *     after one attempt that carries the WAIT); a plain wake-up (a force
 *     release, the holder's lease ending) makes it attempt again at once.
 *     A waiter that joins
 *     while that BLPOP is blocked has it re-issued (CLIENT UNBLOCK on the
 *     handle's connection), and a wake-up that comes while its waiter is
 *     between attempts is kept for it: no wake-up is lost. The sleeps
 *     and the deadline run on the loop's timer (the timeout). Unlike the
 *     blocking acquire, an attempt in flight at the deadline is bounded
 *     by the command timeout, not cut 25 ms after the deadline (cutting
 *     it would drop the connection every other query shares).
 *     From then on the descriptor is an epoll set holding both
 *     connections (Linux): watch it for READ only (wk_async_events()
 *     says so); the watch is told -1 for the old socket, then the set.
 *     (One descriptor rather than a watch per connection: the calls
 *     above and the adapters stay as they are, and the set can hold
 *     more connections, e.g. one per cluster node.) The attempts, the
 *     leave and a give-back are the handle's own queries: a wrapper
 *     around this processor (hooks, metrics) sees none of them.
 *     The entity must outlive the callback (entities are static), as
 *     must the OUT parameters (2.); the name is copied.
 *     wk_async_pending() counts a wait as one until its callback ran.
 *     Through a batch the waiting acquires are still refused
 *     (WK_EINVAL: a batch's outcomes come only when it runs). Streams
 *     are followed through this processor too (8.), and settings maps
 *     (10.); run lease keepers and cron jobs on their own threads with
 *     their own wk_db (they never block your loop).
 *     On a Redis Cluster (9.) a wake-up list lives in its entity's slot
 *     and a BLPOP names keys of one slot only: the waits connection is
 *     one per slot in use (to its primary, routed by the map: MOVED, ASK
 *     and a failover are followed; a lost node makes its waiters attempt
 *     again), kept open for the slot's next waits (up to 8 idle). A
 *     BLPOP missing a new waiter is re-issued by a push to a list of the
 *     handle's own in that slot (it expires after a minute) instead of
 *     CLIENT UNBLOCK.
 *  7. No heap allocation per query once the handle's buffers have grown to
 *     the load (replies are parsed by hiredis, which allocates them); a
 *     waiting acquire allocates its state once (6.).
 *  8. Following a stream: wk_pipe_receive(), wk_stream_buffer_subscribe()
 *     and wk_live_view_subscribe() / _resume() through this processor
 *     open a receiver whose waits (BLMOVE, XREAD BLOCK) run, as in their
 *     blocking forms, on a connection of its own: a hidden handle with
 *     this handle's settings and capability, set up through the loop,
 *     whose socket joins the epoll set of 6. (the descriptor is the set
 *     from the first receiver on). *out is written at once; the
 *     receiver is ready when the open's callback ran (a resume sends
 *     nothing: at once). Each receive — wk_pipe_recv_async(),
 *     wk_stream_buffer_recv_async(), wk_live_view_recv_async() — is one
 *     callback, run from wk_async_process(), with the blocking
 *     receive's queries, outcomes and guarantees (wakuwaku/pipe.h,
 *     stream_buffer.h, live_view.h); one at a time per receiver; counted
 *     by wk_async_pending() until it ran. Closing the handle ends the
 *     receives outstanding with WK_EIO; the receivers stay to be closed.
 *  9. Redis Cluster: a seed list, or one node's URL whose set-up finds a
 *     cluster node, gives a cluster handle, routed as wk_db's (wakuwaku/
 *     db.h, CLUSTER) by the same exchange machine: each query goes to the
 *     primary of its key's slot on that node's connection (one per node,
 *     set up through the loop when a query first goes there), behind what
 *     is in flight there; MOVED, ASK, TRYAGAIN, CLUSTERDOWN and UNBLOCKED
 *     mean it did not run and it goes again where they say (TRYAGAIN /
 *     CLUSTERDOWN: after a 10 ms pause of the handle, until the command
 *     timeout, then WK_ETIMEDOUT); a node's lost connection settles its
 *     own queries by 4. The slot map comes from CLUSTER SLOTS on a
 *     connection of its own (to the URL's seeds; made again, to the
 *     map's primaries in turn, then the seeds), at first and
 *     again after a MOVED or a lost node, never blocking the loop;
 *     queries submitted before the first map wait for it (and fail with
 *     its reason if it cannot be had). The descriptor is an epoll set
 *     from the start (watch it for READ). Order (3.) holds per node:
 *     callbacks of queries on different nodes run as their replies come.
 *     A script query whose keys span slots is refused (WK_EINVAL, at the
 *     call once the handle knows it is a cluster's, else before it is
 *     sent).
 * 10. Settings followers: wk_settings_follower_start_async() through
 *     this processor follows a settings map with no thread of its own
 *     (wakuwaku/settings.h): its Pub/Sub subscriber is a hidden handle as
 *     in 8. (its socket in the epoll set), its loads and version checks
 *     are queries on this handle's connection, and the change callback,
 *     the start's completion and wk_settings_follower_wait_async()'s run
 *     from wk_async_process(). On a cluster handle (9.) the subscriber
 *     is a plain connection to the primary of the settings' slot, found
 *     by a head read through the handle, and follows the slot to its new
 *     owner after a failover or a move (wakuwaku/settings.h).
 *
 * THREADS: a wk_async and everything submitted to it belong to the loop's
 * thread. The callbacks run on it. Do not call wk_async_process() or
 * wk_async_close() from inside a callback; submitting from a callback is
 * fine (that is how requests chain), except from one that
 * wk_async_close() runs: that submission returns WK_EIO and its callback
 * is never called.
 */
#ifndef WAKUWAKU_ASYNC_H
#define WAKUWAKU_ASYNC_H

#include <wakuwaku/db.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct wk_async wk_async;

/* The events wk_async_events() asks for and wk_async_process() takes. */
#define WK_ASYNC_READ 1u
#define WK_ASYNC_WRITE 2u

/*
 * A query's completion: `status` is its outcome (WK_OK, or a status as a
 * wk_db query would return it); `msg` its detail message (never NULL; ""
 * on success), valid during the call only. `arg` is what was given to
 * wk_async_with().
 */
typedef void (*wk_async_done_fn)(wk_async *a, int status, const char *msg, void *arg);

/*
 * Called whenever what the handle waits for changes: its descriptor (-1:
 * none), the events on it (WK_ASYNC_*; 0: none) and the timeout in ms
 * after which wk_async_process() must be called even without events (-1:
 * none). Adapters use it to (re)arm their watchers; a poll() loop may
 * instead read wk_async_fd/_events/_timeout_ms before each wait.
 * It hears every change, whatever made it: inside wk_async_process()
 * (callbacks included) once, at the end of the turn; outside it — a
 * query submitted, a receive or subscription asked for (8.; again after
 * one ended WK_EIO, when the handle waited for nothing), a receiver
 * stopped or closed, from the loop's timer or anywhere else on the
 * loop's thread — from inside that call, before it returns. So a loop
 * never needs a wk_async_process() to learn of a change.
 * Before the descriptor it reported is closed (a lost connection, a
 * reconnect, the dial moving to the next address) it is called with fd
 * -1, events 0 and timeout -1, then with the new state: a new socket
 * often gets the old number, and a loop that keeps descriptors
 * registered (epoll) must drop the old registration first.
 * WARNING: the watch is not called when nothing changed, so a one-shot
 * timer that fired before the timeout was over (loops count from a
 * cached time) must be armed again, from wk_async_timeout_ms(), after
 * its wk_async_process(a, 0); the adapters do.
 */
typedef void (*wk_async_watch_fn)(wk_async *a, int fd, unsigned events, int64_t timeout_ms,
                                  void *arg);

/*
 * wk_async_open — a handle with the options of wk_db_open() (URL,
 * credentials, TLS, database, client name, timeouts, capability;
 * redis-sentinel:// URLs too, the sentinels asked in the loop's steps).
 * It checks the options and starts connecting without waiting. Returns
 * WK_OK, WK_EINVAL (bad options; message in `err`) or WK_ENOMEM; *out
 * is NULL on failure. A cluster's seed list or one node's URL gives a
 * cluster handle (9.). Connection failures are reported
 * to queries (5.).
 */
WK_API int wk_async_open(wk_async **out, const wk_db_options *opts, char *err, size_t errlen);

/*
 * wk_async_close — complete every queued query (not sent: WK_EIO, did
 * not run; sent without reply: WK_EUNKNOWN for writes) and every pending
 * wait (6.: one that has queued on the server, asleep or attempting,
 * WK_EUNKNOWN with its token — a release may have handed it the item, or
 * may until its place runs out, within the bound B of
 * docs/GUARANTEES.md, after which the item goes to the next waiter by
 * itself; release with the token from another handle to give it back at
 * once; one that never queued: its attempt's outcome), close the
 * connections and free the handle.
 * NULL is a no-op. Not from a callback.
 */
WK_API void wk_async_close(wk_async *a);

/*
 * wk_async_with — the handle's processor, submitting each query with
 * `done(a, status, msg, arg)` as its completion (`done` may be NULL: the
 * outcome is dropped). Borrowed; valid until the next wk_async_with() on
 * this handle or wk_async_close(). Flags: WK_PROCESSOR_DEFERRED.
 */
WK_API wk_processor *wk_async_with(wk_async *a, wk_async_done_fn done, void *arg);

/* wk_async_set_watch — set the watch callback (NULL: none); it is called
 * at once with the current state. */
WK_API void wk_async_set_watch(wk_async *a, wk_async_watch_fn watch, void *arg);

/* The descriptor to watch (-1: none now; the connection's socket, or
 * once the handle has waited or opened a receiver the epoll set of its
 * connections, 6. and 8., which also holds the eventfd of a near cache
 * read through it: wk_near_cache_get_async), the
 * events to watch it for, and the ms until wk_async_process() is due
 * without events (-1: none). */
WK_API int wk_async_fd(const wk_async *a);
WK_API unsigned wk_async_events(const wk_async *a);
WK_API int64_t wk_async_timeout_ms(const wk_async *a);

/*
 * wk_async_process — do what can be done now: `ready` is the events that
 * fired on the descriptor (WK_ASYNC_*), 0 when a timeout passed. Reads
 * replies, runs callbacks, writes what is queued, advances connecting,
 * expires timeouts. Never blocks.
 */
WK_API void wk_async_process(wk_async *a, unsigned ready);

/* wk_async_pending — queries queued or in flight (not yet completed),
 * waiting acquires asleep between attempts included (6.). */
WK_API size_t wk_async_pending(const wk_async *a);

/* wk_async_capability — the handle's capability (borrowed). */
WK_API const wk_cap *wk_async_capability(const wk_async *a);

/* wk_async_errmsg — the message of the last failure on the handle: a
 * refused call's detail (until a call is accepted; also
 * wk_processor_errmsg(wk_async_with(a, …))), else the last connection
 * failure; "" if none. Borrowed until the next call on the handle. */
WK_API const char *wk_async_errmsg(const wk_async *a);

#ifdef __cplusplus
}
#endif

#endif /* WAKUWAKU_ASYNC_H */
