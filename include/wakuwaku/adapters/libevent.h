/*
 * wakuwaku/adapters/libevent.h — drive an event-loop handle
 * (wakuwaku/async.h) from a libevent 2 event_base.
 *
 * Header-only: the program that owns the event_base includes it and links
 * libevent (`pkg-config --libs libevent`, or libevent_core); the wakuwaku
 * library itself never links libevent. The attachment keeps one event on
 * the handle's descriptor (re-assigned whenever the descriptor or the
 * events change: a reconnect is a new socket) and one timer for its
 * timeout, re-armed from the handle's watch callback, and calls
 * wk_async_process() when either fires.
 *
 *     struct event_base *base = event_base_new();
 *     wk_async *a;
 *     wk_async_event *att;
 *     if (wk_async_open(&a, &opts, err, sizeof(err)) != WK_OK ||
 *         wk_async_attach_event(a, base, &att) != WK_OK)
 *         ...;
 *     wk_lock_try(wk_async_with(a, on_lock, req), &jobs, name, &req->token, &req->got);
 *     event_base_dispatch(base);
 *     ...
 *     wk_async_detach_event(att);   // first: deletes its events, frees att
 *     wk_async_close(a);            // then: completes what is queued, frees
 *     event_base_free(base);
 *
 * OWNERSHIP
 *  1. wk_async_attach_event() allocates the attachment (its two events
 *     included); the handle and the event_base stay the caller's. One
 *     attachment per handle: it takes the handle's watch callback
 *     (wk_async_set_watch) for itself.
 *  2. wk_async_detach_event() gives the watch back (none), deletes the
 *     events and frees the attachment — at once, or, when called from a
 *     query's callback (inside the attachment's own event callback), as
 *     soon as that callback returns. The handle is not touched after it
 *     returns, so wk_async_close() may follow at once; WARNING: detach
 *     before wk_async_close() and before event_base_free().
 *  3. Detaching completes nothing: queued queries complete in
 *     wk_async_close(), or in wk_async_process() if the handle is driven
 *     otherwise.
 *
 * THREADS: the event_base's thread only, like the handle. The loop stays
 * alive (event_base_dispatch does not return) while the handle watches a
 * descriptor, i.e. while it is connected; detach, or
 * event_base_loopbreak(), to end it.
 */
#ifndef WAKUWAKU_ADAPTERS_LIBEVENT_H
#define WAKUWAKU_ADAPTERS_LIBEVENT_H

#include <stdbool.h>
#include <stdlib.h>

#include <event2/event.h>
#include <wakuwaku/async.h>

#ifdef __cplusplus
extern "C" {
#endif

/* An attachment of a wk_async to an event_base. Fields are the adapter's. */
typedef struct wk_async_event {
    wk_async *async; /* NULL once detached */
    struct event_base *base;
    struct event *io;    /* on `fd` for `events`; not pending when events is 0 */
    struct event *timer; /* the handle's timeout */
    int fd;
    short events;     /* EV_READ | EV_WRITE added on `io`; 0: none */
    bool in_callback; /* inside the attachment's event callback */
    int err;          /* 1 once adding an event failed (0: never) */
} wk_async_event;

static inline void wk__event_free(wk_async_event *e)
{
    event_free(e->io);
    event_free(e->timer);
    free(e);
}

/* Run the handle for the events that fired; free the attachment after if
 * a callback detached it meanwhile. False when it is no longer attached. */
static inline bool wk__event_process(wk_async_event *e, unsigned ready)
{
    if (!e->async)
        return false;
    e->in_callback = true;
    wk_async_process(e->async, ready);
    e->in_callback = false;
    if (!e->async) {
        wk__event_free(e); /* detached from a query's callback */
        return false;
    }
    return true;
}

static inline void wk__event_arm_timer(wk_async_event *e, int64_t timeout_ms)
{
    struct timeval tv;
    tv.tv_sec = timeout_ms / 1000;
    tv.tv_usec = timeout_ms % 1000 * 1000;
    event_base_update_cache_time(e->base); /* count from now, not from the turn's start */
    if (event_add(e->timer, &tv) != 0)
        e->err = 1;
}

static inline void wk__event_on_io(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    unsigned ready = (what & EV_READ ? WK_ASYNC_READ : 0) | (what & EV_WRITE ? WK_ASYNC_WRITE : 0);
    wk__event_process((wk_async_event *)arg, ready);
}

static inline void wk__event_on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    wk_async_event *e = (wk_async_event *)arg;
    if (!wk__event_process(e, 0))
        return;
    /* libevent counts a timer from its cached time, so it may fire a
     * little before the handle's deadline: then nothing changed, the
     * watch is not called, and the spent timer must be added again. */
    if (!evtimer_pending(e->timer, NULL)) {
        int64_t ms = wk_async_timeout_ms(e->async);
        if (ms >= 0)
            wk__event_arm_timer(e, ms);
    }
}

