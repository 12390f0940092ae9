/*
 * collection/fill_once.c — fill a cache item once across replicas (cache
 * stampede protection): on a miss, the replica that takes a Lock lease on
 * the same namespace and name computes and puts the body; the others wait
 * for it (polling with jittered sleeps on the library's clock, never past
 * their deadline) or step aside at once. Works for Cache and HashedCache
 * through a small table of operations.
 */
#include <stdio.h>
#include <stdlib.h>

#include <sodium.h>

#include <wakuwaku/hashed_cache.h>

#include "collection/cache_internal.h"

/* The two queries fill-once needs, for one cache kind. */
typedef struct fill_ops {
    const char *op;   /* for messages */
    const char *kind; /* the cache entity's kind */
    int (*get)(wk_processor *p, const wk_entity *e, wk_name name, wk_body *out);
    int (*put)(wk_processor *p, const wk_entity *e, wk_name name, wk_body *body);
} fill_ops;

static int cache_put(wk_processor *p, const wk_entity *e, wk_name name, wk_body *body)
{
    return wk_cache_put(p, e, name, body->data, body->len);
}

static int hcache_put(wk_processor *p, const wk_entity *e, wk_name name, wk_body *body)
{
    return wk_hashed_cache_put(p, e, name, body->data, body->len, body->hash);
}

static const fill_ops cache_ops = {"cache.fill_once", WK_KIND_CACHE, wk_cache_get, cache_put};
static const fill_ops hcache_ops = {"hashed_cache.fill_once", WK_KIND_HASHED_CACHE,
                                    wk_hashed_cache_get, hcache_put};

/* ------------------------------------------------------------------------
 * The filler's side: holding the lease
 * ---------------------------------------------------------------------- */

/* A fill function's buffer made into a body as reads return it: len + 1
 * bytes with a trailing NUL, never NULL, found. Frees it on failure. */
static int adopt_body(wk_body *b)
{
    uint8_t *data = realloc(b->data, b->len + 1);
    if (!data) {
        wk_body_free(b);
        return WK_ENOMEM;
    }
    data[b->len] = '\0';
    b->data = data;
    b->found = true;
    b->change = WK_ITEM_CHANGED;
    return WK_OK;
}

/*
 * With the lease held: look again (another replica may have put the body
 * between our miss and our lease), else fill and put. Always releases the
 * lease. *filled says whether the fill function ran.
 */
static int fill_holding(wk_processor *p, const fill_ops *ops, const wk_entity *cache,
                        wk_name name, const wk_entity *lock, const wk_token *token,
                        wk_fill_fn fill, void *arg, wk_body *body, bool *filled)
{
    bool released;
    *filled = false;
    int rc = ops->get(p, cache, name, body);
    if (rc == WK_OK && !body->found) {
        wk_body fresh = WK_BODY_INIT;
        rc = fill(arg, &fresh);
        if (rc != WK_OK) {
            free(fresh.data);
            /* Keep the fill function's own message if it left one. */
            if (!wk_processor_errmsg(p)[0])
                wk__processor_fail(p, rc, "%s: the fill function failed (%s)", ops->op,
                                   wk_err_name(rc));
        } else if ((!fresh.data && fresh.len) || fresh.len > WK_BODY_MAX) {
            free(fresh.data);
            rc = wk__processor_fail(p, WK_EINVAL,
                                    "%s: the fill function returned %zu bytes at %s", ops->op,
                                    fresh.len, fresh.data ? "a buffer over WK_BODY_MAX" : "NULL");
        } else if ((rc = adopt_body(&fresh)) != WK_OK) {
            wk__processor_fail(p, rc, "%s: out of memory", ops->op);
        } else if ((rc = ops->put(p, cache, name, &fresh)) != WK_OK) {
            wk_body_free(&fresh);
        } else {
            *body = fresh;
            *filled = true;
        }
    }
    /* Release whatever happened above. A failed release leaves a lease
     * that runs out after the lock's TTL; it never hides the outcome. */
    char saved[256] = "";
    if (rc != WK_OK)
        snprintf(saved, sizeof(saved), "%s", wk_processor_errmsg(p));
    wk_lock_release(p, lock, name, token, &released);
    if (rc != WK_OK)
        wk__processor_fail(p, rc, "%s", saved);
    return rc;
}

/*
 * lock.try was sent and its reply never came (`status` WK_EUNKNOWN): the
 * server may have given us the lease under `token`. Left alone it would
 * keep every replica from filling for the lock's TTL, so release it
 * (token-checked: harmless if the try did not run) and fail with
 * `status`. If that release cannot be sent either, the lease runs out.
 */
static int give_back_unknown(wk_processor *p, const fill_ops *ops, const wk_entity *lock,
                             wk_name name, const wk_token *token, int status)
{
    char cause[200];
    snprintf(cause, sizeof(cause), "%s", wk_processor_errmsg(p));
    bool released = false;
    int rc = wk_lock_release(p, lock, name, token, &released);
    if (rc == WK_OK)
        return wk__processor_fail(p, status,
                                  "%s: lock.try's outcome is unknown (%s); the lease it may have "
                                  "taken was released%s",
                                  ops->op, cause[0] ? cause : wk_strerror(status),
                                  released ? "" : " (it had not been taken)");
    return wk__processor_fail(p, status,
                              "%s: lock.try's outcome is unknown (%s); the lease it may have "
                              "taken could not be released (%s) and runs out after %lld ms",
                              ops->op, cause[0] ? cause : wk_strerror(status), wk_err_name(rc),
                              (long long)lock->ttl_ms);
}

