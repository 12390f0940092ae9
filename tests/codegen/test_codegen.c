/*
 * tests/codegen/test_codegen.c — wk-codegen as a program: golden output
 * byte for byte, one bad schema per validation rule (message, JSON path
 * and line:column), determinism, and compile tests that run the C
 * compiler on the generated code (it compiles and links warning-free;
 * calling a query a capability does not grant does not compile).
 *
 * Needs the build: $WK_TEST_BINARY_DIR/codegen/wk-codegen and
 * libwakuwaku.a, and $WK_TEST_SOURCE_DIR (ctest sets both). No Redis.
 * Refresh the golden files after an intended change with
 *     tests/codegen/refresh.sh build
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <wakuwaku/common.h>

static const char *src_dir(void)
{
    const char *d = getenv("WK_TEST_SOURCE_DIR");
    cr_assert(d, "WK_TEST_SOURCE_DIR is not set (run through ctest)");
    return d;
}

static const char *bin_dir(void)
{
    const char *d = getenv("WK_TEST_BINARY_DIR");
    cr_assert(d, "WK_TEST_BINARY_DIR is not set (run through ctest)");
    return d;
}

/* A fresh temporary directory, removed by rm_tmp(). */
static char *make_tmp(void)
{
    char *t = strdup("/tmp/wk-codegen-test-XXXXXX");
    cr_assert(t && mkdtemp(t), "mkdtemp");
    return t;
}

static void rm_tmp(char *dir)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
    free(dir);
}

/* The whole file, NUL-terminated; NULL if it cannot be read. */
static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    cr_assert(buf);
    cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    if (len)
        *len = (size_t)n;
    return buf;
}

