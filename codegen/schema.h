/*
 * codegen/schema.h — the checked model of a schema, and the three stages
 * of the generator: parse (cg_json.h) → check (check.c: JSON tree → model,
 * every problem reported) → emit (emit_header.c, emit_source.c).
 *
 * Naming rules (validity, keyword escaping, collisions) live in names.c,
 * and the public C names are decided while checking (the model's c_type,
 * fn_prefix, descriptor, …). The emitters compose a few more from those:
 * "<service>__<id>_…" statics (a double underscore, which no schema
 * identifier can produce) and "<handle>_<entity>_<op>" handle functions,
 * which check.c claims in the collision table too.
 */
#ifndef WK_CODEGEN_SCHEMA_H
#define WK_CODEGEN_SCHEMA_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cg_json.h"

/* The generator's version: the library's (set by CMake). */
#ifndef WK_CODEGEN_VERSION
#define WK_CODEGEN_VERSION "0.0.0"
#define WK_CODEGEN_VERSION_MAJOR 0
#define WK_CODEGEN_VERSION_NUMBER 0
#endif

/* A kind: the index of its row in codegen/kinds.c (kind_info()). */
typedef int kind;
/* At most this many kinds (the rows are counted at run time). */
#define KIND_MAX 64

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
    cg_json_pos name_pos, type_pos;
} field;

struct record {
    const char *id;
    const char *c_type;      /* <service>_<id> */
    const char *fn_prefix;   /* <service>_<id>: _init, _free, _encode, _decode */
    const char *codec;       /* <service>_<id>_codec */
    field *fields;
    size_t nfields;
    const char *description;
    cg_json_pos pos, id_pos;
    bool used_by_cache;      /* a codec is emitted */
    int emit_order;          /* definitions in dependency order */
    int visit;               /* for the cycle check */
};

/* How a kind parameter is read and checked (check.c). */
typedef enum param_rule {
    RULE_DURATION, /* "250ms", "30s", "5m", "1h" or whole milliseconds; > 0 */
    RULE_POSITIVE  /* a finite number > 0, printed exactly */
} param_rule;

/* The value of one parameter of an entity. */
typedef struct param_value {
    int64_t ms;        /* RULE_DURATION */
    double num;        /* RULE_POSITIVE */
    const char *text;  /* RULE_POSITIVE: its exact C spelling ("20.0") */
} param_value;

#define KIND_PARAMS_MAX 3

typedef struct entity {
    const char *id;
    kind kind;
    const char *ns;
    name_type name_type;
    const char *param;       /* the name parameter (keyword-escaped) */
    const char *param_len;   /* NAME_BYTES: "<param>_len" */
    param_value params[KIND_PARAMS_MAX]; /* as the kind's params (kind_desc) */
    record *body;            /* caches; NULL: byte bodies */
    bool fair;               /* "fair": true (kinds with a fair_macro) */
    const char *description;
    const char *descriptor;  /* <service>_<id>_entity */
    const char *fn_prefix;   /* <service>_<id> */
    cg_json_pos pos, id_pos, ns_pos;
} entity;

