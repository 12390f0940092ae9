/*
 * wakuwaku/adapters/libuv.h — drive an event-loop handle (wakuwaku/async.h)
 * from a libuv loop.
 *
 * Header-only: the program that owns the loop includes it and links libuv
 * (`pkg-config --libs libuv`); the wakuwaku library itself never links
 * libuv. The attachment keeps one uv_poll_t on the handle's descriptor
 * (a new one whenever the descriptor changes: a reconnect is a new
 * socket) and one uv_timer_t for its timeout, re-armed from the handle's
 * watch callback, and calls wk_async_process() when either fires.
 *
 *     uv_loop_t *loop = uv_default_loop();
 *     wk_async *a;
 *     wk_async_uv *att;
 *     if (wk_async_open(&a, &opts, err, sizeof(err)) != WK_OK ||
 *         wk_async_attach_uv(a, loop, &att) != WK_OK)
 *         ...;
 *     wk_lock_try(wk_async_with(a, on_lock, req), &jobs, name, &req->token, &req->got);
 *     uv_run(loop, UV_RUN_DEFAULT);
 *     ...
 *     wk_async_detach_uv(att);      // first: stops and closes its handles
 *     wk_async_close(a);            // then: completes what is queued, frees
 *     uv_run(loop, UV_RUN_DEFAULT); // runs the close callbacks (frees att)
 *     uv_loop_close(loop);
 *
 * OWNERSHIP
 *  1. wk_async_attach_uv() allocates the attachment; the handle and the
 *     loop stay the caller's. One attachment per handle: it takes the
 *     handle's watch callback (wk_async_set_watch) for itself.
 *  2. wk_async_detach_uv() gives the watch back (none) and uv_close()s the
 *     poll and timer handles. The attachment is freed by their close
 *     callbacks, i.e. on a later turn of the loop: WARNING: run the loop
 *     at least once more (uv_run, any mode) after detaching, or the
 *     attachment leaks and uv_loop_close() returns UV_EBUSY. The handle
 *     is not touched after wk_async_detach_uv() returns, so
 *     wk_async_close() may follow at once (and must not come first: the
 *     attachment would call a freed handle).
 *  3. Detaching completes nothing: queued queries complete in
 *     wk_async_close(), or in wk_async_process() if the handle is driven
 *     otherwise (another attachment, a poll loop).
 *
 * THREADS: the loop's thread only, like the handle. The loop stays alive
 * (uv_run(UV_RUN_DEFAULT) does not return) while the handle watches a
 * descriptor, i.e. while it is connected; detach, or uv_stop(), to end it.
 *
 * Detaching from a query's callback is allowed (the attachment outlives
 * the callback); closing the handle there is not (wakuwaku/async.h).
 */
#ifndef WAKUWAKU_ADAPTERS_LIBUV_H
#define WAKUWAKU_ADAPTERS_LIBUV_H

#include <stdlib.h>

#include <uv.h>
#include <wakuwaku/async.h>

