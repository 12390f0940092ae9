/*
 * core/async_wait.c — what the event-loop handle shows the loop (its
 * descriptor, events and timeout: the watch), and its waits lane: the
 * waiting acquires through the loop (collection/lease_loop.c) park here
 * until their wake-up list is pushed or their time is up.
 *
 * Until the first park the descriptor is the main lane's socket. The
 * first park opens the waits lane — a second connection with the
 * handle's settings (core/blocking.h, wk__blocking_clone), set up through
 * the loop like the first — and the descriptor becomes an epoll set
 * holding both sockets, each registered for what its machine wants; the
 * set is readable when either socket is ready (writable included), so
 * the loop watches it for READ only and its adapters stay as they are.
 *
 * The waits lane runs CLIENT ID, then one BLPOP over the lists of every
 * parked waiter, timing out at the earliest end of their sleeps. A
 * waiter parked while that BLPOP is blocked (its list not in it) gets it
 * re-issued: CLIENT UNBLOCK <id> on the main lane makes the server answer
 * it at once (nil), and the next BLPOP names every list. An UNBLOCK that
 * finds the BLPOP not blocked yet (it raced the pop on the other
 * connection) is sent again until the BLPOP's reply comes. A wake-up
 * that arrives while its list is blocked on in the BLPOP is never lost:
 * the pushed element stays in the list until a BLPOP takes it, and a pop
 * for a waiter that is not parked at that moment (it is attempting
 * again) is kept, and fires at once when it parks.
 *
 * A cluster handle has no waits lane: its lists live in several slots, a
 * BLPOP names keys of one, so core/async_wait_cluster.c sends one BLPOP
 * per slot in use; the parked waiters, the early pops and the firing
 * here are shared (core/async_wait.h).
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <wakuwaku/clock.h>

#include "core/async_cluster.h"
#include "core/async_wait.h"
#include "core/blocking.h"

/* ---- the watch ---------------------------------------------------------- */

/* A lane's socket (its set-up's while the machine sets it up; a cluster
 * handle's nodes are in the set) and what its machine wants there. */
static int lane_fd(const wk__async_lane *l)
{
    int fd = -1;
    if (!l->db->conn->cluster)
        wk__engine_lane_events((wk__engine *)&l->m, 0, &fd);
    return fd;
}

static short lane_events(const wk__async_lane *l)
{
    int fd;
    return wk__engine_lane_events((wk__engine *)&l->m, 0, &fd);
}

int wk_async_fd(const wk_async *a)
{
    if (!a)
        return -1;
    return a->epfd >= 0 ? a->epfd : lane_fd(&a->lane[WK__LANE_MAIN]);
}

unsigned wk_async_events(const wk_async *a)
{
    if (!a)
        return 0;
    short ev = 0;
    for (int i = 0; i < a->nlanes; i++)
        ev |= lane_events(&a->lane[i]);
    if (a->epfd >= 0) /* the set is readable when any of its sockets is ready */
        return ev || a->cl || wk__async_subs_watched(a) || wk__async_ports_watched(a)
                   ? WK_ASYNC_READ
                   : 0;
    return (ev & POLLIN ? WK_ASYNC_READ : 0) | (ev & POLLOUT ? WK_ASYNC_WRITE : 0);
}

/* When wk_async_process() is due without events, or -1. */
int64_t wk__async_next_due(const wk_async *a)
{
    int64_t due = wk__async_subs_due(a);
    if (wk__async_ports_due(a))
        return 0; /* a port's completions are due */
    for (int i = 0; i < a->nlanes; i++) {
        const wk__async_lane *l = &a->lane[i];
        int64_t d;
        if (l->nfinal)
            return 0; /* callbacks are due */
        if (!l->db->conn->link.ctx && !l->db->conn->cluster && !wk__engine_connecting(&l->m))
            d = l->m.scan < l->x.count ? 0 : -1; /* to connect */
        else                                     /* the set-ups' deadlines too */
            d = wk__engine_due(&l->m) ? wk__engine_due(&l->m) : -1;
        if (d >= 0 && (due < 0 || d < due))
            due = d;
    }
    for (size_t i = 0; a->waits && i < a->waits->n; i++) {
        const wk__async_waiter *p = &a->waits->p[i];
        int64_t d = p->fire ? 0 : p->until;
        if (due < 0 || d < due)
            due = d;
    }
    return due;
}

int64_t wk_async_timeout_ms(const wk_async *a)
{
    if (!a)
        return -1;
    int64_t due = wk__async_next_due(a);
    if (due < 0)
        return -1;
    int64_t now = wk_monotonic_ms();
    return due > now ? due - now : 0;
}

