/*
 * core/cluster.h — Redis Cluster: the slot map of a handle, one connection
 * per primary, and what redirections mean. Not installed.
 *
 * A handle is a cluster handle when the node it first connected to says
 * so (HELLO's "mode" is "cluster"). It then asks CLUSTER SLOTS for the
 * map and routes every query by the slot of its key (core/exchange.c):
 * a script's first key, a command's first argument after the name; a
 * query that names no entity (PING, WAIT, CLIENT …) goes to the node the
 * previous query went to, so WAIT counts that query's replicas. Nodes are
 * connected on first use. The handle's own connection (conn->link) is not
 * used for queries: it is handed to the node it reached.
 *
 * Redirections mean the command did not run, so re-sending is safe even
 * for writes:
 *   MOVED slot host:port   the slot lives there now: the map is patched at
 *                          once and refreshed (CLUSTER SLOTS) before the
 *                          next exchange;
 *   ASK slot host:port     this one command goes there, after ASKING;
 *   TRYAGAIN, CLUSTERDOWN  sent again after a pause, within the command
 *                          timeout; after it, not run (WK_ETIMEDOUT). A
 *                          query with a single-key form (core/core_internal.h,
 *                          wk__two_forms) is sent at once in that form on
 *                          TRYAGAIN instead.
 */
#ifndef WK_CORE_CLUSTER_H
#define WK_CORE_CLUSTER_H

#include <stdint.h>

#include "core/db_internal.h"

#define WK__CLUSTER_SLOTS 16384
#define WK__NO_NODE UINT16_MAX

typedef struct wk__node {
    char *host;
    int port;
    bool primary;  /* serves slots in the current map */
    wk__link link; /* ctx NULL while disconnected */
    int64_t last_io_ms;
    wk__lane lane; /* the queries on `link` (core/exchange.c) */
} wk__node;

struct wk__cluster {
    /* Every node seen; never removed, so indices stay valid. Each node is
     * allocated on its own and never moves: a lane may hold its link and
     * clock while a redirection adds a node (growing this array). */
    wk__node **nodes;
    size_t nnodes, cap;
    uint16_t slot_node[WK__CLUSTER_SLOTS]; /* WK__NO_NODE: unknown */
    size_t primaries;
    bool stale;           /* refresh the map before the next exchange */
    int64_t refreshed_ms; /* when it was last refreshed */
    uint16_t last;        /* the node of the last query sent */
    uint64_t epoch;       /* bumped whenever a slot changes node */
};

/* What a reply asks of a cluster client. */
typedef enum wk__redirect {
    WK__REPLY_FINAL, /* a reply of the command's own */
    WK__MOVED,
    WK__ASK,
    WK__SLOT_UNSTABLE, /* TRYAGAIN: its keys are split by a migration; it did not run */
    WK__TRY_LATER      /* CLUSTERDOWN, UNBLOCKED: it did not run */
} wk__redirect;

/* Build conn->cluster from CLUSTER SLOTS asked on conn->link (just
 * opened to host:port, a node whose HELLO said "cluster"); the link goes
 * to that node. WK_OK or a failure with msg. */
int wk__cluster_discover(wk__conn *conn, const char *host, int port, char *msg, size_t msglen);

/* Ask the nodes for the map until one answers — the connected ones
 * first, the one heard from last first, then the others, then the URL's
 * seeds; each asked once. Each ask is a query of its own (CLUSTER SLOTS,
 * an exchange of one run by the blocking driver by the running call's
 * deadline) on the node's connection, lent, or one set up for it. */
int wk__cluster_refresh(wk__conn *conn, char *msg, size_t msglen);

/* A map with no slot known yet (an event-loop handle's until its first
 * CLUSTER SLOTS reply, core/async_cluster.c), or NULL. */
wk__cluster *wk__cluster_empty(void);

/* Apply a CLUSTER SLOTS reply `r` given by host:port (the host of an
 * entry that names none) to the map: WK_OK, or the failure with msg (an
 * error reply, something unreadable). keep_links: the connections of
 * nodes that serve no slot any more stay (their replies in flight). */
int wk__cluster_apply(wk__cluster *c, const redisReply *r, const char *host, int port,
                      bool keep_links, char *msg, size_t msglen);

/* A copy of the map and the nodes' addresses, no connections (for a
 * blocking handle opened from a cluster handle). */
int wk__cluster_clone(wk__cluster **out, const wk__cluster *src);
void wk__cluster_free(wk__cluster *c);

/* The check before node i's connection is used: broken, or idle and
 * closed by the server — dropped. */
void wk__cluster_node_check(wk__conn *conn, uint16_t i);

/* The node a query goes to (a node index; the previous query's when it
 * names no key: a script without keys, or `keyless` — no entity). */
uint16_t wk__cluster_route(wk__cluster *c, const wk_query *q, bool keyless);

/* What `reply` asks; for MOVED and ASK, *node is the node named (added to
 * the table if new) and MOVED patches the map. */
wk__redirect wk__cluster_redirect(wk__cluster *c, const redisReply *reply, uint16_t *node);

/* Whether the map should be asked anew before routing (a MOVED marked it
 * stale, and the last refresh is not too recent). */
bool wk__cluster_wants_refresh(const wk__cluster *c);

/* The near cache's view of a handle's map (collection/near_cache.c): the
 * map's epoch (0 for a handle that is not a cluster handle), and the
 * primaries' node indices (up to cap; returns how many there are). */
uint64_t wk__cluster_epoch(const wk_db *db);
size_t wk__cluster_primary_nodes(const wk_db *db, uint16_t *nodes, size_t cap);
/* A handle sharing db's connections and capability whose every query goes
 * to cluster node `node` (an index of the map) until a MOVED: what
 * wk_db_cluster_primary() gives, by node. Close it with wk_db_close(). */
int wk__db_pin_node(wk_db **out, wk_db *db, uint16_t node);
/* The map is to be asked anew before the next exchange (a node said it
 * no longer is a primary). */
void wk__cluster_mark_stale(wk_db *db);
/* Node i's address (borrowed from the map), or NULL. */
const char *wk__cluster_node_host(const wk_db *db, uint16_t i, int *port);

/* A script query whose keys fall in different slots: WK_EINVAL naming
 * two of them, else WK_OK. */
int wk__cluster_check_keys(wk_db *db, const wk_query *q);

#endif /* WK_CORE_CLUSTER_H */
