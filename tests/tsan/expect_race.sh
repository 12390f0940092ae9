#!/bin/bash
# tests/tsan/expect_race.sh CANARY — passes only if the ThreadSanitizer
# build catches the canary's deliberate data race (tests/tsan/canary.c):
# the runner must exit non-zero, the racy test must fail with a TSan report
# whose stacks are in canary.c, and the race-free test must pass.
set -uo pipefail
out=$("$1" --jobs=1 -S 2>&1)
status=$?
printf '%s\n' "$out"
fail() {
    echo "expect_race: $*" >&2
    exit 1
}
[ "$status" -ne 0 ] || fail "the runner exited 0: the race went unnoticed"
grep -q "WARNING: ThreadSanitizer: data race" <<<"$out" || fail "no ThreadSanitizer data race report"
grep -q "bump_plain .*canary.c" <<<"$out" || fail "the report does not point at bump_plain in canary.c"
grep -q "^\[FAIL\] canary::plain_int_increments_race: CRASH! exited with status 66" <<<"$out" ||
    fail "the racy test did not fail with TSan's exit status 66"
grep -q "^\[PASS\] canary::atomic_increments_do_not_race" <<<"$out" || fail "the race-free test did not pass"
echo "expect_race: the race was caught and failed its test"
