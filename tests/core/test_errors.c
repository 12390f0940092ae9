/*
 * tests/core/test_errors.c — the status table: distinct codes, names and
 * messages; the version.
 */
#include <string.h>

#include <criterion/criterion.h>

#include <wakuwaku/wakuwaku.h>

Test(errors, codes_are_distinct_negative_and_named)
{
    int codes[] = {
#define X(name, value, msg) WK_##name,
        WK_STATUS_MAP(X)
#undef X
    };
    size_t n = sizeof(codes) / sizeof(codes[0]);
    cr_assert_geq(n, 10);
    for (size_t i = 0; i < n; i++) {
        cr_assert_lt(codes[i], 0);
        cr_assert_str_neq(wk_strerror(codes[i]), "unknown status");
        cr_assert_eq(strncmp(wk_err_name(codes[i]), "WK_E", 4), 0);
        for (size_t j = i + 1; j < n; j++)
            cr_assert_neq(codes[i], codes[j]);
    }
    cr_assert_str_eq(wk_err_name(WK_EDENIED), "WK_EDENIED");
    cr_assert_str_eq(wk_err_name(WK_OK), "WK_OK");
    cr_assert_str_eq(wk_strerror(12345), "unknown status");
    cr_assert_str_eq(wk_err_name(12345), "WK_E?");
}

Test(errors, version_matches_headers)
{
    cr_assert_str_eq(wk_version(), WK_VERSION_STRING);
    cr_assert_eq(wk_version_number(), WK_VERSION_NUMBER);
}
