/*
 * core/exchange_cluster.h — the exchange's continuous mode over a Redis
 * Cluster's node lanes (core/exchange_cluster.c): what the event-loop
 * handle runs once its connection turned out to be a cluster's
 * (core/async_cluster.c). Not installed.
 *
 * The same machine and rules as continuous mode on one connection
 * (core/exchange.h), with one lane per node (the handle's cluster map,
 * core/cluster.h): each new query is routed by the slot of its key when
 * it is staged — a keyless one to the previous query's node — and
 * written on its node's connection behind what is in flight there; the
 * replies of each node come in their own order. A MOVED, ASK, TRYAGAIN,
 * CLUSTERDOWN or UNBLOCKED reply is judged by the same code as a blocking
 * exchange's (it did not run: UNSENT again, routed anew, after ASKING, or
 * after a pause); a lost node loses only its own queries. A node with
 * no connection is set up by the machine (core/engine_conn.h) while the
 * other nodes go on; a failed set-up fails that node's waiting queries
 * (they did not run). The steps ask:
 *
 *   REFRESH       ask CLUSTER SLOTS without blocking (once until the
 *                 driver clears m->refresh; the map stays meanwhile) — also
 *                 while there is no map yet (no primaries): queries wait;
 *   WAIT          until an event on a node lane (a set-up's socket while
 *                 it runs) or `deadline`.
 */
#ifndef WK_CORE_EXCHANGE_CLUSTER_H
#define WK_CORE_EXCHANGE_CLUSTER_H

#include "core/exchange.h"

wk__xwant wk__xc_step(wk__engine *m);
short wk__xc_lane_events(wk__engine *m, size_t i, int *fd);
/* Node `lane` connected (rc WK_OK) or not: its waiting queries fail with
 * rc (they did not run). WK__NO_NODE: the map could not be learned: every
 * query waiting for it fails. */
void wk__xc_ensured(wk__engine *m, uint16_t lane, int rc, const char *why);
int64_t wk__xc_due(const wk__engine *m);

/* The parts of core/exchange.c it runs on node lane `lane`. */
void wk__xc_stage(wk__engine *m, size_t lane, size_t from);
void wk__xc_io(wk__engine *m, size_t lane);
void wk__xc_lose(wk__engine *m, size_t lane, int rc, const char *why);
void wk__xc_idle_check(wk__engine *m, size_t lane);
void wk__xc_settle_conn(wk__engine *m, size_t i, int status);
/* Settle query i with `status`, the message on the handle. */
void wk__xc_settle(wk__engine *m, size_t i, int status);

#endif /* WK_CORE_EXCHANGE_CLUSTER_H */
