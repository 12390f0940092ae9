/*
 * codegen/emit_source.c — writes <service>.c. Sections, in this order:
 * banner and includes; entity descriptors; records (descriptor tables for
 * the JSON codec of wakuwaku/codec.h, and one-line wrappers over it);
 * capability tables and the typed handles' open, narrow and close (over
 * wk_db_open_granted() / wk_db_narrow_granted()). The typed accessors and
 * the handles' queries are static inline functions in the header
 * (emit_header.c).
 *
 * The generated file holds descriptors and thin wrappers only: the work is
 * in the runtime. Its static names are <service>__<what>: no schema
 * identifier can produce a double underscore (names.h), so they never
 * collide with generated public names.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emit.h"

/* ------------------------------------------------------------------------
 * Entities
 * ---------------------------------------------------------------------- */

static void emit_entities(const schema *s, outbuf *o)
{
    emit_section(o, "Entities");
    for (size_t i = 0; i < s->nentities; i++) {
        const entity *e = &s->entities[i];
        const kind_desc *kd = kind_info(e->kind);
        out_printf(o, "const wk_entity %s = %s(", e->descriptor,
                   e->fair ? kd->fair_macro : kd->entity_macro);
        emit_c_string(o, e->ns);
        for (size_t k = 0; kd->params[k]; k++) {
            if (kd->params[k]->rule == RULE_DURATION)
                out_printf(o, ", %lld", (long long)e->params[k].ms);
            else
                out_printf(o, ", %s", e->params[k].text);
        }
        out_puts(o, ");\n");
    }
    out_printf(o, "\nconst wk_entity *const %s_entities[%s_ENTITY_COUNT] = {\n", s->service,
               s->service_upper);
    for (size_t i = 0; i < s->nentities; i++)
        out_printf(o, "    &%s,\n", s->entities[i].descriptor);
    out_puts(o, "};\n\n");
}

/* ------------------------------------------------------------------------
 * Records: descriptor tables for the JSON codec (wakuwaku/codec.h) and
 * one-line wrappers over it
 * ---------------------------------------------------------------------- */

/* The runtime's name of each field type. */
static const char *const field_type_macro[FT_COUNT] = {
    [FT_BOOL] = "WK_FIELD_BOOL",     [FT_I32] = "WK_FIELD_I32",     [FT_I64] = "WK_FIELD_I64",
    [FT_U32] = "WK_FIELD_U32",       [FT_U64] = "WK_FIELD_U64",     [FT_F64] = "WK_FIELD_F64",
    [FT_STRING] = "WK_FIELD_STRING", [FT_BYTES] = "WK_FIELD_BYTES", [FT_RECORD] = "WK_FIELD_RECORD"};

/* `open`, the `n` items separated by ", ", then `close`: a new line
 * (indented by `indent`) before an item that would pass 100 columns. */
static void emit_wrapped(outbuf *o, const char *open, char *const *items, size_t n,
                         const char *close, size_t indent)
{
    const char *last_line = strrchr(open, '\n');
    size_t col = strlen(last_line ? last_line + 1 : open);
    out_puts(o, open);
    for (size_t i = 0; i < n; i++) {
        if (!items[i]) {
            o->oom = true;
            return;
        }
        /* the item with what follows it on its line: "," or the close */
        size_t w = strlen(items[i]) + (i + 1 < n ? 1 : strcspn(close, "\n"));
        if (i && col + 1 + w > 100) {
            out_printf(o, "\n%*s", (int)indent, "");
            col = indent;
        } else if (i) {
            out_puts(o, " ");
            col++;
        }
        out_printf(o, "%s%s", items[i], i + 1 < n ? "," : close);
        col += w;
    }
}

/* One row "{a, b, …}," of a table, indented by 4. */
static void emit_row(outbuf *o, char *const *items, size_t n)
{
    emit_wrapped(o, "    {", items, n, "},\n", 5);
}

/* "<head> = {a, b, …};" on one line when it fits in 100 columns, else
 * the items on indented lines after "<head> = {". */
static void emit_braced(outbuf *o, const char *head, char *const *items, size_t n)
{
    size_t len = strlen(head) + 6;
    for (size_t i = 0; i < n; i++)
        len += items[i] ? strlen(items[i]) + 2 : 0;
    char *open = text_printf(len <= 100 ? "%s = {" : "%s = {\n    ", head);
    if (!open) {
        o->oom = true;
        return;
    }
    emit_wrapped(o, open, items, n, "};\n", len <= 100 ? 100 : 4);
    free(open);
}

