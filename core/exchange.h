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
    int status;
    size_t end; /* where its command ends in the bytes being written */
    /* Cluster handles (core/cluster.h): the node it goes to this round,
     * and an ASK redirection (ASKING first, to ask_node, once). */
    bool asking;
    unsigned char redirects; /* MOVED replies so far */
    uint16_t node, ask_node;
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
 * Run every slot to REPLIED or a final status. Returns WK_OK when every
 * query succeeded; otherwise the status of the first query the connection
 * failed (LOST or not sent) if any, else of the first failed query, with
 * the detail on the handle.
 */
int wk__exchange_run(wk__exchange *x);

#endif /* WK_CORE_EXCHANGE_H */
