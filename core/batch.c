/*
 * core/batch.c — pipelined batches (see wakuwaku/batch.h for semantics).
 *
 * Queuing admits the query (shape, capability) and formats its command
 * into the batch's own RESP buffer at once, recording where each argument
 * landed; the caller's stack can then go away. exec writes the whole
 * buffer, reads one reply per query, and hands each parser a query whose
 * argv points back into the buffer (so messages can still name keys).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/db_internal.h"

#include <wakuwaku/batch.h>

typedef struct entry {
    const char *name;
    unsigned flags;
    const wk_script *script;
    int nkeys, argc;
    size_t first_span;     /* index into batch->spans */
    wk_parse_fn parse;
    void *out;
    bool writes;
    bool needs_eval;       /* answered NOSCRIPT: re-send as EVAL */
    int status;
} entry;

struct wk_batch {
    wk_processor proc;     /* first member */
    wk_db *db;
    entry *entries;
    size_t count, cap;
    wk__span *spans;
    size_t nspans, spans_cap;
    wk__buf buf;
    const char **argv;     /* scratch for rebuilt queries */
    size_t *argvlen;
    size_t argv_cap, argvlen_cap;
    bool executed;         /* statuses belong to the last exec */
    int refused;           /* first refusal; poisons the batch */
    char refusal[WK__ERRMSG_MAX + 32];
    char first_failure[WK__ERRMSG_MAX / 2]; /* detail of the first failed query */
};

static void reset(wk_batch *b)
{
    b->count = 0;
    b->nspans = 0;
    b->buf.len = 0;
    b->executed = false;
    b->refused = WK_OK;
    b->refusal[0] = '\0';
    b->first_failure[0] = '\0';
}

static int grow(void **arr, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return WK_OK;
    size_t n = *cap ? *cap : 16;
    while (n < need)
        n *= 2;
    void *p = realloc(*arr, n * size);
    if (!p)
        return WK_ENOMEM;
    *arr = p;
    *cap = n;
    return WK_OK;
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
    if (grow((void **)&b->entries, &b->cap, b->count + 1, sizeof(entry)) ||
        grow((void **)&b->spans, &b->spans_cap, b->nspans + (size_t)q->argc, sizeof(wk__span)))
        return wk__db_fail(db, WK_ENOMEM, "%s: out of memory queuing", q->name);
    size_t mark = b->buf.len;
    rc = wk__format_query(db, &b->buf, q, false, b->spans + b->nspans);
    if (rc) {
        b->buf.len = mark;
        return rc;
    }
    entry *e = &b->entries[b->count++];
    *e = (entry){.name = q->name,
                 .flags = q->flags,
                 .script = q->script,
                 .nkeys = q->nkeys,
                 .argc = q->argc,
                 .first_span = b->nspans,
                 .parse = q->parse,
                 .out = q->out,
                 .writes = wk_effect_is_write(&q->effect),
                 .status = WK_OK};
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
    return b->entries[i].status;
}

/* The entry as a query again, its arguments pointing into the buffer. */
static int rebuild(wk_batch *b, const entry *e, wk_query *q)
{
    if (grow((void **)&b->argv, &b->argv_cap, (size_t)e->argc, sizeof(char *)) ||
        grow((void **)&b->argvlen, &b->argvlen_cap, (size_t)e->argc, sizeof(size_t)))
        return WK_ENOMEM;
    for (int i = 0; i < e->argc; i++) {
        const wk__span *s = &b->spans[e->first_span + (size_t)i];
        b->argv[i] = b->buf.data + s->off;
        b->argvlen[i] = s->len;
    }
    *q = (wk_query){.name = e->name,
                    .flags = e->flags,
                    .script = e->script,
                    .nkeys = e->nkeys,
                    .argc = e->argc,
                    .argv = b->argv,
                    .argvlen = b->argvlen,
                    .parse = e->parse,
                    .out = e->out};
    return WK_OK;
}

