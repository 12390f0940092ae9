/*
 * core/pool_mux.h — one connection of a multiplexing pool (core/pool.c,
 * wakuwaku/pool.h: wk_pool_options.multiplex): many threads' queries in
 * flight on it at once. Not installed.
 *
 * A lane is the pool's handle i driven by the exchange machine in
 * continuous mode (core/exchange.h), over the queries kept formatted
 * (core/kept.c) — the machine of the event-loop handle, here under a
 * mutex. A thread keeps its query on the lane (slot i) and steps the
 * machine itself: its command is written at once, behind what is in
 * flight. A thread that finds the mutex taken does not wait for it: it
 * pushes its query on the lane's pending stack (lock-free), and the
 * holder puts every pushed query on before it lets go — one write for
 * all of them. Then each thread either leads — polls the socket, reads every reply that came,
 * settles each query (the parse writes the caller's OUT parameters under
 * the mutex, before its thread is woken) — or sleeps until its own query
 * is settled or leadership is handed to it. The leader leaves as soon as
 * its own query is settled, handing the lead to the oldest thread still
 * waiting.
 *
 * Each query keeps its own deadline: a thread whose deadline passes
 * leaves its slot in the lane (the replies stay in order); a query not
 * written yet is taken out (WK_ETIMEDOUT, not sent), a written one is
 * WK_EUNKNOWN for a write (WK_ETIMEDOUT for a read), and its reply is
 * read and discarded when it comes: its parse is cleared under the mutex,
 * so nothing is written into the caller's memory after it returned.
 */
#ifndef WK_CORE_POOL_MUX_H
#define WK_CORE_POOL_MUX_H

#include <pthread.h>
#include <stdatomic.h>

#include "core/exchange.h"

typedef struct wk__mux_waiter wk__mux_waiter;

typedef struct wk__mux_lane {
    pthread_mutex_t mu;
    wk_db *db;           /* the pool's handle; its connection */
    wk__engine m;        /* continuous mode over x */
    wk__exchange x;      /* over k */
    wk__kept k;          /* the queries in the lane, formatted */
    wk__mux_waiter **w;  /* per slot: the thread waiting for it, or NULL */
    size_t w_cap;
    size_t unsettled;    /* slots not settled yet (abandoned ones included) */
    int users;           /* threads waiting for a slot of theirs */
    bool leader;         /* a thread drives the lane's I/O now */
    bool polling;        /* … and sleeps in poll (the mutex released) */
    void *poll_ctx;      /* the connection it polls */
    int poll_fd;         /* … its socket (-1: none) and the events */
    short poll_ev;
    wk__mux_waiter *drainer; /* a borrower waiting for the lane to go quiet */
    int kick_fd;         /* eventfd: wakes the leader's poll */
    _Atomic uint64_t kicks; /* … how often (wk__pool_leader_kicks, tests) */
    /* queries pushed by threads that found the mutex taken; its holder
     * puts them on the lane before it lets go (a write for all of them) */
    _Atomic(wk__mux_waiter *) pending;
    _Atomic int load;    /* users, read without the mutex to pick a lane */
    atomic_bool closed;  /* borrowed (or being drained for a borrow): no queries */
    /* futex words to wake once the mutex is released */
    _Atomic int **wake;
    size_t nwake, wake_cap;
} wk__mux_lane;

/* Returned by wk__mux_run() when the lane is closed (borrowed): nothing
 * was kept; pick another. */
#define WK__MUX_CLOSED (-1000)

int wk__mux_init(wk__mux_lane *l, wk_db *db);
void wk__mux_free(wk__mux_lane *l);
/* Run admitted query q on the lane by `deadline` (wk__boot_ms()); the
 * detail of a failure goes to msg (WK__ERRMSG_MAX bytes). */
int wk__mux_run(wk__mux_lane *l, wk_query *q, int64_t deadline, char *msg);
/* For a borrow: the lane is closed already; wait until nothing is in it
 * (driving the replies of abandoned queries if nobody does) by
 * `deadline`: WK_OK, or WK_ETIMEDOUT. */
int wk__mux_drain(wk__mux_lane *l, int64_t deadline);

#endif /* WK_CORE_POOL_MUX_H */
