#!/bin/bash
# bench/callgrind_metrics.sh — instructions the metrics wrapper adds per
# query, counted by valgrind's callgrind (independent of machine load).
#
# bench_metrics runs N queries through a stub processor, unwrapped
# ("plain") and wrapped; two runs of each (N1, N2) are subtracted so that
# start-up cancels out:
#   per query = (Ir(N2) - Ir(N1)) / (N2 - N1), wrapped minus plain.
#
#   bench/callgrind_metrics.sh build/bench/bench_metrics
set -euo pipefail
bin=${1:?usage: callgrind_metrics.sh path/to/bench_metrics}
n1=2000
n2=12000
out=$(mktemp -d /tmp/wk-callgrind-metrics-XXXXXX)
trap 'rm -rf "$out"' EXIT

total() { # callgrind output file → total instructions
    awk '/^(summary|totals):/ { print $2; exit }' "$1"
}

declare -A ir
for mode in plain wrapped; do
    for n in $n1 $n2; do
        valgrind --tool=callgrind --callgrind-out-file="$out/cg.$mode.$n" "$bin" --callgrind "$n" \
            "$mode" >/dev/null 2>&1
        ir[$mode.$n]=$(total "$out/cg.$mode.$n")
    done
done
d=$((n2 - n1))
plain=$(((${ir[plain.$n2]} - ${ir[plain.$n1]}) / d))
wrapped=$(((${ir[wrapped.$n2]} - ${ir[wrapped.$n1]}) / d))
printf '| run | instructions per query |\n|---|---|\n'
printf '| unwrapped (stub processor, the loop) | %d |\n' "$plain"
printf '| wrapped by wk_metrics | %d |\n' "$wrapped"
printf '| metrics overhead | %d |\n' $((wrapped - plain))
