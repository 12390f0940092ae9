/*
 * tools/wk/body.c — an entity's typed body: the check of a body before
 * `put` stores it, and its fields for `help ENTITY`.
 *
 * The check is the generated clients' own decode: the library's JSON codec
 * (wakuwaku/codec.h) over record descriptors built here from the schema's
 * records, as wk-codegen would emit them, with a layout of wk's own (the
 * decoded value is freed at once; only the verdict and the message
 * matter). So a body put accepts is one every generated client decodes,
 * and a refusal carries the decoder's path: `$.name: missing required
 * field`.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <wakuwaku/codec.h>

#include "tools/wk/wk.h"

/* The codec's type of each schema field type. */
static const wk_field_type codec_type[FT_COUNT] = {
    [FT_BOOL] = WK_FIELD_BOOL,     [FT_I32] = WK_FIELD_I32,     [FT_I64] = WK_FIELD_I64,
    [FT_U32] = WK_FIELD_U32,       [FT_U64] = WK_FIELD_U64,     [FT_F64] = WK_FIELD_F64,
    [FT_STRING] = WK_FIELD_STRING, [FT_BYTES] = WK_FIELD_BYTES, [FT_RECORD] = WK_FIELD_RECORD};

/* Every member here (bool … int64_t, double, pointers, wk_codec_bytes)
 * is aligned by 8. */
#define SLOT_ALIGN 8

/* The descriptors of a schema's records, index for index. */
typedef struct layout {
    const schema *s;
    wk_record_desc *desc;
    wk_field_desc **fields;
    bool *built;
} layout;

/* The offset of the next member of `size` bytes after *end. */
static size_t slot(size_t *end, size_t size)
{
    size_t at = (*end + SLOT_ALIGN - 1) / SLOT_ALIGN * SLOT_ALIGN;
    *end = at + size;
    return at;
}

/* Record i's descriptor, and those it holds by value first (the checker
 * refuses a record that holds itself other than through an array). */
static void build(layout *l, size_t i)
{
    if (l->built[i])
        return;
    l->built[i] = true;
    const record *r = &l->s->records[i];
    static const size_t value_size[FT_COUNT] = {
        [FT_BOOL] = sizeof(bool),     [FT_I32] = sizeof(int32_t),
        [FT_I64] = sizeof(int64_t),   [FT_U32] = sizeof(uint32_t),
        [FT_U64] = sizeof(uint64_t),  [FT_F64] = sizeof(double),
        [FT_STRING] = sizeof(char *), [FT_BYTES] = sizeof(wk_codec_bytes)};
    size_t end = 0;
    for (size_t k = 0; k < r->nfields; k++) {
        const field *f = &r->fields[k];
        wk_field_desc *fd = &l->fields[i][k];
        size_t size = value_size[f->type];
        fd->key = f->name;
        fd->type = codec_type[f->type];
        fd->flags = (f->optional ? WK_FIELD_OPTIONAL : 0) | (f->array ? WK_FIELD_ARRAY : 0);
        if (f->type == FT_RECORD) {
            size_t j = (size_t)(f->rec - l->s->records);
            fd->record = &l->desc[j];
            if (!f->array)
                build(l, j), size = l->desc[j].size;
        }
        fd->offset = slot(&end, f->array ? sizeof(void *) : size);
        if (f->array)
            fd->len_offset = slot(&end, sizeof(size_t));
        if (f->optional)
            fd->has_offset = slot(&end, sizeof(bool));
    }
    size_t size = slot(&end, 0); /* the end, aligned; a record of no fields takes a slot */
    l->desc[i] = (wk_record_desc){r->id, size ? size : SLOT_ALIGN, l->fields[i], r->nfields};
}

static void layout_free(layout *l)
{
    for (size_t i = 0; l->fields && i < l->s->nrecords; i++)
        free(l->fields[i]);
    free(l->fields);
    free(l->desc);
    free(l->built);
}

int body_check(const schema *s, const entity *e, const char *data, size_t len, char *msg,
               size_t cap)
{
    if (!e->body)
        return WK_OK;
    size_t n = s->nrecords;
    layout l = {s, calloc(n, sizeof(*l.desc)), calloc(n, sizeof(*l.fields)),
                calloc(n, sizeof(*l.built))};
    bool ok = l.desc && l.fields && l.built;
    for (size_t i = 0; ok && i < n; i++)
        ok = (l.fields[i] = calloc(s->records[i].nfields + 1, sizeof(**l.fields))) != NULL;
    size_t root = (size_t)(e->body - s->records);
    if (ok)
        build(&l, root);
    void *value = ok ? calloc(1, l.desc[root].size) : NULL;
    int rc = value ? wk_record_decode(&l.desc[root], data, len, value, msg, cap) : WK_ENOMEM;
    if (value)
        wk_record_free(&l.desc[root], value);
    free(value);
    layout_free(&l);
    if (rc == WK_ENOMEM)
        snprintf(msg, cap, "out of memory");
    return rc;
}

/* The fields of r, indented by `indent`; `up`: the records r is nested
 * in (a record met again through an array is not unfolded twice). */
typedef struct chain {
    const struct chain *up;
    const record *r;
} chain;

static void fields_help(FILE *to, const record *r, int indent, const chain *up)
{
    chain here = {up, r};
    for (size_t k = 0; k < r->nfields; k++) {
        const field *f = &r->fields[k];
        fprintf(to, "%*s%s: %s%s, %s%s%s\n", indent, "", f->name, field_type_name(f),
                f->array ? "[]" : "", f->optional ? "optional" : "required",
                f->description ? " — " : "", f->description ? f->description : "");
        if (f->type != FT_RECORD)
            continue;
        const chain *c = &here;
        while (c && c->r != f->rec)
            c = c->up;
        if (c)
            fprintf(to, "%*s(%s, as above)\n", indent + 2, "", f->rec->id);
        else
            fields_help(to, f->rec, indent + 2, &here);
    }
}

void body_help(FILE *to, const entity *e)
{
    if (!e->body)
        return;
    fprintf(to,
            "  body: %s, JSON (put refuses a body that does not decode as it; --raw\n"
            "  stores the bytes unchecked):\n",
            e->body->id);
    fields_help(to, e->body, 4, NULL);
}
