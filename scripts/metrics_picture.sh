#!/bin/bash
# scripts/metrics_picture.sh — docs/operating.md's metrics picture from a real run:
# examples/metrics_storm scrapes the metrics text every 100 ms during a
# lock storm (8 threads, 2 locks, a pool of 4) against a redis-server
# started here on a free 127.0.0.1 port; the server is stopped (by pid) at
# 6 s and started again on the same port at 8 s; gnuplot plots the main
# series to docs/img/metrics-storm.png.
#
#   scripts/metrics_picture.sh [OUT.png]     (installs gnuplot-nox if missing)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-docs/img/metrics-storm.png}
command -v gnuplot >/dev/null || { apt-get update -qq && apt-get install -y -qq gnuplot-nox >/dev/null; }
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j2 --target wk_metrics_storm >/dev/null

work=$(mktemp -d /tmp/wk-picture-XXXXXX)
pid=""
cleanup() {
    if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT
source scripts/deps.sh
srv=$(wk_server_name) # valkey with WK_TEST_SERVER=valkey
start_server() {
    "$srv-server" --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" \
        --daemonize no --loglevel warning >>"$work/redis.log" 2>&1 &
    pid=$!
    for _ in $(seq 50); do
        "$srv-cli" -p "$port" ping >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    return 1
}
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
start_server

./build/examples/wk_metrics_storm "redis://127.0.0.1:$port" 14 >"$work/storm.tsv" &
storm=$!
sleep 6
kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""
sleep 2
start_server
wait "$storm"

mkdir -p "$(dirname "$out")"
gnuplot <<GP
set terminal pngcairo size 1000,700 font ",10"
set output "$out"
set multiplot layout 3,1 title "wakuwaku metrics, scraped every 100 ms: a lock storm, redis-server stopped at 6 s, back at 8 s"
set xlabel "seconds"
set grid
set xrange [0:14]
set key outside right
set ylabel "queries / s"
plot "$work/storm.tsv" using 1:2 with lines lw 2 title "lock queries ok", \
     "" using 1:3 with lines lw 2 title "failed"
set ylabel "callers"
plot "$work/storm.tsv" using 1:4 with steps lw 2 title "waiting for a lock", \
     "" using 1:6 with steps lw 2 title "pool connections in use"
set ylabel "count"
plot "$work/storm.tsv" using 1:5 with lines lw 2 title "handoffs / s", \
     "" using 1:(\$7*10) with steps lw 2 title "reconnects (x10)", \
     "" using 1:8 with steps lw 2 title "failed connects"
unset multiplot
GP
echo "wrote $out"