/* One socket's registration in the set (core/async_cluster.h). */
void wk__async_epoll_sync(wk_async *a, int fd, short want, uint32_t tag, int *reg_fd,
                          unsigned *reg_events)
{
    unsigned ev = (want & POLLIN ? EPOLLIN : 0) | (want & POLLOUT ? EPOLLOUT : 0);
    if (fd == *reg_fd && ev == *reg_events)
        return;
    if (*reg_fd >= 0 && *reg_fd != fd)
        epoll_ctl(a->epfd, EPOLL_CTL_DEL, *reg_fd, NULL);
    struct epoll_event e = {.events = ev, .data.u32 = tag};
    if (fd >= 0 && epoll_ctl(a->epfd, *reg_fd == fd ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &e) != 0 &&
        *reg_fd == fd)
        epoll_ctl(a->epfd, EPOLL_CTL_ADD, fd, &e); /* closed and reopened meanwhile */
    *reg_fd = fd;
    *reg_events = ev;
}

void wk__async_epoll_drop(wk_async *a, int *reg_fd, unsigned *reg_events)
{
    if (*reg_fd >= 0)
        epoll_ctl(a->epfd, EPOLL_CTL_DEL, *reg_fd, NULL);
    *reg_fd = -1;
    *reg_events = 0;
}

/* Keep the epoll set's registration of each lane's socket (and a
 * cluster's nodes') as its machine wants it (a socket closed since was
 * dropped by wk__async_fd_gone). */
static void sync_set(wk_async *a)
{
    for (int i = 0; a->epfd >= 0 && i < a->nlanes; i++) {
        wk__async_lane *l = &a->lane[i];
        wk__async_epoll_sync(a, lane_fd(l), lane_events(l), (uint32_t)i, &l->reg_fd,
                             &l->reg_events);
    }
    if (a->cl)
        wk__async_cluster_sync(a);
}

void wk__async_update_watch(wk_async *a)
{
    sync_set(a);
    if (!a->watch)
        return;
    int fd = wk_async_fd(a);
    unsigned ev = wk_async_events(a);
    int64_t due = wk__async_next_due(a);
    if (fd == a->seen_fd && ev == a->seen_events && due == a->seen_due && due != 0)
        return;
    a->seen_fd = fd;
    a->seen_events = ev;
    a->seen_due = due;
    a->watch(a, fd, ev, wk_async_timeout_ms(a), a->watch_arg);
}

/* A lane's socket is closed (or about to be). In the epoll set: drop its
 * registration first (a new socket often gets the same number). Else it
 * is the descriptor the watch was shown: say so before anything else is
 * reported, since loops that keep descriptors registered (epoll: libuv,
 * libevent) must drop the old registration first, which they cannot do
 * if the number seems unchanged. */
void wk__async_fd_gone(wk__async_lane *l)
{
    wk_async *a = l->a;
    if (a->epfd >= 0) {
        wk__async_epoll_drop(a, &l->reg_fd, &l->reg_events);
        if (a->cl)
            wk__async_cluster_fd_gone(a);
        return;
    }
    if (!a->watch || a->seen_fd < 0)
        return;
    a->seen_fd = -1;
    a->seen_events = 0;
    a->seen_due = -1;
    a->watch(a, -1, 0, -1, a->watch_arg);
}

void wk__async_ready(wk_async *a, unsigned ready, short ev[2])
{
    if (a->epfd < 0) {
        ev[0] =
            (short)((ready & WK_ASYNC_READ ? POLLIN : 0) | (ready & WK_ASYNC_WRITE ? POLLOUT : 0));
        return;
    }
    /* Level-triggered: what the set says is ready now, whatever `ready`. */
    struct epoll_event got[16];
    int n = epoll_wait(a->epfd, got, 16, 0);
    for (int i = 0; i < n; i++) {
        uint32_t e = got[i].events, lane = got[i].data.u32;
        short bits = (short)((e & (EPOLLIN | EPOLLHUP | EPOLLERR) ? POLLIN : 0) |
                             (e & (EPOLLOUT | EPOLLERR) ? POLLOUT : 0));
        if (lane >= WK__SUB_TAG)
            wk__async_subs_ready(a, lane, e);
        else if (lane >= WK__PORT_TAG)
            wk__async_ports_ready(a, lane);
        else if (lane < 2)
            ev[lane] |= bits;
        else if (a->cl) /* a cluster node's (core/async_cluster.c) */
            wk__async_cluster_event(a, lane - WK__ASYNC_NODE_TAG, bits);
    }
}

