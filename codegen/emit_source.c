/*
 * codegen/emit_source.c — writes <service>.c. Sections, in this order:
 * banner and includes; entity descriptors; JSON helpers (only those the
 * records need); record functions and codecs; typed accessors;
 * capability tables and typed handles.
 *
 * The helpers are fixed texts in which '@' stands for the service name,
 * so every static helper is called <service>__<what>: no schema
 * identifier can produce a double underscore (names.h), so they never
 * collide with generated public names.
 */
#include <stdlib.h>
#include <string.h>

#include "emit.h"

/* Writes `text` with each '@' replaced by the service name, line by line
 * through out_declf(), so lines that the name makes long are wrapped the
 * same way whatever the name's length. */
static void emit_template(outbuf *o, const schema *s, const char *text)
{
    outbuf line = {0};
    for (const char *p = text; *p; p++) {
        if (*p == '@') {
            out_puts(&line, s->service);
        } else {
            char c[2] = {*p, '\0'};
            out_puts(&line, c);
        }
        if (*p == '\n') {
            out_declf(o, "%s", line.data);
            line.len = 0;
            line.data[0] = '\0';
        }
    }
    if (line.len)
        out_declf(o, "%s", line.data);
    free(line.data);
}

/* ------------------------------------------------------------------------
 * Entities
 * ---------------------------------------------------------------------- */

static void emit_entities(const schema *s, outbuf *o)
{
    emit_section(o, "Entities");
    for (size_t i = 0; i < s->nentities; i++) {
        const entity *e = &s->entities[i];
        out_printf(o, "const wk_entity %s = ", e->descriptor);
        switch (e->kind) {
        case KIND_LOCK:
            out_puts(o, "WK_LOCK_ENTITY(");
            break;
        case KIND_RWLOCK:
            out_puts(o, "WK_RWLOCK_ENTITY(");
            break;
        case KIND_CACHE:
            out_puts(o, "WK_CACHE_ENTITY(");
            break;
        case KIND_HASHED_CACHE:
            out_puts(o, "WK_HASHED_CACHE_ENTITY(");
            break;
        case KIND_TOKEN_BUCKET:
            out_puts(o, "WK_TOKEN_BUCKET_ENTITY(");
            break;
        case KIND_SETTINGS:
            out_puts(o, "WK_SETTINGS_ENTITY(");
            break;
        case KIND_COUNT:
            break;
        }
        emit_c_string(o, e->ns);
        if (kind_info(e->kind)->has_ttl)
            out_printf(o, ", %lld", (long long)e->ttl_ms);
        if (kind_info(e->kind)->has_bucket)
            out_printf(o, ", %s, %s, %lld", e->capacity_text, e->rate_text,
                       (long long)e->period_ms);
        out_puts(o, ");\n");
    }
    out_printf(o, "\nconst wk_entity *const %s_entities[%s_ENTITY_COUNT] = {\n", s->service,
               s->service_upper);
    for (size_t i = 0; i < s->nentities; i++)
        out_printf(o, "    &%s,\n", s->entities[i].descriptor);
    out_puts(o, "};\n\n");
}

/* ------------------------------------------------------------------------
 * JSON helpers
 * ---------------------------------------------------------------------- */

