/*
 * core/exchange.c — runs an exchange (core/exchange.h): write every
 * pending command in one go, read one reply per written command, and
 * settle each query by its state. NOSCRIPT sends that query again as EVAL;
 * a dropped connection sends again, on a new connection, what never ran
 * and what is retry-safe; nothing else is ever re-sent.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <wakuwaku/clock.h>

#include "core/cluster.h"
#include "core/exchange.h"
#include "core/core_internal.h"

/* An exchange needs at most: the first round, one for NOSCRIPT, one after
 * a reconnect, one for NOSCRIPT on the new connection; a Sentinel
 * handle's READONLY re-send adds one (and its NOSCRIPT one more). */
#define MAX_ROUNDS 8
/* A cluster handle's exchange also follows redirections and pauses on
 * TRYAGAIN / CLUSTERDOWN, within the command timeout. */
#define CLUSTER_MAX_ROUNDS 64
#define MAX_REDIRECTS 5
#define TRY_LATER_FIRST_PAUSE_MS 10
#define TRY_LATER_MAX_PAUSE_MS 100
/* A single-key form is built on the stack: queries of up to this many
 * arguments have one (the lease scripts have at most 11). */
#define WK__SINGLE_KEY_MAX_ARGS 16

typedef struct run {
    wk__exchange *x;
    int conn_rc;                  /* status of the connection failure, or WK_OK */
    char why[WK__ERRMSG_MAX / 2]; /* its detail */
    size_t first_failed;          /* first query with its own failure */
    char first_msg[WK__ERRMSG_MAX / 2];
    bool readonly;  /* a reply was READONLY: drop, re-discover */
    bool try_later; /* a reply was TRYAGAIN / CLUSTERDOWN: pause, send again */
    bool gave_up;   /* … until the command timeout: sent, answered, not run */
    /* The call's one deadline (wk__boot_ms()), fixed when it starts: every
     * write, read, reconnect and pause of the exchange ends by it. */
    int64_t deadline;
} run;

/* Where a round's commands go: the handle's one connection, or one node
 * of a cluster handle (only the slots routed to it). */
typedef struct lane {
    wk__link *link;
    wk__buf *out;
    int64_t *last_io_ms;
    uint16_t node; /* WK__NO_NODE: the handle's connection, every slot */
    const char *data;
    size_t len;
} lane;

static bool on_lane(const wk__slot *s, const lane *l)
{
    return l->node == WK__NO_NODE || s->node == l->node;
}

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

/* The form of query q that slot s sends: q itself, or after a TRYAGAIN its
 * single-key form (core/core_internal.h) over `argv` / `lens` (room for
 * q->argc each): the form's key, then the arguments. */
static const wk_query *sent_form(const wk_query *q, const wk__slot *s, wk_query *tmp,
                                 const char **argv, size_t *lens)
{
    if (!s->single_key)
        return q;
    const wk__two_forms *forms = (const wk__two_forms *)q->script;
    *tmp = *q;
    tmp->script = forms->single_key;
    tmp->nkeys = 1;
    tmp->argc = 0;
    for (int i = 0; i < q->argc; i++) {
        if (i < q->nkeys && i != forms->key)
            continue;
        argv[tmp->argc] = q->argv[i];
        lens[tmp->argc++] = q->argvlen[i];
    }
    tmp->argv = argv;
    tmp->argvlen = lens;
    return tmp;
}

/* Format every UNSENT slot of the lane into its buffer; a query that
 * cannot be formatted is settled with that failure, never sent. */
static void format_pending(run *r, lane *l)
{
    static const char asking[] = "*1\r\n$6\r\nASKING\r\n";
    wk__exchange *x = r->x;
    wk__buf *out = l->out;
    out->len = 0;
    for (size_t i = 0; i < x->count; i++) {
        wk__slot *s = &x->slots[i];
        if (s->state != WK__UNSENT || !on_lane(s, l))
            continue;
        size_t mark = out->len;
        int rc = WK_OK;
        if (s->asking) {
            rc = wk__buf_reserve(out, sizeof(asking) - 1);
            if (rc)
                rc = wk__db_fail(x->db, rc, "out of memory formatting ASKING");
            else {
                memcpy(out->data + out->len, asking, sizeof(asking) - 1);
                out->len += sizeof(asking) - 1;
            }
        }
        size_t command_end = 0;
        if (!rc) {
            const wk_query *q = x->query(x->ctx, i);
            wk_query single;
            const char *argv[WK__SINGLE_KEY_MAX_ARGS];
            size_t lens[WK__SINGLE_KEY_MAX_ARGS];
            rc = wk__format_query(x->db, out, sent_form(q, s, &single, argv, lens), s->as_eval,
                                  NULL, &command_end);
        }
        if (rc) {
            out->len = mark;
            settle(r, i, rc);
        } else {
            s->end = command_end;
        }
    }
    l->data = out->data;
    l->len = out->len;
}

