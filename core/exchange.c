/*
 * core/exchange.c — the exchange (core/exchange.h) as a sans-I/O machine,
 * the one that drives every connection (its set-ups: core/engine_conn.c),
 * and the blocking driver that polls around it. A round stages every
 * pending command on its lane (the handle's connection, or a cluster
 * node's), writes each lane's bytes as its socket takes them, reads one
 * reply per written command, and settles each query by its state.
 * NOSCRIPT sends that query again as EVAL; a dropped connection sends
 * again, on a new connection, what never ran and what is retry-safe;
 * nothing else is ever re-sent.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <wakuwaku/clock.h>

#include "core/cluster.h"
#include "core/engine_conn.h"
#include "core/exchange.h"
#include "core/exchange_cluster.h"
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

/* Lane i of the machine: the connection, its queue, its clock. */
typedef struct lane_ref {
    wk__link *link;
    wk__lane *q;
    int64_t *last_io_ms;
    uint16_t node; /* WK__NO_NODE: the handle's connection, every slot */
} lane_ref;

static lane_ref lane_of(const wk__engine *m, size_t i)
{
    wk__conn *conn = m->conn;
    if (!conn->cluster)
        return (lane_ref){&conn->link, &conn->lane, &conn->last_io_ms, WK__NO_NODE};
    wk__node *n = conn->cluster->nodes[i];
    return (lane_ref){&n->link, &n->lane, &n->last_io_ms, (uint16_t)i};
}

size_t wk__engine_lanes(const wk__engine *m)
{
    const wk__cluster *c = m->conn->cluster;
    return c ? c->nnodes : 1;
}

/* Slots are linked by index + 1 (0: none). */
static wk__slot *slot_at(const wk__engine *m, size_t link)
{
    return &m->x->slots[link - 1];
}

static bool any_unsent(const wk__exchange *x)
{
    for (size_t i = 0; i < x->count; i++)
        if (x->slots[i].state == WK__UNSENT)
            return true;
    return false;
}