static const char helpers_common[] =
    "/* Where a value sits in a body, for messages: a chain of nodes on the\n"
    " * stack, from the value up to the root (NULL, spelled \"$\"). */\n"
    "typedef struct @__path {\n"
    "    const struct @__path *up;\n"
    "    const char *key; /* NULL for an array element */\n"
    "    size_t index;\n"
    "} @__path;\n"
    "\n"
    "/* Where a failure's message goes (may be NULL). */\n"
    "typedef struct @__ctx {\n"
    "    char *err;\n"
    "    size_t errlen;\n"
    "} @__ctx;\n"
    "\n"
    "static size_t @__path_text(const @__path *at, char *buf, size_t size)\n"
    "{\n"
    "    size_t n = at ? @__path_text(at->up, buf, size) : 0;\n"
    "    int k;\n"
    "    if (n >= size)\n"
    "        return n;\n"
    "    if (!at)\n"
    "        k = snprintf(buf, size, \"$\");\n"
    "    else if (at->key)\n"
    "        k = snprintf(buf + n, size - n, \".%s\", at->key);\n"
    "    else\n"
    "        k = snprintf(buf + n, size - n, \"[%zu]\", at->index);\n"
    "    return n + (k > 0 ? (size_t)k : 0);\n"
    "}\n"
    "\n"
    "/* Records \"<path>: <msg><detail>\" and returns status. */\n"
    "static int @__fail(@__ctx *c, const @__path *at, int status, const char *msg, const "
    "char *detail)\n"
    "{\n"
    "    if (c->err && c->errlen) {\n"
    "        char path[256];\n"
    "        @__path_text(at, path, sizeof(path));\n"
    "        snprintf(c->err, c->errlen, \"%s: %s%s\", path, msg, detail);\n"
    "    }\n"
    "    return status;\n"
    "}\n"
    "\n"
    "static const char *@__type_name(const json_t *j)\n"
    "{\n"
    "    switch (json_typeof(j)) {\n"
    "    case JSON_OBJECT:\n"
    "        return \"an object\";\n"
    "    case JSON_ARRAY:\n"
    "        return \"an array\";\n"
    "    case JSON_STRING:\n"
    "        return \"a string\";\n"
    "    case JSON_INTEGER:\n"
    "        return \"an integer\";\n"
    "    case JSON_REAL:\n"
    "        return \"a real number\";\n"
    "    case JSON_TRUE:\n"
    "    case JSON_FALSE:\n"
    "        return \"a boolean\";\n"
    "    case JSON_NULL:\n"
    "        return \"null\";\n"
    "    }\n"
    "    return \"an unknown value\";\n"
    "}\n"
    "\n"
    "/* Adds value (stolen) to obj under at->key. */\n"
    "static int @__set(@__ctx *c, const @__path *at, json_t *obj, json_t *value)\n"
    "{\n"
    "    if (json_object_set_new_nocheck(obj, at->key, value) != 0)\n"
    "        return @__fail(c, at, WK_ENOMEM, \"out of memory\", \"\");\n"
    "    return WK_OK;\n"
    "}\n"
    "\n"
    "/* A new empty JSON array for `len` items at `items`. */\n"
    "static int @__new_array(@__ctx *c, const @__path *at, const void *items, size_t len, "
    "json_t **out)\n"
    "{\n"
    "    if (!items && len)\n"
    "        return @__fail(c, at, WK_EINVAL, \"the array is NULL but its length is not 0\", "
    "\"\");\n"
    "    *out = json_array();\n"
    "    if (!*out)\n"
    "        return @__fail(c, at, WK_ENOMEM, \"out of memory\", \"\");\n"
    "    return WK_OK;\n"
    "}\n"
    "\n"
    "/* Appends value (stolen) to the array arr. */\n"
    "static int @__append(@__ctx *c, const @__path *at, json_t *arr, json_t *value)\n"
    "{\n"
    "    if (json_array_append_new(arr, value) != 0)\n"
    "        return @__fail(c, at, WK_ENOMEM, \"out of memory\", \"\");\n"
    "    return WK_OK;\n"
    "}\n"
    "\n"
    "/* The member at->key of the object j into *out: NULL when absent (or\n"
    " * null) and optional; a missing required member is an error. */\n"
    "static int @__member(@__ctx *c, const @__path *at, const json_t *j, bool required, "
    "const json_t **out)\n"
    "{\n"
    "    *out = json_object_get(j, at->key);\n"
    "    if (*out && json_is_null(*out) && !required)\n"
    "        *out = NULL;\n"
    "    if (!*out && required)\n"
    "        return @__fail(c, at, WK_ECORRUPT, \"missing required field\", \"\");\n"
    "    return WK_OK;\n"
    "}\n"
    "\n"
    "/* Checks that j is an array and allocates its zeroed (= empty) items. */\n"
    "static int @__array(@__ctx *c, const @__path *at, const json_t *j, size_t size, void "
    "**items, size_t *len)\n"
    "{\n"
    "    size_t n;\n"
    "    *items = NULL;\n"
    "    if (!json_is_array(j))\n"
    "        return @__fail(c, at, WK_ECORRUPT, \"expected an array, got \", "
    "@__type_name(j));\n"
    "    n = json_array_size(j);\n"
    "    if (n) {\n"
    "        *items = calloc(n, size);\n"
    "        if (!*items)\n"
    "            return @__fail(c, at, WK_ENOMEM, \"out of memory\", \"\");\n"
    "    }\n"
    "    *len = n;\n"
    "    return WK_OK;\n"
    "}\n"
    "\n"
    "/* JSON text into a malloc'ed buffer (json_dump_callback). */\n"
    "typedef struct @__buf {\n"
    "    char *data;\n"
    "    size_t len, cap;\n"
    "} @__buf;\n"
    "\n"
    "static int @__dump(const char *text, size_t size, void *data)\n"
    "{\n"
    "    @__buf *b = data;\n"
    "    if (b->cap - b->len < size + 1) {\n"
    "        size_t cap = b->cap ? b->cap : 256;\n"
    "        char *p;\n"
    "        while (cap - b->len < size + 1)\n"
    "            cap *= 2;\n"
    "        p = realloc(b->data, cap);\n"
    "        if (!p)\n"
    "            return -1;\n"
    "        b->data = p;\n"
    "        b->cap = cap;\n"
    "    }\n"
    "    memcpy(b->data + b->len, text, size);\n"
    "    b->len += size;\n"
    "    b->data[b->len] = '\\0';\n"
    "    return 0;\n"
    "}\n"
    "\n"
    "/* The compact JSON text of root in a new buffer. */\n"
    "static int @__to_text(@__ctx *c, json_t *root, char **json, size_t *len)\n"
    "{\n"
    "    @__buf b = {NULL, 0, 0};\n"
    "    if (json_dump_callback(root, @__dump, &b, JSON_COMPACT) != 0) {\n"
    "        free(b.data);\n"
    "        return @__fail(c, NULL, WK_ENOMEM, \"out of memory\", \"\");\n"
    "    }\n"
    "    *json = b.data;\n"
    "    if (len)\n"
    "        *len = b.len;\n"
    "    return WK_OK;\n"
    "}\n"
    "\n";

static const char helper_bool[] =
    "static int @__json_bool(@__ctx *c, const @__path *at, bool v, json_t **out)\n"
    "{\n"
    "    (void)c;\n"
    "    (void)at;\n"
    "    *out = json_boolean(v);\n"
    "    return WK_OK;\n"
    "}\n"
    "\n"
    "static int @__get_bool(@__ctx *c, const @__path *at, const json_t *j, bool *out)\n"
    "{\n"
    "    if (!json_is_boolean(j))\n"
    "        return @__fail(c, at, WK_ECORRUPT, \"expected a boolean, got \", "
    "@__type_name(j));\n"
    "    *out = json_is_true(j);\n"
    "    return WK_OK;\n"
    "}\n"
    "\n";

static const char helper_int_common[] =
    "/* An integer in [min, max]. */\n"
    "static int @__get_integer(@__ctx *c, const @__path *at, const json_t *j, json_int_t "
    "min, json_int_t max, const char *type, json_int_t *out)\n"
    "{\n"
    "    if (!json_is_integer(j))\n"
    "        return @__fail(c, at, WK_ECORRUPT, \"expected an integer, got \", "
    "@__type_name(j));\n"
    "    *out = json_integer_value(j);\n"
    "    if (*out < min || *out > max)\n"
    "        return @__fail(c, at, WK_ECORRUPT, \"integer out of range for \", type);\n"
    "    return WK_OK;\n"
    "}\n"
    "\n";

