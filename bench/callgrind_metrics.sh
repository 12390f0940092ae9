#!/bin/bash
# bench/callgrind_metrics.sh — instructions the metrics wrapper adds per
# query, counted by valgrind's callgrind (independent of machine load).
#
# bench_metrics runs N queries through a stub processor, unwrapped
# ("plain") and wrapped — custom queries, and a library operation built
# by the op runner; two runs of each (N1, N2) are subtracted so that
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
for mode in plain wrapped op-plain op-wrapped; do
    for n in $n1 $n2; do
        valgrind --tool=callgrind --callgrind-out-file="$out/cg.$mode.$n" "$bin" --callgrind "$n" \
            "$mode" >/dev/null 2>&1
        ir[$mode.$n]=$(total "$out/cg.$mode.$n")
    done
done
d=$((n2 - n1))
per() { echo $(((${ir[$1.$n2]} - ${ir[$1.$n1]}) / d)); }
plain=$(per plain) wrapped=$(per wrapped) op_plain=$(per op-plain) op_wrapped=$(per op-wrapped)
printf '| run | instructions per query |\n|---|---|\n'
printf '| custom query, unwrapped (stub processor, the loop) | %d |\n' "$plain"
printf '| custom query, wrapped by wk_metrics | %d |\n' "$wrapped"
printf '| **custom query: metrics overhead** | **%d** |\n' $((wrapped - plain))
printf '| lock.inspect (op runner), unwrapped | %d |\n' "$op_plain"
printf '| lock.inspect (op runner), wrapped by wk_metrics | %d |\n' "$op_wrapped"
printf '| **library operation: metrics overhead** | **%d** |\n' $((op_wrapped - op_plain))
