/*
 * core/exchange.c — runs an exchange (core/exchange.h): write every
 * pending command in one go, read one reply per written command, and
 * settle each query by its state. NOSCRIPT sends that query again as EVAL;
 * a dropped connection sends again, on a new connection, what never ran
 * and what is retry-safe; nothing else is ever re-sent.
 */
#include <stdio.h>
#include <string.h>

#include <wakuwaku/clock.h>

#include "core/exchange.h"

/* An exchange needs at most: the first round, one for NOSCRIPT, one after
 * a reconnect, one for NOSCRIPT on the new connection; a Sentinel
 * handle's READONLY re-send adds one (and its NOSCRIPT one more). */
#define MAX_ROUNDS 8

typedef struct run {
    wk__exchange *x;
    int conn_rc;             /* status of the connection failure, or WK_OK */
    char why[WK__ERRMSG_MAX / 2]; /* its detail */
    size_t first_failed;     /* first query with its own failure */
    char first_msg[WK__ERRMSG_MAX / 2];
    bool readonly; /* a reply was READONLY: drop, re-discover */
} run;

static bool any_unsent(const wk__exchange *x)
{
    for (size_t i = 0; i < x->count; i++)
        if (x->slots[i].state == WK__UNSENT)
            return true;
    return false;
}

static void settle(run *r, size_t i, int status)
{
    wk__slot *s = &r->x->slots[i];
    s->state = WK__REPLIED;
    s->status = status;
    if (status != WK_OK && r->first_failed == SIZE_MAX) {
        r->first_failed = i;
        wk__copy_text(r->first_msg, sizeof(r->first_msg), r->x->db->errmsg);
    }
}

/* Format every UNSENT slot into conn->out; a query that cannot be
 * formatted is settled with that failure, never sent. */
static void format_pending(run *r)
{
    wk__exchange *x = r->x;
    wk__buf *out = &x->db->conn->out;
    out->len = 0;
    for (size_t i = 0; i < x->count; i++) {
        wk__slot *s = &x->slots[i];
        if (s->state != WK__UNSENT)
            continue;
        int rc = wk__format_query(x->db, out, x->query(x->ctx, i), s->as_eval, NULL);
        if (rc)
            settle(r, i, rc);
        else
            s->end = out->len;
    }
}

/* The connection failed: every query written on it without a reply is
 * LOST; drop it (the next round or query reconnects). */
static void lose_connection(run *r, int rc)
{
    wk__exchange *x = r->x;
    wk__conn *conn = x->db->conn;
    for (size_t i = 0; i < x->count; i++) {
        wk__slot *s = &x->slots[i];
        if (s->state == WK__SENT) {
            s->state = WK__LOST;
            s->status = wk__lost_status(s->writes, rc);
        }
    }
    r->conn_rc = rc;
    const char *why = conn->link.ctx && conn->link.ctx->errstr[0] ? conn->link.ctx->errstr : "connection lost";
    wk__copy_text(r->why, sizeof(r->why), why);
    wk__conn_drop(conn);
}

/* One round: write what is pending, read a reply per command written. */
static void round_trip(run *r, bool first_round)
{
    wk__exchange *x = r->x;
    wk__conn *conn = x->db->conn;
    const char *data = x->prepared;
    size_t len = x->prepared_len;
    if (!first_round || !data) {
        format_pending(r);
        data = conn->out.data;
        len = conn->out.len;
    }
    if (!any_unsent(x))
        return;
    size_t written;
    int rc = wk__wire_write(&conn->link, data, len, conn->command_timeout, &written);
    /* A blocking command's reply may come as late as its block time. */
    struct timeval read_timeout = conn->command_timeout;
    if (conn->extra_wait_ms > 0) {
        int64_t us = (int64_t)read_timeout.tv_sec * 1000000 + read_timeout.tv_usec +
                     conn->extra_wait_ms * 1000;
        read_timeout.tv_sec = (time_t)(us / 1000000);
        read_timeout.tv_usec = (suseconds_t)(us % 1000000);
    }
    for (size_t i = 0; i < x->count; i++) {
        wk__slot *s = &x->slots[i];
        /* A command the kernel did not take whole never reaches Redis. */
        if (s->state == WK__UNSENT && s->end <= written)
            s->state = WK__SENT;
    }
    if (rc) {
        lose_connection(r, rc);
        return;
    }
    for (size_t i = 0; i < x->count; i++) {
        wk__slot *s = &x->slots[i];
        if (s->state != WK__SENT)
            continue;
        redisReply *reply;
        rc = wk__wire_read(&conn->link, read_timeout, &reply);
        if (rc) {
            lose_connection(r, rc);
            return;
        }
        const wk_query *q = x->query(x->ctx, i);
        if (q->script && !s->as_eval && wk__reply_is_noscript(reply)) {
            s->state = WK__UNSENT; /* it did not run */
            s->as_eval = true;
        } else if (conn->url.service && !s->readonly && wk__reply_is_readonly(reply)) {
            /* A replica refused it (a failover made this node one): it
             * did not run; it goes to the primary the sentinels name. */
            s->state = WK__UNSENT;
            s->readonly = true;
            r->readonly = true;
        } else {
            settle(r, i, wk__parse_reply(x->db, q, reply));
        }
        freeReplyObject(reply);
    }
    conn->last_io_ms = wk_monotonic_ms();
    if (r->readonly) {
        r->readonly = false;
        wk__conn_drop(conn); /* the next round asks the sentinels again */
    }
}