static void settle(wk__engine *m, size_t i, int status)
{
    wk__slot *s = &m->x->slots[i];
    s->state = WK__REPLIED;
    s->status = status;
    if (m->settled) {
        m->settled(m->arg, i, status, status ? m->x->db->errmsg : "");
        return;
    }
    if (status != WK_OK && m->first_failed == SIZE_MAX) {
        m->first_failed = i;
        wk__copy_text(m->first_msg, sizeof(m->first_msg), m->x->db->errmsg);
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

/* Put slot i at the end of the lane's queue. */
static void enqueue(wk__engine *m, wk__lane *q, size_t i)
{
    wk__slot *s = &m->x->slots[i];
    s->staged = true;
    s->next = 0;
    if (q->tail)
        slot_at(m, q->tail)->next = i + 1;
    else
        q->head = i + 1;
    q->tail = i + 1;
    if (!q->unsent)
        q->unsent = i + 1;
}

/* Stage every UNSENT slot of the lane: format it into the lane's buffer
 * (or take the batch's own bytes on the first round) and queue it. A
 * query that cannot be formatted is settled with that failure, never
 * sent. */
static void stage(wk__engine *m, lane_ref r, bool prepared, size_t from)
{
    static const char asking[] = "*1\r\n$6\r\nASKING\r\n";
    wk__exchange *x = m->x;
    wk__lane *q = r.q;
    q->wpos = 0;
    q->want = POLLOUT;
    if (prepared) {
        for (size_t i = 0; i < x->count; i++)
            if (x->slots[i].state == WK__UNSENT)
                enqueue(m, q, i);
        q->data = x->prepared;
        q->len = x->prepared_len;
        return;
    }
    wk__buf *out = &q->out;
    out->len = 0;
    for (size_t i = from; i < x->count; i++) {
        wk__slot *s = &x->slots[i];
        if (s->state != WK__UNSENT || s->staged || (r.node != WK__NO_NODE && s->node != r.node))
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
            const wk_query *qu = x->query(x->ctx, i);
            wk_query single;
            const char *argv[WK__SINGLE_KEY_MAX_ARGS];
            size_t lens[WK__SINGLE_KEY_MAX_ARGS];
            rc = wk__format_query(x->db, out, sent_form(qu, s, &single, argv, lens), s->as_eval,
                                  NULL, &command_end);
        }
        if (rc) {
            out->len = mark;
            settle(m, i, rc);
        } else {
            s->end = command_end;
            enqueue(m, q, i);
        }
    }
    q->data = out->data;
    q->len = out->len;
}

/* What the kernel took whole is SENT: a command it did not take whole
 * never reaches Redis. */
static void mark_sent(wk__engine *m, wk__lane *q)
{
    while (q->unsent && slot_at(m, q->unsent)->end <= q->wpos) {
        wk__slot *s = slot_at(m, q->unsent);
        s->state = WK__SENT;
        s->staged = false;
        q->unsent = s->next;
        if (m->settled) {
            /* A lease query's WAIT is held by the server up to the ack
             * timeout. */
            wk__conn *conn = m->conn;
            s->due = wk__deadline_after(conn->command_timeout);
            if (wk__query_acked(conn, m->x->query(m->x->ctx, (size_t)(s - m->x->slots))))
                s->due = wk__add_ms(s->due, conn->lease_ack_timeout_ms);
            if (conn->extra_wait_ms > 0) /* a blocking command (the loop's waits lane) */
                s->due = wk__add_ms(s->due, conn->extra_wait_ms);
        }
    }
}

static void settle_conn(wk__engine *m, size_t i, int status);

/* Continuous: after a lost connection, what goes once more on a new one
 * (what never ran, and a retry-safe query whose reply was lost — after
 * a drop, not a timeout) and what is settled now. */
static void resettle(wk__engine *m, int rc, uint16_t node)
{
    wk__exchange *x = m->x;
    for (size_t i = 0; i < x->count; i++) {
        wk__slot *s = &x->slots[i];
        if (node != WK__NO_NODE && (i >= m->placed || s->node != node))
            continue; /* a cluster: only the queries of the node lost */
        if (s->state == WK__LOST && !s->carried &&
            wk__may_resend(x->query(x->ctx, i)->flags, s->resent, rc)) {
            s->state = WK__UNSENT;
            s->resent = s->carried = true;
        } else if (s->state == WK__LOST) {
            settle_conn(m, i, s->status);
        } else if (s->state == WK__UNSENT && (rc != WK_EIO || s->carried)) {
            settle_conn(m, i, rc);
        } else if (s->state == WK__UNSENT) {
            s->carried = true;
        } else {
            continue;
        }
        m->scan = m->scan < i ? m->scan : i;
    }
}

/* The lane's connection failed: every query written on it without a
 * reply is LOST, what was staged and not written is UNSENT again; drop
 * it (the next round or query reconnects). `text`: the reason, or NULL
 * for the connection's own. */
static void lose_lane(wk__engine *m, lane_ref r, int rc, const char *text)
{
    wk__lane *q = r.q;
    for (size_t h = q->head; h;) {
        wk__slot *s = slot_at(m, h);
        h = s->next;
        s->next = 0;
        s->staged = false;
        if (s->state == WK__SENT) {
            s->state = WK__LOST;
            s->status = wk__lost_status(s->writes, rc);
        }
    }
    q->head = q->tail = q->unsent = 0;
    q->data = NULL;
    q->len = q->wpos = 0;
    if (q->held) {
        freeReplyObject(q->held);
        q->held = NULL;
    }
    m->conn_rc = rc;
    const char *why = text                                     ? text
                      : r.link->ctx && r.link->ctx->errstr[0] ? r.link->ctx->errstr
                                                               : "connection lost";
    wk__cluster *c = m->conn->cluster;
    if (c && r.node != WK__NO_NODE) {
        snprintf(m->why, sizeof(m->why), "%s:%d: %s", c->nodes[r.node]->host,
                 c->nodes[r.node]->port, why);
        c->stale = true; /* a failover may have moved its slots */
    } else {
        wk__copy_text(m->why, sizeof(m->why), why);
    }
    if (m->closing)
        m->closing(m->arg);
    wk__link_close(r.link);
    if (m->settled)
        resettle(m, rc, r.node);
}

/* The deadline came with lane r still waiting: a query that may be
 * abandoned (WK__QUERY_ABANDON, core/core_internal.h) — alone in its
 * exchange, written whole, one reply to come — times out and leaves its
 * reply owed to the connection, which stays; anything else loses the
 * lane. */
static void time_out_lane(wk__engine *m, lane_ref r)
{
    wk__lane *q = r.q;
    wk__slot *s = q->head ? slot_at(m, q->head) : NULL;
    const wk_query *qu = s ? m->x->query(m->x->ctx, q->head - 1) : NULL;
    if (!qu || m->settled || m->x->count != 1 || !(qu->flags & WK__QUERY_ABANDON) ||
        s->state != WK__SENT || s->asking || q->held || q->wpos < q->len || !r.link->ctx) {
        lose_lane(m, r, WK_ETIMEDOUT, "timed out waiting for Redis");
        return;
    }
    size_t i = q->head - 1;
    q->head = q->tail = q->unsent = 0;
    q->data = NULL;
    q->len = q->wpos = 0;
    s->next = 0;
    s->staged = false;
    r.link->owed++;
    snprintf(m->x->db->errmsg, sizeof(m->x->db->errmsg),
             "%s: no reply by the deadline (the connection stays: its reply is dropped when "
             "it comes)",
             qu->name ? qu->name : "query");
    settle(m, i, WK_ETIMEDOUT);
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
static bool redirected(wk__engine *m, wk__slot *s, const wk_query *q, const redisReply *reply,
                       bool asked)
{
    wk__cluster *c = m->conn->cluster;
    if (!c)
        return false;
    uint16_t node;
    wk__redirect what = wk__cluster_redirect(c, reply, &node);
    /* MOVED after MOVED means the nodes disagree: after a few, the error
     * goes to the caller. ASK and TRYAGAIN last as long as a migration
     * does, which the command timeout bounds. */
    if (what == WK__REPLY_FINAL || (what == WK__MOVED && s->redirects >= MAX_REDIRECTS) ||
        (what == WK__SLOT_UNSTABLE && (q->flags & WK__QUERY_TRYAGAIN_FINAL)))
        return false;
    if (what == WK__MOVED) {
        s->redirects++;
        wk__bump(&wk__counters(m->x->db->conn)->moved);
    }
    s->state = WK__UNSENT;
    if (what == WK__ASK) {
        wk__bump(&wk__counters(m->x->db->conn)->asked);
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
        m->try_later = true;
    }
    return true;
}

/* A reply for the head of the lane's queue (SENT): judge it. */
static void on_reply(wk__engine *m, wk__lane *q, redisReply *reply)
{
    wk__exchange *x = m->x;
    wk__conn *conn = m->conn;
    size_t i = q->head - 1;
    wk__slot *s = &x->slots[i];
    if (s->asking) {
        /* ASKING's own +OK comes first. */
        freeReplyObject(reply);
        s->asking = false;
        s->asked = true;
        return;
    }
    const wk_query *qu = x->query(x->ctx, i);
    if (wk__query_acked(conn, qu) && !q->held) {
        /* Its WAIT's reply follows, which the server holds up to the ack
         * timeout (the call's deadline allows for it). Until it comes the
         * query stays SENT: a connection lost now leaves the lease LOST
         * (WK_EUNKNOWN), never held. */
        q->held = reply;
        return;
    }
    redisReply *ack = NULL;
    if (q->held) {
        ack = reply;
        reply = q->held;
        q->held = NULL;
    }
    q->head = s->next;
    if (!q->head)
        q->tail = 0;
    s->next = 0;
    bool asked = s->asked;
    s->asked = false;
    if (m->settled)
        x->db->errmsg[0] = '\0';
    if (qu->script && !s->as_eval && wk__reply_is_noscript(reply)) {
        s->state = WK__UNSENT; /* it did not run */
        s->as_eval = true;
    } else if (conn->url.service && !s->readonly && wk__reply_node_demoted(reply)) {
        /* A replica refused it, or cut it off blocked (a failover made
         * this node one): it did not run; it goes to the primary the
         * sentinels name. */
        s->state = WK__UNSENT;
        s->readonly = true;
        m->readonly = true;
        q->draining = m->settled != NULL;
    } else if (conn->url.service && (qu->flags & WK__QUERY_ROLE_CHECK) &&
               wk__reply_role_not_master(reply)) {
        /* Asked whether its node is still the primary, it says no: the
         * query has its answer, and the connection goes at the round's
         * end, as after a READONLY (core/core_internal.h). */
        m->readonly = true;
        q->draining = m->settled != NULL;
        settle(m, i, wk__parse_reply(x->db, qu, reply, ack));
    } else if (!redirected(m, s, qu, reply, asked)) {
        settle(m, i, wk__parse_reply(x->db, qu, reply, ack));
    }
    if (s->state == WK__UNSENT)
        m->scan = m->scan < i ? m->scan : i; /* continuous: staged again, behind */
    freeReplyObject(reply);
    if (ack)
        freeReplyObject(ack);
}

/* Move the lane's bytes: write what the socket takes, read what it has
 * (when the driver saw it readable), judge each reply. */
static void lane_io(wk__engine *m, lane_ref r)
{
    wk__lane *q = r.q;
    short ready = q->ready;
    q->ready = 0;
    while (q->wpos < q->len) {
        short want = POLLOUT;
        ssize_t n = r.link->tx->send(r.link, q->data + q->wpos, q->len - q->wpos, &want);
        if (n > 0) {
            q->wpos += (size_t)n;
            continue;
        }
        mark_sent(m, q);
        if (n == WK__TX_AGAIN) {
            q->want = want;
            break;
        }
        lose_lane(m, r, WK_EIO, n == WK__TX_FAIL ? NULL : "connection closed");
        return;
    }
    mark_sent(m, q);
    bool received = false, replied = false;
    bool readable = (ready & (POLLIN | POLLHUP | POLLERR)) ||
                    (r.link->want == POLLOUT && (ready & POLLOUT));
    /* Push mode reads whatever came, asked for or not: a push read with
     * a reply (before or after it) is handed on in its place. */
    for (bool asked; (asked = q->head && slot_at(m, q->head)->state == WK__SENT) || m->push;) {
        redisReply *reply = NULL;
        int rc = wk__wire_all_taken(r.link) ? WK_OK : wk__wire_take(r.link, &reply);
        if (!rc && !reply) {
            if (received || !readable)
                break;
            received = true;
            rc = wk__wire_receive(r.link);
            if (!rc)
                continue;
        }
        const char *why = NULL;
        if (!rc && !asked && !wk__reply_is_push(reply)) {
            freeReplyObject(reply);
            rc = WK_EPROTO;
            why = "a reply nobody asked for";
        }
        if (rc) {
            lose_lane(m, r, rc, why);
            return;
        }
        replied = true;
        if (m->push && wk__reply_is_push(reply))
            m->push(m->arg, reply);
        else
            on_reply(m, q, reply);
    }
    if (replied)
        *r.last_io_ms = wk_monotonic_ms();
    if (!q->head) {
        q->data = NULL;
        q->len = q->wpos = 0;
    }
}

short wk__engine_lane_events(wk__engine *m, size_t i, int *fd)
{
    const wk__cluster *c = m->conn->cluster;
    const wk__lane *sq =
        c ? (i < c->nnodes ? &c->nodes[i]->lane : NULL) : (i == 0 ? &m->conn->lane : NULL);
    if (sq && sq->setup) /* being set up: the set-up's socket */
        return wk__engine_setup_events(sq, fd, NULL);
    if (m->settled && m->conn->cluster)
        return wk__xc_lane_events(m, i, fd);
    if (m->settled && i == 0 && m->conn->link.ctx) {
        const wk__link *link = &m->conn->link;
        const wk__lane *q = &m->conn->lane;
        *fd = link->ctx->fd;
        bool more = m->scan < m->x->count && !q->draining;
        return (short)(POLLIN | (q->wpos < q->len ? q->want : 0) |
                       (more || link->want == POLLOUT ? POLLOUT : 0));
    }
    if (!m->in_round || i >= wk__engine_lanes(m))
        return 0;
    lane_ref r = lane_of(m, i);
    if (!r.q->head || !r.link->ctx)
        return 0;
    short ev = 0;
    if (r.q->wpos < r.q->len)
        ev |= r.q->want;
    if (slot_at(m, r.q->head)->state == WK__SENT)
        ev |= r.link->want ? r.link->want : POLLIN;
    *fd = r.link->ctx->fd;
    return ev;
}

void wk__engine_ready(wk__engine *m, size_t i, short revents)
{
    if (i < wk__engine_lanes(m))
        lane_of(m, i).q->ready = revents;
}

/* Lose every lane with queries on the way. */
static void lose_busy(wk__engine *m, int rc, const char *why)
{
    for (size_t i = 0; i < wk__engine_lanes(m); i++) {
        lane_ref r = lane_of(m, i);
        if (r.q->head)
            lose_lane(m, r, rc, why);
    }
}

void wk__engine_fail(wk__engine *m, int rc, const char *why)
{
    lose_busy(m, rc, why);
    wk__engine_setups_abort(m, rc, why);
}

/* TRYAGAIN / CLUSTERDOWN: pause before the next round, unless that would
 * pass the deadline (then the queries fail as not run). */
static bool pause_for_cluster(wk__engine *m)
{
    m->try_later = false;
    int64_t now = wk__boot_ms();
    if (now + m->pause_ms > m->deadline) {
        m->conn_rc = WK_ETIMEDOUT;
        m->gave_up = true;
        wk__copy_text(m->why, sizeof(m->why),
                      "the cluster answered TRYAGAIN / CLUSTERDOWN until the command timeout");
        return false;
    }
    m->pause_until = now + m->pause_ms;
    m->pause_ms = m->pause_ms * 2 > TRY_LATER_MAX_PAUSE_MS ? TRY_LATER_MAX_PAUSE_MS : m->pause_ms * 2;
    return true;
}

/* After a dropped connection: what may go again on a new one. */
static bool plan_resend(wk__engine *m)
{
    wk__exchange *x = m->x;
    bool any = false;
    for (size_t i = 0; i < x->count; i++) {
        wk__slot *s = &x->slots[i];
        if (s->state == WK__LOST &&
            wk__may_resend(x->query(x->ctx, i)->flags, s->resent, m->conn_rc)) {
            s->state = WK__UNSENT;
            s->resent = true;
        }
        any |= s->state == WK__UNSENT;
    }
    return any;
}

/* Every lane is quiet: what the round's replies ask for next. */
static void end_round(wk__engine *m)
{
    wk__conn *conn = m->conn;
    m->in_round = false;
    m->round++;
    if (m->readonly) {
        m->readonly = false;
        wk__conn_drop(conn); /* the next round asks the sentinels again */
    }
    if (m->conn_rc == WK_OK) {
        if (m->try_later && !pause_for_cluster(m))
            m->done = true;
        return;
    }
    /* A dropped connection (not a timeout: a stalled server would stall
     * again) gets one new connection for what may be sent again — in a
     * cluster after asking for the map anew (a failover moves slots). */
    if (m->conn_rc == WK_EIO && !m->reconnected && plan_resend(m)) {
        m->reconnected = true;
        m->conn_rc = WK_OK;
        m->try_later = false;
        m->refresh = conn->cluster != NULL;
        return;
    }
    m->done = true;
}

/* Start a round: route what is pending, have each lane it uses
 * connected (set up, waited for), then stage. Returns false with *w to
 * return. */
static bool start_round(wk__engine *m, wk__xwant *w)
{
    wk__exchange *x = m->x;
    wk__cluster *c = m->conn->cluster;
    if (m->round >= (c ? CLUSTER_MAX_ROUNDS : MAX_ROUNDS) || !any_unsent(x)) {
        m->done = true;
        return true;
    }
    size_t n = wk__engine_lanes(m);
    if (!m->routed) {
        m->routed = true;
        for (size_t i = 0; i < n; i++)
            lane_of(m, i).q->ensured = lane_of(m, i).q->failed = false;
        for (size_t i = 0; c && i < x->count; i++) {
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
    }
    /* Every lane a pending query goes to is checked (connected, probed
     * when idle) before anything is staged; the lanes with no connection
     * are set up at once, side by side. */
    bool connecting = false;
    for (size_t i = 0; i < n; i++) {
        lane_ref r = lane_of(m, i);
        if (r.q->ensured)
            continue;
        bool used = !c;
        for (size_t k = 0; c && !used && k < x->count; k++)
            used = x->slots[k].state == WK__UNSENT && x->slots[k].node == r.node;
        if (!used)
            continue;
        char why[WK__ERRMSG_MAX / 2];
        int rc = wk__engine_connect(m, r.node, true, why, sizeof(why));
        if (rc == WK__CONNECTING)
            connecting = true;
        else
            wk__engine_ensured(m, r.node, rc, why);
    }
    if (connecting) {
        *w = (wk__xwant){.what = WK__X_WAIT, .deadline = wk__engine_setups_due(m, m->deadline)};
        return false;
    }
    if (m->done)
        return true; /* the handle's connection could not be made */
    for (size_t i = 0; i < n; i++) {
        lane_ref r = lane_of(m, i);
        if (r.q->ensured && !r.q->failed) {
            stage(m, r, !c && m->round == 0 && x->prepared, 0);
            if (c && r.q->head)
                c->last = r.node;
        }
    }
    m->routed = false;
    m->in_round = true;
    m->waited = false;
    return true;
}

void wk__engine_ensured(wk__engine *m, uint16_t lane, int rc, const char *why)
{
    if (m->settled && m->conn->cluster) {
        wk__xc_ensured(m, lane, rc, why);
        return;
    }
    lane_ref r = lane_of(m, lane == WK__NO_NODE ? 0 : lane);
    r.q->ensured = true;
    if (!rc)
        return;
    r.q->failed = true;
    m->conn_rc = rc;
    wk__copy_text(m->why, sizeof(m->why), why);
    if (m->settled) {
        /* Nothing was sent: every query waiting for it fails. */
        for (size_t i = 0; i < m->x->count; i++)
            if (m->x->slots[i].state == WK__UNSENT)
                settle_conn(m, i, rc);
        m->scan = m->x->count;
        r.q->ensured = false;
        return;
    }
    if (lane == WK__NO_NODE)
        m->done = true; /* nothing more can be sent; the handle has the message */
    else
        m->conn->cluster->stale = true; /* its queries stay UNSENT: they did not run */
}

void wk__engine_begin(wk__engine *m, wk__exchange *x, int64_t deadline)
{
    /* Not zero-filled: its texts are written before being read. */
    m->x = x;
    m->conn = x->db->conn;
    m->deadline = deadline;
    m->conn_rc = WK_OK;
    m->first_failed = SIZE_MAX;
    m->round = 0;
    m->in_round = m->routed = m->waited = false;
    m->readonly = m->try_later = m->gave_up = m->reconnected = m->done = false;
    m->pause_ms = TRY_LATER_FIRST_PAUSE_MS;
    m->pause_until = 0;
    m->settled = NULL;
    m->closing = NULL;
    m->push = NULL;
    m->setup_begin = NULL;
    m->setup_done = NULL;
    m->fd_gone = NULL;
    m->no_reconnect = false;
    /* Lanes are empty between exchanges (every way out of a round
     * empties them); made sure of here, since they link into slots. */
    size_t n = wk__engine_lanes(m);
    for (size_t i = 0; i < n; i++) {
        wk__lane *q = lane_of(m, i).q;
        if (q->head || q->held) {
            if (q->held)
                freeReplyObject(q->held);
            *q = (wk__lane){.out = q->out, .setup = q->setup};
        }
    }
    m->conn->lane.ensured = false;
    wk__cluster *c = m->conn->cluster;
    m->refresh = c && wk__cluster_wants_refresh(c); /* failing: the old map */
}

static wk__xwant continuous_step(wk__engine *m);

/* The rounds on the handle's one connection (no cluster): the steps of
 * the general loop below with one lane, no routing, no pause, no map —
 * the path of every single query, kept short. */
static wk__xwant one_lane_step(wk__engine *m)
{
    wk__conn *conn = m->conn;
    wk__lane *q = &conn->lane;
    lane_ref r = {&conn->link, q, &conn->last_io_ms, WK__NO_NODE};
    while (!m->done) {
        if (m->in_round) {
            bool seen = q->ready != 0;
            lane_io(m, r);
            if (q->head && m->waited && !seen && wk__boot_ms() >= m->deadline)
                time_out_lane(m, r);
            if (q->head) {
                m->waited = true;
                return (wk__xwant){.what = WK__X_WAIT, .deadline = m->deadline};
            }
            end_round(m);
            continue;
        }
        /* No query at all: the handle's open (wk__conn_open), the
         * connection alone. */
        if (m->round >= MAX_ROUNDS || (!any_unsent(m->x) && m->x->count))
            break;
        if (!q->ensured) { /* each round's: the check, or the set-up */
            char why[WK__ERRMSG_MAX / 2];
            int rc = wk__engine_connect(m, WK__NO_NODE, true, why, sizeof(why));
            if (rc == WK__CONNECTING)
                return (wk__xwant){.what = WK__X_WAIT,
                                   .deadline = wk__engine_setups_due(m, m->deadline)};
            wk__engine_ensured(m, WK__NO_NODE, rc, why);
        }
        if (m->done || !m->x->count)
            break; /* the connection could not be made, or was all */
        stage(m, r, m->round == 0 && m->x->prepared, 0);
        q->ensured = false;
        m->in_round = true;
        m->waited = false;
    }
    m->done = true;
    return (wk__xwant){.what = WK__X_DONE};
}

wk__xwant wk__engine_step(wk__engine *m)
{
    if (m->settled)
        return m->conn->cluster ? wk__xc_step(m) : continuous_step(m);
    if (!m->conn->cluster)
        return one_lane_step(m);
    wk__xwant w = {.what = WK__X_DONE};
    while (!m->done) {
        if (m->in_round) {
            bool busy = false, seen = false;
            for (size_t i = 0; i < wk__engine_lanes(m); i++) {
                lane_ref r = lane_of(m, i);
                if (!r.q->head)
                    continue;
                seen |= r.q->ready != 0;
                lane_io(m, r);
                busy |= r.q->head != 0;
            }
            /* A spent deadline still gets its look: it ends the wait only
             * when the driver saw nothing ready. */
            if (busy && m->waited && !seen && wk__boot_ms() >= m->deadline) {
                for (size_t i = 0; i < wk__engine_lanes(m); i++)
                    if (lane_of(m, i).q->head)
                        time_out_lane(m, lane_of(m, i));
                busy = false;
            }
            if (busy) {
                m->waited = true;
                return (wk__xwant){.what = WK__X_WAIT, .deadline = m->deadline};
            }
            end_round(m);
            continue;
        }
        if (m->pause_until) {
            if (wk__boot_ms() < m->pause_until)
                return (wk__xwant){.what = WK__X_WAIT, .deadline = m->pause_until};
            m->pause_until = 0;
        }
        if (m->refresh) {
            m->refresh = false;
            return (wk__xwant){.what = WK__X_REFRESH};
        }
        if (!start_round(m, &w))
            return w;
    }
    return (wk__xwant){.what = WK__X_DONE};
}

/* The final message when the connection failed: which query, and what
 * that means for writes. */
static int connection_result(wk__engine *m, size_t at, size_t lost, size_t unsent)
{
    wk__exchange *x = m->x;
    const wk__slot *s = &x->slots[at];
    const char *name = x->query(x->ctx, at)->name;
    if (x->count == 1)
        return wk__db_fail(x->db, s->status, "%s: %s%s", name, m->why,
                           s->status == WK_EUNKNOWN ? " (the write may or may not have happened)"
                           : !s->writes             ? ""
                           : m->gave_up             ? " (not run: the write did not happen)"
                                                    : " (not sent: the write did not happen)");
    if (m->gave_up)
        return wk__db_fail(x->db, s->status,
                           "batch: from query %zu (%s): %s; %zu not run, %zu sent without reply",
                           at, name, m->why, unsent, lost);
    return wk__db_fail(x->db, s->status,
                       "batch: connection lost at query %zu (%s): %s; %zu sent without reply, "
                       "%zu not sent",
                       at, name, m->why, lost, unsent);
}

int wk__engine_end(wk__engine *m)
{
    wk__exchange *x = m->x;
    if (m->conn->cluster || m->conn->lane.setup)
        wk__engine_setups_end(m); /* none is left running but by a driver's bug */
    if (!x->count)                /* an open: the set-up's own message is on the handle */
        return m->conn_rc && !x->db->errmsg[0] ? wk__db_fail(x->db, m->conn_rc, "%s", m->why)
                                               : m->conn_rc;
    if (m->conn_rc == WK_OK && any_unsent(x)) {
        m->conn_rc = WK_EIO; /* cannot happen with a sane server */
        wk__copy_text(m->why, sizeof(m->why), "gave up after repeated NOSCRIPT replies");
    }
    size_t lost = 0, unsent = 0, first_cut = SIZE_MAX;
    for (size_t i = 0; i < x->count; i++) {
        wk__slot *s = &x->slots[i];
        if (s->state == WK__LOST) {
            lost++;
        } else if (s->state == WK__UNSENT) {
            s->status = m->conn_rc;
            unsent++;
        } else {
            continue;
        }
        if (first_cut == SIZE_MAX)
            first_cut = i;
    }
    if (first_cut != SIZE_MAX) {
        /* Nothing was written at all: keep the connection's own message. */
        if (unsent == x->count && !m->reconnected && !m->gave_up)
            return wk__db_fail(x->db, m->conn_rc, "%s", m->why);
        return connection_result(m, first_cut, lost, unsent);
    }
    if (m->first_failed == SIZE_MAX)
        return WK_OK;
    int st = x->slots[m->first_failed].status;
    if (x->count == 1)
        return wk__db_fail(x->db, st, "%s", m->first_msg);
    return wk__db_fail(x->db, st, "batch query %zu failed: %s", m->first_failed,
                       m->first_msg[0] ? m->first_msg : wk_strerror(st));
}

/* ---- continuous mode ---------------------------------------------------- */

/* Settle slot i after a connection failure (m->why): its name, the
 * reason, and what that means for a write. */
static void settle_conn(wk__engine *m, size_t i, int status)
{
    wk__slot *s = &m->x->slots[i];
    char text[WK__ERRMSG_MAX];
    snprintf(text, sizeof(text), "%s: %s%s", m->x->query(m->x->ctx, i)->name, m->why,
             status == WK_EUNKNOWN                 ? " (the write may or may not have happened)"
             : s->writes && s->state == WK__UNSENT ? " (not sent: the write did not happen)"
                                                   : "");
    s->state = WK__REPLIED;
    s->status = status;
    m->settled(m->arg, i, status, text);
}

void wk__engine_open(wk__engine *m, wk__exchange *x,
                     void (*settled)(void *arg, size_t i, int status, const char *msg),
                     void (*closing)(void *arg), void *arg)
{
    wk__engine_begin(m, x, 0);
    m->settled = settled;
    m->closing = closing;
    m->push = NULL;
    m->arg = arg;
    m->scan = m->placed = 0;
    m->why[0] = '\0';
}

/* Continuous: the socket is watched while no reply is due, for EOF (a
 * server that closed the idle connection): looked at before anything is
 * written on it. */
static void idle_check(wk__engine *m, lane_ref r)
{
    redisReply *stray = NULL;
    int rc = wk__wire_receive(r.link);
    if (!rc)
        rc = wk__wire_take(r.link, &stray);
    if (stray) {
        freeReplyObject(stray);
        rc = WK_EPROTO;
    }
    if (rc)
        lose_lane(m, r, rc, stray ? "a reply nobody asked for" : NULL);
}

static wk__xwant continuous_step(wk__engine *m)
{
    wk__conn *conn = m->conn;
    lane_ref r = lane_of(m, 0);
    wk__lane *q = r.q;
    for (int guard = 0; guard < 8; guard++) {
        if (!r.link->ctx) {
            q->draining = false;
            bool wanted = q->setup != NULL;
            for (size_t i = m->scan; !wanted && i < m->x->count; i++)
                wanted = m->x->slots[i].state == WK__UNSENT;
            if (!wanted) {
                m->scan = m->x->count;
                return (wk__xwant){.what = WK__X_WAIT};
            }
            char why[WK__ERRMSG_MAX / 2];
            int rc = wk__engine_connect(m, WK__NO_NODE, false, why, sizeof(why));
            if (rc == WK__CONNECTING)
                break;
            if (conn->cluster) /* its HELLO said cluster: the nodes' lanes now */
                return wk__xc_step(m);
            wk__engine_ensured(m, WK__NO_NODE, rc, why);
            if (rc)
                break;
            continue;
        }
        bool seen = q->ready != 0;
        if (!m->push && (q->ready & (POLLIN | POLLHUP | POLLERR)) &&
            !(q->head && slot_at(m, q->head)->state == WK__SENT)) {
            q->ready = 0;
            idle_check(m, r);
            continue;
        }
        if (!q->draining && q->wpos == q->len && m->scan < m->x->count) {
            if (!q->head)
                q->unsent = q->tail = 0;
            stage(m, r, false, m->scan);
            m->scan = m->x->count;
        }
        lane_io(m, r);
        if (!r.link->ctx)
            continue; /* lost: what goes again needs a new connection */
        if (q->draining && !q->head) {
            wk__copy_text(m->why, sizeof(m->why), "READONLY: the node is a replica now");
            if (m->closing)
                m->closing(m->arg);
            wk__conn_drop(conn); /* the sentinels name the primary anew */
            continue;
        }
        const wk__slot *h = q->head ? slot_at(m, q->head) : NULL;
        if (h && h->state == WK__SENT && !seen && wk__boot_ms() >= h->due) {
            char why[96];
            struct timeval tv = conn->command_timeout;
            snprintf(why, sizeof(why), "no reply within %lld ms",
                     (long long)tv.tv_sec * 1000 + tv.tv_usec / 1000);
            lose_lane(m, r, WK_ETIMEDOUT, why);
            continue;
        }
        if (q->draining || q->wpos < q->len || m->scan >= m->x->count)
            break;
    }
    return (wk__xwant){.what = WK__X_WAIT, .deadline = wk__engine_due(m)};
}

int64_t wk__engine_due(const wk__engine *m)
{
    if (m->conn->cluster)
        return wk__xc_due(m);
    const wk__lane *q = &m->conn->lane;
    if (q->setup)
        return wk__engine_setups_due(m, 0);
    const wk__slot *h = q->head ? slot_at(m, q->head) : NULL;
    return h && h->state == WK__SENT ? h->due : 0;
}

void wk__engine_shift(wk__engine *m, size_t n)
{
    for (size_t l = 0; l < wk__engine_lanes(m); l++) { /* a cluster's: every node's */
        wk__lane *q = lane_of(m, l).q;
        q->head -= q->head ? n : 0;
        q->tail -= q->tail ? n : 0;
        q->unsent -= q->unsent ? n : 0;
    }
    for (size_t i = n; i < m->x->count; i++)
        m->x->slots[i].next -= m->x->slots[i].next ? n : 0;
    m->scan = m->scan > n ? m->scan - n : 0;
    m->placed = m->placed > n ? m->placed - n : 0;
}

void wk__engine_cancel(wk__engine *m, int rc, const char *why)
{
    wk__copy_text(m->why, sizeof(m->why), why);
    for (size_t i = 0; i < m->x->count; i++) {
        wk__slot *s = &m->x->slots[i];
        s->next = 0;
        s->staged = false;
        if (s->state == WK__SENT || s->state == WK__LOST)
            settle_conn(m, i, wk__lost_status(s->writes, rc));
        else if (s->state == WK__UNSENT)
            settle_conn(m, i, rc);
    }
    for (size_t l = 0; l < wk__engine_lanes(m); l++) { /* a cluster's: every node's */
        wk__lane *q = lane_of(m, l).q;
        q->head = q->tail = q->unsent = 0;
        q->data = NULL;
        q->len = q->wpos = 0;
        q->draining = false;
        if (q->held) {
            freeReplyObject(q->held);
            q->held = NULL;
        }
    }
    wk__engine_setups_end(m);
    m->scan = m->placed = m->x->count;
}

/* ---- for the continuous mode over a cluster's nodes (core/exchange_cluster.c) */

void wk__xc_stage(wk__engine *m, size_t lane, size_t from)
{
    stage(m, lane_of(m, lane), false, from);
}

void wk__xc_io(wk__engine *m, size_t lane)
{
    lane_io(m, lane_of(m, lane));
}

void wk__xc_lose(wk__engine *m, size_t lane, int rc, const char *why)
{
    lose_lane(m, lane_of(m, lane), rc, why);
}

void wk__xc_idle_check(wk__engine *m, size_t lane)
{
    idle_check(m, lane_of(m, lane));
}

void wk__xc_settle_conn(wk__engine *m, size_t i, int status)
{
    settle_conn(m, i, status);
}

void wk__xc_settle(wk__engine *m, size_t i, int status)
{
    settle(m, i, status);
}

/* ---- the blocking driver ------------------------------------------------ */

/* Poll around the machine until it is done (the map is asked the
 * blocking way): every wait ends at the want's deadline or when the
 * handle's wake descriptor fires. */
static int drive(wk__engine *m)
{
    wk_db *db = m->x->db;
    wk__conn *conn = db->conn;
    /* The lanes polled, and which lane each entry is (one block). */
    struct pollfd stack[8], *p = stack;
    uint16_t stack_lane[8], *lane_at = stack_lane;
    size_t cap = sizeof(stack) / sizeof(stack[0]);
    for (wk__xwant w = wk__engine_step(m); w.what != WK__X_DONE; w = wk__engine_step(m)) {
        char why[WK__ERRMSG_MAX / 2];
        if (w.what == WK__X_REFRESH) {
            wk__cluster_refresh(conn, why, sizeof(why));
            continue;
        }
        size_t lanes = wk__engine_lanes(m);
        if (lanes + 1 > cap) {
            struct pollfd *grown =
                realloc(p == stack ? NULL : p, (lanes + 1) * (sizeof(*p) + sizeof(*lane_at)));
            if (!grown) {
                wk__engine_fail(m, WK_ENOMEM, "out of memory waiting for Redis");
                continue;
            }
            p = grown;
            cap = lanes + 1;
            lane_at = (uint16_t *)(p + cap);
        }
        nfds_t k = 0;
        for (size_t i = 0; i < lanes; i++) {
            int fd = -1;
            short ev = wk__engine_lane_events(m, i, &fd);
            if (ev) {
                lane_at[k] = (uint16_t)i;
                p[k++] = (struct pollfd){.fd = fd, .events = ev};
            }
        }
        nfds_t socks = k;
        /* (Not during a cluster's pause alone: nothing would end it.) */
        if ((socks || wk__engine_connecting(m)) && conn->wake_fd >= 0)
            p[k++] = (struct pollfd){.fd = conn->wake_fd, .events = POLLIN};
        int n = wk__poll_until(p, k, w.deadline);
        if (n < 0) {
            wk__engine_fail(m, WK_EIO, strerror(errno));
            continue;
        }
        if (n > 0 && k > socks && p[socks].revents) {
            wk__engine_fail(m, WK_EIO, "interrupted (wk__blocking_interrupt)");
            continue;
        }
        for (nfds_t j = 0; n > 0 && j < socks; j++)
            wk__engine_ready(m, lane_at[j], p[j].revents);
    }
    if (p != stack)
        free(p);
    return wk__engine_end(m);
}

int wk__conn_open(wk_db *db)
{
    wk__conn *conn = db->conn;
    if (conn->cluster)
        return WK_OK; /* nodes are connected as queries need them */
    /* An exchange of no query: the machine sets the connection up — dial,
     * TLS, AUTH, HELLO, SELECT, a cluster's discovery — by its connect
     * timeout, no later than an enclosing call's deadline. */
    wk__exchange x = {.db = db};
    wk__engine m;
    db->errmsg[0] = '\0';
    wk__engine_begin(&m, &x, conn->call_deadline);
    return drive(&m);
}

/* The connection of a query run at one address (wk__exchange_run_one
 * with a host): set up there, by the call's deadline, kept on the
 * handle. */
typedef struct run_target {
    wk__engine *m;
    const char *host;
    int port;
} run_target;

static void target_begin(void *arg, wk__setup *s)
{
    run_target *t = arg;
    wk__setup_begin(s, t->m->conn, t->host, t->port, 0, t->m->deadline);
}

static int target_done(void *arg, wk__setup *s)
{
    run_target *t = arg;
    wk__conn *conn = t->m->conn;
    wk__count_connect(conn, s->rc);
    if (s->rc)
        return s->rc;
    wk__setup_take(s, &conn->link, NULL);
    conn->last_io_ms = wk_monotonic_ms();
    conn->reconnects++;
    return WK_OK;
}

static int run(wk__exchange *x, const char *host, int port)
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
    wk__engine m;
    wk__engine_begin(&m, x, conn->call_deadline);
    run_target t = {&m, host, port};
    if (host) {
        m.setup_begin = target_begin;
        m.setup_done = target_done;
        m.arg = &t;
    }
    int rc = drive(&m);
    conn->call_deadline = outer;
    return rc;
}

int wk__exchange_run(wk__exchange *x)
{
    return run(x, NULL, 0);
}

static const wk_query *the_query(void *ctx, size_t i)
{
    (void)i;
    return ctx;
}

int wk__exchange_run_one(wk_db *db, const wk_query *q, const char *host, int port)
{
    wk__slot slot = {.state = WK__UNSENT,
                     .writes = wk_effect_is_write(&q->effect),
                     .keyless = q->effect.count == 0};
    wk__exchange x = {.db = db, .slots = &slot, .count = 1, .query = the_query, .ctx = (void *)q};
    return run(&x, host, port);
}
