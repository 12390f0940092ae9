/*
 * core/async_cluster.c — the event-loop handle on a Redis Cluster
 * (core/async_cluster.h): becoming a cluster handle, the map lane and its
 * CLUSTER SLOTS, and the nodes' registrations in the epoll set. Routing,
 * redirections, the nodes' set-ups and the outcome rules are the
 * exchange machine's (core/exchange_cluster.c, core/engine_conn.c,
 * core/exchange.c), the same code as a blocking handle's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include <wakuwaku/clock.h>

#include "core/async_cluster.h"
#include "core/blocking.h"
#include "core/cluster.h"
#include "core/exchange_cluster.h"

typedef struct node_conn {
    wk_async *a;
    uint16_t i;
    short ev;          /* events seen since the last step */
    int reg_fd;        /* registered in the set (-1: none) */
    unsigned reg_events;
} node_conn;

struct wk__async_cluster {
    node_conn **n; /* one per node of the map, each allocated once */
    size_t nn, cap;
    bool asking;    /* a CLUSTER SLOTS is out on the map lane */
    size_t turn;    /* the map lane's next reconnect: the turn-th primary, or the seeds */
    char host[256]; /* where the map lane connected: the host of an entry naming none */
    int port;
};

static wk__cluster *map_of(const wk_async *a)
{
    return a->db->conn->cluster;
}

/* The state of node i (grown to the map's nodes), or NULL (out of memory). */
static node_conn *node(wk_async *a, size_t i)
{
    wk__async_cluster *cl = a->cl;
    while (cl->nn <= i) {
        node_conn *nc = calloc(1, sizeof(*nc));
        if (!nc || wk__grow_array(&cl->n, &cl->cap, cl->nn + 1, sizeof(*cl->n))) {
            free(nc);
            return NULL;
        }
        *nc = (node_conn){.a = a, .i = (uint16_t)cl->nn, .reg_fd = -1};
        cl->n[cl->nn++] = nc;
    }
    return cl->n[i];
}

/* ---- the map ------------------------------------------------------------ */

static int parse_slots(const wk_query *q, const wk_reply *reply, wk_diag *d)
{
    wk_async *a = q->out;
    wk__cluster *c = map_of(a);
    char msg[WK__ERRMSG_MAX / 2];
    int rc = wk__cluster_apply(c, (const redisReply *)reply, a->cl->host, a->cl->port, true, msg,
                               sizeof(msg));
    if (!rc && c->primaries == 0) {
        snprintf(msg, sizeof(msg), "%.200s:%d is a cluster node, but no slot is assigned yet",
                 a->cl->host, a->cl->port);
        rc = WK_EIO;
    }
    return rc ? wk_diag_fail(d, rc, "%s", msg) : WK_OK;
}

/* The map could not be learned: a map already there stays (asked again
 * after the usual interval); without one, the queries waiting fail. */
static void map_failed(wk_async *a, int status, const char *msg)
{
    wk__cluster *c = map_of(a);
    wk__engine *m = &a->lane[WK__LANE_MAIN].m;
    m->refresh = false;
    c->refreshed_ms = wk_monotonic_ms();
    snprintf(a->errmsg, sizeof(a->errmsg), "cluster: cannot learn the slot map: %s", msg);
    if (c->primaries == 0)
        wk__engine_ensured(m, WK__NO_NODE, status, a->errmsg);
}

static void on_slots(wk_async *a, int status, const char *msg, void *arg)
{
    (void)arg;
    a->cl->asking = false;
    if (status != WK_OK) {
        map_failed(a, status, msg);
        return;
    }
    a->lane[WK__LANE_MAIN].m.refresh = false;
}