static void spit(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    cr_assert(f, "cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

/* Runs a shell command with stdout and stderr into one string (caller
 * frees); *status gets its exit status. */
static char *run(const char *cmd, int *status)
{
    char *dir = make_tmp();
    char out[600], full[8192];
    snprintf(out, sizeof(out), "%s/out.txt", dir);
    int n = snprintf(full, sizeof(full), "( %s ) >'%s' 2>&1", cmd, out);
    cr_assert(n > 0 && (size_t)n < sizeof(full), "command too long: %s", cmd);
    int rc = system(full);
    *status = WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
    char *text = slurp(out, NULL);
    rm_tmp(dir);
    return text ? text : strdup("");
}

/* wk-codegen <schema> -o <outdir> [extra]; returns its output. */
static char *codegen(const char *schema, const char *outdir, const char *extra, int *status)
{
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "'%s/codegen/wk-codegen' '%s' -o '%s' %s", bin_dir(), schema,
             outdir, extra ? extra : "");
    return run(cmd, status);
}

/* ------------------------------------------------------------------------
 * Golden files
 * ---------------------------------------------------------------------- */

static const struct golden {
    const char *dir;     /* tests/codegen/golden/<dir> */
    const char *service; /* the files are <service>.h and .c */
} goldens[] = {
    {"minimal", "mini"},
    {"caps", "shop"},
    {"kinds", "kinds"},
    {"bodies", "bodies"},
};
#define NGOLDEN (sizeof(goldens) / sizeof(goldens[0]))

static void assert_same_file(const char *got_path, const char *want_path)
{
    size_t got_len, want_len;
    char *got = slurp(got_path, &got_len);
    char *want = slurp(want_path, &want_len);
    cr_assert(got, "wk-codegen did not write %s", got_path);
    cr_assert(want, "missing golden file %s (tests/codegen/refresh.sh writes it)", want_path);
    if (got_len != want_len || memcmp(got, want, got_len) != 0) {
        /* the first differing line, to make the failure readable */
        size_t i = 0, line = 1, start = 0;
        while (i < got_len && i < want_len && got[i] == want[i]) {
            if (got[i] == '\n') {
                line++;
                start = i + 1;
            }
            i++;
        }
        cr_assert_fail("%s differs from %s at line %zu:\n  got:  %.120s\n  want: %.120s\n"
                       "(if the change is intended: tests/codegen/refresh.sh BUILD_DIR)",
                       got_path, want_path, line, got + start, want + start);
    }
    free(got);
    free(want);
}

Test(codegen, golden_files_byte_for_byte)
{
    for (size_t g = 0; g < NGOLDEN; g++) {
        char *out = make_tmp();
        char schema[1024], got[1024], want[1024];
        snprintf(schema, sizeof(schema), "%s/tests/codegen/golden/%s/schema.json", src_dir(),
                 goldens[g].dir);
        int status;
        char *msg = codegen(schema, out, NULL, &status);
        cr_assert_eq(status, 0, "wk-codegen %s failed:\n%s", schema, msg);
        cr_assert_str_empty(msg, "a good schema prints nothing, got: %s", msg);
        free(msg);
        for (int k = 0; k < 2; k++) {
            const char *ext = k ? "c" : "h";
            snprintf(got, sizeof(got), "%s/%s.%s", out, goldens[g].service, ext);
            snprintf(want, sizeof(want), "%s/tests/codegen/golden/%s/expected/%s.%s", src_dir(),
                     goldens[g].dir, goldens[g].service, ext);
            assert_same_file(got, want);
        }
        rm_tmp(out);
    }
}

/* Same schema → same bytes, whatever the directory it is read from, the
 * working directory or the run (no paths, times or addresses leak in). */
Test(codegen, output_is_deterministic)
{
    char *a = make_tmp(), *b = make_tmp();
    char schema[1024], copy[1024], cmd[4096];
    snprintf(schema, sizeof(schema), "%s/tests/codegen/golden/bodies/schema.json", src_dir());
    snprintf(copy, sizeof(copy), "%s/schema.json", b);
    snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", schema, copy);
    cr_assert_eq(system(cmd), 0);
    int status;
    free(codegen(schema, a, NULL, &status));
    cr_assert_eq(status, 0);
    snprintf(cmd, sizeof(cmd), "cd '%s' && '%s/codegen/wk-codegen' schema.json -o .", b,
             bin_dir());
    free(run(cmd, &status));
    cr_assert_eq(status, 0);
    char p1[1024], p2[1024];
    snprintf(p1, sizeof(p1), "%s/bodies.c", a);
    snprintf(p2, sizeof(p2), "%s/bodies.c", b);
    assert_same_file(p2, p1);
    snprintf(p1, sizeof(p1), "%s/bodies.h", a);
    snprintf(p2, sizeof(p2), "%s/bodies.h", b);
    assert_same_file(p2, p1);
    rm_tmp(a);
    rm_tmp(b);
}

Test(codegen, banner_names_schema_and_version)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/tests/codegen/golden/minimal/expected/mini.h", src_dir());
    char *h = slurp(path, NULL);
    cr_assert(h);
    char want[256];
    snprintf(want, sizeof(want), "Generated by wk-codegen %s from schema.json. DO NOT EDIT",
             WK_VERSION_STRING);
    cr_assert(strstr(h, want), "banner: %.300s", h);
    cr_assert(strstr(h, "#error"), "version guard");
    free(h);
}

/* ------------------------------------------------------------------------
 * Bad schemas: one per rule
 * ---------------------------------------------------------------------- */

