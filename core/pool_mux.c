/*
 * core/pool_mux.c — a connection that many threads' queries share in
 * flight (core/pool_mux.h).
 *
 * Wake-ups: each waiting thread sleeps on a futex word of its own (on its
 * stack). Whoever settles its query stores DONE there (release: the
 * status, the message and the OUT parameters are written before) and
 * wakes it after releasing the mutex; a thread woken DONE returns without
 * taking the mutex again. A wake that comes after the thread returned
 * lands on a word no one waits on, or on a later wait of the same kind,
 * which looks at its word again and sleeps on: every wait is a loop.
 * LEAD is a separate bit, so a thread handed the lead while its own query
 * is settled still takes the mutex and passes the lead on.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* syscall() for the futex */
#endif
#include <errno.h>
#include <linux/futex.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/pool_mux.h"

enum { DONE = 1, LEAD = 2 };

struct wk__mux_waiter {
    _Atomic int state; /* DONE | LEAD bits */
    size_t slot;       /* its slot in the lane (moved down by compact()) */
    int status;
    char *msg;         /* WK__ERRMSG_MAX bytes: the caller's */
    wk_query *q;       /* its query, and the query's deadline */
    int64_t deadline;
    struct wk__mux_waiter *next; /* in the lane's pending stack */
};

static void futex_wait(_Atomic int *word, int seen, int64_t until)
{
    int64_t left = until - wk__boot_ms();
    if (left <= 0)
        return;
    struct timespec ts = {(time_t)(left / 1000), (long)(left % 1000) * 1000000};
    syscall(SYS_futex, (int *)word, FUTEX_WAIT_PRIVATE, seen, &ts, NULL, 0);
}

