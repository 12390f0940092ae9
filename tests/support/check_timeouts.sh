#!/bin/bash
# tests/support/check_timeouts.sh DIR — fail if a criterion suite under DIR
# gives its tests more than one .timeout value. criterion 2.4's runner
# leaks 48 bytes when tests with different timeouts run at once (--jobs=2),
# and LeakSanitizer then fails the sanitized run of that suite.
set -euo pipefail
status=0
for f in "$1"/*/test_*.c; do
    values=$( (grep -o '\.timeout = [0-9]*' "$f" || true) | sort -u | wc -l)
    if [ "$values" -gt 1 ]; then
        echo "$f: $values different .timeout values; use one per file" >&2
        status=1
    fi
done
exit $status