static const char helper_i32[] =
    "static int @__json_i32(@__ctx *c, const @__path *at, int32_t v, json_t **out)\n"
    "{\n"
    "    *out = json_integer(v);\n"
    "    if (!*out)\n"
    "        return @__fail(c, at, WK_ENOMEM, \"out of memory\", \"\");\n"
    "    return WK_OK;\n"
    "}\n"
    "\n"
    "static int @__get_i32(@__ctx *c, const @__path *at, const json_t *j, int32_t *out)\n"
    "{\n"
    "    json_int_t v = 0;\n"
    "    int rc = @__get_integer(c, at, j, INT32_MIN, INT32_MAX, \"i32\", &v);\n"
    "    *out = (int32_t)v;\n"
    "    return rc;\n"
    "}\n"
    "\n";

static const char helper_u32[] =
    "static int @__json_u32(@__ctx *c, const @__path *at, uint32_t v, json_t **out)\n"
    "{\n"
    "    *out = json_integer(v);\n"
    "    if (!*out)\n"
    "        return @__fail(c, at, WK_ENOMEM, \"out of memory\", \"\");\n"
    "    return WK_OK;\n"
    "}\n"
    "\n"
    "static int @__get_u32(@__ctx *c, const @__path *at, const json_t *j, uint32_t *out)\n"
    "{\n"
    "    json_int_t v = 0;\n"
    "    int rc = @__get_integer(c, at, j, 0, UINT32_MAX, \"u32\", &v);\n"
    "    *out = (uint32_t)v;\n"
    "    return rc;\n"
    "}\n"
    "\n";

static const char helper_digits[] =
    "/* Decimal digits (no sign, no leading zero) up to limit into *out. */\n"
    "static bool @__digits(const char *s, uint64_t limit, uint64_t *out)\n"
    "{\n"
    "    uint64_t v = 0;\n"
    "    if (!*s || (s[0] == '0' && s[1]))\n"
    "        return false;\n"
    "    for (; *s; s++) {\n"
    "        unsigned d = (unsigned)(*s - '0');\n"
    "        if (*s < '0' || *s > '9' || v > (limit - d) / 10)\n"
    "            return false;\n"
    "        v = v * 10 + d;\n"
    "    }\n"
    "    *out = v;\n"
    "    return true;\n"
    "}\n"
    "\n";

static const char helper_i64[] =
    "/* i64 travels as a decimal string (exact in every language). */\n"
    "static int @__json_i64(@__ctx *c, const @__path *at, int64_t v, json_t **out)\n"
    "{\n"
    "    char text[24];\n"
    "    snprintf(text, sizeof(text), \"%lld\", (long long)v);\n"
    "    *out = json_string_nocheck(text);\n"
    "    if (!*out)\n"
    "        return @__fail(c, at, WK_ENOMEM, \"out of memory\", \"\");\n"
    "    return WK_OK;\n"
    "}\n"
    "\n"
    "static int @__get_i64(@__ctx *c, const @__path *at, const json_t *j, int64_t *out)\n"
    "{\n"
    "    const char *s;\n"
    "    uint64_t mag;\n"
    "    bool neg;\n"
    "    if (json_is_integer(j)) {\n"
    "        *out = (int64_t)json_integer_value(j);\n"
    "        return WK_OK;\n"
    "    }\n"
    "    if (!json_is_string(j))\n"
    "        return @__fail(c, at, WK_ECORRUPT, \"expected an i64 (a decimal string or an "
    "integer), got \", @__type_name(j));\n"
    "    s = json_string_value(j);\n"
    "    neg = s[0] == '-';\n"
    "    if (!@__digits(s + neg, neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX, "
    "&mag))\n"
    "        return @__fail(c, at, WK_ECORRUPT, \"not a decimal i64: \", s);\n"
    "    *out = neg ? (int64_t)(0 - mag) : (int64_t)mag;\n"
    "    return WK_OK;\n"
    "}\n"
    "\n";

static const char helper_u64[] =
    "/* u64 travels as a decimal string (exact in every language). */\n"
    "static int @__json_u64(@__ctx *c, const @__path *at, uint64_t v, json_t **out)\n"
    "{\n"
    "    char text[24];\n"
    "    snprintf(text, sizeof(text), \"%llu\", (unsigned long long)v);\n"
    "    *out = json_string_nocheck(text);\n"
    "    if (!*out)\n"
    "        return @__fail(c, at, WK_ENOMEM, \"out of memory\", \"\");\n"
    "    return WK_OK;\n"
    "}\n"
    "\n"
    "static int @__get_u64(@__ctx *c, const @__path *at, const json_t *j, uint64_t *out)\n"
    "{\n"
    "    if (json_is_integer(j)) {\n"
    "        if (json_integer_value(j) < 0)\n"
    "            return @__fail(c, at, WK_ECORRUPT, \"integer out of range for u64\", "
    "\"\");\n"
    "        *out = (uint64_t)json_integer_value(j);\n"
    "        return WK_OK;\n"
    "    }\n"
    "    if (!json_is_string(j))\n"
    "        return @__fail(c, at, WK_ECORRUPT, \"expected a u64 (a decimal string or an "
    "integer), got \", @__type_name(j));\n"
    "    if (!@__digits(json_string_value(j), UINT64_MAX, out))\n"
    "        return @__fail(c, at, WK_ECORRUPT, \"not a decimal u64: \", "
    "json_string_value(j));\n"
    "    return WK_OK;\n"
    "}\n"
    "\n";

static const char helper_f64[] =
    "static int @__json_f64(@__ctx *c, const @__path *at, double v, json_t **out)\n"
    "{\n"
    "    if (!isfinite(v))\n"
    "        return @__fail(c, at, WK_EINVAL, \"not a finite number (JSON has no NaN or "
    "infinity)\", \"\");\n"
    "    *out = json_real(v);\n"
    "    if (!*out)\n"
    "        return @__fail(c, at, WK_ENOMEM, \"out of memory\", \"\");\n"
    "    return WK_OK;\n"
    "}\n"
    "\n"
    "static int @__get_f64(@__ctx *c, const @__path *at, const json_t *j, double *out)\n"
    "{\n"
    "    if (!json_is_number(j))\n"
    "        return @__fail(c, at, WK_ECORRUPT, \"expected a number, got \", "
    "@__type_name(j));\n"
    "    *out = json_number_value(j);\n"
    "    return WK_OK;\n"
    "}\n"
    "\n";

