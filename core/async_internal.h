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
    wk__engine m;   /* which sets the connection up, too */
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
typedef struct wk__async_subs wk__async_subs;   /* core/async_sub.c */
typedef struct wk__async_ports wk__async_ports; /* core/async_port.c */

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
    wk__async_subs *subs;         /* the hidden handles of its receivers, or NULL */
    struct wk__async_cluster *cl; /* a cluster handle's (core/async_cluster.h), else NULL */
    wk__async_ports *ports;       /* completions from other threads (core/async_port.c), or NULL */
    bool in_process;
    bool closing; /* in wk_async_close(): submissions are refused */
    bool one_node; /* a hidden handle on one cluster node (wk__async_sub_open_at): stays plain */
    char errmsg[WK__ERRMSG_MAX];
};

/* Queue q on lane l with `done(a, status, msg, arg)` as its completion
 * (rule 1 of wakuwaku/async.h): WK_OK, or the refusal (on the lane's db). */
int wk__async_lane_submit(wk__async_lane *l, wk_query *q, wk_async_done_fn done, void *arg);
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
 * list) and `woke(arg, status, why, element, len)` runs once, from
 * wk_async_process() or wk_async_close(): WK_OK when an element was
 * popped from the list (element[0..len): what the release pushed, e.g. a
 * handed-over notice; len 0 when it was longer than the lane keeps) or
 * the time is up (len 0), else the wait's failure (its connection:
 * nothing but a wake-up, or a handed-over notice, was taken). Returns
 * WK_OK, WK_ENOMEM or WK_EIO (closing; woke is never called then).
 */
typedef void (*wk__async_woke_fn)(void *arg, int status, const char *why, const char *element,
                                  size_t len);
int wk__async_park(wk_async *a, const char *list, size_t len, int64_t until, wk__async_woke_fn woke,
                   void *arg);
/* The same for a waiter of entity `e` (its list is in e's cluster slot):
 * a cluster handle's waits need it (WK_EINVAL without), the pop being
 * routed to that slot's node as a query on e. */
int wk__async_park_on(wk_async *a, const wk_entity *e, const char *list, size_t len, int64_t until,
                      wk__async_woke_fn woke, void *arg);

/* ---- the hidden handles of receivers (core/async_sub.c) ----------------
 *
 * A receiver through the loop (a Pipe receiver, a StreamBuffer
 * subscription: collection/receiver_loop.c) waits with blocking commands
 * on a connection of its own, as its blocking form does: a hidden
 * wk_async (wk__async_adopt) whose socket joins the handle's epoll set
 * (registered under WK__SUB_TAG + its slot) and which the handle's
 * wk_async_process() drives. The hidden handle's watch keeps that
 * registration and tells the handle's watch of every change (at once
 * outside the handle's turn: a receive asked from the loop's timer), so
 * nothing sent through a hidden handle needs to tell the handle itself. */

#define WK__SUB_TAG 0x40000000u

typedef struct wk__async_sub wk__async_sub;

/* A handle over `db` (made by the caller, e.g. wk__blocking_clone; the
 * handle owns it), connecting at once; NULL when out of memory. */
wk_async *wk__async_adopt(wk_db *db);
/* The epoll set as the handle's descriptor (made on first use; the watch
 * is told -1 for the old socket). WK_OK or WK_EIO. */
int wk__async_use_set(wk_async *a);

/* Hook of wk__async_ready(): events of the epoll entry `tag`. */
void wk__async_subs_ready(wk_async *a, uint32_t tag, uint32_t events);
/* Hook of wk_async_process(): drive the hidden handles with events or
 * due, and run the receivers that asked to run (wk__async_sub_kick). */
void wk__async_subs_run(wk_async *a);
/* Hook of wk__async_next_due(): the earliest due of the hidden handles
 * (0: a receiver asked to run), or -1. */
int64_t wk__async_subs_due(const wk_async *a);
/* Hooks of wk_async_events() and wk_async_pending(). */
bool wk__async_subs_watched(const wk_async *a);
size_t wk__async_subs_pending(const wk_async *a);
/* Hook of wk_async_close(): each receiver's `gone`, then its hidden
 * handle closes (its queries' callbacks run); the receivers stay, cut off. */
void wk__async_subs_close(wk_async *a);

/* A hidden handle for a receiver of `a`: `run(arg)` is called from
 * wk_async_process(a) after wk__async_sub_kick(); `reply(arg, status,
 * msg)` when a query sent with wk__async_sub_send() completes; `gone(arg)`
 * once, when `a` closes (the hidden handle closes right after, and
 * nothing more reaches arg). WK_OK, WK_EIO (closing), WK_ENOMEM, or what
 * copying the connection's settings returns (message in err). */
