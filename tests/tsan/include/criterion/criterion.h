/*
 * tests/tsan/include/criterion/criterion.h — the part of criterion 2.4
 * that the threaded suites and tests/support use, for the ThreadSanitizer
 * build only (libcriterion cannot run under TSan, Criterion issue #274).
 * The runner that gives it its meaning is tests/tsan/runner.c; what it does
 * and does not implement is described there.
 *
 * Provided:
 *   Test(suite, name, .init, .fini, .timeout, .disabled, .description,
 *        .exit_code, .signal)          a test, run in its own process
 *   TestSuite(suite, same options)     defaults for the suite's tests
 *   cr_assert / cr_expect and their _not, _eq, _neq, _lt, _leq, _gt, _geq,
 *   _null, _not_null, _str_eq, _str_neq, _str_empty, _arr_eq, _fail
 *   variants, each with an optional printf-style message
 *   cr_skip_test, cr_log_info, cr_log_warn, cr_log_error
 *
 * cr_assert_* ends the test at the first failure (the .fini functions still
 * run when it fails in the test's own thread); cr_expect_* records the
 * failure and goes on. Arguments are evaluated once; the message only when
 * the check fails.
 */
#ifndef WK_SHIM_CRITERION_H
#define WK_SHIM_CRITERION_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

/* Options of Test() and TestSuite(), given as designated initializers. A
 * test's own option wins over its suite's; init and fini of both run
 * (suite init, test init, body, test fini, suite fini). */
struct criterion_test_extra_data {
    int wk_shim_none_; /* lets the option list be empty */
    void (*init)(void);
    void (*fini)(void);
    double timeout; /* seconds; 0: the suite's, then --timeout, then none */
    bool disabled;
    const char *description;
    int exit_code; /* the exit status that counts as passing (default 0) */
    int signal;    /* a signal that counts as passing (default none) */
};

/* One registered test; filled in by Test(). */
struct wk_shim_test {
    const char *suite;
    const char *name;
    void (*body)(void);
    const char *file;
    int line;
    struct criterion_test_extra_data opt;
    struct wk_shim_test *next;
};

/* One registered suite; filled in by TestSuite(). */
struct wk_shim_suite {
    const char *name;
    struct criterion_test_extra_data opt;
    struct wk_shim_suite *next;
};

void wk_shim_register_test(struct wk_shim_test *t);
void wk_shim_register_suite(struct wk_shim_suite *s);

/* The reporting functions behind the macros. `fmt` always starts with one
 * space (the macros prepend it so that an absent message is a valid,
 * non-empty format); `expr` is the check's text, NULL for cr_*_fail; `a`
 * and `b` the two strings of a string check, else NULL. */