static const char helper_string[] =
    "/* Whether s is valid UTF-8 (no overlong forms, surrogates or values past\n"
    " * U+10FFFF), as JSON requires. */\n"
    "static bool @__utf8_valid(const char *s)\n"
    "{\n"
    "    const unsigned char *p = (const unsigned char *)s;\n"
    "    while (*p) {\n"
    "        uint32_t cp;\n"
    "        int n, i;\n"
    "        if (*p < 0x80) {\n"
    "            p++;\n"
    "            continue;\n"
    "        }\n"
    "        if ((*p & 0xE0) == 0xC0) {\n"
    "            n = 1;\n"
    "            cp = *p & 0x1Fu;\n"
    "        } else if ((*p & 0xF0) == 0xE0) {\n"
    "            n = 2;\n"
    "            cp = *p & 0x0Fu;\n"
    "        } else if ((*p & 0xF8) == 0xF0) {\n"
    "            n = 3;\n"
    "            cp = *p & 0x07u;\n"
    "        } else {\n"
    "            return false;\n"
    "        }\n"
    "        for (i = 1; i <= n; i++) {\n"
    "            if ((p[i] & 0xC0) != 0x80)\n"
    "                return false;\n"
    "            cp = (cp << 6) | (p[i] & 0x3Fu);\n"
    "        }\n"
    "        if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) "
    "||\n"
    "            cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))\n"
    "            return false;\n"
    "        p += n + 1;\n"
    "    }\n"
    "    return true;\n"
    "}\n"
    "\n"
    "static int @__json_string(@__ctx *c, const @__path *at, const char *v, json_t **out)\n"
    "{\n"
    "    if (!v)\n"
    "        return @__fail(c, at, WK_EINVAL, \"the string is NULL\", \"\");\n"
    "    if (!@__utf8_valid(v))\n"
    "        return @__fail(c, at, WK_EINVAL, \"the string is not valid UTF-8\", \"\");\n"
    "    *out = json_string_nocheck(v);\n"
    "    if (!*out)\n"
    "        return @__fail(c, at, WK_ENOMEM, \"out of memory\", \"\");\n"
    "    return WK_OK;\n"
    "}\n"
    "\n"
    "static int @__get_string(@__ctx *c, const @__path *at, const json_t *j, char **out)\n"
    "{\n"
    "    size_t n;\n"
    "    if (!json_is_string(j))\n"
    "        return @__fail(c, at, WK_ECORRUPT, \"expected a string, got \", "
    "@__type_name(j));\n"
    "    n = json_string_length(j);\n"
    "    *out = malloc(n + 1);\n"
    "    if (!*out)\n"
    "        return @__fail(c, at, WK_ENOMEM, \"out of memory\", \"\");\n"
    "    memcpy(*out, json_string_value(j), n + 1);\n"
    "    return WK_OK;\n"
    "}\n"
    "\n";

static const char helper_bytes[] =
    "static const char @__b64[] =\n"
    "    \"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/\";\n"
    "\n"
    "/* bytes travel as standard base64 with padding. */\n"
    "static int @__json_bytes(@__ctx *c, const @__path *at, const @_bytes *v, json_t **out)\n"
    "{\n"
    "    size_t i, k = 0;\n"
    "    char *text;\n"
    "    if (!v->data && v->len)\n"
    "        return @__fail(c, at, WK_EINVAL, \"the bytes are NULL but their length is not "
    "0\", \"\");\n"
    "    text = malloc((v->len + 2) / 3 * 4 + 1);\n"
    "    if (!text)\n"
    "        return @__fail(c, at, WK_ENOMEM, \"out of memory\", \"\");\n"
    "    for (i = 0; i + 2 < v->len; i += 3) {\n"
    "        uint32_t w = (uint32_t)v->data[i] << 16 | (uint32_t)v->data[i + 1] << 8 | "
    "v->data[i + 2];\n"
    "        text[k++] = @__b64[w >> 18];\n"
    "        text[k++] = @__b64[(w >> 12) & 63];\n"
    "        text[k++] = @__b64[(w >> 6) & 63];\n"
    "        text[k++] = @__b64[w & 63];\n"
    "    }\n"
    "    if (i < v->len) {\n"
    "        uint32_t w = (uint32_t)v->data[i] << 16;\n"
    "        if (i + 1 < v->len)\n"
    "            w |= (uint32_t)v->data[i + 1] << 8;\n"
    "        text[k++] = @__b64[w >> 18];\n"
    "        text[k++] = @__b64[(w >> 12) & 63];\n"
    "        text[k++] = i + 1 < v->len ? @__b64[(w >> 6) & 63] : '=';\n"
    "        text[k++] = '=';\n"
    "    }\n"
    "    *out = json_stringn_nocheck(text, k);\n"
    "    free(text);\n"
    "    if (!*out)\n"
    "        return @__fail(c, at, WK_ENOMEM, \"out of memory\", \"\");\n"
    "    return WK_OK;\n"
    "}\n"
    "\n"
    "static int @__b64_value(char ch)\n"
    "{\n"
    "    const char *p = ch ? strchr(@__b64, ch) : NULL;\n"
    "    return p ? (int)(p - @__b64) : -1;\n"
    "}\n"
    "\n"
    "static int @__get_bytes(@__ctx *c, const @__path *at, const json_t *j, @_bytes *out)\n"
    "{\n"
    "    const char *s;\n"
    "    size_t n, i, pad = 0;\n"
    "    uint32_t acc = 0;\n"
    "    int bits = 0;\n"
    "    if (!json_is_string(j))\n"
    "        return @__fail(c, at, WK_ECORRUPT, \"expected a base64 string, got \", "
    "@__type_name(j));\n"
    "    s = json_string_value(j);\n"
    "    n = json_string_length(j);\n"
    "    if (n % 4)\n"
    "        return @__fail(c, at, WK_ECORRUPT, \"invalid base64 (length not a multiple of 4)\", "
    "\"\");\n"
    "    out->data = malloc(n / 4 * 3 + 1);\n"
    "    if (!out->data)\n"
    "        return @__fail(c, at, WK_ENOMEM, \"out of memory\", \"\");\n"
    "    out->len = 0;\n"
    "    for (i = 0; i < n; i++) {\n"
    "        int d = @__b64_value(s[i]);\n"
    "        if (s[i] == '=' && i + 2 >= n) {\n"
    "            pad++;\n"
    "            continue;\n"
    "        }\n"
    "        if (d < 0 || pad)\n"
    "            return @__fail(c, at, WK_ECORRUPT, \"invalid base64\", \"\");\n"
    "        acc = (acc << 6) | (uint32_t)d;\n"
    "        bits += 6;\n"
    "        if (bits >= 8) {\n"
    "            bits -= 8;\n"
    "            out->data[out->len++] = (uint8_t)(acc >> bits);\n"
    "        }\n"
    "    }\n"
    "    return WK_OK;\n"
    "}\n"
    "\n";

