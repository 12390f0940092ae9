/*
 * collection/cache.c — Cache: one string key per name. GET to read, SET PX
 * to replace with a fresh TTL, UNLINK to remove; typed wrappers that run a
 * codec around them. Also the body and message helpers HashedCache shares
 * (collection/cache_internal.h).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "collection/cache_internal.h"
#include "collection/op.h"
#include "entity/kind.h"

/* The kind (entity/kind.h): wk_entity_check() wants ttl_ms > 0. */
WK__KIND(cache) = {WK_KIND_CACHE, wk__entity_check_ttl};

/* ------------------------------------------------------------------------
 * Shared helpers
 * ---------------------------------------------------------------------- */

void wk_body_free(wk_body *body)
{
    if (!body)
        return;
    free(body->data);
    *body = (wk_body)WK_BODY_INIT;
}

int wk__bytes_copy(uint8_t **dst, size_t *dst_len, const void *src, size_t len)
{
    if (len == SIZE_MAX)
        return WK_ENOMEM;
    uint8_t *data = malloc(len + 1);
    if (!data)
        return WK_ENOMEM;
    if (len)
        memcpy(data, src, len);
    data[len] = '\0';
    *dst = data;
    *dst_len = len;
    return WK_OK;
}

int wk__body_found(wk_body *body, const void *src, size_t len)
{
    int rc = wk__bytes_copy(&body->data, &body->len, src, len);
    if (rc == WK_OK) {
        body->found = true;
        body->change = WK_ITEM_CHANGED;
    }
    return rc;
}

int wk__no_deferred(wk_processor *p, const char *op)
{
    if (wk_processor_is_deferred(p))
        return wk__processor_fail(p, WK_EINVAL,
                                  "%s needs its outcome at once: not through a batch or the event loop", op);
    return WK_OK;
}

int wk__parse_error_reply(const wk_query *q, const wk_reply *r, wk_diag *d, const char *expected)
{
    size_t len;
    const char *text = wk_reply_str(r, &len);
    char key[WK__KEY_TEXT_MAX];
    wk__query_key(q, key, sizeof(key));
    if (text && len >= 9 && memcmp(text, "WRONGTYPE", 9) == 0)
        return wk_diag_fail(d, WK_ECORRUPT, "key \"%s\" holds another Redis type, not %s", key,
                            expected);
    return wk_diag_fail(d, WK_EREDIS, "on \"%s\": Redis replied: %.*s", key,
                        (int)(len > 200 ? 200 : len), text ? text : "");
}

/* ------------------------------------------------------------------------
 * get
 * ---------------------------------------------------------------------- */

/* GET in both modes: q->out is the caller's wk_body (heap mode) or, with
 * `into`, its wk_buffer (buffer mode). */
static int parse_get_mode(const wk_query *q, const wk_reply *r, wk_diag *d, bool into)
{
    switch (wk_reply_get_type(r)) {
    case WK_REPLY_NIL:
        return WK_OK;
    case WK_REPLY_STRING:
        break;
    case WK_REPLY_ERROR:
        return wk__parse_error_reply(q, r, d, "a Cache string");
    default:
        return wk_diag_fail(d, WK_EPROTO, "expected a string or nil reply to GET");
    }
    size_t len;
    const char *s = wk_reply_str(r, &len);
    if (into) {
        wk_buffer *buf = q->out;
        buf->found = true;
        buf->len = len;
        if (len > buf->cap)
            return wk_diag_fail(d, WK_EINVAL, "the body of %zu bytes does not fit a buffer of %zu",
                                len, buf->cap);
        if (len)
            memcpy(buf->data, s, len);
        return WK_OK;
    }
    if (wk__body_found(q->out, s, len) != WK_OK)
        return wk_diag_fail(d, WK_ENOMEM, "no memory for a body of %zu bytes", len);
    return WK_OK;
}

static int parse_get(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    return parse_get_mode(q, r, d, false);
}

static int parse_get_into(const wk_query *q, const wk_reply *r, wk_diag *d)
{
    return parse_get_mode(q, r, d, true);
}