/* After a dropped connection: what may go again on a new one. */
static bool plan_resend(run *r)
{
    wk__exchange *x = r->x;
    bool any = false;
    for (size_t i = 0; i < x->count; i++) {
        wk__slot *s = &x->slots[i];
        if (s->state == WK__LOST &&
            wk__may_resend(x->query(x->ctx, i)->flags, s->resent, r->conn_rc)) {
            s->state = WK__UNSENT;
            s->resent = true;
        }
        any |= s->state == WK__UNSENT;
    }
    return any;
}

/* The final message when the connection failed: which query, and what
 * that means for writes. */
static int connection_result(run *r, size_t at, size_t lost, size_t unsent)
{
    wk__exchange *x = r->x;
    const wk__slot *s = &x->slots[at];
    const char *name = x->query(x->ctx, at)->name;
    if (x->count == 1)
        return wk__db_fail(x->db, s->status, "%s: %s%s", name, r->why,
                           s->status == WK_EUNKNOWN ? " (the write may or may not have happened)"
                           : s->writes              ? " (not sent: the write did not happen)"
                                                    : "");
    return wk__db_fail(x->db, s->status,
                       "batch: connection lost at query %zu (%s): %s; %zu sent without reply, "
                       "%zu not sent",
                       at, name, r->why, lost, unsent);
}

int wk__exchange_run(wk__exchange *x)
{
    run r; /* not zero-filled: its texts are written before being read */
    r.x = x;
    r.conn_rc = WK_OK;
    r.first_failed = SIZE_MAX;
    r.readonly = false;
    bool reconnected = false;
    for (int round = 0; round < MAX_ROUNDS && any_unsent(x); round++) {
        int rc = wk__conn_ensure(x->db);
        if (rc) {
            /* Nothing more can be sent; the handle has the message. */
            r.conn_rc = rc;
            wk__copy_text(r.why, sizeof(r.why), x->db->errmsg);
            break;
        }
        round_trip(&r, round == 0);
        if (r.conn_rc == WK_OK)
            continue;
        /* A dropped connection (not a timeout: a stalled server would stall
         * again) gets one new connection for what may be sent again. */
        if (r.conn_rc == WK_EIO && !reconnected && plan_resend(&r)) {
            reconnected = true;
            r.conn_rc = WK_OK;
            continue;
        }
        break;
    }
    if (r.conn_rc == WK_OK && any_unsent(x)) {
        r.conn_rc = WK_EIO; /* cannot happen with a sane server */
        wk__copy_text(r.why, sizeof(r.why), "gave up after repeated NOSCRIPT replies");
    }
    size_t lost = 0, unsent = 0, first_cut = SIZE_MAX;
    for (size_t i = 0; i < x->count; i++) {
        wk__slot *s = &x->slots[i];
        if (s->state == WK__LOST) {
            lost++;
        } else if (s->state == WK__UNSENT) {
            s->status = r.conn_rc;
            unsent++;
        } else {
            continue;
        }
        if (first_cut == SIZE_MAX)
            first_cut = i;
    }
    if (first_cut != SIZE_MAX) {
        /* Nothing was written at all: keep the connection's own message. */
        if (unsent == x->count && !reconnected)
            return wk__db_fail(x->db, r.conn_rc, "%s", r.why);
        return connection_result(&r, first_cut, lost, unsent);
    }
    if (r.first_failed == SIZE_MAX)
        return WK_OK;
    int st = x->slots[r.first_failed].status;
    if (x->count == 1)
        return wk__db_fail(x->db, st, "%s", r.first_msg);
    return wk__db_fail(x->db, st, "batch query %zu failed: %s", r.first_failed,
                       r.first_msg[0] ? r.first_msg : wk_strerror(st));
}
