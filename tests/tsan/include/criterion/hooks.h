/*
 * tests/tsan/include/criterion/hooks.h — criterion's report hooks, as far
 * as tests/support/redis_fixture.h uses them: ReportHook(PRE_ALL), run in
 * the runner process before the first test is forked (so what it sets up
 * is inherited by every test process), and ReportHook(POST_ALL), run there
 * after the last test ended. Any other hook kind fails to compile
 * (WK_SHIM_HOOK_ARG_<kind> is undefined) rather than being ignored.
 */
#ifndef WK_SHIM_CRITERION_HOOKS_H
#define WK_SHIM_CRITERION_HOOKS_H

#include <stddef.h>

#include "criterion.h"

/* Argument of PRE_ALL: the tests about to run. */
struct criterion_test_set {
    size_t tests;
};

/* Argument of POST_ALL: how they went. */
struct criterion_global_stats {
    size_t nb_tests;
    size_t tests_passed;
    size_t tests_failed;
    size_t tests_crashed;
    size_t tests_skipped;
};

enum wk_shim_hook_kind { WK_SHIM_PRE_ALL, WK_SHIM_POST_ALL };

/* Hooks of one kind run in registration order. */
void wk_shim_register_hook(enum wk_shim_hook_kind kind, void (*fn)(void *));

#define WK_SHIM_HOOK_ARG_PRE_ALL struct criterion_test_set *
#define WK_SHIM_HOOK_ARG_POST_ALL struct criterion_global_stats *

/* ReportHook(KIND)(parameter) { body } defines the hook function. */
#define ReportHook(kind)                                                                       \
    static void wk_shim_hook_##kind(WK_SHIM_HOOK_ARG_##kind);                                  \
    static void wk_shim_hook_call_##kind(void *arg)                                            \
    {                                                                                          \
        wk_shim_hook_##kind(arg);                                                              \
    }                                                                                          \
    __attribute__((constructor)) static void wk_shim_hook_register_##kind(void)               \
    {                                                                                          \
        wk_shim_register_hook(WK_SHIM_##kind, wk_shim_hook_call_##kind);                       \
    }                                                                                          \
    static void wk_shim_hook_##kind

#endif /* WK_SHIM_CRITERION_HOOKS_H */