/* ------------------------------------------------------------------------
 * The call
 * ---------------------------------------------------------------------- */

static int fill_once(const fill_ops *ops, wk_processor *p, const wk_entity *cache, wk_name name,
                     const wk_entity *lock, wk_fill_fn fill, void *arg,
                     const wk_fill_options *opts, wk_body *body, wk_fill_outcome *outcome)
{
    static const wk_fill_options defaults = WK_FILL_OPTIONS_INIT;
    if (body)
        wk_body_free(body);
    if (outcome)
        *outcome = WK_FILL_BUSY;
    if (!p || !p->process)
        return WK_EINVAL;
    int rc = wk__no_deferred(p, ops->op);
    if (rc)
        return rc;
    if (!opts)
        opts = &defaults;
    if (!cache || !lock || !fill || !body || !outcome)
        return wk__processor_fail(p, WK_EINVAL,
                                  "%s: cache, lock, fill, body and outcome are required", ops->op);
    char why[WK_ENTITY_MSG_MAX];
    if (wk_entity_check_msg(cache, why, sizeof(why)) != WK_OK)
        return wk__processor_fail(p, WK_EINVAL, "%s: invalid %s entity: %s", ops->op, ops->kind,
                                  why);
    if (wk_entity_check_msg(lock, why, sizeof(why)) != WK_OK)
        return wk__processor_fail(p, WK_EINVAL, "%s: invalid Lock entity: %s", ops->op, why);
    if (strcmp(cache->kind, ops->kind) != 0 || strcmp(lock->kind, WK_KIND_LOCK) != 0)
        return wk__processor_fail(p, WK_EINVAL,
                                  "%s: needs a valid %s entity and a valid Lock entity", ops->op,
                                  ops->kind);
    if (strcmp(cache->ns, lock->ns) != 0)
        return wk__processor_fail(p, WK_EINVAL,
                                  "%s: the lock's namespace \"%s\" differs from the cache's \"%s\"",
                                  ops->op, lock->ns, cache->ns);
    if (opts->wait_ms < 0 || opts->poll_min_ms < 1 || opts->poll_max_ms < opts->poll_min_ms)
        return wk__processor_fail(p, WK_EINVAL,
                                  "%s: options need wait_ms >= 0 and 1 <= poll_min_ms <= "
                                  "poll_max_ms",
                                  ops->op);

    /* Saturated: a huge wait_ms means "no deadline", not an overflow. */
    int64_t deadline = wk__add_ms(wk__boot_ms(), opts->wait_ms);
    bool waited = false, acquired = false, filled = false;
    wk_token token;

    /* 1. The common case: a hit. */
    rc = ops->get(p, cache, name, body);
    if (rc)
        return rc;
    for (;;) {
        if (body->found) {
            *outcome = waited ? WK_FILL_WAITED : WK_FILL_HIT;
            return WK_OK;
        }
        /* 2. A miss: whoever takes the lease fills. */
        rc = wk_lock_try(p, lock, name, &token, &acquired);
        if (rc)
            return rc == WK_EUNKNOWN ? give_back_unknown(p, ops, lock, name, &token, rc) : rc;
        if (acquired) {
            rc = fill_holding(p, ops, cache, name, lock, &token, fill, arg, body, &filled);
            if (rc)
                return rc;
            *outcome = filled ? WK_FILL_FILLED : waited ? WK_FILL_WAITED : WK_FILL_HIT;
            return WK_OK;
        }
        /* 3. Someone else fills: wait for the body, up to the deadline. */
        int64_t now = wk__boot_ms();
        if (now >= deadline) {
            *outcome = WK_FILL_BUSY;
            return WK_OK;
        }
        int64_t span = (int64_t)opts->poll_max_ms - opts->poll_min_ms + 1;
        int64_t nap = opts->poll_min_ms + (int64_t)randombytes_uniform((uint32_t)span);
        int64_t wake = now + nap; /* nap ≤ INT_MAX: cannot overflow */
        wk__sleep_until_ms(wake < deadline ? wake : deadline);
        waited = true;
        rc = ops->get(p, cache, name, body);
        if (rc)
            return rc;
    }
}

int wk_cache_fill_once(wk_processor *p, const wk_entity *cache, wk_name name,
                       const wk_entity *lock, wk_fill_fn fill, void *arg,
                       const wk_fill_options *opts, wk_body *body, wk_fill_outcome *outcome)
{
    return fill_once(&cache_ops, p, cache, name, lock, fill, arg, opts, body, outcome);
}

int wk_hashed_cache_fill_once(wk_processor *p, const wk_entity *hcache, wk_name name,
                              const wk_entity *lock, wk_fill_fn fill, void *arg,
                              const wk_fill_options *opts, wk_body *body,
                              wk_fill_outcome *outcome)
{
    return fill_once(&hcache_ops, p, hcache, name, lock, fill, arg, opts, body, outcome);
}
