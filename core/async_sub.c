/*
 * core/async_sub.c — the hidden handles of the receivers that follow a
 * stream through the event loop (core/async_internal.h): a Pipe
 * receiver, a StreamBuffer subscription. Like their blocking forms, each
 * waits with blocking commands (BLMOVE, XREAD BLOCK) on a connection of
 * its own, so that its waits never hold the handle's connection. That
 * connection is a wk_async of its own (wk__async_adopt: the same
 * exchange, set-up, reconnect and outcome rules), whose socket joins the
 * handle's epoll set: the loop still watches one descriptor, for READ,
 * and wk_async_process() on the handle drives the hidden handles whose
 * socket is ready or whose time is due. On a cluster handle a hidden
 * handle routes by a copy of the map, or (wk__async_sub_open_at: a loop
 * subscriber following a slot's primary) is a plain connection held to
 * one node.
 *
 * The receiver's queries complete through the sub (`reply`), never
 * straight into the receiver: a receiver closed while a query is in
 * flight is cut off first, and the hidden handle's close (which completes
 * what is in flight) then reaches nobody. A receiver closed from inside
 * its own handle's processing is closed right after it returns.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include <wakuwaku/clock.h>

#include "core/async_internal.h"
#include "core/blocking.h"
#include "core/cluster.h"

struct wk__async_sub {
    wk_processor proc; /* first member: submits to the hidden handle */
    wk_async *parent;  /* NULL once it closed */
    wk_async *h;       /* the hidden handle, NULL once closed */
    void (*run)(void *arg);
    void (*gone)(void *arg);
    void (*reply)(void *arg, int status, const char *msg);
    /* Pub/Sub (wk__async_sub_push): the hidden handle's pushes, and a
     * lost socket kicks run. NULL: none. */
    void (*push)(void *arg, redisReply *r);
    int64_t wake; /* run by then (wk__boot_ms(); 0: no timer) */
    void *arg;    /* the receiver; NULL once it closes: nothing reaches it */
    uint32_t slot;
    int reg_fd; /* registered in the parent's set (-1: none) */
    unsigned ready;
    bool kicked, busy, in_run, closed;
};

struct wk__async_subs {
    wk__async_sub **s; /* by slot; NULL: free */
    size_t n, cap;
};

/* ---- the parent's epoll set --------------------------------------------- */

/* The hidden handle's watch: keep its socket registered in the set, and
 * tell the parent's watch, since what the parent waits for is made of
 * this (a socket in the set or none; the hidden handle's due is read
 * into the parent's). Inside the parent's turn its end tells the loop;
 * outside it — a receive asked again from the loop's timer after one
 * ended WK_EIO, when the parent waited for nothing — now: no
 * wk_async_process() would come to tell it. Every change of the hidden
 * handle passes here (it reports each to its watch), so no caller needs
 * to tell the parent itself. */
static void child_watch(wk_async *h, int fd, unsigned events, int64_t timeout_ms, void *arg)
{
    (void)h, (void)timeout_ms; /* its due is read when the parent asks */
    wk__async_sub *s = arg;
    wk_async *parent = s->parent;
    int epfd = parent ? parent->epfd : -1;
    if (epfd < 0)
        return;
    if (s->reg_fd >= 0 && s->reg_fd != fd)
        epoll_ctl(epfd, EPOLL_CTL_DEL, s->reg_fd, NULL);
    if (s->push && fd < 0 && s->reg_fd >= 0)
        s->kicked = true; /* a subscriber's socket went: its owner looks */
    struct epoll_event e = {.events = (events & WK_ASYNC_READ ? EPOLLIN : 0) |
                                      (events & WK_ASYNC_WRITE ? EPOLLOUT : 0),
                            .data.u32 = WK__SUB_TAG + s->slot};
    if (fd >= 0 && epoll_ctl(epfd, s->reg_fd == fd ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &e) != 0)
        epoll_ctl(epfd, s->reg_fd == fd ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, fd, &e);
    s->reg_fd = fd;
    if (!parent->in_process)
        wk__async_update_watch(parent);
}

void wk__async_subs_ready(wk_async *a, uint32_t tag, uint32_t events)
{
    uint32_t slot = tag - WK__SUB_TAG;
    wk__async_sub *s = a->subs && slot < a->subs->n ? a->subs->s[slot] : NULL;
    if (s)
        s->ready |= (events & (EPOLLIN | EPOLLHUP | EPOLLERR) ? WK_ASYNC_READ : 0) |
                    (events & (EPOLLOUT | EPOLLERR) ? WK_ASYNC_WRITE : 0);
}

/* ---- driving ------------------------------------------------------------ */

static void sub_free(wk__async_sub *s)
{
    if (s->parent && s->parent->subs && s->parent->subs->s[s->slot] == s)
        s->parent->subs->s[s->slot] = NULL;
    wk_async *h = s->h;
    s->h = NULL;
    wk_async_close(h); /* completes what is in flight: reaches nobody (arg NULL) */
    free(s);
}