static const struct bad {
    const char *file;   /* tests/codegen/bad/<file> */
    const char *expect; /* a line of the output, after "<path>:" */
} bads[] = {
    {"syntax_error.json",
     "5:3: error: $: invalid JSON: trailing comma: JSON allows no ',' before ']'"},
    {"wrong_json_type.json", "3:15: error: $.entities: entities must be an array, not an object"},
    /* Every escape of a JSON string, read back in the message. */
    {"string_escapes.json", "4:49: error: $.entities[0].namespace: namespace "
                            "\"q\"b\\s/\xc3\xa9\xf0\x9f\x98\x80\b\f\n\r\t:\" contains ':'"},
    {"invalid_escape.json", "4:54: error: $: invalid JSON: invalid escape \\q"},
    /* The kinds in the order of their headers' prefixes (WK__KINDS,
     * cmake/wk_kinds.cmake); only the first is pinned, so a new kind (the
     * scratch kind of tests/scratch_kind) joins in its place. */
    {"unknown_kind.json",
     "4:25: error: $.entities[0].kind: unknown kind \"Mutex\" (kinds: Cache, "},
    {"unknown_name_type.json",
     "4:59: error: $.entities[0].name: unknown name type \"string\"; did you mean \"str\"? "
     "(types: str, bytes, u64, i64)"},
    {"unknown_field_type.json",
     "7:50: error: $.records[0].fields[0].type: unknown type \"strng\"; did you mean "
     "\"string\"?"},
    {"missing_key.json", "4:5: error: $.entities[0]: missing required key \"namespace\" in an "
                         "entity"},
    {"unknown_key.json", "4:79: error: $.entities[0].tll: unknown key \"tll\" in an entity; did "
                         "you mean \"ttl\"?"},
    {"key_of_other_kind.json",
     "5:32: error: $.entities[0].ttl: unknown key \"ttl\": a TokenBucket has no TTL"},
    {"fair_not_a_lock.json", "4:80: error: $.entities[0].fair: unknown key \"fair\": a Cache has "
                             "no fair mode (a Lock or an RwLock has)"},
    {"fair_not_boolean.json",
     "4:87: error: $.entities[0].fair: fair must be true or false, not a string"},
    {"duplicate_id.json",
     "5:12: error: $.entities[1].id: duplicate entity id \"a\" (also entities[0], line 4:12)"},
    {"duplicate_key.json",
     "4:79: error: $.entities[0].ttl: duplicate key \"ttl\" (first at line 4:66)"},
    {"duplicate_field.json",
     "9:16: error: $.records[0].fields[1].name: duplicate field name \"x\" (also fields[0])"},
    {"member_clash.json",
     "9:16: error: $.records[0].fields[1].name: field \"tags_len\" and fields[0] \"tags\" both "
     "need the struct member tags_len; rename one"},
    {"name_collision.json",
     "4:5: error: $.entities[0]: the generated name bad_a_try (accessor) is already generated "
     "for $.records[0] (record type, line 8:5); rename one of them"},
    {"namespace_colon.json",
     "5:52: error: $.entities[1].namespace: namespace \"jobs:billing\" contains ':' (':', '{' "
     "and '}' separate the parts of a key, so such a namespace would share keys with another "
     "one)"},
    {"namespace_brace.json",
     "4:55: error: $.entities[0].namespace: namespace \"{api}\" contains '{' (':', '{' and '}' "
     "separate the parts of a key, so such a namespace would share keys with another one)"},
    {"shared_namespace.json",
     "5:53: error: $.entities[1].namespace: entities invoice2 and invoice (entities[0]) are "
     "both Lock:invoice: they would share Redis keys"},
    {"invalid_identifier.json",
     "4:12: error: $.entities[0].id: invalid identifier \"my-lock\" for an entity id: use "
     "letters, digits and '_', starting with a letter (refused, not escaped)"},
    {"param_clash.json",
     "4:75: error: $.entities[0].param: the name parameter \"token\" clashes with a parameter of "
     "the generated accessors"},
    {"ttl_zero.json", "4:73: error: $.entities[0].ttl: ttl must be > 0 (got \"0s\")"},
    {"ttl_negative.json", "4:73: error: $.entities[0].ttl: ttl must be > 0 (got -250)"},
    {"ttl_malformed.json",
     "4:73: error: $.entities[0].ttl: invalid ttl \"30 sec\": write a whole number with a unit"},
    {"rate_zero.json", "4:96: error: $.entities[0].rate: rate must be > 0 (got 0)"},
    {"capacity_zero.json", "4:85: error: $.entities[0].capacity: capacity must be > 0 (got 0)"},
    {"permits_fractional.json", "4:82: error: $.entities[0].permits: permits must be a whole "
                                "number from 1 to 1000000 (got 1.5)"},
    {"capacity_inexact.json",
     "4:85: error: $.entities[0].capacity: capacity 0.1 is not n/2^k with whole n <= 2^50 and k "
     "<= 50: use a whole number up to 2^50 = 1125899906842624 or a binary fraction such as 2.5"},
    {"max_diffs_fraction.json",
     "4:83: error: $.entities[0].max_diffs: max_diffs must be a whole number 0..2^53 (got 1.5)"},
    {"rate_inexact.json",
     "4:96: error: $.entities[0].rate: rate 0.1 per 1000 ms is not exact: rate / period_ms must "
     "reduce to n/d tokens per ms with d <= 2^53"},
    {"record_cycle.json",
     "8:50: error: $.records[1].fields[0].type: record q holds record p by value, which holds q "
     "again"},
    {"unknown_record.json", "4:88: error: $.entities[0].body: no record has the id \"nope\""},
    {"unknown_grant_entity.json",
     "7:52: error: $.capabilities[0].grants.invoce: no entity has the id \"invoce\"; did you "
     "mean \"invoice\"?"},
    {"bad_grant.json",
     "7:33: error: $.capabilities[0].default: unknown grant \"rw\" (grants: none, read, write)"},
};
#define NBAD (sizeof(bads) / sizeof(bads[0]))