/* emit_braced() with a head and items the caller allocated (NULL where
 * memory ran out), then a blank line; frees them all. */
static void emit_braced_owned(outbuf *o, char *head, char **items, size_t n)
{
    if (head)
        emit_braced(o, head, items, n);
    else
        o->oom = true;
    out_puts(o, "\n");
    free(head);
    for (size_t i = 0; i < n; i++)
        free(items[i]);
}

static void emit_field_row(outbuf *o, const schema *s, const record *r, const field *f)
{
    outbuf key = {0};
    emit_c_string(&key, f->name);
    char *items[7];
    const char *flags = f->optional && f->array ? "WK_FIELD_OPTIONAL | WK_FIELD_ARRAY"
                        : f->optional           ? "WK_FIELD_OPTIONAL"
                        : f->array              ? "WK_FIELD_ARRAY"
                                                : "0";
    items[0] = key.data;
    items[1] = (char *)field_type_macro[f->type];
    items[2] = (char *)flags;
    items[3] = text_printf("offsetof(%s, %s)", r->c_type, f->member);
    items[4] = f->array ? text_printf("offsetof(%s, %s)", r->c_type, f->len_member)
                        : text_printf("0");
    items[5] = f->optional ? text_printf("offsetof(%s, %s)", r->c_type, f->has_member)
                           : text_printf("0");
    items[6] = f->type == FT_RECORD ? text_printf("&%s__%s_desc", s->service, f->rec->id)
                                    : text_printf("NULL");
    emit_row(o, items, 7);
    for (int i = 3; i < 7; i++)
        free(items[i]);
    free(key.data);
}

static void emit_record(const schema *s, const record *r, outbuf *o)
{
    const char *svc = s->service, *t = r->c_type, *fn = r->fn_prefix;
    out_printf(o, "/* %s */\n\n", t);
    out_printf(o, "static const wk_field_desc %s__%s_fields[%zu] = {\n", svc, r->id, r->nfields);
    for (size_t i = 0; i < r->nfields; i++)
        emit_field_row(o, s, r, &r->fields[i]);
    out_puts(o, "};\n");
    outbuf name = {0};
    emit_c_string(&name, r->id);
    char *head = text_printf("static const wk_record_desc %s__%s_desc", svc, r->id);
    char *items[4] = {name.data, text_printf("sizeof(%s)", t),
                      text_printf("%s__%s_fields", svc, r->id), text_printf("%zu", r->nfields)};
    emit_braced_owned(o, head, items, 4);

    char desc[512];
    snprintf(desc, sizeof(desc), "&%s__%s_desc", svc, r->id);
    out_printf(o, "void %s_init(%s *v)\n{\n    wk_record_init(%s, v);\n}\n\n", fn, t, desc);
    out_printf(o, "void %s_free(%s *v)\n{\n    wk_record_free(%s, v);\n}\n\n", fn, t, desc);
    out_declf(o, "int %s_encode(const %s *v, char **json, size_t *len, char *err, size_t errlen)\n",
              fn, t);
    out_puts(o, "{\n");
    out_declf(o, "    return wk_record_encode(%s, v, json, len, err, errlen);\n", desc);
    out_puts(o, "}\n\n");
    out_declf(o, "int %s_decode(const char *json, size_t len, %s *v, char *err, size_t errlen)\n",
              fn, t);
    out_puts(o, "{\n");
    out_declf(o, "    return wk_record_decode(%s, json, len, v, err, errlen);\n", desc);
    out_puts(o, "}\n\n");
    if (!r->used_by_cache)
        return;
    /* A cache body: failures go through wk_codec_fail() (in the runtime),
     * so the typed calls say where and why ("$.title: missing required
     * field"). */
    out_printf(o, "/* %s as a cache body: its JSON text. */\n", t);
    static const struct {
        /* the wk_codec member; its parameters after `codec`; the arguments passed on */
        const char *op, *params, *args;
    } codec_fns[2] = {
        {"encode", "const void *value, uint8_t **bytes, size_t *len", "value, bytes, len"},
        {"decode", "const uint8_t *bytes, size_t len, void *value", "bytes, len, value"},
    };
    for (size_t i = 0; i < 2; i++) {
        out_declf(o, "static int %s__%s_codec_%s(const wk_codec *codec, %s)\n", svc, r->id,
                  codec_fns[i].op, codec_fns[i].params);
        out_printf(o, "{\n    (void)codec;\n");
        out_declf(o, "    return wk_record_body_%s(%s, %s);\n", codec_fns[i].op, desc,
                  codec_fns[i].args);
        out_puts(o, "}\n\n");
    }
    outbuf cname = {0};
    emit_c_string(&cname, r->id);
    char *chead = text_printf("const wk_codec %s", r->codec);
    char *citems[4] = {cname.data, text_printf("%s__%s_codec_encode", svc, r->id),
                       text_printf("%s__%s_codec_decode", svc, r->id), text_printf("NULL")};
    emit_braced_owned(o, chead, citems, 4);
}

