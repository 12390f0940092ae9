/*
 * core/async_cluster.h — the event-loop handle on a Redis Cluster
 * (core/async_cluster.c): the hooks core/async.c and core/async_wait.c
 * call. Not installed.
 *
 * A handle becomes a cluster handle when opened with a seed list, or when
 * its connection's set-up reaches a cluster node. From then on its main
 * lane's exchange machine runs in continuous mode over the nodes' lanes
 * (core/exchange_cluster.h): one connection per node, each set up by
 * that machine (core/engine_conn.h); lane 1 (the
 * waits lane of a plain handle) is the map lane: a connection to a seed
 * (made again: to the map's primaries in turn, then the seeds) that
 * runs nothing but CLUSTER SLOTS, at first and whenever the machine
 * asks for the map anew, so no refresh ever blocks the loop. The
 * descriptor is the epoll set (core/async_wait.c) from then on: lanes 0
 * and 1 are tagged 0 and 1 in it, node i is tagged WK__ASYNC_NODE_TAG + i.
 * Its waits (core/async_wait_cluster.c) need no lane: each slot in use
 * has a hidden handle of its own (core/async_sub.c), a cluster handle
 * too, which routes by a copy of this one's map.
 */
#ifndef WK_CORE_ASYNC_CLUSTER_H
#define WK_CORE_ASYNC_CLUSTER_H

#include "core/async_internal.h"

#define WK__ASYNC_NODE_TAG 2u
#define WK__LANE_MAP 1 /* a cluster handle's lane 1 */

typedef struct wk__async_cluster wk__async_cluster;

/* wk_async_open() with a seed list: a cluster handle at once (the map
 * lane dials the seeds). WK_OK, or the failure with its message. */
int wk__async_cluster_open(wk_async *a, char *err, size_t errlen);
/* Lane l's set-up s reached a cluster node: the main lane's connection
 * becomes the map lane's and the handle a cluster handle; the map lane
 * goes on. WK_OK, or the refusal (message in a->errmsg). */
int wk__async_cluster_found(wk__async_lane *l, wk__setup *s);
/* Where lane l's connection is set up: the map lane's, to the map's
 * primaries in turn (returns the port, *host), else the URL's target
 * (*host NULL). */
int wk__async_cluster_target(wk__async_lane *l, const char **host);
/* The main lane of a cluster handle, in its step: the nodes' events
 * first; then what its machine asked (true: a REFRESH handled, step
 * again). */
void wk__async_cluster_ready(wk__async_lane *l);
bool wk__async_cluster_want(wk__async_lane *l, wk__xwant w);

/* The epoll set: node `node` fired `ev` (poll bits); keep the nodes'
 * registrations as wanted (a set-up's socket while it runs); a
 * connection is about to close (which: every node's registration goes),
 * node i's is. */
void wk__async_cluster_event(wk_async *a, uint32_t node, short ev);
void wk__async_cluster_sync(wk_async *a);
void wk__async_cluster_fd_gone(wk_async *a);
void wk__async_cluster_node_gone(wk_async *a, uint16_t i);
/* At wk_async_close(): free the state. */
void wk__async_cluster_close(wk_async *a);

/* One socket's registration in the set (core/async_wait.c): `fd` wanted
 * for `want` (poll bits; fd -1: none), tagged `tag`; *reg_fd and
 * *reg_events say what is registered now and are updated. */
void wk__async_epoll_sync(wk_async *a, int fd, short want, uint32_t tag, int *reg_fd,
                          unsigned *reg_events);
void wk__async_epoll_drop(wk_async *a, int *reg_fd, unsigned *reg_events);

#endif /* WK_CORE_ASYNC_CLUSTER_H */
