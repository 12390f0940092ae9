/*
 * core/blocking.h — a handle for blocking commands (BLPOP, BLMOVE,
 * XREAD BLOCK …): lock waiters, pipe receivers, stream subscribers. Not
 * installed.
 *
 * A blocking command holds its connection until it returns, so it never
 * goes over the caller's handle (other queries would wait behind it, and a
 * batch could not be sent). A blocking handle is a second wk_db opened from
 * a handle's settings — same server, credentials, TLS settings, database,
 * client name and timeouts — with its own connection, checked at open
 * exactly as wk_db_open() checks one, and with the same capability: its
 * queries go through the usual dispatch (capability check, outcome rules).
 *
 * Thread-safety: a blocking handle is used by one thread at a time, except
 * wk__blocking_interrupt(), which any thread (or a signal handler) may
 * call at any time while the handle is open.
 */
#ifndef WK_CORE_BLOCKING_H
#define WK_CORE_BLOCKING_H

#include <stddef.h>
#include <stdint.h>

#include <wakuwaku/db.h>
#include <wakuwaku/query.h>

/*
 * Open a blocking handle with the settings and capability of `db` (read
 * during the call only; `db` may be closed first). Returns WK_OK, or what
 * wk_db_open() returns for the same failures, with the message in `err`
 * (may be NULL). Close it with wk_db_close().
 */
int wk__blocking_open(wk_db **out, wk_db *db, char *err, size_t errlen);

/* wk__blocking_open() without connecting: the settings and capability
 * copied, the connection left for the caller to make (the event-loop
 * handle's waits lane sets it up through the loop). */
int wk__blocking_clone(wk_db **out, wk_db *db, char *err, size_t errlen);

/*
 * The blocking handle of `db` itself: opened (wk__blocking_open, the open
 * ending by `deadline` — the wait's, wk__boot_ms(); 0: the connect
 * timeout alone) on the first call, then kept and closed by
 * wk_db_close(db). A handle narrowed
 * from `db` is a handle of its own, with its own blocking handle and its
 * own capability. Returns WK_OK with *out borrowed from `db`, or the
 * status of opening it, with the message on `db`. Thread-safety: as `db`
 * (one thread at a time), which is also the only user of *out.
 * A pool's shared handle (used by many threads at once) keeps none of
 * its own: *out is then a blocking handle for this caller alone (one an
 * earlier wait gave back, or a new one) and *close_after true — the
 * caller gives it back with wk__blocking_done() when its wait ends.
 */
int wk__blocking_of(wk_db *db, int64_t deadline, wk_db **out, bool *close_after);
/* The end of a wait on `b`, a blocking handle wk__blocking_of(db, …) gave
 * with *close_after: a pool's keeps it for the next wait (up to its size),
 * otherwise it is closed. */
void wk__blocking_done(wk_db *db, wk_db *b);

/*
 * Run `query` (a blocking command whose server-side wait is at most
 * `block_ms`; 0: it does not block) on the blocking handle `b`: as
 * wk_process() on the handle, except that the reply is awaited for
 * block_ms plus the command timeout — never past a bound set with
 * wk__db_bound(b, …) (a waiting acquire's deadline), which a reconnect
 * inside the query spends too. Refused with WK_EINVAL on another
 * handle. The usual outcome rules apply: a blocking pop is a write, so a
 * connection lost while it waits is WK_EUNKNOWN (the element may have
 * been taken).
 */
int wk__blocking_process(wk_db *b, wk_query *query, int64_t block_ms);

/*
 * Make the wait in progress on `b` (or the next one, if none is in
 * progress) end at once: the query fails as if the connection dropped
 * (WK_EIO, or WK_EUNKNOWN for a write) and the connection is closed (the
 * server may still be blocked on it); the next query reconnects. Once
 * interrupted, a handle stays so until wk__blocking_reset(). Thread- and
 * async-signal-safe.
 */
void wk__blocking_interrupt(wk_db *b);

/* Whether `b` was interrupted; clear that with wk__blocking_reset()
 * (the owning thread, between queries). */
bool wk__blocking_interrupted(const wk_db *b);
void wk__blocking_reset(wk_db *b);

/* How many connections `b` opened after its first (each reconnect counts
 * one). A helper that set per-connection state on the server (the near
 * cache's CLIENT TRACKING) compares it before and after a query: a change
 * means that state is gone. Same thread rule as `b`. */
uint64_t wk__blocking_reconnects(const wk_db *b);

#endif /* WK_CORE_BLOCKING_H */