/* The lane's connection failed: every query written on it without a reply
 * is LOST; drop it (the next round or query reconnects). */
static void lose_lane(run *r, lane *l, int rc)
{
    wk__exchange *x = r->x;
    for (size_t i = 0; i < x->count; i++) {
        wk__slot *s = &x->slots[i];
        if (s->state == WK__SENT && on_lane(s, l)) {
            s->state = WK__LOST;
            s->status = wk__lost_status(s->writes, rc);
        }
    }
    r->conn_rc = rc;
    const char *why =
        l->link->ctx && l->link->ctx->errstr[0] ? l->link->ctx->errstr : "connection lost";
    wk__cluster *c = x->db->conn->cluster;
    if (c && l->node != WK__NO_NODE) {
        snprintf(r->why, sizeof(r->why), "%s:%d: %s", c->nodes[l->node]->host,
                 c->nodes[l->node]->port, why);
        c->stale = true; /* a failover may have moved its slots */
    } else {
        wk__copy_text(r->why, sizeof(r->why), why);
    }
    wk__link_close(l->link);
}

/* Write the lane's commands; what the kernel took whole is SENT. */
static bool send_lane(run *r, lane *l)
{
    wk__exchange *x = r->x;
    size_t written;
    int rc = wk__wire_write(l->link, l->data, l->len, r->deadline, &written);
    for (size_t i = 0; i < x->count; i++) {
        wk__slot *s = &x->slots[i];
        /* A command the kernel did not take whole never reaches Redis. */
        if (s->state == WK__UNSENT && on_lane(s, l) && s->end <= written)
            s->state = WK__SENT;
    }
    if (rc) {
        lose_lane(r, l, rc);
        return false;
    }
    return true;
}

/* Whether a TRYAGAIN'd query can be sent in its single-key form (once). */
static bool has_single_key_form(const wk_query *q, const wk__slot *s)
{
    return (q->flags & WK__QUERY_SINGLE_KEY) && q->script && q->nkeys > 1 &&
           ((const wk__two_forms *)q->script)->key < q->nkeys &&
           q->argc <= WK__SINGLE_KEY_MAX_ARGS && !s->single_key;
}

/* A cluster's answer that the command did not run: where it goes now.
 * `asked`: it was sent after ASKING (an ASK's target). */
static bool redirected(run *r, wk__slot *s, const wk_query *q, const redisReply *reply, bool asked)
{
    wk__cluster *c = r->x->db->conn->cluster;
    if (!c)
        return false;
    uint16_t node;
    wk__redirect what = wk__cluster_redirect(c, reply, &node);
    /* MOVED after MOVED means the nodes disagree: after a few, the error
     * goes to the caller. ASK and TRYAGAIN last as long as a migration
     * does, which the command timeout bounds. */
    if (what == WK__REPLY_FINAL || (what == WK__MOVED && s->redirects >= MAX_REDIRECTS))
        return false;
    if (what == WK__MOVED)
        s->redirects++;
    s->state = WK__UNSENT;
    if (what == WK__ASK) {
        s->asking = true;
        s->ask_node = node;
    } else if (what == WK__SLOT_UNSTABLE && has_single_key_form(q, s)) {
        /* Its keys are split by a migration (a lease's wake keys exist on
         * neither node): the single-key form goes at once, to the same
         * node (with ASKING if it was asked). Not loaded there perhaps. */
        s->single_key = true;
        s->as_eval = false;
        s->asking = asked;
    } else if (what != WK__MOVED) {
        /* TRYAGAIN from an importing node: there again, with ASKING, not
         * back to the source for its ASK anew. */
        s->asking = asked;
        r->try_later = true;
    }
    return true;
}

/* Read a reply per command SENT on the lane (and its WAIT's, for a lease
 * query on a handle with lease_replicas), and settle each. */