int wk__async_sub_open(wk__async_sub **out, wk_async *a, void (*run)(void *arg),
                       void (*gone)(void *arg),
                       void (*reply)(void *arg, int status, const char *msg), void *arg, char *err,
                       size_t errlen);
/* The same on a plain connection to the cluster node host:port alone
 * (host NULL: as wk__async_sub_open), for a subscriber that follows the
 * node owning a slot: no map, no redirection, a node's HELLO saying
 * "cluster" keeps it plain. */
int wk__async_sub_open_at(wk__async_sub **out, wk_async *a, const char *host, int port,
                          void (*run)(void *arg), void (*gone)(void *arg),
                          void (*reply)(void *arg, int status, const char *msg), void *arg,
                          char *err, size_t errlen);
/* Queue q on the hidden handle (a blocking command blocking up to
 * block_ms: its reply is due that much later): WK_OK, or the refusal
 * (WK_EIO once `a` closed). Its completion is reply(arg, …). */
int wk__async_sub_send(wk__async_sub *s, wk_query *q, int64_t block_ms);
/* A processor doing wk__async_sub_send(s, q, 0) (for wk__op_run). */
wk_processor *wk__async_sub_processor(wk__async_sub *s);
/* The hidden handle (NULL once `a` closed) and the user's handle. */
wk_async *wk__async_sub_handle(const wk__async_sub *s);
wk_async *wk__async_sub_parent(const wk__async_sub *s);
/* Ask for run(arg) in the next wk_async_process() of the parent. */
void wk__async_sub_kick(wk__async_sub *s);
/* Ask for run(arg) at `when` (wk__boot_ms(); 0: no timer), once. */
void wk__async_sub_wake_at(wk__async_sub *s, int64_t when);
/* Pub/Sub mode (core/async_subscriber.c): the hidden handle's pushes go to
 * push(arg, reply) (which owns it; called from inside the hidden
 * handle's processing: it must only keep what came), then run(arg); a
 * lost socket runs run(arg) too. */
void wk__async_sub_push(wk__async_sub *s, void (*push)(void *arg, redisReply *r));
/* Count a receive outstanding (1) or not (0) in wk_async_pending(). */
void wk__async_sub_busy(wk__async_sub *s, bool busy);
/* Close the hidden handle (its callbacks run, inside this call or, from
 * one of its own callbacks, right after it returns) and free. NULL: no-op. */
void wk__async_sub_close(wk__async_sub *s);

/* ---- ports: work off the loop completing on it (core/async_port.c) -----
 *
 * A port is an eventfd in the handle's epoll set (registered under
 * WK__PORT_TAG + its slot; the descriptor becomes the set, as with a
 * receiver): wk__async_port_signal(), from any thread, makes the handle's
 * next wk_async_process() call run(arg); wk__async_port_kick(), on the
 * loop's thread, the same without writing the eventfd (the timeout becomes 0).
 * The owner must not signal a port after it closed or after its `gone`
 * returned (the near cache checks under its own mutex). */

#define WK__PORT_TAG 0x20000000u

typedef struct wk__async_port wk__async_port;

/* WK_OK, WK_EIO (the handle is closing; no epoll set or eventfd) or
 * WK_ENOMEM. `gone(arg)` runs once, from wk_async_close(), then the port
 * is freed. */
int wk__async_port_open(wk__async_port **out, wk_async *a, void (*run)(void *arg),
                        void (*gone)(void *arg), void *arg);
void wk__async_port_signal(wk__async_port *p);
void wk__async_port_kick(wk__async_port *p);
/* How many of the owner's requests wk_async_pending() counts. */
void wk__async_port_busy(wk__async_port *p, size_t n);
/* Close and free (from its own run: right after it returns). NULL: no-op. */
void wk__async_port_close(wk__async_port *p);
/* The handle's hooks: an event of the epoll entry `tag`; run the ports
 * signalled or kicked; whether one is kicked (due now); whether any is in
 * the set; their busy counts; each one's gone, then free (close). */
void wk__async_ports_ready(wk_async *a, uint32_t tag);
void wk__async_ports_run(wk_async *a);
bool wk__async_ports_due(const wk_async *a);
bool wk__async_ports_watched(const wk_async *a);
size_t wk__async_ports_pending(const wk_async *a);
void wk__async_ports_close(wk_async *a);

#endif /* WK_CORE_ASYNC_INTERNAL_H */
