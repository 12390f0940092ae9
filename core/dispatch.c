/*
 * core/dispatch.c — the handle's processor: where queries become Redis
 * commands.
 *
 *   1. admit: the query is well formed and the capability covers its
 *      effect; otherwise fail before anything is sent;
 *   2. format it as RESP into the connection's reusable buffer (scripts as
 *      EVALSHA);
 *   3. run it as an exchange of one (core/exchange.c), the mechanism
 *      batches use too: send, read the reply, NOSCRIPT → EVAL, the outcome
 *      rule for a lost reply;
 *   4. error replies become WK_EREDIS; anything else goes to the parser.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cluster.h"
#include "core/db_internal.h"
#include "core/exchange.h"
#include "core/core_internal.h"

/* ------------------------------------------------------------------------
 * Replies: wk_reply is an opaque view of a hiredis reply.
 * ---------------------------------------------------------------------- */

static const redisReply *R(const wk_reply *r)
{
    return (const redisReply *)r;
}

wk_reply_type wk_reply_get_type(const wk_reply *reply)
{
    if (!reply)
        return WK_REPLY_OTHER;
    switch (R(reply)->type) {
    case REDIS_REPLY_STRING:
        return WK_REPLY_STRING;
    case REDIS_REPLY_ARRAY:
        return WK_REPLY_ARRAY;
    case REDIS_REPLY_INTEGER:
        return WK_REPLY_INTEGER;
    case REDIS_REPLY_NIL:
        return WK_REPLY_NIL;
    case REDIS_REPLY_STATUS:
        return WK_REPLY_STATUS;
    case REDIS_REPLY_ERROR:
        return WK_REPLY_ERROR;
    }
    return WK_REPLY_OTHER;
}

long long wk_reply_integer(const wk_reply *reply)
{
    return reply && R(reply)->type == REDIS_REPLY_INTEGER ? R(reply)->integer : 0;
}

const char *wk_reply_str(const wk_reply *reply, size_t *len)
{
    if (reply) {
        int t = R(reply)->type;
        if (t == REDIS_REPLY_STRING || t == REDIS_REPLY_STATUS || t == REDIS_REPLY_ERROR) {
            if (len)
                *len = R(reply)->len;
            return R(reply)->str;
        }
    }
    if (len)
        *len = 0;
    return NULL;
}

size_t wk_reply_count(const wk_reply *reply)
{
    return reply && R(reply)->type == REDIS_REPLY_ARRAY ? R(reply)->elements : 0;
}

const wk_reply *wk_reply_at(const wk_reply *reply, size_t i)
{
    if (!reply || R(reply)->type != REDIS_REPLY_ARRAY || i >= R(reply)->elements)
        return NULL;
    return (const wk_reply *)R(reply)->element[i];
}

/* ------------------------------------------------------------------------
 * Admission: shape and capability, before anything is sent.
 * ---------------------------------------------------------------------- */

void wk__query_key(const wk_query *q, char *dst, size_t cap)
{
    int i = q->script ? 0 : 1;
    dst[0] = '\0';
    if ((q->script && q->nkeys < 1) || q->argc <= i || !q->argv[i])
        return;
    wk__render_key(dst, cap, q->argv[i], q->argvlen[i]);
}

int wk__db_admit(wk_db *db, const wk_query *q)
{
    const char *name = q->name ? q->name : "query";
    if (q->argc < 1 || !q->argv || !q->argvlen || (q->effect.count && !q->effect.accesses))
        return wk__db_fail(db, WK_EINVAL, "%s: malformed query (no arguments)", name);
    if (q->script && (q->nkeys < 0 || q->nkeys > q->argc || !q->script->source))
        return wk__db_fail(db, WK_EINVAL, "%s: malformed script query", name);
    size_t denied;
    if (!wk_cap_covers(db->cap, &q->effect, &denied)) {
        const wk_access *a = &q->effect.accesses[denied];
        if (!a->entity || !a->entity->kind || !a->entity->ns)
            return wk__db_fail(db, WK_EINVAL, "%s: access %zu names no entity", name, denied);
        return wk__db_fail(db, WK_EDENIED, "capability \"%s\" may not %s %s:%s (%s)",
                           wk_cap_name(db->cap), wk_mode_name(a->mode), a->entity->kind,
                           a->entity->ns, name);
    }
    /* A cluster runs a query on one node: its keys must share a slot. */
    if (db->conn && db->conn->cluster)
        return wk__cluster_check_keys(db, q);
    return WK_OK;
}

/* ------------------------------------------------------------------------
 * RESP formatting into the connection's reusable buffer.
 * ---------------------------------------------------------------------- */

int wk__buf_reserve(wk__buf *buf, size_t more)
{
    if (more > SIZE_MAX - buf->len)
        return WK_ENOMEM;
    return wk__grow_array_from(&buf->data, &buf->cap, buf->len + more, 1, 4096);
}

