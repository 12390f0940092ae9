/*
 * collection/local_copy.c — a replica-local copy of one HashedCache item,
 * refreshed by get-if-changed: the body crosses the network only when it
 * changed (the ETag pattern).
 */
#include <wakuwaku/hashed_cache.h>

#include "collection/cache_internal.h"

void wk_local_copy_init(wk_local_copy *copy)
{
    if (copy)
        copy->body = (wk_body)WK_BODY_INIT;
}

void wk_local_copy_clear(wk_local_copy *copy)
{
    if (copy)
        wk_body_free(&copy->body);
}

int wk_local_copy_refresh(wk_local_copy *copy, wk_processor *p, const wk_entity *hcache,
                          wk_name name, wk_item_change *outcome)
{
    if (outcome)
        *outcome = WK_ITEM_MISSING;
    if (!p || !p->process)
        return WK_EINVAL;
    if (!copy)
        return wk__processor_fail(p, WK_EINVAL, "local_copy.refresh: copy is required");
    int rc = wk__no_deferred(p, "local_copy.refresh");
    if (rc)
        return rc;
    /* The answer goes to a scratch body, so the held one survives an
     * unchanged answer and any failure. */
    wk_body fresh = WK_BODY_INIT;
    rc = wk_hashed_cache_get_if_changed(p, hcache, name,
                                        copy->body.found ? copy->body.hash : NULL, &fresh);
    if (rc) {
        wk_body_free(&fresh);
        return rc; /* the copy is untouched */
    }
    switch (fresh.change) {
    case WK_ITEM_CHANGED:
        wk_body_free(&copy->body);
        copy->body = fresh;
        break;
    case WK_ITEM_MISSING:
        wk_body_free(&copy->body);
        break;
    case WK_ITEM_UNCHANGED:
        break;
    }
    if (outcome)
        *outcome = fresh.change;
    return WK_OK;
}