static void emit_helpers(const schema *s, outbuf *o)
{
    emit_section(o, "JSON helpers");
    emit_template(o, s, helpers_common);
    if (schema_uses(s, FT_BOOL))
        emit_template(o, s, helper_bool);
    if (schema_uses(s, FT_I32) || schema_uses(s, FT_U32))
        emit_template(o, s, helper_int_common);
    if (schema_uses(s, FT_I32))
        emit_template(o, s, helper_i32);
    if (schema_uses(s, FT_U32))
        emit_template(o, s, helper_u32);
    if (schema_uses(s, FT_I64) || schema_uses(s, FT_U64))
        emit_template(o, s, helper_digits);
    if (schema_uses(s, FT_I64))
        emit_template(o, s, helper_i64);
    if (schema_uses(s, FT_U64))
        emit_template(o, s, helper_u64);
    if (schema_uses(s, FT_F64))
        emit_template(o, s, helper_f64);
    if (schema_uses(s, FT_STRING))
        emit_template(o, s, helper_string);
    if (schema_uses(s, FT_BYTES))
        emit_template(o, s, helper_bytes);
}

/* ------------------------------------------------------------------------
 * Records
 * ---------------------------------------------------------------------- */

/* Helper suffix per field type: @__json_<t>, @__get_<t>. */
static const char *const type_helper[FT_COUNT] = {
    [FT_BOOL] = "bool", [FT_I32] = "i32",       [FT_I64] = "i64",      [FT_U32] = "u32",
    [FT_U64] = "u64",   [FT_F64] = "f64",       [FT_STRING] = "string", [FT_BYTES] = "bytes",
    [FT_RECORD] = NULL};

static bool record_has_arrays(const record *r)
{
    for (size_t i = 0; i < r->nfields; i++) {
        if (r->fields[i].array)
            return true;
    }
    return false;
}

/* Frees one value `expr` (an lvalue) of field f. */
static void emit_free_value(outbuf *o, const field *f, const char *indent, const char *expr)
{
    switch (f->type) {
    case FT_STRING:
        out_printf(o, "%sfree(%s);\n", indent, expr);
        break;
    case FT_BYTES:
        out_printf(o, "%sfree(%s.data);\n", indent, expr);
        break;
    case FT_RECORD:
        out_printf(o, "%s%s_free(&%s);\n", indent, f->rec->fn_prefix, expr);
        break;
    default:
        break;
    }
}

static void emit_record_init_free(const schema *s, const record *r, outbuf *o)
{
    (void)s;
    out_printf(o, "void %s_init(%s *v)\n{\n    if (v)\n        memset(v, 0, sizeof(*v));\n}\n\n",
               r->fn_prefix, r->c_type);
    out_printf(o, "void %s_free(%s *v)\n{\n    if (!v)\n        return;\n", r->fn_prefix,
               r->c_type);
    for (size_t i = 0; i < r->nfields; i++) {
        const field *f = &r->fields[i];
        bool owns = f->type == FT_STRING || f->type == FT_BYTES || f->type == FT_RECORD;
        if (f->array) {
            if (owns) {
                out_printf(o, "    for (size_t i = 0; v->%s && i < v->%s; i++)\n", f->member,
                           f->len_member);
                char expr[512];
                snprintf(expr, sizeof(expr), "v->%s[i]", f->member);
                emit_free_value(o, f, "        ", expr);
            }
            out_printf(o, "    free(v->%s);\n", f->member);
        } else if (owns) {
            char expr[512];
            snprintf(expr, sizeof(expr), "v->%s", f->member);
            emit_free_value(o, f, "    ", expr);
        }
    }
    out_printf(o, "    %s_init(v);\n}\n\n", r->fn_prefix);
}

/* The value to encode: "v->x", "&v->x" (records, bytes), with [i] for elements. */
static void emit_value_expr(outbuf *o, const field *f, bool element)
{
    bool by_ptr = f->type == FT_RECORD || f->type == FT_BYTES;
    out_printf(o, "%sv->%s%s", by_ptr ? "&" : "", f->member, element ? "[i]" : "");
}

static void emit_encode_call(outbuf *o, const schema *s, const field *f, const char *at,
                             bool element)
{
    if (f->type == FT_RECORD)
        out_printf(o, "%s__%s_to_json(c, %s, ", s->service, f->rec->id, at);
    else
        out_printf(o, "%s__json_%s(c, %s, ", s->service, type_helper[f->type], at);
    emit_value_expr(o, f, element);
    out_puts(o, ", &f)");
}

