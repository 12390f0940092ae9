/*
 * codec/json.c — the JSON body codec (wakuwaku/codec.h): encodes and
 * decodes C structs described by wk_record_desc tables, with jansson.
 *
 * Sections: paths and messages; scalar values (one encoder and one decoder
 * per wk_field_type); records (the walk over a descriptor); the public
 * entry points.
 *
 * Every failure goes through fail(), which formats "<path>: <msg><detail>"
 * into the caller's buffer; the path is a chain of nodes on the stack from
 * the value up to the root ("$.points[1].x").
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include <wakuwaku/cache.h>
#include <wakuwaku/codec.h>

/* ------------------------------------------------------------------------
 * Paths and messages
 * ---------------------------------------------------------------------- */

/* Where a value sits in a body: from the value up to the root (NULL, "$"). */
typedef struct path {
    const struct path *up;
    const char *key; /* NULL for an array element */
    size_t index;
} path;

/* Where a failure's message goes (err may be NULL). */
typedef struct ctx {
    char *err;
    size_t errlen;
} ctx;

static size_t path_text(const path *at, char *buf, size_t size)
{
    size_t n = at ? path_text(at->up, buf, size) : 0;
    int k;
    if (n >= size)
        return n;
    if (!at)
        k = snprintf(buf, size, "$");
    else if (at->key)
        k = snprintf(buf + n, size - n, ".%s", at->key);
    else
        k = snprintf(buf + n, size - n, "[%zu]", at->index);
    return n + (k > 0 ? (size_t)k : 0);
}

/* Records "<path>: <msg><detail>" and returns status. */
static int fail(ctx *c, const path *at, int status, const char *msg, const char *detail)
{
    if (c->err && c->errlen) {
        char where[256];
        path_text(at, where, sizeof(where));
        snprintf(c->err, c->errlen, "%s: %s%s", where, msg, detail);
    }
    return status;
}

static int oom(ctx *c, const path *at)
{
    return fail(c, at, WK_ENOMEM, "out of memory", "");
}

static const char *type_name(const json_t *j)
{
    switch (json_typeof(j)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
        return "an integer";
    case JSON_REAL:
        return "a real number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    case JSON_NULL:
        return "null";
    }
    return "an unknown value";
}

/* ------------------------------------------------------------------------
 * Scalar values
 * ---------------------------------------------------------------------- */

