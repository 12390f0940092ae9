/*
 * collection/near_cache_loop.c — the near cache's gets through an event
 * loop (wk_near_cache_get_async, wakuwaku/near_cache.h).
 *
 * A get is admitted and looked up in the table on the loop's thread, by
 * the blocking get's own code (wk__near_admit, wk__near_hit: the table's
 * mutex only, never held across I/O). A hit's result waits on its
 * handle's LINK and the link's port (core/async_port.c) is kicked: the
 * callback runs at the handle's next wk_async_process(), with no I/O and
 * no eventfd write. Anything else goes to the READER, one thread per near
 * cache started by the first such get, which runs the blocking get's read
 * (wk__near_fetch: the data connection, the session, the bound) and
 * hands the result to the link, signalling its port's eventfd.
 *
 * One link per handle that used the near cache: its port, the results
 * waiting for the handle's turn, and how many gets are outstanding. The
 * loop's mutex `mu` guards the reader's queue, the request being read,
 * the links list and every link's results, and is never held across I/O.
 * Who frees what:
 *   - the handle closes (the port's `gone`): the link's results complete
 *     now; its queued requests with WK_EIO; its request being read is cut
 *     off (its callback runs now with WK_EIO; the reader frees it); the
 *     link is freed.
 *   - the near cache closes: the reader ends after its read; the queued
 *     requests become results (WK_EIO) of their links, which are orphaned
 *     (no near cache) and signalled; each orphan delivers them at its
 *     handle's next turn (or close) and frees itself.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collection/near_cache_internal.h"
#include "core/async_internal.h"

typedef struct near_link near_link;

typedef struct near_req {
    struct near_req *next;
    near_link *link; /* NULL: cut off (its handle closed); the reader frees it */
    wk__near_item it;
    wk_name name; /* its bytes: name_buf, or the heap when longer */
    char *name_heap;
    char name_buf[64];
    wk_body body; /* the result, moved to *out before done runs */
    wk_body *out;
    wk_async_done_fn done;
    void *arg;
    int status;
    char msg[512];
} near_req;

struct near_link {
    near_link *next;
    wk__near_loop *loop; /* NULL: the near cache closed (an orphan) */
    wk_near_cache *nc;
    wk_async *a;
    wk__async_port *port; /* NULL once the handle closed */
    near_req *done_head, *done_tail; /* results waiting for the handle's turn */
    near_req *spare;                 /* requests to use again (the loop's thread) */
    size_t outstanding;              /* gets whose callback has not run (the loop's thread) */
};

struct wk__near_loop {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t reader;
    bool started, stop;
    near_req *head, *tail; /* waiting for the reader */
    near_req *reading;     /* the one it reads */
    near_link *links;
};

/* ---- requests ------------------------------------------------------------ */

static void req_free(near_req *r)
{
    wk_body_free(&r->body);
    free(r->name_heap);
    free(r);
}

static void push(near_req **head, near_req **tail, near_req *r)
{
    r->next = NULL;
    if (*tail)
        (*tail)->next = r;
    else
        *head = r;
    *tail = r;
}

/* A request of link l for `name` (copied). NULL when out of memory. */
static near_req *req_new(near_link *l, const wk_name *name)
{
    near_req *r = l->spare;
    if (r)
        l->spare = r->next;
    else if (!(r = calloc(1, sizeof(*r))))
        return NULL;
    r->next = NULL;
    r->link = l;
    r->name = *name;
    r->status = WK_OK;
    r->msg[0] = '\0';
    if (name->type == WK_NAME_BYTES && name->bytes && name->len) {
        char *dst = r->name_buf;
        if (name->len > sizeof(r->name_buf) && !(dst = r->name_heap = malloc(name->len))) {
            free(r);
            return NULL;
        }
        memcpy(dst, name->bytes, name->len);
        r->name.bytes = dst;
    }
    return r;
}

/* Keep a delivered request for the link's next get. */
static void req_recycle(near_link *l, near_req *r)
{
    wk_body_free(&r->body);
    free(r->name_heap);
    r->name_heap = NULL;
    r->next = l->spare;
    l->spare = r;
}

/* Its callback: the body to *out, then done (the loop's thread). */
static void deliver(near_link *l, near_req *r)
{
    if (r->out) {
        *r->out = r->body; /* its previous data was freed at the call */
        r->body = (wk_body)WK_BODY_INIT;
    }
    l->outstanding--;
    if (l->port)
        wk__async_port_busy(l->port, l->outstanding);
    if (r->done)
        r->done(l->a, r->status, r->msg, r->arg);
}

