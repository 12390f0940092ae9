/*
 * core/async.c — the event-loop handle (wakuwaku/async.h): an adapter
 * over the machines every handle shares. The exchange machine
 * (core/exchange.h, continuous mode) stages, writes, reads and judges the
 * queries by the rules of every exchange; the set-up machine
 * (core/conn_machine.h: dial, TLS, AUTH / HELLO / SELECT, the Sentinel
 * search) makes the connection when the exchange asks for one (ENSURE).
 * Both are stepped from wk_async_process(); their wants are what the
 * loop is shown.
 *
 * A wk_async wraps a wk_db that is never connected the blocking way: its
 * settings, capability, script hashes and detail message are the
 * handle's. A query is admitted and kept formatted when submitted
 * (core/kept.c, as a batch's); entry i holds query i's callback.
 *
 * Callbacks run only from wk_async_process() and wk_async_close(), from
 * flush(), after the state is consistent: a callback may submit (the
 * arrays may grow under it, so nothing holds pointers across a callback).
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <wakuwaku/async.h>
#include <wakuwaku/clock.h>

#include "core/conn_machine.h"
#include "core/exchange.h"

enum { LIVE, FINAL, CALLED };

typedef struct entry {
    wk_async_done_fn done;
    void *arg;
    int status;
    unsigned char state;
    char *msg; /* a final failure's message (heap, rare), or NULL */
} entry;

struct wk_async {
    wk_processor proc; /* first member */
    wk_db *db;
    wk_async_done_fn done;
    void *done_arg;
    wk_async_watch_fn watch;
    void *watch_arg;
    int seen_fd;
    unsigned seen_events;
    int64_t seen_due;

    bool connecting;
    wk__setup setup; /* while connecting: the set-up, and what it waits for */
    wk__want want;
    wk__engine m;
    wk__exchange x; /* over k */
    wk__kept k;     /* the queries */
    entry *e;
    size_t e_cap, nfinal;
    bool in_process;
    bool closing; /* in wk_async_close(): submissions are refused */
    char errmsg[WK__ERRMSG_MAX];
};

/* The machine settled query i (its callback runs later, in flush()). */
static void settled(void *arg, size_t i, int status, const char *msg)
{
    wk_async *a = arg;
    entry *e = &a->e[i];
    a->nfinal++;
    e->state = FINAL;
    e->status = status;
    e->msg = status != WK_OK && msg && msg[0] ? strdup(msg) : NULL;
}

/* Run the callbacks of settled queries, in submission order. A callback
 * may submit: entries are found by index again after each one. */
static void flush(wk_async *a)
{
    for (size_t i = 0; i < a->x.count && a->nfinal; i++) {
        entry *e = &a->e[i];
        if (e->state != FINAL)
            continue;
        e->state = CALLED;
        a->nfinal--;
        wk_async_done_fn done = e->done;
        void *arg = e->arg;
        int status = e->status;
        char msg[WK__ERRMSG_MAX];
        wk__copy_text(msg, sizeof(msg), e->msg ? e->msg : "");
        free(e->msg);
        e->msg = NULL;
        if (done)
            done(a, status, msg, arg);
    }
}

/* Let the completed front go, once it is most of what is kept (or all). */
static void compact(wk_async *a)
{
    size_t n = 0;
    while (n < a->x.count && a->e[n].state == CALLED)
        n++;
    if (n == 0 || (n < a->x.count && (n < 32 || 2 * n < a->x.count)))
        return;
    wk__engine_shift(&a->m, n);
    wk__kept_drop_front(&a->k, n);
    memmove(a->e, a->e + n, (a->k.count) * sizeof(*a->e));
    a->x.count = a->k.count;
}

/* ---- the watch ---------------------------------------------------------- */

int wk_async_fd(const wk_async *a)
{
    if (!a)
        return -1;
    if (a->connecting)
        return a->want.fd;
    return a->db->conn->link.ctx ? a->db->conn->link.ctx->fd : -1;
}

unsigned wk_async_events(const wk_async *a)
{
    if (!a)
        return 0;
    int fd;
    short ev = a->connecting ? a->want.events
                             : wk__engine_lane_events((wk__engine *)&a->m, 0, &fd);
    return (ev & POLLIN ? WK_ASYNC_READ : 0) | (ev & POLLOUT ? WK_ASYNC_WRITE : 0);
}

