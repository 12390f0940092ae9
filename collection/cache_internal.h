/*
 * collection/cache_internal.h — helpers shared by Cache (cache.c) and
 * HashedCache (hashed_cache.c): copying reply bytes into heap bodies,
 * naming a query's key in corruption messages, checking a put's body.
 * Not installed.
 */
#ifndef WK_COLLECTION_CACHE_INTERNAL_H
#define WK_COLLECTION_CACHE_INTERNAL_H

#include <wakuwaku/cache.h>

#include "collection/common.h"
#include "collection/op.h"

/* A body that was found: copy `len` bytes into a new heap body (len + 1
 * bytes, NUL-terminated, data never NULL) and mark it found and changed.
 * Returns WK_OK or WK_ENOMEM (body untouched). */
int wk__body_found(wk_body *body, const void *src, size_t len);

/* The same into any pair of (data, len): LiveView's bodies and diffs. */
int wk__bytes_copy(uint8_t **dst, size_t *dst_len, const void *src, size_t len);

/* WK_EINVAL with a message when `p` is deferred (a batch): for helpers
 * that need an outcome at once. */
int wk__no_deferred(wk_processor *p, const char *op);

/* Room for a rendered key in messages: short enough that a message naming
 * it fits the handle's detail buffer. */
#define WK__KEY_TEXT_MAX 160

/* Parse an error reply of a query sent with WK_QUERY_PARSE_ERRORS:
 * WRONGTYPE becomes WK_ECORRUPT naming the key and `expected` (e.g. "a
 * Cache string"); any other error WK_EREDIS with the server's text. */
int wk__parse_error_reply(const wk_query *q, const wk_reply *r, wk_diag *d, const char *expected);

/* A put's start (Cache, HashedCache): wk__op_begin() of `op`, then the
 * body checked: NULL only when empty, at most WK_BODY_MAX bytes; else
 * WK_EINVAL through wk__op_fail(c, ...). */
int wk__put_begin(wk__call *c, wk_processor *p, const wk__op *op, const wk_entity *e, wk_name name,
                  const void *body, size_t len);

/* A codec the typed calls can use: encode and decode. */
bool wk__codec_ok(const wk_codec *codec);

/* Decode the body stored at `key` with the codec; on failure record
 * "<op>: the body of "<key>" does not decode as <codec>[: <what the
 * decoder gave wk_codec_fail()>] (<status>)" on the handle and return the
 * decoder's status. */
int wk__codec_decode(wk_processor *p, const char *op, const wk_codec *codec, const char *key,
                     size_t key_len, const uint8_t *bytes, size_t len, void *value);

/* Encode `value` with the codec; on failure record "<op>: encoding
 * <codec> failed[: <why>] (<status>)" and return the encoder's status
 * (*bytes then holds nothing to free). */
int wk__codec_encode(wk_processor *p, const char *op, const wk_codec *codec, const void *value,
                     uint8_t **bytes, size_t *len);

/* A typed write's value encoded (Cache, HashedCache, LiveView): the codec
 * and the value checked, then wk__codec_encode(); "<op>: the encoder
 * returned NULL bytes" when it gave a length without bytes. WK_OK with
 * *bytes (NULL only when *len is 0) to free with wk__typed_free(), or the
 * failure on the handle with nothing to free. */
int wk__typed_encode(wk_processor *p, const char *op, const wk_codec *codec, const void *value,
                     uint8_t **bytes, size_t *len);

/* A typed put's start (Cache, HashedCache): wk__op_begin() of `op`, so the
 * entity and name are refused before the encoder runs, then
 * wk__typed_encode() under op->name. Same outcome as wk__typed_encode(). */
int wk__typed_put_begin(wk__call *c, wk_processor *p, const wk__op *op, const wk_entity *e,
                        wk_name name, const wk_codec *codec, const void *value, uint8_t **bytes,
                        size_t *len);

/* Frees what an encoder gave: the codec's free_bytes, else free(). NULL is
 * a no-op. */
void wk__typed_free(const wk_codec *codec, uint8_t *bytes);

#endif /* WK_COLLECTION_CACHE_INTERNAL_H */
