/*
 * core/async_internal.h — the parts of the event-loop handle
 * (wakuwaku/async.h) that core/async.c (lanes, submission, the public
 * calls) and core/async_wait.c (the watch, the epoll set, the waits lane)
 * share, and the park call the waiting acquires use
 * (collection/lease_loop.c). Not installed.
 *
 * A handle has one lane — its connection, an exchange machine in
 * continuous mode over its kept queries — until its first wait; then a
 * second, waits-only lane whose connection runs nothing but CLIENT ID and
 * one BLPOP over the lists of every parked waiter, and the descriptor the
 * loop watches becomes an epoll set holding both sockets.
 */
#ifndef WK_CORE_ASYNC_INTERNAL_H
#define WK_CORE_ASYNC_INTERNAL_H

#include <wakuwaku/async.h>

#include "core/conn_machine.h"
#include "core/exchange.h"

enum { WK__ALIVE, WK__FINAL, WK__CALLED };

typedef struct wk__async_entry {
    wk_async_done_fn done;
    void *arg;
    int status;
    unsigned char state;
    char *msg; /* a final failure's message (heap, rare), or NULL */
} wk__async_entry;

typedef struct wk__async_lane {
    wk_async *a;
    wk_db *db; /* its connection and settings */
    bool connecting;
    wk__setup setup; /* while connecting: the set-up, and what it waits for */
    wk__want want;
    wk__engine m;
    wk__exchange x; /* over k */
    wk__kept k;     /* the queries */
    wk__async_entry *e;
    size_t e_cap, nfinal;
    int reg_fd; /* registered in the epoll set: fd and events (-1: none) */
    unsigned reg_events;
} wk__async_lane;

#define WK__LANE_MAIN 0
#define WK__LANE_WAITS 1

typedef struct wk__async_waits wk__async_waits; /* core/async_wait.c */

struct wk_async {
    wk_processor proc; /* first member */
    wk_db *db;         /* the main lane's */
    wk_async_done_fn done;
    void *done_arg;
    wk_async_watch_fn watch;
    void *watch_arg;
    int seen_fd;
    unsigned seen_events;
    int64_t seen_due;
    wk__async_lane lane[2];
    int nlanes;
    int epfd;               /* the epoll set once the waits lane exists, else -1 */
    wk__async_waits *waits; /* NULL until the first park */
    struct wk__async_cluster *cl; /* a cluster handle's (core/async_cluster.h), else NULL */
    bool in_process;
    bool closing; /* in wk_async_close(): submissions are refused */
    char errmsg[WK__ERRMSG_MAX];
};

/* Queue q on lane l with `done(a, status, msg, arg)` as its completion
 * (rule 1 of wakuwaku/async.h): WK_OK, or the refusal (on the lane's db). */
int wk__async_lane_submit(wk__async_lane *l, wk_query *q, wk_async_done_fn done, void *arg);
/* Lane l needs its connection (no set-up in progress, none there). */
void wk__async_lane_connect(wk__async_lane *l);
/* The same to the node host:port alone (no SELECT), not the URL's target. */
void wk__async_lane_connect_to(wk__async_lane *l, const char *host, int port);
void wk__async_lane_init(wk__async_lane *l, wk_async *a, wk_db *db);
void wk__async_lane_free(wk__async_lane *l);
/* The lane's socket is (about to be) closed: tell the watch / the set. */
void wk__async_fd_gone(wk__async_lane *l);

/* The watch (core/async_wait.c): report what the handle waits for now. */
void wk__async_update_watch(wk_async *a);
/* When wk_async_process() is due without events (wk__boot_ms()), or -1. */
int64_t wk__async_next_due(const wk_async *a);
/* The events fired on each lane (epoll set) or on the one socket. */
void wk__async_ready(wk_async *a, unsigned ready, short ev[2]);
/* Run the parked waiters whose wake-up came or whose time is up; true
 * when one ran. And the end of the waits lane at close. */
bool wk__async_waits_fire(wk_async *a);
void wk__async_waits_close(wk_async *a);
/* How many waiters are parked now. */
size_t wk__async_parked(const wk_async *a);

/* The event-loop handle whose processor (or a wrapper's) db is `db`, or
 * NULL (a blocking handle, a batch). */
static inline wk_async *wk__async_of(const wk_db *db)
{
    return db ? db->loop : NULL;
}

/*
 * Park a waiter of handle a on its wake-up list `list` until `until`
 * (wk__boot_ms()): the waits lane BLPOPs it (with every other parked
 * list) and `woke(arg, status)` runs once, from wk_async_process() or
 * wk_async_close(): WK_OK when an element was popped from the list or
 * the time is up (the caller attempts again either way), else the wait's
 * failure (its connection: nothing but a wake-up was taken). Returns
 * WK_OK, WK_ENOMEM or WK_EIO (closing; woke is never called then).
 */
int wk__async_park(wk_async *a, const char *list, size_t len, int64_t until,
                   void (*woke)(void *arg, int status, const char *why), void *arg);

#endif /* WK_CORE_ASYNC_INTERNAL_H */