static void read_lane(run *r, lane *l)
{
    wk__exchange *x = r->x;
    wk__conn *conn = x->db->conn;
    for (size_t i = 0; i < x->count; i++) {
        wk__slot *s = &x->slots[i];
        if (s->state != WK__SENT || !on_lane(s, l))
            continue;
        redisReply *reply;
        int rc = WK_OK;
        bool asked = s->asking;
        if (s->asking) {
            /* ASKING's own +OK comes first. */
            rc = wk__wire_read(l->link, r->deadline, &reply);
            if (!rc)
                freeReplyObject(reply);
            s->asking = false;
        }
        if (!rc)
            rc = wk__wire_read(l->link, r->deadline, &reply);
        const wk_query *q = x->query(x->ctx, i);
        redisReply *ack = NULL;
        if (!rc && wk__query_acked(conn, q)) {
            /* Its WAIT's reply, which the server holds up to the ack
             * timeout (the call's deadline allows for it). Until it comes
             * the query stays SENT: a connection lost now leaves the lease
             * LOST (WK_EUNKNOWN), never held. */
            rc = wk__wire_read(l->link, r->deadline, &ack);
            if (rc)
                freeReplyObject(reply);
        }
        if (rc) {
            lose_lane(r, l, rc);
            return;
        }
        if (q->script && !s->as_eval && wk__reply_is_noscript(reply)) {
            s->state = WK__UNSENT; /* it did not run */
            s->as_eval = true;
        } else if (conn->url.service && !s->readonly && wk__reply_is_readonly(reply)) {
            /* A replica refused it (a failover made this node one): it
             * did not run; it goes to the primary the sentinels name. */
            s->state = WK__UNSENT;
            s->readonly = true;
            r->readonly = true;
        } else if (!redirected(r, s, q, reply, asked)) {
            settle(r, i, wk__parse_reply(x->db, q, reply, ack));
        }
        freeReplyObject(reply);
        if (ack)
            freeReplyObject(ack);
    }
    *l->last_io_ms = wk_monotonic_ms();
}

/* One round on the handle's connection: write what is pending, read a
 * reply per command written. */
static void round_trip(run *r, bool first_round)
{
    wk__exchange *x = r->x;
    wk__conn *conn = x->db->conn;
    lane l = {.link = &conn->link,
              .out = &conn->out,
              .last_io_ms = &conn->last_io_ms,
              .node = WK__NO_NODE,
              .data = x->prepared,
              .len = x->prepared_len};
    if (!first_round || !l.data)
        format_pending(r, &l);
    if (!any_unsent(x) || !send_lane(r, &l))
        return;
    read_lane(r, &l);
    if (r->readonly) {
        r->readonly = false;
        wk__conn_drop(conn); /* the next round asks the sentinels again */
    }
}

/* The lane of cluster node n. */
static lane node_lane(wk__cluster *c, size_t n)
{
    wk__node *node = c->nodes[n];
    return (lane){.link = &node->link,
                  .out = &node->out,
                  .last_io_ms = &node->last_io_ms,
                  .node = (uint16_t)n};
}

static bool node_has(const wk__exchange *x, uint16_t node, wk__qstate state)
{
    for (size_t i = 0; i < x->count; i++)
        if (x->slots[i].state == state && x->slots[i].node == node)
            return true;
    return false;
}

/* One round of a cluster handle: route every pending query to its node,
 * write to every node before reading any reply (so nodes never wait on
 * each other), then read each node's replies. */
static void cluster_round(run *r)
{
    wk__exchange *x = r->x;
    wk__conn *conn = x->db->conn;
    wk__cluster *c = conn->cluster;
    for (size_t i = 0; i < x->count; i++) {
        wk__slot *s = &x->slots[i];
        if (s->state != WK__UNSENT)
            continue;
        if (s->asking)
            s->node = s->ask_node;
        else if (x->db->pinned && s->redirects == 0)
            s->node = x->db->pin_node; /* wk_db_cluster_primary(): until a MOVED */
        else
            s->node = wk__cluster_route(c, x->query(x->ctx, i), s->keyless);
    }
    for (size_t n = 0; n < c->nnodes; n++) {
        if (!node_has(x, (uint16_t)n, WK__UNSENT))
            continue;
        char why[sizeof(r->why)];
        int rc = wk__cluster_node_ensure(conn, (uint16_t)n, why, sizeof(why));
        if (rc) {
            /* Its queries stay UNSENT: they did not run. */
            r->conn_rc = rc;
            wk__copy_text(r->why, sizeof(r->why), why);
            c->stale = true;
            continue;
        }
        lane l = node_lane(c, n);
        format_pending(r, &l);
        if (l.len && send_lane(r, &l))
            c->last = (uint16_t)n;
    }
    for (size_t n = 0; n < c->nnodes; n++) {
        if (!node_has(x, (uint16_t)n, WK__SENT))
            continue;
        lane l = node_lane(c, n);
        read_lane(r, &l);
    }
}

