/*
 * collection/receiver_loop.c — the receivers through the event loop
 * (collection/receiver.h): a receiver opened through an event-loop
 * handle's processor sends the blocking form's queries on a hidden handle
 * of its own (core/async_sub.c), and each receive ends in one callback.
 */
#include <stdio.h>
#include <string.h>

#include "collection/receiver.h"
#include "core/async_internal.h"
#include "core/blocking.h"

bool wk__receiver_is_loop(const wk_processor *p)
{
    return p && p->db && p->db->loop && (p->flags & WK_PROCESSOR_DEFERRED);
}

/* The handle closes: the receive outstanding ends with WK_EIO (nothing
 * was delivered; the receiver is cut off: every later receive says so). */
static void on_gone(void *self)
{
    wk__receiver *r = self;
    if (r->busy)
        wk__receiver_deliver(r, WK_EIO, "the event-loop handle closed");
}

static void on_reply(void *self, int status, const char *msg)
{
    wk__receiver *r = self;
    int was = r->inflight;
    r->inflight = 0;
    if (r->busy)
        r->fns->reply(self, was, status, msg);
}

static void on_run(void *self)
{
    wk__receiver *r = self;
    if (r->busy && r->fns->decided(self))
        wk__receiver_deliver(r, r->fns->local(self), r->msg);
}

int wk__receiver_open_loop(wk__receiver *r, wk_processor *p, const wk_entity *e, const char *kind,
                           const wk_name *name, const wk__receiver_loop *fns, void *self, char *err,
                           size_t errlen)
{
    /* `self` starts with `r` (on_gone). */
    if ((void *)r != self) {
        snprintf(err, errlen, "internal: the receiver is not first");
        return WK_EINVAL;
    }
    atomic_init(&r->stop, false);
    if (wk__held_init(&r->held, e, kind, name) != WK_OK) {
        snprintf(err, errlen, "out of memory");
        return WK_ENOMEM;
    }
    r->fns = fns;
    return wk__async_sub_open(&r->sub, p->db->loop, on_run, on_gone, on_reply, self, err, errlen);
}

int wk__receiver_begin(wk__receiver *r, const char *op, bool open, wk_async_done_fn done, void *arg)
{
    if (r->sub && !wk__async_sub_handle(r->sub)) {
        snprintf(r->msg, sizeof(r->msg), "%s: the event-loop handle was closed", op);
        return WK_EIO;
    }
    const char *why = !r->sub   ? "a blocking receiver (opened through a blocking handle)"
                      : !open   ? "not open (its open's callback has not run, or failed)"
                      : !done   ? "a callback is required"
                      : r->busy ? "a receive is already outstanding"
                                : NULL;
    if (why) {
        snprintf(r->msg, sizeof(r->msg), "%s: %s", op, why);
        return WK_EINVAL;
    }
    r->msg[0] = '\0';
    r->done = done;
    r->done_arg = arg;
    r->busy = true;
    wk__async_sub_busy(r->sub, true);
    return WK_OK;
}

int wk__receiver_first(wk__receiver *r, void *self, int inflight)
{
    if (r->fns->decided(self) || r->inflight) { /* a stop left a wait in flight */
        wk__async_sub_kick(r->sub); /* delivered in the next turn, never inside this call */
        return WK_OK;
    }
    int rc = r->fns->first(self);
    if (rc) { /* refused: not outstanding, its callback is never called */
        r->busy = false;
        r->done = NULL;
        wk__async_sub_busy(r->sub, false);
        return rc;
    }
    r->inflight = inflight;
    return WK_OK;
}

void wk__receiver_deliver(wk__receiver *r, int status, const char *msg)
{
    wk_async_done_fn done = r->done;
    void *arg = r->done_arg;
    r->busy = false;
    r->done = NULL;
    wk__async_sub_busy(r->sub, false);
    char text[sizeof(r->msg)];
    snprintf(text, sizeof(text), "%s",
             status == WK_OK ? ""
             : msg && msg[0] ? msg
                             : wk_strerror(status));
    if (status != WK_OK)
        memcpy(r->msg, text, sizeof(text));
    if (done) /* last: it may receive again, or close the receiver */
        done(wk__async_sub_parent(r->sub), status, text, arg);
}

void wk__receiver_kick(wk__receiver *r)
{
    wk__async_sub_kick(r->sub);
}

int wk__receiver_send(wk__receiver *r, wk_query *q, int64_t block_ms)
{
    if (!r->sub)
        return wk__blocking_process(r->b, q, block_ms);
    int rc = wk__async_sub_send(r->sub, q, block_ms);
    if (rc)
        snprintf(r->msg, sizeof(r->msg), "%s: %s", q->name,
                 wk_async_errmsg(wk__async_sub_handle(r->sub)));
    return rc;
}