/* Writes "<prefix><n>\r\n" at p; returns the end. The caller reserved room. */
static inline char *put_header(char *p, char prefix, size_t n)
{
    *p++ = prefix;
    if (n < 10) {
        *p++ = (char)('0' + n); /* most headers: short arguments, few of them */
    } else if (n < 100) {
        *p++ = (char)('0' + n / 10);
        *p++ = (char)('0' + n % 10);
    } else {
        char digits[24], *d = digits + sizeof(digits);
        do {
            *--d = (char)('0' + n % 10);
            n /= 10;
        } while (n);
        size_t len = (size_t)(digits + sizeof(digits) - d);
        memcpy(p, d, len);
        p += len;
    }
    *p++ = '\r';
    *p++ = '\n';
    return p;
}

/* Writes one bulk string; returns the offset of its bytes. */
static inline size_t put_bulk(wk__buf *buf, const void *data, size_t len)
{
    char *p = put_header(buf->data + buf->len, '$', len);
    size_t at = (size_t)(p - buf->data);
    if (len)
        memcpy(p, data, len);
    p += len;
    *p++ = '\r';
    *p++ = '\n';
    buf->len = (size_t)(p - buf->data);
    return at;
}

const char *wk__script_sha(wk__conn *conn, const wk_script *script)
{
    for (size_t i = 0; i < conn->nscripts; i++) {
        if (conn->scripts[i].script == script)
            return conn->scripts[i].sha;
    }
    /* A full cache (more distinct scripts than slots) recycles the oldest
     * slot: slots fill in order 0, 1, …, and then a cursor walks them
     * round-robin, so the slot reused is always the one filled longest
     * ago. Correctness never depends on the cache (a miss only costs a
     * SHA-1). */
    size_t slot;
    if (conn->nscripts < WK__SCRIPT_CACHE) {
        slot = conn->nscripts++;
    } else {
        slot = conn->script_evict;
        conn->script_evict = (conn->script_evict + 1) % WK__SCRIPT_CACHE;
    }
    conn->scripts[slot].script = script;
    wk__sha1_hex(script->source, strlen(script->source), conn->scripts[slot].sha);
    return conn->scripts[slot].sha;
}

/* "WAIT <lease_replicas> <lease_ack_timeout_ms>" as RESP, appended. */
static int put_wait(wk_db *db, wk__buf *buf, const wk_query *q)
{
    const wk__conn *conn = db->conn;
    char n[24], ms[24];
    int nlen = snprintf(n, sizeof(n), "%d", conn->lease_replicas);
    int mslen = snprintf(ms, sizeof(ms), "%d", conn->lease_ack_timeout_ms);
    if (wk__buf_reserve(buf, 64 + (size_t)nlen + (size_t)mslen))
        return wk__db_fail(db, WK_ENOMEM, "%s: out of memory formatting its WAIT", q->name);
    buf->len = (size_t)(put_header(buf->data + buf->len, '*', 3) - buf->data);
    put_bulk(buf, "WAIT", 4);
    put_bulk(buf, n, (size_t)nlen);
    put_bulk(buf, ms, (size_t)mslen);
    return WK_OK;
}

int wk__format_query(wk_db *db, wk__buf *buf, const wk_query *q, bool as_eval, wk__span *spans,
                     size_t *command_end)
{
    wk__conn *conn = db->conn;
    const char *head = NULL;
    size_t head_len = 0;
    char nkeys[24];
    size_t nkeys_len = 0;
    int extra = 0;
    if (q->script) {
        extra = 3;
        if (as_eval) {
            head = q->script->source;
            head_len = strlen(head);
        } else {
            head = wk__script_sha(conn, q->script);
            head_len = 40;
        }
        /* ":<n>\r\n" minus the framing is the decimal text of n. */
        nkeys_len = (size_t)(put_header(nkeys, ':', (size_t)q->nkeys) - nkeys) - 3;
        memmove(nkeys, nkeys + 1, nkeys_len);
    }
    size_t need = 32 + (q->script ? 96 + head_len : 0);
    for (int i = 0; i < q->argc; i++) {
        if (!q->argv[i] && q->argvlen[i])
            return wk__db_fail(db, WK_EINVAL, "%s: argument %d is NULL", q->name, i);
        need += q->argvlen[i] + 32;
    }
    if (wk__buf_reserve(buf, need))
        return wk__db_fail(db, WK_ENOMEM, "%s: out of memory formatting the command", q->name);
    buf->len =
        (size_t)(put_header(buf->data + buf->len, '*', (size_t)(q->argc + extra)) - buf->data);
    if (q->script) {
        put_bulk(buf, as_eval ? "EVAL" : "EVALSHA", as_eval ? 4 : 7);
        put_bulk(buf, head, head_len);
        put_bulk(buf, nkeys, nkeys_len);
    }
    for (int i = 0; i < q->argc; i++) {
        size_t at = put_bulk(buf, q->argv[i], q->argvlen[i]);
        if (spans) {
            spans[i].off = at;
            spans[i].len = q->argvlen[i];
        }
    }
    if (command_end)
        *command_end = buf->len;
    /* Acknowledged leases: the WAIT rides in the same send, on the same
     * connection, so it counts the replicas that have this very write
     * (WAIT waits for the connection's own last write) and no failover,
     * pool or reconnect can come between the two. */
    return wk__query_acked(conn, q) ? put_wait(db, buf, q) : WK_OK;
}

