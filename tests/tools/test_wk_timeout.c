/*
 * tests/tools/test_wk_timeout.c — `wk --timeout MS` is one deadline for
 * the whole command (docs/operating.md, "wk"): against a server that trickles its
 * replies a byte at a time (tests/support/trickle_server.c), one that
 * never answers, and a stopped redis-server (SIGSTOP), the built CLI
 * exits with 4 (a connection error) within MS.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "support.h"

#define TIMEOUT_MS 500

/* How late the process may end after its deadline: the library's 50 ms
 * promise plus starting the process, loading the schema and being reaped
 * (none of which the deadline covers: it starts inside wk). As in
 * tests/core/test_deadlines.c, the assertion allows for a shared,
 * loaded machine (400 ms; an instrumented wk was seen 420 ms late at load
 * 8), far below the seconds the unfixed wk took (3113 ms); the lateness
 * seen is logged. WK_TEST_DEADLINE_MARGIN_MS overrides the library's
 * part. */
static int64_t margin_ms(void)
{
    const char *env = getenv("WK_TEST_DEADLINE_MARGIN_MS");
    if (env && *env)
        return atoi(env) + 50;
    return 400;
}

/* Run `wk … invoice inspect 1` against `url`; its exit status, and in
 * *took how long it ran. */
static int run_wk(const char *url, int64_t *took, char *err, size_t errlen)
{
    char errp[] = "/tmp/wk_timeout_errXXXXXX";
    int fd = mkstemp(errp);
    cr_assert_geq(fd, 0);
    close(fd);
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "'%s' --url '%s' --schema '%s' --timeout %d invoice inspect 1 >/dev/null 2>%s",
             WK_CLI_PATH, url, WK_BILLING_SCHEMA, TIMEOUT_MS, errp);
    int64_t t0 = wk_monotonic_ms();
    int st = system(cmd);
    *took = wk_monotonic_ms() - t0;
    FILE *f = fopen(errp, "r");
    size_t n = f ? fread(err, 1, errlen - 1, f) : 0;
    err[n] = '\0';
    if (f)
        fclose(f);
    unlink(errp);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void expect_in_time(const char *url, const char *what)
{
    int64_t took;
    char err[512];
    int st = run_wk(url, &took, err, sizeof(err));
    cr_assert_eq(st, 4, "%s: exit %d: %s", what, st, err);
    cr_log_info("%s: wk ended %lld ms after its timeout", what, (long long)(took - TIMEOUT_MS));
    cr_assert_leq(took, TIMEOUT_MS + margin_ms(), "%s: wk --timeout %d ran %lld ms: %s", what,
                  TIMEOUT_MS, (long long)took, err);
    cr_assert_null(strstr(err, "is it a Redis server"), "%s: %s", what, err);
}

Test(wk_timeout, a_trickling_handshake_ends_the_command_at_its_timeout, .timeout = 60)
{
    wk_test_trickle t;
    cr_assert_eq(wk_test_trickle_start(&t, WK_TEST_TRICKLE_ALL, 100), 0);
    expect_in_time(t.url, "trickled handshake");
    wk_test_trickle_stop(&t);
}

Test(wk_timeout, a_trickling_reply_ends_the_command_at_its_timeout, .timeout = 60)
{
    wk_test_trickle t;
    /* The handshake is answered at once; the query's reply trickles, and
     * the deadline counts from the start of the command, not the query. */
    cr_assert_eq(wk_test_trickle_start(&t, WK_TEST_TRICKLE_AFTER_HELLO, 100), 0);
    expect_in_time(t.url, "trickled reply");
    wk_test_trickle_stop(&t);
}

Test(wk_timeout, silence_and_a_stopped_server_end_the_command_at_its_timeout, .timeout = 60)
{
    wk_test_trickle t;
    cr_assert_eq(wk_test_trickle_start(&t, WK_TEST_TRICKLE_SILENT, 100), 0);
    expect_in_time(t.url, "silence");
    wk_test_trickle_stop(&t);

    wk_test_server s;
    cr_assert_eq(wk_test_server_start(&s, NULL), 0);
    kill(s.pid, SIGSTOP);
    expect_in_time(s.url, "stopped server");
    kill(s.pid, SIGCONT);
    wk_test_server_stop(&s);
}
