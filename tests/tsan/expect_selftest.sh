#!/bin/bash
# tests/tsan/expect_selftest.sh SELFTEST — runs the runner's self-test
# (tests/tsan/selftest.c) and checks every verdict, the output that shows
# how each test ended, the synthesis line and the exit status.
set -uo pipefail
out=$("$1" --jobs=2 -S 2>&1)
status=$?
printf '%s\n' "$out"
bad=0
has() {
    grep -qE -- "$1" <<<"$out" || { echo "expect_selftest: missing: $1" >&2; bad=1; }
}
lacks() {
    ! grep -qE -- "$1" <<<"$out" || { echo "expect_selftest: unexpected: $1" >&2; bad=1; }
}
has '^\[PASS\] opts::suite_init_runs_in_the_test_process: \('
has '^\[FAIL\] opts::suite_timeout_kills: Timed out after 1 s, killed\.'
has '^\[PASS\] opts::test_timeout_beats_the_suite_s: \('
has '^\[PASS\] pass::checks_that_hold: \('
has '^\[----\] logged info$'
has '^\[PASS\] pass::expected_exit_code: \('
has '^\[PASS\] pass::expected_signal: \('
has '^\[FAIL\] fail::assert_with_message: \('
has '^\[----\] selftest\.c:[0-9]+: Assertion Failed$'
has '^\[----\]   The expression \(rc\) == \(1\) is false\.$'
has '^\[----\]   rc was 2$'
lacks 'selftest: not reached'
has '^\[FAIL\] fail::str_eq_shows_both_strings: \('
has '^\[----\]   actual: "left" and "right"$'
has '^\[FAIL\] fail::expect_goes_on: \('
has '^selftest: after the expect$'
has '^\[FAIL\] fail::assert_fail: \('
has '^\[----\]   gave up after 3 tries$'
has '^\[FAIL\] fail::assert_in_another_thread: \('
has '^\[----\]   from a thread$'
has '^\[FAIL\] fail::assert_in_a_forked_child: \('
has '^selftest: child exited with 1$'
has '^\[FAIL\] fail::init_fails_body_skipped_fini_runs: \('
has '^\[----\]   init failed$'
lacks 'selftest: body of init_fails ran'
[ "$(grep -c '^selftest: fini ran$' <<<"$out")" -eq 2 ] ||
    { echo "expect_selftest: .fini did not run exactly twice" >&2; bad=1; }
has '^\[FAIL\] crash::segfault: CRASH! '
has '^\[FAIL\] crash::unexpected_exit_code: CRASH! exited with status 3\.'
has '^\[FAIL\] crash::signal_expected_but_exited: exited with status 0, expected signal 6\.'
has '^\[SKIP\] skip::skipped_from_the_body: \('
has '^\[----\] Skipped: not on this machine$'
has '^\[SKIP\] skip::disabled: Test is disabled$'
has '^\[====\] Synthesis: Tested: 17 \| Passing: 5 \| Failing: 11 \| Crashing: 2 \| Skipped: 2$'
[ "$status" -eq 1 ] || { echo "expect_selftest: exit status $status, expected 1" >&2; bad=1; }
[ "$bad" -eq 0 ] && echo "expect_selftest: the runner behaves as specified"
exit "$bad"
