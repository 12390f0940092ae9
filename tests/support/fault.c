/*
 * tests/support/fault.c — a lateness and fault injector for the waits'
 * liveness tests: a processor wrapper (wakuwaku/query.h, "To write a
 * wrapper") that, for the queries of one step — a wk_query name such as
 * "lock.acquire", "lock.leave", "rwlock.acquire_write",
 * "semaphore.acquire", "fenced_lock.acquire" — and optionally only those
 * sent at or after a wk_monotonic_ms() time, makes the client late after
 * the reply or before sending, kills its process before or after
 * sending, or loses the reply.
 *
 * What it cannot reach: a BLPOP of a waiting acquire runs on the handle's
 * blocking connection (core/blocking.h), not through the caller's
 * processor; lose that reply with tests/support/proxy.c. The event-loop
 * handle's attempts after the first go through the loop's own processor
 * (collection/lease_loop.c): make that waiter late by not turning the
 * loop.
 */
#include <signal.h>
#include <string.h>

#include "core/core_internal.h"
#include "support.h"

/* Whether `q` is one the fault hits (counted in seen and hit). */
static bool matches(wk_test_fault *f, const wk_query *q)
{
    if (f->step && (!q->name || strcmp(q->name, f->step) != 0))
        return false;
    if (f->from_ms && wk_monotonic_ms() < f->from_ms)
        return false;
    atomic_fetch_add(&f->seen, 1);
    if (f->times > 0 && atomic_load(&f->hit) >= f->times)
        return false;
    atomic_fetch_add(&f->hit, 1);
    return true;
}

static int fault_process(wk_processor *self, wk_query *q)
{
    wk_test_fault *f = (wk_test_fault *)self;
    bool hit = f->kind != WK_TEST_FAULT_NONE && matches(f, q);
    if (hit && f->kind == WK_TEST_FAULT_KILL_BEFORE)
        raise(SIGKILL);
    if (hit && f->kind == WK_TEST_FAULT_STALL)
        wk_test_sleep_ms(f->ms);
    int rc = wk_process(f->inner, q);
    if (!hit)
        return rc;
    switch (f->kind) {
    case WK_TEST_FAULT_LATE:
        wk_test_sleep_ms(f->ms);
        return rc;
    case WK_TEST_FAULT_KILL_AFTER:
        raise(SIGKILL);
        return rc;
    case WK_TEST_FAULT_LOSE_REPLY:
        if (rc != WK_OK)
            return rc; /* it failed by itself: that is its outcome */
        return wk__processor_fail(self, WK_EUNKNOWN,
                                  "%s: the connection dropped after the command was sent "
                                  "(injected: its reply is lost)",
                                  q->name ? q->name : "query");
    default:
        return rc;
    }
}

void wk_test_fault_init(wk_test_fault *f, wk_processor *inner, const char *step,
                        wk_test_fault_kind kind, int ms)
{
    memset(f, 0, sizeof(*f));
    f->proc.process = fault_process;
    f->proc.db = inner ? inner->db : NULL;     /* as a wrapper must */
    f->proc.flags = inner ? inner->flags : 0u; /* (wakuwaku/query.h) */
    f->inner = inner;
    f->step = step;
    f->kind = kind;
    f->ms = ms;
    atomic_init(&f->seen, 0);
    atomic_init(&f->hit, 0);
}

wk_processor *wk_test_fault_processor(wk_test_fault *f)
{
    return &f->proc;
}