static void emit_to_json(const schema *s, const record *r, outbuf *o)
{
    const char *svc = s->service;
    out_declf(o, "static int %s__%s_to_json(%s__ctx *c, const %s__path *at, const %s *v, "
                 "json_t **out)\n",
              svc, r->id, svc, svc, r->c_type);
    out_puts(o, "{\n");
    out_puts(o, "    json_t *obj = json_object();\n    json_t *f;\n    int rc;\n");
    out_printf(o, "    *out = NULL;\n    if (!obj)\n        return %s__fail(c, at, WK_ENOMEM, "
                  "\"out of memory\", \"\");\n",
               svc);
    for (size_t i = 0; i < r->nfields; i++) {
        const field *fd = &r->fields[i];
        const char *ind = "";
        if (fd->optional)
            out_printf(o, "    if (v->%s) {\n", fd->has_member);
        else
            out_puts(o, "    {\n");
        out_printf(o, "%s    const %s__path at_f = {at, ", ind, svc);
        emit_c_string(o, fd->name);
        out_puts(o, ", 0};\n");
        if (!fd->array) {
            out_printf(o, "%s    if ((rc = ", ind);
            emit_encode_call(o, s, fd, "&at_f", false);
            out_printf(o, ") != WK_OK ||\n%s        (rc = %s__set(c, &at_f, obj, f)) != WK_OK)\n",
                       ind, svc);
            out_printf(o, "%s        goto fail;\n", ind);
        } else {
            out_printf(o, "%s    json_t *a;\n", ind);
            out_printf(o, "%s    if ((rc = %s__new_array(c, &at_f, v->%s, v->%s, &a)) != WK_OK ||\n",
                       ind, svc, fd->member, fd->len_member);
            out_printf(o, "%s        (rc = %s__set(c, &at_f, obj, a)) != WK_OK)\n", ind, svc);
            out_printf(o, "%s        goto fail;\n", ind);
            out_printf(o, "%s    for (size_t i = 0; i < v->%s; i++) {\n", ind, fd->len_member);
            out_printf(o, "%s        const %s__path at_i = {&at_f, NULL, i};\n", ind, svc);
            out_printf(o, "%s        if ((rc = ", ind);
            emit_encode_call(o, s, fd, "&at_i", true);
            out_printf(o, ") != WK_OK ||\n%s            (rc = %s__append(c, &at_i, a, f)) != "
                          "WK_OK)\n",
                       ind, svc);
            out_printf(o, "%s            goto fail;\n", ind);
            out_printf(o, "%s    }\n", ind);
        }
        out_puts(o, "    }\n");
    }
    out_puts(o, "    *out = obj;\n    return WK_OK;\nfail:\n    json_decref(obj);\n    return rc;\n}\n\n");
}

static void emit_decode_call(outbuf *o, const schema *s, const field *f, const char *at,
                             const char *json, bool element)
{
    if (f->type == FT_RECORD)
        out_printf(o, "%s__%s_from_json(c, %s, %s, &v->%s%s)", s->service, f->rec->id, at, json,
                   f->member, element ? "[i]" : "");
    else
        out_printf(o, "%s__get_%s(c, %s, %s, &v->%s%s)", s->service, type_helper[f->type], at,
                   json, f->member, element ? "[i]" : "");
}

static void emit_from_json(const schema *s, const record *r, outbuf *o)
{
    const char *svc = s->service;
    out_declf(o, "static int %s__%s_from_json(%s__ctx *c, const %s__path *at, const json_t *j, "
                 "%s *v)\n",
              svc, r->id, svc, svc, r->c_type);
    out_puts(o, "{\n");
    out_puts(o, "    const json_t *f;\n    int rc;\n");
    if (record_has_arrays(r))
        out_puts(o, "    void *items;\n");
    out_printf(o,
               "    if (!json_is_object(j))\n        return %s__fail(c, at, WK_ECORRUPT, "
               "\"expected an object, got \", %s__type_name(j));\n",
               svc, svc);
    for (size_t i = 0; i < r->nfields; i++) {
        const field *fd = &r->fields[i];
        out_puts(o, "    {\n");
        out_printf(o, "        const %s__path at_f = {at, ", svc);
        emit_c_string(o, fd->name);
        out_puts(o, ", 0};\n");
        out_printf(o, "        if ((rc = %s__member(c, &at_f, j, %s, &f)) != WK_OK)\n", svc,
                   fd->optional ? "false" : "true");
        out_puts(o, "            return rc;\n");
        const char *ind = "        ";
        if (fd->optional) {
            out_puts(o, "        if (f) {\n");
            ind = "            ";
        }
        if (!fd->array) {
            out_printf(o, "%sif ((rc = ", ind);
            emit_decode_call(o, s, fd, "&at_f", "f", false);
            out_printf(o, ") != WK_OK)\n%s    return rc;\n", ind);
        } else {
            out_printf(o, "%sif ((rc = %s__array(c, &at_f, f, sizeof(*v->%s), &items, &v->%s)) != "
                          "WK_OK)\n",
                       ind, svc, fd->member, fd->len_member);
            out_printf(o, "%s    return rc;\n", ind);
            out_printf(o, "%sv->%s = items;\n", ind, fd->member);
            out_printf(o, "%sfor (size_t i = 0; i < v->%s; i++) {\n", ind, fd->len_member);
            out_printf(o, "%s    const %s__path at_i = {&at_f, NULL, i};\n", ind, svc);
            out_printf(o, "%s    if ((rc = ", ind);
            emit_decode_call(o, s, fd, "&at_i", "json_array_get(f, i)", true);
            out_printf(o, ") != WK_OK)\n%s        return rc;\n", ind);
            out_printf(o, "%s}\n", ind);
        }
        if (fd->optional) {
            out_printf(o, "            v->%s = true;\n", fd->has_member);
            out_puts(o, "        }\n");
        }
        out_puts(o, "    }\n");
    }
    out_puts(o, "    return WK_OK;\n}\n\n");
}