Test(codegen, bad_schemas_one_per_rule)
{
    for (size_t i = 0; i < NBAD; i++) {
        char *out = make_tmp();
        char schema[1024], want[2048];
        snprintf(schema, sizeof(schema), "%s/tests/codegen/bad/%s", src_dir(), bads[i].file);
        int status;
        char *msg = codegen(schema, out, NULL, &status);
        cr_assert_eq(status, 1, "%s: exit status %d, want 1; output:\n%s", bads[i].file, status,
                     msg);
        snprintf(want, sizeof(want), "%s:%s", schema, bads[i].expect);
        cr_assert(strstr(msg, want), "%s: output lacks\n  %s\ngot:\n%s", bads[i].file, want, msg);
        /* nothing written for a bad schema */
        char probe[1100];
        snprintf(probe, sizeof(probe), "ls -A '%s' | wc -l | grep -qx 0", out);
        cr_assert_eq(system(probe), 0, "%s: files were written for a bad schema", bads[i].file);
        free(msg);
        rm_tmp(out);
    }
}

/* Every problem is reported, not only the first. */
Test(codegen, reports_every_problem)
{
    char *out = make_tmp();
    char schema[1024];
    snprintf(schema, sizeof(schema), "%s/tests/codegen/bad/many_errors.json", src_dir());
    int status;
    char *msg = codegen(schema, out, NULL, &status);
    cr_assert_eq(status, 1);
    static const char *const lines[] = {
        "2:14: error: $.service: invalid identifier \"bad service\"",
        "4:25: error: $.entities[0].kind: unknown kind \"Lokc\"; did you mean \"Lock\"?",
        "5:73: error: $.entities[1].ttl: ttl must be > 0 (got \"0ms\")",
        "6:66: error: $.entities[2].name: unknown name type \"u32\"; did you mean \"u64\"?",
        "6:85: error: $.entities[2].capacity: capacity must be > 0 (got 0)",
        "6:96: error: $.entities[2].rate: rate must be > 0 (got 0)",
        "9:36: error: $.capabilities[0].colour: unknown key \"colour\" in a capability",
        "many_errors.json: 7 errors",
    };
    for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++)
        cr_assert(strstr(msg, lines[i]), "output lacks %s; got:\n%s", lines[i], msg);
    free(msg);
    rm_tmp(out);
}

Test(codegen, expect_service_mismatch)
{
    char *out = make_tmp();
    char schema[1024];
    snprintf(schema, sizeof(schema), "%s/tests/codegen/golden/minimal/schema.json", src_dir());
    int status;
    char *msg = codegen(schema, out, "--expect-service billing", &status);
    cr_assert_eq(status, 1);
    cr_assert(strstr(msg, "error: $.service: the service is \"mini\" but the build expects "
                          "\"billing\""),
              "%s", msg);
    free(msg);
    rm_tmp(out);
}

Test(codegen, usage_errors)
{
    int status;
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "'%s/codegen/wk-codegen'", bin_dir());
    char *msg = run(cmd, &status);
    cr_assert_eq(status, 2);
    cr_assert(strstr(msg, "usage: wk-codegen"), "%s", msg);
    free(msg);
    snprintf(cmd, sizeof(cmd), "'%s/codegen/wk-codegen' /nonexistent/schema.json -o /tmp",
             bin_dir());
    msg = run(cmd, &status);
    cr_assert_eq(status, 2);
    cr_assert(strstr(msg, "cannot read /nonexistent/schema.json"), "%s", msg);
    free(msg);
    snprintf(cmd, sizeof(cmd), "'%s/codegen/wk-codegen' --version", bin_dir());
    msg = run(cmd, &status);
    cr_assert_eq(status, 0);
    char want[64];
    snprintf(want, sizeof(want), "wk-codegen %s\n", WK_VERSION_STRING);
    cr_assert_str_eq(msg, want);
    free(msg);
}

