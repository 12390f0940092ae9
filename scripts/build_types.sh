#!/bin/bash
# scripts/build_types.sh — build the library, wk-codegen, wk and the
# examples in the build types scripts/test.sh does not build, with
# warnings as errors (WK_WERROR), so that no build type or compiler a user
# picks meets a warning: CMake's four build types with gcc, RelWithDebInfo
# also with clang. Builds only; no test runs. Each build is in
# build-types/<compiler>-<type>/.
#
#   scripts/build_types.sh                 the CI set: gcc Release and
#                                          MinSizeRel, clang RelWithDebInfo
#                                          (gcc RelWithDebInfo and Debug are
#                                          test.sh's normal and sanitizer
#                                          builds, -Werror too)
#   scripts/build_types.sh --all           every type with both compilers
#   scripts/build_types.sh CC:TYPE ...     the builds named (gcc:Release)
#
# WK_BUILD_TYPES_EXTRA: more -D options for every build (-DWK_BUILD_TESTS=ON
# -DWK_BUILD_BENCH=ON checks the suites and benchmarks too).
set -euo pipefail
cd "$(dirname "$0")/.."
builds=(gcc:Release gcc:MinSizeRel clang:RelWithDebInfo)
if [ "${1:-}" = "--all" ]; then
    builds=()
    for cc in gcc clang; do
        for type in Debug Release RelWithDebInfo MinSizeRel; do builds+=("$cc:$type"); done
    done
elif [ $# -gt 0 ]; then
    builds=("$@")
fi
# shellcheck disable=SC2206 # word splitting is the point
extra=(${WK_BUILD_TYPES_EXTRA:-})
jobs=$(( $(nproc) < 2 ? $(nproc) : 2 ))
for b in "${builds[@]}"; do
    cc=${b%%:*} type=${b#*:}
    dir=build-types/$cc-$type
    start=$(date +%s)
    cmake -S . -B "$dir" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE="$type" -DWK_WERROR=ON \
        -DWK_BUILD_TESTS=OFF -DWK_BUILD_BENCH=OFF -DWK_BUILD_EXAMPLES=ON "${extra[@]}" >/dev/null
    if ! cmake --build "$dir" -j"$jobs" >"$dir/build.log" 2>&1; then
        grep -E -B2 -A6 "(error|warning):" "$dir/build.log" | head -80 >&2
        echo "build-types: $cc $type failed (log: $dir/build.log)" >&2
        exit 1
    fi
    echo "build-types: $cc $type: warning-free in $(( $(date +%s) - start )) s"
done