static void emit_encode_decode(const schema *s, const record *r, outbuf *o)
{
    const char *svc = s->service;
    out_declf(o, "int %s_encode(const %s *v, char **json, size_t *len, char *err, size_t errlen)\n",
              r->fn_prefix, r->c_type);
    out_printf(o,
               "{\n"
               "    %s__ctx c = {err, errlen};\n"
               "    json_t *root;\n"
               "    int rc;\n"
               "    if (err && errlen)\n"
               "        err[0] = '\\0';\n"
               "    if (len)\n"
               "        *len = 0;\n"
               "    if (!json)\n"
               "        return %s__fail(&c, NULL, WK_EINVAL, \"json is required\", \"\");\n"
               "    *json = NULL;\n"
               "    if (!v)\n"
               "        return %s__fail(&c, NULL, WK_EINVAL, \"v is required\", \"\");\n"
               "    if ((rc = %s__%s_to_json(&c, NULL, v, &root)) != WK_OK)\n"
               "        return rc;\n"
               "    rc = %s__to_text(&c, root, json, len);\n"
               "    json_decref(root);\n"
               "    return rc;\n"
               "}\n\n",
               svc, svc, svc, svc, r->id, svc);
    out_declf(o, "int %s_decode(const char *json, size_t len, %s *v, char *err, size_t errlen)\n",
              r->fn_prefix, r->c_type);
    out_printf(o,
               "{\n"
               "    %s__ctx c = {err, errlen};\n"
               "    json_error_t je;\n"
               "    json_t *root;\n"
               "    int rc;\n"
               "    if (err && errlen)\n"
               "        err[0] = '\\0';\n"
               "    if (!v)\n"
               "        return %s__fail(&c, NULL, WK_EINVAL, \"v is required\", \"\");\n"
               "    %s_init(v);\n"
               "    if (!json && len)\n"
               "        return %s__fail(&c, NULL, WK_EINVAL, \"json is NULL\", \"\");\n"
               "    root = json_loadb(json ? json : \"\", len, JSON_REJECT_DUPLICATES, &je);\n"
               "    if (!root)\n"
               "        return %s__fail(&c, NULL, WK_ECORRUPT, \"not valid JSON: \", je.text);\n"
               "    rc = %s__%s_from_json(&c, NULL, root, v);\n"
               "    json_decref(root);\n"
               "    if (rc != WK_OK)\n"
               "        %s_free(v);\n"
               "    return rc;\n"
               "}\n\n",
               svc, svc, r->fn_prefix, svc, svc, svc, r->id, r->fn_prefix);
}

static void emit_codec(const schema *s, const record *r, outbuf *o)
{
    const char *svc = s->service;
    /* Failures go through wk_codec_fail(), so the typed calls can say in
     * the handle's message where and why ("$.title: missing required
     * field"). */
    out_printf(o, "/* %s as a cache body: its JSON text. */\n", r->c_type);
    out_declf(o,
              "static int %s__%s_codec_encode(const wk_codec *codec, const void *value, "
              "uint8_t **bytes, size_t *len)\n",
              svc, r->id);
    out_printf(o,
               "{\n"
               "    char *json = NULL, err[WK_CODEC_MSG_MAX];\n"
               "    int rc = %s_encode(value, &json, len, err, sizeof(err));\n"
               "    (void)codec;\n"
               "    *bytes = (uint8_t *)json;\n"
               "    return rc == WK_OK ? rc : wk_codec_fail(rc, \"%%s\", err);\n"
               "}\n\n",
               r->fn_prefix);
    out_declf(o,
              "static int %s__%s_codec_decode(const wk_codec *codec, const uint8_t *bytes, "
              "size_t len, void *value)\n",
              svc, r->id);
    out_printf(o,
               "{\n"
               "    char err[WK_CODEC_MSG_MAX];\n"
               "    int rc = %s_decode((const char *)bytes, len, value, err, sizeof(err));\n"
               "    (void)codec;\n"
               "    return rc == WK_OK ? rc : wk_codec_fail(rc, \"%%s\", err);\n"
               "}\n\n",
               r->fn_prefix);
    out_printf(o, "const wk_codec %s = {\n    ", r->codec);
    emit_c_string(o, r->id);
    out_printf(o, ",\n    %s__%s_codec_encode,\n    %s__%s_codec_decode,\n    NULL,\n};\n\n",
               svc, r->id, svc, r->id);
}

static void emit_records(const schema *s, outbuf *o)
{
    if (s->nrecords == 0)
        return;
    emit_helpers(s, o);
    emit_section(o, "Records");
    /* Prototypes first: records may refer to each other through arrays. */
    for (size_t i = 0; i < s->nrecords; i++) {
        const record *r = s->record_order[i];
        out_declf(o,
                  "static int %s__%s_to_json(%s__ctx *c, const %s__path *at, const %s *v, "
                  "json_t **out);\n",
                  s->service, r->id, s->service, s->service, r->c_type);
        out_declf(o,
                  "static int %s__%s_from_json(%s__ctx *c, const %s__path *at, const json_t *j, "
                  "%s *v);\n",
                  s->service, r->id, s->service, s->service, r->c_type);
    }
    out_puts(o, "\n");
    for (size_t i = 0; i < s->nrecords; i++) {
        const record *r = s->record_order[i];
        out_printf(o, "/* %s */\n\n", r->c_type);
        emit_record_init_free(s, r, o);
        emit_to_json(s, r, o);
        emit_from_json(s, r, o);
        emit_encode_decode(s, r, o);
        if (r->used_by_cache)
            emit_codec(s, r, o);
    }
}

/* ------------------------------------------------------------------------
 * Accessors and capabilities
 * ---------------------------------------------------------------------- */

static void emit_signature(outbuf *o, const schema *s, const entity *e, const op_desc *op,
                           const char *first, const char *fn)
{
    outbuf t = {0};
    out_printf(&t, "int %s_%s(%s, ", fn, op->op, first);
    emit_name_params(&t, e);
    out_puts(&t, ", ");
    emit_op_text(&t, s, op->params, e);
    out_puts(&t, ")\n");
    out_declf(o, "%s", t.data ? t.data : "");
    free(t.data);
}

static void emit_accessors(const schema *s, outbuf *o)
{
    emit_section(o, "Typed accessors");
    for (size_t i = 0; i < s->nentities; i++) {
        const entity *e = &s->entities[i];
        size_t nops;
        const op_desc *ops = kind_ops(e, &nops);
        for (size_t k = 0; k < nops; k++) {
            emit_signature(o, s, e, &ops[k], "wk_processor *p", e->fn_prefix);
            outbuf t = {0};
            out_puts(&t, "    return ");
            emit_op_text(&t, s, ops[k].runtime, e);
            out_printf(&t, "(p, &%s, ", e->descriptor);
            emit_name_value(&t, e);
            out_puts(&t, ", ");
            emit_op_text(&t, s, ops[k].args, e);
            out_puts(&t, ");\n");
            out_puts(o, "{\n");
            out_declf(o, "%s", t.data);
            out_puts(o, "}\n\n");
            free(t.data);
        }
    }
}