/* TRYAGAIN / CLUSTERDOWN: pause before the next round, unless that would
 * pass the deadline (then the queries fail as not run). */
static bool pause_for_cluster(run *r, int *pause_ms)
{
    r->try_later = false;
    if (wk__boot_ms() + *pause_ms > r->deadline) {
        r->conn_rc = WK_ETIMEDOUT;
        r->gave_up = true;
        wk__copy_text(r->why, sizeof(r->why),
                      "the cluster answered TRYAGAIN / CLUSTERDOWN until the command timeout");
        return false;
    }
    struct timespec ts = {.tv_sec = *pause_ms / 1000,
                          .tv_nsec = (long)(*pause_ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
    *pause_ms = *pause_ms * 2 > TRY_LATER_MAX_PAUSE_MS ? TRY_LATER_MAX_PAUSE_MS : *pause_ms * 2;
    return true;
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
                           : !s->writes             ? ""
                           : r->gave_up             ? " (not run: the write did not happen)"
                                                    : " (not sent: the write did not happen)");
    if (r->gave_up)
        return wk__db_fail(x->db, s->status,
                           "batch: from query %zu (%s): %s; %zu not run, %zu sent without reply",
                           at, name, r->why, unsent, lost);
    return wk__db_fail(x->db, s->status,
                       "batch: connection lost at query %zu (%s): %s; %zu sent without reply, "
                       "%zu not sent",
                       at, name, r->why, lost, unsent);
}

static int exchange_until(wk__exchange *x, int64_t deadline)
{
    run r; /* not zero-filled: its texts are written before being read */
    r.x = x;
    r.deadline = deadline;
    r.conn_rc = WK_OK;
    r.first_failed = SIZE_MAX;
    r.readonly = false;
    r.try_later = false;
    r.gave_up = false;
    wk__conn *conn = x->db->conn;
    wk__cluster *c = conn->cluster;
    int pause_ms = TRY_LATER_FIRST_PAUSE_MS;
    bool reconnected = false;
    if (c && wk__cluster_wants_refresh(c))
        wk__cluster_refresh(conn, r.why, sizeof(r.why)); /* failing: the old map */
    for (int round = 0; round < (c ? CLUSTER_MAX_ROUNDS : MAX_ROUNDS) && any_unsent(x); round++) {
        if (c) {
            cluster_round(&r);
        } else {
            int rc = wk__conn_ensure(x->db);
            if (rc) {
                /* Nothing more can be sent; the handle has the message. */
                r.conn_rc = rc;
                wk__copy_text(r.why, sizeof(r.why), x->db->errmsg);
                break;
            }
            round_trip(&r, round == 0);
        }
        if (r.conn_rc == WK_OK) {
            if (r.try_later && !pause_for_cluster(&r, &pause_ms))
                break;
            continue;
        }
        /* A dropped connection (not a timeout: a stalled server would stall
         * again) gets one new connection for what may be sent again — in
         * a cluster after asking for the map anew (a failover moves
         * slots). */
        if (r.conn_rc == WK_EIO && !reconnected && plan_resend(&r)) {
            reconnected = true;
            r.conn_rc = WK_OK;
            r.try_later = false;
            if (c) {
                char why[sizeof(r.why)];
                wk__cluster_refresh(conn, why, sizeof(why));
            }
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
        if (unsent == x->count && !reconnected && !r.gave_up)
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

int wk__exchange_run(wk__exchange *x)
{
    wk__conn *conn = x->db->conn;
    /* The deadline is fixed once, here: the command timeout from now, plus
     * a blocking command's block time (its reply may come that late), and
     * never later than an enclosing call's. The connection carries it
     * while the exchange runs, so a reconnect inside spends the same. */
    int64_t outer = conn->call_deadline;
    int64_t own = wk__deadline_after(conn->command_timeout);
    if (conn->extra_wait_ms > 0)
        own = wk__add_ms(own, conn->extra_wait_ms);
    /* A lease query's WAIT is held by the server up to the ack timeout
     * (only a handle with lease_replicas looks: a batch's query is rebuilt
     * to be looked at). */
    for (size_t i = 0; conn->lease_replicas > 0 && i < x->count; i++)
        if (wk__query_acked(conn, x->query(x->ctx, i))) {
            own = wk__add_ms(own, conn->lease_ack_timeout_ms);
            break;
        }
    conn->call_deadline = wk__deadline_min(own, outer);
    int rc = exchange_until(x, conn->call_deadline);
    conn->call_deadline = outer;
    return rc;
}