static void futex_wake(_Atomic int *word)
{
    syscall(SYS_futex, (int *)word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/* Set bits on w and have it woken once the mutex is released. Room was
 * made when w entered the lane (one entry per waiter and bit set). */
static void post(wk__mux_lane *l, wk__mux_waiter *w, int bit)
{
    if (atomic_fetch_or_explicit(&w->state, bit, memory_order_release) & bit)
        return; /* queued already */
    if (l->nwake < l->wake_cap)
        l->wake[l->nwake++] = &w->state;
    else
        futex_wake(&w->state); /* cannot happen: room is reserved */
}

static void flush(wk__mux_lane *l);
static void hand_off(wk__mux_lane *l);

/* Put the pushed queries on the lane, wake what post() queued; the mutex
 * is held on entry and released on return (the woken need not meet the
 * waker on it). A query pushed while the mutex was held is taken by the
 * holder before it lets go, or by the pusher (which tries the mutex after
 * pushing), or, when both missed, here after the unlock. */
static void unlock_and_wake(wk__mux_lane *l)
{
    for (;;) {
        if (atomic_load_explicit(&l->pending, memory_order_relaxed)) {
            flush(l);
            if (!l->leader && l->users > 0)
                hand_off(l); /* the queries just put on need a reader */
        }
        _Atomic int *words[16];
        size_t n = l->nwake < 16 ? l->nwake : 16;
        l->nwake -= n;
        memcpy(words, l->wake + l->nwake, n * sizeof(*words));
        bool more = l->nwake > 0;
        pthread_mutex_unlock(&l->mu);
        for (size_t i = 0; i < n; i++)
            futex_wake(words[i]);
        if (more)
            pthread_mutex_lock(&l->mu);
        else if (!atomic_load(&l->pending) || pthread_mutex_trylock(&l->mu) != 0)
            return;
    }
}

static void set_users(wk__mux_lane *l, int delta)
{
    l->users += delta;
    atomic_store_explicit(&l->load, l->users, memory_order_relaxed);
}

/* The machine settled slot i (the parse, if any, has run). */
static void settled(void *arg, size_t i, int status, const char *msg)
{
    wk__mux_lane *l = arg;
    l->unsettled--;
    wk__mux_waiter *w = l->w[i];
    if (!w)
        return; /* abandoned: its caller has returned */
    l->w[i] = NULL;
    set_users(l, -1);
    w->status = status;
    if (status != WK_OK)
        wk__copy_text(w->msg, WK__ERRMSG_MAX, msg && msg[0] ? msg : wk_strerror(status));
    post(l, w, DONE);
    if (l->users == 0 && l->drainer)
        post(l, l->drainer, LEAD);
}

/* Tell the leader's poll to look again (its connection or its events
 * changed under it). */
static void kick(wk__mux_lane *l)
{
    uint64_t one = 1;
    atomic_fetch_add_explicit(&l->kicks, 1, memory_order_relaxed);
    ssize_t n = write(l->kick_fd, &one, sizeof(one));
    (void)n;
}

/* Step the machine as far as it goes without waiting. A connection it
 * sets up has its own deadline (the connect timeout), not a caller's:
 * each caller gives up at its own (abandon()), and the set-up goes on
 * for the queries that come after. */
static void advance(wk__mux_lane *l)
{
    wk__engine_step(&l->m);
}

/* Let the settled front go once it is most of what is kept (or all). */
static void compact(wk__mux_lane *l)
{
    size_t n = 0, count = l->x.count;
    while (n < count && l->x.slots[n].state == WK__REPLIED && !l->w[n])
        n++;
    if (n == 0 || (n < count && n < 64 && 2 * n < count))
        return;
    wk__engine_shift(&l->m, n);
    wk__kept_drop_front(&l->k, n);
    memmove(l->w, l->w + n, (count - n) * sizeof(*l->w));
    l->x.count = l->k.count;
    l->x.slots = l->k.slots;
    for (size_t i = 0; i < l->x.count; i++)
        if (l->w[i])
            l->w[i]->slot = i;
}

/* One turn of the leader (mutex held on entry and on return): wait for
 * the socket (or a kick) until `until` or the head's reply is due, then
 * move what can move. */
static void lead_once(wk__mux_lane *l, int64_t until)
{
    wk__conn *conn = l->db->conn;
    flush(l);
    struct pollfd p[2];
    nfds_t n = 0;
    int fd = -1;
    short ev = wk__engine_lane_events(&l->m, 0, &fd);
    if (ev && fd >= 0)
        p[n++] = (struct pollfd){.fd = fd, .events = ev};
    nfds_t sock = n;
    p[n++] = (struct pollfd){.fd = l->kick_fd, .events = POLLIN};
    int64_t due = wk__engine_due(&l->m);
    int64_t when = wk__deadline_min(until, due);
    void *ctx = conn->link.ctx;
    l->polling = true;
    l->poll_ctx = ctx;
    l->poll_fd = sock ? fd : -1;
    l->poll_ev = sock ? ev : 0;
    unlock_and_wake(l);
    int got = wk__poll_until(p, n, when);
    pthread_mutex_lock(&l->mu);
    l->polling = false;
    if (got > 0 && p[sock].revents) {
        uint64_t v;
        ssize_t r = read(l->kick_fd, &v, sizeof(v));
        (void)r;
    }
    if (got > 0 && sock == 1 && conn->link.ctx == ctx)
        wk__engine_ready(&l->m, 0, p[0].revents);
    advance(l);
}

/* The leader leaves: the lead goes to the oldest thread still waiting,
 * else nobody leads (the next query does), and a borrower waiting for the
 * lane looks again. */
static void hand_off(wk__mux_lane *l)
{
    l->leader = false;
    for (size_t i = 0; i < l->x.count; i++)
        if (l->w[i]) {
            l->leader = true;
            post(l, l->w[i], LEAD);
            return;
        }
    if (l->drainer)
        post(l, l->drainer, LEAD);
}

/* w's deadline passed before its query was settled: leave the slot. */
static int abandon(wk__mux_lane *l, wk__mux_waiter *w)
{
    size_t i = w->slot;
    wk__slot *s = &l->x.slots[i];
    wk__kept_entry *e = &l->k.entries[i];
    l->w[i] = NULL;
    set_users(l, -1);
    if (l->users == 0 && l->drainer)
        post(l, l->drainer, LEAD);
    if (s->state == WK__UNSENT && !s->staged) {
        /* Not written, and now never will be. */
        s->state = WK__REPLIED;
        s->status = WK_ETIMEDOUT;
        l->unsettled--;
        snprintf(w->msg, WK__ERRMSG_MAX, "%s: timed out before it could be sent%s", e->name,
                 s->writes ? " (not sent: the write did not happen)" : "");
        return WK_ETIMEDOUT;
    }
    /* Written (or being written): its reply is read and dropped when it
     * comes, and nothing is written into the caller's memory. */
    e->parse = NULL;
    e->out = NULL;
    snprintf(w->msg, WK__ERRMSG_MAX, "%s: timed out waiting for Redis%s", e->name,
             s->writes ? " (the write may or may not have happened)" : "");
    return s->writes ? WK_EUNKNOWN : WK_ETIMEDOUT;
}

/* Room for everything a new slot may need, so nothing fails later. */
static int reserve(wk__mux_lane *l)
{
    size_t need = l->k.count + 1;
    if (wk__grow_array(&l->w, &l->w_cap, need, sizeof(*l->w)))
        return WK_ENOMEM;
    /* a DONE and a LEAD per waiter, and the drainer's */
    return wk__grow_array(&l->wake, &l->wake_cap, 2 * need + 2, sizeof(*l->wake));
}

/* Mutex held; w's query is in the lane: lead until it is settled or the
 * deadline passes, and leave with the lead passed on. */
static int lead(wk__mux_lane *l, wk__mux_waiter *w, int64_t deadline)
{
    int rc;
    for (;;) {
        if (atomic_load_explicit(&w->state, memory_order_relaxed) & DONE) {
            rc = w->status;
            break;
        }
        if (wk__boot_ms() >= deadline) {
            rc = abandon(l, w);
            break;
        }
        lead_once(l, deadline);
    }
    hand_off(l);
    compact(l);
    unlock_and_wake(l);
    return rc;
}

/* Mutex held: put w's query on the lane (WK_OK), or say why not (the
 * message in w->msg). */
static int enter(wk__mux_lane *l, wk__mux_waiter *w)
{
    wk_query *q = w->q;
    if (atomic_load(&l->closed))
        return WK__MUX_CLOSED;
    if (wk__boot_ms() >= w->deadline) {
        snprintf(w->msg, WK__ERRMSG_MAX, "%s: timed out before it could be sent%s", q->name,
                 wk_effect_is_write(&q->effect) ? " (not sent: the write did not happen)" : "");
        return WK_ETIMEDOUT;
    }
    wk_db *db = l->db;
    int rc = reserve(l) ? wk__db_fail(db, WK_ENOMEM, "%s: out of memory queuing", q->name)
                        : wk__kept_add(&l->k, db, q);
    if (rc) {
        wk__copy_text(w->msg, WK__ERRMSG_MAX, db->errmsg);
        return rc;
    }
    w->slot = l->k.count - 1;
    l->w[w->slot] = w;
    l->x.slots = l->k.slots;
    l->x.count = l->k.count;
    l->unsettled++;
    set_users(l, 1);
    return WK_OK;
}

/* The pending stack, oldest first. */
static wk__mux_waiter *take_pending(wk__mux_lane *l)
{
    wk__mux_waiter *list = atomic_exchange_explicit(&l->pending, NULL, memory_order_acquire);
    wk__mux_waiter *fifo = NULL;
    while (list) {
        wk__mux_waiter *next = list->next;
        list->next = fifo;
        fifo = list;
        list = next;
    }
    return fifo;
}

/* Mutex held: put the pushed queries on the lane (telling those that
 * cannot go why), then write what the lane has — one write for all the
 * commands queued since the last. */
static void flush(wk__mux_lane *l)
{
    for (wk__mux_waiter *w = take_pending(l), *next; w; w = next) {
        next = w->next;
        int rc = enter(l, w);
        if (rc == WK_OK)
            continue;
        w->status = rc;
        post(l, w, DONE);
    }
    wk__conn *conn = l->db->conn;
    if (!conn->lane.head && conn->lane.wpos == conn->lane.len && conn->link.ctx &&
        !l->polling && l->m.scan < l->x.count) {
        /* Nothing in flight: the handle's check before a query (a broken
         * or idle-closed connection, a Sentinel failover notice); the
         * machine sets up a new one. */
        wk__conn_check(conn);
    }
    size_t woken = l->nwake;
    advance(l);
    /* A leader asleep in poll: tell it when it waits for the wrong thing
     * — bytes left to write, another socket, an event it does not poll
     * for — or a thread is to be woken. Not for a query written at once:
     * its reply comes on the socket the leader polls (a kick there was a
     * wake-up of the leader for each such query). */
    if (!l->polling)
        return;
    int fd = -1;
    short ev = wk__engine_lane_events(&l->m, 0, &fd);
    if (conn->lane.wpos < conn->lane.len || conn->link.ctx != l->poll_ctx || l->nwake != woken ||
        (ev & ~l->poll_ev) || (ev && fd != l->poll_fd))
        kick(l);
}

int wk__mux_run(wk__mux_lane *l, wk_query *q, int64_t deadline, char *msg)
{
    wk__mux_waiter w = {.msg = msg, .q = q, .deadline = deadline};
    int s;
    if (pthread_mutex_trylock(&l->mu) == 0) {
        int rc = enter(l, &w);
        if (rc) {
            unlock_and_wake(l);
            return rc;
        }
        flush(l);
    } else {
        /* Taken: push the query for the holder to put on with the others
         * it finds, then try once more (the holder may just have let go). */
        wk__mux_waiter *head = atomic_load_explicit(&l->pending, memory_order_relaxed);
        do
            w.next = head;
        while (!atomic_compare_exchange_weak(&l->pending, &head, &w)); /* seq_cst */
        if (pthread_mutex_trylock(&l->mu) != 0)
            goto wait;
        flush(l);
        s = atomic_load_explicit(&w.state, memory_order_acquire);
        if (s & DONE) { /* refused, or the lane closed */
            unlock_and_wake(l);
            return w.status;
        }
    }
    if (!l->leader) {
        l->leader = true;
        return lead(l, &w, deadline);
    }
    unlock_and_wake(l);
wait:
    for (;;) {
        s = atomic_load_explicit(&w.state, memory_order_acquire);
        if (s & LEAD) {
            pthread_mutex_lock(&l->mu);
            return lead(l, &w, deadline);
        }
        if (s & DONE)
            return w.status;
        if (wk__boot_ms() >= deadline) {
            pthread_mutex_lock(&l->mu);
            flush(l); /* still pushed: it is refused now, never sent */
            s = atomic_load_explicit(&w.state, memory_order_acquire);
            if (s & LEAD)
                return lead(l, &w, deadline);
            int rc = s & DONE ? w.status : abandon(l, &w);
            unlock_and_wake(l);
            return rc;
        }
        futex_wait(&w.state, s, deadline);
    }
}

int wk__mux_drain(wk__mux_lane *l, int64_t deadline)
{
    wk__mux_waiter w = {.msg = NULL};
    pthread_mutex_lock(&l->mu);
    for (;;) {
        if (l->users == 0 && l->unsettled == 0 && !l->leader) {
            compact(l);
            pthread_mutex_unlock(&l->mu);
            return WK_OK;
        }
        if (wk__boot_ms() >= deadline) {
            pthread_mutex_unlock(&l->mu);
            return WK_ETIMEDOUT;
        }
        if (!l->leader) {
            /* Only replies nobody waits for are left: read them. */
            l->leader = true;
            lead_once(l, deadline);
            hand_off(l);
            compact(l);
            continue;
        }
        atomic_store_explicit(&w.state, 0, memory_order_relaxed);
        l->drainer = &w;
        unlock_and_wake(l);
        /* A settle or a leader leaving posts LEAD here; look again at
         * least every 10 ms all the same. */
        int64_t until = wk__deadline_min(deadline, wk__add_ms(wk__boot_ms(), 10));
        while (!atomic_load_explicit(&w.state, memory_order_acquire) && wk__boot_ms() < until)
            futex_wait(&w.state, 0, until);
        pthread_mutex_lock(&l->mu);
        l->drainer = NULL;
    }
}

int wk__mux_init(wk__mux_lane *l, wk_db *db)
{
    memset(l, 0, sizeof(*l));
    l->db = db;
    l->kick_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (l->kick_fd < 0)
        return WK_ENOMEM;
    /* Held for a format, a step or a parse (microseconds): a contender
     * spins a little before it sleeps. */
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
    int bad = pthread_mutex_init(&l->mu, &ma);
    pthread_mutexattr_destroy(&ma);
    if (bad) {
        close(l->kick_fd);
        l->kick_fd = -1;
        return WK_ENOMEM;
    }
    atomic_init(&l->load, 0);
    atomic_init(&l->kicks, 0);
    atomic_init(&l->closed, false);
    l->x = (wk__exchange){.db = db, .query = wk__kept_query, .ctx = &l->k};
    wk__engine_open(&l->m, &l->x, settled, NULL, l);
    return WK_OK;
}

void wk__mux_free(wk__mux_lane *l)
{
    if (l->kick_fd < 0)
        return;
    /* Replies still due are dropped with the connection (the pool closes
     * its handles next). */
    wk__engine_cancel(&l->m, WK_EIO, "pool closed");
    pthread_mutex_destroy(&l->mu);
    close(l->kick_fd);
    l->kick_fd = -1;
    wk__kept_free(&l->k);
    free(l->w);
    free(l->wake);
}
