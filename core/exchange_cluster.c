/*
 * core/exchange_cluster.c — continuous mode over a cluster's node lanes
 * (core/exchange_cluster.h). Writing, reading, judging replies (MOVED,
 * ASK, TRYAGAIN …), losing a connection and the outcome rules are
 * core/exchange.c's, run per node lane; this file routes, sets up the
 * nodes' connections (core/engine_conn.h), asks for the map, and pauses
 * on TRYAGAIN / CLUSTERDOWN.
 */
#include <poll.h>
#include <stdio.h>

#include "core/cluster.h"
#include "core/engine_conn.h"
#include "core/exchange_cluster.h"

/* TRYAGAIN / CLUSTERDOWN: everything waits this long before it goes
 * again (the blocking exchange's first pause), until the query's command
 * timeout is spent. */
#define TRY_LATER_PAUSE_MS 10

static const wk__slot *head_of(const wk__engine *m, const wk__lane *q)
{
    return q->head ? &m->x->slots[q->head - 1] : NULL;
}

static bool waiting(const wk__slot *s)
{
    return s->state == WK__UNSENT && !s->staged;
}

/* Slots before scan are all staged or settled. */
static void advance_scan(wk__engine *m)
{
    while (m->scan < m->x->count && !waiting(&m->x->slots[m->scan]))
        m->scan++;
    if (m->placed < m->scan)
        m->placed = m->scan;
}

/* Node `lane`'s connection: set up, stepped, or its answer given. */
static bool node_connect(wk__engine *m, uint16_t lane)
{
    char why[WK__ERRMSG_MAX / 2];
    int rc = wk__engine_connect(m, lane, false, why, sizeof(why));
    if (rc == WK__CONNECTING)
        return false;
    wk__xc_ensured(m, lane, rc, why);
    return rc == WK_OK;
}

/* Move each connected node's bytes (and each set-up running); a node
 * that closed, stalled or sent a stray reply is lost (its own queries
 * only). */
static void io_all(wk__engine *m)
{
    wk__cluster *c = m->conn->cluster;
    for (size_t i = 0; i < c->nnodes; i++) {
        wk__node *n = c->nodes[i];
        wk__lane *q = &n->lane;
        if (q->setup && !node_connect(m, (uint16_t)i))
            continue;
        if (!n->link.ctx) {
            if (q->head)
                wk__xc_lose(m, i, WK_EIO, "connection closed");
            continue;
        }
        bool seen = q->ready != 0;
        const wk__slot *h = head_of(m, q);
        if ((q->ready & (POLLIN | POLLHUP | POLLERR)) && !(h && h->state == WK__SENT)) {
            q->ready = 0;
            wk__xc_idle_check(m, i);
            if (!n->link.ctx)
                continue;
        }
        wk__xc_io(m, i);
        h = n->link.ctx ? head_of(m, q) : NULL;
        if (h && h->state == WK__SENT && !seen && wk__boot_ms() >= h->due) {
            char why[96];
            struct timeval tv = m->conn->command_timeout;
            snprintf(why, sizeof(why), "no reply within %lld ms",
                     (long long)tv.tv_sec * 1000 + tv.tv_usec / 1000);
            wk__xc_lose(m, i, WK_ETIMEDOUT, why);
        }
    }
}

/* A reply said TRYAGAIN / CLUSTERDOWN: pause before anything goes again.
 * A query sent before and waiting now gives up once the pause would pass
 * its first attempt's reply deadline: not run (WK_ETIMEDOUT). */
static void plan_pause(wk__engine *m)
{
    if (!m->try_later)
        return;
    m->try_later = false;
    int64_t now = wk__boot_ms();
    wk__copy_text(m->why, sizeof(m->why),
                  "the cluster answered TRYAGAIN / CLUSTERDOWN until the command timeout");
    for (size_t i = m->scan; i < m->x->count; i++) {
        wk__slot *s = &m->x->slots[i];
        if (!waiting(s) || !s->due)
            continue;
        if (!s->give_up)
            s->give_up = s->due;
        if (now + TRY_LATER_PAUSE_MS > s->give_up)
            wk__xc_settle_conn(m, i, WK_ETIMEDOUT);
    }
    m->pause_until = now + TRY_LATER_PAUSE_MS;
}

/* Give every waiting query its node, in order (a keyless one goes where
 * the query before it went). A script whose keys span slots (queued
 * before the handle knew it was a cluster's) is refused, not sent. */
