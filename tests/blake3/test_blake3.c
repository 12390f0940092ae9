/*
** tests/blake3/test_blake3.c — BLAKE3 against known answers.
**
** The known answers are tests/blake3/vectors.json, a copy of the project's
** ../shared/blake3-vectors.json made with the reference b3sum 1.2.0: for
** each input length n (input byte i = i % 251) the 131-byte extended output
** of the three modes. Every check compares with that file (or with
** b3sum output pasted below), never with our own output, so a wrong
** implementation fails.
**
** Each check runs once per implementation this CPU supports (portable is
** forced through the private core/blake3_internal.h; SIMD ones are skipped when
** the CPU lacks them).
**
** The file is found through $WK_TEST_SOURCE_DIR (the project root; ctest
** sets it), else next to this source file (__FILE__).
*/
#include <criterion/criterion.h>
#include <jansson.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/blake3_internal.h"
#include "wakuwaku/blake3.h"

#define XOF_LEN 131 /* output length of every vector */
#define MAX_CASES 64

enum mode { MODE_HASH, MODE_KEYED, MODE_DERIVE, MODE_COUNT };
static const char *const mode_names[MODE_COUNT] = {"hash", "keyed_hash", "derive_key"};

typedef struct vector {
    size_t len;
    uint8_t out[MODE_COUNT][XOF_LEN];
} vector;

static struct {
    int loaded;
    uint8_t key[WK_BLAKE3_KEY_LEN];
    char context[256];
    size_t count;
    vector cases[MAX_CASES];
    size_t max_len;
} V;

/* ------------------------------------------------------------------------
** Loading the vectors.
** --------------------------------------------------------------------- */

static int unhex(uint8_t *out, const char *hex, size_t out_len)
{
    if (strlen(hex) != 2 * out_len)
        return -1;
    for (size_t i = 0; i < out_len; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1)
            return -1;
        out[i] = (uint8_t)v;
    }
    return 0;
}

static void vectors_path(char *buf, size_t size)
{
    const char *root = getenv("WK_TEST_SOURCE_DIR");
    if (root != NULL && root[0] != '\0') {
        snprintf(buf, size, "%s/tests/blake3/vectors.json", root);
        return;
    }
    const char *file = __FILE__;
    const char *slash = strrchr(file, '/');
    if (slash == NULL)
        snprintf(buf, size, "vectors.json");
    else
        snprintf(buf, size, "%.*s/vectors.json", (int)(slash - file), file);
}

static void load_vectors(void)
{
    char path[4096];
    json_error_t err;

    if (V.loaded)
        return;
    vectors_path(path, sizeof path);
    json_t *root = json_load_file(path, 0, &err);
    cr_assert_not_null(root, "cannot load %s: %s (line %d)", path, err.text, err.line);

    const char *key = json_string_value(json_object_get(root, "key"));
    const char *context = json_string_value(json_object_get(root, "context_string"));
    cr_assert(key != NULL && strlen(key) == WK_BLAKE3_KEY_LEN, "%s: bad \"key\"", path);
    cr_assert(context != NULL && strlen(context) < sizeof V.context, "%s: bad \"context_string\"",
              path);
    memcpy(V.key, key, WK_BLAKE3_KEY_LEN);
    strcpy(V.context, context);

    json_t *cases = json_object_get(root, "cases");
    cr_assert(json_is_array(cases) && json_array_size(cases) > 0 &&
                  json_array_size(cases) <= MAX_CASES,
              "%s: bad \"cases\"", path);
    V.count = json_array_size(cases);
    for (size_t i = 0; i < V.count; i++) {
        json_t *c = json_array_get(cases, i);
        json_t *len = json_object_get(c, "input_len");
        cr_assert(json_is_integer(len) && json_integer_value(len) >= 0,
                  "%s: case %zu: bad input_len", path, i);
        V.cases[i].len = (size_t)json_integer_value(len);
        if (V.cases[i].len > V.max_len)
            V.max_len = V.cases[i].len;
        for (int m = 0; m < MODE_COUNT; m++) {
            const char *hex = json_string_value(json_object_get(c, mode_names[m]));
            cr_assert(hex != NULL && unhex(V.cases[i].out[m], hex, XOF_LEN) == 0,
                      "%s: case %zu: bad \"%s\"", path, i, mode_names[m]);
        }
    }
    json_decref(root);
    V.loaded = 1;
}

