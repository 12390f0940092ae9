/*
 * wakuwaku/codec.h — the JSON body codec: C structs described by const
 * descriptor tables, encoded to and decoded from JSON text.
 *
 * This is the runtime behind the code generator's records (codegen/SCHEMA.md):
 * wk-codegen writes a C struct per record plus a `wk_record_desc` saying
 * where each field lives, and the generated T_init/T_free/T_encode/T_decode
 * and T_codec are one-line wrappers over the functions below. You can also
 * write descriptor tables by hand.
 *
 * LINKING: these functions are in the library `wakuwaku_codec`
 * (libwakuwaku_codec, pkg-config `wakuwaku-codec`), which uses jansson; the
 * core library `wakuwaku` does not. Generated code links it.
 *
 * JSON form of a record: an object with the fields' keys, in table order.
 *   WK_FIELD_BOOL            true / false
 *   WK_FIELD_I32, _U32       a JSON integer (range-checked on decode)
 *   WK_FIELD_I64, _U64       a decimal string ("-42"), exact in every
 *                            language; decoding also accepts an integer
 *   WK_FIELD_F64             a number (finite; encoding refuses NaN/inf)
 *   WK_FIELD_STRING          a string (UTF-8 checked on encode)
 *   WK_FIELD_BYTES           standard base64 with padding
 *   WK_FIELD_RECORD          an object (the nested descriptor's form)
 * WK_FIELD_OPTIONAL: absent when the `has` flag is false (decoding also
 * accepts null). WK_FIELD_ARRAY: a JSON array of such values. Decoding
 * ignores keys the table does not know and refuses duplicate keys.
 *
 * Messages: failures name the place and the reason, e.g.
 * `$.points[1].x: expected a number, got a string`.
 *
 * Thread-safety: every function touches only its arguments.
 */
#ifndef WAKUWAKU_CODEC_H
#define WAKUWAKU_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include <wakuwaku/common.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The C type of one value of a field (one element, for arrays). */
typedef enum wk_field_type {
    WK_FIELD_BOOL,   /* bool */
    WK_FIELD_I32,    /* int32_t */
    WK_FIELD_I64,    /* int64_t */
    WK_FIELD_U32,    /* uint32_t */
    WK_FIELD_U64,    /* uint64_t */
    WK_FIELD_F64,    /* double */
    WK_FIELD_STRING, /* char *: NUL-terminated UTF-8, malloc'ed, owned */
    WK_FIELD_BYTES,  /* wk_codec_bytes (or a struct of the same layout) */
    WK_FIELD_RECORD  /* the struct `record` describes, by value */
} wk_field_type;

/* Field flags. */
#define WK_FIELD_OPTIONAL (1u << 0) /* a `bool` at has_offset says whether it is present */
#define WK_FIELD_ARRAY (1u << 1)    /* a `T *` at offset, a `size_t` count at len_offset */

/* A byte string: len bytes at data (malloc'ed; owned by the struct holding it). */
typedef struct wk_codec_bytes {
    uint8_t *data;
    size_t len;
} wk_codec_bytes;

typedef struct wk_record_desc wk_record_desc;

/*
 * One field of a record. Offsets are offsetof() in the record's struct.
 *
 *   key         the JSON key (any UTF-8 text).
 *   type        the C type of a value.
 *   flags       WK_FIELD_OPTIONAL, WK_FIELD_ARRAY, or both (0: a required
 *               single value).
 *   offset      the value, or for arrays the element pointer.
 *   len_offset  arrays: the element count (size_t). Else unused.
 *   has_offset  optional: the presence flag (bool). Else unused.
 *   record      WK_FIELD_RECORD: the nested record. Else NULL.
 */
typedef struct wk_field_desc {
    const char *key;
    wk_field_type type;
    unsigned flags;
    size_t offset;
    size_t len_offset;
    size_t has_offset;
    const wk_record_desc *record;
} wk_field_desc;

/*
 * A record: a C struct of `size` bytes with `nfields` fields. `name` is
 * the record's name for messages. Declare tables `static const`; records
 * may refer to each other (and to themselves, through arrays) by pointer.
 */
struct wk_record_desc {
    const char *name;
    size_t size;
    const wk_field_desc *fields;
    size_t nfields;
};

/* wk_record_init — set the record at v to the empty value (all zero: NULL
 * pointers, absent optional fields, empty arrays). NULL v is a no-op. */
WK_API void wk_record_init(const wk_record_desc *rec, void *v);

/* wk_record_free — free everything the record at v owns (strings, bytes,
 * arrays, nested records) and wk_record_init() it; not v itself. NULL v is
 * a harmless no-op. */
WK_API void wk_record_free(const wk_record_desc *rec, void *v);

/*
 * wk_record_encode — the JSON text of the record at v: UTF-8, compact,
 * keys in table order.
 *
 *   json     OUT: a new NUL-terminated buffer (free() it); NULL on failure.
 *   len      OUT, may be NULL: its length without the NUL.
 *   err      may be NULL: the message ("" on success), errlen bytes.
 *
 * Returns WK_OK, WK_EINVAL (NULL json or v, a required string is NULL, a
 * string is not valid UTF-8, a double is not finite, an array or byte
 * string is NULL with a length; the message names the field) or WK_ENOMEM.
 */
WK_API int wk_record_encode(const wk_record_desc *rec, const void *v, char **json, size_t *len,
                            char *err, size_t errlen);

/*
 * wk_record_decode — parse len bytes of JSON into the record at v, which
 * is treated as uninitialised (free its previous value first).
 *
 * Returns WK_OK, WK_EINVAL (NULL v, or NULL json with len > 0),
 * WK_ECORRUPT (not JSON, a missing required field, a value of the wrong
 * type or out of range, bad base64; the message names the field) or
 * WK_ENOMEM. On failure *v is empty (nothing to free).
 */
WK_API int wk_record_decode(const wk_record_desc *rec, const char *json, size_t len, void *v,
                            char *err, size_t errlen);

/*
 * wk_record_body_encode, wk_record_body_decode — the same, for a
 * wk_codec's encode and decode callbacks (wakuwaku/cache.h): failures are
 * reported through wk_codec_fail(), so a typed cache call's message says
 * where and why. A generated T_codec calls them with T's descriptor.
 */
WK_API int wk_record_body_encode(const wk_record_desc *rec, const void *v, uint8_t **bytes,
                                 size_t *len);
WK_API int wk_record_body_decode(const wk_record_desc *rec, const uint8_t *bytes, size_t len,
                                 void *v);

#ifdef __cplusplus
}
#endif

#endif /* WAKUWAKU_CODEC_H */
