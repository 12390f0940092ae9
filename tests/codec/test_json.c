/*
 * tests/codec/test_json.c — the JSON body codec (wakuwaku/codec.h) driven
 * by a hand-written descriptor table: the JSON form, the messages (path
 * and reason), the NULL rules, and that a failed decode leaves nothing to
 * free (the sanitizer build checks for leaks). Generated records are
 * tested through Redis in tests/codegen/test_roundtrip.c. No Redis.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <wakuwaku/cache.h>
#include <wakuwaku/codec.h>

typedef struct item {
    char *name;
    bool has_qty;
    uint32_t qty;
} item;

typedef struct order {
    uint64_t id;
    int64_t delta;
    double price;
    wk_codec_bytes sig;
    item first;
    item *items;
    size_t items_len;
} order;

static const wk_field_desc item_fields[] = {
    {"name", WK_FIELD_STRING, 0, offsetof(item, name), 0, 0, NULL},
    {"qty", WK_FIELD_U32, WK_FIELD_OPTIONAL, offsetof(item, qty), 0, offsetof(item, has_qty),
     NULL},
};
static const wk_record_desc item_desc = {"item", sizeof(item), item_fields, 2};

static const wk_field_desc order_fields[] = {
    {"id", WK_FIELD_U64, 0, offsetof(order, id), 0, 0, NULL},
    {"delta", WK_FIELD_I64, 0, offsetof(order, delta), 0, 0, NULL},
    {"price", WK_FIELD_F64, 0, offsetof(order, price), 0, 0, NULL},
    {"sig", WK_FIELD_BYTES, 0, offsetof(order, sig), 0, 0, NULL},
    {"first", WK_FIELD_RECORD, 0, offsetof(order, first), 0, 0, &item_desc},
    {"items", WK_FIELD_RECORD, WK_FIELD_ARRAY, offsetof(order, items), offsetof(order, items_len),
     0, &item_desc},
};
static const wk_record_desc order_desc = {"order", sizeof(order), order_fields, 6};

#define GOOD                                                                                     \
    "{\"id\":\"18446744073709551615\",\"delta\":\"-9223372036854775808\",\"price\":2.5,"           \
    "\"sig\":\"AAEC\",\"first\":{\"name\":\"a\"},\"items\":[{\"name\":\"b\",\"qty\":3}]}"

Test(codec, decode_then_encode_is_the_same_text)
{
    order o;
    char err[256], *json;
    size_t len;
    cr_assert_eq(wk_record_decode(&order_desc, GOOD, strlen(GOOD), &o, err, sizeof(err)), WK_OK,
                 "%s", err);
    cr_assert_str_empty(err);
    cr_assert_eq(o.id, UINT64_MAX);
    cr_assert_eq(o.delta, INT64_MIN);
    cr_assert_eq(o.sig.len, 3);
    cr_assert_eq(o.sig.data[2], 2);
    cr_assert_str_eq(o.first.name, "a");
    cr_assert_not(o.first.has_qty);
    cr_assert_eq(o.items_len, 1);
    cr_assert(o.items[0].has_qty);
    cr_assert_eq(o.items[0].qty, 3);
    cr_assert_eq(wk_record_encode(&order_desc, &o, &json, &len, err, sizeof(err)), WK_OK, "%s",
                 err);
    cr_assert_str_eq(json, GOOD);
    cr_assert_eq(len, strlen(GOOD));
    free(json);
    wk_record_free(&order_desc, &o);
    cr_assert_null(o.items);
    wk_record_free(&order_desc, NULL); /* harmless */
}

/* Each bad body fails with the message a generated decoder gave before
 * the codec moved into the library (tests/codegen keeps checking those). */
