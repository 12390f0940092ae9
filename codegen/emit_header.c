/*
 * codegen/emit_header.c — writes <service>.h. Sections, in this order:
 * banner, includes and version guard; entities; bodies (records); typed
 * accessors per entity; capabilities and their typed handles.
 */
#include <stdlib.h>
#include <string.h>

#include "emit.h"

static void emit_entity_comment(outbuf *o, const entity *e)
{
    const kind_desc *kd = kind_info(e->kind);
    out_printf(o, "/* %s: %s:", e->id, kd->name);
    /* the namespace is printed only when it is printable ASCII */
    bool plain = true;
    for (const char *c = e->ns; *c; c++)
        plain = plain && *c >= 0x20 && *c < 0x7F && !(*c == '/' && c[1] == '*') &&
                !(*c == '*' && c[1] == '/') && !(*c == '?' && c[1] == '?');
    out_puts(o, plain ? e->ns : "(see the schema)");
    out_printf(o, ", names are %s", name_type_text(e->name_type));
    /* the kind's summary, with each {key} replaced by that parameter */
    for (const char *t = kd->summary; *t; t++) {
        size_t k = 0, n = *t == '{' ? strcspn(t + 1, "}") : 0;
        while (n && kd->params[k] && (strlen(kd->params[k]->key) != n ||
                                      strncmp(kd->params[k]->key, t + 1, n) != 0))
            k++;
        if (!n || !kd->params[k]) {
            out_printf(o, "%c", *t);
            continue;
        }
        if (kd->params[k]->rule == RULE_DURATION)
            emit_duration_text(o, e->params[k].ms);
        else
            out_puts(o, e->params[k].text);
        t += n + 1;
    }
    if (kd->has_body) {
        if (e->body)
            out_printf(o, ", body %s", e->body->c_type);
        else
            out_puts(o, ", byte bodies");
    }
    out_puts(o, ". */\n");
}

static void emit_entities(const schema *s, outbuf *o)
{
    emit_section(o, "Entities: one descriptor per entity (kind, namespace, parameters).\n"
                    "Pass them to the runtime's own functions when you need one the typed "
                    "accessors below do not cover.");
    for (size_t i = 0; i < s->nentities; i++) {
        const entity *e = &s->entities[i];
        emit_entity_comment(o, e);
        if (e->description) {
            out_puts(o, "/*\n");
            out_comment_text(o, "", e->description);
            out_puts(o, " */\n");
        }
        out_printf(o, "extern const wk_entity %s;\n", e->descriptor);
    }
    out_puts(o, "\n/* Every entity of the service, in schema order. */\n");
    out_printf(o, "#define %s_ENTITY_COUNT %zu\n", s->service_upper, s->nentities);
    out_printf(o, "extern const wk_entity *const %s_entities[%s_ENTITY_COUNT];\n\n", s->service,
               s->service_upper);
}

static void emit_record(const schema *s, const record *r, outbuf *o)
{
    out_puts(o, "/*\n");
    out_printf(o, " * %s — record \"%s\"", r->c_type, r->id);
    out_puts(o, r->used_by_cache ? " (a cache body).\n" : ".\n");
    if (r->description) {
        out_puts(o, " *\n");
        out_comment_text(o, "", r->description);
    }
    out_puts(o, " */\n");
    out_printf(o, "struct %s {\n", r->c_type);
    for (size_t i = 0; i < r->nfields; i++) {
        const field *f = &r->fields[i];
        if (f->description) {
            out_puts(o, "    /*\n");
            out_comment_text(o, "    ", f->description);
            out_puts(o, "     */\n");
        }
        if (f->optional)
            out_printf(o, "    bool %s; /* whether %s is present */\n", f->has_member,
                       f->member);
        out_puts(o, "    ");
        emit_field_ctype(o, s, f);
        bool ptr = f->type == FT_STRING;
        if (f->array)
            out_printf(o, "%s*%s; /* ", ptr ? "" : " ", f->member);
        else
            out_printf(o, "%s%s; /* ", ptr ? "" : " ", f->member);
        emit_field_schema_type(o, f);
        if (f->member != f->name)
            out_printf(o, " (JSON key \"%s\")", f->name);
        out_puts(o, " */\n");
        if (f->array)
            out_printf(o, "    size_t %s; /* elements in %s */\n", f->len_member, f->member);
    }
    out_puts(o, "};\n\n");
    out_printf(o, "void %s_init(%s *v);\n", r->fn_prefix, r->c_type);
    out_printf(o, "void %s_free(%s *v);\n", r->fn_prefix, r->c_type);
    out_declf(o, "int %s_encode(const %s *v, char **json, size_t *len, char *err, size_t errlen);\n",
              r->fn_prefix, r->c_type);
    out_declf(o, "int %s_decode(const char *json, size_t len, %s *v, char *err, size_t errlen);\n",
              r->fn_prefix, r->c_type);
    if (r->used_by_cache)
        out_printf(o, "extern const wk_codec %s; /* for wk_cache_*_typed() */\n", r->codec);
    out_puts(o, "\n");
}

