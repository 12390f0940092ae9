/*
 * core/batch.c — pipelined batches (see wakuwaku/batch.h for semantics).
 *
 * Queuing admits the query (shape, capability) and formats its command
 * into the batch's own RESP buffer at once, recording where each argument
 * landed; the caller's stack can then go away. exec runs the queries as
 * one exchange (core/exchange.c, the mechanism single queries use too),
 * handing it the formatted buffer and, per query, a query whose argv
 * points back into the buffer (so parsers and messages still see keys).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/exchange.h"

#include <wakuwaku/batch.h>

typedef struct entry {
    const char *name;
    unsigned flags;
    const wk_script *script;
    int nkeys, argc;
    size_t first_span; /* index into batch->spans */
    wk_parse_fn parse;
    void *out;
} entry;

struct wk_batch {
    wk_processor proc; /* first member */
    wk_db *db;
    entry *entries;
    wk__slot *slots; /* state and status per entry */
    size_t count, cap, slots_cap;
    wk__span *spans;
    size_t nspans, spans_cap;
    wk__buf buf;
    wk_query scratch;  /* an entry rebuilt as a query */
    const char **argv; /* its arguments, pointing into buf */
    size_t *argvlen;
    size_t argv_cap, argvlen_cap;
    bool executed; /* statuses belong to the last exec */
    int refused;   /* first refusal; poisons the batch */
    char refusal[WK__ERRMSG_MAX + 32];
};

static void reset(wk_batch *b)
{
    b->count = 0;
    b->nspans = 0;
    b->buf.len = 0;
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
    /* Room for everything exec needs, so exec itself cannot run out. */
    if (wk__grow_array((void **)&b->entries, &b->cap, b->count + 1, sizeof(entry)) ||
        wk__grow_array((void **)&b->slots, &b->slots_cap, b->count + 1, sizeof(wk__slot)) ||
        wk__grow_array((void **)&b->spans, &b->spans_cap, b->nspans + (size_t)q->argc,
                       sizeof(wk__span)) ||
        wk__grow_array((void **)&b->argv, &b->argv_cap, (size_t)q->argc, sizeof(char *)) ||
        wk__grow_array((void **)&b->argvlen, &b->argvlen_cap, (size_t)q->argc, sizeof(size_t)))
        return wk__db_fail(db, WK_ENOMEM, "%s: out of memory queuing", q->name);
    size_t mark = b->buf.len, command_end = 0;
    rc = wk__format_query(db, &b->buf, q, false, b->spans + b->nspans, &command_end);
    if (rc) {
        b->buf.len = mark;
        return rc;
    }
    b->slots[b->count] = (wk__slot){.state = WK__UNSENT,
                                    .writes = wk_effect_is_write(&q->effect),
                                    .keyless = q->effect.count == 0,
                                    .end = command_end};
    entry *e = &b->entries[b->count++];
    *e = (entry){.name = q->name,
                 .flags = q->flags,
                 .script = q->script,
                 .nkeys = q->nkeys,
                 .argc = q->argc,
                 .first_span = b->nspans,
                 .parse = q->parse,
                 .out = q->out};
    b->nspans += (size_t)q->argc;
    return WK_OK;
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
    free(b->entries);
    free(b->slots);
    free(b->spans);
    free(b->buf.data);
    free(b->argv);
    free(b->argvlen);
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
    return b ? b->count : 0;
}

int wk_batch_status(const wk_batch *b, size_t i)
{
    if (!b || i >= b->count)
        return WK_EINVAL;
    return b->slots[i].status;
}

/* Entry i as a query again, its arguments pointing into the buffer (room
 * for them was made when it was queued). */
static const wk_query *rebuild(void *ctx, size_t i)
{
    wk_batch *b = ctx;
    const entry *e = &b->entries[i];
    for (int k = 0; k < e->argc; k++) {
        const wk__span *s = &b->spans[e->first_span + (size_t)k];
        b->argv[k] = b->buf.data + s->off;
        b->argvlen[k] = s->len;
    }
    b->scratch = (wk_query){.name = e->name,
                            .flags = e->flags,
                            .script = e->script,
                            .nkeys = e->nkeys,
                            .argc = e->argc,
                            .argv = b->argv,
                            .argvlen = b->argvlen,
                            .parse = e->parse,
                            .out = e->out};
    return &b->scratch;
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
        for (size_t i = 0; i < b->count; i++)
            b->slots[i] = (wk__slot){.state = WK__REPLIED, .status = b->refused};
        return wk__db_fail(db, b->refused, "%s", b->refusal);
    }
    if (b->count == 0)
        return WK_OK;
    wk__exchange x = {.db = db,
                      .slots = b->slots,
                      .count = b->count,
                      .query = rebuild,
                      .ctx = b,
                      .prepared = b->buf.data,
                      .prepared_len = b->buf.len};
    return wk__exchange_run(&x);
}