static void deliver_all(near_link *l, near_req *r)
{
    while (r) {
        near_req *next = r->next;
        deliver(l, r);
        req_recycle(l, r);
        r = next;
    }
}

static void link_free(near_link *l)
{
    while (l->spare) {
        near_req *r = l->spare;
        l->spare = r->next;
        req_free(r);
    }
    free(l);
}

/* ---- the loop's side ----------------------------------------------------- */

/* The port's run: the results that came, delivered; an orphan whose gets
 * all ran lets go of its handle. */
static void link_run(void *arg)
{
    near_link *l = arg;
    if (l->loop)
        pthread_mutex_lock(&l->loop->mu);
    near_req *r = l->done_head;
    l->done_head = l->done_tail = NULL;
    if (l->loop)
        pthread_mutex_unlock(&l->loop->mu);
    deliver_all(l, r);
    if (!l->loop && !l->outstanding && !l->done_head) {
        wk__async_port_close(l->port);
        link_free(l);
    }
}

/* The port's gone: the handle closes (see the banner). */
static void link_gone(void *arg)
{
    near_link *l = arg;
    near_req *cut = NULL, *cut_tail = NULL;
    wk_async_done_fn reading_done = NULL; /* the request being read, cut off */
    void *reading_arg = NULL;
    bool reading = false;
    wk__near_loop *lp = l->loop;
    if (lp) {
        pthread_mutex_lock(&lp->mu);
        for (near_link **p = &lp->links; *p; p = &(*p)->next) {
            if (*p == l) {
                *p = l->next;
                break;
            }
        }
        near_req *keep = NULL, *keep_tail = NULL;
        for (near_req *r = lp->head, *next; r; r = next) {
            next = r->next;
            push(r->link == l ? &cut : &keep, r->link == l ? &cut_tail : &keep_tail, r);
        }
        lp->head = keep;
        lp->tail = keep_tail;
        if (lp->reading && lp->reading->link == l) {
            reading = true;
            reading_done = lp->reading->done;
            reading_arg = lp->reading->arg;
            lp->reading->link = NULL; /* the reader frees it */
        }
        pthread_mutex_unlock(&lp->mu);
    }
    l->port = NULL;
    near_req *r = l->done_head;
    l->done_head = l->done_tail = NULL;
    deliver_all(l, r); /* results read: their own status */
    static const char why[] = "near_cache.get: the event-loop handle closed before the read";
    for (near_req *c = cut; c; c = c->next) {
        c->status = WK_EIO;
        snprintf(c->msg, sizeof(c->msg), "%s", why);
    }
    deliver_all(l, cut);
    if (reading) {
        l->outstanding--;
        if (reading_done)
            reading_done(l->a, WK_EIO, why, reading_arg);
    }
    link_free(l);
}

/* ---- the reader ---------------------------------------------------------- */

static void *reader_main(void *arg)
{
    wk_near_cache *nc = arg;
    wk__near_loop *lp = wk__near_loop_of(nc);
    pthread_mutex_lock(&lp->mu);
    for (;;) {
        while (!lp->stop && !lp->head)
            pthread_cond_wait(&lp->cv, &lp->mu);
        if (lp->stop)
            break;
        near_req *r = lp->head;
        lp->head = r->next;
        if (!lp->head)
            lp->tail = NULL;
        lp->reading = r;
        pthread_mutex_unlock(&lp->mu);

        wk__near_sink s = {&r->body, NULL};
        r->status = wk__near_fetch(nc, &r->it, r->name, &s);
        if (r->status)
            snprintf(r->msg, sizeof(r->msg), "%s", wk_near_cache_errmsg());

        pthread_mutex_lock(&lp->mu);
        lp->reading = NULL;
        near_link *l = r->link;
        if (!l) {
            req_free(r); /* its handle closed meanwhile */
            continue;
        }
        push(&l->done_head, &l->done_tail, r);
        wk__async_port_signal(l->port); /* under mu: the port is open */
    }
    pthread_mutex_unlock(&lp->mu);
    return NULL;
}

/* ---- the near cache's side ----------------------------------------------- */

int wk__near_loop_new(wk__near_loop **out)
{
    wk__near_loop *lp = calloc(1, sizeof(*lp));
    if (!lp || wk__cond_init_monotonic(&lp->cv) != WK_OK) {
        free(lp);
        return WK_ENOMEM;
    }
    pthread_mutex_init(&lp->mu, NULL);
    *out = lp;
    return WK_OK;
}

