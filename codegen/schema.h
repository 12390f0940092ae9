/*
 * codegen/schema.h — the checked model of a schema, and the three stages
 * of the generator: parse (json.h) → check (check.c: JSON tree → model,
 * every problem reported) → emit (emit_header.c, emit_source.c).
 *
 * Every C identifier the output uses is decided in names.c, once, while
 * checking: the emitters only print names they find in the model.
 */
#ifndef WK_CODEGEN_SCHEMA_H
#define WK_CODEGEN_SCHEMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "json.h"

/* The generator's version: the library's (set by CMake). */
#ifndef WK_CODEGEN_VERSION
#define WK_CODEGEN_VERSION "0.0.0"
#define WK_CODEGEN_VERSION_MAJOR 0
#define WK_CODEGEN_VERSION_NUMBER 0
#endif

typedef enum kind {
    KIND_LOCK,
    KIND_RWLOCK,
    KIND_CACHE,
    KIND_HASHED_CACHE,
    KIND_TOKEN_BUCKET,
    KIND_SETTINGS,
    KIND_COUNT
} kind;

typedef enum name_type {
    NAME_STR,
    NAME_BYTES,
    NAME_U64,
    NAME_I64
} name_type;

typedef enum field_type {
    FT_BOOL,
    FT_I32,
    FT_I64,
    FT_U32,
    FT_U64,
    FT_F64,
    FT_STRING,
    FT_BYTES,
    FT_RECORD,
    FT_COUNT
} field_type;

typedef enum grant {
    GRANT_NONE,
    GRANT_READ,
    GRANT_WRITE
} grant;

typedef struct record record;

typedef struct field {
    const char *name;        /* as in the schema: the JSON key in bodies */
    const char *member;      /* the C member (keyword-escaped) */
    const char *len_member;  /* arrays: "<member>_len" */
    const char *has_member;  /* optional: "has_<member>" */
    field_type type;
    const char *type_name;   /* FT_RECORD: the record's schema id (while checking) */
    record *rec;             /* FT_RECORD */
    bool optional, array;
    const char *description; /* may be NULL */
    json_pos name_pos, type_pos;
} field;

struct record {
    const char *id;
    const char *c_type;      /* <service>_<id> */
    const char *fn_prefix;   /* <service>_<id>: _init, _free, _encode, _decode */
    const char *codec;       /* <service>_<id>_codec */
    field *fields;
    size_t nfields;
    const char *description;
    json_pos pos, id_pos;
    bool used_by_cache;      /* a codec is emitted */
    int emit_order;          /* definitions in dependency order */
    int visit;               /* for the cycle check */
};

typedef struct entity {
    const char *id;
    kind kind;
    const char *ns;
    name_type name_type;
    const char *param;       /* the name parameter (keyword-escaped) */
    const char *param_len;   /* NAME_BYTES: "<param>_len" */
    int64_t ttl_ms;          /* Lock, RwLock, caches */
    double capacity, rate;   /* TokenBucket */
    int64_t period_ms;       /* TokenBucket */
    const char *capacity_text, *rate_text; /* as written (exact output) */
    record *body;            /* caches; NULL: byte bodies */
    const char *description;
    const char *descriptor;  /* <service>_<id>_entity */
    const char *fn_prefix;   /* <service>_<id> */
    json_pos pos, id_pos, ns_pos;
} entity;

typedef struct capability {
    const char *id;
    grant default_grant;
    grant *grants;           /* per entity, in entity order (effective) */
    bool *listed;            /* per entity: listed explicitly in "grants" */
    const char *c_type;      /* <service>_<id> */
    const char *description;
    json_pos pos, id_pos;
} capability;

typedef struct schema {
    const char *service;
    const char *service_upper;
    const char *source_name;  /* basename of the schema file, for banners */
    const char *description;
    entity *entities;
    size_t nentities;
    record *records;
    size_t nrecords;
    record **record_order;    /* records in definition order */
    capability *caps;
    size_t ncaps;
} schema;

/* ------------------------------------------------------------------------
 * Kinds and their queries (kinds.c): the one table the emitters follow.
 * ---------------------------------------------------------------------- */

/* One query of a kind, as a generated accessor. */
typedef struct op_desc {
    const char *op;       /* accessor suffix: "try", "inspect", … */
    bool write;           /* WRITE effect (else READ) */
    const char *runtime;  /* the runtime function it calls */
    const char *params;   /* extra parameters (declaration text), after the name */
    const char *args;     /* the same parameters as call arguments */
    const char *summary;  /* one-line comment */
    const char *see;      /* the runtime function to read about; NULL: runtime */
} op_desc;

typedef struct kind_desc {
    const char *name;        /* "Lock": as in schemas and keys */
    const char *macro;       /* "WK_KIND_LOCK" */
    const char *header;      /* "wakuwaku/lock.h" */
    bool has_ttl, has_bucket, has_body;
} kind_desc;

const kind_desc *kind_info(kind k);
/* The ops of entity `e` (depends on kind and on whether it has a body). */
const op_desc *kind_ops(const entity *e, size_t *count);

/* ------------------------------------------------------------------------
 * Diagnostics
 * ---------------------------------------------------------------------- */

typedef struct diag {
    const char *file;  /* as given on the command line */
    FILE *to;
    int errors;
} diag;

/* "<file>:<line>:<col>: error: <path>: <message>" */
void diag_error(diag *d, json_pos pos, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ------------------------------------------------------------------------
 * Stages
 * ---------------------------------------------------------------------- */

/* Arena for the model's strings and arrays (check.c); freed with the model. */
typedef struct pool pool;
pool *pool_new(void);
void pool_free(pool *p);
void *pool_alloc(pool *p, size_t n);  /* zeroed; aborts the run on OOM */
char *pool_strdup(pool *p, const char *s);
char *pool_printf(pool *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * check_schema — turn the JSON tree into *out, reporting every problem to
 * `d`. Returns true when there were none (then *out is complete).
 */
bool check_schema(const json_value *root, const char *source_name, pool *pl, diag *d,
                  schema *out);

/* Output buffer (emit.c). */
typedef struct outbuf {
    char *data;
    size_t len, cap;
    bool oom;
} outbuf;

void out_printf(outbuf *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void out_puts(outbuf *o, const char *s);
/* A comment body line-wrapped as " * text" lines, with "*" "/" made safe. */
void out_comment_text(outbuf *o, const char *indent, const char *text);

/* A declaration line, wrapped at parameter commas past 100 columns. */
void out_declf(outbuf *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Copies src to dst, passing lines longer than 100 columns through
 * out_declf(). */
void out_reflow(outbuf *dst, const outbuf *src);
/* A comment: one line when it fits, else a block. */
void out_note(outbuf *o, const char *indent, const char *text);

void emit_header(const schema *s, outbuf *o);
void emit_source(const schema *s, outbuf *o);

#endif /* WK_CODEGEN_SCHEMA_H */
