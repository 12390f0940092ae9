#!/bin/bash
# scripts/demo.sh — install what is missing, build, and run the demo
# against $WK_REDIS_URL, or against a redis-server (valkey-server with
# WK_TEST_SERVER=valkey) started here on a free 127.0.0.1 port and stopped
# (by pid) afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
wk_install_deps
srv=$(wk_server_name)
[ "$srv" = redis ] || wk_install_valkey_deps
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" >/dev/null

server_pid=""
workdir=""
cleanup() {
    if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
    if [ -n "$workdir" ]; then rm -rf "$workdir"; fi
}
trap cleanup EXIT

if [ -z "${WK_REDIS_URL:-}" ]; then
    workdir=$(mktemp -d /tmp/wk-demo-XXXXXX)
    for attempt in 1 2 3 4 5 6 7 8 9 10; do
        port=$(( 20000 + RANDOM % 30000 ))
        "$srv-server" --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
            --dir "$workdir" --daemonize no --loglevel warning >"$workdir/redis.log" 2>&1 &
        server_pid=$!
        for i in $(seq 50); do
            if "$srv-cli" -p "$port" ping >/dev/null 2>&1; then break; fi
            if ! kill -0 "$server_pid" 2>/dev/null; then break; fi
            sleep 0.1
        done
        if "$srv-cli" -p "$port" ping >/dev/null 2>&1; then break; fi
        kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true
        server_pid=""
    done
    [ -n "$server_pid" ] || { echo "could not start $srv-server" >&2; exit 1; }
    export WK_REDIS_URL="redis://127.0.0.1:$port"
    echo "started $srv-server (pid $server_pid) at $WK_REDIS_URL"
fi
./build/examples/wk_billing_replicas "$WK_REDIS_URL"
