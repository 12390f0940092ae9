/*
 * wakuwaku/hooks.h — before-write and after-write hooks as a processor
 * wrapper.
 *
 * Hooks see WRITE queries only (queries whose effect writes any entity):
 * audit logs, metrics of changes, cache invalidation fan-out. A hook's
 * failure goes to the error handler and never changes the query's result:
 * the query runs even if before_write fails, and returns its own status
 * whatever after_write says. Wrappers nest: the outer wrapper's before hook
 * runs first and its after hook last.
 *
 *     wk_hooks audit;
 *     wk_hooks_init(&audit, wk_db_processor(db));
 *     audit.after_write = log_write;
 *     audit.on_error = report;
 *     wk_lock_try(&audit.base, &invoice, wk_name_u64(42), &token, &got);
 *
 * The struct is caller-allocated and must outlive its use; it holds no
 * resources (nothing to close). Same thread rules as the inner processor.
 *
 * OVER A DEFERRED PROCESSOR (a batch, wk_processor_is_deferred()): both
 * hooks run when the query is queued, not when it runs. before_write runs
 * before it is queued; after_write runs right after, with the status of
 * queuing — WK_OK when it was queued (it has not been sent yet: its OUT
 * parameters are not written and its outcome is unknown), or the refusal
 * (WK_EDENIED, WK_EINVAL) when it was not. wk_batch_exec() later runs no
 * hook. A query's own result is wk_batch_status() (and its OUT
 * parameters) once wk_batch_exec() returned: run after-write work that
 * needs the result (an audit of what happened) over those, not in the
 * hook.
 */
#ifndef WAKUWAKU_HOOKS_H
#define WAKUWAKU_HOOKS_H

#include <wakuwaku/query.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * A hook. `status` is WK_OK for before_write, and the query's result for
 * after_write (over a deferred processor: the status of queuing it, see
 * above). Return WK_OK, or any non-zero value to report a failure to
 * on_error (which never changes the query's result).
 */
typedef int (*wk_hook_fn)(void *userdata, const wk_query *query, int status);

/* Told when a hook fails: which query, which hook ("before_write" or
 * "after_write"), and what the hook returned. */
typedef void (*wk_hook_error_fn)(void *userdata, const wk_query *query, const char *hook,
                                 int hook_status);

typedef struct wk_hooks {
    wk_processor base;          /* pass &hooks.base wherever a processor goes */
    wk_processor *inner;        /* where queries go next */
    wk_hook_fn before_write;    /* NULL: none */
    wk_hook_fn after_write;     /* NULL: none */
    wk_hook_error_fn on_error;  /* NULL: failures are dropped */
    void *userdata;             /* passed to the three callbacks */
} wk_hooks;

/* wk_hooks_init — set `hooks` up to wrap `inner`, with no hooks yet;
 * then set the callbacks you need. */
WK_API void wk_hooks_init(wk_hooks *hooks, wk_processor *inner);

#ifdef __cplusplus
}
#endif

#endif /* WAKUWAKU_HOOKS_H */