/* CLUSTER SLOTS on the map lane (its reply patches the map in place). */
static void ask_map(wk_async *a)
{
    a->lane[WK__LANE_MAIN].m.refresh = true;
    if (a->cl->asking)
        return;
    const char *argv[2] = {"CLUSTER", "SLOTS"};
    size_t lens[2] = {7, 5};
    wk_query q = {.name = "cluster.slots",
                  .argc = 2,
                  .argv = argv,
                  .argvlen = lens,
                  .parse = parse_slots,
                  .out = a};
    wk__async_lane *l = &a->lane[WK__LANE_MAP];
    a->cl->asking = wk__async_lane_submit(l, &q, on_slots, NULL) == WK_OK;
    if (!a->cl->asking)
        map_failed(a, WK_EIO, l->db->errmsg);
}

static void remember_host(wk_async *a, const wk__setup *s)
{
    wk__copy_text(a->cl->host, sizeof(a->cl->host), s->at.host ? s->at.host : "");
    a->cl->port = s->at.port;
}

/* Make `a` a cluster handle: an empty map, the map lane (given the
 * connection `from` reached, if any) and the epoll set; ask the map. */
static int become(wk_async *a, wk__setup *from, char *err, size_t errlen)
{
    wk__conn *conn = a->db->conn;
    if (conn->url.database != 0)
        return wk__errbuf_set(err, errlen, WK_EINVAL,
                              "%s is a Redis Cluster, which has only database 0 (the URL or "
                              "options ask for %d)",
                              from ? from->addr : "the seed list", conn->url.database);
    if (a->waits) /* a plain server's handle whose server turned into a cluster node */
        return wk__errbuf_set(err, errlen, WK_EINVAL,
                              "%s is a Redis Cluster node, and this handle has waited already",
                              from ? from->addr : "the seed list");
    wk__async_cluster *cl = calloc(1, sizeof(*cl));
    wk__cluster *c = wk__cluster_empty();
    wk_db *db = NULL;
    char why[WK__ERRMSG_MAX];
    int rc = cl && c ? wk__blocking_clone(&db, a->db, why, sizeof(why)) : WK_ENOMEM;
    if (!rc && db->conn->cluster) {
        /* A handle cloned from a cluster handle (a hidden handle) copied
         * its map: the map lane's connection is a plain one. */
        wk__cluster_free(db->conn->cluster);
        db->conn->cluster = NULL;
    }
    int epfd = rc || a->epfd >= 0 ? a->epfd : epoll_create1(EPOLL_CLOEXEC);
    if (!rc && epfd < 0)
        rc = WK_EIO;
    if (rc) {
        free(cl);
        wk__cluster_free(c);
        if (db)
            wk_db_close(db);
        return wk__errbuf_set(err, errlen, rc, "cluster: %s", wk_strerror(rc));
    }
    /* The watch was shown the main socket: from now on, the set. */
    wk__async_fd_gone(&a->lane[WK__LANE_MAIN]);
    a->epfd = epfd;
    a->cl = cl;
    wk__async_lane_init(&a->lane[WK__LANE_MAP], a, db);
    a->nlanes = 2;
    if (from) {
        wk__setup_take(from, &db->conn->link, NULL);
        db->conn->last_io_ms = wk_monotonic_ms();
        remember_host(a, from);
    }
    /* A handle cloned from a cluster handle (a hidden handle: a
     * receiver's, a slot's waits) came with a copy of its map: it routes
     * by it at once, and asks the map only when a MOVED or a lost node
     * says so (no map connection until then). */
    if (conn->cluster && conn->cluster->primaries) {
        wk__cluster_free(c);
        return WK_OK;
    }
    wk__cluster_free(conn->cluster);
    conn->cluster = c;
    ask_map(a);
    return WK_OK;
}

int wk__async_cluster_open(wk_async *a, char *err, size_t errlen)
{
    return become(a, NULL, err, errlen);
}