void wk__async_subs_run(wk_async *a)
{
    int64_t now = wk__boot_ms();
    /* By index: a callback may open a receiver (the array grows) or
     * close one (its slot is freed here, after it returns). */
    for (size_t i = 0; a->subs && i < a->subs->n; i++) {
        wk__async_sub *s = a->subs->s[i];
        if (!s || !s->h)
            continue;
        unsigned ready = s->ready;
        s->ready = 0;
        int64_t due = wk__async_next_due(s->h);
        s->in_run = true;
        if (ready || (due >= 0 && due <= now))
            wk_async_process(s->h, ready);
        bool woke = s->wake && s->wake <= wk__boot_ms();
        if ((s->kicked || woke) && !s->closed) {
            s->kicked = false;
            if (woke)
                s->wake = 0;
            s->run(s->arg);
        }
        s->in_run = false;
        if (s->closed)
            sub_free(s);
    }
}

int64_t wk__async_subs_due(const wk_async *a)
{
    int64_t due = -1;
    for (size_t i = 0; a->subs && i < a->subs->n; i++) {
        const wk__async_sub *s = a->subs->s[i];
        if (!s || !s->h)
            continue;
        int64_t d = s->kicked ? 0 : wk__async_next_due(s->h);
        if (s->wake && (d < 0 || s->wake < d))
            d = s->wake;
        if (d >= 0 && (due < 0 || d < due))
            due = d;
    }
    return due;
}

bool wk__async_subs_watched(const wk_async *a)
{
    for (size_t i = 0; a->subs && i < a->subs->n; i++)
        if (a->subs->s[i] && a->subs->s[i]->reg_fd >= 0)
            return true;
    return false;
}

size_t wk__async_subs_pending(const wk_async *a)
{
    size_t n = 0;
    for (size_t i = 0; a->subs && i < a->subs->n; i++)
        n += a->subs->s[i] && a->subs->s[i]->busy;
    return n;
}

void wk__async_subs_close(wk_async *a)
{
    wk__async_subs *ss = a->subs;
    for (size_t i = 0; ss && i < ss->n; i++) {
        wk__async_sub *s = ss->s[i];
        if (!s)
            continue;
        /* Cut off first: a receive started from `gone` is refused (WK_EIO). */
        wk_async *h = s->h;
        s->h = NULL;
        s->in_run = true;
        if (s->arg && !s->closed)
            s->gone(s->arg);
        s->in_run = false;
        /* Its in-flight queries complete into nothing (arg NULL). */
        void *arg = s->arg;
        s->arg = NULL;
        wk_async_close(h);
        ss->s[i] = NULL;
        if (s->closed) { /* the receiver was closed from `gone` */
            free(s);
            continue;
        }
        s->arg = arg; /* the receiver stays, with no handle */
        s->parent = NULL;
        s->busy = false;
    }
    if (ss) {
        free(ss->s);
        free(ss);
        a->subs = NULL;
    }
}

/* ---- a receiver's side -------------------------------------------------- */

static void sub_done(wk_async *h, int status, const char *msg, void *arg)
{
    h->lane[WK__LANE_MAIN].db->conn->extra_wait_ms = 0;
    wk__async_sub *s = arg;
    if (s->arg && !s->closed)
        s->reply(s->arg, status, msg);
}

static int sub_submit(wk_processor *self, wk_query *q)
{
    wk__async_sub *s = (wk__async_sub *)self;
    if (!s->h)
        return WK_EIO;
    return wk__async_lane_submit(&s->h->lane[WK__LANE_MAIN], q, sub_done, s);
}

int wk__async_sub_send(wk__async_sub *s, wk_query *q, int64_t block_ms)
{
    if (!s->h)
        return WK_EIO;
    s->h->lane[WK__LANE_MAIN].db->conn->extra_wait_ms = block_ms;
    return sub_submit(&s->proc, q);
}

/* A clone of a cluster handle's db made to reach host:port alone: no map,
 * the URL's target that node (its seeds gone). WK_OK or WK_ENOMEM. */
static int retarget(wk_db *db, const char *host, int port)
{
    wk__conn *conn = db->conn;
    wk__cluster_free(conn->cluster);
    conn->cluster = NULL;
    wk_url *u = &conn->url;
    for (size_t i = 0; i < u->nseeds; i++)
        free(u->seeds[i].host);
    free(u->seeds);
    u->seeds = NULL;
    u->nseeds = 0;
    free(u->path); /* TCP to the node */
    u->path = NULL;
    char *h = strdup(host);
    if (!h)
        return WK_ENOMEM;
    free(u->host);
    u->host = h;
    u->port = port;
    return WK_OK;
}

