/*
 * entity/entity.c — validation of entity descriptors and effect helpers.
 *
 * The naming rules (kind and namespace) are what make keys unambiguous:
 * see wakuwaku/entity.h. They are checked twice per query, by
 * wk_entity_check() and by wk_key_build(), so the scan is one pass with no
 * formatting unless a message is asked for.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <wakuwaku/entity.h>

#include "core/private.h"

/* Writes a message into msg (if any) and returns WK_EINVAL. */
static int fail(char *msg, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int fail(char *msg, size_t len, const char *fmt, ...)
{
    if (msg && len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, len, fmt, ap);
        va_end(ap);
    }
    return WK_EINVAL;
}

/* Checks one part of the key that ends at a separator: 1..max bytes, none
 * of them ':', '{' or '}'. `what` names the field in messages. */
static int check_part(const char *s, size_t max, const char *what, const char *max_name,
                      char *msg, size_t len)
{
    if (!s)
        return fail(msg, len, "%s is NULL", what);
    /* Every query checks its entity (twice: descriptor, then key), so use
     * libc's vectorised scans rather than a byte loop. */
    size_t n = strnlen(s, max + 1);
    size_t clean = strcspn(s, ":{}");
    const char *sep = clean < n ? s + clean : NULL;
    if (n == 0)
        return fail(msg, len, "%s is empty", what);
    if (n > max)
        return fail(msg, len, "%s is %zu bytes, more than %s (%zu)", what, strlen(s), max_name,
                    max);
    if (sep) {
        char text[96];
        if (msg && len)
            wk__render_key(text, sizeof(text), s, n);
        return fail(msg, len,
                    "%s \"%s\" contains '%c' (':', '{' and '}' separate the parts of a key, so "
                    "such a %s would share keys with another one)",
                    what, msg && len ? text : "", *sep, what);
    }
    return WK_OK;
}

int wk__entity_names_check(const wk_entity *e, char *msg, size_t len)
{
    if (!e)
        return fail(msg, len, "entity is NULL");
    int rc = check_part(e->kind, WK_KIND_MAX, "kind", "WK_KIND_MAX", msg, len);
    if (rc == WK_OK)
        rc = check_part(e->ns, WK_NAMESPACE_MAX, "namespace", "WK_NAMESPACE_MAX", msg, len);
    return rc;
}

static bool kind_is(const wk_entity *e, const char *kind)
{
    return e->kind == kind || strcmp(e->kind, kind) == 0;
}

/* A finite number > 0 (NaN compares false, so it is refused too). */
static bool positive_finite(double v)
{
    return v > 0 && isfinite(v);
}

int wk_entity_check_msg(const wk_entity *e, char *msg, size_t len)
{
    if (msg && len)
        msg[0] = '\0';
    int rc = wk__entity_names_check(e, msg, len);
    if (rc != WK_OK)
        return rc;
    if (kind_is(e, WK_KIND_LOCK) || kind_is(e, WK_KIND_RWLOCK) || kind_is(e, WK_KIND_CACHE) ||
        kind_is(e, WK_KIND_HASHED_CACHE)) {
        if (e->ttl_ms <= 0)
            return fail(msg, len, "ttl_ms must be > 0 (got %lld)", (long long)e->ttl_ms);
    } else if (kind_is(e, WK_KIND_TOKEN_BUCKET)) {
        if (!positive_finite(e->capacity))
            return fail(msg, len, "capacity must be a finite number > 0 (got %g)", e->capacity);
        if (!positive_finite(e->rate))
            return fail(msg, len, "rate must be a finite number > 0 (got %g)", e->rate);
        if (e->period_ms <= 0)
            return fail(msg, len, "period_ms must be > 0 (got %lld)", (long long)e->period_ms);
    }
    return WK_OK;
}

int wk_entity_check(const wk_entity *e)
{
    return wk_entity_check_msg(e, NULL, 0);
}

bool wk_effect_is_write(const wk_effect *effect)
{
    if (!effect)
        return false;
    for (size_t i = 0; i < effect->count; i++) {
        if (effect->accesses[i].mode == WK_WRITE)
            return true;
    }
    return false;
}

const char *wk_mode_name(wk_mode mode)
{
    switch (mode) {
    case WK_READ:
        return "READ";
    case WK_WRITE:
        return "WRITE";
    }
    return "?";
}