_Noreturn void wk_shim_assert_failed(const char *file, int line, const char *expr, const char *a,
                                     const char *b, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
void wk_shim_expect_failed(const char *file, int line, const char *expr, const char *a,
                           const char *b, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
_Noreturn void wk_shim_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* One log line, "<tag> message", on the test's stderr. */
void wk_shim_log(const char *tag, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* strcmp that orders NULL before every string, so a NULL never crashes a
 * check and is never equal to a string. */
int wk_shim_strcmp(const char *a, const char *b);

/* ---- registration */

#define WK_SHIM_ID(what, Suite, Name) wk_shim_##what##_##Suite##_##Name

#define Test(Suite, Name, ...)                                                                 \
    static void WK_SHIM_ID(body, Suite, Name)(void);                                           \
    static struct wk_shim_test WK_SHIM_ID(test, Suite, Name) = {                               \
        .suite = #Suite,                                                                       \
        .name = #Name,                                                                         \
        .body = WK_SHIM_ID(body, Suite, Name),                                                 \
        .file = __FILE__,                                                                      \
        .line = __LINE__,                                                                      \
        .opt = {.wk_shim_none_ = 0, __VA_ARGS__},                                              \
    };                                                                                         \
    __attribute__((constructor)) static void WK_SHIM_ID(register, Suite, Name)(void)          \
    {                                                                                          \
        wk_shim_register_test(&WK_SHIM_ID(test, Suite, Name));                                 \
    }                                                                                          \
    static void WK_SHIM_ID(body, Suite, Name)(void)

/* Ends with a definition, so the `;` after TestSuite(...) closes it. */
#define TestSuite(Suite, ...)                                                                  \
    static struct wk_shim_suite wk_shim_suite_##Suite;                                         \
    __attribute__((constructor)) static void wk_shim_register_suite_##Suite(void)              \
    {                                                                                          \
        wk_shim_register_suite(&wk_shim_suite_##Suite);                                        \
    }                                                                                          \
    static struct wk_shim_suite wk_shim_suite_##Suite = {                                      \
        .name = #Suite,                                                                        \
        .opt = {.wk_shim_none_ = 0, __VA_ARGS__},                                              \
    }

/* ---- checks: `kind` is assert (fatal) or expect */

#define WK_SHIM_FAILED_assert wk_shim_assert_failed
#define WK_SHIM_FAILED_expect wk_shim_expect_failed

#define WK_SHIM_CHECK(kind, cond, expr, ...)                                                   \
    do {                                                                                       \
        if (!(cond))                                                                           \
            WK_SHIM_FAILED_##kind(__FILE__, __LINE__, expr, NULL, NULL, " " __VA_ARGS__);      \
    } while (0)

#define WK_SHIM_STR(kind, op, a, b, expr, ...)                                                 \
    do {                                                                                       \
        const char *wk_shim_a_ = (a), *wk_shim_b_ = (b);                                       \
        if (!(wk_shim_strcmp(wk_shim_a_, wk_shim_b_) op 0))                                    \
            WK_SHIM_FAILED_##kind(__FILE__, __LINE__, expr, wk_shim_a_, wk_shim_b_,            \
                                  " " __VA_ARGS__);                                            \
    } while (0)

#define WK_SHIM_CMP(kind, op, a, b, ...)                                                       \
    WK_SHIM_CHECK(kind, (a) op (b), "(" #a ") " #op " (" #b ")", __VA_ARGS__)

#define cr_assert(cond, ...) WK_SHIM_CHECK(assert, cond, #cond, __VA_ARGS__)
#define cr_assert_not(cond, ...) WK_SHIM_CHECK(assert, !(cond), "!(" #cond ")", __VA_ARGS__)
#define cr_assert_eq(a, b, ...) WK_SHIM_CMP(assert, ==, a, b, __VA_ARGS__)
#define cr_assert_neq(a, b, ...) WK_SHIM_CMP(assert, !=, a, b, __VA_ARGS__)
#define cr_assert_lt(a, b, ...) WK_SHIM_CMP(assert, <, a, b, __VA_ARGS__)
#define cr_assert_leq(a, b, ...) WK_SHIM_CMP(assert, <=, a, b, __VA_ARGS__)
#define cr_assert_gt(a, b, ...) WK_SHIM_CMP(assert, >, a, b, __VA_ARGS__)
#define cr_assert_geq(a, b, ...) WK_SHIM_CMP(assert, >=, a, b, __VA_ARGS__)
#define cr_assert_null(p, ...) WK_SHIM_CHECK(assert, (p) == NULL, "(" #p ") == NULL", __VA_ARGS__)
#define cr_assert_not_null(p, ...)                                                             \
    WK_SHIM_CHECK(assert, (p) != NULL, "(" #p ") != NULL", __VA_ARGS__)
#define cr_assert_str_eq(a, b, ...)                                                            \
    WK_SHIM_STR(assert, ==, a, b, "(" #a ") == (" #b ") as strings", __VA_ARGS__)
#define cr_assert_str_neq(a, b, ...)                                                           \
    WK_SHIM_STR(assert, !=, a, b, "(" #a ") != (" #b ") as strings", __VA_ARGS__)
#define cr_assert_str_empty(s, ...)                                                            \
    WK_SHIM_CHECK(assert, (s)[0] == '\0', "(" #s ") is empty", __VA_ARGS__)
#define cr_assert_arr_eq(a, b, size, ...)                                                      \
    WK_SHIM_CHECK(assert, memcmp((a), (b), (size)) == 0,                                       \
                  "the " #size " bytes of (" #a ") and (" #b ") are equal", __VA_ARGS__)
#define cr_assert_fail(...) wk_shim_assert_failed(__FILE__, __LINE__, NULL, NULL, NULL, " " __VA_ARGS__)

#define cr_expect(cond, ...) WK_SHIM_CHECK(expect, cond, #cond, __VA_ARGS__)
#define cr_expect_not(cond, ...) WK_SHIM_CHECK(expect, !(cond), "!(" #cond ")", __VA_ARGS__)
#define cr_expect_eq(a, b, ...) WK_SHIM_CMP(expect, ==, a, b, __VA_ARGS__)
#define cr_expect_neq(a, b, ...) WK_SHIM_CMP(expect, !=, a, b, __VA_ARGS__)
#define cr_expect_lt(a, b, ...) WK_SHIM_CMP(expect, <, a, b, __VA_ARGS__)
#define cr_expect_leq(a, b, ...) WK_SHIM_CMP(expect, <=, a, b, __VA_ARGS__)
#define cr_expect_gt(a, b, ...) WK_SHIM_CMP(expect, >, a, b, __VA_ARGS__)
#define cr_expect_geq(a, b, ...) WK_SHIM_CMP(expect, >=, a, b, __VA_ARGS__)
#define cr_expect_null(p, ...) WK_SHIM_CHECK(expect, (p) == NULL, "(" #p ") == NULL", __VA_ARGS__)
#define cr_expect_not_null(p, ...)                                                             \
    WK_SHIM_CHECK(expect, (p) != NULL, "(" #p ") != NULL", __VA_ARGS__)
#define cr_expect_str_eq(a, b, ...)                                                            \
    WK_SHIM_STR(expect, ==, a, b, "(" #a ") == (" #b ") as strings", __VA_ARGS__)
#define cr_expect_str_neq(a, b, ...)                                                           \
    WK_SHIM_STR(expect, !=, a, b, "(" #a ") != (" #b ") as strings", __VA_ARGS__)
#define cr_expect_str_empty(s, ...)                                                            \
    WK_SHIM_CHECK(expect, (s)[0] == '\0', "(" #s ") is empty", __VA_ARGS__)
#define cr_expect_arr_eq(a, b, size, ...)                                                      \
    WK_SHIM_CHECK(expect, memcmp((a), (b), (size)) == 0,                                       \
                  "the " #size " bytes of (" #a ") and (" #b ") are equal", __VA_ARGS__)
#define cr_expect_fail(...) wk_shim_expect_failed(__FILE__, __LINE__, NULL, NULL, NULL, " " __VA_ARGS__)

/* Ends the test as skipped (no .fini runs, as in criterion). */
#define cr_skip_test(...) wk_shim_skip(" " __VA_ARGS__)

#define cr_log_info(...) wk_shim_log("[----]", __VA_ARGS__)
#define cr_log_warn(...) wk_shim_log("[WARN]", __VA_ARGS__)
#define cr_log_error(...) wk_shim_log("[ERR ]", __VA_ARGS__)

#endif /* WK_SHIM_CRITERION_H */
