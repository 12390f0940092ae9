/*
 * tests/tsan/selftest.c — the runner's own behaviour, one test per rule of
 * tests/tsan/runner.c's banner: verdicts for passing, failing, crashing,
 * timed-out, skipped and disabled tests; .fini after a failed assertion;
 * failures counted from another thread and from a forked process; suite
 * options. Most of these tests are meant to fail: tests/tsan/expect_selftest.sh
 * checks each verdict and the synthesis line. Not named test_*.c, so the
 * criterion build never picks it up.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <criterion/hooks.h>

static int suite_inits;

static void count_suite_init(void)
{
    suite_inits++;
}

static void say_fini(void)
{
    fprintf(stderr, "selftest: fini ran\n");
}

static void failing_init(void)
{
    cr_assert(0, "init failed");
}

TestSuite(opts, .init = count_suite_init, .timeout = 1);

Test(opts, suite_init_runs_in_the_test_process)
{
    cr_assert_eq(suite_inits, 1, "suite .init ran %d times", suite_inits);
}

Test(opts, suite_timeout_kills)
{
    sleep(60);
}

/* Outlives the suite's 1 s, far inside its own timeout. */
Test(opts, test_timeout_beats_the_suite_s, .timeout = 120)
{
    sleep(3);
}

Test(pass, checks_that_hold)
{
    const char *s = "abc";
    cr_assert(1);
    cr_assert_not(0);
    cr_assert_eq(2, 2);
    cr_assert_neq(2, 3);
    cr_assert_lt(2, 3);
    cr_assert_leq(3, 3);
    cr_assert_gt(3, 2);
    cr_assert_geq(3, 3);
    cr_assert_null(NULL);
    cr_assert_not_null(s);
    cr_assert_str_eq(s, "abc");
    cr_assert_str_neq(s, "abd");
    cr_assert_str_empty("");
    cr_assert_arr_eq(s, "abc", 3);
    cr_expect(1, "with a message %d", 1);
    cr_log_info("logged %s", "info");
}

Test(pass, expected_exit_code, .exit_code = 3)
{
    exit(3);
}

Test(pass, expected_signal, .signal = SIGABRT)
{
    abort();
}

Test(fail, assert_with_message, .fini = say_fini)
{
    int rc = 2;
    cr_assert_eq(rc, 1, "rc was %d", rc);
    fprintf(stderr, "selftest: not reached\n");
}

Test(fail, str_eq_shows_both_strings)
{
    cr_assert_str_eq("left", "right");
}

Test(fail, expect_goes_on)
{
    cr_expect_eq(1, 2);
    fprintf(stderr, "selftest: after the expect\n");
}

Test(fail, assert_fail)
{
    cr_assert_fail("gave up after %d tries", 3);
}

static void *fail_in_thread(void *arg)
{
    (void)arg;
    cr_assert(0, "from a thread");
    return NULL;
}

Test(fail, assert_in_another_thread)
{
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, fail_in_thread, NULL), 0);
    pthread_join(t, NULL);
    sleep(30); /* not reached: the failure ended the process */
}

Test(fail, assert_in_a_forked_child)
{
    pid_t kid = fork();
    cr_assert_geq(kid, 0);
    if (kid == 0) {
        cr_assert(0, "from a child");
        _exit(0);
    }
    int status;
    waitpid(kid, &status, 0);
    fprintf(stderr, "selftest: child exited with %d\n", WEXITSTATUS(status));
}

Test(fail, init_fails_body_skipped_fini_runs, .init = failing_init, .fini = say_fini)
{
    fprintf(stderr, "selftest: body of init_fails ran\n");
}

Test(crash, segfault)
{
    raise(SIGSEGV);
}

Test(crash, unexpected_exit_code)
{
    exit(3);
}

Test(crash, signal_expected_but_exited, .signal = SIGABRT)
{
}

Test(skip, skipped_from_the_body)
{
    cr_skip_test("not on %s", "this machine");
}

Test(skip, disabled, .disabled = true)
{
    abort();
}
