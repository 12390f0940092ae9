/*
 * core/exchange.h — the one mechanism every query goes through: a single
 * query is an exchange of one, a batch an exchange of many. Not installed.
 *
 * Each query has one state, and the state alone decides what its status
 * means (docs/GUARANTEES.md, "Outcomes"):
 *
 *   UNSENT   not written — or answered NOSCRIPT, so it did not run. It may
 *            be sent (again) on this or a new connection; if the exchange
 *            ends first, its status is the connection's (WK_EIO,
 *            WK_ETIMEDOUT, …): it did not run.
 *   SENT     written (the kernel took all its bytes), no reply yet.
 *   REPLIED  its reply was parsed, or it was refused before sending: the
 *            status is the query's own outcome. (Sentinel handles: a
 *            READONLY reply — the node turned replica, the command did
 *            not run — makes the query UNSENT again, once, and drops the
 *            connection, so it goes to the primary found anew. Cluster
 *            handles: a MOVED, ASK, TRYAGAIN or CLUSTERDOWN reply means
 *            it did not run: UNSENT again, for the node named, or after
 *            a pause — see core/cluster.h.)
 *   LOST     written, and the reply never came (connection lost, timeout,
 *            garbage). A write is WK_EUNKNOWN: it may or may not have run.
 *            A read has the connection's status — and a retry-safe query is
 *            sent once more on a new connection after a dropped one (not
 *            after a timeout: a stalled server would only stall again).
 */
#ifndef WK_CORE_EXCHANGE_H
#define WK_CORE_EXCHANGE_H

#include "core/cluster.h"
#include "core/conn_machine.h"
#include "core/db_internal.h"

typedef enum wk__qstate { WK__UNSENT, WK__SENT, WK__REPLIED, WK__LOST } wk__qstate;

typedef struct wk__slot {
    unsigned char state; /* wk__qstate */
    bool writes;         /* its effect writes (set by the owner) */
    bool keyless;        /* it names no entity (PING, WAIT …; set by the owner) */
    bool as_eval;        /* answered NOSCRIPT: send as EVAL, which loads it */
    bool resent;         /* re-sent once already after a lost reply */
    bool readonly;       /* answered READONLY once (Sentinel: re-sent) */
    bool single_key;     /* answered TRYAGAIN: sent in its single-key form */
    bool carried;        /* continuous: went to a new connection once already */
    bool staged;         /* UNSENT, formatted on a lane, not written whole yet */
    int status;
    size_t end;  /* where its command ends in the bytes being written */
    size_t next; /* the next slot staged on its lane, + 1 (0: none) */
    int64_t due; /* continuous: its reply is due by then (wk__boot_ms()) */
    /* Cluster handles (core/cluster.h): the node it goes to this round,
     * and an ASK redirection (ASKING first, to ask_node, once; `asked`
     * once ASKING's own reply is read). */
    bool asking, asked;
    unsigned char redirects; /* MOVED replies so far */
    uint16_t node, ask_node;
    /* Continuous mode on a cluster (core/exchange_cluster.c): answered
     * TRYAGAIN / CLUSTERDOWN, it is not run after then (0: not yet). */
    int64_t give_up;
} wk__slot;

typedef struct wk__exchange {
    wk_db *db;
    wk__slot *slots;
    size_t count;
    /* The query of slot i; valid until the next call (a batch rebuilds it
     * over its own buffer). */
    const wk_query *(*query)(void *ctx, size_t i);
    void *ctx;
    /* The first round's commands, already formatted (a batch formats them
     * while queuing; slot.end set), or NULL to format here. */
    const char *prepared;
    size_t prepared_len;
} wk__exchange;

/*
 * Queries kept for an exchange that runs later (a batch's, the event-loop
 * handle's; core/kept.c): each is formatted when it is kept — its command
 * in `buf`, where each argument landed in `spans` — so the caller's memory
 * may go, and wk__kept_query() gives query i again, its arguments
 * pointing into buf (for the exchange's `query`, with the wk__kept as
 * ctx). Slot i is query i's.
 */
typedef struct wk__kept_entry {
    const char *name;
    unsigned flags;
    const wk_script *script;
    int nkeys, argc;
    size_t start, first_span; /* its command in buf; its spans */
    wk_parse_fn parse;
    void *out;
} wk__kept_entry;

typedef struct wk__kept {
    wk__kept_entry *entries;
    wk__slot *slots;
    size_t count, cap, slots_cap;
    wk__span *spans;
    size_t nspans, spans_cap;
    wk__buf buf;
    wk_query scratch; /* the query rebuilt */
    const char **argv;
    size_t *argvlen;
    size_t argv_cap, argvlen_cap;
} wk__kept;

/* Admit nothing (the caller has), format q and keep it as the next query,
 * its slot UNSENT (end: where its command ends in buf). WK_OK, or the
 * failure with the message on db; nothing is kept then. */
int wk__kept_add(wk__kept *k, wk_db *db, const wk_query *q);
const wk_query *wk__kept_query(void *k, size_t i);
/* Forget queries [0, n): the others move down. */
void wk__kept_drop_front(wk__kept *k, size_t n);
void wk__kept_free(wk__kept *k);

