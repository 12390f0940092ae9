/*
 * core/batch.c — pipelined batches (see wakuwaku/batch.h for semantics).
 *
 * Queuing admits the query (shape, capability) and keeps it formatted
 * (core/kept.c); the caller's stack can then go away. exec runs the
 * queries as one exchange (core/exchange.c, the mechanism single queries
 * use too), handing it the formatted commands and, per query, a query
 * whose argv points back into them (so parsers and messages still see
 * keys).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/exchange.h"

#include <wakuwaku/batch.h>

struct wk_batch {
    wk_processor proc; /* first member */
    wk_db *db;
    wk__kept q;    /* the queries, their slots and commands */
    bool executed; /* statuses belong to the last exec */
    int refused;   /* first refusal; poisons the batch */
    char refusal[WK__ERRMSG_MAX + 32];
};

static void reset(wk_batch *b)
{
    b->q.count = 0;
    b->q.nspans = 0;
    b->q.buf.len = 0;
    b->executed = false;
    b->refused = WK_OK;
    b->refusal[0] = '\0';
}

static int batch_process(wk_processor *self, wk_query *q)
{
    wk_batch *b = (wk_batch *)self;
    wk_db *db = b->db;
    if (!q)
        return WK_EINVAL;
    if (b->executed)
        reset(b);
    db->errmsg[0] = '\0';
    if (!q->name)
        q->name = "query";
    int rc = wk__db_admit(db, q);
    if (rc) {
        if (rc == WK_EDENIED && !b->refused) {
            b->refused = rc;
            snprintf(b->refusal, sizeof(b->refusal), "batch refused: %s", db->errmsg);
        }
        return rc;
    }
    return wk__kept_add(&b->q, db, q);
}

int wk_batch_open(wk_batch **out, wk_db *db)
{
    if (!out)
        return WK_EINVAL;
    *out = NULL;
    if (!db)
        return WK_EINVAL;
    if (db->pool)
        return wk__db_fail(db, WK_EINVAL,
                           "batch: a pool's shared processor has no connection of its own; "
                           "open the batch on a handle from wk_pool_borrow()");
    wk_batch *b = calloc(1, sizeof(*b));
    if (!b)
        return WK_ENOMEM;
    b->proc.process = batch_process;
    b->proc.db = db;
    b->proc.flags = WK_PROCESSOR_DEFERRED;
    b->db = db;
    *out = b;
    return WK_OK;
}

void wk_batch_close(wk_batch *b)
{
    if (!b)
        return;
    wk__kept_free(&b->q);
    free(b);
}

wk_processor *wk_batch_processor(wk_batch *b)
{
    return b ? &b->proc : NULL;
}

void wk_batch_discard(wk_batch *b)
{
    if (b)
        reset(b);
}

size_t wk_batch_count(const wk_batch *b)
{
    return b ? b->q.count : 0;
}

int wk_batch_status(const wk_batch *b, size_t i)
{
    if (!b || i >= b->q.count)
        return WK_EINVAL;
    return b->q.slots[i].status;
}

int wk_batch_exec(wk_batch *b)
{
    if (!b)
        return WK_EINVAL;
    wk_db *db = b->db;
    if (b->executed)
        reset(b);
    b->executed = true;
    if (b->refused) {
        /* Nothing was sent: every queued query is refused with the batch. */
        for (size_t i = 0; i < b->q.count; i++)
            b->q.slots[i] = (wk__slot){.state = WK__REPLIED, .status = b->refused};
        return wk__db_fail(db, b->refused, "%s", b->refusal);
    }
    if (b->q.count == 0)
        return WK_OK;
    wk__exchange x = {.db = db,
                      .slots = b->q.slots,
                      .count = b->q.count,
                      .query = wk__kept_query,
                      .ctx = &b->q,
                      .prepared = b->q.buf.data,
                      .prepared_len = b->q.buf.len};
    return wk__exchange_run(&x);
}
