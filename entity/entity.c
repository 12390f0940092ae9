/*
 * entity/entity.c — validation of entity descriptors and effect helpers.
 *
 * This file knows no kind: the parameter rules of each built-in kind are
 * in the kind's own .c, found through the registry of entity/kind.h.
 *
 * The naming rules (kind and namespace) are what make keys unambiguous:
 * see wakuwaku/entity.h. They are checked twice per query, by
 * wk_entity_check() and by wk_key_build(), so the scan is one pass with no
 * formatting unless a message is asked for.
 */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include <wakuwaku/entity.h>

#include "base/base.h"
#include "entity/kind.h"

/* Checks one part of the key that ends at a separator: 1..max bytes, none
 * of them ':', '{' or '}'. `what` names the field in messages. */
static int check_part(const char *s, size_t max, const char *what, const char *max_name, char *msg,
                      size_t len)
{
    if (!s)
        return wk__entity_fail(msg, len, "%s is NULL", what);
    /* Every query checks its entity (twice: descriptor, then key), so use
     * libc's vectorised scans rather than a byte loop. */
    size_t n = strnlen(s, max + 1);
    size_t clean = strcspn(s, ":{}");
    const char *sep = clean < n ? s + clean : NULL;
    if (n == 0)
        return wk__entity_fail(msg, len, "%s is empty", what);
    if (n > max)
        return wk__entity_fail(msg, len, "%s is %zu bytes, more than %s (%zu)", what, strlen(s),
                               max_name, max);
    if (sep) {
        char text[96];
        if (msg && len)
            wk__render_key(text, sizeof(text), s, n);
        return wk__entity_fail(
            msg, len,
            "%s \"%s\" contains '%c' (':', '{' and '}' separate the parts of a key, so "
            "such a %s would share keys with another one)",
            what, msg && len ? text : "", *sep, what);
    }
    return WK_OK;
}

int wk__entity_names_check(const wk_entity *e, char *msg, size_t len)
{
    if (!e)
        return wk__entity_fail(msg, len, "entity is NULL");
    int rc = check_part(e->kind, WK_KIND_MAX, "kind", "WK_KIND_MAX", msg, len);
    if (rc == WK_OK)
        rc = check_part(e->ns, WK_NAMESPACE_MAX, "namespace", "WK_NAMESPACE_MAX", msg, len);
    return rc;
}

bool wk__positive_finite(double v)
{
    return v > 0 && isfinite(v);
}

int wk__entity_check_ttl(const wk_entity *e, char *msg, size_t len)
{
    if (e->ttl_ms <= 0)
        return wk__entity_fail(msg, len, "ttl_ms must be > 0 (got %lld)", (long long)e->ttl_ms);
    return WK_OK;
}

const wk__kind *wk__kind_find(const char *name)
{
    /* Descriptors usually spell the kind with the WK_KIND_X macro, the
     * same string literal the kind's descriptor holds: try pointers
     * first, then compare the bytes. */
    for (const wk__kind *const *k = wk__kinds; *k; k++) {
        if ((*k)->name == name)
            return *k;
    }
    for (const wk__kind *const *k = wk__kinds; *k; k++) {
        if (strcmp((*k)->name, name) == 0)
            return *k;
    }
    return NULL;
}

int wk_entity_check_msg(const wk_entity *e, char *msg, size_t len)
{
    if (msg && len)
        msg[0] = '\0';
    int rc = wk__entity_names_check(e, msg, len);
    if (rc != WK_OK)
        return rc;
    if (e->flags & ~WK_ENTITY_FAIR)
        return wk__entity_fail(msg, len, "flags 0x%x has bits no WK_ENTITY_* flag defines",
                               e->flags);
    const wk__kind *kind = wk__kind_find(e->kind);
    if (kind && kind->check_params)
        return kind->check_params(e, msg, len);
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
    static const char *const names[] = {[WK_READ] = "READ", [WK_WRITE] = "WRITE"};
    return WK__ENUM_NAME(names, mode);
}
