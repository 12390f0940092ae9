/*
 * codegen/cg_json.h — the generator's own small JSON reader (cg_json_*; not
 * jansson), which remembers where every value and every object key starts
 * (line:column), for the generator's messages.
 *
 * jansson reports positions only for syntax errors; the checker needs the
 * position of each value it refuses, so the schema is read by this parser
 * instead (jansson is used only by the runtime's body codec, codec/json.c).
 * The tree lives in one arena: cg_json_doc_free() releases everything at
 * once.
 *
 * Columns count characters (UTF-8 code points), from 1, like an editor.
 */
#ifndef WK_CODEGEN_CG_JSON_H
#define WK_CODEGEN_CG_JSON_H

#include <stdbool.h>
#include <stddef.h>

typedef enum cg_json_type {
    CG_JSON_T_NULL,
    CG_JSON_T_BOOL,
    CG_JSON_T_NUMBER,
    CG_JSON_T_STRING,
    CG_JSON_T_ARRAY,
    CG_JSON_T_OBJECT
} cg_json_type;

/* A position in the source text. */
typedef struct cg_json_pos {
    int line; /* from 1 */
    int col;  /* from 1, in characters */
} cg_json_pos;

typedef struct cg_json_value cg_json_value;

/* One member of an object, in source order (duplicates are kept, so the
 * checker can report them). */
typedef struct cg_json_member {
    const char *key; /* NUL-terminated; key_len bytes (may hold NUL) */
    size_t key_len;
    cg_json_pos pos; /* of the key's opening quote */
    cg_json_value *value;
} cg_json_member;

struct cg_json_value {
    cg_json_type type;
    cg_json_pos pos; /* of the value's first character */
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
    cg_json_value **items;
    size_t count;
    cg_json_member *members;
};

/*
 * cg_arena — a bump arena: many small allocations, released at once (a
 * document's tree here; the generator's model in util.c). Start from
 * {0}; cg_arena_alloc() returns `n` bytes aligned for any type (not
 * zeroed), or NULL when memory ran out; cg_arena_free() releases every
 * allocation and leaves the arena empty, ready for reuse.
 */
typedef struct cg_arena {
    struct cg_arena_block *blocks;
} cg_arena;

void *cg_arena_alloc(cg_arena *a, size_t n);
void cg_arena_free(cg_arena *a);

typedef struct cg_json_doc cg_json_doc;

/*
 * cg_json_parse — parse `len` bytes of `text` (one JSON value, surrounded by
 * whitespace only). Returns the document, or NULL with a message in
 * `err` (errlen bytes) and the position in *errpos. Out of memory is
 * reported the same way.
 */
cg_json_doc *cg_json_parse(const char *text, size_t len, char *err, size_t errlen, cg_json_pos *errpos);

/* cg_json_doc_root — the top value. */
const cg_json_value *cg_json_doc_root(const cg_json_doc *doc);

/* cg_json_doc_free — free the document and every value in it. NULL is a no-op. */
void cg_json_doc_free(cg_json_doc *doc);

/* cg_json_type_name — "null", "a boolean", "a number", "a string", "an array",
 * "an object": for "expected X, got Y" messages. */
const char *cg_json_type_name(cg_json_type type);

#endif /* WK_CODEGEN_CG_JSON_H */
