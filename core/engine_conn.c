/*
 * core/engine_conn.c — the exchange machine's connections
 * (core/engine_conn.h). A lane that needs a connection and has none gets
 * one from the machine itself: the set-up machine of core/conn_machine.h
 * runs as a sub-machine of the lane, and while it runs the lane's
 * events, descriptor and due are the set-up's. A driver never runs the
 * set-up itself: it polls what wk__engine_lane_events() names and steps
 * the one machine.
 */
#include <stdlib.h>

#include <wakuwaku/clock.h>

#include "core/cluster.h"
#include "core/engine_conn.h"

struct wk__lane_setup {
    wk__setup s;
    wk__want want; /* what it waits for now */
    wk__engine *m; /* the machine that began it (for its hooks) */
    uint16_t lane; /* WK__NO_NODE: the handle's connection, else a node */
};

static wk__lane *lane_q(const wk__engine *m, uint16_t lane, wk__link **link)
{
    wk__conn *conn = m->conn;
    if (lane == WK__NO_NODE) {
        *link = &conn->link;
        return &conn->lane;
    }
    wk__node *n = conn->cluster->nodes[lane];
    *link = &n->link;
    return &n->lane;
}

/* The set-up is about to close a socket the driver may watch. */
static void setup_closing(void *arg)
{
    struct wk__lane_setup *ls = arg;
    if (ls->m->fd_gone)
        ls->m->fd_gone(ls->m->arg, ls->lane);
}

static void begin(wk__engine *m, struct wk__lane_setup *ls)
{
    wk__conn *conn = m->conn;
    if (ls->lane != WK__NO_NODE) {
        const wk__node *n = conn->cluster->nodes[ls->lane];
        wk__setup_begin(&ls->s, conn, n->host, n->port, 0, m->deadline);
    } else if (m->setup_begin) {
        m->setup_begin(m->arg, &ls->s);
    } else {
        wk__conn_setup_begin(conn, &ls->s, m->deadline);
    }
    ls->s.closing = setup_closing;
    ls->s.closing_arg = ls;
}

/* The set-up ended: its connection becomes the lane's (rc WK_OK), or the
 * failure, with why. */
static int adopt(wk__engine *m, struct wk__lane_setup *ls, char *why, size_t whylen)
{
    wk__conn *conn = m->conn;
    wk__setup *s = &ls->s;
    int rc;
    if (ls->lane != WK__NO_NODE) {
        rc = s->rc;
        if (!rc) {
            wk__node *n = conn->cluster->nodes[ls->lane];
            wk__setup_take(s, &n->link, NULL);
            n->last_io_ms = wk_monotonic_ms();
            conn->reconnects++;
        }
        wk__count_connect(conn, rc);
        wk__copy_text(why, whylen, s->msg);
        if (rc && m->closing) { /* the driver keeps why (the loop's message) */
            wk__copy_text(m->why, sizeof(m->why), s->msg);
            m->closing(m->arg);
        }
        return rc;
    }
    if (m->setup_done) {
        rc = m->setup_done(m->arg, s);
        wk__copy_text(why, whylen, s->msg);
        return rc;
    }
    rc = wk__conn_setup_done(m->x->db, s, why, whylen);
    if (!m->x->count) /* an open (wk__conn_open), not a reconnect */
        return rc;
    if (rc == WK_OK)
        conn->reconnects++;
    wk__count_connect(conn, rc);
    return rc;
}

static void end_setup(wk__lane *q)
{
    wk__setup_end(&q->setup->s);
    free(q->setup);
    q->setup = NULL;
}

int wk__engine_connect(wk__engine *m, uint16_t lane, bool check, char *why, size_t whylen)
{
    wk__link *link;
    wk__lane *q = lane_q(m, lane, &link);
    struct wk__lane_setup *ls = q->setup;
    short ready = 0;
    if (ls) {
        ready = q->ready;
        q->ready = 0;
    } else {
        if (check && link->ctx) {
            /* The check before a query: broken, replaced by a failover,
             * or closed by the server while idle. */
            if (lane == WK__NO_NODE)
                wk__conn_check(m->conn);
            else
                wk__cluster_node_check(m->conn, lane);
        }
        if (link->ctx)
            return WK_OK;
        if (m->no_reconnect) {
            wk__copy_text(why, whylen, m->why[0] ? m->why : "connection is closed");
            return WK_EIO;
        }
        ls = calloc(1, sizeof(*ls));
        if (!ls) {
            wk__copy_text(why, whylen, "out of memory connecting");
            return WK_ENOMEM;
        }
        ls->m = m;
        ls->lane = lane;
        q->setup = ls;
        q->ready = 0;
        begin(m, ls);
    }
    ls->m = m;
    ls->want = wk__setup_step(&ls->s, ready);
    if (!ls->want.done)
        return WK__CONNECTING;
    int rc = adopt(m, ls, why, whylen);
    end_setup(q);
    return rc;
}

void wk__engine_dial(wk__engine *m)
{
    char why[WK__ERRMSG_MAX / 2];
    if (m->conn->cluster || m->conn->lane.setup || m->conn->link.ctx)
        return;
    int rc = wk__engine_connect(m, WK__NO_NODE, false, why, sizeof(why));
    if (rc != WK__CONNECTING && rc != WK_OK && !m->conn->cluster)
        wk__engine_ensured(m, WK__NO_NODE, rc, why);
}

short wk__engine_setup_events(const wk__lane *q, int *fd, int64_t *due)
{
    const struct wk__lane_setup *ls = q->setup;
    *fd = ls->want.fd;
    if (due && (!*due || ls->want.deadline < *due))
        *due = ls->want.deadline;
    return ls->want.fd >= 0 ? ls->want.events : 0;
}

bool wk__engine_connecting(const wk__engine *m)
{
    const wk__conn *conn = m->conn;
    if (!conn->cluster)
        return conn->lane.setup != NULL;
    for (size_t i = 0; i < wk__engine_lanes(m); i++)
        if (conn->cluster->nodes[i]->lane.setup)
            return true;
    return false;
}

int64_t wk__engine_setups_due(const wk__engine *m, int64_t due)
{
    const wk__conn *conn = m->conn;
    size_t n = conn->cluster ? wk__engine_lanes(m) : 1;
    for (size_t i = 0; i < n; i++) {
        const wk__lane *q = conn->cluster ? &conn->cluster->nodes[i]->lane : &conn->lane;
        int fd;
        if (q->setup)
            wk__engine_setup_events(q, &fd, &due);
    }
    return due;
}

void wk__engine_setups_abort(wk__engine *m, int rc, const char *why)
{
    const wk__conn *conn = m->conn;
    size_t n = conn->cluster ? wk__engine_lanes(m) : 1;
    for (size_t i = 0; i < n; i++) {
        wk__lane *q = conn->cluster ? &conn->cluster->nodes[i]->lane : (wk__lane *)&conn->lane;
        if (q->setup && !q->setup->want.done)
            wk__setup_abort(&q->setup->s, rc, why);
    }
}

void wk__engine_setups_end(wk__engine *m)
{
    const wk__conn *conn = m->conn;
    size_t n = conn->cluster ? wk__engine_lanes(m) : 1;
    for (size_t i = 0; i < n; i++) {
        wk__lane *q = conn->cluster ? &conn->cluster->nodes[i]->lane : (wk__lane *)&conn->lane;
        if (!q->setup)
            continue;
        setup_closing(q->setup);
        end_setup(q);
    }
}

void wk__lane_end_setup(wk__lane *q)
{
    if (q->setup)
        end_setup(q);
}