/* The last line of a failed check counts the errors printed before it,
 * "file: N error" / "file: N errors" (SCHEMA.md, "Validation messages"),
 * for every bad schema, the invalid-JSON one and many_errors.json too. */
Test(codegen, error_output_ends_with_count)
{
    static const char *const more[] = {"many_errors.json"};
    for (size_t i = 0; i < NBAD + 1; i++) {
        const char *file = i < NBAD ? bads[i].file : more[0];
        char *out = make_tmp();
        char schema[1024], want[1200];
        snprintf(schema, sizeof(schema), "%s/tests/codegen/bad/%s", src_dir(), file);
        int status;
        char *msg = codegen(schema, out, NULL, &status);
        cr_assert_eq(status, 1, "%s: exit status %d", file, status);
        int errors = 0;
        for (const char *p = msg; (p = strstr(p, ": error: ")); p++)
            errors++;
        cr_assert_gt(errors, 0, "%s: no error printed:\n%s", file, msg);
        snprintf(want, sizeof(want), "\n%s: %d error%s\n", schema, errors,
                 errors == 1 ? "" : "s");
        size_t n = strlen(msg), w = strlen(want);
        cr_assert(n >= w && strcmp(msg + n - w, want) == 0,
                  "%s: the output does not end with\n%s\ngot:\n%s", file, want + 1, msg);
        free(msg);
        rm_tmp(out);
    }
}

/* -o DIR creates DIR and its missing parents; a DIR that cannot be a
 * directory is an I/O error (exit 2) and names it. */
Test(codegen, output_dir_is_created)
{
    char *tmp = make_tmp();
    char schema[1024], outdir[1024], path[1200];
    snprintf(schema, sizeof(schema), "%s/tests/codegen/golden/minimal/schema.json", src_dir());
    snprintf(outdir, sizeof(outdir), "%s/new/nested/dir", tmp);
    int status;
    char *msg = codegen(schema, outdir, NULL, &status);
    cr_assert_eq(status, 0, "exit status %d:\n%s", status, msg);
    free(msg);
    struct stat st;
    snprintf(path, sizeof(path), "%s/mini.h", outdir);
    cr_assert_eq(stat(path, &st), 0, "%s was not written", path);
    snprintf(path, sizeof(path), "%s/mini.c", outdir);
    cr_assert_eq(stat(path, &st), 0, "%s was not written", path);
    /* a file in the way */
    snprintf(path, sizeof(path), "%s/file", tmp);
    spit(path, "x");
    snprintf(outdir, sizeof(outdir), "%s/file/sub", tmp);
    msg = codegen(schema, outdir, NULL, &status);
    cr_assert_eq(status, 2, "exit status %d:\n%s", status, msg);
    cr_assert(strstr(msg, "cannot create"), "%s", msg);
    free(msg);
    rm_tmp(tmp);
}

/* Keywords are escaped (a trailing '_'), the JSON key keeps the name. */
Test(codegen, keywords_are_escaped)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/tests/codegen/golden/bodies/expected/bodies.h", src_dir());
    char *h = slurp(path, NULL);
    cr_assert(h);
    cr_assert(strstr(h, "int32_t default_; /* i32 (JSON key \"default\") */"), "default_");
    cr_assert(strstr(h, "char *int_; /* string, optional (JSON key \"int\") */"), "int_");
    free(h);
    snprintf(path, sizeof(path), "%s/tests/codegen/golden/kinds/expected/kinds.h", src_dir());
    h = slurp(path, NULL);
    cr_assert(strstr(h, "int kinds_export_peek(wk_processor *p, int64_t int_, "), "param int_");
    /* a description with a comment end stays inside the comment */
    free(h);
    snprintf(path, sizeof(path), "%s/tests/codegen/golden/bodies/expected/bodies.h", src_dir());
    h = slurp(path, NULL);
    cr_assert(strstr(h, "with * / and ? ?/ that"), "description escaped");
    free(h);
}

/* ------------------------------------------------------------------------
 * Compile tests: run the C compiler on generated code
 * ---------------------------------------------------------------------- */

/* The compiler and flags of the build (a sanitizer build's library needs
 * the sanitizer at link time too), from its CMakeCache.txt. */