/* ---- the waits lane ----------------------------------------------------- */

static void kick(wk_async *a);

static int parse_int(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    if (wk_reply_get_type(r) != WK_REPLY_INTEGER)
        return wk_diag_fail(d, WK_EPROTO, "expected an integer");
    *(long long *)q->out = wk_reply_integer(r);
    return WK_OK;
}

/* BLPOP's reply: nil (its time is up, or CLIENT UNBLOCK), or {list, element}. */
int wk__async_parse_pop(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    wk__async_pop *got = q->out;
    got->list_len = 0;
    if (wk_reply_get_type(r) == WK_REPLY_NIL)
        return WK_OK;
    size_t len;
    const char *list = wk_reply_str(wk_reply_at(r, 0), &len);
    if (wk_reply_count(r) != 2 || !list || len > sizeof(got->list))
        return wk_diag_fail(d, WK_EPROTO, "expected nil or {list, element}");
    memcpy(got->list, list, len);
    got->list_len = len;
    const char *el = wk_reply_str(wk_reply_at(r, 1), &len);
    got->element_len = el && len <= sizeof(got->element) ? len : 0;
    if (got->element_len)
        memcpy(got->element, el, len);
    return WK_OK;
}

static void on_id(wk_async *a, int status, const char *msg, void *arg)
{
    (void)msg, (void)arg;
    wk__async_waits *w = a->waits;
    w->asking_id = false;
    w->client_id = status == WK_OK ? w->id_reply : 0;
    kick(a);
}

static void on_unblock(wk_async *a, int status, const char *msg, void *arg)
{
    (void)msg, (void)arg;
    a->waits->unblocking = false;
    /* Refused by the server (an ACL without CLIENT): not again; a new
     * waiter then waits for the BLPOP's end to be covered. */
    a->waits->unblock_refused |= status != WK_OK && !wk_is_connection_error(status);
    kick(a); /* not blocked yet (0): again, while the BLPOP is out */
}

/* Early pop i is gone (taken): the last takes its place. */
static void early_drop(wk__async_waits *w, size_t i)
{
    w->nearly--;
    memcpy(w->early[i], w->early[w->nearly], w->early_len[w->nearly]);
    w->early_len[i] = w->early_len[w->nearly];
    memcpy(w->early_element[i], w->early_element[w->nearly], w->early_element_len[w->nearly]);
    w->early_element_len[i] = w->early_element_len[w->nearly];
}

/* A pop of p's list that came before p parked: p fires with its element. */
static bool early_take(wk__async_waits *w, wk__async_waiter *p)
{
    for (size_t i = 0; i < w->nearly; i++)
        if (w->early_len[i] == p->len && memcmp(w->early[i], p->list, p->len) == 0) {
            p->element_len = w->early_element_len[i];
            memcpy(p->element, w->early_element[i], p->element_len);
            early_drop(w, i);
            return true;
        }
    return false;
}

static bool in_slot(const wk__async_waiter *p, long slot)
{
    return slot == WK__WAIT_ALL_SLOTS || (long)p->slot == slot;
}

void wk__async_waits_popped(wk_async *a, long slot, int status, const char *msg,
                            const wk__async_pop *got)
{
    wk__async_waits *w = a->waits;
    bool found = false;
    for (size_t i = 0; i < w->n; i++) {
        wk__async_waiter *p = &w->p[i];
        if (!in_slot(p, slot))
            continue;
        if (status != WK_OK) {
            /* Lost: nothing but a wake-up was taken. Every waiter
             * attempts again. */
            p->fire = true;
            p->status = status;
        } else if (got->list_len && p->len == got->list_len &&
                   memcmp(p->list, got->list, p->len) == 0) {
            p->fire = true;
            p->element_len = got->element_len;
            memcpy(p->element, got->element, got->element_len);
            found = true;
        }
        p->covered = false;
    }
    if (status != WK_OK) {
        wk__copy_text(w->why, sizeof(w->why), msg);
    } else if (got->list_len && !found) {
        if (w->nearly == WK__WAIT_EARLY_MAX) { /* the oldest goes: its waiter is long gone */
            w->nearly--;
            memmove(w->early, w->early + 1, sizeof(w->early[0]) * w->nearly);
            memmove(w->early_len, w->early_len + 1, sizeof(w->early_len[0]) * w->nearly);
            memmove(w->early_element, w->early_element + 1,
                    sizeof(w->early_element[0]) * w->nearly);
            memmove(w->early_element_len, w->early_element_len + 1,
                    sizeof(w->early_element_len[0]) * w->nearly);
        }
        memcpy(w->early[w->nearly], got->list, got->list_len);
        memcpy(w->early_element[w->nearly], got->element, got->element_len);
        w->early_element_len[w->nearly] = got->element_len;
        w->early_len[w->nearly++] = got->list_len;
    }
}