/*
 * The outcome rule for a query written on a connection that then failed
 * with `rc` before its reply came — shared by exchanges and the
 * event-loop handle (core/async.c), so both settle alike: a write may
 * have run (WK_EUNKNOWN); a read has the connection's status.
 */
static inline int wk__lost_status(bool writes, int rc)
{
    return writes ? WK_EUNKNOWN : rc;
}

/* Whether such a query goes once more on a new connection: only a
 * retry-safe one not re-sent yet, and only after a dropped connection
 * (WK_EIO), not a timeout (a stalled server would stall again). */
static inline bool wk__may_resend(unsigned query_flags, bool resent, int rc)
{
    return rc == WK_EIO && (query_flags & WK_QUERY_RETRY_SAFE) && !resent;
}

/*
 * The exchange as a sans-I/O machine (core/exchange.c), the one machine
 * that drives a connection for its whole life: wk__engine_begin() fixes
 * the call's deadline, each wk__engine_step() moves the queries as far as
 * they go without waiting — sets up the connection a lane needs and has
 * not (dial, TLS, AUTH / HELLO / SELECT, the Sentinel search: the set-up
 * machine of core/conn_machine.h runs inside the lane, core/engine_conn.h),
 * writes what a lane's socket takes, reads what it has, judges each reply
 * (NOSCRIPT, READONLY, MOVED / ASK / TRYAGAIN, the WAIT of an
 * acknowledged lease, a lost reply, the re-send of what never ran) — and
 * says what to do next:
 *
 *   WAIT     poll every lane wk__engine_lane_events() names (a lane being
 *            set up names the set-up's socket) and the handle's wake
 *            descriptor, until `deadline`; record what fired with
 *            wk__engine_ready(), step again;
 *   REFRESH  ask a cluster handle's slot map anew (its failure is no
 *            failure: the old map stays), step again — the blocking
 *            driver by wk__cluster_refresh (each ask an exchange of one,
 *            wk__exchange_run_one, polled like any), the event-loop
 *            handle on its map lane;
 *   DONE     every slot is settled: wk__engine_end() gives the result.
 *
 * The blocking driver (wk__exchange_run) polls around it; a one-server
 * exchange takes a short path through the same rules (no lanes to route).
 * Every driver — the blocking exchange, the pool's shared connections
 * (core/pool_mux.c), the event-loop handle (core/async.c, its cluster
 * lanes in core/async_cluster.c) and the Pub/Sub subscriber — does only
 * that: poll what the machine names, step it.
 */
typedef enum wk__xwhat { WK__X_WAIT, WK__X_REFRESH, WK__X_DONE } wk__xwhat;

typedef struct wk__xwant {
    wk__xwhat what;
    int64_t deadline; /* WAIT's: step again by then at the latest */
} wk__xwant;

typedef struct wk__engine {
    wk__exchange *x;
    wk__conn *conn;   /* x->db->conn */
    int64_t deadline; /* the call's one deadline (wk__boot_ms()) */
    int conn_rc;      /* status of the connection failure, or WK_OK */
    char why[WK__ERRMSG_MAX / 2];
    size_t first_failed; /* first query with its own failure */
    char first_msg[WK__ERRMSG_MAX / 2];
    int round;
    bool routed;     /* this round's slots have their lanes */
    bool in_round;   /* staged: the round's I/O is on */
    bool waited;     /* the driver waited since the round was staged */
    bool refresh;    /* a REFRESH is due before the next round */
    bool readonly;   /* a reply was READONLY: drop, re-discover */
    bool try_later;  /* a reply was TRYAGAIN / CLUSTERDOWN: pause, send again */
    bool gave_up;    /* … until the deadline: sent, answered, not run */
    bool reconnected;
    bool done;
    int pause_ms;
    int64_t pause_until; /* pausing until then (0: not) */
    /* Continuous mode (wk__engine_open): each slot is settled as soon as
     * its outcome is known, through `settled`; slots before `scan` are
     * all staged or settled. */
    void (*settled)(void *arg, size_t i, int status, const char *msg);
    void *arg;
    size_t scan;
    /* Called before the machine closes a connection the driver may be
     * watching, and when a node's set-up failed (m->why says why); NULL:
     * nothing to tell. */
    void (*closing)(void *arg);
    /* Push mode (continuous mode only; set after wk__engine_open): the
     * lane's connection also receives replies nobody asked for — a Pub/Sub
     * message (RESP2, subscribed; RESP3 would add its push type: see
     * wk__reply_is_push). Each one is handed to push(arg, reply), which
     * owns it, in the order read: a push that arrives in the same read as
     * a reply, before or after it, is neither lost nor reordered, and a
     * reply is still matched to its query. A reply that is no push while
     * no query waits fails the lane (WK_EPROTO). NULL: no push mode (a
     * stray reply fails the lane). */
    void (*push)(void *arg, redisReply *reply);
    /* Continuous mode on a cluster (core/exchange_cluster.c): slots
     * [scan, placed) have their node. */
    size_t placed;
    /* The set-up of the handle's connection (lane WK__NO_NODE) when it
     * has none (core/engine_conn.h): setup_begin(arg, s) begins it,
     * setup_done(arg, s) makes what it made the handle's — WK_OK, or the
     * failure with its message in s->msg. NULL (wk__engine_begin,
     * wk__engine_open): a blocking handle's — the URL's target, SELECT,
     * the failover notice, a cluster's map asked, by the machine's
     * deadline (core/db.c wk__conn_setup_begin / _done). */
    void (*setup_begin)(void *arg, wk__setup *s);
    int (*setup_done)(void *arg, wk__setup *s);
    /* Called before a set-up closes a socket the driver may watch on
     * lane `lane` (WK__NO_NODE: the handle's connection); NULL: none. */
    void (*fd_gone)(void *arg, uint16_t lane);
    /* The connection is the owner's own (the subscriber's): once lost,
     * never set up again — what waits for it fails (WK_EIO). */
    bool no_reconnect;
} wk__engine;

