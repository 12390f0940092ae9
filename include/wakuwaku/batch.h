/*
 * wakuwaku/batch.h — many queries, one round trip (pipelining).
 *
 * A batch is a processor. Run queries through wk_batch_processor(batch)
 * exactly as through a handle — any kind, built-in or your own — and each
 * is checked and queued; wk_batch_exec() then sends all of them in one
 * write, reads every reply, and runs each query's parser, which fills its
 * OUT parameters.
 *
 *     wk_batch *b;
 *     wk_batch_open(&b, db);
 *     wk_token tokens[64];
 *     bool got[64];
 *     for (int i = 0; i < 64; i++)
 *         wk_lock_try(wk_batch_processor(b), &invoice, wk_name_u64(i), &tokens[i], &got[i]);
 *     int rc = wk_batch_exec(b);      // one round trip; got[] filled now
 *
 * SEMANTICS
 *  1. Capabilities are checked as each query is queued. A refused query
 *     returns WK_EDENIED at once and poisons the batch: wk_batch_exec() then
 *     sends nothing and returns WK_EDENIED with the refused query named.
 *  2. OUT parameters of queued queries are written during wk_batch_exec(),
 *     so they must stay valid until it returns. Everything else a call
 *     borrows (names, keys, bodies) is copied when the query is queued.
 *  3. A batch is one round trip, not a transaction. Redis runs the queries
 *     in order; if query 3 of 10 fails (WRONGTYPE, a corrupt item), queries
 *     4..10 still run. Each query has its own status (wk_batch_status());
 *     wk_batch_exec() returns WK_OK only if all of them succeeded, else the
 *     first failure's status, with its detail in wk_db_errmsg().
 *  4. Scripts: a query answered NOSCRIPT did not run; after reading all
 *     replies the batch loads the script by re-sending exactly those queries
 *     as EVAL (a second round trip). Nothing runs twice, but those queries
 *     run after the rest of the batch.
 *  5. Outcomes follow the handle's rule (wakuwaku/db.h, OUTCOMES): if the
 *     connection drops or times out midway, queries whose reply was read
 *     keep their outcome; writes sent without a reply get WK_EUNKNOWN (may
 *     or may not have run); writes never sent — or answered NOSCRIPT and
 *     cut off before the re-send — get WK_EIO / WK_ETIMEDOUT (did not run).
 *     After a dropped connection (not a timeout) the batch reconnects once
 *     and sends again what never ran and the retry-safe reads whose reply
 *     was lost; writes sent without a reply are never re-sent.
 *  6. After wk_batch_exec() the statuses stay readable until the next query
 *     is queued, which starts a new batch; buffers are reused, so a batch
 *     in steady use allocates nothing of its own.
 *
 * THREADS: a batch belongs to its handle's thread, like the handle.
 */
#ifndef WAKUWAKU_BATCH_H
#define WAKUWAKU_BATCH_H

#include <wakuwaku/db.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct wk_batch wk_batch;

/* wk_batch_open — a batch on `db` (checked against db's capability).
 * *out is NULL on failure. Returns WK_OK, WK_EINVAL or WK_ENOMEM. The
 * batch must be closed before `db`. */
WK_API int wk_batch_open(wk_batch **out, wk_db *db);

/* wk_batch_close — free the batch, dropping queued queries unsent.
 * NULL is a harmless no-op. */
WK_API void wk_batch_close(wk_batch *batch);

/* wk_batch_processor — the processor that queues into this batch
 * (flags WK_PROCESSOR_DEFERRED). Borrowed; valid until close. */
WK_API wk_processor *wk_batch_processor(wk_batch *batch);

/* wk_batch_exec — send the queued queries in one round trip and parse
 * every reply. An empty batch is WK_OK without a round trip. See
 * SEMANTICS for the return value. */
WK_API int wk_batch_exec(wk_batch *batch);

/* wk_batch_discard — drop the queued queries without sending anything. */
WK_API void wk_batch_discard(wk_batch *batch);

/* wk_batch_count — queries queued (or, after exec, executed). */
WK_API size_t wk_batch_count(const wk_batch *batch);

/* wk_batch_status — status of query i (in queuing order) of the last
 * exec; WK_EINVAL when i is out of range. */
WK_API int wk_batch_status(const wk_batch *batch, size_t i);

#ifdef __cplusplus
}
#endif

#endif /* WAKUWAKU_BATCH_H */
