/*
 * collection/hashed_cache.c — HashedCache: one hash key per name with the
 * fields `body` and `hash` (BLAKE3 of the body, 32 raw bytes), written
 * together with the expiry by one script.
 *
 * The read scripts tell a key of another type apart (reported as corrupted
 * rather than as a Redis error), and they never write.
 * Every shape check (fields present, hash length, body matching its hash)
 * happens here, on the client, in the parsers.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include <wakuwaku/hashed_cache.h>

#include "collection/cache_internal.h"
#include "collection/op.h"
#include "entity/kind.h"

/* The kind (entity/kind.h): wk_entity_check() wants ttl_ms > 0. */
WK__KIND(hashed_cache) = {WK_KIND_HASHED_CACHE, wk__entity_check_ttl};

/* ------------------------------------------------------------------------
 * Scripts
 *
 * Every read script returns nil when the key does not exist and the key's
 * type name (a string) when it is not a hash.
 * ---------------------------------------------------------------------- */

/* The common case costs one call: the read itself, with pcall, so a key
 * of another type (WRONGTYPE) is told apart afterwards, and EXISTS only
 * when the fields read are nil (a miss, or a hash missing its fields). */
#define WRONG_TYPE_IF_ERROR(v) \
    "if type(" v ") == 'table' and " v ".err then return redis.call('TYPE', KEYS[1])['ok'] end\n"
#define MISS_IF_NO_KEY "if redis.call('EXISTS', KEYS[1]) == 0 then return false end\n"

/* KEYS: key. Returns {body|nil, hash|nil}. */
static const wk_script get_script = {
    "hashed_cache.get",
    "local r = redis.pcall('HMGET', KEYS[1], 'body', 'hash')\n" WRONG_TYPE_IF_ERROR("r")
    "if not r[1] and not r[2] then\n  " MISS_IF_NO_KEY "end\n"
    "return r\n"};

/* KEYS: key. Returns {hash|nil, body field exists (1/0)}; the body stays. */
static const wk_script hash_script = {
    "hashed_cache.hash",
    "local h = redis.pcall('HGET', KEYS[1], 'hash')\n" WRONG_TYPE_IF_ERROR("h")
    "if not h then\n  " MISS_IF_NO_KEY "end\n"
    "return {h, redis.call('HEXISTS', KEYS[1], 'body')}\n"};

/* KEYS: key. ARGV: known hash ("" for none). Returns {0, body field exists}
 * when the stored hash equals the known one — the body is not sent — else
 * {1, hash|nil, body|nil}. */
static const wk_script get_if_changed_script = {
    "hashed_cache.get_if_changed",
    "local h = redis.pcall('HGET', KEYS[1], 'hash')\n" WRONG_TYPE_IF_ERROR("h")
    "if h and ARGV[1] ~= '' and h == ARGV[1] then\n"
    "  return {0, redis.call('HEXISTS', KEYS[1], 'body')}\n"
    "end\n"
    "if not h then\n  " MISS_IF_NO_KEY "end\n"
    "return {1, h, redis.call('HGET', KEYS[1], 'body')}\n"};

/* KEYS: key. ARGV: body, hash, ttl ms. Replaces whatever the key held
 * (any type, stray fields) so the item is exactly {body, hash} + expiry. */
static const wk_script put_script = {
    "hashed_cache.put",
    "redis.call('UNLINK', KEYS[1])\n"
    "redis.call('HSET', KEYS[1], 'body', ARGV[1], 'hash', ARGV[2])\n"
    "redis.call('PEXPIRE', KEYS[1], ARGV[3])\n"
    "return 1\n"};

/* ------------------------------------------------------------------------
 * Parsing helpers
 * ---------------------------------------------------------------------- */

_Static_assert(WK_HASH_LEN == WK_BLAKE3_OUT_LEN, "the stored hash is a BLAKE3 hash");