static void emit_records(const schema *s, outbuf *o)
{
    if (s->nrecords == 0)
        return;
    emit_section(o, "Records: descriptors for the JSON codec (wakuwaku/codec.h)");
    if (schema_uses(s, FT_BYTES))
        out_printf(o,
                   "/* The codec reads byte strings as wk_codec_bytes. */\n"
                   "_Static_assert(sizeof(%s_bytes) == sizeof(wk_codec_bytes) &&\n"
                   "                   offsetof(%s_bytes, len) == offsetof(wk_codec_bytes, len),\n"
                   "               \"%s_bytes is laid out as wk_codec_bytes\");\n\n",
                   s->service, s->service, s->service);
    out_puts(o, "/* Each field row (wk_field_desc): JSON key, type, flags, offset, then the\n"
                " * offsets of the array length and of the presence flag (0 when unused)\n"
                " * and the nested record. */\n\n");
    /* Declared first: records refer to each other (and to themselves,
     * through arrays). */
    bool referred = false;
    for (size_t i = 0; i < s->nrecords; i++) {
        const record *r = s->record_order[i];
        for (size_t k = 0; k < r->nfields && !referred; k++)
            referred = r->fields[k].type == FT_RECORD;
    }
    if (referred) {
        for (size_t i = 0; i < s->nrecords; i++)
            out_printf(o, "static const wk_record_desc %s__%s_desc;\n", s->service,
                       s->record_order[i]->id);
        out_puts(o, "\n");
    }
    for (size_t i = 0; i < s->nrecords; i++)
        emit_record(s, s->record_order[i], o);
}

/* ------------------------------------------------------------------------
 * Accessors and capabilities
 * ---------------------------------------------------------------------- */

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
    outbuf name = {0};
    emit_c_string(&name, c->id);
    char *head = text_printf("static const wk_cap_table %s__%s_cap", svc, c->id);
    char *items[4] = {name.data, text_printf("%s", grant_macro(c->default_grant)),
                      rows ? text_printf("%s__%s_grants", svc, c->id) : text_printf("NULL"),
                      text_printf("%zu", rows)};
    emit_braced_owned(o, head, items, 4);
    const char *t = c->c_type;
    char table[300];
    snprintf(table, sizeof(table), "&%s__%s_cap", svc, c->id);
    out_printf(o, "int %s_cap_new(wk_cap **out)\n{\n    return wk_cap_new_table(out, %s);\n}\n\n",
               t, table);
    /* open and narrow: the runtime's wk_db_*_granted() */
    out_declf(o, "int %s_open(%s *h, const wk_db_options *opts, char *err, size_t errlen)\n", t,
              t);
    out_puts(o, "{\n    if (!h)\n        return WK_EINVAL;\n");
    out_declf(o, "    return wk_db_open_granted(&h->db, &h->p, opts, %s, err, errlen);\n", table);
    out_puts(o, "}\n\n");
    out_printf(o, "int %s_narrow(%s *h, wk_db *db)\n", t, t);
    out_puts(o, "{\n    if (!h)\n        return WK_EINVAL;\n");
    out_declf(o, "    return wk_db_narrow_granted(&h->db, &h->p, db, %s);\n", table);
    out_puts(o, "}\n\n");
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
}

void emit_source(const schema *s, outbuf *o)
{
    char file[256];
    snprintf(file, sizeof(file), "%s.c", s->service);
    emit_banner(o, s, file, "typed wakuwaku entities, bodies and capabilities");
    if (s->nrecords)
        out_puts(o, "#include <wakuwaku/codec.h>\n\n");
    out_printf(o, "#include \"%s.h\"\n\n", s->service);
    emit_entities(s, o);
    emit_records(s, o);
    if (s->ncaps)
        emit_section(o, "Capabilities and typed handles");
    for (size_t i = 0; i < s->ncaps; i++)
        emit_capability(s, &s->caps[i], o);
}
