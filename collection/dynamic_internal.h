/*
 * collection/dynamic_internal.h — what Pipe (pipe.c, which defines these)
 * and StreamBuffer (stream_buffer.c) share: the shape of their append-like
 * scripts and their typed writes. Not installed.
 */
#ifndef WK_COLLECTION_DYNAMIC_INTERNAL_H
#define WK_COLLECTION_DYNAMIC_INTERNAL_H

#include "collection/cache_internal.h"
#include "collection/op.h"

/*
 * Send the script of call `c` (begun: collection/op.h) with ARGV = body,
 * ttl_ms of its entity (body NULL: ARGV = ttl_ms alone; a body of len 0 is
 * the empty string), then `extra` when not NULL (a NUL-terminated text):
 * pipe.send, pipe.close, stream_buffer.append and stream_buffer.finish.
 */
int wk__send_body_ttl(const wk__call *c, const void *body, size_t len, const char *extra);

/* A typed write: check the codec and value, encode `value`, hand the bytes
 * to `use` (which sends them and checks their length), free them. Returns
 * `use`'s status, or the refusal / encoder's status with its message on
 * `p`. */
int wk__codec_encoded(wk_processor *p, const char *op, const wk_codec *codec, const void *value,
                      int (*use)(void *ctx, const uint8_t *bytes, size_t len), void *ctx);

#endif /* WK_COLLECTION_DYNAMIC_INTERNAL_H */
