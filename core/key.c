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

#include "core/core_internal.h"

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

/* CRC16/XMODEM of each byte value (poly 0x1021, init 0), one byte at a
 * time instead of one bit: every query of a cluster handle hashes its key
 * (a tenth of a batch's client time bit by bit). */
static const uint16_t crc16_table[256] = {
    0x0000, 0x1021, 0x2042, 0x3063, 0x4084, 0x50a5, 0x60c6, 0x70e7, 0x8108, 0x9129, 0xa14a, 0xb16b,
    0xc18c, 0xd1ad, 0xe1ce, 0xf1ef, 0x1231, 0x0210, 0x3273, 0x2252, 0x52b5, 0x4294, 0x72f7, 0x62d6,
    0x9339, 0x8318, 0xb37b, 0xa35a, 0xd3bd, 0xc39c, 0xf3ff, 0xe3de, 0x2462, 0x3443, 0x0420, 0x1401,
    0x64e6, 0x74c7, 0x44a4, 0x5485, 0xa56a, 0xb54b, 0x8528, 0x9509, 0xe5ee, 0xf5cf, 0xc5ac, 0xd58d,
    0x3653, 0x2672, 0x1611, 0x0630, 0x76d7, 0x66f6, 0x5695, 0x46b4, 0xb75b, 0xa77a, 0x9719, 0x8738,
    0xf7df, 0xe7fe, 0xd79d, 0xc7bc, 0x48c4, 0x58e5, 0x6886, 0x78a7, 0x0840, 0x1861, 0x2802, 0x3823,
    0xc9cc, 0xd9ed, 0xe98e, 0xf9af, 0x8948, 0x9969, 0xa90a, 0xb92b, 0x5af5, 0x4ad4, 0x7ab7, 0x6a96,
    0x1a71, 0x0a50, 0x3a33, 0x2a12, 0xdbfd, 0xcbdc, 0xfbbf, 0xeb9e, 0x9b79, 0x8b58, 0xbb3b, 0xab1a,
    0x6ca6, 0x7c87, 0x4ce4, 0x5cc5, 0x2c22, 0x3c03, 0x0c60, 0x1c41, 0xedae, 0xfd8f, 0xcdec, 0xddcd,
    0xad2a, 0xbd0b, 0x8d68, 0x9d49, 0x7e97, 0x6eb6, 0x5ed5, 0x4ef4, 0x3e13, 0x2e32, 0x1e51, 0x0e70,
    0xff9f, 0xefbe, 0xdfdd, 0xcffc, 0xbf1b, 0xaf3a, 0x9f59, 0x8f78, 0x9188, 0x81a9, 0xb1ca, 0xa1eb,
    0xd10c, 0xc12d, 0xf14e, 0xe16f, 0x1080, 0x00a1, 0x30c2, 0x20e3, 0x5004, 0x4025, 0x7046, 0x6067,
    0x83b9, 0x9398, 0xa3fb, 0xb3da, 0xc33d, 0xd31c, 0xe37f, 0xf35e, 0x02b1, 0x1290, 0x22f3, 0x32d2,
    0x4235, 0x5214, 0x6277, 0x7256, 0xb5ea, 0xa5cb, 0x95a8, 0x8589, 0xf56e, 0xe54f, 0xd52c, 0xc50d,
    0x34e2, 0x24c3, 0x14a0, 0x0481, 0x7466, 0x6447, 0x5424, 0x4405, 0xa7db, 0xb7fa, 0x8799, 0x97b8,
    0xe75f, 0xf77e, 0xc71d, 0xd73c, 0x26d3, 0x36f2, 0x0691, 0x16b0, 0x6657, 0x7676, 0x4615, 0x5634,
    0xd94c, 0xc96d, 0xf90e, 0xe92f, 0x99c8, 0x89e9, 0xb98a, 0xa9ab, 0x5844, 0x4865, 0x7806, 0x6827,
    0x18c0, 0x08e1, 0x3882, 0x28a3, 0xcb7d, 0xdb5c, 0xeb3f, 0xfb1e, 0x8bf9, 0x9bd8, 0xabbb, 0xbb9a,
    0x4a75, 0x5a54, 0x6a37, 0x7a16, 0x0af1, 0x1ad0, 0x2ab3, 0x3a92, 0xfd2e, 0xed0f, 0xdd6c, 0xcd4d,
    0xbdaa, 0xad8b, 0x9de8, 0x8dc9, 0x7c26, 0x6c07, 0x5c64, 0x4c45, 0x3ca2, 0x2c83, 0x1ce0, 0x0cc1,
    0xef1f, 0xff3e, 0xcf5d, 0xdf7c, 0xaf9b, 0xbfba, 0x8fd9, 0x9ff8, 0x6e17, 0x7e36, 0x4e55, 0x5e74,
    0x2e93, 0x3eb2, 0x0ed1, 0x1ef0,
};

uint16_t wk__crc16(const void *data, size_t len)
{
    const unsigned char *p = data;
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++)
        crc = (uint16_t)((crc << 8) ^ crc16_table[((crc >> 8) ^ p[i]) & 0xff]);
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

void wk__key_hashed(const char *key, size_t len, const char **bytes, size_t *n)
{
    size_t s, e;
    if (!wk__hash_tag(key, len, &s, &e))
        s = 0, e = len;
    *bytes = key + s;
    *n = e - s;
}

