/*
 * tests/fuzz/fuzz_codec.c — libFuzzer target: arbitrary bytes through the
 * JSON body codec (codec/json.c) against a descriptor table with every
 * field type, optional fields, arrays, a record nested by value and a
 * record holding itself through an array (a tree).
 *
 * Input: the bytes are decoded as a `doc`. Whatever decodes must encode,
 * and its encoding must decode again and encode to the same text (the
 * codec is a fixed point after one round). Any crash, leak, undefined
 * behaviour or broken round trip is a finding.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <wakuwaku/codec.h>

typedef struct point {
    double x, y;
    bool has_label;
    char *label;
} point;

typedef struct node node;
struct node {
    char *name;
    node *children;
    size_t children_len;
};

typedef struct doc {
    bool flag;
    int32_t small;
    int64_t big;
    uint32_t count;
    uint64_t huge;
    bool has_blob;
    wk_codec_bytes blob;
    point origin;
    bool has_points;
    point *points;
    size_t points_len;
    uint64_t *ids;
    size_t ids_len;
    char **tags;
    size_t tags_len;
    wk_codec_bytes *blobs;
    size_t blobs_len;
    bool has_tree;
    node tree;
} doc;

static const wk_record_desc point_desc, node_desc;

static const wk_field_desc point_fields[] = {
    {"x", WK_FIELD_F64, 0, offsetof(point, x), 0, 0, NULL},
    {"y", WK_FIELD_F64, 0, offsetof(point, y), 0, 0, NULL},
    {"label", WK_FIELD_STRING, WK_FIELD_OPTIONAL, offsetof(point, label), 0,
     offsetof(point, has_label), NULL},
};
static const wk_record_desc point_desc = {"point", sizeof(point), point_fields, 3};

static const wk_field_desc node_fields[] = {
    {"name", WK_FIELD_STRING, 0, offsetof(node, name), 0, 0, NULL},
    {"children", WK_FIELD_RECORD, WK_FIELD_ARRAY, offsetof(node, children),
     offsetof(node, children_len), 0, &node_desc},
};
static const wk_record_desc node_desc = {"node", sizeof(node), node_fields, 2};

static const wk_field_desc doc_fields[] = {
    {"flag", WK_FIELD_BOOL, 0, offsetof(doc, flag), 0, 0, NULL},
    {"small", WK_FIELD_I32, 0, offsetof(doc, small), 0, 0, NULL},
    {"big", WK_FIELD_I64, 0, offsetof(doc, big), 0, 0, NULL},
    {"count", WK_FIELD_U32, 0, offsetof(doc, count), 0, 0, NULL},
    {"huge", WK_FIELD_U64, 0, offsetof(doc, huge), 0, 0, NULL},
    {"blob", WK_FIELD_BYTES, WK_FIELD_OPTIONAL, offsetof(doc, blob), 0, offsetof(doc, has_blob),
     NULL},
    {"origin", WK_FIELD_RECORD, 0, offsetof(doc, origin), 0, 0, &point_desc},
    {"points", WK_FIELD_RECORD, WK_FIELD_OPTIONAL | WK_FIELD_ARRAY, offsetof(doc, points),
     offsetof(doc, points_len), offsetof(doc, has_points), &point_desc},
    {"ids", WK_FIELD_U64, WK_FIELD_ARRAY, offsetof(doc, ids), offsetof(doc, ids_len), 0, NULL},
    {"tags", WK_FIELD_STRING, WK_FIELD_ARRAY, offsetof(doc, tags), offsetof(doc, tags_len), 0,
     NULL},
    {"blobs", WK_FIELD_BYTES, WK_FIELD_ARRAY, offsetof(doc, blobs), offsetof(doc, blobs_len), 0,
     NULL},
    {"tree", WK_FIELD_RECORD, WK_FIELD_OPTIONAL, offsetof(doc, tree), 0, offsetof(doc, has_tree),
     &node_desc},
};
static const wk_record_desc doc_desc = {"doc", sizeof(doc), doc_fields, 12};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256];
    doc d, again;
    if (wk_record_decode(&doc_desc, (const char *)data, size, &d, err, sizeof(err)) != WK_OK) {
        if (!err[0] || err[0] != '$')
            abort(); /* every failure names where */
        return 0;
    }
    char *first = NULL, *second = NULL;
    size_t first_len = 0, second_len = 0;
    int rc = wk_record_encode(&doc_desc, &d, &first, &first_len, err, sizeof(err));
    /* decoded strings may hold invalid UTF-8 only if jansson let it in: it
     * does not, so encoding what decoded must work (or run out of memory) */
    if (rc != WK_OK && rc != WK_ENOMEM)
        abort();
    if (rc == WK_OK) {
        if (wk_record_decode(&doc_desc, first, first_len, &again, err, sizeof(err)) != WK_OK)
            abort();
        if (wk_record_encode(&doc_desc, &again, &second, &second_len, err, sizeof(err)) ==
                WK_OK &&
            (second_len != first_len || memcmp(first, second, first_len) != 0))
            abort();
        wk_record_free(&doc_desc, &again);
    }
    free(first);
    free(second);
    wk_record_free(&doc_desc, &d);
    return 0;
}