/* GET in heap mode (OUT: a wk_body) and in buffer mode (OUT: a wk_buffer). */
#define GET_OP(parser, out)                                                                        \
    {WK__OP_OF(cache, get), .kind = WK_KIND_CACHE,                                   \
     .flags = WK_QUERY_RETRY_SAFE | WK_QUERY_PARSE_ERRORS, .command = "GET", .parse = parser,      \
     .out_name = out}
static const wk__op get_op = GET_OP(parse_get, "out"), get_into_op = GET_OP(parse_get_into, "buf");

int wk_cache_get(wk_processor *p, const wk_entity *cache, wk_name name, wk_body *out)
{
    if (out)
        wk_body_free(out);
    return wk__op_run(p, &get_op, cache, name, NULL, NULL, 0, out);
}

int wk_cache_get_into(wk_processor *p, const wk_entity *cache, wk_name name, wk_buffer *buf)
{
    if (buf) {
        buf->len = 0;
        buf->found = false;
    }
    wk__call c;
    int rc = wk__op_begin(&c, p, &get_into_op, cache, name, buf);
    if (rc)
        return rc;
    if (!buf->data && buf->cap)
        return wk__op_fail(&c, WK_EINVAL, "buf is required, with data when cap > 0");
    return wk__op_send(&c, NULL, NULL, 0);
}

/* ------------------------------------------------------------------------
 * put, remove
 * ---------------------------------------------------------------------- */

/* Not retry-safe: a re-send after a lost reply could overwrite what
 * another client wrote in between (docs/GUARANTEES.md, "Outcomes"). */
static const wk__op put_op = {
    WK__OP_OF(cache, put), .kind = WK_KIND_CACHE, .command = "SET"};

/* SET key body PX ttl, after wk__op_begin(). */
static int put_send(const wk__call *c, const void *body, size_t len)
{
    char ttl[24];
    const char *args[3] = {len ? (const char *)body : "", "PX", ttl};
    size_t lens[3] = {len, 2, wk__fmt_i64(ttl, c->e->ttl_ms)};
    return wk__op_send(c, args, lens, 3);
}

int wk__put_begin(wk__call *c, wk_processor *p, const wk__op *op, const wk_entity *e, wk_name name,
                  const void *body, size_t len)
{
    int rc = wk__op_begin(c, p, op, e, name, NULL);
    if (rc)
        return rc;
    if (!body && len)
        return wk__op_fail(c, WK_EINVAL, "body is NULL but len is %zu", len);
    if (len > WK_BODY_MAX)
        return wk__op_fail(c, WK_EINVAL, "a body of %zu bytes exceeds WK_BODY_MAX (%zu)", len,
                           WK_BODY_MAX);
    return WK_OK;
}

int wk_cache_put(wk_processor *p, const wk_entity *cache, wk_name name, const void *body,
                 size_t len)
{
    wk__call c;
    int rc = wk__put_begin(&c, p, &put_op, cache, name, body, len);
    return rc ? rc : put_send(&c, body, len);
}

/* `removed` may be NULL: then any integer reply is success. */
static const wk__op remove_op = {WK__OP_OF(cache, remove), .kind = WK_KIND_CACHE,
                                 .command = "UNLINK", .parse = wk__parse_removed,
                                 .out_size = sizeof(bool)};

int wk_cache_remove(wk_processor *p, const wk_entity *cache, wk_name name, bool *removed)
{
    return wk__op_run(p, &remove_op, cache, name, NULL, NULL, 0, removed);
}

/* ------------------------------------------------------------------------
 * Typed bodies
 * ---------------------------------------------------------------------- */

bool wk__codec_ok(const wk_codec *codec)
{
    return codec && codec->encode && codec->decode;
}

/*
 * Where wk_codec_fail() writes: a buffer of the typed call running a codec
 * callback on this thread, NULL otherwise. Set around each callback and
 * restored after it, so a callback that itself runs typed calls (on
 * another handle, say) leaves the outer record alone.
 */
static _Thread_local char *codec_msg;

int wk_codec_fail(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    wk__errbuf_vset(fmt ? codec_msg : NULL, WK_CODEC_MSG_MAX, status, fmt, ap);
    va_end(ap);
    return status;
}

