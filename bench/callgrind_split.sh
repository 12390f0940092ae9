#!/bin/bash
# bench/callgrind_split.sh — instructions per sequential lock cycle
# (try + release), split into library / hiredis / libc / libsodium, counted
# by valgrind's callgrind. Instruction counts do not depend on machine load.
#
# Two runs (N1 and N2 cycles) are subtracted, so start-up and connection
# set-up cancel out: per cycle = (count(N2) - count(N1)) / (N2 - N1).
#
#   bench/callgrind_split.sh build/bench/bench_redis redis://127.0.0.1:PORT
set -euo pipefail
bin=${1:?usage: callgrind_split.sh path/to/bench_redis redis://host:port}
url=${2:?usage: callgrind_split.sh path/to/bench_redis redis://host:port}
n1=200
n2=1200
out=$(mktemp -d /tmp/wk-callgrind-XXXXXX)
trap 'rm -rf "$out"' EXIT

split() { # callgrind file → "library hiredis libc sodium other"
    callgrind_annotate --inclusive=no --auto=no --threshold=100 "$1" 2>/dev/null | awk '
        /^ *[0-9,]+ .*\[/ {
            n = $1; gsub(",", "", n)
            obj = $NF
            if (obj ~ /libhiredis/) h += n
            else if (obj ~ /libc\.so|libm\.so/) c += n
            else if (obj ~ /libsodium/) s += n
            else if (obj ~ /bench_redis/ && $0 ~ /(core|collection|entity|capability)\/[a-z_0-9]+\.c:/) l += n
            else o += n
        }
        END { printf "%d %d %d %d %d\n", l, h, c, s, o }'
}

for n in $n1 $n2; do
    valgrind --tool=callgrind --callgrind-out-file="$out/cg.$n" "$bin" --url "$url" --callgrind "$n" \
        >/dev/null 2>&1
done
read -r l1 h1 c1 s1 o1 < <(split "$out/cg.$n1")
read -r l2 h2 c2 s2 o2 < <(split "$out/cg.$n2")
d=$((n2 - n1))
printf '| part | instructions per lock cycle |\n|---|---|\n'
printf '| library (core/, collection/, …) | %d |\n' $(((l2 - l1) / d))
printf '| hiredis | %d |\n' $(((h2 - h1) / d))
printf '| libc (malloc, memcpy, syscall wrappers) | %d |\n' $(((c2 - c1) / d))
printf '| libsodium (random token) | %d |\n' $(((s2 - s1) / d))
printf '| other (benchmark loop, loader) | %d |\n' $(((o2 - o1) / d))