static void compiler(char *cc, size_t cclen, char *extra, size_t extralen)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/CMakeCache.txt", bin_dir());
    char *cache = slurp(path, NULL);
    cr_assert(cache, "no %s", path);
    snprintf(cc, cclen, "cc");
    const char *c = strstr(cache, "CMAKE_C_COMPILER:FILEPATH=");
    if (c) {
        c += strlen("CMAKE_C_COMPILER:FILEPATH=");
        size_t n = strcspn(c, "\n");
        snprintf(cc, cclen, "%.*s", (int)n, c);
    }
    extra[0] = '\0';
    if (strstr(cache, "WK_SANITIZE:BOOL=ON"))
        snprintf(extra, extralen, "-fsanitize=address,undefined");
    free(cache);
}

#define WARNINGS                                                                                \
    "-std=c11 -O2 -Wall -Wextra -Werror -pedantic -Wshadow -Wstrict-prototypes "               \
    "-Wmissing-prototypes"

/* Compiles (and, with `link`, links and runs) main_src against the
 * generated files of `dir`. Returns the compiler's (or program's) exit
 * status, with its output in *output. */
static int compile(const char *dir, const char *service, const char *main_src, bool link,
                   char **output)
{
    char cc[512], extra[128], cmd[8192], main_path[1024];
    compiler(cc, sizeof(cc), extra, sizeof(extra));
    snprintf(main_path, sizeof(main_path), "%s/main.c", dir);
    spit(main_path, main_src);
    int status;
    if (link)
        snprintf(cmd, sizeof(cmd),
                 "cd '%s' && '%s' " WARNINGS " %s -I'%s/include' -I'%s/include' -I. %s.c main.c "
                 "'%s/codec/libwakuwaku_codec.a' '%s/libwakuwaku.a' -lhiredis -lsodium -lssl -lcrypto -ljansson "
                 "-lpthread -lm -o prog && ./prog",
                 dir, cc, extra, src_dir(), bin_dir(), service, bin_dir(), bin_dir());
    else
        snprintf(cmd, sizeof(cmd),
                 "cd '%s' && '%s' " WARNINGS " %s -I'%s/include' -I'%s/include' -I. -c main.c "
                 "-o main.o",
                 dir, cc, extra, src_dir(), bin_dir());
    *output = run(cmd, &status);
    return status;
}

Test(codegen, golden_code_compiles_and_links, .timeout = 240)
{
    for (size_t g = 0; g < NGOLDEN; g++) {
        char *dir = make_tmp();
        char schema[1024], main_src[1024], upper[64];
        snprintf(schema, sizeof(schema), "%s/tests/codegen/golden/%s/schema.json", src_dir(),
                 goldens[g].dir);
        int status;
        free(codegen(schema, dir, NULL, &status));
        cr_assert_eq(status, 0);
        size_t k = 0;
        for (; goldens[g].service[k] && k < sizeof(upper) - 1; k++)
            upper[k] = (char)(goldens[g].service[k] - ('a' <= goldens[g].service[k] &&
                                                               goldens[g].service[k] <= 'z'
                                                           ? 32
                                                           : 0));
        upper[k] = '\0';
        /* references every entity so the linker pulls in the whole file */
        snprintf(main_src, sizeof(main_src),
                 "#include \"%s.h\"\n"
                 "int main(void)\n{\n"
                 "    for (int i = 0; i < %s_ENTITY_COUNT; i++)\n"
                 "        if (wk_entity_check(%s_entities[i]) != WK_OK)\n"
                 "            return 1;\n"
                 "    return 0;\n}\n",
                 goldens[g].service, upper, goldens[g].service);
        char *out;
        status = compile(dir, goldens[g].service, main_src, true, &out);
        cr_assert_eq(status, 0, "%s: generated code does not compile, link or run cleanly:\n%s",
                     goldens[g].dir, out);
        cr_assert_str_empty(out, "%s: the compiler printed something:\n%s", goldens[g].dir, out);
        free(out);
        rm_tmp(dir);
    }
}

/* Compiles main.c of `dir` with the compiler `cc` and no flags but -std=c11
 * and the include paths: what a user gets by default. */
static int compile_plain(const char *dir, const char *cc, char **output)
{
    char cmd[4096];
    snprintf(cmd, sizeof(cmd),
             "cd '%s' && %s -std=c11 -I'%s/include' -I'%s/include' -I. -c main.c -o main.o",
             dir, cc, src_dir(), bin_dir());
    int status;
    *output = run(cmd, &status);
    return status;
}

