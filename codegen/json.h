/*
 * codegen/json.h — a small JSON reader that remembers where every value
 * and every object key starts (line:column), for the generator's messages.
 *
 * jansson reports positions only for syntax errors; the checker needs the
 * position of each value it refuses, so the schema is read by this parser
 * instead (generated code uses jansson for bodies). The tree lives in one
 * arena: json_doc_free() releases everything at once.
 *
 * Columns count characters (UTF-8 code points), from 1, like an editor.
 */
#ifndef WK_CODEGEN_JSON_H
#define WK_CODEGEN_JSON_H

#include <stdbool.h>
#include <stddef.h>

typedef enum json_type {
    JSON_T_NULL,
    JSON_T_BOOL,
    JSON_T_NUMBER,
    JSON_T_STRING,
    JSON_T_ARRAY,
    JSON_T_OBJECT
} json_type;

/* A position in the source text. */
typedef struct json_pos {
    int line; /* from 1 */
    int col;  /* from 1, in characters */
} json_pos;

typedef struct json_value json_value;

/* One member of an object, in source order (duplicates are kept, so the
 * checker can report them). */
typedef struct json_member {
    const char *key; /* NUL-terminated; key_len bytes (may hold NUL) */
    size_t key_len;
    json_pos pos; /* of the key's opening quote */
    json_value *value;
} json_member;

struct json_value {
    json_type type;
    json_pos pos; /* of the value's first character */
    bool boolean;
    /* Numbers: the source text, its value, and whether it is written as an
     * integer (no fraction, no exponent) that fits in a long long. */
    const char *num_text;
    double num;
    bool is_int;
    long long int_val;
    /* Strings: decoded UTF-8, NUL-terminated; str_len bytes (may hold NUL). */
    const char *str;
    size_t str_len;
    /* Arrays and objects. */
    json_value **items;
    size_t count;
    json_member *members;
};

typedef struct json_doc json_doc;

/*
 * json_parse — parse `len` bytes of `text` (one JSON value, surrounded by
 * whitespace only). Returns the document, or NULL with a message in
 * `err` (errlen bytes) and the position in *errpos. Out of memory is
 * reported the same way.
 */
json_doc *json_parse(const char *text, size_t len, char *err, size_t errlen, json_pos *errpos);

/* json_doc_root — the top value. */
const json_value *json_doc_root(const json_doc *doc);

/* json_doc_free — free the document and every value in it. NULL is a no-op. */
void json_doc_free(json_doc *doc);

/* json_type_name — "null", "a boolean", "a number", "a string", "an array",
 * "an object": for "expected X, got Y" messages. */
const char *json_type_name(json_type type);

#endif /* WK_CODEGEN_JSON_H */