typedef struct capability {
    const char *id;
    grant default_grant;
    grant *grants;           /* per entity, in entity order (effective) */
    bool *listed;            /* per entity: listed explicitly in "grants" */
    const char *c_type;      /* <service>_<id> */
    const char *description;
    cg_json_pos pos, id_pos;
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

/* One operation of a kind: a row of its header's op list (wakuwaku/query.h,
 * "Operation lists"), and what the accessor made from it needs. */
typedef struct op_desc {
    const char *op;       /* the accessor's suffix: "try", "get" (of get_typed) */
    bool write;           /* WRITE mode (else READ) */
    const char *runtime;  /* the runtime function it calls: "wk_lock_try" */
    const char *query;    /* the query's name: "lock.try" */
    const char *row;      /* the row's parameters as written: "(wk_name name, …)" */
    const char *summary;  /* one line; NULL: no accessor */
    const char *params;   /* the accessor's parameters after the name (declaration text) */
    const char *args;     /* the runtime call's arguments after the name */
    /* A part (a kind's WK_X_PARTS row) is a constructor, not a query: it
     * returns a `part_type` whose `part_field` points at the entity and
     * whose other fields are named as its parameters. NULL: an op. */
    const char *part_type;
    const char *part_field;
} op_desc;

/*
 * One parameter of a kind: its schema key, the wk_entity field it fills,
 * how it is checked, and what to say when another kind is given it.
 */
typedef struct param_desc {
    const char *key;        /* the schema key: "ttl" */
    const char *field;      /* the wk_entity field (and macro argument): "ttl_ms" */
    param_rule rule;
    bool required;          /* else default_ms applies (RULE_DURATION) */
    int64_t default_ms;
    const char *elsewhere;  /* "unknown key" reason on a kind without it; %s: that kind */
} param_desc;

/*
 * Everything the generator knows about a kind, in one row: check.c,
 * emit_header.c and emit_source.c follow it and hold no per-kind code.
 */
typedef struct kind_desc {
    const char *name;         /* "Lock": as in schemas and keys */
    const char *macro;        /* "WK_KIND_LOCK" */
    const char *entity_macro; /* "WK_LOCK_ENTITY": takes (ns, <params in order>) */
    const param_desc *params[KIND_PARAMS_MAX + 1]; /* NULL-terminated */
    /* the header comment after "names are …": {key} is the parameter's
     * value (durations as "30 s"), e.g. ", lease {ttl}" */
    const char *summary;
    bool has_body;
    /* a rule over several parameters, or NULL: on failure returns the index
     * of the parameter to blame and writes why (check.c reports it) */
    int (*check)(const entity *e, char *why, size_t whylen);
    /* its operations: the rows of its op list, and (a kind with a body)
     * of its typed list; kind_ops() gives an entity's accessors */
    op_desc *ops;
    size_t nops;
    op_desc *typed_ops;
    size_t ntyped_ops;
    /* its parts (WK_X_PARTS): constructors each entity of it gets */
    op_desc *parts;
    size_t nparts;
    /* the initialiser of a fair entity ("fair": true), taking the same
     * arguments as entity_macro; NULL: the kind has no fair mode */
    const char *fair_macro;
} kind_desc;

/* The kind of row k (0 <= k < kind_count()). */
const kind_desc *kind_info(kind k);
int kind_count(void);
/* Every parameter of any kind, each once, in table order (NULL-terminated). */
const param_desc *const *kind_all_params(void);
/* The accessors of entity `e`: its kind's operations with a summary, the
 * typed rows instead where it has a body record. */
const op_desc *kind_ops(const entity *e, size_t *count);
/* The parts (constructors) of entity `e`'s kind. */
const op_desc *kind_parts(const entity *e, size_t *count);

/* ------------------------------------------------------------------------
 * Diagnostics
 * ---------------------------------------------------------------------- */

typedef struct diag {
    const char *file;  /* as given on the command line */
    FILE *to;
    int errors;
} diag;

/* "<file>:<line>:<col>: error: <path>: <message>" */
void diag_error(diag *d, cg_json_pos pos, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ------------------------------------------------------------------------
 * Stages
 * ---------------------------------------------------------------------- */

/* read_file — the whole file at `path`, malloc()ed and NUL-terminated (the
 * caller frees it), its length in *len; NULL with errno set when it cannot
 * be read (util.c; also used by tools/wk). */
char *read_file(const char *path, size_t *len);

/* The schema's spelling of field f's type: "u64", "string", or the id of
 * its record (check.c). */
const char *field_type_name(const field *f);

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
bool check_schema(const cg_json_value *root, const char *source_name, pool *pl, diag *d,
                  schema *out);

/* Output buffer (emit.c). */
typedef struct outbuf {
    char *data;
    size_t len, cap;
    bool oom;
} outbuf;

/* A malloc'ed printf text, NULL when memory ran out (or the format
 * failed); the caller frees it. */
char *text_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
char *text_vprintf(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));

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
