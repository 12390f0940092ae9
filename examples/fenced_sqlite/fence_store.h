/*
 * examples/fenced_sqlite/fence_store.h — a resource that refuses stale lock
 * holders: a SQLite table of accounts whose every row remembers the fence
 * of the write that made it. A write carries the writer's fence
 * (wakuwaku/fenced_lock.h) and is applied only if that fence is greater
 * than the row's, so a holder whose lease ran out while it was paused
 * cannot overwrite what the holder after it wrote.
 *
 * It also detects a reset of the fence counter (FLUSHALL, failover without
 * persistence): a fresh counter hands out fences the rows have already
 * seen, and every such write is refused rather than accepted out of order.
 *
 * Thread-safety: as the sqlite3 handle (one per thread or process).
 */
#ifndef FENCE_STORE_H
#define FENCE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sqlite3.h>

/* Open (create) the store at `path` with its table. SQLITE_OK, or an
 * SQLite error code with *db NULL. Close with sqlite3_close(). */
int fence_store_open(sqlite3 **db, const char *path);

/*
 * Set account `id` to `balance` under `fence`. One statement: insert the
 * row, or update it only WHERE its fence < `fence`. *applied (OUT) is
 * false when a write with an equal or greater fence came first: the
 * caller's lease is stale, and it must stop. SQLITE_OK or an SQLite error.
 */
int fence_store_write(sqlite3 *db, const char *id, int64_t balance, int64_t fence, bool *applied);

/* The balance and fence of account `id`; *found false when there is no
 * row. SQLITE_OK or an SQLite error. */
int fence_store_read(sqlite3 *db, const char *id, int64_t *balance, int64_t *fence, bool *found);

#endif /* FENCE_STORE_H */
