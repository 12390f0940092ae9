/*
 * core/conn_machine.h — the set-up of a connection as one sans-I/O state
 * machine. It runs as a sub-machine of the exchange machine, which drives
 * every connection (core/exchange.h): a lane that needs a connection runs
 * a set-up inside it (core/engine_conn.h), so no driver steps it itself.
 * Not installed.
 *
 * One call of wk__setup_step() moves the set-up as far as it goes without
 * waiting, and says what to wait for next and until when:
 *
 *   dial (core/dial.c, every address in turn) → TLS handshake (rediss://,
 *   core/tls.c) → AUTH, HELLO (or PING + CLIENT SETNAME), SELECT, ROLE
 *   (Sentinel), pipelined and judged in order → ready.
 *
 * The target is one node (a cluster's), the URL's seeds in order (the
 * first that accepts), or for redis-sentinel:// the Sentinel search:
 * each sentinel in turn is asked for the primary (its own AUTH, then
 * SENTINEL get-master-addr-by-name, within an equal share of the search),
 * the node named is connected and must say ROLE master, round after round
 * (WK__SENTINEL_ROUND_PAUSE_MS apart) until max(connect, command timeout)
 * has passed. With WK__SETUP_NOTICE the sentinel that named the primary is
 * kept, subscribed to +switch-master (best effort).
 *
 * Deadlines: the whole set-up has one, fixed by wk__setup_begin (the
 * connect timeout, or the Sentinel budget), never later than the caller's
 * `cap` (a call's deadline; 0: none). A step never waits; the driver waits
 * until the want's deadline at most and steps again, ready or not: a
 * spent deadline ends the wait in progress with WK_ETIMEDOUT, whose
 * message names it ("did not answer HELLO before the deadline").
 */
#ifndef WK_CORE_CONN_MACHINE_H
#define WK_CORE_CONN_MACHINE_H

#include "core/db_internal.h"
#include "core/dial.h"

/* In `ready`: a blocking handle's wake-up descriptor fired (the set-up
 * ends, WK_EIO "interrupted"). The other bits are poll's. */
#define WK__WOKEN 0x4000

/* What the set-up waits for. */
typedef struct wk__want {
    int fd;           /* the socket to watch; -1: none (a pause between rounds) */
    short events;     /* POLLIN and/or POLLOUT on fd */
    int64_t deadline; /* step again by then at the latest (wk__boot_ms()) */
    bool done;        /* finished: s->rc (and s->msg) say how */
} wk__want;

/* wk__setup_begin() flags. */
#define WK__SETUP_SELECT 1u /* SELECT the URL's database (not 0) */
#define WK__SETUP_NOTICE 2u /* Sentinel: keep the failover notice */

typedef struct wk__setup {
    const wk__conn *conn; /* credentials, TLS, timeouts, the URL */
    unsigned flags;
    bool one_node; /* the target is `at` alone */
    int phase;
    int64_t deadline; /* the whole set-up's */
    int64_t step_by;  /* the current target's: a sentinel's share, or deadline */
    int64_t pause_until;
    int64_t budget; /* Sentinel: the search's length (ms) */
    size_t target;  /* the seed or sentinel being tried */
    bool asking;    /* talking to a sentinel */
    wk_url at;      /* where the current target is (host points into conn or host[]) */
    char host[256];
    wk__dial dial;
    size_t addresses; /* the dial moved to another address this many times */
    wk__link link;    /* the connection being set up */
    wk__link notice;  /* the sentinel kept for the failover notice */
    wk__buf out;      /* the pipelined commands */
    size_t wpos;
    unsigned char steps[8]; /* what each awaited reply answers, in order */
    int nsteps, step;
    short tls_want;
    char addr[300]; /* the current target, for messages */
    /* The Sentinel search's last failure (said when it ends). */
    int last;
    bool failed;
    char why[WK__ERRMSG_MAX / 2];
    /* Results: rc is WK_OK or the failure, msg says why (never quoting a
     * password); cluster: the node's HELLO said mode cluster; reached: the
     * seed that accepted. */
    int rc;
    char msg[WK__ERRMSG_MAX];
    bool cluster;
    size_t reached;
    /* Called before the machine closes a socket it asked to wait on (or
     * right after the dial moved to the next address's socket): the event
     * loop must drop that registration first. NULL: nothing to tell. */
    void (*closing)(void *arg);
    void *closing_arg;
} wk__setup;

/* Prepare the set-up of a connection with conn's settings (conn must
 * outlive it): to host:port alone when `host` is not NULL (a cluster
 * node), else the URL's target. No I/O yet: the first step dials. */
void wk__setup_begin(wk__setup *s, const wk__conn *conn, const char *host, int port, unsigned flags,
                     int64_t cap);

/* Move on; `ready`: the poll events seen on the want's fd (0: none, or a
 * timer), and WK__WOKEN. */
wk__want wk__setup_step(wk__setup *s, short ready);

/* End the set-up now with `rc` and message `why` (the driver's own
 * failure, e.g. poll's). */
void wk__setup_abort(wk__setup *s, int rc, const char *why);

/* After success: the connection (and the notice, or it is closed when
 * `notice` is NULL) become the caller's. */
void wk__setup_take(wk__setup *s, wk__link *link, wk__link *notice);

/* Release what the set-up holds (sockets not taken, buffers). Harmless
 * twice, and on a set-up never begun if zeroed. */
void wk__setup_end(wk__setup *s);

/* A blocking handle's connection (core/db.c), the exchange machine's way
 * to the handle's connection when its driver gives no other: begin — to
 * the URL's target, SELECT, the failover notice, by `cap` — and, once the
 * set-up ended, done: WK_OK with its connection the handle's (and for a
 * cluster node's HELLO, the map asked, blocking), or the failure with
 * `msg`. */
void wk__conn_setup_begin(wk__conn *conn, wk__setup *s, int64_t cap);
int wk__conn_setup_done(wk_db *db, wk__setup *s, char *msg, size_t msglen);

#endif /* WK_CORE_CONN_MACHINE_H */