static void place(wk__engine *m)
{
    wk__exchange *x = m->x;
    wk__cluster *c = m->conn->cluster;
    for (size_t i = m->scan; i < x->count; i++) {
        wk__slot *s = &x->slots[i];
        if (!waiting(s))
            continue;
        if (wk__cluster_check_keys(x->db, x->query(x->ctx, i))) {
            wk__xc_settle(m, i, WK_EINVAL);
            continue;
        }
        if (s->asking)
            s->node = s->ask_node;
        else if (x->db->pinned && s->redirects == 0)
            s->node = x->db->pin_node;
        else
            s->node = wk__cluster_route(c, x->query(x->ctx, i), s->keyless);
        c->last = s->node;
    }
    m->placed = x->count;
}

/* Stage each waiting query on its node's lane when that lane has written
 * what it had; a node not connected is set up (other nodes go on). */
static void stage_all(wk__engine *m)
{
    wk__cluster *c = m->conn->cluster;
    for (size_t i = m->scan; i < m->x->count; i++) {
        const wk__slot *s = &m->x->slots[i];
        if (!waiting(s))
            continue;
        wk__node *n = c->nodes[s->node];
        wk__lane *q = &n->lane;
        if (!n->link.ctx && (q->setup || !node_connect(m, s->node)))
            continue; /* connecting (io_all steps it), or failed: its queries settled */
        if (q->wpos < q->len || q->draining)
            continue; /* its bytes go first */
        if (!q->head)
            q->unsent = q->tail = 0;
        wk__xc_stage(m, s->node, i); /* every waiting query of that node */
        wk__xc_io(m, s->node);
    }
}

wk__xwant wk__xc_step(wk__engine *m)
{
    wk__cluster *c = m->conn->cluster;
    for (int guard = 0; guard < 4; guard++) {
        io_all(m);
        plan_pause(m);
        advance_scan(m);
        if (m->scan >= m->x->count)
            break;
        bool no_map = c->primaries == 0;
        if ((no_map || (c->stale && wk__cluster_wants_refresh(c))) && !m->refresh) {
            m->refresh = true;
            return (wk__xwant){.what = WK__X_REFRESH};
        }
        if (no_map)
            break; /* the queries wait for the map */
        if (m->pause_until) {
            if (wk__boot_ms() < m->pause_until)
                break;
            m->pause_until = 0;
        }
        place(m);
        stage_all(m);
        advance_scan(m);
        if (m->scan >= m->x->count)
            break;
    }
    return (wk__xwant){.what = WK__X_WAIT, .deadline = wk__xc_due(m)};
}

short wk__xc_lane_events(wk__engine *m, size_t i, int *fd)
{
    wk__cluster *c = m->conn->cluster;
    if (i < c->nnodes && c->nodes[i]->lane.setup)
        return wk__engine_setup_events(&c->nodes[i]->lane, fd, NULL);
    if (i >= c->nnodes || !c->nodes[i]->link.ctx)
        return 0;
    const wk__link *link = &c->nodes[i]->link;
    const wk__lane *q = &c->nodes[i]->lane;
    *fd = link->ctx->fd;
    /* Queries not placed yet (submitted since the last step) make the
     * step due at once (wk__xc_due), not the nodes' sockets writable: the
     * step writes to a socket that takes it without being told, and only
     * bytes it did not take wait for POLLOUT (no registration to flip to
     * writable and back for every round of queries). */
    return (short)(POLLIN | (q->wpos < q->len ? q->want : 0) |
                   (link->want == POLLOUT ? POLLOUT : 0));
}

int64_t wk__xc_due(const wk__engine *m)
{
    const wk__cluster *c = m->conn->cluster;
    int64_t due = m->pause_until;
    if (!due && m->placed < m->x->count && c->primaries)
        due = wk__boot_ms(); /* to place (no node may be connected to fire) */
    for (size_t i = 0; i < c->nnodes; i++) {
        const wk__slot *h = head_of(m, &c->nodes[i]->lane);
        if (h && h->state == WK__SENT && (!due || h->due < due))
            due = h->due;
    }
    return wk__engine_setups_due(m, due);
}

void wk__xc_ensured(wk__engine *m, uint16_t lane, int rc, const char *why)
{
    wk__cluster *c = m->conn->cluster;
    if (!rc)
        return;
    wk__copy_text(m->why, sizeof(m->why), why);
    /* Nothing was sent: the queries waiting for it did not run. */
    size_t end = lane == WK__NO_NODE ? m->x->count : m->placed;
    for (size_t i = m->scan; i < end; i++) {
        const wk__slot *s = &m->x->slots[i];
        if (waiting(s) && (lane == WK__NO_NODE || s->node == lane))
            wk__xc_settle_conn(m, i, rc);
    }
    c->stale = true; /* a failover may have moved its slots */
}
