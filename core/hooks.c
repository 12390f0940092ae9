/*
 * core/hooks.c — the hook wrapper: calls before/after hooks around write
 * queries, routes hook failures to on_error, never alters the result.
 */
#include <stddef.h>

#include <wakuwaku/hooks.h>

static void run_hook(wk_hooks *h, wk_hook_fn fn, const char *which, const wk_query *q, int status)
{
    if (!fn)
        return;
    int hook_rc = fn(h->userdata, q, status);
    if (hook_rc != 0 && h->on_error)
        h->on_error(h->userdata, q, which, hook_rc);
}

static int hooks_process(wk_processor *self, wk_query *query)
{
    wk_hooks *h = (wk_hooks *)self;
    bool writes = wk_effect_is_write(&query->effect);
    if (writes)
        run_hook(h, h->before_write, "before_write", query, WK_OK);
    int rc = wk_process(h->inner, query);
    if (writes)
        run_hook(h, h->after_write, "after_write", query, rc);
    return rc;
}

void wk_hooks_init(wk_hooks *hooks, wk_processor *inner)
{
    if (!hooks)
        return;
    hooks->base.process = hooks_process;
    hooks->base.db = inner ? inner->db : NULL;
    hooks->base.flags = inner ? inner->flags : 0;
    hooks->inner = inner;
    hooks->before_write = NULL;
    hooks->after_write = NULL;
    hooks->on_error = NULL;
    hooks->userdata = NULL;
}