/* Input of length n: byte i = i % 251 (the vectors' convention). Callers
** take prefixes of one buffer of the largest length. */
static uint8_t *make_input(size_t n)
{
    uint8_t *buf = malloc(n + 1);
    cr_assert_not_null(buf);
    for (size_t i = 0; i < n; i++)
        buf[i] = (uint8_t)(i % 251);
    return buf;
}

static void hex(char *out, const uint8_t *in, size_t n)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", in[i]);
}

/* Fail with both outputs in hex unless got == want. */
static void check(const uint8_t *got, const uint8_t *want, size_t n, const char *what, size_t len)
{
    if (memcmp(got, want, n) != 0) {
        char g[2 * XOF_LEN + 1], w[2 * XOF_LEN + 1];
        hex(g, got, n);
        hex(w, want, n);
        cr_assert_fail("[%s] %s, input_len %zu, %zu-byte output\n  got  %s\n  want %s",
                       wk_blake3_implementation(), what, len, n, g, w);
    }
}

static void init_mode(wk_blake3_hasher *h, int mode)
{
    switch (mode) {
    case MODE_HASH:
        wk_blake3_init(h);
        break;
    case MODE_KEYED:
        wk_blake3_init_keyed(h, V.key);
        break;
    default:
        wk_blake3_init_derive_key(h, V.context);
        break;
    }
}

/* Select implementation `impl` for this test, or skip when the CPU cannot
** run it. */
static void use_impl(const char *impl)
{
    load_vectors();
    if (wk__blake3_force(impl) != 0)
        cr_skip_test("implementation %s is not available on this CPU or build", impl);
    cr_assert_str_eq(wk_blake3_implementation(), impl);
}

/* ------------------------------------------------------------------------
** The checks, each run per implementation.
** --------------------------------------------------------------------- */

/* All modes, all cases, input fed in one call: the 131-byte output, the
** 32-byte prefix, and a few other lengths (prefixes of the same stream). */
static void check_oneshot(const char *impl)
{
    static const size_t lens[] = {1, 31, 32, 33, 63, 64, 65, 127, 128, 129, XOF_LEN};
    use_impl(impl);
    uint8_t *in = make_input(V.max_len);

    for (size_t c = 0; c < V.count; c++) {
        const vector *v = &V.cases[c];
        uint8_t out[XOF_LEN];

        wk_blake3(in, v->len, out);
        check(out, v->out[MODE_HASH], WK_BLAKE3_OUT_LEN, "wk_blake3()", v->len);

        for (int m = 0; m < MODE_COUNT; m++) {
            wk_blake3_hasher h;
            init_mode(&h, m);
            wk_blake3_update(&h, in, v->len);
            for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
                memset(out, 0xAA, sizeof out);
                wk_blake3_final(&h, out, lens[i]);
                check(out, v->out[m], lens[i], mode_names[m], v->len);
                /* Nothing written past out_len. */
                for (size_t j = lens[i]; j < sizeof out; j++)
                    cr_assert_eq(out[j], 0xAA, "[%s] %s: final wrote past out_len %zu", impl,
                                 mode_names[m], lens[i]);
            }
        }
    }
    free(in);
}

/* Feed `in` to a fresh hasher in pieces whose sizes cycle through
** pattern[0..n). */
static void feed(wk_blake3_hasher *h, const uint8_t *in, size_t len, const size_t *pattern,
                 size_t n)
{
    size_t off = 0;
    for (size_t i = 0; off < len; i = (i + 1) % n) {
        size_t take = pattern[i];
        if (take > len - off)
            take = len - off;
        wk_blake3_update(h, in + off, take);
        off += take;
    }
}

