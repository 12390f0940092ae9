/*
 * collection/common.c — argument checks, key building and shared parsers.
 */
#include <stdio.h>

#include "collection/common.h"
#include "collection/lock_scripts.h"

/* "Kind:ns" of an entity that passed the naming rules, printable. */
static void entity_text(char *dst, size_t cap, const wk_entity *e)
{
    char raw[WK_KIND_MAX + 1 + WK_NAMESPACE_MAX + 1];
    int n = snprintf(raw, sizeof(raw), "%s:%s", e->kind, e->ns);
    wk__render_key(dst, cap, raw, n < 0 ? 0 : (size_t)n);
}

/* Why wk__prepare() refuses its arguments: the message on the handle. */
static int refuse(wk_processor *p, const char *op, const wk_entity *e, const char *kind,
                  const wk_name *name)
{
    char why[WK_ENTITY_MSG_MAX], text[2 * (WK_KIND_MAX + WK_NAMESPACE_MAX)];
    if (wk__entity_names_check(e, why, sizeof(why)) != WK_OK)
        return wk__processor_fail(p, WK_EINVAL, "%s: invalid %s entity: %s", op, kind, why);
    entity_text(text, sizeof(text), e);
    if (e->kind != kind && strcmp(e->kind, kind) != 0)
        return wk__processor_fail(p, WK_EINVAL, "%s: entity %s is not a %s", op, text, kind);
    if (wk_entity_check_msg(e, why, sizeof(why)) != WK_OK)
        return wk__processor_fail(p, WK_EINVAL, "%s: invalid entity %s: %s", op, text, why);
    if (wk__name_check(name, why, sizeof(why)) != WK_OK)
        return wk__processor_fail(p, WK_EINVAL, "%s: invalid name for %s: %s", op, text, why);
    return wk__processor_fail(p, WK_EINVAL, "%s: cannot build the key of a name of %s", op, text);
}

int wk__prepare(wk_processor *p, const char *op, const wk_entity *e, const char *kind,
                const wk_name *name, const char *suffix, char *key, size_t *key_len)
{
    if (!p || !p->process)
        return WK_EINVAL;
    /* The common case in one pass: the kind (pointer-equal literals skip
     * the strcmp), the descriptor's rules (names included, so the key
     * builder does not scan them again), the key. Only a refusal spends
     * time on saying why. */
    if (!e || !e->kind || (e->kind != kind && strcmp(e->kind, kind) != 0) ||
        wk_entity_check(e) != WK_OK || !name ||
        wk__key_build_checked(key, WK_KEY_MAX, key_len, e, name, suffix) != WK_OK)
        return refuse(p, op, e, kind, name);
    return WK_OK;
}

size_t wk__fmt_i64(char *buf, int64_t v)
{
    /* Written from the end, two digits a step (every lease query formats
     * its TTL). */
    static const char pairs[] = "00010203040506070809101112131415161718192021222324"
                                "25262728293031323334353637383940414243444546474849"
                                "50515253545556575859606162636465666768697071727374"
                                "75767778798081828384858687888990919293949596979899";
    char tmp[24], *p = tmp + sizeof(tmp);
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    for (; u >= 10; u /= 100) {
        const char *d = pairs + 2 * (u % 100);
        *--p = d[1];
        *--p = d[0];
        if (u < 100) {
            u = 0;
            break;
        }
    }
    if (u || p == tmp + sizeof(tmp))
        *--p = (char)('0' + u);
    if (v < 0)
        *--p = '-';
    size_t n = 0;
    while (p < tmp + sizeof(tmp))
        buf[n++] = *p++;
    buf[n] = '\0';
    return n;
}

int64_t wk__waiting_of(const wk_reply *r, size_t at)
{
    const wk_reply *n = wk_reply_at(r, at);
    if (wk_reply_count(r) <= at || wk_reply_get_type(n) != WK_REPLY_INTEGER)
        return -1;
    return wk_reply_integer(n) < 0 ? -1 : wk_reply_integer(n);
}

int wk__parse_bool_int(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    if (wk_reply_get_type(r) != WK_REPLY_INTEGER)
        return wk_diag_fail(d, WK_EPROTO, "expected an integer reply");
    bool *held = q->out;
    *held = wk_reply_integer(r) != 0;
    return wk__lease_acknowledged(d, held); /* OK unless a lease query's WAIT fell short */
}

int wk__parse_removed(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    if (wk_reply_get_type(r) != WK_REPLY_INTEGER)
        return wk_diag_fail(d, WK_EPROTO, "expected an integer reply to %s", q->name);
    if (q->out)
        *(bool *)q->out = wk_reply_integer(r) != 0;
    return WK_OK;
}

int wk__parse_i64(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    if (wk_reply_get_type(r) != WK_REPLY_INTEGER)
        return wk_diag_fail(d, WK_EPROTO, "expected an integer reply to %s", q->name);
    if (q->out)
        *(int64_t *)q->out = wk_reply_integer(r);
    return WK_OK;
}

bool wk__parse_decimal(const char *s, size_t len, uint64_t max, uint64_t *out)
{
    if (!s || len == 0 || len > 20 || (len > 1 && s[0] == '0'))
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        uint64_t d = (uint64_t)(s[i] - '0');
        if (v > (max - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

/* ------------------------------------------------------------------------
 * Acknowledged leases (wk_db_options.lease_replicas)
 * ---------------------------------------------------------------------- */

int wk__lease_settle(wk_processor *p, const char *op, int rc, wk__lease_release_fn release,
                     const wk_entity *e, wk_name name, const wk_token *token)
{
    /* A deferred processor returns its queuing status here, never this. */
    if (rc != WK_ENOTREPLICATED)
        return rc;
    char why[WK_ENTITY_MSG_MAX * 2];
    snprintf(why, sizeof(why), "%s", wk_processor_errmsg(p));
    /* Not held as asked: give it back, with its token (touches nothing
     * if the lease is someone else's by now). */
    bool released = false;
    int rrc = release(p, e, name, token, &released);
    if (rrc)
        return wk__processor_fail(p, WK_EUNKNOWN,
                                  "%s: %s, and its release failed (%s): it may still be held "
                                  "under the token until its TTL runs out",
                                  op, why, wk_err_name(rrc));
    return wk__processor_fail(p, WK_ENOTREPLICATED, "%s; released, not acquired", why);
}