/* Decimal digits (no sign, no leading zero) up to limit into *out. */
static bool digits(const char *s, uint64_t limit, uint64_t *out)
{
    uint64_t v = 0;
    if (!*s || (s[0] == '0' && s[1]))
        return false;
    for (; *s; s++) {
        unsigned d = (unsigned)(*s - '0');
        if (*s < '0' || *s > '9' || v > (limit - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

/* Whether s is valid UTF-8 (no overlong forms, surrogates or values past
 * U+10FFFF), as JSON requires. */
static bool utf8_valid(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        uint32_t cp;
        int n, i;
        if (*p < 0x80) {
            p++;
            continue;
        }
        if ((*p & 0xE0) == 0xC0) {
            n = 1;
            cp = *p & 0x1Fu;
        } else if ((*p & 0xF0) == 0xE0) {
            n = 2;
            cp = *p & 0x0Fu;
        } else if ((*p & 0xF8) == 0xF0) {
            n = 3;
            cp = *p & 0x07u;
        } else {
            return false;
        }
        for (i = 1; i <= n; i++) {
            if ((p[i] & 0xC0) != 0x80)
                return false;
            cp = (cp << 6) | (p[i] & 0x3Fu);
        }
        if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
            cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        p += n + 1;
    }
    return true;
}

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* bytes travel as standard base64 with padding. */
static int bytes_to_json(ctx *c, const path *at, const wk_codec_bytes *v, json_t **out)
{
    size_t i, k = 0;
    char *text;
    if (!v->data && v->len)
        return fail(c, at, WK_EINVAL, "the bytes are NULL but their length is not 0", "");
    text = malloc((v->len + 2) / 3 * 4 + 1);
    if (!text)
        return oom(c, at);
    for (i = 0; i + 2 < v->len; i += 3) {
        uint32_t w = (uint32_t)v->data[i] << 16 | (uint32_t)v->data[i + 1] << 8 | v->data[i + 2];
        text[k++] = b64[w >> 18];
        text[k++] = b64[(w >> 12) & 63];
        text[k++] = b64[(w >> 6) & 63];
        text[k++] = b64[w & 63];
    }
    if (i < v->len) {
        uint32_t w = (uint32_t)v->data[i] << 16;
        if (i + 1 < v->len)
            w |= (uint32_t)v->data[i + 1] << 8;
        text[k++] = b64[w >> 18];
        text[k++] = b64[(w >> 12) & 63];
        text[k++] = i + 1 < v->len ? b64[(w >> 6) & 63] : '=';
        text[k++] = '=';
    }
    *out = json_stringn_nocheck(text, k);
    free(text);
    return *out ? WK_OK : oom(c, at);
}

static int b64_value(char ch)
{
    const char *p = ch ? strchr(b64, ch) : NULL;
    return p ? (int)(p - b64) : -1;
}

static int bytes_from_json(ctx *c, const path *at, const json_t *j, wk_codec_bytes *out)
{
    const char *s;
    size_t n, i, pad = 0;
    uint32_t acc = 0;
    int bits = 0;
    if (!json_is_string(j))
        return fail(c, at, WK_ECORRUPT, "expected a base64 string, got ", type_name(j));
    s = json_string_value(j);
    n = json_string_length(j);
    if (n % 4)
        return fail(c, at, WK_ECORRUPT, "invalid base64 (length not a multiple of 4)", "");
    /* stored at once, so a failure below leaves it for wk_record_free() */
    out->data = malloc(n / 4 * 3 + 1);
    if (!out->data)
        return oom(c, at);
    out->len = 0;
    for (i = 0; i < n; i++) {
        int d = b64_value(s[i]);
        if (s[i] == '=' && i + 2 >= n) {
            pad++;
            continue;
        }
        if (d < 0 || pad)
            return fail(c, at, WK_ECORRUPT, "invalid base64", "");
        acc = (acc << 6) | (uint32_t)d;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out->data[out->len++] = (uint8_t)(acc >> bits);
        }
    }
    return WK_OK;
}

/* An integer in [min, max]. */
static int integer_from_json(ctx *c, const path *at, const json_t *j, json_int_t min,
                             json_int_t max, const char *type, json_int_t *out)
{
    if (!json_is_integer(j))
        return fail(c, at, WK_ECORRUPT, "expected an integer, got ", type_name(j));
    *out = json_integer_value(j);
    if (*out < min || *out > max)
        return fail(c, at, WK_ECORRUPT, "integer out of range for ", type);
    return WK_OK;
}

static int record_to_json(ctx *c, const path *at, const wk_record_desc *rec, const void *v,
                          json_t **out);
static int record_from_json(ctx *c, const path *at, const wk_record_desc *rec, const json_t *j,
                            void *v);

/* The size of one value of field f (one element of an array). */
static size_t value_size(const wk_field_desc *f)
{
    switch (f->type) {
    case WK_FIELD_BOOL:
        return sizeof(bool);
    case WK_FIELD_I32:
        return sizeof(int32_t);
    case WK_FIELD_I64:
        return sizeof(int64_t);
    case WK_FIELD_U32:
        return sizeof(uint32_t);
    case WK_FIELD_U64:
        return sizeof(uint64_t);
    case WK_FIELD_F64:
        return sizeof(double);
    case WK_FIELD_STRING:
        return sizeof(char *);
    case WK_FIELD_BYTES:
        return sizeof(wk_codec_bytes);
    case WK_FIELD_RECORD:
        return f->record->size;
    }
    return 0;
}

/* One value of field f at p into a new JSON value *out. */
static int value_to_json(ctx *c, const path *at, const wk_field_desc *f, const void *p,
                         json_t **out)
{
    char text[24];
    *out = NULL;
    switch (f->type) {
    case WK_FIELD_BOOL:
        *out = json_boolean(*(const bool *)p);
        break;
    case WK_FIELD_I32:
        *out = json_integer(*(const int32_t *)p);
        break;
    case WK_FIELD_U32:
        *out = json_integer(*(const uint32_t *)p);
        break;
    case WK_FIELD_I64: /* as a decimal string (exact in every language) */
        snprintf(text, sizeof(text), "%lld", (long long)*(const int64_t *)p);
        *out = json_string_nocheck(text);
        break;
    case WK_FIELD_U64:
        snprintf(text, sizeof(text), "%llu", (unsigned long long)*(const uint64_t *)p);
        *out = json_string_nocheck(text);
        break;
    case WK_FIELD_F64:
        if (!isfinite(*(const double *)p))
            return fail(c, at, WK_EINVAL, "not a finite number (JSON has no NaN or infinity)",
                        "");
        *out = json_real(*(const double *)p);
        break;
    case WK_FIELD_STRING: {
        const char *s = *(char *const *)p;
        if (!s)
            return fail(c, at, WK_EINVAL, "the string is NULL", "");
        if (!utf8_valid(s))
            return fail(c, at, WK_EINVAL, "the string is not valid UTF-8", "");
        *out = json_string_nocheck(s);
        break;
    }
    case WK_FIELD_BYTES:
        return bytes_to_json(c, at, p, out);
    case WK_FIELD_RECORD:
        return record_to_json(c, at, f->record, p, out);
    }
    return *out ? WK_OK : oom(c, at);
}

/* The JSON value j into one value of field f at p (zeroed storage). */
static int value_from_json(ctx *c, const path *at, const wk_field_desc *f, const json_t *j,
                           void *p)
{
    json_int_t n = 0;
    int rc;
    switch (f->type) {
    case WK_FIELD_BOOL:
        if (!json_is_boolean(j))
            return fail(c, at, WK_ECORRUPT, "expected a boolean, got ", type_name(j));
        *(bool *)p = json_is_true(j);
        return WK_OK;
    case WK_FIELD_I32:
        rc = integer_from_json(c, at, j, INT32_MIN, INT32_MAX, "i32", &n);
        *(int32_t *)p = (int32_t)n;
        return rc;
    case WK_FIELD_U32:
        rc = integer_from_json(c, at, j, 0, UINT32_MAX, "u32", &n);
        *(uint32_t *)p = (uint32_t)n;
        return rc;
    case WK_FIELD_I64: {
        const char *s;
        uint64_t mag;
        bool neg;
        if (json_is_integer(j)) {
            *(int64_t *)p = (int64_t)json_integer_value(j);
            return WK_OK;
        }
        if (!json_is_string(j))
            return fail(c, at, WK_ECORRUPT,
                        "expected an i64 (a decimal string or an integer), got ", type_name(j));
        s = json_string_value(j);
        neg = s[0] == '-';
        if (!digits(s + neg, neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX, &mag))
            return fail(c, at, WK_ECORRUPT, "not a decimal i64: ", s);
        *(int64_t *)p = neg ? (int64_t)(0 - mag) : (int64_t)mag;
        return WK_OK;
    }
    case WK_FIELD_U64:
        if (json_is_integer(j)) {
            if (json_integer_value(j) < 0)
                return fail(c, at, WK_ECORRUPT, "integer out of range for u64", "");
            *(uint64_t *)p = (uint64_t)json_integer_value(j);
            return WK_OK;
        }
        if (!json_is_string(j))
            return fail(c, at, WK_ECORRUPT,
                        "expected a u64 (a decimal string or an integer), got ", type_name(j));
        if (!digits(json_string_value(j), UINT64_MAX, p))
            return fail(c, at, WK_ECORRUPT, "not a decimal u64: ", json_string_value(j));
        return WK_OK;
    case WK_FIELD_F64:
        if (!json_is_number(j))
            return fail(c, at, WK_ECORRUPT, "expected a number, got ", type_name(j));
        *(double *)p = json_number_value(j);
        return WK_OK;
    case WK_FIELD_STRING: {
        size_t len;
        char *s;
        if (!json_is_string(j))
            return fail(c, at, WK_ECORRUPT, "expected a string, got ", type_name(j));
        len = json_string_length(j);
        if (!(s = malloc(len + 1)))
            return oom(c, at);
        memcpy(s, json_string_value(j), len + 1);
        *(char **)p = s;
        return WK_OK;
    }
    case WK_FIELD_BYTES:
        return bytes_from_json(c, at, j, p);
    case WK_FIELD_RECORD:
        return record_from_json(c, at, f->record, j, p);
    }
    return fail(c, at, WK_EINVAL, "unknown field type", "");
}

/* Frees what one value of field f at p owns. */
static void value_free(const wk_field_desc *f, void *p)
{
    switch (f->type) {
    case WK_FIELD_STRING:
        free(*(char **)p);
        break;
    case WK_FIELD_BYTES:
        free(((wk_codec_bytes *)p)->data);
        break;
    case WK_FIELD_RECORD:
        wk_record_free(f->record, p);
        break;
    default:
        break;
    }
}

/* ------------------------------------------------------------------------
 * Records
 * ---------------------------------------------------------------------- */

#define AT(v, off) ((char *)(v) + (off))
#define AT_CONST(v, off) ((const char *)(v) + (off))

/* A JSON array of the `len` values at `items` (field f). */
static int array_to_json(ctx *c, const path *at, const wk_field_desc *f, const char *items,
                         size_t len, json_t *arr)
{
    size_t size = value_size(f);
    for (size_t i = 0; i < len; i++) {
        const path at_i = {at, NULL, i};
        json_t *value;
        int rc = value_to_json(c, &at_i, f, items + i * size, &value);
        if (rc != WK_OK)
            return rc;
        if (json_array_append_new(arr, value) != 0)
            return oom(c, &at_i);
    }
    return WK_OK;
}

static int field_to_json(ctx *c, const path *at, const wk_field_desc *f, const void *v,
                         json_t *obj)
{
    json_t *value;
    int rc;
    if (!(f->flags & WK_FIELD_ARRAY)) {
        if ((rc = value_to_json(c, at, f, AT_CONST(v, f->offset), &value)) != WK_OK)
            return rc;
        return json_object_set_new_nocheck(obj, f->key, value) == 0 ? WK_OK : oom(c, at);
    }
    const char *items = *(char *const *)AT_CONST(v, f->offset);
    size_t len = *(const size_t *)AT_CONST(v, f->len_offset);
    if (!items && len)
        return fail(c, at, WK_EINVAL, "the array is NULL but its length is not 0", "");
    if (!(value = json_array()))
        return oom(c, at);
    /* the object owns the array from here, so a failure below frees it */
    if (json_object_set_new_nocheck(obj, f->key, value) != 0)
        return oom(c, at);
    return array_to_json(c, at, f, items, len, value);
}

static int record_to_json(ctx *c, const path *at, const wk_record_desc *rec, const void *v,
                          json_t **out)
{
    json_t *obj = json_object();
    *out = NULL;
    if (!obj)
        return oom(c, at);
    for (size_t i = 0; i < rec->nfields; i++) {
        const wk_field_desc *f = &rec->fields[i];
        const path at_f = {at, f->key, 0};
        int rc;
        if ((f->flags & WK_FIELD_OPTIONAL) && !*(const bool *)AT_CONST(v, f->has_offset))
            continue;
        if ((rc = field_to_json(c, &at_f, f, v, obj)) != WK_OK) {
            json_decref(obj);
            return rc;
        }
    }
    *out = obj;
    return WK_OK;
}

/* The JSON array j into field f of v: zeroed elements, then each value. */
static int array_from_json(ctx *c, const path *at, const wk_field_desc *f, const json_t *j,
                           void *v)
{
    size_t n, size = value_size(f);
    char *items = NULL;
    if (!json_is_array(j))
        return fail(c, at, WK_ECORRUPT, "expected an array, got ", type_name(j));
    n = json_array_size(j);
    if (n && !(items = calloc(n, size)))
        return oom(c, at);
    /* stored at once (zeroed = empty), so a failure below leaves what was
     * decoded for wk_record_free() */
    *(char **)AT(v, f->offset) = items;
    *(size_t *)AT(v, f->len_offset) = n;
    for (size_t i = 0; i < n; i++) {
        const path at_i = {at, NULL, i};
        int rc = value_from_json(c, &at_i, f, json_array_get(j, i), items + i * size);
        if (rc != WK_OK)
            return rc;
    }
    return WK_OK;
}

static int record_from_json(ctx *c, const path *at, const wk_record_desc *rec, const json_t *j,
                            void *v)
{
    if (!json_is_object(j))
        return fail(c, at, WK_ECORRUPT, "expected an object, got ", type_name(j));
    for (size_t i = 0; i < rec->nfields; i++) {
        const wk_field_desc *f = &rec->fields[i];
        const path at_f = {at, f->key, 0};
        bool optional = f->flags & WK_FIELD_OPTIONAL;
        const json_t *m = json_object_get(j, f->key);
        int rc;
        if (m && json_is_null(m) && optional)
            m = NULL;
        if (!m) {
            if (!optional)
                return fail(c, &at_f, WK_ECORRUPT, "missing required field", "");
            continue;
        }
        if (f->flags & WK_FIELD_ARRAY)
            rc = array_from_json(c, &at_f, f, m, v);
        else
            rc = value_from_json(c, &at_f, f, m, AT(v, f->offset));
        if (rc != WK_OK)
            return rc;
        if (optional)
            *(bool *)AT(v, f->has_offset) = true;
    }
    return WK_OK;
}

/* ------------------------------------------------------------------------
 * Entry points
 * ---------------------------------------------------------------------- */

void wk_record_init(const wk_record_desc *rec, void *v)
{
    if (rec && v)
        memset(v, 0, rec->size);
}

void wk_record_free(const wk_record_desc *rec, void *v)
{
    if (!rec || !v)
        return;
    for (size_t i = 0; i < rec->nfields; i++) {
        const wk_field_desc *f = &rec->fields[i];
        if (!(f->flags & WK_FIELD_ARRAY)) {
            value_free(f, AT(v, f->offset));
            continue;
        }
        char *items = *(char **)AT(v, f->offset);
        size_t len = *(size_t *)AT(v, f->len_offset), size = value_size(f);
        for (size_t k = 0; items && k < len; k++)
            value_free(f, items + k * size);
        free(items);
    }
    wk_record_init(rec, v);
}

/* JSON text into a malloc'ed buffer (json_dump_callback). */
typedef struct textbuf {
    char *data;
    size_t len, cap;
} textbuf;

static int dump(const char *text, size_t size, void *data)
{
    textbuf *b = data;
    if (b->cap - b->len < size + 1) {
        size_t cap = b->cap ? b->cap : 256;
        char *p;
        while (cap - b->len < size + 1)
            cap *= 2;
        p = realloc(b->data, cap);
        if (!p)
            return -1;
        b->data = p;
        b->cap = cap;
    }
    memcpy(b->data + b->len, text, size);
    b->len += size;
    b->data[b->len] = '\0';
    return 0;
}

int wk_record_encode(const wk_record_desc *rec, const void *v, char **json, size_t *len,
                     char *err, size_t errlen)
{
    ctx c = {err, errlen};
    textbuf b = {NULL, 0, 0};
    json_t *root;
    int rc;
    if (err && errlen)
        err[0] = '\0';
    if (len)
        *len = 0;
    if (!json)
        return fail(&c, NULL, WK_EINVAL, "json is required", "");
    *json = NULL;
    if (!v)
        return fail(&c, NULL, WK_EINVAL, "v is required", "");
    if (!rec)
        return fail(&c, NULL, WK_EINVAL, "the record descriptor is required", "");
    if ((rc = record_to_json(&c, NULL, rec, v, &root)) != WK_OK)
        return rc;
    rc = json_dump_callback(root, dump, &b, JSON_COMPACT);
    json_decref(root);
    if (rc != 0) {
        free(b.data);
        return oom(&c, NULL);
    }
    *json = b.data;
    if (len)
        *len = b.len;
    return WK_OK;
}

int wk_record_decode(const wk_record_desc *rec, const char *json, size_t len, void *v, char *err,
                     size_t errlen)
{
    ctx c = {err, errlen};
    json_error_t je;
    json_t *root;
    int rc;
    if (err && errlen)
        err[0] = '\0';
    if (!v)
        return fail(&c, NULL, WK_EINVAL, "v is required", "");
    if (!rec)
        return fail(&c, NULL, WK_EINVAL, "the record descriptor is required", "");
    wk_record_init(rec, v);
    if (!json && len)
        return fail(&c, NULL, WK_EINVAL, "json is NULL", "");
    root = json_loadb(json ? json : "", len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return fail(&c, NULL, WK_ECORRUPT, "not valid JSON: ", je.text);
    rc = record_from_json(&c, NULL, rec, root, v);
    json_decref(root);
    if (rc != WK_OK)
        wk_record_free(rec, v);
    return rc;
}

int wk_record_body_encode(const wk_record_desc *rec, const void *v, uint8_t **bytes, size_t *len)
{
    char *json = NULL, err[WK_CODEC_MSG_MAX];
    int rc = wk_record_encode(rec, v, &json, len, err, sizeof(err));
    *bytes = (uint8_t *)json;
    return rc == WK_OK ? rc : wk_codec_fail(rc, "%s", err);
}

int wk_record_body_decode(const wk_record_desc *rec, const uint8_t *bytes, size_t len, void *v)
{
    char err[WK_CODEC_MSG_MAX];
    int rc = wk_record_decode(rec, (const char *)bytes, len, v, err, sizeof(err));
    return rc == WK_OK ? rc : wk_codec_fail(rc, "%s", err);
}