unsigned wk__key_slot(const void *key, size_t len)
{
    const char *bytes;
    size_t n;
    wk__key_hashed(key, len, &bytes, &n);
    return wk__crc16(bytes, n) & 16383u;
}

/* ------------------------------------------------------------------------
 * Companion keys
 *
 * Layout:   "{" X "}" M R
 *   M  the role's marker: ":q" (wake queue), ":e" (registrations), ":w:"
 *      (a waiter's list, followed by its 16-byte id);
 *   X  a hash tag with the anchor key A's slot, holding no '}':
 *        - A's own tag, when A has one (it holds no '}' by definition);
 *        - A itself, when A has no '}' (then no tag: its slot is the CRC
 *          of all of A, which is the CRC of the tag X = A);
 *        - else the short tag of wk__key_tag_for_slot(slot of A);
 *   R  "" when X is A itself, else A.
 * (The case "A has no '}'" is the layout of earlier versions, so the wake
 * keys of most Lock names did not change.)
 *
 * Why it is injective, and disjoint from item keys:
 *   1. Every item key starts with WK_KEY_PREFIX ('@'); a companion key
 *      starts with '{'. No companion key is an item key.
 *   2. X holds no '}', so X is the bytes from offset 1 to the first '}'.
 *      The markers are prefix-free (":q", ":e", ":w:" differ in their
 *      second byte), so M is read next; a list's id is its last 16 bytes,
 *      so R is what remains. R is "" exactly when X = A (in the other
 *      cases R = A, never empty): A is X or R. Hence the key gives back
 *      (A, role, id).
 *   3. A gives back (kind, namespace, name): A = PREFIX Kind ":" rest;
 *      Kind and namespace hold no ':', '{', '}'. A single-key rest is
 *      ns ":" name (it does not start with '{'), a multi-key rest is
 *      "{" ns ":" name "}" suffix where the suffix holds no '}' (the
 *      last '}' ends the name) and each kind has one anchor suffix.
 * So no two (kind, namespace, name, role[, id]) share a key, whatever
 * bytes the names hold; and every companion of an item is in its slot
 * (the tag is the first "{…}" of the key, X is never empty).
 * ---------------------------------------------------------------------- */

static const char tag_alphabet[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

size_t wk__key_tag_for_slot(unsigned slot, char t[4])
{
    const size_t n = sizeof(tag_alphabet) - 1;
    for (size_t len = 1; len <= 3; len++) {
        size_t total = len == 1 ? n : len == 2 ? n * n : n * n * n;
        for (size_t i = 0; i < total; i++) {
            size_t v = i;
            for (size_t k = len; k-- > 0;) {
                t[k] = tag_alphabet[v % n];
                v /= n;
            }
            if ((wk__crc16(t, len) & 16383u) == slot)
                return len;
        }
    }
    return 0; /* unreachable: tests/collection/test_wake.c checks every slot */
}

static const struct {
    const char *text;
    size_t len;
} role_marker[] = {
    [WK__ROLE_WAKE_QUEUE] = {":q", 2},
    [WK__ROLE_WAKE_REGS] = {":e", 2},
    [WK__ROLE_WAKE_LIST] = {":w:", 3},
};

/* Where an item key's companions take their tag X and their rest R from
 * (rules 1 and 2 above). */
typedef struct companion_parts {
    const char *x, *r;
    size_t x_len, r_len;
    char short_tag[4];
} companion_parts;

static void companion_parts_of(companion_parts *c, const char *item_key, size_t item_len)
{
    size_t s, e;
    c->x = c->r = item_key;
    c->x_len = c->r_len = item_len;
    if (wk__hash_tag(item_key, item_len, &s, &e)) {
        c->x = item_key + s;
        c->x_len = e - s;
    } else if (!memchr(item_key, '}', item_len)) {
        c->r_len = 0;
    } else {
        c->x = c->short_tag;
        c->x_len = wk__key_tag_for_slot(wk__crc16(item_key, item_len) & 16383u, c->short_tag);
    }
}

static int put_companion(const companion_parts *c, char *buf, size_t cap, size_t *len,
                         wk__key_role role)
{
    if (!buf || !len || (unsigned)role > WK__ROLE_WAKE_LIST)
        return WK_EINVAL;
    size_t total = 2 + c->x_len + role_marker[role].len + c->r_len;
    if (total + 1 > cap)
        return WK_EINVAL;
    char *p = buf;
    *p++ = '{';
    p = put(p, c->x, c->x_len);
    *p++ = '}';
    p = put(p, role_marker[role].text, role_marker[role].len);
    p = put(p, c->r, c->r_len);
    *p = '\0';
    *len = total;
    return WK_OK;
}

int wk__companion_key(char *buf, size_t cap, size_t *len, const char *item_key, size_t item_len,
                      wk__key_role role)
{
    return wk__companion_keys(item_key, item_len, &role, 1, &buf, &cap, len);
}

int wk__companion_keys(const char *item_key, size_t item_len, const wk__key_role *roles, int n,
                       char *const *bufs, const size_t *caps, size_t *lens)
{
    if (!item_key || item_len == 0 || item_len > WK_KEY_MAX)
        return WK_EINVAL;
    companion_parts c;
    companion_parts_of(&c, item_key, item_len);
    for (int i = 0; i < n; i++) {
        int rc = put_companion(&c, bufs[i], caps[i], &lens[i], roles[i]);
        if (rc)
            return rc;
    }
    return WK_OK;
}
