/*
 * tests/support/redis_fixture.h — include once in a suite that needs the
 * shared redis-server: starts it before all tests (in the runner process,
 * so every test process inherits WK_TEST_REDIS_URL) and stops it by pid
 * after. If WK_TEST_REDIS_URL is already set, that server is used.
 */
#ifndef WK_TEST_REDIS_FIXTURE_H
#define WK_TEST_REDIS_FIXTURE_H

#include <stdlib.h>

#include <criterion/criterion.h>
#include <criterion/hooks.h>

#include "support.h"

static wk_test_server wk_fixture_server;

ReportHook(PRE_ALL)(struct criterion_test_set *set)
{
    (void)set;
    if (getenv("WK_TEST_REDIS_URL"))
        return;
    if (wk_test_server_start(&wk_fixture_server, NULL) != 0) {
        fprintf(stderr, "cannot start redis-server for the tests\n");
        exit(1);
    }
    setenv("WK_TEST_REDIS_URL", wk_fixture_server.url, 1);
}

ReportHook(POST_ALL)(struct criterion_global_stats *stats)
{
    (void)stats;
    wk_test_server_stop(&wk_fixture_server);
}

#endif /* WK_TEST_REDIS_FIXTURE_H */