/* Begin running exchange x (it must outlive the machine) by `deadline`. */
void wk__engine_begin(wk__engine *m, wk__exchange *x, int64_t deadline);
wk__xwant wk__engine_step(wk__engine *m);
/* The lanes to watch while WAITing: lane i (0 … wk__engine_lanes()-1)
 * wants `events` on *fd, or 0. */
size_t wk__engine_lanes(const wk__engine *m);
short wk__engine_lane_events(wk__engine *m, size_t i, int *fd);
void wk__engine_ready(wk__engine *m, size_t i, short revents);
/* The answer for a lane's connection (the machine's own set-up gives it;
 * the event-loop handle's map lane when the map cannot be learned):
 * WK_OK, or the failure and why — what waits for it fails. */
void wk__engine_ensured(wk__engine *m, uint16_t lane, int rc, const char *why);
/* Set up the handle's connection now, with no query yet (the event-loop
 * handle connects at open and when a query comes); nothing when there is
 * one, or one is being set up. */
void wk__engine_dial(wk__engine *m);
/* Whether a lane's connection is being set up. */
bool wk__engine_connecting(const wk__engine *m);
/* The driver's own failure while waiting (poll's, an interrupt): every
 * lane with queries on the way is lost with `rc`, every set-up ends with
 * it. */
void wk__engine_fail(wk__engine *m, int rc, const char *why);
/* After DONE: WK_OK when every query succeeded; otherwise the status of
 * the first query the connection failed (LOST or not sent) if any, else
 * of the first failed query, with the detail on the handle. */
int wk__engine_end(wk__engine *m);

/*
 * Continuous mode, for the event-loop handle (core/async.c) and, in
 * push mode (wk__engine.push), the Pub/Sub subscriber (core/subscriber.c,
 * whose connection is its own: no_reconnect, it is never set up again),
 * and the pool's shared connections (core/pool_mux.c): one lane
 * (the handle's connection), queries added at any time (x->count grows;
 * wk__engine_step() stages them as soon as the lane's bytes are written,
 * behind the queries in flight), each settled through `settled` with its
 * message — the same rules, applied per query: a lost connection re-sends
 * at once, on a new connection, what never ran (once) and the retry-safe
 * queries whose reply was lost (once); a reply is due by the command
 * timeout (and a lease's ack timeout) after its command went out; a
 * READONLY reply drains the connection, then drops it. A connection is set
 * up only when there is none and a query waits (or wk__engine_dial());
 * the set-up's deadline is wk__engine_due()'s meanwhile, and its own
 * (the connect timeout, capped by m->deadline when a driver sets one: the
 * pool's). No DONE: wk__engine_cancel() ends.
 */
void wk__engine_open(wk__engine *m, wk__exchange *x,
                     void (*settled)(void *arg, size_t i, int status, const char *msg),
                     void (*closing)(void *arg), void *arg);
/* When the next step is due without events (wk__boot_ms(); 0: none). */
int64_t wk__engine_due(const wk__engine *m);
/* Slots [0, n) are settled and go: the others move down by n. */
void wk__engine_shift(wk__engine *m, size_t n);
/* Settle every slot not settled yet with `rc` (a query sent without a
 * reply by the lost-reply rule), empty the lanes and end their set-ups
 * (fd_gone told); the driver closes the connection. */
void wk__engine_cancel(wk__engine *m, int rc, const char *why);

/*
 * Run every slot to REPLIED or a final status, blocking (a poll loop
 * around the machine); returns as wk__engine_end().
 */
int wk__exchange_run(wk__exchange *x);
/* The same for one query q alone (a single query: core/dispatch.c);
 * with a host, on a plain handle whose connection, when it has none, is
 * set up to host:port (no SELECT, no failover notice) rather than to its
 * URL's target, and stays on the handle (a cluster map's CLUSTER SLOTS,
 * core/cluster.c). */
int wk__exchange_run_one(wk_db *db, const wk_query *q, const char *host, int port);

#endif /* WK_CORE_EXCHANGE_H */
