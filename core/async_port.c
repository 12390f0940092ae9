/*
 * core/async_port.c — ports: work done off the loop's thread completing
 * on it (core/async_internal.h). A port is an eventfd in the handle's
 * epoll set (the descriptor the loop watches becomes the set, as for a
 * receiver): another thread's wk__async_port_signal() makes the set
 * readable, and the handle's next wk_async_process() runs the port's
 * `run`. On the loop's own thread wk__async_port_kick() asks for the same
 * without writing the eventfd (the handle's timeout becomes 0). The near cache
 * (collection/near_cache_loop.c) completes its loop gets through one.
 *
 * A port closed from inside its own `run` is freed right after it
 * returns; the handle's close calls each port's `gone` once, then frees
 * it (nothing reaches its arg after that).
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/async_internal.h"

struct wk__async_port {
    wk_async *a; /* NULL once the handle closed */
    int efd;
    uint32_t slot;
    void (*run)(void *arg);
    void (*gone)(void *arg);
    void *arg;
    size_t busy; /* counted by wk_async_pending() */
    bool kicked, ready, in_run, closed;
};

struct wk__async_ports {
    wk__async_port **p; /* by slot; NULL: free */
    size_t n, cap;
};

static void port_free(wk__async_port *p)
{
    wk_async *a = p->a;
    if (a && a->ports && a->ports->p[p->slot] == p) {
        a->ports->p[p->slot] = NULL;
        if (a->epfd >= 0)
            epoll_ctl(a->epfd, EPOLL_CTL_DEL, p->efd, NULL);
    }
    close(p->efd);
    free(p);
}

int wk__async_port_open(wk__async_port **out, wk_async *a, void (*run)(void *arg),
                        void (*gone)(void *arg), void *arg)
{
    *out = NULL;
    if (a->closing)
        return WK_EIO;
    if (!a->ports && !(a->ports = calloc(1, sizeof(*a->ports))))
        return WK_ENOMEM;
    wk__async_ports *ps = a->ports;
    size_t slot = 0;
    while (slot < ps->n && ps->p[slot])
        slot++;
    if (slot == ps->n && wk__grow_array(&ps->p, &ps->cap, ps->n + 1, sizeof(*ps->p)))
        return WK_ENOMEM;
    if (wk__async_use_set(a))
        return WK_EIO;
    wk__async_port *p = calloc(1, sizeof(*p));
    if (!p)
        return WK_ENOMEM;
    p->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    struct epoll_event e = {.events = EPOLLIN, .data.u32 = WK__PORT_TAG + (uint32_t)slot};
    if (p->efd < 0 || epoll_ctl(a->epfd, EPOLL_CTL_ADD, p->efd, &e) != 0) {
        if (p->efd >= 0)
            close(p->efd);
        free(p);
        return WK_EIO;
    }
    p->a = a;
    p->slot = (uint32_t)slot;
    p->run = run;
    p->gone = gone;
    p->arg = arg;
    if (slot == ps->n)
        ps->n++;
    ps->p[slot] = p;
    if (!a->in_process)
        wk__async_update_watch(a);
    *out = p;
    return WK_OK;
}

void wk__async_port_signal(wk__async_port *p)
{
    uint64_t one = 1;
    while (write(p->efd, &one, sizeof(one)) < 0 && errno == EINTR) {
    }
}

void wk__async_port_kick(wk__async_port *p)
{
    p->kicked = p->a != NULL; /* not once its handle closed */
    if (p->kicked && !p->a->in_process)
        wk__async_update_watch(p->a);
}

void wk__async_port_busy(wk__async_port *p, size_t n)
{
    p->busy = n;
}

void wk__async_port_close(wk__async_port *p)
{
    wk_async *a = p ? p->a : NULL;
    if (p && p->in_run) /* inside its own run: freed right after it returns */
        p->arg = NULL, p->closed = true;
    else if (p)
        port_free(p);
    if (a && !a->in_process)
        wk__async_update_watch(a);
}

/* ---- the handle's hooks ------------------------------------------------- */

void wk__async_ports_ready(wk_async *a, uint32_t tag)
{
    uint32_t slot = tag - WK__PORT_TAG;
    if (a->ports && slot < a->ports->n && a->ports->p[slot])
        a->ports->p[slot]->ready = true;
}

void wk__async_ports_run(wk_async *a)
{
    /* By index: a run may open a port (the array grows) or close one (its
     * slot is freed here, after it returns). */
    for (size_t i = 0; a->ports && i < a->ports->n; i++) {
        wk__async_port *p = a->ports->p[i];
        if (!p || !(p->ready || p->kicked))
            continue;
        uint64_t count;
        if (p->ready) /* drained before run looks: a signal after it stays */
            while (read(p->efd, &count, sizeof(count)) < 0 && errno == EINTR) {
            }
        p->ready = p->kicked = false;
        p->in_run = true;
        if (p->arg)
            p->run(p->arg);
        p->in_run = false;
        if (p->closed)
            port_free(p);
    }
}

bool wk__async_ports_due(const wk_async *a)
{
    for (size_t i = 0; a->ports && i < a->ports->n; i++)
        if (a->ports->p[i] && a->ports->p[i]->kicked)
            return true;
    return false;
}

bool wk__async_ports_watched(const wk_async *a)
{
    for (size_t i = 0; a->ports && i < a->ports->n; i++)
        if (a->ports->p[i])
            return true;
    return false;
}

size_t wk__async_ports_pending(const wk_async *a)
{
    size_t n = 0;
    for (size_t i = 0; a->ports && i < a->ports->n; i++)
        n += a->ports->p[i] ? a->ports->p[i]->busy : 0;
    return n;
}

void wk__async_ports_close(wk_async *a)
{
    wk__async_ports *ps = a->ports;
    size_t n = ps ? ps->n : 0;
    for (size_t i = 0; i < n; i++) {
        wk__async_port *p = ps->p[i];
        if (p) { /* its owner completes what it had, and lets go */
            p->in_run = true; /* a close from gone is done here */
            if (p->arg)
                p->gone(p->arg);
            ps->p[i] = NULL;
            p->a = NULL;
            port_free(p);
        }
    }
    if (ps) {
        free(ps->p);
        free(ps);
        a->ports = NULL;
    }
}
