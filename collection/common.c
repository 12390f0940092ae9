/*
 * collection/common.c — argument checks, key building and shared parsers.
 */
#include "collection/common.h"

int wk__prepare(wk_processor *p, const char *op, const wk_entity *e, const char *kind,
                const wk_name *name, const char *suffix, char *key, size_t *key_len)
{
    if (!p || !p->process)
        return WK_EINVAL;
    /* Kind first (pointer-equal literals skip the strcmp), then the
     * descriptor's own rules. */
    if (!e || !e->kind || (e->kind != kind && strcmp(e->kind, kind) != 0)) {
        if (e && e->kind && e->ns)
            return wk__processor_fail(p, WK_EINVAL, "%s: entity %s:%s is not a %s", op, e->kind,
                                      e->ns, kind);
        return wk__processor_fail(p, WK_EINVAL, "%s: invalid entity descriptor", op);
    }
    if (wk_entity_check(e) != WK_OK)
        return wk__processor_fail(p, WK_EINVAL, "%s: invalid %s entity descriptor%s%s", op, kind,
                                  e->ns ? " for namespace " : "", e->ns ? e->ns : "");
    if (wk_key_build(key, WK_KEY_MAX, key_len, e, name, suffix) != WK_OK)
        return wk__processor_fail(p, WK_EINVAL,
                                  "%s: invalid name for %s:%s (NULL, or longer than %d bytes)", op,
                                  e->kind, e->ns, WK_NAME_MAX);
    return WK_OK;
}

size_t wk__fmt_i64(char *buf, int64_t v)
{
    char tmp[24];
    size_t n = 0, o = 0;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        buf[o++] = '-';
    while (n)
        buf[o++] = tmp[--n];
    buf[o] = '\0';
    return o;
}

int wk__parse_bool_int(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    if (wk_reply_get_type(r) != WK_REPLY_INTEGER)
        return wk_diag_fail(d, WK_EPROTO, "expected an integer reply");
    *(bool *)q->out = wk_reply_integer(r) != 0;
    return WK_OK;
}

int wk__parse_set_nx(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    switch (wk_reply_get_type(r)) {
    case WK_REPLY_STATUS:
        *(bool *)q->out = true;
        return WK_OK;
    case WK_REPLY_NIL:
        *(bool *)q->out = false;
        return WK_OK;
    default:
        return wk_diag_fail(d, WK_EPROTO, "expected OK or nil");
    }
}