/* Make the events match what the handle waits for. */
static inline void wk__event_watch(wk_async *a, int fd, unsigned events, int64_t timeout_ms,
                                   void *arg)
{
    (void)a;
    wk_async_event *e = (wk_async_event *)arg;
    short want =
        (short)((events & WK_ASYNC_READ ? EV_READ : 0) | (events & WK_ASYNC_WRITE ? EV_WRITE : 0));
    if (fd < 0)
        want = 0;
    if (fd != e->fd || want != e->events) {
        /* An event's descriptor and events are fixed while it is pending:
         * delete, assign anew, add. (A new socket with the old number was
         * announced by fd -1 first, so the old registration is gone.) */
        if (e->events)
            event_del(e->io);
        e->events = 0;
        e->fd = fd;
        if (want) {
            event_assign(e->io, e->base, fd, (short)(want | EV_PERSIST), wk__event_on_io, e);
            if (event_add(e->io, NULL) == 0)
                e->events = want;
            else
                e->err = 1; /* tried again at the next change */
        }
    }
    if (timeout_ms < 0)
        event_del(e->timer);
    else
        wk__event_arm_timer(e, timeout_ms);
}

/*
 * wk_async_attach_event — drive `a` from `base` until
 * wk_async_detach_event(). Sets the handle's watch callback (arming the
 * events for its current state at once). Returns WK_OK with *out set,
 * WK_EINVAL (NULL argument) or WK_ENOMEM; *out is NULL on failure and the
 * handle is unchanged.
 */
static inline int wk_async_attach_event(wk_async *a, struct event_base *base, wk_async_event **out)
{
    if (!out)
        return WK_EINVAL;
    *out = NULL;
    if (!a || !base)
        return WK_EINVAL;
    wk_async_event *e = (wk_async_event *)calloc(1, sizeof(*e));
    if (!e)
        return WK_ENOMEM;
    e->async = a;
    e->base = base;
    e->fd = -1;
    e->io = event_new(base, -1, 0, wk__event_on_io, e);
    e->timer = evtimer_new(base, wk__event_on_timer, e);
    if (!e->io || !e->timer) {
        if (e->io)
            event_free(e->io);
        if (e->timer)
            event_free(e->timer);
        free(e);
        return WK_ENOMEM;
    }
    wk_async_set_watch(a, wk__event_watch, e);
    *out = e;
    return WK_OK;
}

/*
 * wk_async_detach_event — stop driving the handle: its watch callback is
 * cleared, the events deleted and the attachment freed (after the current
 * event callback, if called from inside one). Call before
 * wk_async_close(). NULL is a no-op; do not use `e` afterwards.
 */
static inline void wk_async_detach_event(wk_async_event *e)
{
    if (!e || !e->async)
        return;
    wk_async_set_watch(e->async, NULL, NULL);
    e->async = NULL;
    event_del(e->io);
    event_del(e->timer);
    if (!e->in_callback)
        wk__event_free(e);
}

/* wk_async_event_error — 1 if adding an event to the base ever failed
 * (the descriptor then went unwatched until the next change, only the
 * timer running the handle), else 0. */
static inline int wk_async_event_error(const wk_async_event *e)
{
    return e ? e->err : 0;
}

#ifdef __cplusplus
}
#endif

#endif /* WAKUWAKU_ADAPTERS_LIBEVENT_H */