/* All modes and cases, input split into pieces of odd sizes, from an
** unaligned address too. */
static void check_streaming(const char *impl)
{
    static const size_t p1[] = {1}, p3[] = {3}, p7[] = {7}, p63[] = {63}, p64[] = {64},
                        p65[] = {65}, p1023[] = {1023}, p1024[] = {1024}, p1025[] = {1025},
                        p2049[] = {2049}, mix[] = {1, 1023, 1025, 0, 63, 65, 7, 4096, 3};
    static const struct {
        const size_t *p;
        size_t n;
        const char *name;
    } patterns[] = {
        {p1, 1, "1"},
        {p3, 1, "3"},
        {p7, 1, "7"},
        {p63, 1, "63"},
        {p64, 1, "64"},
        {p65, 1, "65"},
        {p1023, 1, "1023"},
        {p1024, 1, "1024"},
        {p1025, 1, "1025"},
        {p2049, 1, "2049"},
        {mix, sizeof mix / sizeof mix[0], "mix"},
    };
    use_impl(impl);
    uint8_t *buf = make_input(V.max_len + 1);
    /* Same bytes at an odd address: SIMD loads must not assume alignment. */
    uint8_t *odd = malloc(V.max_len + 1);
    cr_assert_not_null(odd);
    memcpy(odd + 1, buf, V.max_len);

    for (size_t c = 0; c < V.count; c++) {
        const vector *v = &V.cases[c];
        for (int m = 0; m < MODE_COUNT; m++) {
            for (size_t p = 0; p < sizeof patterns / sizeof patterns[0]; p++) {
                wk_blake3_hasher h;
                uint8_t out[XOF_LEN];
                char what[64];
                snprintf(what, sizeof what, "%s, pieces %s", mode_names[m], patterns[p].name);

                init_mode(&h, m);
                feed(&h, p % 2 ? odd + 1 : buf, v->len, patterns[p].p, patterns[p].n);
                wk_blake3_final(&h, out, XOF_LEN);
                check(out, v->out[m], XOF_LEN, what, v->len);
                wk_blake3_final(&h, out, WK_BLAKE3_OUT_LEN);
                check(out, v->out[m], WK_BLAKE3_OUT_LEN, what, v->len);
            }
        }
    }
    free(odd);
    free(buf);
}

/* Pieces of pseudo-random sizes (0 to 5000 bytes), several seeds. */
static void check_random_pieces(const char *impl)
{
    use_impl(impl);
    uint8_t *in = make_input(V.max_len);

    for (uint32_t seed = 1; seed <= 8; seed++) {
        uint32_t x = seed * 2654435761u;
        for (size_t c = 0; c < V.count; c++) {
            const vector *v = &V.cases[c];
            for (int m = 0; m < MODE_COUNT; m++) {
                wk_blake3_hasher h;
                uint8_t out[XOF_LEN];
                char what[64];
                snprintf(what, sizeof what, "%s, random pieces seed %u", mode_names[m],
                         (unsigned)seed);

                init_mode(&h, m);
                size_t off = 0;
                while (off < v->len) {
                    x ^= x << 13; /* xorshift32 */
                    x ^= x >> 17;
                    x ^= x << 5;
                    size_t take = x % 5001;
                    if (take > v->len - off)
                        take = v->len - off;
                    wk_blake3_update(&h, in + off, take);
                    off += take;
                }
                wk_blake3_final(&h, out, XOF_LEN);
                check(out, v->out[m], XOF_LEN, what, v->len);
            }
        }
    }
    free(in);
}

/* final() leaves the hasher alone: calling it twice gives the same output,
** and update() after final() continues the same message. The input of a
** shorter case is a prefix of a longer one, so final after the prefix is
** checked against the shorter case and final after the rest against the
** longer one. */
static void check_final_then_update(const char *impl)
{
    use_impl(impl);
    uint8_t *in = make_input(V.max_len);

    for (size_t c = 0; c < V.count; c++) {
        const vector *v = &V.cases[c];
        for (size_t p = 0; p < V.count; p++) {
            const vector *pre = &V.cases[p];
            if (pre->len > v->len)
                continue;
            for (int m = 0; m < MODE_COUNT; m++) {
                wk_blake3_hasher h, copy;
                uint8_t out1[XOF_LEN], out2[XOF_LEN];

                init_mode(&h, m);
                wk_blake3_update(&h, in, pre->len);
                wk_blake3_final(&h, out1, XOF_LEN);
                wk_blake3_final(&h, out2, XOF_LEN);
                check(out1, pre->out[m], XOF_LEN, "final after prefix", pre->len);
                check(out2, pre->out[m], XOF_LEN, "second final after prefix", pre->len);

                /* A copy is an independent state (documented: plain copy). */
                copy = h;
                wk_blake3_update(&h, in + pre->len, v->len - pre->len);
                wk_blake3_final(&h, out1, XOF_LEN);
                check(out1, v->out[m], XOF_LEN, "update after final", v->len);
                wk_blake3_final(&copy, out2, XOF_LEN);
                check(out2, pre->out[m], XOF_LEN, "copy of hasher", pre->len);
            }
        }
    }
    free(in);
}

