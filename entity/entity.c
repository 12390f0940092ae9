/*
 * entity/entity.c — validation of entity descriptors and effect helpers.
 */
#include <math.h>
#include <string.h>

#include <wakuwaku/entity.h>

static bool text_ok(const char *s, size_t max)
{
    if (!s || !s[0])
        return false;
    return strnlen(s, max + 1) <= max;
}

static bool kind_is(const wk_entity *e, const char *kind)
{
    return e->kind == kind || strcmp(e->kind, kind) == 0;
}

int wk_entity_check(const wk_entity *e)
{
    if (!e || !text_ok(e->kind, WK_KIND_MAX) || !text_ok(e->ns, WK_NAMESPACE_MAX))
        return WK_EINVAL;
    if (kind_is(e, WK_KIND_LOCK) || kind_is(e, WK_KIND_RWLOCK) || kind_is(e, WK_KIND_CACHE) ||
        kind_is(e, WK_KIND_HASHED_CACHE))
        return e->ttl_ms > 0 ? WK_OK : WK_EINVAL;
    if (kind_is(e, WK_KIND_TOKEN_BUCKET)) {
        /* The negated comparisons also reject NaN. */
        if (!(e->capacity > 0) || !(e->rate > 0) || e->period_ms <= 0)
            return WK_EINVAL;
        if (!isfinite(e->capacity) || !isfinite(e->rate))
            return WK_EINVAL;
    }
    return WK_OK;
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