/* ------------------------------------------------------------------------
 * Replies to outcomes
 * ---------------------------------------------------------------------- */

bool wk__reply_is_noscript(const redisReply *reply)
{
    return reply->type == REDIS_REPLY_ERROR && reply->len >= 8 &&
           memcmp(reply->str, "NOSCRIPT", 8) == 0;
}

bool wk__reply_node_demoted(const redisReply *reply)
{
    /* A command refused by a replica; a script's write refused inside it
     * ("READONLY … script: …" since Redis 7.0, or Redis 6's "ERR Error
     * running script … READONLY …"); or a blocking command (a waiter's
     * BLPOP, a receiver's BLMOVE or XREAD BLOCK) cut off because its
     * primary turned replica ("UNBLOCKED … instance state changed";
     * CLIENT UNBLOCK without ERROR, which the library sends, answers nil).
     * Either way nothing was written. */
    return reply->type == REDIS_REPLY_ERROR && reply->str &&
           (strncmp(reply->str, "READONLY", 8) == 0 || strncmp(reply->str, "UNBLOCKED", 9) == 0 ||
            (strncmp(reply->str, "ERR Error running script", 24) == 0 &&
             strstr(reply->str, "-READONLY")));
}

bool wk__reply_role_not_master(const redisReply *reply)
{
    const redisReply *r0 = reply->type == REDIS_REPLY_ARRAY && reply->elements ? reply->element[0]
                                                                               : NULL;
    return r0 && r0->type == REDIS_REPLY_STRING && !(r0->len == 6 && !memcmp(r0->str, "master", 6));
}

int wk__parse_reply(wk_db *db, const wk_query *q, const redisReply *reply, const redisReply *ack)
{
    if (reply->type == REDIS_REPLY_ERROR && !(q->flags & WK_QUERY_PARSE_ERRORS)) {
        char key[160];
        wk__query_key(q, key, sizeof(key));
        return wk__db_fail(db, WK_EREDIS, "%s%s%s%s: Redis replied: %.300s", q->name,
                           key[0] ? " on \"" : "", key, key[0] ? "\"" : "", reply->str);
    }
    if (!q->parse)
        return WK_OK;
    wk_diag diag = {db, q, ack};
    return q->parse(q, (const wk_reply *)reply, &diag);
}

int wk__lease_acknowledged(wk_diag *d, bool *held)
{
    const redisReply *ack = d->ack;
    if (!ack || !*held)
        return WK_OK;
    int want = d->db->conn->lease_replicas;
    if (ack->type == REDIS_REPLY_INTEGER && ack->integer >= want)
        return WK_OK;
    *held = false;
    wk__bump(&wk__counters(d->db->conn)->not_replicated);
    /* (wk_diag_fail puts the query's name in front.) */
    if (ack->type == REDIS_REPLY_INTEGER)
        return wk_diag_fail(d, WK_ENOTREPLICATED,
                            "%lld of %d replica(s) acknowledged the lease within %d ms",
                            ack->integer, want, d->db->conn->lease_ack_timeout_ms);
    return wk_diag_fail(d, WK_ENOTREPLICATED, "the lease's WAIT failed: %.200s",
                        ack->type == REDIS_REPLY_ERROR && ack->str ? ack->str : "not an integer");
}

/* ------------------------------------------------------------------------
 * A single query: an exchange of one (core/exchange.c)
 * ---------------------------------------------------------------------- */

int wk__db_process(wk_processor *self, wk_query *q)
{
    wk_db *db = (wk_db *)self;
    if (!db || !q)
        return WK_EINVAL;
    db->errmsg[0] = '\0';
    if (!q->name)
        q->name = "query";
    int rc = wk__db_admit(db, q);
    if (rc)
        return rc;
    return wk__exchange_run_one(db, q, NULL, 0);
}

bool wk_processor_is_deferred(const wk_processor *processor)
{
    return processor && (processor->flags & WK_PROCESSOR_DEFERRED);
}

int wk_process(wk_processor *processor, wk_query *query)
{
    if (!processor || !processor->process || !query)
        return WK_EINVAL;
    return processor->process(processor, query);
}