int wk__async_sub_open(wk__async_sub **out, wk_async *a, void (*run)(void *arg),
                       void (*gone)(void *arg),
                       void (*reply)(void *arg, int status, const char *msg), void *arg, char *err,
                       size_t errlen)
{
    return wk__async_sub_open_at(out, a, NULL, 0, run, gone, reply, arg, err, errlen);
}

int wk__async_sub_open_at(wk__async_sub **out, wk_async *a, const char *host, int port,
                          void (*run)(void *arg), void (*gone)(void *arg),
                          void (*reply)(void *arg, int status, const char *msg), void *arg,
                          char *err, size_t errlen)
{
    *out = NULL;
    if (a->closing)
        return wk__errbuf_set(err, errlen, WK_EIO, "the handle is closing");
    if (!a->subs && !(a->subs = calloc(1, sizeof(*a->subs))))
        return wk__errbuf_set(err, errlen, WK_ENOMEM, "out of memory");
    wk__async_subs *ss = a->subs;
    size_t slot = 0;
    while (slot < ss->n && ss->s[slot])
        slot++;
    if (slot == ss->n && wk__grow_array(&ss->s, &ss->cap, ss->n + 1, sizeof(*ss->s)))
        return wk__errbuf_set(err, errlen, WK_ENOMEM, "out of memory");
    wk__async_sub *s = calloc(1, sizeof(*s));
    if (!s)
        return wk__errbuf_set(err, errlen, WK_ENOMEM, "out of memory");
    wk_db *db = NULL;
    int rc = wk__blocking_clone(&db, a->db, err, errlen);
    if (!rc && host && retarget(db, host, port))
        rc = wk__errbuf_set(err, errlen, WK_ENOMEM, "out of memory");
    if (!rc && wk__async_use_set(a))
        rc = wk__errbuf_set(err, errlen, WK_EIO, "no epoll set");
    if (!rc && !(s->h = wk__async_adopt(db)))
        rc = wk__errbuf_set(err, errlen, WK_ENOMEM, "out of memory");
    /* Set before any reply is judged (the adoption only began the set-up;
     * wk_async_process() reads the replies): a node's HELLO saying
     * "cluster" leaves it a plain connection to that node. */
    if (!rc && host)
        s->h->one_node = true;
    if (rc) {
        wk_db_close(db);
        free(s);
        return rc;
    }
    *s = (wk__async_sub){.proc = {.process = sub_submit, .db = db, .flags = WK_PROCESSOR_DEFERRED},
                         .parent = a,
                         .h = s->h,
                         .run = run,
                         .gone = gone,
                         .reply = reply,
                         .arg = arg,
                         .slot = (uint32_t)slot,
                         .reg_fd = -1};
    if (slot == ss->n)
        ss->n++;
    ss->s[slot] = s;
    wk_async_set_watch(s->h, child_watch, s);
    wk__async_update_watch(a);
    *out = s;
    return WK_OK;
}

wk_async *wk__async_sub_handle(const wk__async_sub *s)
{
    return s->h;
}

wk_async *wk__async_sub_parent(const wk__async_sub *s)
{
    return s->parent;
}

wk_processor *wk__async_sub_processor(wk__async_sub *s)
{
    return &s->proc;
}

void wk__async_sub_kick(wk__async_sub *s)
{
    if (!s->h)
        return;
    s->kicked = true;
    if (!s->parent->in_process)
        wk__async_update_watch(s->parent);
}

void wk__async_sub_wake_at(wk__async_sub *s, int64_t when)
{
    if (!s->h)
        return;
    s->wake = when;
    if (!s->parent->in_process)
        wk__async_update_watch(s->parent);
}

/* The hidden handle's engine hands over a push (its arg is the lane):
 * to the owner, then run. */
static void sub_push(void *arg, redisReply *r)
{
    wk__async_lane *l = arg;
    wk__async_sub *s = l->a->watch == child_watch ? l->a->watch_arg : NULL;
    if (s && s->arg && !s->closed && s->push) {
        s->push(s->arg, r);
        s->kicked = true;
    } else {
        freeReplyObject(r);
    }
}

void wk__async_sub_push(wk__async_sub *s, void (*push)(void *arg, redisReply *r))
{
    if (!s->h)
        return;
    s->push = push;
    s->h->lane[WK__LANE_MAIN].m.push = push ? sub_push : NULL;
}

void wk__async_sub_busy(wk__async_sub *s, bool busy)
{
    s->busy = busy && s->h;
}

void wk__async_sub_close(wk__async_sub *s)
{
    if (!s)
        return;
    s->arg = NULL;
    if (s->in_run) { /* inside its own processing: right after it returns */
        s->closed = true;
        return;
    }
    wk_async *parent = s->parent;
    sub_free(s);
    if (parent && !parent->in_process)
        wk__async_update_watch(parent);
}
