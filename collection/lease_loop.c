/*
 * collection/lease_loop.c — the waiting acquires of the lease kinds
 * through the event-loop handle (wakuwaku/async.h, SEMANTICS 6): the
 * waiter loop of collection/wake.c as a machine stepped by the loop's
 * callbacks. Each attempt (the kind's acquire-or-park script, the same
 * as the blocking path's), the leave and the give-back of an
 * unacknowledged lease are queries on the handle's own connection; the
 * sleep between attempts is a park on its waits lane
 * (core/async_internal.h), woken by the same push as a blocking waiter.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collection/lease_script.h"
#include "collection/wake.h"
#include "core/async_internal.h"

/* Waits cut off in a row before the acquire fails with the connection's
 * error (as collection/wake.c). */
#define MAX_LOST_WAITS 3

enum { ATTEMPTING, LEAVING, GIVING_BACK };

typedef struct waiter {
    wk_processor proc; /* first member: its queries complete in on_reply */
    wk_async *a;
    wk_async_done_fn done; /* the caller's completion */
    void *done_arg;
    wk__op op; /* the kind's acquire-or-park take, parsed by wk__take_parse */
    wk__call c;
    wk__take_reply got;
    bool *acquired;
    int64_t *fence; /* FencedLock: where the fence goes, else NULL */
    wk__lease_release_fn release;
    int64_t deadline;
    int lost, step, status;
    bool released;
    bool queued; /* an attempt parked it: a release may hand it the item until it left */
    bool final;  /* the attempt in flight is the final one (cap 0: take or leave) */
    bool counted;   /* it slept: a wait of the handle's stats (core/stats.c) */
    uint64_t start; /* since its first sleep */
    char msg[WK__ERRMSG_MAX];
    unsigned char name[]; /* the item's name, copied */
} waiter;

static void on_reply(wk_async *a, int status, const char *msg, void *arg);

static int waiter_submit(wk_processor *self, wk_query *q)
{
    waiter *w = (waiter *)self;
    return wk__async_lane_submit(&w->a->lane[WK__LANE_MAIN], q, on_reply, w);
}

/* The caller's callback, once; the waiter goes. */
static void finish(waiter *w, int status, const char *msg)
{
    if (w->counted) /* as the blocking path counts a wait that slept */
        wk__count_wait_end(&w->proc, w->start, status, *w->acquired, true);
    wk_async_done_fn done = w->done;
    void *arg = w->done_arg;
    wk_async *a = w->a;
    char text[WK__ERRMSG_MAX];
    wk__copy_text(text, sizeof(text), msg ? msg : "");
    free(w);
    if (done)
        done(a, status, text, arg);
}

/* The outcome of a wait that ends while it may still be handed the item
 * (queued, and its leave could not be sent or answered): WK_EUNKNOWN, the
 * token in the caller's OUT (collection/wake.c, the same words). */
static void unknown(waiter *w, const char *why)
{
    char msg[WK__ERRMSG_MAX];
    snprintf(msg, sizeof(msg), "%s: %s" WK__WAKE_UNKNOWN_NOTE, w->op.name, why,
             WK__WAKE_RENEW_MS + WK__WAKE_GRACE_MS);
    finish(w, WK_EUNKNOWN, msg);
}

/* A query could not be queued (the handle is closing, memory): the
 * acquire ends with that if it holds nothing, else as unknown. */
static void refused(waiter *w, int rc)
{
    if (!w->queued)
        finish(w, rc, w->a->db->errmsg);
    else if (w->a->closing)
        unknown(w, "the handle closed while it waited");
    else
        unknown(w, "its next query could not be queued");
}

/* The next attempt; the final one (cap 0, at the deadline: it takes the
 * item or leaves the queue in one script) however late the loop's turn
 * came. */
static void attempt(waiter *w, bool final)
{
    w->step = ATTEMPTING;
    w->final = final;
    w->c.cap_ms = final ? 0 : wk__wake_cap_ms(w->c.e, w->deadline);
    int rc = wk__op_send(&w->c, NULL, NULL, 0);
    if (rc)
        refused(w, rc);
}

/* Leave the queue without the item (passing on an item handed to the
 * waiter meanwhile), then complete with `status`; a leave that cannot be
 * sent or answered makes the outcome WK_EUNKNOWN (on_reply). */
static void give_up(waiter *w, int status, const char *msg)
{
    w->status = status;
    wk__copy_text(w->msg, sizeof(w->msg), msg);
    w->step = LEAVING;
    int rc = wk__lease_leave_call(&w->c, &w->proc); /* passes on a handed item */
    if (rc)
        unknown(w, w->a->closing ? "the handle closed while it waited"
                                 : "its leave could not be queued");
}