#ifdef __cplusplus
extern "C" {
#endif

/* An attachment of a wk_async to a uv_loop_t. Fields are the adapter's. */
typedef struct wk_async_uv {
    wk_async *async; /* NULL once detached */
    uv_loop_t *loop;
    uv_timer_t timer;
    uv_poll_t *poll; /* on the descriptor `fd`; NULL: none */
    int fd;
    int events; /* UV_READABLE | UV_WRITABLE started on `poll`; 0: stopped */
    int refs;   /* the attachment itself + its libuv handles not closed yet */
    int err;    /* the last libuv error arming a watcher (0: none) */
} wk_async_uv;

static inline void wk__uv_release(wk_async_uv *u)
{
    if (--u->refs == 0)
        free(u);
}

static inline void wk__uv_poll_closed(uv_handle_t *h)
{
    wk_async_uv *u = (wk_async_uv *)h->data;
    free(h);
    wk__uv_release(u);
}

static inline void wk__uv_timer_closed(uv_handle_t *h)
{
    wk__uv_release((wk_async_uv *)h->data);
}

static inline void wk__uv_drop_poll(wk_async_uv *u)
{
    if (!u->poll)
        return;
    /* uv_close stops the poll at once (libuv forgets the descriptor, so a
     * new socket with the same number starts clean); the memory goes in
     * the close callback. */
    uv_close((uv_handle_t *)u->poll, wk__uv_poll_closed);
    u->poll = NULL;
    u->fd = -1;
    u->events = 0;
}

static inline void wk__uv_arm(wk_async_uv *u, int fd, unsigned events, int64_t timeout_ms);

static inline void wk__uv_on_poll(uv_poll_t *p, int status, int events)
{
    wk_async_uv *u = (wk_async_uv *)p->data;
    if (!u->async || p != u->poll)
        return; /* detached, or an old descriptor's last word */
    unsigned ready = 0;
    if (status < 0) {
        /* libuv stopped the poll (POLLERR): let the handle find out why
         * through its own I/O, then arm again whatever it wants. */
        ready = WK_ASYNC_READ | WK_ASYNC_WRITE;
        u->events = 0;
    } else {
        if (events & (UV_READABLE | UV_DISCONNECT))
            ready |= WK_ASYNC_READ;
        if (events & UV_WRITABLE)
            ready |= WK_ASYNC_WRITE;
    }
    wk_async *a = u->async;
    wk_async_process(a, ready);
    if (status < 0 && u->async)
        wk__uv_arm(u, wk_async_fd(a), wk_async_events(a), wk_async_timeout_ms(a));
}

static inline void wk__uv_on_timer(uv_timer_t *t)
{
    wk_async_uv *u = (wk_async_uv *)t->data;
    if (!u->async)
        return;
    wk_async *a = u->async;
    wk_async_process(a, 0);
    /* libuv counts a timer from the loop's cached time, so it may fire a
     * little before the handle's deadline: then nothing changed, the
     * watch is not called, and the spent timer must be armed again. */
    if (u->async && !uv_is_active((uv_handle_t *)&u->timer)) {
        int64_t ms = wk_async_timeout_ms(a);
        if (ms >= 0)
            uv_timer_start(&u->timer, wk__uv_on_timer, (uint64_t)ms, 0);
    }
}

/* Make the watchers match what the handle waits for. */
static inline void wk__uv_arm(wk_async_uv *u, int fd, unsigned events, int64_t timeout_ms)
{
    int want =
        (events & WK_ASYNC_READ ? UV_READABLE : 0) | (events & WK_ASYNC_WRITE ? UV_WRITABLE : 0);
    if (u->poll && fd != u->fd)
        wk__uv_drop_poll(u); /* a uv_poll_t is bound to one descriptor */
    if (fd >= 0 && want && !u->poll) {
        uv_poll_t *p = (uv_poll_t *)malloc(sizeof(*p));
        int rc = p ? uv_poll_init(u->loop, p, fd) : UV_ENOMEM;
        if (rc) {
            /* Out of memory, or libuv refused the descriptor: tried
             * again at the next change; meanwhile only the timer runs
             * the handle (wk_async_uv_error says why). */
            free(p);
            u->err = rc;
        } else {
            p->data = u;
            u->poll = p;
            u->fd = fd;
            u->refs++;
        }
    }
    if (u->poll && want != u->events) {
        int rc = want ? uv_poll_start(u->poll, want, wk__uv_on_poll) : uv_poll_stop(u->poll);
        if (rc)
            u->err = rc;
        else
            u->events = want;
    }
    if (timeout_ms < 0) {
        uv_timer_stop(&u->timer);
    } else {
        uv_update_time(u->loop); /* count from now, not from the turn's start */
        uv_timer_start(&u->timer, wk__uv_on_timer, (uint64_t)timeout_ms, 0);
    }
}

static inline void wk__uv_watch(wk_async *a, int fd, unsigned events, int64_t timeout_ms, void *arg)
{
    (void)a;
    wk__uv_arm((wk_async_uv *)arg, fd, events, timeout_ms);
}

/*
 * wk_async_attach_uv — drive `a` from `loop` until wk_async_detach_uv().
 * Sets the handle's watch callback (arming the watchers for its current
 * state at once). Returns WK_OK with *out set, WK_EINVAL (NULL argument)
 * or WK_ENOMEM; *out is NULL on failure and the handle is unchanged.
 */
static inline int wk_async_attach_uv(wk_async *a, uv_loop_t *loop, wk_async_uv **out)
{
    if (!out)
        return WK_EINVAL;
    *out = NULL;
    if (!a || !loop)
        return WK_EINVAL;
    wk_async_uv *u = (wk_async_uv *)calloc(1, sizeof(*u));
    if (!u)
        return WK_ENOMEM;
    if (uv_timer_init(loop, &u->timer) != 0) {
        free(u);
        return WK_ENOMEM;
    }
    u->async = a;
    u->loop = loop;
    u->timer.data = u;
    u->fd = -1;
    u->refs = 2; /* the attachment, the timer */
    wk_async_set_watch(a, wk__uv_watch, u);
    *out = u;
    return WK_OK;
}

/*
 * wk_async_detach_uv — stop driving the handle: its watch callback is
 * cleared and the attachment's libuv handles are closed; the attachment
 * is freed by their close callbacks on a later turn of the loop (run it).
 * Call before wk_async_close(). NULL is a no-op; detaching twice is not
 * allowed (the first call may have freed it).
 */
static inline void wk_async_detach_uv(wk_async_uv *u)
{
    if (!u || !u->async)
        return;
    wk_async_set_watch(u->async, NULL, NULL);
    u->async = NULL;
    wk__uv_drop_poll(u);
    uv_close((uv_handle_t *)&u->timer, wk__uv_timer_closed);
    wk__uv_release(u);
}

/* wk_async_uv_error — the last libuv error arming a watcher (a uv_strerror
 * code; 0: none). With one, the descriptor went unwatched for a while
 * (only the timer ran the handle), so replies may have come late. */
static inline int wk_async_uv_error(const wk_async_uv *u)
{
    return u ? u->err : 0;
}

#ifdef __cplusplus
}
#endif

#endif /* WAKUWAKU_ADAPTERS_LIBUV_H */