/* Writes main.c of `dir`. */
static void spit_main(const char *dir, const char *src)
{
    char main_path[1024];
    snprintf(main_path, sizeof(main_path), "%s/main.c", dir);
    spit(main_path, src);
}

/* A call the capability does not grant is a compile error, with gcc and
 * with clang and no flags at all (not a warning that -Werror promotes):
 * each ungranted query is a macro over WK_NOT_GRANTED, a _Static_assert
 * whose message names the function. The granted call next to it compiles,
 * also under the strict flags (so the failure is the grant, not the test). */
Test(codegen, ungranted_call_does_not_compile, .timeout = 240)
{
    static const struct {
        const char *call; /* a call through a typed handle */
        bool compiles;
    } cases[] = {
        {"shop_replica_invoice_inspect(&h, 42, &state)", true},
        {"shop_replica_invoice_try(&h, 42, &token, &acquired)", false},
        {"shop_replica_invoice_release(&h, 42, &token, &acquired)", false},
        {"shop_replica_catalog_try_read(&h, \"s\", &token, &acquired)", false},
        {"shop_replica_login_acquire(&h, \"1.2.3.4\", 1, &outcome)", false},
        {"shop_replica_login_peek(&h, \"1.2.3.4\", &bstate)", true},
        {"shop_worker_invoice_try(&w, 42, &token, &acquired)", true},
        {"shop_worker_catalog_inspect(&w, \"s\", &rstate)", true},
        {"shop_worker_catalog_try_write(&w, \"s\", &token, &acquired)", false}, /* read */
        {"shop_worker_login_peek(&w, \"1.2.3.4\", &bstate)", false},            /* none */
        {"shop_nothing_invoice_inspect(&n, 42, &state)", false},
    };
    char *dir = make_tmp();
    char schema[1024];
    snprintf(schema, sizeof(schema), "%s/tests/codegen/golden/caps/schema.json", src_dir());
    int status;
    free(codegen(schema, dir, NULL, &status));
    cr_assert_eq(status, 0);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char src[2048];
        snprintf(src, sizeof(src),
                 "#include \"shop.h\"\n"
                 "int use(shop_replica *hp, shop_worker *wp, shop_nothing *np);\n"
                 "int use(shop_replica *hp, shop_worker *wp, shop_nothing *np)\n{\n"
                 "    shop_replica h = *hp;\n    shop_worker w = *wp;\n"
                 "    shop_nothing n = *np;\n"
                 "    wk_token token;\n    bool acquired;\n    wk_lock_state state;\n"
                 "    wk_rwlock_state rstate;\n"
                 "    wk_token_bucket_state bstate;\n    wk_token_bucket_outcome outcome;\n"
                 "    (void)h; (void)w; (void)n; (void)token; (void)acquired; (void)state;\n"
                 "    (void)rstate; (void)bstate; (void)outcome;\n"
                 "    return %s;\n}\n",
                 cases[i].call);
        char *out;
        char fn[128];
        snprintf(fn, sizeof(fn), "%.*s", (int)strcspn(cases[i].call, "("), cases[i].call);
        if (cases[i].compiles) {
            status = compile(dir, "shop", src, false, &out);
            cr_assert_eq(status, 0, "%s should compile:\n%s", cases[i].call, out);
            free(out);
        } else {
            spit_main(dir, src);
        }
        static const char *const compilers[] = {"gcc", "clang"};
        for (size_t k = 0; k < 2; k++) {
            status = compile_plain(dir, compilers[k], &out);
            if (cases[i].compiles) {
                cr_assert_eq(status, 0, "%s: %s should compile:\n%s", compilers[k],
                             cases[i].call, out);
            } else {
                cr_assert_neq(status, 0, "%s: %s compiled, but the capability does not grant it",
                              compilers[k], cases[i].call);
                cr_assert(strstr(out, fn), "%s: the diagnostic does not name %s:\n%s",
                          compilers[k], fn, out);
                cr_assert(strstr(out, "static assertion failed") ||
                              strstr(out, "static_assert failed"),
                          "%s: not the WK_NOT_GRANTED error:\n%s", compilers[k], out);
                cr_assert(strstr(out, "error"), "%s: not an error:\n%s", compilers[k], out);
            }
            free(out);
        }
    }
    rm_tmp(dir);
}