/* When wk_async_process() is due without events, or -1. */
static int64_t next_due(const wk_async *a)
{
    if (a->nfinal)
        return 0; /* callbacks are due */
    if (a->connecting)
        return a->want.deadline;
    if (!a->db->conn->link.ctx)
        return a->m.scan < a->x.count ? 0 : -1; /* to connect */
    int64_t due = wk__engine_due(&a->m);
    return due ? due : -1;
}

int64_t wk_async_timeout_ms(const wk_async *a)
{
    if (!a)
        return -1;
    int64_t due = next_due(a);
    if (due < 0)
        return -1;
    int64_t now = wk_monotonic_ms();
    return due > now ? due - now : 0;
}

static void update_watch(wk_async *a)
{
    if (!a->watch)
        return;
    int fd = wk_async_fd(a);
    unsigned ev = wk_async_events(a);
    int64_t due = next_due(a);
    if (fd == a->seen_fd && ev == a->seen_events && due == a->seen_due && due != 0)
        return;
    a->seen_fd = fd;
    a->seen_events = ev;
    a->seen_due = due;
    a->watch(a, fd, ev, wk_async_timeout_ms(a), a->watch_arg);
}

/* The descriptor the watch was shown is closed (or about to be): say so
 * before anything else is reported. A new socket often gets the same
 * number, and loops that keep descriptors registered (epoll: libuv,
 * libevent) must drop the old registration first, which they cannot do
 * if the number seems unchanged. */
static void fd_gone(void *arg)
{
    wk_async *a = arg;
    if (!a->watch || a->seen_fd < 0)
        return;
    a->seen_fd = -1;
    a->seen_events = 0;
    a->seen_due = -1;
    a->watch(a, -1, 0, -1, a->watch_arg);
}

/* The exchange is about to close the connection: keep why. */
static void conn_closing(void *arg)
{
    wk_async *a = arg;
    wk__copy_text(a->errmsg, sizeof(a->errmsg), a->m.why);
    a->db->errmsg[0] = '\0'; /* the newer failure is the handle's message */
    fd_gone(a);
}

/* ---- the connection ----------------------------------------------------- */

/* The set-up ended: the connection is the exchange's, or every query
 * waiting for it fails with the reason. */
static void connected(wk_async *a)
{
    a->connecting = false;
    int rc = a->setup.rc;
    if (rc || a->setup.cluster)
        a->db->errmsg[0] = '\0'; /* the newer failure is the handle's message */
    if (rc)
        wk__copy_text(a->errmsg, sizeof(a->errmsg), a->setup.msg);
    else if (a->setup.cluster) {
        /* Not routed by slot yet: a cluster needs the blocking handle. */
        rc = WK_EINVAL;
        snprintf(a->errmsg, sizeof(a->errmsg),
                 "%s is a Redis Cluster node; the event-loop handle does not route by slot "
                 "yet (use wk_db_open)",
                 a->setup.addr);
    }
    if (rc) {
        fd_gone(a);
        wk__setup_end(&a->setup);
        wk__engine_ensured(&a->m, WK__NO_NODE, rc, a->errmsg);
        return;
    }
    wk__setup_take(&a->setup, &a->db->conn->link, NULL);
    wk__setup_end(&a->setup);
    a->db->conn->last_io_ms = wk_monotonic_ms();
}

static void start_connect(wk_async *a)
{
    wk__setup_begin(&a->setup, a->db->conn, NULL, 0, WK__SETUP_SELECT, 0);
    a->setup.closing = fd_gone;
    a->setup.closing_arg = a;
    a->connecting = true;
    a->want = wk__setup_step(&a->setup, 0);
    if (a->want.done)
        connected(a);
}

/* Move the connection and the queries as far as they go now. */
static void advance(wk_async *a, unsigned ready)
{
    short ev = (short)((ready & WK_ASYNC_READ ? POLLIN : 0) | (ready & WK_ASYNC_WRITE ? POLLOUT : 0));
    for (int guard = 0; guard < 8; guard++) {
        if (a->connecting) {
            a->want = wk__setup_step(&a->setup, ev);
            ev = 0;
            if (!a->want.done)
                return;
            connected(a);
        }
        wk__engine_ready(&a->m, 0, ev);
        ev = 0;
        if (wk__engine_step(&a->m).what != WK__X_ENSURE || a->closing)
            return;
        start_connect(a);
    }
}

/* ---- the public calls --------------------------------------------------- */

