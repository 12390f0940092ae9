#!/bin/bash
# scripts/test.sh — install what is missing, build, and run the whole test
# suite against real redis-servers the tests start on free loopback ports
# (valkey-servers with WK_TEST_SERVER=valkey).
#
#   scripts/test.sh              normal build in build/
#   scripts/test.sh --sanitize   ASan + UBSan build in build-asan/
#   scripts/test.sh --tsan       ThreadSanitizer build in build-tsan/: the
#                                suites that start threads, on tests/tsan's
#                                runner (libcriterion cannot run under TSan)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
wk_install_deps
# WK_TEST_SERVER=valkey: the suites start valkey-server (tests/support).
[ "$(wk_server_name)" = redis ] || wk_install_valkey_deps

build=build
# WK_WERROR: a warning fails the project's own build (users' builds only
# print it).
flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DWK_WERROR=ON)
if [ "${1:-}" = "--sanitize" ]; then
    build=build-asan
    flags=(-DCMAKE_BUILD_TYPE=Debug -DWK_WERROR=ON -DWK_SANITIZE=ON)
    export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
    export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
elif [ "${1:-}" = "--tsan" ]; then
    build=build-tsan
    # TSAN_OPTIONS is set per test by tests/tsan/CMakeLists.txt.
    flags=(-DCMAKE_BUILD_TYPE=Debug -DWK_WERROR=ON -DWK_TSAN=ON -DWK_BUILD_BENCH=OFF
           -DWK_BUILD_EXAMPLES=OFF)
elif [ -n "${1:-}" ]; then
    echo "usage: scripts/test.sh [--sanitize | --tsan]" >&2
    exit 2
fi
cmake -S . -B "$build" "${flags[@]}" >/dev/null
cmake --build "$build" -j"$(nproc)"
run=()
if [ "$build" = build-tsan ]; then
    # TSan's fixed shadow layout does not fit kernels that randomise mmap
    # with more entropy (vm.mmap_rnd_bits above 28): then any instrumented
    # program aborts at start-up, and the tests run without ASLR.
    probe=$("$build/tests/tsan/wk_tsan_canary" --list 2>&1 || true)
    if grep -q "unexpected memory mapping" <<<"$probe"; then
        echo "ThreadSanitizer: unexpected memory mapping; running the tests under setarch -R" >&2
        run=(setarch "$(uname -m)" -R)
    fi
fi
"${run[@]}" ctest --test-dir "$build" --output-on-failure