/* Parse one reply into its entry; NOSCRIPT marks it for a re-send. */
static void settle(wk_batch *b, entry *e, redisReply *reply, bool allow_noscript)
{
    if (allow_noscript && e->script && wk__reply_is_noscript(reply)) {
        e->needs_eval = true;
        return;
    }
    wk_query q;
    e->status = rebuild(b, e, &q);
    if (e->status == WK_OK)
        e->status = wk__parse_reply(b->db, &q, reply);
    if (e->status != WK_OK && !b->first_failure[0])
        wk__copy_text(b->first_failure, sizeof(b->first_failure), b->db->errmsg);
}

/* Entries [from, count) in `wanted` lost their replies. */
static void lose_rest(wk_batch *b, size_t from, bool only_eval, int conn_status)
{
    for (size_t j = from; j < b->count; j++) {
        entry *e = &b->entries[j];
        if (only_eval && !e->needs_eval)
            continue;
        e->needs_eval = false;
        e->status = e->writes && conn_status == WK_EIO ? WK_EUNKNOWN : conn_status;
    }
}

/* Write `data` and read one reply per entry (all, or only needs_eval). */
static int pipeline(wk_batch *b, const char *data, size_t len, bool only_eval)
{
    wk__conn *conn = b->db->conn;
    redisContext *c = conn->ctx;
    if (redisAppendFormattedCommand(c, data, len) != REDIS_OK) {
        lose_rest(b, 0, only_eval, WK_ENOMEM);
        return WK_ENOMEM;
    }
    for (size_t i = 0; i < b->count; i++) {
        entry *e = &b->entries[i];
        if (only_eval && !e->needs_eval)
            continue;
        redisReply *reply = NULL;
        if (redisGetReply(c, (void **)&reply) != REDIS_OK || !reply) {
            int rc = wk__conn_error_status(c);
            wk__db_fail(b->db, rc, "batch: connection lost at query %zu (%s): %s", i, e->name,
                        c->errstr[0] ? c->errstr : "no reply");
            wk__conn_drop(conn);
            lose_rest(b, i, only_eval, rc);
            return rc;
        }
        if (only_eval)
            e->needs_eval = false;
        settle(b, e, reply, !only_eval);
        freeReplyObject(reply);
    }
    conn->last_io_ms = wk__now_ms();
    return WK_OK;
}

/* Re-send the queries that met NOSCRIPT as EVAL, which loads the script. */
static int resend_as_eval(wk_batch *b)
{
    wk__conn *conn = b->db->conn;
    conn->out.len = 0;
    bool any = false;
    for (size_t i = 0; i < b->count; i++) {
        entry *e = &b->entries[i];
        if (!e->needs_eval)
            continue;
        wk_query q;
        int rc = rebuild(b, e, &q);
        if (!rc)
            rc = wk__format_query(b->db, &conn->out, &q, true, NULL);
        if (rc) {
            e->needs_eval = false;
            e->status = rc;
            continue;
        }
        any = true;
    }
    if (!any)
        return WK_OK;
    return pipeline(b, conn->out.data, conn->out.len, true);
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
            b->entries[i].status = b->refused;
        return wk__db_fail(db, b->refused, "%s", b->refusal);
    }
    if (b->count == 0)
        return WK_OK;
    int rc = wk__conn_ensure(db);
    if (rc) {
        for (size_t i = 0; i < b->count; i++)
            b->entries[i].status = rc;
        return rc;
    }
    rc = pipeline(b, b->buf.data, b->buf.len, false);
    if (rc == WK_OK)
        rc = resend_as_eval(b);
    if (rc != WK_OK)
        return rc; /* the connection failed: its message is on the handle */
    /* Otherwise the first failed query decides the result. */
    for (size_t i = 0; i < b->count; i++) {
        int st = b->entries[i].status;
        if (st != WK_OK)
            return wk__db_fail(db, st, "batch query %zu failed: %s", i,
                               b->first_failure[0] ? b->first_failure : wk_strerror(st));
    }
    return WK_OK;
}
