/*
 * core/engine_conn.h — how the exchange machine (core/exchange.h) gets a
 * lane its connection (core/engine_conn.c). Not installed; used by
 * core/exchange.c and core/exchange_cluster.c only.
 *
 * A lane with no connection, when a query needs one, is set up by the
 * machine: the set-up machine (core/conn_machine.h) runs inside the lane,
 * stepped by the machine's own steps with the events the driver saw on
 * the lane. Meanwhile wk__engine_lane_events() names the set-up's socket
 * and events, and the step's deadline is the set-up's. The handle's
 * connection (WK__NO_NODE) is set up by the machine's hooks
 * (wk__engine.setup_begin / setup_done) or, without them, as a blocking
 * handle's (core/db.c); a cluster node's always the same way: host:port,
 * no SELECT, by the machine's deadline.
 */
#ifndef WK_CORE_ENGINE_CONN_H
#define WK_CORE_ENGINE_CONN_H

#include "core/exchange.h"

/* wk__engine_connect(): the set-up runs; wait for what the lane names. */
#define WK__CONNECTING 1

/* Lane `lane` needs its connection. `check`: first look at a connection
 * there (broken, replaced, idle-closed: dropped). WK_OK: connected;
 * WK__CONNECTING: its set-up runs (begun now, or stepped with the lane's
 * ready events); else the set-up's failure, why in `why`. A machine with
 * no_reconnect fails at once (WK_EIO) instead of setting up. */
int wk__engine_connect(wk__engine *m, uint16_t lane, bool check, char *why, size_t whylen);
/* The set-up on lane q: its events (0 during a pause between Sentinel
 * rounds), *fd, and *due lowered to its deadline (due may be NULL). */
short wk__engine_setup_events(const wk__lane *q, int *fd, int64_t *due);
/* The earliest deadline of the set-ups running, or `due`. */
int64_t wk__engine_setups_due(const wk__engine *m, int64_t due);
/* End each set-up running with rc (the driver's failure); the next step
 * settles what waited for it. */
void wk__engine_setups_abort(wk__engine *m, int rc, const char *why);
/* Close and free the set-ups running (the driver told first). */
void wk__engine_setups_end(wk__engine *m);

#endif /* WK_CORE_ENGINE_CONN_H */