/* Inputs larger than the vectors (crossing the 64 KiB subtree limit of
** core/blake3.c, odd length), answers from:
**   b3sum --no-names -l 131 [--keyed | --derive-key CTX] FILE
** where FILE holds 1049601 (1 MiB + 1025) bytes, byte i = i % 251. */
static const char *const big_answers[MODE_COUNT] = {
    "860f19b5fefff01454de342be87a20059449529116a20fb22a21da665aafa071b5162b3bbe6a897ece5d"
    "25c19980f01dabcbcc5fc94cb84105f2fd11871e8ab00e082ea1d98795fedacfbd7d41112f671f1e51ab"
    "cb49c827eac2bfd6909c9aaa2519061aa19bb9d7aed3225c0a6f53dc5e9d01638f430088ef8a2eb0a078"
    "340acca781",
    "cad95b45045adc2bbe591d0f6fd8d71305b4f048020a537734c94b9b599f612144be7d7f104b831b6356"
    "633a85b70e400fa3574e151c419dac9dd616356f0a88e1341477c58d3cbc683fee5f6483e16d527ab371"
    "597387c3c846261e8dfddb324876e23c7861e27b5e41d4e888a4090f8611a14665386bacb07c48fcb4b7"
    "b2371ad5cb",
    "da87204b6d4f92a85af2eaf5fdff38d81272056b7eeadb4673a85f84f7072e4fa007d76f172407edd823"
    "f860c0c31634732c21102d78cee845279e737e2a2319ce5e72eab86870fe4404973f649cdf86e4599e75"
    "9954b1f1028a081fc95599970d70c68d879694b9790b946f59efc21581832c07cedbbfcf9f8198e01b85"
    "9b050f0dd7",
};
#define BIG_LEN ((size_t)1048576 + 1025)

static void check_big(const char *impl)
{
    static const size_t pieces[] = {1048576 + 1025, 65536, 1024, 1025, 131072 + 7};
    use_impl(impl);
    uint8_t *in = make_input(BIG_LEN);

    for (int m = 0; m < MODE_COUNT; m++) {
        uint8_t want[XOF_LEN];
        cr_assert_eq(unhex(want, big_answers[m], XOF_LEN), 0);
        for (size_t p = 0; p < sizeof pieces / sizeof pieces[0]; p++) {
            wk_blake3_hasher h;
            uint8_t out[XOF_LEN];
            char what[64];
            snprintf(what, sizeof what, "%s, pieces of %zu", mode_names[m], pieces[p]);
            init_mode(&h, m);
            feed(&h, in, BIG_LEN, &pieces[p], 1);
            wk_blake3_final(&h, out, XOF_LEN);
            check(out, want, XOF_LEN, what, BIG_LEN);
        }
    }
    free(in);
}

/* ------------------------------------------------------------------------
** Tests: every check for every implementation.
** --------------------------------------------------------------------- */

