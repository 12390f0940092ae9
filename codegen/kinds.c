/*
 * codegen/kinds.c — the built-in kinds: one row each with everything the
 * generator knows about the kind (its names in schemas and C, its entity
 * macro and parameters, the wording of its header comment, whether it has
 * a body, a rule across its parameters) and its operations. Nothing here
 * names a kind: each row is made from its header's schema row
 * (WK_LOCK_SCHEMA, …: wakuwaku/entity.h, "Schema rows") and op lists
 * (WK_LOCK_OPS, …: wakuwaku/query.h, "Operation lists"), where the
 * compiler checks each operation against the runtime's prototype. Each
 * operation becomes a typed accessor; its mode decides which capability
 * handles get it (tests/codegen checks the handles against the runtime's
 * own refusals).
 *
 * check.c, emit_header.c and emit_source.c read these rows and hold no
 * per-kind code. In an op's `params`/`args`, "BODY" stands for the
 * entity's body type and "CODEC" for its codec.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schema.h"

/* The kinds: every public header with an entity part, its entity part
 * alone (op lists, schema rows and the runtime's parameter rules), listed
 * by the generated <wakuwaku/kinds.h> (cmake/wk_kinds.cmake). A rule that
 * needs the runtime's private arithmetic reads it under WK__SCHEMA_RULES
 * (the TokenBucket's units). */
#define WK__SCHEMA_RULES
#include <wakuwaku/entity.h>
#define WK__ENTITY_MACROS_ONLY
#include <wakuwaku/kinds.h>

/* One op_desc per row of a header's list, as written; prepare() derives
 * the accessor's name, parameters and arguments from it. */