int wk__async_cluster_found(wk__async_lane *l, wk__setup *s)
{
    wk_async *a = l->a;
    if (a->one_node)
        return WK_OK; /* held to that node: a plain connection */
    if (l == &a->lane[WK__LANE_MAIN])
        return become(a, s, a->errmsg, sizeof(a->errmsg));
    if (!a->cl) /* a waits lane: the server turned into a cluster node */
        return wk__errbuf_set(a->errmsg, sizeof(a->errmsg), WK_EINVAL,
                              "%s is a Redis Cluster node; waits go to a single server", s->addr);
    remember_host(a, s); /* the map lane reconnected */
    return WK_OK;
}

/* ---- the nodes' connections ----------------------------------------- */

static void node_fd_gone(void *arg)
{
    node_conn *nc = arg;
    wk__async_epoll_drop(nc->a, &nc->reg_fd, &nc->reg_events);
}

void wk__async_cluster_node_gone(wk_async *a, uint16_t i)
{
    node_conn *nc = a->cl ? node(a, i) : NULL;
    if (nc)
        node_fd_gone(nc);
}

void wk__async_cluster_ready(wk__async_lane *l)
{
    wk_async *a = l->a;
    wk__async_cluster *cl = a->cl;
    for (size_t i = 0; i < cl->nn; i++) {
        node_conn *nc = cl->n[i];
        if (nc->ev)
            wk__engine_ready(&l->m, i, nc->ev);
        nc->ev = 0;
    }
}

int wk__async_cluster_target(wk__async_lane *l, const char **host)
{
    /* The map lane sets up again to the primaries of the map in turn,
     * then the URL's seeds (a seed list may name nodes long gone). */
    wk__async_cluster *cl = l->a->cl;
    *host = NULL;
    if (!cl || l != &l->a->lane[WK__LANE_MAP])
        return 0;
    const wk__cluster *c = map_of(l->a);
    const wk__node *pick = NULL;
    for (size_t i = 0, k = 0; i < c->nnodes && !pick; i++)
        if (c->nodes[i]->primary && k++ == cl->turn)
            pick = c->nodes[i];
    cl->turn = pick ? cl->turn + 1 : 0;
    *host = pick ? pick->host : NULL;
    return pick ? pick->port : 0;
}

bool wk__async_cluster_want(wk__async_lane *l, wk__xwant w)
{
    wk_async *a = l->a;
    if (!a->cl || l != &a->lane[WK__LANE_MAIN] || w.what != WK__X_REFRESH)
        return false;
    ask_map(a);
    return true;
}

/* ---- the epoll set -------------------------------------------------- */

void wk__async_cluster_event(wk_async *a, uint32_t i, short ev)
{
    node_conn *nc = i < map_of(a)->nnodes ? node(a, i) : NULL;
    if (nc)
        nc->ev |= ev;
}

void wk__async_cluster_sync(wk_async *a)
{
    wk__cluster *c = map_of(a);
    wk__engine *m = &a->lane[WK__LANE_MAIN].m;
    for (size_t i = 0; i < c->nnodes; i++) {
        node_conn *nc = node(a, i);
        if (!nc)
            return;
        int fd = -1;
        short want = wk__engine_lane_events(m, i, &fd);
        wk__async_epoll_sync(a, want ? fd : -1, want, WK__ASYNC_NODE_TAG + (uint32_t)i, &nc->reg_fd,
                             &nc->reg_events);
    }
}

void wk__async_cluster_fd_gone(wk_async *a)
{
    /* Which node's connection closes is not said: every node's socket
     * leaves the set, the next sync puts back the open ones. */
    for (size_t i = 0; i < a->cl->nn; i++)
        node_fd_gone(a->cl->n[i]);
}

void wk__async_cluster_close(wk_async *a)
{
    wk__async_cluster *cl = a->cl;
    if (!cl)
        return;
    for (size_t i = 0; i < cl->nn; i++) {
        node_conn *nc = cl->n[i];
        node_fd_gone(nc);
        free(nc);
    }
    free(cl->n);
    free(cl);
    a->cl = NULL;
}