/* Fail with WK_ECORRUPT naming the query's key and what is wrong. */
static int corrupt(const wk_query *q, wk_diag *d, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int corrupt(const wk_query *q, wk_diag *d, const char *fmt, ...)
{
    char key[WK__KEY_TEXT_MAX], what[80];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    wk__query_key(q, key, sizeof(key));
    return wk_diag_fail(d, WK_ECORRUPT, "HashedCache item \"%s\" is corrupted: %s", key, what);
}

/* The reply is nil (no key) or a type name (wrong type)? Then it decides
 * the outcome: returns 1 with *rc set, or 0 to go on with an array. */
static int common_shapes(const wk_query *q, const wk_reply *r, wk_diag *d, int *rc)
{
    switch (wk_reply_get_type(r)) {
    case WK_REPLY_NIL:
        *rc = WK_OK;
        return 1;
    case WK_REPLY_STRING: {
        size_t len;
        const char *type = wk_reply_str(r, &len);
        char key[WK__KEY_TEXT_MAX];
        wk__query_key(q, key, sizeof(key));
        *rc = wk_diag_fail(d, WK_ECORRUPT,
                           "key \"%s\" holds a Redis %.*s, not a HashedCache hash", key,
                           (int)(len > 32 ? 32 : len), type);
        return 1;
    }
    case WK_REPLY_ARRAY:
        return 0;
    default:
        *rc = wk_diag_fail(d, WK_EPROTO, "unexpected reply type from the script");
        return 1;
    }
}

/* Check a stored hash element: present and 32 bytes. */
static int check_hash(const wk_query *q, const wk_reply *h, wk_diag *d, uint8_t out[WK_HASH_LEN])
{
    if (wk_reply_get_type(h) == WK_REPLY_NIL)
        return corrupt(q, d, "the hash field is missing");
    size_t len;
    const char *s = wk_reply_str(h, &len);
    if (wk_reply_get_type(h) != WK_REPLY_STRING)
        return wk_diag_fail(d, WK_EPROTO, "unexpected reply type for the hash field");
    if (len != WK_HASH_LEN)
        return corrupt(q, d, "the hash field has %zu bytes, not %d", len, WK_HASH_LEN);
    memcpy(out, s, WK_HASH_LEN);
    return WK_OK;
}

/* Check a body element against out->hash and copy it into out (found,
 * changed). */
static int take_body(const wk_query *q, const wk_reply *b, wk_diag *d, wk_body *out)
{
    if (wk_reply_get_type(b) == WK_REPLY_NIL)
        return corrupt(q, d, "the body field is missing");
    if (wk_reply_get_type(b) != WK_REPLY_STRING)
        return wk_diag_fail(d, WK_EPROTO, "unexpected reply type for the body field");
    size_t len;
    const char *s = wk_reply_str(b, &len);
    uint8_t actual[WK_HASH_LEN];
    wk_blake3(s, len, actual);
    if (memcmp(actual, out->hash, WK_HASH_LEN) != 0)
        return corrupt(q, d, "the body does not match its BLAKE3 hash");
    if (wk__body_found(out, s, len) != WK_OK)
        return wk_diag_fail(d, WK_ENOMEM, "no memory for a body of %zu bytes", len);
    return WK_OK;
}

/* Check a "body field exists" integer element. */
static int check_body_exists(const wk_query *q, const wk_reply *e, wk_diag *d)
{
    if (wk_reply_get_type(e) != WK_REPLY_INTEGER)
        return wk_diag_fail(d, WK_EPROTO, "unexpected reply type for the body check");
    if (wk_reply_integer(e) != 1)
        return corrupt(q, d, "the body field is missing");
    return WK_OK;
}

/* ------------------------------------------------------------------------
 * Parsers
 * ---------------------------------------------------------------------- */

/* get: {body|nil, hash|nil}; hash (with_body false): {hash|nil, body
 * exists}. */
static int parse_found(const wk_query *q, const wk_reply *r, wk_diag *d, bool with_body)
{
    wk_body *out = q->out;
    int rc;
    if (common_shapes(q, r, d, &rc))
        return rc;
    if (wk_reply_count(r) != 2)
        return wk_diag_fail(d, WK_EPROTO, "expected 2 elements from the script");
    const wk_reply *b = wk_reply_at(r, with_body ? 0 : 1), *h = wk_reply_at(r, with_body ? 1 : 0);
    if ((rc = check_hash(q, h, d, out->hash)))
        return rc;
    if (with_body)
        return take_body(q, b, d, out);
    if ((rc = check_body_exists(q, b, d)))
        return rc;
    out->found = true;
    out->change = WK_ITEM_CHANGED;
    return WK_OK;
}

static int parse_get(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    return parse_found(q, r, d, true);
}

static int parse_hash(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    return parse_found(q, r, d, false);
}

/* {0, body exists} or {1, hash|nil, body|nil} */
static int parse_get_if_changed(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    wk_body *out = q->out;
    int rc;
    if (common_shapes(q, r, d, &rc))
        return rc;
    const wk_reply *tag = wk_reply_at(r, 0);
    if (wk_reply_get_type(tag) != WK_REPLY_INTEGER)
        return wk_diag_fail(d, WK_EPROTO, "expected a tag from the script");
    if (wk_reply_integer(tag) == 0 && wk_reply_count(r) == 2) {
        if ((rc = check_body_exists(q, wk_reply_at(r, 1), d)))
            return rc;
        out->found = true;
        out->change = WK_ITEM_UNCHANGED;
        return WK_OK;
    }
    if (wk_reply_integer(tag) != 1 || wk_reply_count(r) != 3)
        return wk_diag_fail(d, WK_EPROTO, "unexpected reply shape from the script");
    if ((rc = check_hash(q, wk_reply_at(r, 1), d, out->hash)))
        return rc;
    return take_body(q, wk_reply_at(r, 2), d, out);
}

/* ------------------------------------------------------------------------
 * Queries
 * ---------------------------------------------------------------------- */

/* The reads: retry-safe scripts on the key; the parser writes the
 * caller's wk_body. */
#define READ_OP(op, s, parser)                                                                     \
    {WK__OP_OF(hashed_cache, op), .kind = WK_KIND_HASHED_CACHE,                                    \
     .flags = WK_QUERY_RETRY_SAFE, .script = &(s), .parse = parser, .out_name = "out"}
static const wk__op get_op = READ_OP(get, get_script, parse_get),
                    hash_op = READ_OP(hash, hash_script, parse_hash),
                    get_if_changed_op =
                        READ_OP(get_if_changed, get_if_changed_script, parse_get_if_changed);

/* Reset *out (it is reused: its body is freed) and run a read. */
static int run_read(wk_processor *p, const wk__op *op, const wk_entity *e, wk_name name,
                    wk_body *out)
{
    if (out)
        wk_body_free(out);
    return wk__op_run(p, op, e, name, NULL, NULL, 0, out);
}

int wk_hashed_cache_get(wk_processor *p, const wk_entity *hcache, wk_name name, wk_body *out)
{
    return run_read(p, &get_op, hcache, name, out);
}

int wk_hashed_cache_hash(wk_processor *p, const wk_entity *hcache, wk_name name, wk_body *out)
{
    return run_read(p, &hash_op, hcache, name, out);
}

int wk_hashed_cache_get_if_changed(wk_processor *p, const wk_entity *hcache, wk_name name,
                                   const uint8_t known[WK_HASH_LEN], wk_body *out)
{
    /* `known` may point into *out, which is reset below. */
    uint8_t held[WK_HASH_LEN];
    if (known)
        memcpy(held, known, WK_HASH_LEN);
    if (out)
        wk_body_free(out);
    wk__call c;
    int rc = wk__op_begin(&c, p, &get_if_changed_op, hcache, name, out);
    if (rc)
        return rc;
    /* Unchanged leaves this as the output hash; changed overwrites it. */
    if (known)
        memcpy(out->hash, held, WK_HASH_LEN);
    const char *arg = known ? (const char *)held : "";
    size_t arg_len = known ? WK_HASH_LEN : 0;
    return wk__op_send(&c, &arg, &arg_len, 1);
}

/* Not retry-safe, like cache.put: a blind re-send could undo another
 * client's newer put or remove. */
static const wk__op put_op = {WK__OP_OF(hashed_cache, put), .kind = WK_KIND_HASHED_CACHE,
                               .script = &put_script};

int wk_hashed_cache_put(wk_processor *p, const wk_entity *hcache, wk_name name, const void *body,
                        size_t len, uint8_t hash[WK_HASH_LEN])
{
    wk__call c;
    int rc = wk__put_begin(&c, p, &put_op, hcache, name, body, len);
    if (rc)
        return rc;
    uint8_t digest[WK_HASH_LEN];
    wk_blake3(len ? body : NULL, len, digest);
    char ttl[24];
    const char *args[3] = {len ? (const char *)body : "", (const char *)digest, ttl};
    size_t lens[3] = {len, WK_HASH_LEN, wk__fmt_i64(ttl, hcache->ttl_ms)};
    if (hash)
        memcpy(hash, digest, WK_HASH_LEN);
    return wk__op_send(&c, args, lens, 3);
}

/* `removed` may be NULL: then any integer reply is success. */
static const wk__op remove_op = {WK__OP_OF(hashed_cache, remove), .kind = WK_KIND_HASHED_CACHE,
                                  .command = "UNLINK",
                                 .parse = wk__parse_removed, .out_size = sizeof(bool)};

int wk_hashed_cache_remove(wk_processor *p, const wk_entity *hcache, wk_name name,
                           bool *removed)
{
    return wk__op_run(p, &remove_op, hcache, name, NULL, NULL, 0, removed);
}

/* ------------------------------------------------------------------------
 * Typed bodies: the byte queries with the codec run around them
 * ---------------------------------------------------------------------- */

/* Shared start of the typed reads: the byte read's checks (into `body`),
 * then the codec, the outputs and an immediate processor. */
static int begin_typed_read(wk__call *c, wk_processor *p, const wk__op *op, const wk_entity *e,
                            wk_name name, const wk_codec *codec, const void *value,
                            const void *outcome, wk_body *body)
{
    int rc = wk__op_begin(c, p, op, e, name, body);
    if (rc)
        return rc;
    if (!wk__codec_ok(codec) || !value || !outcome)
        return wk__op_fail(c, WK_EINVAL,
                           "a codec with encode and decode, value and an outcome are required");
    return wk__no_deferred(p, op->name);
}

int wk_hashed_cache_get_typed(wk_processor *p, const wk_entity *hcache, wk_name name,
                              const wk_codec *codec, void *value, uint8_t hash[WK_HASH_LEN],
                              bool *found)
{
    if (found)
        *found = false;
    wk_body body = WK_BODY_INIT;
    wk__call c;
    int rc = begin_typed_read(&c, p, &get_op, hcache, name, codec, value, found, &body);
    if (rc)
        return rc;
    rc = wk__op_send(&c, NULL, NULL, 0);
    if (rc == WK_OK && body.found) {
        rc = wk__codec_decode(p, get_op.name, codec, c.key[0], c.key_len[0], body.data, body.len,
                              value);
        if (rc == WK_OK) {
            if (hash)
                memcpy(hash, body.hash, WK_HASH_LEN);
            *found = true;
        }
    }
    wk_body_free(&body);
    return rc;
}

int wk_hashed_cache_get_if_changed_typed(wk_processor *p, const wk_entity *hcache, wk_name name,
                                         const uint8_t known[WK_HASH_LEN], const wk_codec *codec,
                                         void *value, uint8_t hash[WK_HASH_LEN],
                                         wk_item_change *outcome)
{
    if (outcome)
        *outcome = WK_ITEM_MISSING;
    /* `known` may point at `hash`, written below. */
    uint8_t held[WK_HASH_LEN];
    if (known)
        memcpy(held, known, WK_HASH_LEN);
    wk_body body = WK_BODY_INIT;
    wk__call c;
    int rc = begin_typed_read(&c, p, &get_if_changed_op, hcache, name, codec, value, outcome,
                              &body);
    if (rc)
        return rc;
    if (known)
        memcpy(body.hash, held, WK_HASH_LEN);
    const char *arg = known ? (const char *)held : "";
    size_t arg_len = known ? WK_HASH_LEN : 0;
    rc = wk__op_send(&c, &arg, &arg_len, 1);
    if (rc == WK_OK && body.change == WK_ITEM_CHANGED)
        rc = wk__codec_decode(p, get_if_changed_op.name, codec, c.key[0], c.key_len[0], body.data,
                              body.len, value);
    if (rc == WK_OK) {
        *outcome = body.change;
        if (hash && body.change != WK_ITEM_MISSING)
            memcpy(hash, body.hash, WK_HASH_LEN);
    }
    wk_body_free(&body);
    return rc;
}

int wk_hashed_cache_put_typed(wk_processor *p, const wk_entity *hcache, wk_name name,
                              const wk_codec *codec, const void *value, uint8_t hash[WK_HASH_LEN])
{
    wk__call c;
    uint8_t *bytes;
    size_t len;
    int rc = wk__typed_put_begin(&c, p, &put_op, hcache, name, codec, value, &bytes, &len);
    if (rc)
        return rc;
    rc = wk_hashed_cache_put(p, hcache, name, bytes, len, hash);
    wk__typed_free(codec, bytes);
    return rc;
}
