/*
 * core/key.c — building keys in the Rust crate's layout (see wakuwaku/key.h),
 * and the check of item names. Pinned byte for byte by tests/core/test_key.c,
 * which also shows that no two (kind, namespace, name) triples build the
 * same key.
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <wakuwaku/key.h>

#include "core/private.h"

/* Decimal digits of v, written backwards ending at `end`; returns the start. */
static char *u64_digits(char *end, uint64_t v)
{
    do {
        *--end = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    return end;
}

int wk__name_check(const wk_name *name, char *msg, size_t len)
{
    const char *why = NULL;
    char text[80];
    if (!name) {
        why = "name is NULL";
    } else {
        switch (name->type) {
        case WK_NAME_BYTES:
            if (!name->bytes && name->len == 0) {
                /* wk_name_str(NULL) — a missing name, not an empty one. */
                why = "name is NULL";
            } else if (!name->bytes) {
                snprintf(text, sizeof(text), "name bytes are NULL but its length is %zu",
                         name->len);
                why = text;
            } else if (name->len > WK_NAME_MAX) {
                snprintf(text, sizeof(text), "name is %zu bytes, more than WK_NAME_MAX (%d)",
                         name->len, WK_NAME_MAX);
                why = text;
            }
            break;
        case WK_NAME_U64:
        case WK_NAME_I64:
            break;
        default:
            snprintf(text, sizeof(text), "name has an unknown type (%d)", (int)name->type);
            why = text;
        }
    }
    if (!why)
        return WK_OK;
    if (msg && len)
        snprintf(msg, len, "%s", why);
    return WK_EINVAL;
}

/* Writes the decimal or verbatim bytes of a name; returns its length or -1.
 * (No snprintf: keys are built on every query.) */
static long name_bytes(const wk_name *name, char digits[24], const char **bytes)
{
    switch (name->type) {
    case WK_NAME_BYTES:
        /* NULL bytes: missing (len 0) or inconsistent; see wk__name_check. */
        if (!name->bytes || name->len > WK_NAME_MAX)
            return -1;
        *bytes = name->bytes;
        return (long)name->len;
    case WK_NAME_U64:
        *bytes = u64_digits(digits + 24, name->u64);
        return (long)(digits + 24 - *bytes);
    case WK_NAME_I64: {
        int64_t v = name->i64;
        char *p = u64_digits(digits + 24, v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v);
        if (v < 0)
            *--p = '-';
        *bytes = p;
        return (long)(digits + 24 - p);
    }
    }
    return -1;
}

static char *put(char *p, const void *src, size_t n)
{
    memcpy(p, src, n);
    return p + n;
}

int wk_key_build(char *buf, size_t cap, size_t *len, const wk_entity *entity, const wk_name *name,
                 const char *suffix)
{
    if (!buf || !len || !entity || !name)
        return WK_EINVAL;
    /* Kind and namespace free of separators: see wakuwaku/entity.h. */
    if (wk__entity_names_check(entity, NULL, 0) != WK_OK)
        return WK_EINVAL;
    return wk__key_build_checked(buf, cap, len, entity, name, suffix);
}

int wk__key_build_checked(char *buf, size_t cap, size_t *len, const wk_entity *entity,
                          const wk_name *name, const char *suffix)
{
    const char *kind = entity->kind, *ns = entity->ns;
    size_t kind_len = strlen(kind), ns_len = strlen(ns);
    size_t suffix_len = suffix ? strnlen(suffix, WK_KEY_SUFFIX_MAX + 1) : 0;
    /* A '}' in a suffix would let two names meet: "x}:a" + ":b" and "x" +
     * ":a}:b" both end in "x}:a}:b". */
    if (suffix_len > WK_KEY_SUFFIX_MAX || (suffix && memchr(suffix, '}', suffix_len)))
        return WK_EINVAL;
    char digits[24];
    const char *nb = NULL;
    long nl = name_bytes(name, digits, &nb);
    if (nl < 0)
        return WK_EINVAL;

    size_t total = sizeof(WK_KEY_PREFIX) - 1 + kind_len + 1 + ns_len + 1 + (size_t)nl +
                   (suffix ? 2 + suffix_len : 0);
    if (total + 1 > cap)
        return WK_EINVAL;
    char *p = put(buf, WK_KEY_PREFIX, sizeof(WK_KEY_PREFIX) - 1);
    p = put(p, kind, kind_len);
    *p++ = ':';
    if (suffix)
        *p++ = '{';
    p = put(p, ns, ns_len);
    *p++ = ':';
    p = put(p, nb, (size_t)nl);
    if (suffix) {
        *p++ = '}';
        p = put(p, suffix, suffix_len);
    }
    *p = '\0';
    *len = total;
    return WK_OK;
}

/* ------------------------------------------------------------------------
 * Cluster slots (the Redis Cluster spec): wake companions and routing
 * ---------------------------------------------------------------------- */

uint16_t wk__crc16(const void *data, size_t len)
{
    const unsigned char *p = data;
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)(p[i] << 8);
        for (int b = 0; b < 8; b++)
            crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

/* Where the hash tag of a key is, if it has one (Redis Cluster spec). */
bool wk__hash_tag(const char *key, size_t len, size_t *start, size_t *end)
{
    const char *open = memchr(key, '{', len);
    if (!open)
        return false;
    size_t s = (size_t)(open - key) + 1;
    const char *close = memchr(key + s, '}', len - s);
    if (!close || close == key + s)
        return false; /* no '}', or "{}": the whole key is hashed */
    *start = s;
    *end = (size_t)(close - key);
    return true;
}

unsigned wk__key_slot(const void *key, size_t len)
{
    size_t s, e;
    if (wk__hash_tag(key, len, &s, &e))
        return wk__crc16((const char *)key + s, e - s) & 16383u;
    return wk__crc16(key, len) & 16383u;
}
