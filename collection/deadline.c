/*
 * collection/deadline.c — the start every waiting acquire shares
 * (wk__wake_begin, collection/wake.h): argument checks and the plain try.
 * The wait itself is collection/wake.c's; each kind's acquire (lock.c,
 * rwlock.c) joins the two. wakuwaku/deadline.h documents how they wait.
 */
#include <wakuwaku/deadline.h>

#include "collection/common.h"
#include "collection/wake.h"
#include "core/db_internal.h"

int wk__wake_begin(const char *op, wk__try_fn try_once, wk_processor *p, const wk_entity *e,
                   wk_name name, int64_t deadline, const wk_backoff *backoff, wk_token *token,
                   bool *acquired)
{
    static const wk_backoff defaults = WK_BACKOFF_INIT;
    if (!p || !p->process)
        return WK_EINVAL;
    if (!token || !acquired)
        return wk__processor_fail(p, WK_EINVAL, "%s: token and acquired are required", op);
    *acquired = false;
    const wk_backoff *b = backoff ? backoff : &defaults;
    if (b->initial_ms < 1 || b->max_ms < b->initial_ms)
        return wk__processor_fail(p, WK_EINVAL, "%s: backoff needs 1 <= initial_ms <= max_ms", op);
    if (wk_processor_is_deferred(p))
        return wk__wake_deferred(p, op);
    /* The outcome lands in *acquired (written by the parser). On an error
     * *token is the failed try's, which may hold the lock after
     * WK_EUNKNOWN (see deadline.h). */
    int64_t outer = wk__wake_bound(p, wk__wake_end(deadline));
    int rc = try_once(p, e, name, token, acquired);
    wk__wake_unbound(p, outer);
    if (rc != WK_OK || *acquired)
        return rc;
    return wk__boot_ms() >= deadline ? WK_OK : WK__WAKE_MUST_WAIT;
}

int wk__wake_deferred(wk_processor *p, const char *op)
{
    if (p->db && p->db->loop)
        return WK__WAKE_LOOP;
    return wk__processor_fail(p, WK_EINVAL,
                              "%s: cannot wait through a batch (its outcomes come when it "
                              "runs): use a blocking handle, a pool or the event loop",
                              op);
}
