#!/bin/bash
# tests/scratch_kind/run.sh SOURCE_DIR CMAKE CC [SANITIZE] — docs/DESIGN.md's
# "Adding a new entity kind", done: a copy of the source tree gets a Counter
# (incr WRITE, get READ, an optional TTL) in exactly the three new files of
# HERE/counter/ (its header, its source, its test rows) and no other edit.
# Then, in that copy:
#
#   * the library, wk-codegen, wk and the suites below build with -Werror;
#   * codegen.codegen (the golden files, unchanged), capability.capability
#     (every query of every kind, the Counter's included, against every
#     grant), entity.entity and cxx.g++ (every initialiser as C++) pass;
#   * wk-codegen makes scratch_visits_incr/_get from HERE/schema.json, and
#     the accessors compile;
#   * wk lists the Counter's operations (help, help ENTITY) and runs them
#     against a redis-server of its own;
#   * a Counter whose test file lacks a row is refused: the registry's
#     start-up check aborts, naming the operation.
#
# SANITIZE (ON/OFF, default OFF) is the copy's WK_SANITIZE (an ASan build's).
# About 1.5 to 2.5 minutes on 2 cores: it builds only what it runs.
set -euo pipefail
src=$1 cmake=$2 cc=$3 sanitize=${4:-OFF}
here=$src/tests/scratch_kind
tmp=$(mktemp -d /tmp/wk-scratch-kind-XXXXXX)
redis_pid=
cleanup() {
    [ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "scratch kind: $*" >&2; exit 1; }
step() { echo "--- scratch kind: $*"; }

step "copy the tree and add the three files"
mkdir "$tmp/src"
tar -C "$src" --exclude='./build*' --exclude=./.git -cf - . | tar -C "$tmp/src" -xf -
files=$(cd "$here/counter" && find . -type f | sort)
[ "$(echo "$files" | wc -l)" -eq 3 ] || fail "the kind is not three files: $files"
for f in $files; do
    [ ! -e "$tmp/src/$f" ] || fail "$f exists already: the kind must add files, not edit them"
    cp "$here/counter/$f" "$tmp/src/$f"
done

step "configure and build"
targets=(wk-codegen wk test_codegen_codegen test_capability_capability test_entity_entity)
"$cmake" -S "$tmp/src" -B "$tmp/build" -DCMAKE_BUILD_TYPE=Debug -DWK_BUILD_BENCH=OFF \
    -DWK_BUILD_EXAMPLES=OFF -DCMAKE_C_COMPILER="$cc" -DWK_SANITIZE="$sanitize" -DWK_WERROR=ON \
    >"$tmp/configure.log" 2>&1 ||
    { cat "$tmp/configure.log" >&2; fail "configure failed"; }
grep -q "XX(COUNTER)" "$tmp/build/include/wakuwaku/kinds.h" ||
    fail "<wakuwaku/kinds.h> does not list the Counter"
"$cmake" --build "$tmp/build" -j2 --target "${targets[@]}" >"$tmp/build.log" 2>&1 ||
    { tail -40 "$tmp/build.log" >&2; fail "build failed"; }

step "the suites"
(cd "$tmp/build" && ctest --output-on-failure \
    -R '^(codegen\.codegen|capability\.capability|entity\.entity|cxx\.g\+\+)$') ||
    fail "a suite failed with the Counter"

step "generated accessors"
mkdir "$tmp/gen"
"$tmp/build/codegen/wk-codegen" "$here/schema.json" -o "$tmp/gen" || fail "wk-codegen failed"
for fn in "int scratch_visits_incr(" "int scratch_visits_get(" "int scratch_total_incr("; do
    grep -q "$fn" "$tmp/gen/scratch.h" || fail "scratch.h lacks $fn"
done
flags=()
[ "$sanitize" = ON ] && flags=(-fsanitize=address,undefined)
"$cc" "${flags[@]}" -std=c11 -Wall -Wextra -Werror -I"$tmp/src/include" -I"$tmp/build/include" \
    -c "$tmp/gen/scratch.c" -o "$tmp/gen/scratch.o" || fail "the generated accessors do not compile"

step "wk"
wk=$tmp/build/tools/wk/wk
"$wk" --help >"$tmp/help.txt" || fail "wk --help failed"
grep -q "^  Counter: *incr NAME BY; get NAME$" "$tmp/help.txt" ||
    { cat "$tmp/help.txt" >&2; fail "wk --help lacks the Counter's commands"; }
"$wk" --schema "$here/schema.json" help visits >"$tmp/help_visits.txt" ||
    fail "wk help visits failed"
for want in "visits: Counter" "visits incr NAME BY" "WRITE: add by" "visits get NAME" "READ: the value"; do
    grep -q "$want" "$tmp/help_visits.txt" ||
        { cat "$tmp/help_visits.txt" >&2; fail "wk help visits lacks \"$want\""; }
done
# A redis-server of its own on a free loopback port (nothing answers there).
for _ in $(seq 50); do
    port=$((20000 + RANDOM % 40000))
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || break
done
# shellcheck source=../../scripts/deps.sh
source "$src/scripts/deps.sh"
srv=$(wk_server_name) # valkey with WK_TEST_SERVER=valkey
"$srv-server" --bind 127.0.0.1 --port "$port" --save '' --appendonly no >"$tmp/redis.log" 2>&1 &
redis_pid=$!
for _ in $(seq 200); do
    "$srv-cli" -p "$port" ping >/dev/null 2>&1 && break
    sleep 0.05
done
"$srv-cli" -p "$port" ping >/dev/null 2>&1 || { cat "$tmp/redis.log" >&2; fail "no $srv-server"; }
url=redis://127.0.0.1:$port
"$wk" --url "$url" --schema "$here/schema.json" --as read-write visits incr home 5 >/dev/null ||
    fail "wk visits incr failed"
out=$("$wk" --url "$url" --schema "$here/schema.json" --as read-write --json visits incr home 2)
[ "$out" = '{"value":7}' ] || fail "wk visits incr home 2 printed $out, not {\"value\":7}"
out=$("$wk" --url "$url" --schema "$here/schema.json" visits get home)
[ "$out" = "value: 7" ] || fail "wk visits get home printed \"$out\", not \"value: 7\""
set +e
"$wk" --url "$url" --schema "$here/schema.json" --as viewer visits incr home 1 2>"$tmp/denied.txt"
status=$?
set -e
[ "$status" -eq 3 ] || fail "a read capability's incr exited $status, not 3 (refused)"

step "a kind that misses a row is refused"
sed -i -e '/WK_TEST_ROW(WK_KIND_COUNTER, counter, get/d' -e '/^static int q_counter_get/,/^}/d' \
    "$tmp/src/tests/kinds/counter.c"
"$cmake" --build "$tmp/build" -j2 --target test_capability_capability >"$tmp/build2.log" 2>&1 ||
    { tail -40 "$tmp/build2.log" >&2; fail "rebuild failed"; }
set +e
"$tmp/build/tests/test_capability_capability" >"$tmp/missing.txt" 2>&1
status=$?
set -e
[ "$status" -ne 0 ] || fail "the capability test passed with a row missing"
grep -q "operation counter.get of its op list has no row" "$tmp/missing.txt" ||
    { cat "$tmp/missing.txt" >&2; fail "the missing row was not named"; }
echo "scratch kind: the Counter took three files and no edit"