static void emit_records(const schema *s, outbuf *o)
{
    if (s->nrecords == 0)
        return;
    emit_section(
        o, "Bodies: a C struct per record, and its JSON form.\n"
           "\n"
           "Every record T has four functions:\n"
           "  T_init(v)    set *v to the empty value (all zero: NULL pointers, absent "
           "optional fields, empty arrays). Never fails.\n"
           "  T_free(v)    free everything *v owns (strings, bytes, arrays, nested records) "
           "and T_init() it again; not v itself. NULL is a harmless no-op.\n"
           "  T_encode(v, &json, &len, err, errlen)  the JSON text of *v (UTF-8, compact, keys "
           "in schema order), a new NUL-terminated buffer of *len bytes that the caller frees "
           "with free(). Returns WK_OK, WK_EINVAL (a required string is NULL, a string is "
           "not valid UTF-8, a double is not finite, an array or byte string is NULL with a "
           "length; the message names the field) or WK_ENOMEM; *json is NULL on failure.\n"
           "  T_decode(json, len, v, err, errlen)  parse len bytes of JSON into *v, which is "
           "treated as uninitialised (free its previous value first). Fields the record does "
           "not know are ignored (forward compatibility); a missing required field, a value "
           "of the wrong type or out of range, or bad base64 gives WK_ECORRUPT with a message "
           "naming the field (\"$.address.zip: expected an integer, got a string\"). "
           "Returns WK_OK, WK_EINVAL (NULL v, or NULL json with len > 0), WK_ECORRUPT or "
           "WK_ENOMEM; on failure *v is empty (nothing to free).\n"
           "err, errlen: where the message goes (may be NULL); \"\" on success.\n"
           "\n"
           "JSON form: an object with the schema's field names as keys; bool, i32, u32, f64 "
           "as JSON numbers and booleans; i64 and u64 as decimal strings (\"-42\"), exact in "
           "every language (decoding also accepts integers); string as a string; bytes as "
           "standard base64 with padding; arrays as arrays; records as objects; an absent "
           "optional field is left out (decoding also accepts null).\n"
           "Thread-safety: the functions touch only their arguments.");
    if (schema_uses(s, FT_BYTES)) {
        out_printf(o, "/* A byte string: len bytes at data (malloc'ed; owned by the struct "
                      "holding it). */\n");
        out_printf(o, "typedef struct %s_bytes {\n    uint8_t *data;\n    size_t len;\n} %s_bytes;\n\n",
                   s->service, s->service);
    }
    for (size_t i = 0; i < s->nrecords; i++) {
        const record *r = s->record_order[i];
        out_printf(o, "typedef struct %s %s;\n", r->c_type, r->c_type);
    }
    out_puts(o, "\n");
    for (size_t i = 0; i < s->nrecords; i++)
        emit_record(s, s->record_order[i], o);
}

