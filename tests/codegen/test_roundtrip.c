/*
 * tests/codegen/test_roundtrip.c — generated typed bodies through a real
 * redis-server: put and get equal the originals (every field type,
 * optional fields absent and present, empty arrays, UTF-8 strings, binary
 * bytes, nested and recursive records), corrupt stored bodies give
 * WK_ECORRUPT and never a crash, decoding errors name the field, and the
 * typed handles' runtime capabilities refuse what the schema does not
 * grant.
 *
 * The code under test is the committed golden output of
 * tests/codegen/golden/bodies/schema.json (test_codegen.c checks that it is
 * exactly what wk-codegen writes), compiled into this test.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "redis_fixture.h"

#include "tests/codegen/golden/bodies/expected/bodies.c"

/* ------------------------------------------------------------------------
 * Values and equality
 * ---------------------------------------------------------------------- */

static bool bytes_eq(const bodies_bytes *a, const bodies_bytes *b)
{
    return a->len == b->len && (a->len == 0 || memcmp(a->data, b->data, a->len) == 0);
}

static bool str_eq(const char *a, const char *b)
{
    return (a == NULL) == (b == NULL) && (!a || strcmp(a, b) == 0);
}

static void assert_point_eq(const bodies_point *a, const bodies_point *b, const char *where)
{
    cr_assert(a->x == b->x && a->y == b->y, "%s: x/y", where);
    cr_assert_eq(a->has_label, b->has_label, "%s: has_label", where);
    if (a->has_label)
        cr_assert(str_eq(a->label, b->label), "%s: label", where);
}