#define OP_ROW(k, op_, mode, params, summary_)                                                     \
    {.op = #op_, .write = IS_WRITE_##mode, .runtime = "wk_" #k "_" #op_, .query = #k "." #op_,     \
     .row = #params, .summary = summary_},
#define IS_WRITE_READ false
#define IS_WRITE_WRITE true
#define ONE(k, op, mode, params, summary) +1
/* One op_desc per row of a kind's parts list (WK_X_PARTS). */
#define PART_ROW(k, part, type, field, params, summary_)                                           \
    {.op = #part, .runtime = #type, .query = #k "." #part, .row = #params, .summary = summary_,    \
     .part_type = #type, .part_field = #field},
#define ONE_PART(k, part, type, field, params, summary) +1

/* One kind_desc per schema row (wakuwaku/entity.h, "Schema rows"); every
 * name but the prefix X follows from it. */
#define IGNORE(...)
#define KIND_FIELDS(X, wording, body, rule, fair, parts)                                          \
    .name = WK_KIND_##X, .macro = "WK_KIND_" #X, .entity_macro = "WK_" #X "_ENTITY",               \
    .summary = wording, .check = check_##X, .ops = (op_desc[]){WK_##X##_OPS(OP_ROW)},              \
    .nops = 0 WK_##X##_OPS(ONE), BODY_##body(X), .fair_macro = FAIR_##fair(X), PARTS_##parts(X)
#define BODY_NO_BODY(X) .has_body = false
#define BODY_BODY(X)                                                                               \
    .has_body = true, .typed_ops = (op_desc[]){WK_##X##_TYPED_OPS(OP_ROW)},                        \
    .ntyped_ops = 0 WK_##X##_TYPED_OPS(ONE)
#define PARTS_NO_PARTS(X) .nparts = 0
#define PARTS_PARTS(X)                                                                             \
    .parts = (op_desc[]){WK_##X##_PARTS(PART_ROW)}, .nparts = 0 WK_##X##_PARTS(ONE_PART)
#define FAIR_NO_FAIR(X) NULL
#define FAIR_FAIR(X) "WK_" #X "_FAIR_ENTITY"
#define PARAM_DESC(key_, field_, rule_, presence, default_ms_, elsewhere_)                         \
    &(const param_desc){.key = #key_, .field = #field_, .rule = RULE_##rule_,                      \
                        .required = IS_REQUIRED_##presence, .default_ms = default_ms_,             \
                        .elsewhere = elsewhere_},
#define IS_REQUIRED_REQUIRED true
#define IS_REQUIRED_OPTIONAL false

/* Each kind's rule over its parameters, on a schema's entity. */
#define CHECK_FN(X, wording, body, rule, fair, parts)                                              \
    static int check_##X(const entity *e, char *why, size_t whylen)                                \
    {                                                                                              \
        return rule(e->params, why, whylen);                                                       \
    }
#define KIND_CHECK(X) WK_##X##_SCHEMA(CHECK_FN, IGNORE)
WK__KINDS(KIND_CHECK)

/* The rows, in the order of the prefixes (which messages keep). */
#define KIND_ROW(X)                                                                                \
    {WK_##X##_SCHEMA(KIND_FIELDS, IGNORE), .params = {WK_##X##_SCHEMA(IGNORE, PARAM_DESC) NULL}},
static const kind_desc kinds[] = {WK__KINDS(KIND_ROW)};

#define NKINDS ((int)(sizeof(kinds) / sizeof(kinds[0])))
_Static_assert(NKINDS <= KIND_MAX, "raise KIND_MAX");

/* The last identifier of a parameter declaration ("known" of
 * "const uint8_t known[WK_HASH_LEN]"), n bytes long. */
static const char *param_name(const char *decl, size_t n, size_t *len)
{
    const char *end = memchr(decl, '[', n);
    end = end ? end : decl + n;
    while (end > decl && end[-1] == ' ')
        end--;
    const char *start = end;
    while (start > decl && (isalnum((unsigned char)start[-1]) || start[-1] == '_'))
        start--;
    *len = (size_t)(end - start);
    return start;
}

static void fail(const op_desc *o, const char *why)
{
    fprintf(stderr, "wk-codegen: the list row of %s %s\n", o->runtime, why);
    abort();
}

/* Appends ", " (unless dst is empty) and n bytes of s, without a space
 * after a '*' (a formatter may write "wk_token * token": the row's text
 * is stringified as spelled). */
static void append(char *dst, const char *s, size_t n)
{
    size_t at = strlen(dst);
    if (at)
        memcpy(dst + at, ", ", 2), at += 2;
    for (size_t i = 0; i < n; i++)
        if (!(s[i] == ' ' && i && s[i - 1] == '*'))
            dst[at++] = s[i];
    dst[at] = '\0';
}

/*
 * From the row as written, "(wk_name name, const wk_codec *codec, void
 * *value, bool *found)": the accessor's parameters after the name ("BODY
 * *body, bool *found": a typed function's codec and value become the body
 * record), the runtime call's arguments ("CODEC, body, found") and the
 * accessor's name (without "_typed").
 */
static void derive(op_desc *o)
{
    const char *p = o->row, *name = "(wk_name name";
    size_t len = strlen(p), nl = strlen(name);
    if (strncmp(p, name, nl) != 0 || (p[nl] != ',' && p[nl] != ')'))
        fail(o, "does not start with \"wk_name name\"");
    char *params = calloc(1, len + 16), *args = calloc(1, len + 16);
    if (!params || !args)
        fail(o, "is out of memory");
    bool codec = false;
    for (p += nl; *p == ',';) {
        while (*++p == ' ')
            ;
        size_t n = strcspn(p, ",)"), id_len;
        const char *id = param_name(p, n, &id_len);
        if (id_len == 5 && !strncmp(id, "codec", 5)) {
            append(args, "CODEC", 5);
            codec = true;
        } else if (codec && id_len == 5 && !strncmp(id, "value", 5)) {
            bool in = !strncmp(p, "const ", 6);
            append(params, in ? "const BODY *body" : "BODY *body", in ? 16 : 10);
            append(args, "body", 4);
        } else {
            append(params, p, n);
            append(args, id, id_len);
        }
        p += n;
    }
    o->params = params;
    o->args = args;
    size_t ol = strlen(o->op);
    if (ol > 6 && !strcmp(o->op + ol - 6, "_typed")) {
        char *op = calloc(1, ol);
        if (!op)
            fail(o, "is out of memory");
        o->op = memcpy(op, o->op, ol - 6);
    }
}

/* The accessors of each kind: its rows with a summary, and for an entity
 * with a body, each replaced by the typed row of the same accessor name. */
static struct accessors {
    op_desc *v;
    size_t n;
} bytes_acc[KIND_MAX], typed_acc[KIND_MAX];

static void prepare(void)
{
    static bool done;
    if (done)
        return;
    done = true;
    for (int k = 0; k < NKINDS; k++) {
        const kind_desc *kd = &kinds[k];
        for (size_t i = 0; i < kd->nops; i++)
            derive(&kd->ops[i]);
        for (size_t i = 0; i < kd->ntyped_ops; i++)
            derive(&kd->typed_ops[i]);
        for (size_t i = 0; i < kd->nparts; i++)
            derive(&kd->parts[i]);
        bytes_acc[k].v = calloc(kd->nops, sizeof(op_desc));
        typed_acc[k].v = calloc(kd->nops, sizeof(op_desc));
        if (!bytes_acc[k].v || !typed_acc[k].v)
            fail(kd->ops, "is out of memory");
        for (size_t i = 0; i < kd->nops; i++) {
            const op_desc *o = &kd->ops[i];
            if (!o->summary)
                continue;
            bytes_acc[k].v[bytes_acc[k].n++] = *o;
            for (size_t t = 0; t < kd->ntyped_ops; t++) {
                if (!strcmp(kd->typed_ops[t].op, o->op)) {
                    if (kd->typed_ops[t].write != o->write)
                        fail(&kd->typed_ops[t], "has another mode than the plain row");
                    o = &kd->typed_ops[t];
                }
            }
            typed_acc[k].v[typed_acc[k].n++] = *o;
        }
    }
}

int kind_count(void)
{
    return NKINDS;
}

const kind_desc *kind_info(kind k)
{
    prepare();
    return &kinds[k];
}

const param_desc *const *kind_all_params(void)
{
    static const param_desc *all[KIND_MAX * KIND_PARAMS_MAX + 1];
    static bool done;
    if (!done) {
        size_t n = 0;
        for (int k = 0; k < NKINDS; k++) {
            for (const param_desc *const *p = kinds[k].params; *p; p++) {
                bool seen = false; /* a key several kinds take is listed once */
                for (size_t i = 0; i < n; i++)
                    seen = seen || !strcmp(all[i]->key, (*p)->key);
                if (!seen)
                    all[n++] = *p;
            }
        }
        done = true;
    }
    return all;
}

const op_desc *kind_ops(const entity *e, size_t *count)
{
    prepare();
    const struct accessors *a = e->body && kinds[e->kind].typed_ops ? &typed_acc[e->kind]
                                                                      : &bytes_acc[e->kind];
    *count = a->n;
    return a->v;
}

const op_desc *kind_parts(const entity *e, size_t *count)
{
    prepare();
    *count = kinds[e->kind].nparts;
    return kinds[e->kind].parts;
}