static int async_submit(wk_processor *self, wk_query *q)
{
    wk_async *a = (wk_async *)self;
    if (!q)
        return WK_EINVAL;
    wk_db *db = a->db;
    db->errmsg[0] = '\0';
    if (!q->name)
        q->name = "query";
    if (a->closing) /* from a callback run by wk_async_close() */
        return wk__db_fail(db, WK_EIO, "%s: the handle is closing (not sent)", q->name);
    int rc = wk__db_admit(db, q);
    if (!rc && wk__grow_array(&a->e, &a->e_cap, a->k.count + 1, sizeof(*a->e)))
        rc = wk__db_fail(db, WK_ENOMEM, "%s: out of memory queuing", q->name);
    if (!rc)
        rc = wk__kept_add(&a->k, db, q);
    if (rc)
        return rc;
    a->e[a->x.count] = (entry){.done = a->done, .arg = a->done_arg};
    a->x.slots = a->k.slots;
    a->x.count = a->k.count;
    if (!a->connecting && !db->conn->link.ctx && !a->in_process)
        start_connect(a);
    update_watch(a);
    return WK_OK;
}

int wk_async_open(wk_async **out, const wk_db_options *opts, char *err, size_t errlen)
{
    if (!out)
        return wk__errbuf_set(err, errlen, WK_EINVAL, "out is NULL");
    *out = NULL;
    wk_async *a = calloc(1, sizeof(*a));
    if (!a)
        return wk__errbuf_set(err, errlen, WK_ENOMEM, "out of memory");
    int rc = wk__db_new(&a->db, opts, err, errlen);
    if (rc) {
        free(a);
        return rc;
    }
    if (a->db->conn->url.nseeds) {
        /* The loop's connect state machine dials one node; a cluster's
         * seeds are for blocking handles (wakuwaku/db.h). */
        wk_db_close(a->db);
        free(a);
        return wk__errbuf_set(err, errlen, WK_EINVAL,
                              "cluster seed lists are for blocking handles (wk_db_open); the "
                              "event-loop handle does not route by slot");
    }
    a->proc.process = async_submit;
    a->proc.db = a->db;
    a->proc.flags = WK_PROCESSOR_DEFERRED;
    a->setup.dial.fd = -1; /* nothing to end yet */
    a->seen_fd = -1;
    a->seen_due = -1;
    a->x = (wk__exchange){.db = a->db, .query = wk__kept_query, .ctx = &a->k};
    wk__engine_open(&a->m, &a->x, settled, conn_closing, a);
    start_connect(a);
    *out = a;
    return WK_OK;
}

void wk_async_close(wk_async *a)
{
    if (!a)
        return;
    /* What is still queued completes now, by the outcome rules. */
    wk__engine_cancel(&a->m, WK_EIO, "handle closed");
    fd_gone(a);
    wk__setup_end(&a->setup);
    wk__conn_drop(a->db->conn);
    a->in_process = true;
    a->closing = true;
    flush(a);
    for (size_t i = 0; i < a->x.count; i++)
        free(a->e[i].msg);
    free(a->e);
    wk__kept_free(&a->k);
    wk_db_close(a->db);
    free(a);
}

wk_processor *wk_async_with(wk_async *a, wk_async_done_fn done, void *arg)
{
    if (!a)
        return NULL;
    a->done = done;
    a->done_arg = arg;
    return &a->proc;
}

void wk_async_set_watch(wk_async *a, wk_async_watch_fn watch, void *arg)
{
    if (!a)
        return;
    a->watch = watch;
    a->watch_arg = arg;
    a->seen_fd = -2; /* report the current state at once */
    update_watch(a);
}

void wk_async_process(wk_async *a, unsigned ready)
{
    if (!a || a->in_process)
        return;
    a->in_process = true;
    advance(a, ready);
    flush(a);
    /* Callbacks may have queued more: send it in this turn. */
    advance(a, 0);
    flush(a);
    a->in_process = false;
    compact(a);
    update_watch(a);
}

size_t wk_async_pending(const wk_async *a)
{
    size_t n = 0;
    for (size_t i = 0; a && i < a->x.count; i++)
        n += a->e[i].state != CALLED;
    return n;
}

const wk_cap *wk_async_capability(const wk_async *a)
{
    return a ? a->db->cap : NULL;
}

const char *wk_async_errmsg(const wk_async *a)
{
    /* A refused call's detail (on the handle's processor, cleared when a
     * call is accepted), else the last connection failure. */
    if (!a)
        return "no handle";
    return a->db->errmsg[0] ? a->db->errmsg : a->errmsg;
}