static const char *grant_macro(grant g)
{
    return g == GRANT_WRITE ? "WK_GRANT_WRITE" : g == GRANT_READ ? "WK_GRANT_READ" : "WK_GRANT_NONE";
}

static void emit_capability(const schema *s, const capability *c, outbuf *o)
{
    const char *svc = s->service;
    out_printf(o, "/* Capability \"%s\" */\n\n", c->id);
    size_t rows = 0;
    for (size_t i = 0; i < s->nentities; i++)
        rows += c->listed[i];
    if (rows) {
        out_printf(o, "static const wk_cap_entry %s__%s_grants[%zu] = {\n", svc, c->id, rows);
        for (size_t i = 0; i < s->nentities; i++) {
            const entity *e = &s->entities[i];
            if (!c->listed[i])
                continue;
            out_printf(o, "    {%s, ", kind_info(e->kind)->macro);
            emit_c_string(o, e->ns);
            out_printf(o, ", %s},\n", grant_macro(c->grants[i]));
        }
        out_puts(o, "};\n\n");
    }
    out_printf(o, "int %s_cap_new(wk_cap **out)\n{\n    return wk_cap_new(out, ", c->c_type);
    emit_c_string(o, c->id);
    if (rows)
        out_printf(o, ", %s, %s__%s_grants, %zu);\n}\n\n", grant_macro(c->default_grant), svc,
                   c->id, rows);
    else
        out_printf(o, ", %s, NULL, 0);\n}\n\n", grant_macro(c->default_grant));

    const char *t = c->c_type;
    out_declf(o, "int %s_open(%s *h, const wk_db_options *opts, char *err, size_t errlen)\n", t,
              t);
    out_printf(o,
               "{\n"
               "    wk_db_options with_cap;\n"
               "    wk_cap *cap;\n"
               "    int rc;\n"
               "    if (!h || !opts)\n"
               "        return WK_EINVAL;\n"
               "    h->db = NULL;\n"
               "    h->p = NULL;\n"
               "    if ((rc = %s_cap_new(&cap)) != WK_OK)\n"
               "        return rc;\n"
               "    with_cap = *opts;\n"
               "    with_cap.capability = cap;\n"
               "    rc = wk_db_open(&h->db, &with_cap, err, errlen);\n"
               "    wk_cap_free(cap);\n"
               "    if (rc == WK_OK)\n"
               "        h->p = wk_db_processor(h->db);\n"
               "    return rc;\n"
               "}\n\n",
               t);
    out_printf(o,
               "int %s_narrow(%s *h, wk_db *db)\n"
               "{\n"
               "    wk_cap *cap;\n"
               "    int rc;\n"
               "    if (!h)\n"
               "        return WK_EINVAL;\n"
               "    h->db = NULL;\n"
               "    h->p = NULL;\n"
               "    if ((rc = %s_cap_new(&cap)) != WK_OK)\n"
               "        return rc;\n"
               "    rc = wk_db_narrow(&h->db, db, cap, NULL);\n"
               "    wk_cap_free(cap);\n"
               "    if (rc == WK_OK)\n"
               "        h->p = wk_db_processor(h->db);\n"
               "    return rc;\n"
               "}\n\n",
               t, t, t);
    out_printf(o,
               "void %s_close(%s *h)\n"
               "{\n"
               "    if (!h)\n"
               "        return;\n"
               "    wk_db_close(h->db);\n"
               "    h->db = NULL;\n"
               "    h->p = NULL;\n"
               "}\n\n",
               t, t);
    for (size_t i = 0; i < s->nentities; i++) {
        const entity *e = &s->entities[i];
        if (c->grants[i] == GRANT_NONE)
            continue;
        size_t nops;
        const op_desc *ops = kind_ops(e, &nops);
        for (size_t k = 0; k < nops; k++) {
            if (ops[k].write && c->grants[i] != GRANT_WRITE)
                continue;
            outbuf first = {0}, fn = {0};
            out_printf(&first, "%s *h", t);
            out_printf(&fn, "%s_%s", t, e->id);
            emit_signature(o, s, e, &ops[k], first.data, fn.data);
            free(first.data);
            free(fn.data);
            outbuf call = {0};
            out_printf(&call, "    return %s_%s(h ? h->p : NULL, ", e->fn_prefix, ops[k].op);
            emit_name_args(&call, e);
            out_puts(&call, ", ");
            /* the op's own parameters, by name */
            const char *args = ops[k].args;
            outbuf plain = {0};
            for (const char *p = args; *p;) {
                if (strncmp(p, "CODEC, ", 7) == 0) {
                    p += 7;
                    continue;
                }
                char ch[2] = {*p++, '\0'};
                out_puts(&plain, ch);
            }
            out_puts(&call, plain.data ? plain.data : "");
            free(plain.data);
            out_puts(&call, ");\n");
            out_puts(o, "{\n");
            out_declf(o, "%s", call.data);
            out_puts(o, "}\n\n");
            free(call.data);
        }
    }
}

void emit_source(const schema *s, outbuf *o)
{
    char file[256];
    snprintf(file, sizeof(file), "%s.c", s->service);
    emit_banner(o, s, file, "typed wakuwaku entities, bodies and capabilities");
    if (s->nrecords) {
        out_puts(o, "#include <math.h>\n#include <stdio.h>\n");
    }
    out_puts(o, "#include <stdlib.h>\n#include <string.h>\n\n");
    if (s->nrecords)
        out_puts(o, "#include <jansson.h>\n\n");
    out_printf(o, "#include \"%s.h\"\n\n", s->service);
    emit_entities(s, o);
    emit_records(s, o);
    emit_accessors(s, o);
    if (s->ncaps)
        emit_section(o, "Capabilities and typed handles");
    for (size_t i = 0; i < s->ncaps; i++)
        emit_capability(s, &s->caps[i], o);
}