static void emit_accessors(const schema *s, outbuf *o)
{
    emit_section(o, "Typed accessors: thin wrappers over the runtime, one per query of each "
                    "entity (static inline: a call costs what the runtime call costs).\n"
                    "Each takes the processor first (wk_db_processor(db), or a wrapper such "
                    "as hooks or a batch) and the item's name typed as the schema says, and "
                    "returns what the runtime function named in its comment returns (see "
                    "that function for outcomes, errors and ownership). READ or WRITE is the "
                    "query's effect: the handle's capability must grant it, or the call "
                    "returns WK_EDENIED and sends nothing.");
    for (size_t i = 0; i < s->nentities; i++) {
        const entity *e = &s->entities[i];
        out_printf(o, "/* %s: %s */\n", e->id, kind_info(e->kind)->name);
        size_t nops;
        const op_desc *ops = kind_ops(e, &nops);
        for (size_t k = 0; k < nops; k++) {
            outbuf t = {0};
            out_printf(&t, "%s: ", ops[k].write ? "WRITE" : "READ");
            emit_op_text(&t, s, ops[k].summary, e);
            out_printf(&t, ". See %s().", ops[k].runtime);
            out_note(o, "", t.data);
            free(t.data);
            emit_accessor_definition(o, s, e, &ops[k]);
            out_puts(o, "\n");
        }
        size_t nparts;
        const op_desc *parts = kind_parts(e, &nparts);
        for (size_t k = 0; k < nparts; k++) {
            outbuf t = {0};
            out_puts(&t, "Sends nothing: ");
            emit_op_text(&t, s, parts[k].summary, e);
            out_puts(&t, ".");
            out_note(o, "", t.data);
            free(t.data);
            emit_part_definition(o, s, e, &parts[k]);
            out_puts(o, "\n");
        }
    }
}

static const char *grant_text(grant g)
{
    return g == GRANT_WRITE ? "write" : g == GRANT_READ ? "read" : "none";
}

/* Each query the capability does not grant, as a macro that fails the
 * compile (WK_NOT_GRANTED, wakuwaku/capability.h) with a message naming
 * the function and the grant. */
static bool emit_not_granted(const schema *s, const capability *c, outbuf *o)
{
    bool first = true;
    for (size_t i = 0; i < s->nentities; i++) {
        const entity *e = &s->entities[i];
        size_t nops;
        const op_desc *ops = kind_ops(e, &nops);
        for (size_t k = 0; k < nops; k++) {
            if (c->grants[i] == GRANT_WRITE || (c->grants[i] == GRANT_READ && !ops[k].write))
                continue;
            if (first)
                out_printf(o, "/* Not granted by \"%s\": calling one of these does not "
                              "compile. */\n",
                           c->id);
            first = false;
            out_printf(o, "#define %s_%s_%s(...) \\\n", c->c_type, e->id, ops[k].op);
            out_printf(o, "    WK_NOT_GRANTED(\"%s_%s_%s: capability \\\"%s\\\" \" \\\n",
                       c->c_type, e->id, ops[k].op, c->id);
            if (c->grants[i] == GRANT_NONE)
                out_printf(o, "                   \"grants nothing on %s\")\n", e->id);
            else
                out_printf(o, "                   \"grants only read on %s, and %s is a WRITE "
                              "query\")\n",
                           e->id, ops[k].op);
        }
    }
    return !first;
}

