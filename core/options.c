/*
 * core/options.c — what the thread-owning helpers (lease keeper, settings
 * follower, cron) share to set themselves up: owned copies of what a
 * caller passes in and the helper keeps past the call (connection options,
 * an entity with an item name), the caller's error buffer, and the
 * CLOCK_MONOTONIC condition every helper waits on. Core owns the copy of
 * wk_db_options because only core knows what each field means.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sodium.h>

#include <wakuwaku/capability.h>
#include <wakuwaku/db.h>

#include "core/core_internal.h"

/* ------------------------------------------------------------------------
 * The caller's error buffer
 * ---------------------------------------------------------------------- */

/* ------------------------------------------------------------------------
 * wk_db_options
 * ---------------------------------------------------------------------- */

static int dup_text(const char **dst, const char *src)
{
    *dst = NULL;
    if (!src)
        return WK_OK;
    char *d = strdup(src);
    *dst = d;
    return d ? WK_OK : WK_ENOMEM;
}

int wk__db_options_copy(wk_db_options *dst, const wk_db_options *src)
{
    *dst = *src;
    dst->url = dst->username = dst->password = dst->client_name = NULL;
    dst->sentinel_username = dst->sentinel_password = NULL;
    dst->capability = NULL;
    int rc = dup_text(&dst->url, src->url);
    if (!rc)
        rc = dup_text(&dst->sentinel_username, src->sentinel_username);
    if (!rc)
        rc = dup_text(&dst->sentinel_password, src->sentinel_password);
    if (!rc)
        rc = dup_text(&dst->username, src->username);
    if (!rc)
        rc = dup_text(&dst->password, src->password);
    if (!rc)
        rc = dup_text(&dst->client_name, src->client_name);
    if (!rc && src->capability) {
        /* A private copy: the caller's may be freed. */
        wk_cap *cap = NULL;
        rc = wk_cap_intersect(&cap, src->capability, src->capability, NULL);
        dst->capability = cap;
    }
    if (rc) {
        wk__db_options_free(dst);
        return rc == WK_ENOMEM ? WK_ENOMEM : rc;
    }
    return WK_OK;
}

void wk__db_options_free(wk_db_options *o)
{
    if (!o)
        return;
    free((char *)o->url);
    free((char *)o->username);
    if (o->password) {
        sodium_memzero((char *)o->password, strlen(o->password));
        free((char *)o->password);
    }
    free((char *)o->client_name);
    free((char *)o->sentinel_username);
    if (o->sentinel_password) {
        sodium_memzero((char *)o->sentinel_password, strlen(o->sentinel_password));
        free((char *)o->sentinel_password);
    }
    wk_cap_free((wk_cap *)o->capability);
    o->url = o->username = o->password = o->client_name = NULL;
    o->sentinel_username = o->sentinel_password = NULL;
    o->capability = NULL;
}

/* ------------------------------------------------------------------------
 * An entity and an item name
 * ---------------------------------------------------------------------- */

int wk__held_init(wk__held *h, const wk_entity *e, const char *kind, const wk_name *name)
{
    memset(h, 0, sizeof(*h));
    h->entity = *e;
    h->entity.kind = kind;
    h->name = *name;
    h->ns = strdup(e->ns);
    if (!h->ns)
        return WK_ENOMEM;
    h->entity.ns = h->ns;
    if (name->type == WK_NAME_BYTES && name->bytes) {
        /* One byte more, so a string name stays NUL-terminated. */
        h->name_bytes = malloc(name->len + 1);
        if (!h->name_bytes) {
            wk__held_free(h);
            return WK_ENOMEM;
        }
        if (name->len)
            memcpy(h->name_bytes, name->bytes, name->len);
        h->name_bytes[name->len] = '\0';
        h->name.bytes = h->name_bytes;
    }
    return WK_OK;
}

void wk__held_free(wk__held *h)
{
    if (!h)
        return;
    free(h->ns);
    free(h->name_bytes);
    h->ns = h->name_bytes = NULL;
}

/* ------------------------------------------------------------------------
 * Conditions
 * ---------------------------------------------------------------------- */

int wk__cond_init_monotonic(pthread_cond_t *cond)
{
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0)
        return WK_ENOMEM;
    int ok =
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0 && pthread_cond_init(cond, &ca) == 0;
    pthread_condattr_destroy(&ca);
    return ok ? WK_OK : WK_ENOMEM;
}

int wk__sync_init(pthread_mutex_t *mu, pthread_cond_t *cond)
{
    if (wk__cond_init_monotonic(cond) != WK_OK)
        return WK_ENOMEM;
    if (pthread_mutex_init(mu, NULL) != 0) {
        pthread_cond_destroy(cond);
        return WK_ENOMEM;
    }
    return WK_OK;
}