static void on_pop(wk_async *a, int status, const char *msg, void *arg)
{
    (void)arg;
    wk__async_waits *w = a->waits;
    w->popping = false;
    a->lane[WK__LANE_WAITS].db->conn->extra_wait_ms = 0;
    if (status != WK_OK)
        w->client_id = 0; /* the next BLPOP asks for the connection's id anew */
    wk__async_waits_popped(a, WK__WAIT_ALL_SLOTS, status, msg, &w->got);
    kick(a);
}

/* Queue a command of the waits (no effect: keyless) on lane l. */
static bool send(wk__async_lane *l, const char *name, int argc, const char **argv,
                 const size_t *lens, wk_parse_fn parse, void *out, wk_async_done_fn done)
{
    wk_query q = {
        .name = name, .argc = argc, .argv = argv, .argvlen = lens, .parse = parse, .out = out};
    return wk__async_lane_submit(l, &q, done, NULL) == WK_OK;
}

int wk__async_waits_pop_args(wk__async_waits *w, long slot, int64_t until, const char *extra,
                             size_t extra_len, int64_t *ms)
{
    if (wk__grow_array(&w->argv, &w->argv_cap, w->n + 3, sizeof(*w->argv)) ||
        wk__grow_array(&w->lens, &w->lens_cap, w->n + 3, sizeof(*w->lens)))
        return 0;
    *ms = until - wk__boot_ms();
    *ms = *ms < 1 ? 1 : *ms; /* 0 would block for ever */
    snprintf(w->secs, sizeof(w->secs), "%lld.%03lld", (long long)(*ms / 1000),
             (long long)(*ms % 1000));
    int k = 0;
    w->argv[k] = "BLPOP";
    w->lens[k++] = 5;
    for (size_t i = 0; i < w->n; i++)
        if (!w->p[i].fire && in_slot(&w->p[i], slot)) {
            w->argv[k] = w->p[i].list;
            w->lens[k++] = w->p[i].len;
        }
    if (extra_len) {
        w->argv[k] = extra;
        w->lens[k++] = extra_len;
    }
    w->argv[k] = w->secs;
    w->lens[k++] = strlen(w->secs);
    return k;
}

bool wk__async_waits_live(const wk__async_waits *w, long slot, bool *missing, int64_t *until)
{
    bool live = false;
    *missing = false;
    *until = 0;
    for (size_t i = 0; i < w->n; i++) {
        const wk__async_waiter *p = &w->p[i];
        if (p->fire || !in_slot(p, slot))
            continue;
        live = true;
        *missing |= !p->covered;
        *until = *until && *until < p->until ? *until : p->until;
    }
    return live;
}

/* BLPOP every list not woken yet, until the first of their ends. */
static void pop(wk_async *a, wk__async_waits *w, int64_t until)
{
    int64_t ms;
    int k = wk__async_waits_pop_args(w, WK__WAIT_ALL_SLOTS, until, NULL, 0, &ms);
    if (!k)
        return; /* the waiters' own times still end their sleeps */
    wk__async_lane *l = &a->lane[WK__LANE_WAITS];
    l->db->conn->extra_wait_ms = ms; /* its reply is due that much later */
    w->popping = send(l, "wait.pop", k, w->argv, w->lens, wk__async_parse_pop, &w->got, on_pop);
    for (size_t i = 0; w->popping && i < w->n; i++)
        w->p[i].covered = true;
}

/* Send what the waits need next: the connection's id, one BLPOP over
 * every parked list, or the UNBLOCK of a BLPOP that misses one. */
static void kick(wk_async *a)
{
    wk__async_waits *w = a->waits;
    if (!w || a->closing)
        return;
    if (a->cl) {
        wk__async_wait_cluster_kick(a); /* core/async_wait_cluster.c */
        return;
    }
    bool missing;
    int64_t until;
    if (!wk__async_waits_live(w, WK__WAIT_ALL_SLOTS, &missing, &until))
        return;
    if (!w->client_id && !w->asking_id) {
        const char *argv[2] = {"CLIENT", "ID"};
        size_t lens[2] = {6, 2};
        w->asking_id = send(&a->lane[WK__LANE_WAITS], "wait.client_id", 2, argv, lens, parse_int,
                            &w->id_reply, on_id);
    }
    if (!w->popping) {
        pop(a, w, until);
    } else if (missing && w->client_id && !w->unblocking && !w->unblock_refused) {
        char id[24];
        snprintf(id, sizeof(id), "%lld", w->client_id);
        const char *argv[3] = {"CLIENT", "UNBLOCK", id};
        size_t lens[3] = {6, 7, strlen(id)};
        w->unblocking = send(&a->lane[WK__LANE_MAIN], "wait.unblock", 3, argv, lens, parse_int,
                             &w->unblock_reply, on_unblock);
    }
}