static void assert_everything_eq(const bodies_everything *a, const bodies_everything *b)
{
    cr_assert_eq(a->flag, b->flag);
    cr_assert_eq(a->small, b->small);
    cr_assert_eq(a->big, b->big);
    cr_assert_eq(a->count, b->count);
    cr_assert_eq(a->huge, b->huge);
    cr_assert(a->ratio == b->ratio, "ratio %.17g != %.17g", a->ratio, b->ratio);
    cr_assert(str_eq(a->title, b->title), "title '%s' != '%s'", a->title, b->title);
    cr_assert(bytes_eq(&a->blob, &b->blob), "blob");
    cr_assert_eq(a->has_maybe_small, b->has_maybe_small);
    if (a->has_maybe_small)
        cr_assert_eq(a->maybe_small, b->maybe_small);
    cr_assert_eq(a->has_maybe_title, b->has_maybe_title);
    if (a->has_maybe_title)
        cr_assert(str_eq(a->maybe_title, b->maybe_title));
    cr_assert_eq(a->has_maybe_blob, b->has_maybe_blob);
    if (a->has_maybe_blob)
        cr_assert(bytes_eq(&a->maybe_blob, &b->maybe_blob));
    cr_assert_eq(a->has_maybe_point, b->has_maybe_point);
    if (a->has_maybe_point)
        assert_point_eq(&a->maybe_point, &b->maybe_point, "maybe_point");
#define ARRAY_EQ(f)                                                                          \
    do {                                                                                     \
        cr_assert_eq(a->f##_len, b->f##_len, #f " length");                                  \
        for (size_t i = 0; i < a->f##_len; i++)                                              \
            cr_assert(a->f[i] == b->f[i], #f "[%zu]", i);                                     \
    } while (0)
    ARRAY_EQ(flags);
    ARRAY_EQ(smalls);
    ARRAY_EQ(bigs);
    ARRAY_EQ(counts);
    ARRAY_EQ(huges);
    ARRAY_EQ(ratios);
    cr_assert_eq(a->titles_len, b->titles_len);
    for (size_t i = 0; i < a->titles_len; i++)
        cr_assert(str_eq(a->titles[i], b->titles[i]), "titles[%zu]", i);
    cr_assert_eq(a->blobs_len, b->blobs_len);
    for (size_t i = 0; i < a->blobs_len; i++)
        cr_assert(bytes_eq(&a->blobs[i], &b->blobs[i]), "blobs[%zu]", i);
    cr_assert_eq(a->points_len, b->points_len);
    for (size_t i = 0; i < a->points_len; i++)
        assert_point_eq(&a->points[i], &b->points[i], "points[i]");
    cr_assert_eq(a->has_maybe_titles, b->has_maybe_titles);
    if (a->has_maybe_titles) {
        cr_assert_eq(a->maybe_titles_len, b->maybe_titles_len);
        for (size_t i = 0; i < a->maybe_titles_len; i++)
            cr_assert(str_eq(a->maybe_titles[i], b->maybe_titles[i]));
    }
    assert_point_eq(&a->origin, &b->origin, "origin");
    cr_assert_eq(a->default_, b->default_);
    cr_assert_eq(a->has_int_, b->has_int_);
    if (a->has_int_)
        cr_assert(str_eq(a->int_, b->int_));
}

/* Every byte value, NUL and 0xFF included. */
static uint8_t all_bytes[256];
static bool flags[] = {true, false, true};
static int32_t smalls[] = {INT32_MIN, -1, 0, INT32_MAX};
static int64_t bigs[] = {INT64_MIN, -9007199254740993LL, 0, INT64_MAX};
static uint32_t counts[] = {0, 1, UINT32_MAX};
static uint64_t huges[] = {0, 9007199254740993ULL, UINT64_MAX};
static double ratios[] = {0.1, -2.5e-300, 1e300, 3.0, -0.0};
static char *titles[] = {"", "plain", "héllo wörld ✓ 日本語 🦀", "quote \" backslash \\ tab \t"};
static uint8_t two[] = {0x00, 0xFF};

/* A value using every field, with the strings and arrays borrowed from
 * the statics above (so it is never _free()d). */
static bodies_everything full_value(void)
{
    for (int i = 0; i < 256; i++)
        all_bytes[i] = (uint8_t)i;
    static bodies_bytes blobs[3];
    blobs[0] = (bodies_bytes){NULL, 0};
    blobs[1] = (bodies_bytes){two, 1};
    blobs[2] = (bodies_bytes){two, 2};
    static bodies_point points[2];
    points[0] = (bodies_point){.x = 1.5, .y = -2.25, .has_label = true, .label = "A ✓"};
    points[1] = (bodies_point){.x = 0, .y = 1e-10};
    bodies_everything v;
    bodies_everything_init(&v);
    v.flag = true;
    v.small = -123456;
    v.big = INT64_MIN;
    v.count = UINT32_MAX;
    v.huge = UINT64_MAX;
    v.ratio = 0.1 + 0.2;
    v.title = "Grüße, 世界";
    v.blob = (bodies_bytes){all_bytes, sizeof(all_bytes)};
    v.has_maybe_small = true;
    v.maybe_small = 0;
    v.has_maybe_title = true;
    v.maybe_title = "";
    v.has_maybe_blob = true;
    v.maybe_blob = (bodies_bytes){two, 2};
    v.has_maybe_point = true;
    v.maybe_point = points[0];
    v.flags = flags;
    v.flags_len = 3;
    v.smalls = smalls;
    v.smalls_len = 4;
    v.bigs = bigs;
    v.bigs_len = 4;
    v.counts = counts;
    v.counts_len = 3;
    v.huges = huges;
    v.huges_len = 3;
    v.ratios = ratios;
    v.ratios_len = 5;
    v.titles = titles;
    v.titles_len = 4;
    v.blobs = blobs;
    v.blobs_len = 3;
    v.points = points;
    v.points_len = 2;
    v.has_maybe_titles = true; /* present but empty */
    v.maybe_titles = NULL;
    v.maybe_titles_len = 0;
    v.origin = points[1];
    v.default_ = 7;
    v.has_int_ = true;
    v.int_ = "int";
    return v;
}

/* Only the required fields, every array empty, every optional absent. */
static bodies_everything sparse_value(void)
{
    bodies_everything v;
    bodies_everything_init(&v);
    v.title = "";
    v.origin.x = -1;
    return v;
}

/* ------------------------------------------------------------------------
 * Through Redis
 * ---------------------------------------------------------------------- */

Test(codegen_roundtrip, cache_full_and_sparse)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    const char *name = wk_test_ns("full");
    bodies_everything in = full_value(), out;
    cr_assert_eq(bodies_doc_put(p, name, &in), WK_OK, "%s", wk_db_errmsg(db));
    bool found = false;
    bodies_everything_init(&out);
    cr_assert_eq(bodies_doc_get(p, name, &out, &found), WK_OK, "%s", wk_db_errmsg(db));
    cr_assert(found);
    assert_everything_eq(&in, &out);
    bodies_everything_free(&out);

    in = sparse_value();
    cr_assert_eq(bodies_doc_put(p, name, &in), WK_OK);
    cr_assert_eq(bodies_doc_get(p, name, &out, &found), WK_OK);
    cr_assert(found);
    assert_everything_eq(&in, &out);
    cr_assert_not(out.has_maybe_titles, "absent optional array stays absent");
    cr_assert_null(out.flags, "empty array decodes to NULL, 0");
    bodies_everything_free(&out);

    /* a miss leaves the value untouched */
    cr_assert_eq(bodies_doc_get(p, wk_test_ns("missing"), &out, &found), WK_OK);
    cr_assert_not(found);
    wk_db_close(db);
}

Test(codegen_roundtrip, stored_json_is_readable_by_other_languages)
{
    wk_db *db = wk_test_open(NULL);
    const char *name = wk_test_ns("json");
    bodies_point pt = {.x = 1.5, .y = 2, .has_label = false};
    bodies_everything v = sparse_value();
    v.big = -42;
    v.huge = 18446744073709551615ULL;
    v.blob = (bodies_bytes){(uint8_t *)"hi!", 3};
    v.has_maybe_point = true;
    v.maybe_point = pt;
    cr_assert_eq(bodies_doc_put(wk_db_processor(db), name, &v), WK_OK);
    redisContext *raw = wk_test_raw(wk_test_url());
    redisReply *r = wk_test_cmd(raw, "GET @@wakuwaku-entity:Cache:doc:%s", name);
    cr_assert_eq(r->type, REDIS_REPLY_STRING);
    cr_assert_str_eq(r->str,
                     "{\"flag\":false,\"small\":0,\"big\":\"-42\",\"count\":0,"
                     "\"huge\":\"18446744073709551615\",\"ratio\":0.0,\"title\":\"\","
                     "\"blob\":\"aGkh\",\"maybe_point\":{\"x\":1.5,\"y\":2.0},\"flags\":[],"
                     "\"smalls\":[],\"bigs\":[],\"counts\":[],\"huges\":[],\"ratios\":[],"
                     "\"titles\":[],\"blobs\":[],\"points\":[],\"origin\":{\"x\":-1.0,\"y\":0.0},"
                     "\"default\":0}");
    freeReplyObject(r);
    redisFree(raw);
    wk_db_close(db);
}

Test(codegen_roundtrip, hashed_cache_typed)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    char slug[128];
    size_t slug_len = (size_t)snprintf(slug, sizeof(slug), "%s", wk_test_ns("h"));
    slug[slug_len++] = '\0'; /* byte-string names may hold any byte */
    slug[slug_len++] = '!';
    bodies_everything in = full_value(), out;
    uint8_t put_hash[WK_HASH_LEN], got_hash[WK_HASH_LEN];
    cr_assert_eq(bodies_hdoc_put(p, slug, slug_len, &in, put_hash), WK_OK, "%s",
                 wk_db_errmsg(db));
    bool found;
    cr_assert_eq(bodies_hdoc_get(p, slug, slug_len, &out, got_hash, &found), WK_OK, "%s",
                 wk_db_errmsg(db));
    cr_assert(found);
    cr_assert(memcmp(put_hash, got_hash, WK_HASH_LEN) == 0);
    assert_everything_eq(&in, &out);
    bodies_everything_free(&out);

    wk_item_change change;
    bodies_everything_init(&out);
    cr_assert_eq(bodies_hdoc_get_if_changed(p, slug, slug_len, put_hash, &out, got_hash, &change),
                 WK_OK);
    cr_assert_eq(change, WK_ITEM_UNCHANGED);
    cr_assert_null(out.title, "unchanged: nothing decoded");
    bodies_everything sparse = sparse_value();
    cr_assert_eq(bodies_hdoc_put(p, slug, slug_len, &sparse, NULL), WK_OK);
    cr_assert_eq(bodies_hdoc_get_if_changed(p, slug, slug_len, put_hash, &out, got_hash, &change),
                 WK_OK);
    cr_assert_eq(change, WK_ITEM_CHANGED);
    assert_everything_eq(&sparse, &out);
    bodies_everything_free(&out);
    bool removed;
    cr_assert_eq(bodies_hdoc_remove(p, slug, slug_len, &removed), WK_OK);
    cr_assert(removed);
    wk_db_close(db);
}

Test(codegen_roundtrip, recursive_records)
{
    wk_db *db = wk_test_open(NULL);
    bodies_node leaves[2] = {{.name = "leaf-a"}, {.name = "leaf-b"}};
    bodies_node mid = {.name = "mid", .children = leaves, .children_len = 2};
    bodies_node root = {.name = "root", .children = &mid, .children_len = 1};
    int64_t id = -7;
    cr_assert_eq(bodies_tree_put(wk_db_processor(db), id, &root), WK_OK);
    bodies_node out;
    bool found;
    cr_assert_eq(bodies_tree_get(wk_db_processor(db), id, &out, &found), WK_OK);
    cr_assert(found);
    cr_assert_str_eq(out.name, "root");
    cr_assert_eq(out.children_len, 1);
    cr_assert_str_eq(out.children[0].name, "mid");
    cr_assert_eq(out.children[0].children_len, 2);
    cr_assert_str_eq(out.children[0].children[1].name, "leaf-b");
    cr_assert_eq(out.children[0].children[1].children_len, 0);
    bodies_node_free(&out);
    cr_assert_null(out.name, "free re-initialises");
    wk_db_close(db);
}

/* The generated Pipe and StreamBuffer accessors encode with the record's
 * codec; receivers and subscriptions decode with the same codec. */
Test(codegen_roundtrip, typed_pipe_and_stream_buffer)
{
    wk_db *db = wk_test_open(NULL);
    wk_processor *p = wk_db_processor(db);
    bodies_node leaf = {.name = "leaf"};
    bodies_node frame = {.name = "frame", .children = &leaf, .children_len = 1};
    const char *session = wk_test_ns("session");
    cr_assert_eq(bodies_frames_send(p, session, &frame), WK_OK);
    cr_assert_eq(bodies_frames_close(p, session), WK_OK);
    wk_pipe_receiver *rx;
    cr_assert_eq(bodies_frames_receive(p, session, &rx), WK_OK);
    bodies_node out;
    wk_pipe_got got;
    cr_assert_eq(wk_pipe_recv_typed(rx, &bodies_node_codec, &out, &got), WK_OK);
    cr_assert_eq(got, WK_PIPE_MESSAGE);
    cr_assert_str_eq(out.name, "frame");
    cr_assert(out.children_len == 1 && strcmp(out.children[0].name, "leaf") == 0);
    bodies_node_free(&out);
    cr_assert_eq(wk_pipe_recv_typed(rx, &bodies_node_codec, &out, &got), WK_OK);
    cr_assert_eq(got, WK_PIPE_END);
    wk_pipe_receiver_close(rx);

    uint64_t completion = 1000000 + (uint64_t)getpid();
    int64_t index = -2;
    cr_assert_eq(bodies_chunks_append(p, completion, &frame, &index), WK_OK);
    cr_assert_eq(index, 0);
    cr_assert_eq(bodies_chunks_append(p, completion, &leaf, &index), WK_OK);
    cr_assert_eq(index, 1);
    cr_assert_eq(bodies_chunks_finish(p, completion, NULL), WK_OK);
    wk_stream_buffer_subscription *sub;
    cr_assert_eq(bodies_chunks_subscribe(p, completion, 1, &sub), WK_OK);
    wk_stream_buffer_got sgot;
    cr_assert_eq(wk_stream_buffer_recv_typed(sub, &bodies_node_codec, &out, &sgot), WK_OK);
    cr_assert_eq(sgot, WK_STREAM_BUFFER_BODY);
    cr_assert_str_eq(out.name, "leaf");
    bodies_node_free(&out);
    cr_assert_eq(wk_stream_buffer_recv_typed(sub, &bodies_node_codec, &out, &sgot), WK_OK);
    cr_assert_eq(sgot, WK_STREAM_BUFFER_END);
    wk_stream_buffer_subscription_close(sub);
    wk_stream_buffer_contents c = WK_STREAM_BUFFER_CONTENTS_INIT;
    cr_assert_eq(bodies_chunks_read(p, completion, 0, &c), WK_OK);
    cr_assert(c.count == 2 && c.finished);
    cr_assert_eq(
        bodies_node_codec.decode(&bodies_node_codec, c.bodies[0].data, c.bodies[0].len, &out),
        WK_OK);
    cr_assert_str_eq(out.name, "frame");
    bodies_node_free(&out);
    wk_stream_buffer_contents_free(&c);
    cr_assert_eq(bodies_chunks_remove(p, completion, NULL), WK_OK);
    wk_db_close(db);
}

Test(codegen_roundtrip, corrupt_stored_body_is_an_error_not_a_crash)
{
    wk_db *db = wk_test_open(NULL);
    redisContext *raw = wk_test_raw(wk_test_url());
    static const char *const corrupt[] = {
        "{not json",
        "",
        "[1,2,3]",
        "{\"flag\":\"yes\"}",
        "{\"title\":\"only the title\"}",
        "\xff\xfe garbage",
    };
    for (size_t i = 0; i < sizeof(corrupt) / sizeof(corrupt[0]); i++) {
        const char *name = wk_test_ns("corrupt");
        freeReplyObject(wk_test_cmd(raw, "SET @@wakuwaku-entity:Cache:doc:%s %b", name,
                                    corrupt[i], strlen(corrupt[i])));
        bodies_everything out;
        bodies_everything_init(&out);
        bool found = true;
        int rc = bodies_doc_get(wk_db_processor(db), name, &out, &found);
        cr_assert_eq(rc, WK_ECORRUPT, "body %zu: got %s", i, wk_err_name(rc));
        cr_assert_null(out.title, "nothing to free after a failed decode");
        bodies_everything_free(&out);
    }
    redisFree(raw);
    wk_db_close(db);
}

/* The typed handles' runtime capabilities refuse what the schema does not
 * grant, with nothing sent: the second line of defence. */
Test(codegen_roundtrip, handle_capabilities_agree_with_runtime)
{
    wk_db *db = wk_test_open(NULL);
    bodies_reader reader;
    bodies_writer writer;
    cr_assert_eq(bodies_reader_narrow(&reader, db), WK_OK);
    cr_assert_eq(bodies_writer_narrow(&writer, db), WK_OK);
    bodies_everything v = sparse_value(), out;
    bodies_node node = {.name = "n"};
    const char *name = wk_test_ns("caps");
    bool found;

    /* granted */
    cr_assert_eq(bodies_writer_doc_put(&writer, name, &v), WK_OK, "%s", wk_db_errmsg(writer.db));
    cr_assert_eq(bodies_reader_doc_get(&reader, name, &out, &found), WK_OK);
    cr_assert(found);
    bodies_everything_free(&out);
    cr_assert_eq(bodies_writer_tree_get(&writer, 1, &node, &found), WK_OK);

    /* not granted: only reachable around the typed handle */
    cr_assert_eq(bodies_doc_put(reader.p, name, &v), WK_EDENIED);
    cr_assert(strstr(wk_db_errmsg(reader.db), "capability \"reader\" may not WRITE Cache:doc"),
              "%s", wk_db_errmsg(reader.db));
    cr_assert_eq(bodies_tree_put(writer.p, 1, &node), WK_EDENIED);
    wk_body hb = WK_BODY_INIT;
    cr_assert_eq(bodies_hdoc_hash(writer.p, "x", 1, &hb), WK_EDENIED);
    cr_assert(strstr(wk_db_errmsg(writer.db), "capability \"writer\" may not READ "
                                              "HashedCache:hdoc"),
              "%s", wk_db_errmsg(writer.db));

    bodies_reader_close(&reader);
    bodies_writer_close(&writer);
    bodies_reader_close(NULL);
    cr_assert_null(reader.db);
    wk_db_close(db);
}

Test(codegen_roundtrip, byte_bodies)
{
    wk_db *db = wk_test_open(NULL);
    uint64_t id = (uint64_t)rand() << 20 | 17;
    cr_assert_eq(bodies_raw_put(wk_db_processor(db), id, "a\0b", 3), WK_OK);
    wk_body body = WK_BODY_INIT;
    cr_assert_eq(bodies_raw_get(wk_db_processor(db), id, &body), WK_OK);
    cr_assert(body.found);
    cr_assert_eq(body.len, 3);
    cr_assert(memcmp(body.data, "a\0b", 3) == 0);
    wk_body_free(&body);
    wk_db_close(db);
}

/* ------------------------------------------------------------------------
 * Encoding and decoding alone: messages
 * ---------------------------------------------------------------------- */

static void expect_decode_error(const char *json, const char *message)
{
    bodies_everything v;
    char err[256];
    int rc = bodies_everything_decode(json, strlen(json), &v, err, sizeof(err));
    cr_assert_eq(rc, WK_ECORRUPT, "%s: %s", json, wk_err_name(rc));
    cr_assert_str_eq(err, message, "for %s", json);
    cr_assert_null(v.title);
    cr_assert_null(v.points);
}

/* The smallest valid body, and variants of it with one thing wrong. */
#define BODY_HEAD                                                                            \
    "{\"flag\":false,\"small\":0,\"big\":0,\"count\":0,\"huge\":0,\"ratio\":0,\"title\":\"\"," \
    "\"blob\":\"\",\"flags\":[],\"smalls\":[],\"bigs\":[],\"counts\":[],\"huges\":[],"      \
    "\"ratios\":[],\"titles\":[],\"blobs\":[],\"origin\":{\"x\":0,\"y\":0},\"default\":0,"

Test(codegen_roundtrip, decode_errors_name_the_field)
{
    bodies_everything v;
    char err[256];
    const char *ok = BODY_HEAD "\"points\":[],\"unknown\":{\"future\":[1]}}";
    cr_assert_eq(bodies_everything_decode(ok, strlen(ok), &v, err, sizeof(err)), WK_OK, "%s",
                 err);
    cr_assert_str_empty(err);
    bodies_everything_free(&v);

    expect_decode_error(BODY_HEAD "\"points\":[{\"x\":1,\"y\":2},{\"x\":\"1\",\"y\":2}]}",
                        "$.points[1].x: expected a number, got a string");
    expect_decode_error(BODY_HEAD "\"points\":[], \"small\": 2147483648}",
                        "$: not valid JSON: duplicate object key near '\"small\"'");
    expect_decode_error("{\"flag\":1}", "$.flag: expected a boolean, got an integer");
    expect_decode_error("{\"flag\":true}", "$.small: missing required field");
    expect_decode_error(BODY_HEAD "\"points\":[], \"maybe_small\": 2147483648}",
                        "$.maybe_small: integer out of range for i32");
    expect_decode_error(BODY_HEAD "\"points\":[], \"maybe_blob\": \"abc\"}",
                        "$.maybe_blob: invalid base64 (length not a multiple of 4)");
    expect_decode_error(BODY_HEAD "\"points\":[], \"maybe_blob\": \"ab=c\"}",
                        "$.maybe_blob: invalid base64");
    expect_decode_error(BODY_HEAD "\"points\":[], \"maybe_titles\": [\"a\", 2]}",
                        "$.maybe_titles[1]: expected a string, got an integer");
    expect_decode_error(BODY_HEAD "\"points\":{}}", "$.points: expected an array, got an object");
    expect_decode_error("[]", "$: expected an object, got an array");
    expect_decode_error("{", "$: not valid JSON: string or '}' expected near end of file");
}

Test(codegen_roundtrip, sixty_four_bit_integers)
{
    bodies_everything v;
    char err[256];
    const char *body = "{\"flag\":false,\"small\":0,\"big\":\"9223372036854775807\",\"count\":0,"
                       "\"huge\":\"18446744073709551615\",\"ratio\":0,\"title\":\"\","
                       "\"blob\":\"\",\"flags\":[],\"smalls\":[],\"bigs\":[\"-9223372036854775808\","
                       "5],\"counts\":[],\"huges\":[7],\"ratios\":[],\"titles\":[],\"blobs\":[],"
                       "\"points\":[],\"origin\":{\"x\":0,\"y\":0},\"default\":0}";
    cr_assert_eq(bodies_everything_decode(body, strlen(body), &v, err, sizeof(err)), WK_OK, "%s",
                 err);
    cr_assert_eq(v.big, INT64_MAX);
    cr_assert_eq(v.huge, UINT64_MAX);
    cr_assert_eq(v.bigs[0], INT64_MIN);
    cr_assert_eq(v.bigs[1], 5);
    cr_assert_eq(v.huges[0], 7);
    bodies_everything_free(&v);
    const char *over = "{\"flag\":false,\"small\":0,\"big\":\"9223372036854775808\"}";
    cr_assert_eq(bodies_everything_decode(over, strlen(over), &v, err, sizeof(err)),
                 WK_ECORRUPT);
    cr_assert_str_eq(err, "$.big: not a decimal i64: 9223372036854775808");
}

Test(codegen_roundtrip, encode_errors)
{
    char *json = (char *)"x";
    char err[256];
    bodies_everything v = sparse_value();
    v.title = NULL;
    cr_assert_eq(bodies_everything_encode(&v, &json, NULL, err, sizeof(err)), WK_EINVAL);
    cr_assert_null(json);
    cr_assert_str_eq(err, "$.title: the string is NULL");
    v = sparse_value();
    v.titles = titles;
    v.titles_len = 1;
    titles[0] = "\xc3\x28"; /* invalid UTF-8 */
    cr_assert_eq(bodies_everything_encode(&v, &json, NULL, err, sizeof(err)), WK_EINVAL);
    cr_assert_str_eq(err, "$.titles[0]: the string is not valid UTF-8");
    titles[0] = "";
    v = sparse_value();
    v.has_maybe_point = true;
    v.maybe_point.y = NAN;
    cr_assert_eq(bodies_everything_encode(&v, &json, NULL, err, sizeof(err)), WK_EINVAL);
    cr_assert_str_eq(err, "$.maybe_point.y: not a finite number (JSON has no NaN or infinity)");
    v = sparse_value();
    v.smalls_len = 2; /* NULL array with a length */
    cr_assert_eq(bodies_everything_encode(&v, &json, NULL, err, sizeof(err)), WK_EINVAL);
    cr_assert_str_eq(err, "$.smalls: the array is NULL but its length is not 0");

    /* an encoder failure sends nothing */
    wk_db *db = wk_test_open(NULL);
    const char *name = wk_test_ns("notsent");
    v = sparse_value();
    v.title = NULL;
    cr_assert_eq(bodies_doc_put(wk_db_processor(db), name, &v), WK_EINVAL);
    cr_assert_str_eq(wk_db_errmsg(db), "cache.put: encoding everything failed: $.title: the "
                                       "string is NULL (WK_EINVAL)");
    bool found;
    cr_assert_eq(bodies_doc_get(wk_db_processor(db), name, &v, &found), WK_OK);
    cr_assert_not(found);
    v = sparse_value();
    v.ratio = INFINITY;
    cr_assert_eq(bodies_hdoc_put(wk_db_processor(db), name, strlen(name), &v, NULL), WK_EINVAL);
    cr_assert_str_eq(wk_db_errmsg(db), "hashed_cache.put: encoding everything failed: $.ratio: "
                                       "not a finite number (JSON has no NaN or infinity) "
                                       "(WK_EINVAL)");
    wk_db_close(db);
}


/* A body without its required "title", stored by someone else: the typed
 * get fails with WK_ECORRUPT and the handle's message says where and why,
 * as the decoder does. */
#define BODY_WITHOUT_TITLE                                                                   \
    "{\"flag\":false,\"small\":0,\"big\":0,\"count\":0,\"huge\":0,\"ratio\":0,"             \
    "\"blob\":\"\",\"flags\":[],\"smalls\":[],\"bigs\":[],\"counts\":[],\"huges\":[],"      \
    "\"ratios\":[],\"titles\":[],\"blobs\":[],\"origin\":{\"x\":0,\"y\":0},\"default\":0,"  \
    "\"points\":[]}"

Test(codegen_roundtrip, typed_get_of_an_undecodable_body_names_the_field)
{
    wk_db *db = wk_test_open(NULL);
    redisContext *raw = wk_test_raw(wk_test_url());
    const char *name = wk_test_ns("untitled");
    freeReplyObject(wk_test_cmd(raw, "SET @@wakuwaku-entity:Cache:doc:%s %s", name,
                                BODY_WITHOUT_TITLE));
    bodies_everything out;
    bodies_everything_init(&out);
    bool found = true;
    cr_assert_eq(bodies_doc_get(wk_db_processor(db), name, &out, &found), WK_ECORRUPT);
    cr_assert_not(found);
    char want[512];
    snprintf(want, sizeof(want),
             "cache.get: the body of \"@@wakuwaku-entity:Cache:doc:%s\" does not decode as "
             "everything: $.title: missing required field (WK_ECORRUPT)",
             name);
    cr_assert_str_eq(wk_db_errmsg(db), want);
    cr_assert_null(out.title, "nothing to free after a failed decode");

    /* The same through the typed HashedCache get, and deeper paths. */
    freeReplyObject(wk_test_cmd(raw, "DEL @@wakuwaku-entity:HashedCache:hdoc:%s", name));
    uint8_t hash[WK_HASH_LEN];
    const char *bad_point =
        BODY_HEAD "\"points\":[{\"x\":1,\"y\":2},{\"x\":\"1\",\"y\":2}]}";
    cr_assert_eq(wk_hashed_cache_put(wk_db_processor(db),
                                     &(wk_entity)WK_HASHED_CACHE_ENTITY("hdoc", 60000),
                                     wk_name_str(name), bad_point, strlen(bad_point), hash),
                 WK_OK);
    cr_assert_eq(bodies_hdoc_get(wk_db_processor(db), name, strlen(name), &out, NULL, &found),
                 WK_ECORRUPT);
    cr_assert_not(found);
    snprintf(want, sizeof(want),
             "hashed_cache.get: the body of \"@@wakuwaku-entity:HashedCache:hdoc:%s\" does not "
             "decode as everything: $.points[1].x: expected a number, got a string "
             "(WK_ECORRUPT)",
             name);
    cr_assert_str_eq(wk_db_errmsg(db), want);
    wk_item_change change;
    cr_assert_eq(bodies_hdoc_get_if_changed(wk_db_processor(db), name, strlen(name), NULL, &out,
                                            NULL, &change),
                 WK_ECORRUPT);
    cr_assert_eq(change, WK_ITEM_MISSING);
    snprintf(want, sizeof(want),
             "hashed_cache.get_if_changed: the body of \"@@wakuwaku-entity:HashedCache:hdoc:%s\" "
             "does not decode as everything: $.points[1].x: expected a number, got a string "
             "(WK_ECORRUPT)",
             name);
    cr_assert_str_eq(wk_db_errmsg(db), want);
    redisFree(raw);
    wk_db_close(db);
}
