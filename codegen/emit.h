/*
 * codegen/emit.h — helpers the two emitters share: C spellings of types,
 * names and literals derived from the model. Every text here is built
 * from names decided in check.c/names.c.
 */
#ifndef WK_CODEGEN_EMIT_H
#define WK_CODEGEN_EMIT_H

#include "schema.h"

/* The "/ * ---- * /" section banner both files use. */
void emit_section(outbuf *o, const char *title);

/* The opening comment of a generated file ("billing.h — …, DO NOT EDIT"). */
void emit_banner(outbuf *o, const schema *s, const char *file, const char *what);

/* Name parameters of an accessor: "uint64_t invoice", "const void *key, size_t key_len". */
void emit_name_params(outbuf *o, const entity *e);
/* The same as call arguments: "invoice", "key, key_len". */
void emit_name_args(outbuf *o, const entity *e);
/* The wk_name expression: "wk_name_u64(invoice)". */
void emit_name_value(outbuf *o, const entity *e);
/* The C type of names, for comments: "uint64_t", "string", "bytes". */
const char *name_type_text(name_type t);

/* The signature of an accessor: "<ret> <fn>_<op>(<first>, <name params>,
 * <op params>)" then `end` (";\n" for a prototype, "\n" for a definition),
 * wrapped past 100 columns. */
void emit_op_signature(outbuf *o, const schema *s, const entity *e, const op_desc *op,
                       const char *ret, const char *first, const char *fn, const char *end);

/* A typed accessor as a static inline function: "{ return <runtime>(p,
 * &<descriptor>, <name>, <args>); }". */
void emit_accessor_definition(outbuf *o, const schema *s, const entity *e, const op_desc *op);

/* A typed handle's query as a static inline function:
 * "<handle>_<entity>_<op>(h, …)" calling the accessor with h->p. */
/* A part's constructor (a kind's WK_X_PARTS row): "static inline T
 * svc_e_part(name, params) { return (T){.field = &entity, .name = …}; }". */
void emit_part_definition(outbuf *o, const schema *s, const entity *e, const op_desc *part);
void emit_handle_definition(outbuf *o, const schema *s, const capability *c, const entity *e,
                            const op_desc *op);

/* An op's text with BODY, CODEC and @ (the service) filled in. */
void emit_op_text(outbuf *o, const schema *s, const char *text, const entity *e);

/* A C string literal for arbitrary bytes (escapes quotes, backslashes,
 * non-printable bytes and "??"). */
void emit_c_string(outbuf *o, const char *s);

/* "30 s", "250 ms", "5 min", "2 h": a TTL for comments. */
void emit_duration_text(outbuf *o, int64_t ms);

/* The C type of one value of a field (without array or optional). */
void emit_field_ctype(outbuf *o, const schema *s, const field *f);

/* "string", "u64[]", "address, optional": a field's schema type for comments. */
void emit_field_schema_type(outbuf *o, const field *f);

/* Whether the schema has a record with a field of the given type. */
bool schema_uses(const schema *s, field_type t);

#endif /* WK_CODEGEN_EMIT_H */