#define PER_IMPL(check_fn, impl)                                                                   \
    Test(blake3, check_fn##_##impl)                                                                \
    {                                                                                              \
        check_fn(#impl);                                                                           \
    }

#define ALL_IMPLS(check_fn)                                                                        \
    PER_IMPL(check_fn, portable)                                                                   \
    PER_IMPL(check_fn, sse41)                                                                      \
    PER_IMPL(check_fn, avx2)                                                                       \
    PER_IMPL(check_fn, avx512)

ALL_IMPLS(check_oneshot)
ALL_IMPLS(check_streaming)
ALL_IMPLS(check_random_pieces)
ALL_IMPLS(check_final_then_update)
ALL_IMPLS(check_big)

/* ------------------------------------------------------------------------
** API details that do not depend on the implementation.
** --------------------------------------------------------------------- */

Test(blake3, vectors_file_is_complete)
{
    load_vectors();
    /* The shared file has 31 cases from 0 to 102400 bytes; losing cases
    ** would silently weaken every other test. */
    cr_assert_eq(V.count, 31);
    cr_assert_eq(V.cases[0].len, 0);
    cr_assert_eq(V.max_len, 102400);
}

Test(blake3, empty_input_matches_spec)
{
    /* Independent of the file: the well-known hash of the empty input. */
    static const char *want = "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262";
    uint8_t out[WK_BLAKE3_OUT_LEN], w[WK_BLAKE3_OUT_LEN];
    cr_assert_eq(unhex(w, want, sizeof w), 0);
    wk_blake3(NULL, 0, out);
    cr_assert_arr_eq(out, w, sizeof w);

    wk_blake3_hasher h;
    wk_blake3_init(&h);
    wk_blake3_update(&h, NULL, 0); /* harmless no-op */
    wk_blake3_final(&h, NULL, 0);  /* writes nothing */
    wk_blake3_final(&h, out, sizeof out);
    cr_assert_arr_eq(out, w, sizeof w);
}

Test(blake3, derive_key_raw_equals_derive_key)
{
    load_vectors();
    const vector *v = &V.cases[V.count - 1];
    uint8_t *in = make_input(v->len);
    uint8_t out[XOF_LEN];
    wk_blake3_hasher h;

    wk_blake3_init_derive_key_raw(&h, V.context, strlen(V.context));
    wk_blake3_update(&h, in, v->len);
    wk_blake3_final(&h, out, XOF_LEN);
    check(out, v->out[MODE_DERIVE], XOF_LEN, "derive_key_raw", v->len);

    /* A context with one more byte (its NUL) is a different context. */
    wk_blake3_init_derive_key_raw(&h, V.context, strlen(V.context) + 1);
    wk_blake3_update(&h, in, v->len);
    wk_blake3_final(&h, out, XOF_LEN);
    cr_assert(memcmp(out, v->out[MODE_DERIVE], XOF_LEN) != 0);
    free(in);
}

Test(blake3, reinit_discards_state)
{
    load_vectors();
    const vector *v = &V.cases[V.count - 1];
    uint8_t *in = make_input(v->len);
    uint8_t out[WK_BLAKE3_OUT_LEN];
    wk_blake3_hasher h;

    wk_blake3_init_keyed(&h, V.key);
    wk_blake3_update(&h, in, 5000);
    wk_blake3_init(&h);
    wk_blake3_update(&h, in, v->len);
    wk_blake3_final(&h, out, sizeof out);
    check(out, v->out[MODE_HASH], sizeof out, "init after use", v->len);
    free(in);
}

Test(blake3, implementation_selection)
{
    const char *name = wk_blake3_implementation();
    cr_assert(strcmp(name, "portable") == 0 || strcmp(name, "sse41") == 0 ||
                  strcmp(name, "avx2") == 0 || strcmp(name, "avx512") == 0,
              "unexpected implementation %s", name);

    cr_assert_eq(wk__blake3_force("no-such-impl"), -1);
    cr_assert_str_eq(wk_blake3_implementation(), name, "failed force changed the choice");

    wk__blake3_force_portable(1);
    cr_assert_str_eq(wk_blake3_implementation(), "portable");
    wk__blake3_force_portable(0);
    cr_assert_str_eq(wk_blake3_implementation(), name, "automatic choice not restored");

#if WK__B3_X86
    /* The automatic choice is the widest the CPU supports. */
    __builtin_cpu_init();
    int sse41 = __builtin_cpu_supports("sse4.1");
    int avx2 = sse41 && __builtin_cpu_supports("avx2");
    int avx512 = avx2 && __builtin_cpu_supports("avx512f");
    cr_assert_str_eq(name, avx512 ? "avx512" : avx2 ? "avx2" : sse41 ? "sse41" : "portable");
#endif
}