int wk__async_use_set(wk_async *a)
{
    if (a->epfd >= 0)
        return WK_OK;
    int epfd = epoll_create1(EPOLL_CLOEXEC);
    if (epfd < 0)
        return WK_EIO;
    /* The watch was shown the main socket: from now on, the set. */
    wk__async_fd_gone(&a->lane[WK__LANE_MAIN]);
    a->epfd = epfd;
    return WK_OK;
}

/* The waits' state on the first park: on a single server, the waits lane
 * and the epoll set; a cluster handle has its set, and opens a
 * connection per slot as its waiters need (core/async_wait_cluster.c). */
static int open_waits(wk_async *a)
{
    wk__async_waits *w = calloc(1, sizeof(*w));
    if (w && a->cl) {
        a->waits = w;
        return WK_OK;
    }
    wk_db *db = NULL;
    char err[WK__ERRMSG_MAX];
    int rc = w ? wk__blocking_clone(&db, a->db, err, sizeof(err)) : WK_ENOMEM;
    if (!rc)
        rc = wk__async_use_set(a);
    if (rc) {
        free(w);
        if (db)
            wk_db_close(db);
        return rc;
    }
    a->waits = w;
    wk__async_lane_init(&a->lane[WK__LANE_WAITS], a, db);
    a->nlanes = 2;
    return WK_OK;
}

int wk__async_park(wk_async *a, const char *list, size_t len, int64_t until, wk__async_woke_fn woke,
                   void *arg)
{
    return wk__async_park_on(a, NULL, list, len, until, woke, arg);
}

int wk__async_park_on(wk_async *a, const wk_entity *e, const char *list, size_t len, int64_t until,
                      wk__async_woke_fn woke, void *arg)
{
    if (a->closing)
        return WK_EIO;
    if (len > WK__COMPANION_KEY_MAX || (a->cl && !e)) /* a cluster's pop routes by e */
        return WK_EINVAL;
    int rc = a->waits ? WK_OK : open_waits(a);
    wk__async_waits *w = a->waits;
    if (!rc && wk__grow_array(&w->p, &w->cap, w->n + 1, sizeof(*w->p)))
        rc = WK_ENOMEM;
    if (rc)
        return rc;
    wk__async_waiter *p = &w->p[w->n++];
    *p = (wk__async_waiter){.len = len,
                            .until = until,
                            .woke = woke,
                            .arg = arg,
                            .e = e,
                            .slot = a->cl ? wk__key_slot(list, len) : 0};
    memcpy(p->list, list, len);
    p->fire = early_take(w, p); /* its wake-up came while it attempted */
    kick(a);
    wk__async_update_watch(a);
    return WK_OK;
}

bool wk__async_waits_fire(wk_async *a)
{
    wk__async_waits *w = a->waits;
    bool ran = false;
    for (size_t i = 0; w && i < w->n;) {
        wk__async_waiter p = w->p[i];
        if (!p.fire && p.until > wk__boot_ms()) {
            i++;
            continue;
        }
        /* Out of the array before its callback, which may park again. */
        memmove(&w->p[i], &w->p[i + 1], (w->n - i - 1) * sizeof(*w->p));
        w->n--;
        ran = true;
        p.woke(p.arg, p.status, p.status ? w->why : "", p.element, p.element_len);
        w = a->waits;
        i = 0;
    }
    if (ran)
        kick(a);
    return ran;
}

size_t wk__async_parked(const wk_async *a)
{
    return a->waits ? a->waits->n : 0;
}

void wk__async_waits_close(wk_async *a)
{
    wk__async_waits *w = a->waits;
    for (size_t i = 0; w && i < w->n; i++)
        if (!w->p[i].fire) {
            w->p[i].fire = true;
            w->p[i].status = WK_EIO;
        }
    if (w)
        wk__copy_text(w->why, sizeof(w->why), "handle closed");
    wk__async_waits_fire(a);
    if (w) {
        wk__async_wait_cluster_free(w);
        free(w->p);
        free(w->argv);
        free(w->lens);
        free(w);
        a->waits = NULL;
    }
}