Test(codec, decode_failures_name_where_and_why)
{
    static const struct {
        const char *json;
        int status;
        const char *msg;
    } cases[] = {
        {"[]", WK_ECORRUPT, "$: expected an object, got an array"},
        {"{", WK_ECORRUPT, "$: not valid JSON: "},
        {"{\"id\":\"1\"}", WK_ECORRUPT, "$.delta: missing required field"},
        {"{\"id\":-1}", WK_ECORRUPT, "$.id: integer out of range for u64"},
        {"{\"id\":\"01\"}", WK_ECORRUPT, "$.id: not a decimal u64: 01"},
        {"{\"id\":1,\"delta\":\"9223372036854775808\"}", WK_ECORRUPT,
         "$.delta: not a decimal i64: 9223372036854775808"},
        {"{\"id\":1,\"delta\":1,\"price\":\"x\"}", WK_ECORRUPT,
         "$.price: expected a number, got a string"},
        {"{\"id\":1,\"delta\":1,\"price\":1,\"sig\":\"AAE\"}", WK_ECORRUPT,
         "$.sig: invalid base64 (length not a multiple of 4)"},
        {"{\"id\":1,\"delta\":1,\"price\":1,\"sig\":\"A=AA\"}", WK_ECORRUPT,
         "$.sig: invalid base64"},
        {"{\"id\":1,\"delta\":1,\"price\":1,\"sig\":\"\",\"first\":{\"name\":\"a\"},"
         "\"items\":[{\"name\":\"b\"},{\"name\":\"c\",\"qty\":-1}]}",
         WK_ECORRUPT, "$.items[1].qty: integer out of range for u32"},
        {"{\"id\":1,\"id\":2}", WK_ECORRUPT, "$: not valid JSON: duplicate object key"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        order o;
        char err[256];
        int rc = wk_record_decode(&order_desc, cases[i].json, strlen(cases[i].json), &o, err,
                                  sizeof(err));
        cr_assert_eq(rc, cases[i].status, "%s: %d", cases[i].json, rc);
        cr_assert(strncmp(err, cases[i].msg, strlen(cases[i].msg)) == 0, "%s: got \"%s\"",
                  cases[i].json, err);
        /* nothing to free: *o is empty */
        cr_assert_null(o.items);
        cr_assert_null(o.sig.data);
        cr_assert_null(o.first.name);
    }
}

Test(codec, encode_refuses_what_json_cannot_hold)
{
    item it = {NULL, false, 0};
    order o = {0};
    char err[256], *json = (char *)"not touched";
    cr_assert_eq(wk_record_encode(&item_desc, &it, &json, NULL, err, sizeof(err)), WK_EINVAL);
    cr_assert_str_eq(err, "$.name: the string is NULL");
    cr_assert_null(json);
    it.name = (char *)"\xff";
    cr_assert_eq(wk_record_encode(&item_desc, &it, &json, NULL, err, sizeof(err)), WK_EINVAL);
    cr_assert_str_eq(err, "$.name: the string is not valid UTF-8");
    o.price = NAN;
    cr_assert_eq(wk_record_encode(&order_desc, &o, &json, NULL, err, sizeof(err)), WK_EINVAL);
    cr_assert_str_eq(err, "$.price: not a finite number (JSON has no NaN or infinity)");
    o.price = 1;
    o.sig.len = 1;
    cr_assert_eq(wk_record_encode(&order_desc, &o, &json, NULL, err, sizeof(err)), WK_EINVAL);
    cr_assert_str_eq(err, "$.sig: the bytes are NULL but their length is not 0");
    o.sig.len = 0;
    o.first.name = (char *)"f";
    o.items_len = 2;
    cr_assert_eq(wk_record_encode(&order_desc, &o, &json, NULL, err, sizeof(err)), WK_EINVAL);
    cr_assert_str_eq(err, "$.items: the array is NULL but its length is not 0");
    cr_assert_eq(wk_record_encode(&order_desc, NULL, &json, NULL, err, sizeof(err)), WK_EINVAL);
    cr_assert_str_eq(err, "$: v is required");
    cr_assert_eq(wk_record_encode(&order_desc, &o, NULL, NULL, NULL, 0), WK_EINVAL);
    cr_assert_eq(wk_record_decode(&order_desc, NULL, 1, &o, err, sizeof(err)), WK_EINVAL);
    cr_assert_str_eq(err, "$: json is NULL");
}

/* As a wk_codec: outside a typed cache call wk_codec_fail() only returns
 * the status, so the body functions behave as encode/decode. */
Test(codec, body_functions)
{
    item it = {(char *)"x", true, 7}, back;
    uint8_t *bytes;
    size_t len;
    cr_assert_eq(wk_record_body_encode(&item_desc, &it, &bytes, &len), WK_OK);
    cr_assert_eq(len, strlen("{\"name\":\"x\",\"qty\":7}"));
    cr_assert(memcmp(bytes, "{\"name\":\"x\",\"qty\":7}", len) == 0);
    cr_assert_eq(wk_record_body_decode(&item_desc, bytes, len, &back), WK_OK);
    cr_assert_str_eq(back.name, "x");
    cr_assert_eq(back.qty, 7);
    wk_record_free(&item_desc, &back);
    free(bytes);
    cr_assert_eq(wk_record_body_decode(&item_desc, (const uint8_t *)"{}", 2, &back),
                 WK_ECORRUPT);
}