int wk__codec_decode(wk_processor *p, const char *op, const wk_codec *codec, const char *key,
                     size_t key_len, const uint8_t *bytes, size_t len, void *value)
{
    char why[WK_CODEC_MSG_MAX] = "", *outer = codec_msg;
    codec_msg = why;
    int rc = codec->decode(codec, bytes, len, value);
    codec_msg = outer;
    if (rc == WK_OK)
        return WK_OK;
    char text[WK__KEY_TEXT_MAX];
    wk__render_key(text, sizeof(text), key, key_len);
    return wk__processor_fail(p, rc, "%s: the body of \"%s\" does not decode as %s%s%s (%s)", op,
                              text, codec->name ? codec->name : "the codec's type",
                              why[0] ? ": " : "", why, wk_err_name(rc));
}

int wk__codec_encode(wk_processor *p, const char *op, const wk_codec *codec, const void *value,
                     uint8_t **bytes, size_t *len)
{
    char why[WK_CODEC_MSG_MAX] = "", *outer = codec_msg;
    codec_msg = why;
    int rc = codec->encode(codec, value, bytes, len);
    codec_msg = outer;
    if (rc == WK_OK)
        return WK_OK;
    return wk__processor_fail(p, rc, "%s: encoding %s failed%s%s (%s)", op,
                              codec->name ? codec->name : "the value", why[0] ? ": " : "", why,
                              wk_err_name(rc));
}

int wk_cache_get_typed(wk_processor *p, const wk_entity *cache, wk_name name,
                       const wk_codec *codec, void *value, bool *found)
{
    if (found)
        *found = false;
    wk__call c;
    wk_body body = WK_BODY_INIT;
    int rc = wk__op_begin(&c, p, &get_op, cache, name, &body);
    if (rc)
        return rc;
    if (!wk__codec_ok(codec) || !value || !found)
        return wk__op_fail(&c, WK_EINVAL,
                           "a codec with encode and decode, value and found are required");
    if ((rc = wk__no_deferred(p, "cache.get (typed)")))
        return rc;
    rc = wk__op_send(&c, NULL, NULL, 0);
    if (rc || !body.found) {
        wk_body_free(&body);
        return rc;
    }
    rc = wk__codec_decode(p, get_op.name, codec, c.key[0], c.key_len[0], body.data, body.len, value);
    wk_body_free(&body);
    if (rc)
        return rc;
    *found = true;
    return WK_OK;
}

void wk__typed_free(const wk_codec *codec, uint8_t *bytes)
{
    if (!bytes)
        return;
    if (codec->free_bytes)
        codec->free_bytes(codec, bytes);
    else
        free(bytes);
}

int wk__typed_encode(wk_processor *p, const char *op, const wk_codec *codec, const void *value,
                     uint8_t **bytes, size_t *len)
{
    if (!wk__codec_ok(codec) || !value)
        return wk__processor_fail(p, WK_EINVAL,
                                  "%s: a codec with encode and decode, and value are required", op);
    *bytes = NULL;
    *len = 0;
    int rc = wk__codec_encode(p, op, codec, value, bytes, len);
    if (rc == WK_OK && !*bytes && *len)
        rc = wk__processor_fail(p, WK_EINVAL, "%s: the encoder returned NULL bytes", op);
    if (rc)
        wk__typed_free(codec, *bytes);
    return rc;
}

int wk__typed_put_begin(wk__call *c, wk_processor *p, const wk__op *op, const wk_entity *e,
                        wk_name name, const wk_codec *codec, const void *value, uint8_t **bytes,
                        size_t *len)
{
    int rc = wk__op_begin(c, p, op, e, name, NULL);
    return rc ? rc : wk__typed_encode(p, op->name, codec, value, bytes, len);
}

int wk_cache_put_typed(wk_processor *p, const wk_entity *cache, wk_name name,
                       const wk_codec *codec, const void *value)
{
    wk__call c;
    uint8_t *bytes;
    size_t len;
    int rc = wk__typed_put_begin(&c, p, &put_op, cache, name, codec, value, &bytes, &len);
    if (rc)
        return rc;
    if (len > WK_BODY_MAX)
        rc = wk__op_fail(&c, WK_EINVAL, "an encoded body of %zu bytes exceeds WK_BODY_MAX", len);
    else
        rc = put_send(&c, bytes, len);
    wk__typed_free(codec, bytes);
    return rc;
}