void wk__near_loop_free(wk__near_loop *lp)
{
    if (!lp)
        return;
    pthread_mutex_lock(&lp->mu);
    lp->stop = true;
    pthread_cond_broadcast(&lp->cv);
    pthread_mutex_unlock(&lp->mu);
    if (lp->started)
        pthread_join(lp->reader, NULL); /* after the read in flight */
    /* What still waits completes with WK_EIO, at each handle's turn. */
    for (near_req *r = lp->head, *next; r; r = next) {
        next = r->next;
        r->status = WK_EIO;
        snprintf(r->msg, sizeof(r->msg), "near_cache.get: the near cache closed before the read");
        push(&r->link->done_head, &r->link->done_tail, r);
    }
    for (near_link *l = lp->links, *next; l; l = next) {
        next = l->next;
        l->loop = NULL;
        l->nc = NULL;
        wk__async_port_signal(l->port);
    }
    pthread_cond_destroy(&lp->cv);
    pthread_mutex_destroy(&lp->mu);
    free(lp);
}

/* The link of handle a, made on its first get (on a's thread, the only
 * one that makes a's link: the port is opened outside the mutex, as it
 * tells the handle's watch). WK_OK, WK_EIO (closing) or WK_ENOMEM. */
static int link_find(wk_near_cache *nc, wk__near_loop *lp, wk_async *a, near_link **out)
{
    pthread_mutex_lock(&lp->mu);
    near_link *l = lp->links;
    while (l && l->a != a)
        l = l->next;
    pthread_mutex_unlock(&lp->mu);
    if (!l) {
        if (!(l = calloc(1, sizeof(*l))))
            return WK_ENOMEM;
        *l = (near_link){.loop = lp, .nc = nc, .a = a};
        int rc = wk__async_port_open(&l->port, a, link_run, link_gone, l);
        if (rc) {
            free(l);
            return rc;
        }
        pthread_mutex_lock(&lp->mu);
        l->next = lp->links;
        lp->links = l;
        pthread_mutex_unlock(&lp->mu);
    }
    *out = l;
    return WK_OK;
}

int wk_near_cache_get_async(wk_near_cache *nc, wk_async *a, const wk_entity *entity, wk_name name,
                            wk_body *out, wk_async_done_fn done, void *arg)
{
    wk__near_fail(WK_OK, "");
    if (!a || !out)
        return wk__near_fail(WK_EINVAL,
                             "near_cache.get: the event-loop handle and out are required");
    wk__near_item it;
    int rc = wk__near_admit(nc, entity, &name, &it);
    if (rc)
        return rc;
    wk_body_free(out);
    wk__near_loop *lp = wk__near_loop_of(nc);
    near_link *l = NULL;
    near_req *r = NULL;
    rc = link_find(nc, lp, a, &l);
    if (!rc && !(r = req_new(l, &name)))
        rc = WK_ENOMEM;
    if (rc)
        return wk__near_fail(rc, rc == WK_EIO ? "near_cache.get: the event-loop handle is closing"
                                              : "near_cache.get: out of memory");
    r->it = it;
    r->out = out;
    r->done = done;
    r->arg = arg;
    wk__near_sink s = {&r->body, NULL};
    if (wk__near_hit(nc, &it, &s, &r->status)) { /* no I/O: done at the handle's next turn */
        if (r->status)
            snprintf(r->msg, sizeof(r->msg), "%s", wk_near_cache_errmsg());
        pthread_mutex_lock(&lp->mu);
        push(&l->done_head, &l->done_tail, r);
        pthread_mutex_unlock(&lp->mu);
        wk__async_port_kick(l->port);
    } else {
        pthread_mutex_lock(&lp->mu);
        if (!lp->started && pthread_create(&lp->reader, NULL, reader_main, nc) != 0) {
            pthread_mutex_unlock(&lp->mu);
            req_recycle(l, r);
            return wk__near_fail(WK_ENOMEM, "near_cache.get: cannot start the loop reader");
        }
        lp->started = true;
        push(&lp->head, &lp->tail, r);
        pthread_cond_signal(&lp->cv);
        pthread_mutex_unlock(&lp->mu);
    }
    l->outstanding++;
    wk__async_port_busy(l->port, l->outstanding);
    return WK_OK;
}