static void woke(void *arg, int status, const char *why, const char *element, size_t len)
{
    waiter *w = arg;
    int64_t n;
    /* Handed over by the release (collection/wake.h): the item is the
     * waiter's, with no attempt after the pop — unless replicas must
     * acknowledge it, which only an attempt's WAIT does. */
    if (status == WK_OK && wk__wake_notice_handed(element, len, &n) &&
        w->a->db->conn->lease_replicas == 0) {
        *w->acquired = true;
        if (w->fence)
            *w->fence = n;
        finish(w, WK_OK, "");
        return;
    }
    /* The deadline has come, however late this turn: the final attempt
     * says whose the item is (a lost pop may have taken a notice). */
    if (wk__boot_ms() >= w->deadline)
        attempt(w, true);
    else if (status != WK_OK && (!wk_is_connection_error(status) || ++w->lost > MAX_LOST_WAITS))
        give_up(w, status, why);
    else {
        w->lost = status == WK_OK ? 0 : w->lost;
        attempt(w, false); /* a lost pop took at most a wake-up, or the item: the attempt finds it */
    }
}

static void attempted(waiter *w, int status, const char *msg)
{
    if (status == WK_ENOTREPLICATED) {
        /* Taken, not acknowledged: give it back, as a try does. */
        w->status = status;
        wk__copy_text(w->msg, sizeof(w->msg), msg);
        w->step = GIVING_BACK;
        wk_name name = w->c.name;
        int rc = w->release(&w->proc, w->c.e, name, w->c.token, &w->released);
        if (rc)
            finish(w, WK_EUNKNOWN, msg);
        return;
    }
    if (status == WK_EUNKNOWN || (status != WK_OK && !w->queued)) {
        finish(w, status, msg); /* lost (it keeps the token), or never queued */
        return;
    }
    if (status != WK_OK) {
        give_up(w, status, msg); /* not sent: still queued */
        return;
    }
    if (w->got.acquired) {
        *w->acquired = true;
        if (w->fence)
            *w->fence = w->got.n;
        finish(w, WK_OK, "");
        return;
    }
    if (w->final) {
        finish(w, WK_OK, ""); /* it has left the queue */
        return;
    }
    w->queued = true;
    int64_t now = wk__boot_ms(), left = w->deadline - now;
    if (left <= 0) {
        attempt(w, true);
        return;
    }
    int64_t sleep = w->got.n < left ? w->got.n : left;
    if (!w->counted) {
        w->counted = true;
        w->start = wk__count_wait_begin(&w->proc);
    }
    char list[WK__WAKE_KEY_MAX];
    memcpy(list, w->c.wake.w, w->c.wake.w_len);
    memcpy(list + w->c.wake.w_len, w->c.token->bytes, WK_TOKEN_LEN);
    int rc = wk__async_park_on(w->a, w->c.e, list, w->c.wake.w_len + WK_TOKEN_LEN,
                               wk__add_ms(now, sleep < 1 ? 1 : sleep), woke, w);
    if (rc)
        give_up(w, rc, rc == WK_ENOMEM ? "out of memory" : "the handle is closing");
}

static void on_reply(wk_async *a, int status, const char *msg, void *arg)
{
    (void)a;
    waiter *w = arg;
    if (w->step == ATTEMPTING)
        attempted(w, status, msg);
    else if (w->step == LEAVING) { /* only a leave that ran says it holds nothing */
        if (status != WK_OK)
            unknown(w, msg);
        else
            finish(w, w->status, w->msg);
    }
    else if (status != WK_OK) /* GIVING_BACK */
        finish(w, WK_EUNKNOWN,
               "not acknowledged, and its release failed: it may still be held "
               "under the token until its TTL runs out");
    else
        finish(w, WK_ENOTREPLICATED, w->msg);
}

int wk__lease_loop_acquire(const wk__op *acquire, wk_processor *p, const wk_entity *e, wk_name name,
                           int64_t deadline, wk_token *token, bool *acquired, int64_t *fence,
                           wk__lease_release_fn release)
{
    wk_async *a = wk__async_of(p->db);
    size_t name_len = name.type == WK_NAME_BYTES ? name.len : 0;
    waiter *w = calloc(1, sizeof(*w) + name_len + 1);
    if (!w)
        return wk__processor_fail(p, WK_ENOMEM, "%s: out of memory", acquire->name);
    *w = (waiter){.proc = {.process = waiter_submit, .db = a->db, .flags = WK_PROCESSOR_DEFERRED},
                  .a = a,
                  .done = a->done,
                  .done_arg = a->done_arg,
                  .op = *acquire,
                  .acquired = acquired,
                  .fence = fence,
                  .release = release,
                  .deadline = deadline};
    /* After the assignment above, which may zero the padding it lies in. */
    if (name_len)
        memcpy(w->name, name.bytes, name_len);
    name.bytes = name_len ? w->name : name.bytes;
    /* Parsed whole here: a deferred processor runs no split steps. */
    w->op.steps = NULL;
    w->op.parse = wk__take_parse;
    w->op.out_name = NULL;
    w->op.out_size = 0;
    wk_token_random(token); /* the waiter's place in the queue, and the lease's once taken */
    int rc = wk__op_begin_token(&w->c, &w->proc, &w->op, e, name, token, &w->got);
    if (!rc) {
        w->c.cap_ms = wk__wake_cap_ms(e, deadline);
        rc = wk__op_send(&w->c, NULL, NULL, 0);
    }
    if (rc)
        free(w); /* refused at once: the message is on the handle (p's db) */
    return rc;
}