static void emit_capability(const schema *s, const capability *c, outbuf *o)
{
    out_puts(o, "/* ------------------------------------------------------------------------\n");
    out_printf(o, " * Capability \"%s\": default %s", c->id, grant_text(c->default_grant));
    for (size_t i = 0; i < s->nentities; i++) {
        if (c->listed[i])
            out_printf(o, "; %s %s", s->entities[i].id, grant_text(c->grants[i]));
    }
    out_puts(o, "\n");
    if (c->description) {
        out_puts(o, " *\n");
        out_comment_text(o, "", c->description);
    }
    out_puts(o, " * ---------------------------------------------------------------------- */\n\n");

    out_printf(o,
               "/*\n"
               " * %s_cap_new — the runtime capability \"%s\" (wk_cap_new()), for\n"
               " * wk_db_options.capability or wk_db_narrow(). *out is NULL on failure; free\n"
               " * it with wk_cap_free(). Returns WK_OK or WK_ENOMEM.\n"
               " */\n",
               c->c_type, c->id);
    out_printf(o, "int %s_cap_new(wk_cap **out);\n\n", c->c_type);

    out_printf(o,
               "/*\n"
               " * A handle that can do only what \"%s\" grants: the functions below\n"
               " * exist only for the queries it grants (READ queries need read, WRITE\n"
               " * queries write); each query it does not grant is a macro that stops\n"
               " * the compile (WK_NOT_GRANTED). The handle's capability is the\n"
               " * runtime's second line of defence: dispatch checks every query again.\n"
               " *\n"
               " *   db  the handle, opened or narrowed with \"%s\"; owned, closed by\n"
               " *       %s_close().\n"
               " *   p   where calls go: db's processor. You may replace it with a wrapper\n"
               " *       around that processor (hooks, a batch).\n"
               " * Threads: as a wk_db, one thread at a time.\n"
               " */\n",
               c->id, c->id, c->c_type);
    out_printf(o, "typedef struct %s {\n    wk_db *db;\n    wk_processor *p;\n} %s;\n\n",
               c->c_type, c->c_type);
    out_printf(o,
               "/* %s_open — connect with opts (its capability is replaced by\n"
               " * \"%s\"). Returns as wk_db_open(); on failure h->db and h->p are NULL. */\n",
               c->c_type, c->id);
    out_declf(o, "int %s_open(%s *h, const wk_db_options *opts, char *err, size_t errlen);\n",
              c->c_type, c->c_type);
    out_puts(o, "\n");
    out_printf(o,
               "/* %s_narrow — a handle on db's connection narrowed to \"%s\"\n"
               " * (wk_db_narrow(): never more than db may do). Returns as wk_db_narrow(). */\n",
               c->c_type, c->id);
    out_printf(o, "int %s_narrow(%s *h, wk_db *db);\n\n", c->c_type, c->c_type);
    out_printf(o, "/* %s_close — close h->db and clear h. NULL is a harmless no-op. */\n",
               c->c_type);
    out_printf(o, "void %s_close(%s *h);\n\n", c->c_type, c->c_type);

    bool any = false;
    for (size_t i = 0; i < s->nentities; i++) {
        const entity *e = &s->entities[i];
        if (c->grants[i] == GRANT_NONE)
            continue;
        size_t nops;
        const op_desc *ops = kind_ops(e, &nops);
        const char *prefix = NULL;
        for (size_t k = 0; k < nops; k++) {
            if (ops[k].write && c->grants[i] != GRANT_WRITE)
                continue;
            if (!prefix) {
                out_printf(o, "/* %s (%s): as %s_*(). */\n", e->id, grant_text(c->grants[i]),
                           e->fn_prefix);
                prefix = "";
            }
            emit_handle_definition(o, s, c, e, &ops[k]);
            out_puts(o, "\n");
            any = true;
        }
    }
    if (!any)
        out_printf(o, "/* \"%s\" grants no query on this service's entities. */\n\n", c->id);
    if (emit_not_granted(s, c, o))
        out_puts(o, "\n");
}

void emit_header(const schema *s, outbuf *o)
{
    char file[256];
    snprintf(file, sizeof(file), "%s.h", s->service);
    emit_banner(o, s, file, "typed wakuwaku entities, bodies and capabilities");
    out_printf(o, "#ifndef %s_H\n#define %s_H\n\n", s->service_upper, s->service_upper);
    out_puts(o, "#include <stdbool.h>\n#include <stddef.h>\n#include <stdint.h>\n\n");
    out_puts(o, "#include <wakuwaku/wakuwaku.h> /* every kind's header */\n\n");
    out_printf(o,
               "/* Generated for the wakuwaku API %s; a different major version (or an\n"
               " * older library) needs a regenerated file. */\n"
               "#if !defined(WK_VERSION_NUMBER) || WK_VERSION_MAJOR != %d || "
               "WK_VERSION_NUMBER < %d\n"
               "#error \"%s is from wk-codegen %s: regenerate it with your wakuwaku's wk-codegen\"\n"
               "#endif\n\n",
               WK_CODEGEN_VERSION, WK_CODEGEN_VERSION_MAJOR, WK_CODEGEN_VERSION_NUMBER, file,
               WK_CODEGEN_VERSION);
    out_puts(o, "#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n");
    emit_entities(s, o);
    emit_records(s, o);
    emit_accessors(s, o);
    for (size_t i = 0; i < s->ncaps; i++)
        emit_capability(s, &s->caps[i], o);
    out_puts(o, "#ifdef __cplusplus\n}\n#endif\n\n");
    out_printf(o, "#endif /* %s_H */\n", s->service_upper);
}
